//! Who may write a session, when several instances share a store.
//!
//! A session's writer holds a lease: a row naming the holder instance, a
//! fencing token and an expiry. The token grows by one every time the lease
//! changes hands, never otherwise; a store that shares journals between
//! instances refuses an append whose writer's token is not the session's
//! current one, in the same transaction as the append. So a holder that
//! paused past its expiry, and whose lease another instance took, writes
//! nothing when it wakes: it learns `LeaseLost` and ends its runs.
//!
//! On the embedded file store the home lock (`cairn.lock`) is the authority
//! and there are no leases: one process writes a home.

use super::StoreError;
use async_trait::async_trait;
use cairn_types::ids::SessionId;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The default time a lease lasts unless renewed.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// A session's lease as a holder sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The session.
    pub session: SessionId,
    /// The instance holding it.
    pub holder: String,
    /// The fencing token: every append by this holder carries it.
    pub token: u64,
    /// How long until it expires unless renewed (0: expired).
    pub expires_in_ms: u64,
}

impl std::fmt::Display for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "token {} held by {} ({})",
            self.token,
            self.holder,
            match self.expires_in_ms {
                0 => "expired".to_string(),
                ms => format!("expires in {ms} ms"),
            }
        )
    }
}

/// Leases of sessions, shared by every instance on one store.
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// This instance's holder id.
    fn holder_id(&self) -> &str;

    /// Take the session's lease for `ttl`: when nobody holds it, or its
    /// holder's lease expired, with the next token; when this instance
    /// holds it, renewed with the same token. `LeaseHeld` when another
    /// instance holds it unexpired.
    async fn acquire(&self, session: &SessionId, ttl: Duration) -> Result<Lease, StoreError>;

    /// Extend a lease this instance holds with `token` by `ttl` from now.
    /// `LeaseLost` when the session's token is no longer `token` (the lease
    /// moved) — renewing an expired lease nobody took still succeeds: no
    /// other writer can have written.
    async fn renew(
        &self,
        session: &SessionId,
        token: u64,
        ttl: Duration,
    ) -> Result<Lease, StoreError>;

    /// Give a lease up (it expires now; the next holder gets the next
    /// token). Releasing a lease that moved is not an error.
    async fn release(&self, session: &SessionId, token: u64) -> Result<(), StoreError>;

    /// The session's lease as it stands (`None`: never leased).
    async fn lease(&self, session: &SessionId) -> Result<Option<Lease>, StoreError>;

    /// Leases that expired (their holders died or paused), at most `limit`:
    /// what a sweep claims.
    async fn expired(&self, limit: usize) -> Result<Vec<Lease>, StoreError>;
}

struct Row {
    holder: String,
    token: u64,
    expires: Instant,
}

/// Leases in memory, shared by the "instances" of one process (each a
/// [`MemoryLeases::instance`] view on the same table): for tests and for a
/// single process that wants the same code path.
#[derive(Clone)]
pub struct MemoryLeases {
    holder: String,
    rows: std::sync::Arc<Mutex<HashMap<SessionId, Row>>>,
}

impl MemoryLeases {
    /// An empty table, seen by holder `holder`.
    pub fn new(holder: &str) -> Self {
        MemoryLeases {
            holder: holder.to_string(),
            rows: Default::default(),
        }
    }

    /// Another holder's view of the same table.
    pub fn instance(&self, holder: &str) -> Self {
        MemoryLeases {
            holder: holder.to_string(),
            rows: self.rows.clone(),
        }
    }

    fn lease_of(session: &SessionId, row: &Row, now: Instant) -> Lease {
        Lease {
            session: session.clone(),
            holder: row.holder.clone(),
            token: row.token,
            expires_in_ms: row.expires.saturating_duration_since(now).as_millis() as u64,
        }
    }

    fn rows(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Row>> {
        self.rows.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl LeaseStore for MemoryLeases {
    fn holder_id(&self) -> &str {
        &self.holder
    }

    async fn acquire(&self, session: &SessionId, ttl: Duration) -> Result<Lease, StoreError> {
        let now = Instant::now();
        let mut rows = self.rows();
        let row = rows.entry(session.clone()).or_insert(Row {
            holder: self.holder.clone(),
            token: 0,
            expires: now,
        });
        if row.holder != self.holder && row.expires > now {
            return Err(StoreError::LeaseHeld {
                session: session.clone(),
                holder: row.holder.clone(),
                expires_in_ms: row.expires.duration_since(now).as_millis() as u64,
            });
        }
        // A fresh row, an expired one or one that moved: the next token.
        if row.token == 0 || row.holder != self.holder || row.expires <= now {
            row.token += 1;
        }
        row.holder = self.holder.clone();
        row.expires = now + ttl;
        Ok(Self::lease_of(session, row, now))
    }

    async fn renew(
        &self,
        session: &SessionId,
        token: u64,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        let now = Instant::now();
        let mut rows = self.rows();
        match rows.get_mut(session) {
            Some(row) if row.token == token && row.holder == self.holder => {
                row.expires = now + ttl;
                Ok(Self::lease_of(session, row, now))
            }
            other => Err(StoreError::LeaseLost {
                session: session.clone(),
                token,
                now: other
                    .map(|r| Self::lease_of(session, r, now).to_string())
                    .unwrap_or_else(|| "not leased".into()),
            }),
        }
    }

    async fn release(&self, session: &SessionId, token: u64) -> Result<(), StoreError> {
        let now = Instant::now();
        if let Some(row) = self.rows().get_mut(session)
            && row.token == token
            && row.holder == self.holder
        {
            row.expires = now;
        }
        Ok(())
    }

    async fn lease(&self, session: &SessionId) -> Result<Option<Lease>, StoreError> {
        let now = Instant::now();
        Ok(self
            .rows()
            .get(session)
            .map(|r| Self::lease_of(session, r, now)))
    }

    async fn expired(&self, limit: usize) -> Result<Vec<Lease>, StoreError> {
        let now = Instant::now();
        let rows = self.rows();
        let mut out: Vec<Lease> = rows
            .iter()
            .filter(|(_, r)| r.expires <= now)
            .map(|(s, r)| Self::lease_of(s, r, now))
            .collect();
        out.sort_by(|a, b| a.session.as_str().cmp(b.session.as_str()));
        out.truncate(limit);
        Ok(out)
    }
}
