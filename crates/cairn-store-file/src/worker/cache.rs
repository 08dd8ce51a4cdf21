//! The owner's copies of its settled workers' `worker.json` and
//! `metadata.json` (see [`Home::keep_settled`]): a run reads them several
//! times, and nobody but the owner writes them, so once read or written
//! they are answered from memory, and so is the worker a session was last
//! looked up to. A document as cached is what reading the bytes just
//! written would give; a worker being deleted is forgotten.

use super::*;
use std::collections::HashMap;

/// The cached documents of a home's settled workers.
#[derive(Default)]
pub(super) struct Documents {
    records: Mutex<HashMap<WorkerId, WorkerRecord>>,
    metadata: Mutex<HashMap<WorkerId, WorkerMetadata>>,
    /// Sessions and the settled workers that hold them, as looked up.
    sessions: Mutex<HashMap<SessionId, WorkerId>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Home {
    pub(super) fn cached_record(&self, id: WorkerId) -> Option<WorkerRecord> {
        match self.is_settled(id) {
            true => lock(&self.inner.documents.records).get(&id).cloned(),
            false => None,
        }
    }

    pub(super) fn cache_record(&self, id: WorkerId, record: WorkerRecord) {
        if self.is_settled(id) {
            lock(&self.inner.documents.records).insert(id, record);
        }
    }

    /// Cache what reading `bytes`, just written as `worker.json`, gives.
    pub(super) fn cache_written_record(&self, id: WorkerId, bytes: &[u8]) {
        match serde_json::from_slice::<WorkerRecord>(bytes) {
            Ok(mut record) => {
                record.version = WORKER_VERSION;
                self.cache_record(id, record);
            }
            Err(_) => self.forget_documents(id),
        }
    }

    pub(super) fn cached_metadata(&self, id: WorkerId) -> Option<WorkerMetadata> {
        match self.is_settled(id) {
            true => lock(&self.inner.documents.metadata).get(&id).cloned(),
            false => None,
        }
    }

    pub(super) fn cache_metadata(&self, id: WorkerId, meta: WorkerMetadata) {
        if self.is_settled(id) {
            lock(&self.inner.documents.metadata).insert(id, meta);
        }
    }

    /// Cache what reading `bytes`, just written as `metadata.json`, gives.
    pub(super) fn cache_written_metadata(&self, id: WorkerId, bytes: &[u8]) {
        match serde_json::from_slice::<WorkerMetadata>(bytes) {
            Ok(mut meta) => {
                meta.version = METADATA_VERSION;
                self.cache_metadata(id, meta);
            }
            Err(_) => self.forget_documents(id),
        }
    }

    /// The settled worker `session` was last looked up to.
    pub(super) fn cached_lookup(&self, session: &SessionId) -> Option<WorkerId> {
        let id = *lock(&self.inner.documents.sessions).get(session)?;
        self.is_settled(id).then_some(id)
    }

    pub(super) fn cache_lookup(&self, session: &SessionId, id: WorkerId) {
        if self.is_settled(id) {
            lock(&self.inner.documents.sessions).insert(session.clone(), id);
        }
    }

    pub(super) fn forget_documents(&self, id: WorkerId) {
        lock(&self.inner.documents.records).remove(&id);
        lock(&self.inner.documents.metadata).remove(&id);
    }
}
