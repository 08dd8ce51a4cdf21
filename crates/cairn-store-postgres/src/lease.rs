//! Leases and blobs in PostgreSQL. Lease times are the server's (`now()`),
//! so instances' clocks need not agree.

use super::{PgStore, db};
use async_trait::async_trait;
use cairn_store::blob::check_key;
use cairn_store::{BlobStore, Lease, LeaseStore, StoreError};
use cairn_types::ids::SessionId;
use std::time::Duration;
use tokio_postgres::Row;

const LEASE_COLUMNS: &str = "session_id, holder, token,
    GREATEST(0, (EXTRACT(EPOCH FROM (expires_at - now())) * 1000))::BIGINT";

fn lease_of(row: &Row) -> Result<Lease, StoreError> {
    let session: &str = row.get(0);
    Ok(Lease {
        session: SessionId::from_key(session).map_err(|e| StoreError::Corrupt {
            path: "postgres:cairn_leases".into(),
            line: 0,
            reason: format!("{session:?}: {e}"),
        })?,
        holder: row.get(1),
        token: row.get::<_, i64>(2) as u64,
        expires_in_ms: row.get::<_, i64>(3) as u64,
    })
}

fn ms(ttl: Duration) -> f64 {
    ttl.as_secs_f64() * 1000.0
}

#[async_trait]
impl LeaseStore for PgStore {
    fn holder_id(&self) -> &str {
        &self.holder
    }

    async fn acquire(&self, session: &SessionId, ttl: Duration) -> Result<Lease, StoreError> {
        let client = self.client().await?;
        let ctx = format!("session {session}: taking its lease");
        // One statement: a free, expired or own lease is taken (the token
        // moves on unless this holder still holds it unexpired); a lease
        // another holder holds unexpired is left alone (no row back).
        let row = client
            .query_opt(
                &format!(
                    "INSERT INTO cairn_leases AS l (session_id, holder, token, expires_at)
                     VALUES ($1, $2, 1, now() + $3 * interval '1 millisecond')
                     ON CONFLICT (session_id) DO UPDATE SET
                        token = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > now()
                                     THEN l.token ELSE l.token + 1 END,
                        holder = EXCLUDED.holder,
                        expires_at = EXCLUDED.expires_at
                     WHERE l.holder = EXCLUDED.holder OR l.expires_at <= now()
                     RETURNING {LEASE_COLUMNS}"
                ),
                &[&session.as_str(), &self.holder, &ms(ttl)],
            )
            .await
            .map_err(db(ctx.clone()))?;
        match row {
            Some(row) => {
                let lease = lease_of(&row)?;
                self.set_token(session, Some(lease.token));
                Ok(lease)
            }
            None => match self.lease(session).await? {
                Some(held) => Err(StoreError::LeaseHeld {
                    session: session.clone(),
                    holder: held.holder,
                    expires_in_ms: held.expires_in_ms,
                }),
                // Released and deleted between the two statements: rare;
                // the caller asks again.
                None => Err(StoreError::Database {
                    context: ctx,
                    message: "the lease changed while it was taken; try again".into(),
                }),
            },
        }
    }

    async fn renew(
        &self,
        session: &SessionId,
        token: u64,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!(
                    "UPDATE cairn_leases SET expires_at = now() + $4 * interval '1 millisecond'
                     WHERE session_id = $1 AND holder = $2 AND token = $3
                     RETURNING {LEASE_COLUMNS}"
                ),
                &[&session.as_str(), &self.holder, &(token as i64), &ms(ttl)],
            )
            .await
            .map_err(db(format!("session {session}: renewing its lease")))?;
        match row {
            Some(row) => lease_of(&row),
            None => Err(StoreError::LeaseLost {
                session: session.clone(),
                token,
                now: match self.lease(session).await? {
                    Some(l) => l.to_string(),
                    None => "not leased".into(),
                },
            }),
        }
    }

    async fn release(&self, session: &SessionId, token: u64) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "UPDATE cairn_leases SET expires_at = now()
                 WHERE session_id = $1 AND holder = $2 AND token = $3",
                &[&session.as_str(), &self.holder, &(token as i64)],
            )
            .await
            .map_err(db(format!("session {session}: releasing its lease")))?;
        if self.token_of(session) == Some(token) {
            self.set_token(session, None);
        }
        Ok(())
    }

    async fn lease(&self, session: &SessionId) -> Result<Option<Lease>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!("SELECT {LEASE_COLUMNS} FROM cairn_leases WHERE session_id = $1"),
                &[&session.as_str()],
            )
            .await
            .map_err(db(format!("session {session}: reading its lease")))?;
        row.as_ref().map(lease_of).transpose()
    }

    async fn expired(&self, limit: usize) -> Result<Vec<Lease>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {LEASE_COLUMNS} FROM cairn_leases WHERE expires_at <= now()
                     ORDER BY session_id LIMIT $1"
                ),
                &[&i64::try_from(limit).unwrap_or(i64::MAX)],
            )
            .await
            .map_err(db("reading expired leases"))?;
        rows.iter().map(lease_of).collect()
    }
}

#[async_trait]
impl BlobStore for PgStore {
    async fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        check_key(key)?;
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO cairn_blobs (key, bytes) VALUES ($1, $2)
                 ON CONFLICT (key) DO UPDATE SET bytes = EXCLUDED.bytes",
                &[&key, &bytes],
            )
            .await
            .map_err(db(format!("blob {key}: write")))?;
        Ok(())
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        check_key(key)?;
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT bytes FROM cairn_blobs WHERE key = $1", &[&key])
            .await
            .map_err(db(format!("blob {key}: read")))?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        check_key(key)?;
        let client = self.client().await?;
        client
            .execute("DELETE FROM cairn_blobs WHERE key = $1", &[&key])
            .await
            .map_err(db(format!("blob {key}: remove")))?;
        Ok(())
    }

    async fn keys(&self, namespace: &str) -> Result<Vec<String>, StoreError> {
        check_key(&format!("{namespace}/x"))?;
        let client = self.client().await?;
        // Namespaces are [A-Za-z0-9._-]: `_` is LIKE's wildcard, so match
        // the prefix exactly instead.
        let prefix = format!("{namespace}/");
        let rows = client
            .query(
                "SELECT key FROM cairn_blobs WHERE left(key, length($1)) = $1 ORDER BY key",
                &[&prefix],
            )
            .await
            .map_err(db(format!("blobs {namespace}: list")))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}
