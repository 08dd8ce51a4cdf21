//! Which sessions exist, as every instance sharing a store sees them: each
//! session's worker record (its id, workspace, binding, parent), and which
//! session a run belongs to.
//!
//! On the embedded file store the home is the catalog ([`crate::worker::Home`]:
//! `index/` and the worker aggregates). On a shared store the catalog's
//! rows are the truth, and each instance keeps, in its own home, a copy of
//! the workers it serves (its generation directories are where their
//! controllers run).

use super::StoreError;
use crate::ids::{RunId, SessionId};
use crate::worker::{Home, WorkerRecord};
use async_trait::async_trait;

/// The catalog of sessions.
#[async_trait]
pub trait Catalog: Send + Sync + 'static {
    /// Publish a session's worker. `false`: the session is there already
    /// (nothing changes).
    async fn publish(&self, record: &WorkerRecord) -> Result<bool, StoreError>;

    /// The worker record of `session`, as published (and bound since).
    async fn record(&self, session: &SessionId) -> Result<Option<WorkerRecord>, StoreError>;

    /// Bind an unbound worker to a component digest (a bound one keeps its
    /// binding).
    async fn bind(&self, session: &SessionId, digest: &str) -> Result<(), StoreError>;

    /// Move a session's worker to another component (a component update,
    /// journaled in its session first).
    async fn rebind(&self, session: &SessionId, digest: &str) -> Result<(), StoreError>;

    /// Every session, oldest first.
    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError>;

    /// The session a run belongs to, when the catalog indexes runs (`None`
    /// from the file catalog: the runtime's run index, built from the
    /// journals, answers there).
    async fn session_of_run(&self, run: RunId) -> Result<Option<SessionId>, StoreError>;

    /// Remove a session and everything the store holds of it. Removing
    /// one that is not there is not an error.
    async fn forget(&self, session: &SessionId) -> Result<(), StoreError>;
}

fn worker_err(e: crate::worker::WorkerError) -> StoreError {
    StoreError::Worker(e)
}

#[async_trait]
impl Catalog for Home {
    async fn publish(&self, record: &WorkerRecord) -> Result<bool, StoreError> {
        if self
            .lookup(&record.session_id)
            .map_err(worker_err)?
            .is_some()
        {
            return Ok(false);
        }
        self.adopt_worker(record).map_err(worker_err)?;
        Ok(true)
    }

    async fn record(&self, session: &SessionId) -> Result<Option<WorkerRecord>, StoreError> {
        match self.lookup(session).map_err(worker_err)? {
            Some(id) => Ok(Some(
                self.open_worker(id)
                    .and_then(|w| w.record())
                    .map_err(worker_err)?,
            )),
            None => Ok(None),
        }
    }

    async fn bind(&self, session: &SessionId, digest: &str) -> Result<(), StoreError> {
        let id = self
            .lookup(session)
            .map_err(worker_err)?
            .ok_or_else(|| StoreError::UnknownSession(session.clone()))?;
        let worker = self.open_worker(id).map_err(worker_err)?;
        let record = worker.record().map_err(worker_err)?;
        worker
            .record_generation(record.last_generation, Some(digest))
            .map_err(worker_err)
    }

    async fn rebind(&self, session: &SessionId, digest: &str) -> Result<(), StoreError> {
        let id = self
            .lookup(session)
            .map_err(worker_err)?
            .ok_or_else(|| StoreError::UnknownSession(session.clone()))?;
        let worker = self.open_worker(id).map_err(worker_err)?;
        crate::runtime::update::rebind(&worker, digest).map_err(worker_err)
    }

    async fn sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        let mut out: Vec<(u64, SessionId)> = Vec::new();
        for id in self.list_workers().map_err(worker_err)? {
            if let Ok(record) = self.open_worker(id).and_then(|w| w.record()) {
                out.push((record.created_at_ms, record.session_id));
            }
        }
        out.sort();
        Ok(out.into_iter().map(|(_, s)| s).collect())
    }

    async fn session_of_run(&self, _run: RunId) -> Result<Option<SessionId>, StoreError> {
        Ok(None)
    }

    async fn forget(&self, session: &SessionId) -> Result<(), StoreError> {
        match self.lookup(session).map_err(worker_err)? {
            Some(id) => self.delete_worker(id, session).map_err(worker_err),
            None => Ok(()),
        }
    }
}
