//! The shared catalog: which sessions exist (each with its worker's
//! record), which session a run belongs to, and which instances serve. An
//! instance keeps a copy of what it serves in its own home; these rows are
//! the truth every instance shares.

use super::{PgStore, db};
use async_trait::async_trait;
use cairn_store::records::WorkerRecord;
use cairn_store::{Catalog, StoreError};
use cairn_types::ids::{RunId, SessionId};

#[async_trait]
impl Catalog for PgStore {
    async fn publish(&self, record: &WorkerRecord) -> Result<bool, StoreError> {
        self.publish_worker(record).await
    }

    async fn record(&self, session: &SessionId) -> Result<Option<WorkerRecord>, StoreError> {
        self.worker_record(session).await
    }

    async fn bind(&self, session: &SessionId, digest: &str) -> Result<(), StoreError> {
        self.bind_worker(session, digest).await
    }

    async fn rebind(&self, session: &SessionId, digest: &str) -> Result<(), StoreError> {
        let client = self.client().await?;
        let n = client
            .execute(
                "UPDATE cairn_workers
                 SET record = jsonb_set(record::jsonb, '{component}', to_jsonb($2::TEXT))::TEXT
                 WHERE session_id = $1",
                &[&session.as_str(), &digest],
            )
            .await
            .map_err(db(format!(
                "session {session}: moving its worker to {digest}"
            )))?;
        if n == 0 {
            return Err(StoreError::UnknownSession(session.clone()));
        }
        Ok(())
    }

    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        self.catalog_sessions().await
    }

    async fn session_of_run(&self, run: RunId) -> Result<Option<SessionId>, StoreError> {
        self.run_session(run).await
    }

    async fn forget(&self, session: &SessionId) -> Result<(), StoreError> {
        self.delete_session(session).await
    }
}

/// A worker's catalog row (a session already there is left alone).
const INSERT_WORKER: &str = "INSERT INTO cairn_workers (session_id, worker_id, workspace, record)
     VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING";

/// A worker record as its catalog row holds it.
fn worker_json(record: &WorkerRecord) -> Result<String, StoreError> {
    serde_json::to_string(record).map_err(|e| StoreError::Database {
        context: format!("session {}: its worker record", record.session_id),
        message: e.to_string(),
    })
}

pub use cairn_store::Instance;

impl PgStore {
    /// Publish a new session's worker (after its journal exists). `false`:
    /// the session is already in the catalog.
    async fn publish_worker(&self, record: &WorkerRecord) -> Result<bool, StoreError> {
        let session = &record.session_id;
        let json = worker_json(record)?;
        let client = self.client().await?;
        let n = client
            .execute(
                INSERT_WORKER,
                &[
                    &session.as_str(),
                    &record.worker_id.to_string(),
                    &record.workspace,
                    &json,
                ],
            )
            .await
            .map_err(db(format!("session {session}: publishing its worker")))?;
        Ok(n == 1)
    }

