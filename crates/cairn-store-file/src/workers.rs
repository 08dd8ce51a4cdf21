//! What an instance keeps of the workers it serves, on its own machine:
//! each worker's aggregate (its documents and its generation directories,
//! where its controllers run, seen by them as a cap-std `Dir`), and the
//! component bytes and workspace grants it runs them with.
//!
//! The home ([`Home`]) is the implementation: on the embedded store it is
//! also the catalog; on a shared store it holds this instance's copies of
//! the workers it serves, the shared [`super::Catalog`] being the truth.
//! The runtime names these traits, never the home.

use crate::worker::{Home, WorkerDir, WorkerEntry, WorkerError, WorkerRecord};
use cairn_types::ids::{SessionId, WorkerId};
use std::path::Path;

/// The workers laid out here.
pub trait Workers: Send + Sync + std::fmt::Debug + 'static {
    /// Where they are (for messages).
    fn path(&self) -> &Path;

    /// The worker holding `session`, when it is published here.
    fn lookup(&self, session: &SessionId) -> Result<Option<WorkerId>, WorkerError>;

    /// Every published worker.
    fn list_workers(&self) -> Result<Vec<WorkerId>, WorkerError>;

    /// A worker as a listing sees it (a problem instead of an error).
    fn worker_entry(&self, id: WorkerId) -> WorkerEntry;

    /// Lay out a new worker for `session`, invisible until it is published.
    fn create_worker(
        &self,
        session: &SessionId,
        component: Option<&str>,
        workspace: &str,
    ) -> Result<WorkerDir, WorkerError>;

    /// Lay out a new session's worker unsynced: the file store's first
    /// commit of its journal makes it durable and publishes it (served by
    /// this process meanwhile). Only beside the file store of this home.
    fn create_worker_unsynced(
        &self,
        session: &SessionId,
        component: Option<&str>,
        workspace: &str,
    ) -> Result<WorkerDir, WorkerError>;

    /// Like [`Workers::create_worker`], for a fork.
    fn create_worker_staged(
        &self,
        session: &SessionId,
        component: Option<&str>,
        workspace: &str,
    ) -> Result<WorkerDir, WorkerError>;

    /// Undo a creation that failed before it was published.
    fn discard_staged(&self, worker: &WorkerDir);

    /// Lay out, published, a worker another instance created.
    fn adopt_worker(&self, record: &WorkerRecord) -> Result<WorkerDir, WorkerError>;

    /// A published worker.
    fn open_worker(&self, id: WorkerId) -> Result<WorkerDir, WorkerError>;

    /// A worker, published or still staged.
    fn open_worker_any(&self, id: WorkerId) -> Result<WorkerDir, WorkerError>;

    /// Remove a worker and everything it holds here.
    fn delete_worker(&self, id: WorkerId, session: &SessionId) -> Result<(), WorkerError>;
}

/// Component bytes by digest, and which digests each workspace may run.
pub trait ComponentBytes: Send + Sync + 'static {
    /// Keep a component's bytes under its digest.
    fn put_component(&self, digest: &str, bytes: &[u8]) -> Result<(), WorkerError>;

    /// A component's bytes.
    fn component(&self, digest: &str) -> Option<Vec<u8>>;

    /// Every digest kept.
    fn component_digests(&self) -> Vec<String>;

    /// A component's size, without reading it.
    fn component_len(&self, digest: &str) -> Option<u64>;

    /// Let `workspace` run `digest`.
    fn grant_component(&self, workspace: &str, digest: &str) -> Result<(), WorkerError>;

    /// The digests `workspace` may run.
    fn granted(&self, workspace: &str) -> Vec<String>;

    /// Keep a bulk component update's report, replacing the last.
    fn put_update_report(&self, id: uuid::Uuid, bytes: &[u8]) -> Result<(), WorkerError>;

    /// A bulk component update's report.
    fn update_report(&self, id: uuid::Uuid) -> Option<Vec<u8>>;
}

impl Workers for Home {
    fn path(&self) -> &Path {
        Home::path(self)
    }
    fn lookup(&self, session: &SessionId) -> Result<Option<WorkerId>, WorkerError> {
        Home::lookup(self, session)
    }
    fn list_workers(&self) -> Result<Vec<WorkerId>, WorkerError> {
        Home::list_workers(self)
    }
    fn worker_entry(&self, id: WorkerId) -> WorkerEntry {
        Home::worker_entry(self, id)
    }
    fn create_worker(
        &self,
        session: &SessionId,
        component: Option<&str>,
        workspace: &str,
    ) -> Result<WorkerDir, WorkerError> {
        Home::create_worker(self, session, component, workspace)
    }
    fn create_worker_unsynced(
        &self,
        session: &SessionId,
        component: Option<&str>,
        workspace: &str,
    ) -> Result<WorkerDir, WorkerError> {
        Home::create_worker_unsynced(self, session, component, workspace)
    }
    fn create_worker_staged(
        &self,
        session: &SessionId,
        component: Option<&str>,
        workspace: &str,
    ) -> Result<WorkerDir, WorkerError> {
        Home::create_worker_staged(self, session, component, workspace)
    }
    fn discard_staged(&self, worker: &WorkerDir) {
        Home::discard_staged(self, worker)
    }
    fn adopt_worker(&self, record: &WorkerRecord) -> Result<WorkerDir, WorkerError> {
        Home::adopt_worker(self, record)
    }
    fn open_worker(&self, id: WorkerId) -> Result<WorkerDir, WorkerError> {
        Home::open_worker(self, id)
    }
    fn open_worker_any(&self, id: WorkerId) -> Result<WorkerDir, WorkerError> {
        Home::open_worker_any(self, id)
    }
    fn delete_worker(&self, id: WorkerId, session: &SessionId) -> Result<(), WorkerError> {
        Home::delete_worker(self, id, session)
    }
}

impl ComponentBytes for Home {
    fn put_component(&self, digest: &str, bytes: &[u8]) -> Result<(), WorkerError> {
        Home::put_component(self, digest, bytes)
    }
    fn component(&self, digest: &str) -> Option<Vec<u8>> {
        Home::component(self, digest)
    }
    fn component_digests(&self) -> Vec<String> {
        Home::component_digests(self)
    }
    fn component_len(&self, digest: &str) -> Option<u64> {
        Home::component_len(self, digest)
    }
    fn grant_component(&self, workspace: &str, digest: &str) -> Result<(), WorkerError> {
        Home::grant_component(self, workspace, digest)
    }
    fn granted(&self, workspace: &str) -> Vec<String> {
        Home::granted(self, workspace)
    }
    fn put_update_report(&self, id: uuid::Uuid, bytes: &[u8]) -> Result<(), WorkerError> {
        Home::put_update_report(self, id, bytes)
    }
    fn update_report(&self, id: uuid::Uuid) -> Option<Vec<u8>> {
        Home::update_report(self, id)
    }
}
