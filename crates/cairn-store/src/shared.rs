//! A store several instances share (`[store] url`): every store trait, plus
//! what the instances need of each other — a registry of who serves where,
//! the lease tokens this instance carries, and a relay that follows the
//! sessions another instance writes. The runtime names only these traits;
//! an implementation (cairn-store-postgres) is registered with
//! cairn-runtime's `RuntimeBuilder::shared_store`.

use super::{BlobStore, Catalog, JournalItem, LeaseStore, RunIndex, Store, StoreError};
use crate::records::WorkerRecord;
use async_trait::async_trait;
use cairn_types::ids::{Seq, SessionId};
use std::sync::Arc;
use std::time::Duration;

/// Another instance on the shared store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// Its holder id.
    pub id: String,
    /// Where it serves.
    pub url: String,
}

/// Who serves where: the instances on one shared store.
#[async_trait]
pub trait InstanceRegistry: Send + Sync {
    /// This instance's holder id.
    fn holder(&self) -> &str;
    /// Register (or refresh) this instance at `url`.
    async fn register_instance(&self, url: &str) -> Result<(), StoreError>;
    /// Register under this instance's name, refused when another live
    /// instance (seen within `within`) uses it.
    async fn claim_instance(&self, url: &str, within: Duration) -> Result<(), StoreError>;
    /// Where instance `holder` serves, if it is registered.
    async fn instance_url(&self, holder: &str) -> Result<Option<String>, StoreError>;
    /// Instances seen within `within`, this one excluded.
    async fn live_instances(&self, within: Duration) -> Result<Vec<Instance>, StoreError>;
    /// Forget this instance (a clean stop).
    async fn unregister_instance(&self) -> Result<(), StoreError>;
}

/// A follower of one session's committed entries, in seq order, each once.
#[async_trait]
pub trait RelayFollower: Send {
    /// The last seq delivered.
    fn cursor(&self) -> Seq;
    /// The next committed entry after the cursor, waiting for one.
    async fn next(&mut self) -> Result<JournalItem, StoreError>;
}

/// Follows sessions another instance writes.
pub trait Relay: Send + Sync {
    /// Follow `session` from after `after`.
    fn follow(&self, session: &SessionId, after: Seq) -> Box<dyn RelayFollower>;
    /// Notifications heard since the start (for metrics and tests).
    fn heard(&self) -> u64;
}

/// A store several instances share.
#[async_trait]
pub trait SharedStore:
    Store + RunIndex + Catalog + LeaseStore + BlobStore + InstanceRegistry + Send + Sync
{
    /// The lease token this instance carries for `session`, if any.
    fn token(&self, session: &SessionId) -> Option<u64>;
    /// Stop carrying `session`'s lease token: this instance's appends to it
    /// are refused from now on.
    fn drop_token(&self, session: &SessionId) -> Option<u64>;
    /// Publish a new session's worker when its workspace holds fewer than
    /// `quota` workers in the whole catalog (every instance's), atomically
    /// against creations at other instances. `Ok(Err(held))`: the workspace
    /// is at its quota; `Ok(Ok(false))`: the session exists.
    async fn publish_within(
        &self,
        record: &WorkerRecord,
        quota: usize,
    ) -> Result<Result<bool, u64>, StoreError>;
    /// Clear what a creation that died before publishing left, once this
    /// instance holds the session's lease; with `release`, the lease too.
    /// `true`: an orphan was cleared.
    async fn drop_orphan(&self, session: &SessionId, release: bool) -> Result<bool, StoreError>;
    /// Start the relay of this instance.
    fn relay(self: Arc<Self>) -> Box<dyn Relay>;
}

/// Opens a shared store from its URL (`[store] url`) for one instance.
#[async_trait]
pub trait SharedStoreConnector: Send + Sync {
    /// Whether this connector opens `url` (by its scheme).
    fn accepts(&self, url: &str) -> bool;
    /// Connect as instance `instance`. A write of acknowledged work (an
    /// append, a run's end, a checkpoint) that meets the store unreachable
    /// waits up to `outage_budget` for it to come back before it fails
    /// [`StoreError::Unavailable`].
    async fn connect(
        &self,
        url: &str,
        instance: &str,
        outage_budget: std::time::Duration,
    ) -> Result<Arc<dyn SharedStore>, StoreError>;
}
