//! The home as a [`Catalog`]: `worker.json` is the catalog's authority.

use crate::worker::{Home, WorkerRecord};
use async_trait::async_trait;
use cairn_store::{Catalog, StoreError};
use cairn_types::ids::{RunId, SessionId};

fn worker_err(e: crate::worker::WorkerError) -> StoreError {
    StoreError::from(e)
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
        worker.rebind(digest).map_err(worker_err)
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