    /// Publish a new session's worker when its workspace holds fewer than
    /// `quota` workers in the whole catalog (every instance's): counted and
    /// inserted under the workspace's advisory lock, so creations racing at
    /// several instances never pass the quota together. `Ok(Err(held))`:
    /// the workspace is at its quota; `Ok(Ok(false))`: the session exists.
    pub async fn publish_within(
        &self,
        record: &WorkerRecord,
        quota: usize,
    ) -> Result<Result<bool, u64>, StoreError> {
        let session = &record.session_id;
        let ctx = format!("session {session}: publishing its worker");
        let json = worker_json(record)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db(ctx.clone()))?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext('cairn-workers:' || $1))",
            &[&record.workspace],
        )
        .await
        .map_err(db(ctx.clone()))?;
        let held: i64 = tx
            .query_one(
                "SELECT count(*) FROM cairn_workers WHERE workspace = $1",
                &[&record.workspace],
            )
            .await
            .map_err(db(ctx.clone()))?
            .get(0);
        if held as u64 >= quota as u64 {
            return Ok(Err(held as u64));
        }
        let n = tx
            .execute(
                INSERT_WORKER,
                &[
                    &session.as_str(),
                    &record.worker_id.to_string(),
                    &record.workspace,
                    &json,
                ],
            )
            .await
            .map_err(db(ctx.clone()))?;
        tx.commit().await.map_err(db(ctx))?;
        Ok(Ok(n == 1))
    }

    /// Bind a session's worker to a component (an unbound one only).
    async fn bind_worker(&self, session: &SessionId, digest: &str) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "UPDATE cairn_workers
                 SET record = jsonb_set(record::jsonb, '{component}', to_jsonb($2::TEXT))::TEXT
                 WHERE session_id = $1 AND (record::jsonb -> 'component') IS NULL",
                &[&session.as_str(), &digest],
            )
            .await
            .map_err(db(format!("session {session}: binding its worker")))?;
        Ok(())
    }

    /// The worker record the catalog holds for `session`, as published.
    async fn worker_record(&self, session: &SessionId) -> Result<Option<WorkerRecord>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT record FROM cairn_workers WHERE session_id = $1",
                &[&session.as_str()],
            )
            .await
            .map_err(db(format!("session {session}: reading its worker")))?;
        row.map(|r| {
            serde_json::from_str::<WorkerRecord>(r.get::<_, &str>(0))
                .map(WorkerRecord::scoped)
                .map_err(|e| StoreError::Corrupt {
                    path: format!("postgres:cairn_workers/{session}").into(),
                    line: 1,
                    reason: e.to_string(),
                })
        })
        .transpose()
    }

    /// Every session in the catalog, oldest first.
    async fn catalog_sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT session_id FROM cairn_workers ORDER BY created_at, session_id",
                &[],
            )
            .await
            .map_err(db("listing the catalog"))?;
        Ok(rows
            .iter()
            .filter_map(|r| SessionId::from_key(r.get::<_, &str>(0)).ok())
            .collect())
    }

    /// The session a run belongs to (every run is indexed by the append
    /// that starts it).
    async fn run_session(&self, run: RunId) -> Result<Option<SessionId>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT session_id FROM cairn_run_sessions WHERE run_id = $1",
                &[&run.to_string()],
            )
            .await
            .map_err(db(format!("run {run}: finding its session")))?;
        Ok(row.and_then(|r| SessionId::from_key(r.get::<_, &str>(0)).ok()))
    }

    /// Remove a session from the shared store: its journal, runs,
    /// checkpoints, catalog row, run index and lease, in one transaction.
    async fn delete_session(&self, session: &SessionId) -> Result<(), StoreError> {
        let ctx = format!("session {session}: deleting it");
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db(ctx.clone()))?;
        for sql in [
            "DELETE FROM cairn_journals WHERE session_id = $1",
            "DELETE FROM cairn_leases WHERE session_id = $1",
        ] {
            tx.execute(sql, &[&session.as_str()])
                .await
                .map_err(db(ctx.clone()))?;
        }
        tx.commit().await.map_err(db(ctx))?;
        self.set_token(session, None);
        Ok(())
    }

    /// Clear what a creation that died before publishing left (a journal
    /// with no catalog row), once this instance holds the session's lease
    /// (so that creator's lease expired): the journal goes unless the
    /// session was published after all; with `release`, the lease too.
    /// `true`: an orphan was cleared.
    pub async fn drop_orphan(
        &self,
        session: &SessionId,
        release: bool,
    ) -> Result<bool, StoreError> {
        let Some(token) = self.token_of(session) else {
            return Ok(false);
        };
        let ctx = format!("session {session}: clearing a creation that never finished");
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db(ctx.clone()))?;
        let held = tx
            .query_opt(
                "SELECT 1 FROM cairn_leases WHERE session_id = $1 AND holder = $2 AND token = $3
                 FOR UPDATE",
                &[&session.as_str(), &self.holder, &(token as i64)],
            )
            .await
            .map_err(db(ctx.clone()))?;
        if held.is_none() {
            return Ok(false);
        }
        let dropped = tx
            .execute(
                "DELETE FROM cairn_journals j WHERE j.session_id = $1
                 AND NOT EXISTS (SELECT 1 FROM cairn_workers w WHERE w.session_id = $1)",
                &[&session.as_str()],
            )
            .await
            .map_err(db(ctx.clone()))?;
        if release {
            tx.execute(
                "DELETE FROM cairn_leases WHERE session_id = $1 AND holder = $2 AND token = $3",
                &[&session.as_str(), &self.holder, &(token as i64)],
            )
            .await
            .map_err(db(ctx.clone()))?;
        }
        tx.commit().await.map_err(db(ctx))?;
        if release {
            self.set_token(session, None);
        }
        Ok(dropped > 0)
    }

    /// Instances seen within `within` (their keepers re-register every
    /// third of the lease time), this one excluded.
    pub async fn live_instances(
        &self,
        within: std::time::Duration,
    ) -> Result<Vec<Instance>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT instance_id, url FROM cairn_instances
                 WHERE instance_id <> $1 AND seen_at > now() - $2 * interval '1 millisecond'
                 ORDER BY instance_id",
                &[&self.holder, &(within.as_secs_f64() * 1000.0)],
            )
            .await
            .map_err(db("listing instances"))?;
        Ok(rows
            .iter()
            .map(|r| Instance {
                id: r.get(0),
                url: r.get(1),
            })
            .collect())
    }

    /// Forget this instance (a clean stop).
    pub async fn unregister_instance(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "DELETE FROM cairn_instances WHERE instance_id = $1",
                &[&self.holder],
            )
            .await
            .map_err(db("unregistering this instance"))?;
        Ok(())
    }

    /// Stop carrying `session`'s lease token: this instance's appends to it
    /// are refused from now on (the lease row is left for a release).
    pub fn drop_token(&self, session: &SessionId) -> Option<u64> {
        let token = self.token_of(session);
        self.set_token(session, None);
        token
    }

    /// The lease token this instance carries for `session`, if any.
    pub fn token(&self, session: &SessionId) -> Option<u64> {
        self.token_of(session)
    }

    /// This instance's holder id.
    pub fn holder(&self) -> &str {
        &self.holder
    }
}
