//! The runtime's view of this store: [`SharedStore`] with its registry and
//! relay, and [`Postgres`], the connector the cairn binary registers.

use super::PgStore;
use super::relay::{Follower, Relay as PgRelay};
use async_trait::async_trait;
use cairn_store::records::WorkerRecord;
use cairn_store::{
    Instance, InstanceRegistry, JournalItem, Relay, RelayFollower, SharedStore,
    SharedStoreConnector, StoreError,
};
use cairn_types::ids::{Seq, SessionId};
use std::sync::Arc;
use std::time::Duration;

/// Opens `postgres://` (and `postgresql://`, or libpq key/value) URLs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Postgres;

#[async_trait]
impl SharedStoreConnector for Postgres {
    fn accepts(&self, url: &str) -> bool {
        url.starts_with("postgres://") || url.starts_with("postgresql://") || url.contains('=')
    }

    async fn connect(
        &self,
        url: &str,
        instance: &str,
        outage_budget: Duration,
    ) -> Result<Arc<dyn SharedStore>, StoreError> {
        Ok(Arc::new(
            PgStore::connect(url, instance)
                .await?
                .with_outage_budget(outage_budget),
        ))
    }
}

#[async_trait]
impl InstanceRegistry for PgStore {
    fn holder(&self) -> &str {
        PgStore::holder(self)
    }

    async fn register_instance(&self, url: &str) -> Result<(), StoreError> {
        PgStore::register_instance(self, url).await
    }

    async fn claim_instance(&self, url: &str, within: Duration) -> Result<(), StoreError> {
        PgStore::claim_instance(self, url, within).await
    }

    async fn instance_url(&self, holder: &str) -> Result<Option<String>, StoreError> {
        PgStore::instance_url(self, holder).await
    }

    async fn live_instances(&self, within: Duration) -> Result<Vec<Instance>, StoreError> {
        PgStore::live_instances(self, within).await
    }

    async fn unregister_instance(&self) -> Result<(), StoreError> {
        PgStore::unregister_instance(self).await
    }
}

#[async_trait]
impl SharedStore for PgStore {
    fn token(&self, session: &SessionId) -> Option<u64> {
        PgStore::token(self, session)
    }

    fn drop_token(&self, session: &SessionId) -> Option<u64> {
        PgStore::drop_token(self, session)
    }

    async fn publish_within(
        &self,
        record: &WorkerRecord,
        quota: usize,
    ) -> Result<Result<bool, u64>, StoreError> {
        PgStore::publish_within(self, record, quota).await
    }

    async fn drop_orphan(&self, session: &SessionId, release: bool) -> Result<bool, StoreError> {
        PgStore::drop_orphan(self, session, release).await
    }

    fn relay(self: Arc<Self>) -> Box<dyn Relay> {
        Box::new(PgRelay::start(self))
    }
}

impl Relay for PgRelay {
    fn follow(&self, session: &SessionId, after: Seq) -> Box<dyn RelayFollower> {
        Box::new(PgRelay::follow(self, session, after))
    }

    fn heard(&self) -> u64 {
        PgRelay::heard(self)
    }
}

#[async_trait]
impl RelayFollower for Follower {
    fn cursor(&self) -> Seq {
        Follower::cursor(self)
    }

    async fn next(&mut self) -> Result<JournalItem, StoreError> {
        Follower::next(self).await
    }
}
