//! Which sessions exist, as every instance sharing a store sees them: each
//! session's worker record (its id, workspace, binding, parent), and which
//! session a run belongs to.
//!
//! On the embedded file store the home is the catalog (the file store's `Home`:
//! `index/` and the worker aggregates). On a shared store the catalog's
//! rows are the truth, and each instance keeps, in its own home, a copy of
//! the workers it serves (its generation directories are where their
//! controllers run).

use super::StoreError;
use crate::records::WorkerRecord;
use async_trait::async_trait;
use cairn_types::ids::{RunId, SessionId};

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
