//! Several `cairn serve` instances on one shared store (PostgreSQL).
//!
//! The store holds the truth: journals, run facts, the catalog of
//! sessions, park checkpoints, worktree snapshots, leases. Each instance
//! keeps, in its own home, a copy of the workers it serves (their
//! generation directories are where its controllers run) and compiled
//! code.
//!
//! A session is written by the one instance that holds its lease; every
//! append carries the lease's token and the store refuses a stale one in
//! the same transaction. An instance:
//! - takes a session's lease when it is asked for the session and nobody
//!   holds it (or its holder's lease expired), copies the worker into its
//!   home, and restores the interrupted run by replay;
//! - otherwise names the holder, whose registered URL the HTTP layer
//!   forwards the request to;
//! - renews what it holds every third of the lease time (the keeper) and
//!   lets go of a session whose lease moved: its run's next write is
//!   refused and the run ends with a clear error;
//! - sweeps for expired leases and takes them over, so the sessions of an
//!   instance that died go on elsewhere within the lease time.

use super::{Runtime, RuntimeError};
use crate::ids::{Generation, SessionId, WorkerId};
use crate::store::{
    BlobStore, Relay, RelayFollower, SharedStore, SharedStoreConnector, StoreError,
};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Expired leases taken per sweep.
const SWEEP_BATCH: usize = 256;

/// The shared store as one instance sees it.
pub(crate) struct Cluster {
    pub(crate) shared: Arc<dyn SharedStore>,
    pub(crate) relay: Box<dyn Relay>,
    pub(crate) ttl: Duration,
    /// Sessions whose lease this instance holds.
    held: Mutex<HashSet<SessionId>>,
    /// One takeover at a time (a takeover copies a worker and restores).
    taking: tokio::sync::Mutex<()>,
    /// Where requests for a session held elsewhere are sent.
    pub(crate) http: reqwest::Client,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Where this instance serves, once it does.
    url: Mutex<Option<String>>,
    /// Leases handed over when the instance began to stop, released when
    /// it has stopped.
    handed: Mutex<Vec<(SessionId, u64)>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }
}

/// Where a request for a session is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Here: this instance holds the session's lease (or just took it).
    Here,
    /// At the instance that holds the lease.
    Holder {
        /// The holder's instance id.
        holder: String,
        /// Its registered URL.
        url: String,
    },
    /// No such session in the shared store.
    Unknown,
}

impl Cluster {
    pub(crate) async fn connect(
        connector: &dyn SharedStoreConnector,
        url: &str,
        instance: &str,
        ttl: Duration,
        outage_budget: Duration,
    ) -> Result<Cluster, StoreError> {
        let shared = connector.connect(url, instance, outage_budget).await?;
        Ok(Cluster {
            relay: shared.clone().relay(),
            shared,
            ttl,
            held: Mutex::new(HashSet::new()),
            taking: tokio::sync::Mutex::new(()),
            http: reqwest::Client::new(),
            tasks: Mutex::new(Vec::new()),
            url: Mutex::new(None),
            handed: Mutex::new(Vec::new()),
        })
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashSet<SessionId>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn holds(&self, session: &SessionId) -> bool {
        self.held().contains(session)
    }

    /// The blob key of a worker's last worktree snapshot.
    fn snapshot_key(worker: WorkerId) -> String {
        format!("worktree/{worker}")
    }

    /// Snapshot generation `generation`'s worktree (when within `budget`)
    /// into the blob store: 8 bytes of generation, then the packed tree.
    pub(crate) async fn snapshot(
        &self,
        worker: WorkerId,
        generation: Generation,
        artifacts: cap_std::fs::Dir,
        budget: crate::worktree::Budget,
    ) {
        let packed =
            tokio::task::spawn_blocking(move || crate::worktree::pack(&artifacts, &budget)).await;
        let bytes = match packed {
            Ok(Ok(Some(tree))) => {
                let mut bytes = generation.0.to_be_bytes().to_vec();
                bytes.extend_from_slice(&tree);
                bytes
            }
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                tracing::warn!(worker_id = %worker, "cannot snapshot generation {generation}: {e}");
                return;
            }
            Err(_) => return,
        };
        if let Err(e) = self.shared.put(&Self::snapshot_key(worker), &bytes).await {
            tracing::warn!(
                worker_id = %worker, "cannot store generation {generation}'s worktree: {e}"
            );
        }
    }
}

impl Runtime {
    /// Whether this runtime shares its store with other instances.
    pub fn clustered(&self) -> bool {
        self.inner.cluster.is_some()
    }

    /// How long a lease lasts unrenewed (the shared store's; 0 without).
    pub fn lease_ttl(&self) -> Duration {
        self.inner
            .cluster
            .as_ref()
            .map_or(Duration::ZERO, |c| c.ttl)
    }

    /// The HTTP client requests are forwarded with.
    pub fn forwarder(&self) -> reqwest::Client {
        self.inner
            .cluster
            .as_ref()
            .map_or_else(reqwest::Client::new, |c| c.http.clone())
    }

    /// The URLs of the other instances seen within a lease time.
    pub async fn other_instances(&self) -> Vec<String> {
        let Some(c) = &self.inner.cluster else {
            return Vec::new();
        };
        match c.shared.live_instances(c.ttl).await {
            Ok(list) => list.into_iter().map(|i| i.url).collect(),
            Err(e) => {
                tracing::warn!("cannot list the other instances: {e}");
                Vec::new()
            }
        }
    }

    /// Leases held and relay notifications heard (a shared store only).
    pub(crate) fn shared_metrics(&self) -> Option<(usize, u64)> {
        let c = self.inner.cluster.as_ref()?;
        Some((c.held().len(), c.relay.heard()))
    }

    /// This instance's id in the shared store.
    pub fn instance_id(&self) -> Option<&str> {
        self.inner.cluster.as_ref().map(|c| c.shared.holder())
    }

    /// Where a request for `session` is served: here (this instance holds
    /// its lease, or took it now because nobody held it), at its holder, or
    /// nowhere (no such session). Always `Here` on a store of its own.
    pub async fn route(&self, session: &SessionId) -> Result<Route, RuntimeError> {
        let Some(c) = &self.inner.cluster else {
            return Ok(Route::Here);
        };
        for _ in 0..3 {
            if c.holds(session) {
                return Ok(Route::Here);
            }
            match c.shared.lease(session).await? {
                Some(l) if l.holder != c.shared.holder() && l.expires_in_ms > 0 => {
                    if let Some(url) = c.shared.instance_url(&l.holder).await? {
                        return Ok(Route::Holder {
                            holder: l.holder,
                            url,
                        });
                    }
                    return Err(RuntimeError::Storage(format!(
                        "session {session} is held by instance {}, which registered no URL",
                        l.holder
                    )));
                }
                _ => match self.take(session).await {
                    Ok(true) => return Ok(Route::Here),
                    Ok(false) => return Ok(Route::Unknown),
                    // Taken by another instance between the two looks.
                    Err(RuntimeError::Store(StoreError::LeaseHeld { .. })) => continue,
                    Err(e) => return Err(e),
                },
            }
        }
        Err(RuntimeError::Storage(format!(
            "session {session}: its lease keeps moving; try again"
        )))
    }

    /// The instance holding `session`'s unexpired lease, if any.
    pub async fn lease_holder(&self, session: &SessionId) -> Option<String> {
        let c = self.inner.cluster.as_ref()?;
        match c.shared.lease(session).await {
            Ok(Some(l)) if l.expires_in_ms > 0 => Some(l.holder),
            _ => None,
        }
    }

    /// The session of a run, from the shared run index (a run this
    /// instance has not seen).
    pub(crate) async fn shared_session_of_run(
        &self,
        run: crate::ids::RunId,
    ) -> Result<Option<SessionId>, RuntimeError> {
        match &self.inner.cluster {
            Some(c) => Ok(c.shared.session_of_run(run).await?),
            None => Ok(None),
        }
    }

    /// Copy a session of the shared catalog into this home, if it is not
    /// here yet (read paths: listing its runs, streaming it). `false`: no
    /// such session.
    pub async fn ensure_known(&self, session: &SessionId) -> Result<bool, RuntimeError> {
        let Some(c) = &self.inner.cluster else {
            return Ok(true);
        };
        if self.inner.workers.lookup(session)?.is_some() {
            return Ok(true);
        }
        let _guard = c.taking.lock().await;
        if self.inner.workers.lookup(session)?.is_some() {
            return Ok(true);
        }
        let Some(record) = c.shared.record(session).await? else {
            return Ok(false);
        };
        self.inner.workers.adopt_worker(&record)?;
        Ok(true)
    }

    /// Copy every session of the shared catalog this home does not have
    /// yet, and drop the copies of sessions the catalog no longer has
    /// (deleted at another instance), before a listing: every instance
    /// lists the same sessions, and none lists one it cannot serve.
    pub async fn sync_catalog(&self) -> Result<(), RuntimeError> {
        let Some(c) = &self.inner.cluster else {
            return Ok(());
        };
        let shared: std::collections::HashSet<SessionId> =
            c.shared.sessions().await?.into_iter().collect();
        for session in &shared {
            if self.inner.workers.lookup(session)?.is_none() {
                self.ensure_known(session).await?;
            }
        }
        // A copy younger than two leases may be a creation here that has
        // not reached the catalog yet; a damaged one is left to the doctor.
        let young = crate::fsutil::now_ms().saturating_sub(2 * c.ttl.as_millis() as u64);
        for id in self.inner.workers.list_workers()? {
            let entry = self.inner.workers.worker_entry(id);
            let (Some(session), None) = (entry.session_id, entry.problem) else {
                continue;
            };
            if shared.contains(&session) || c.holds(&session) {
                continue;
            }
            let _guard = c.taking.lock().await;
            let made = self.inner.workers.open_worker(id).and_then(|w| w.record());
            if made.is_ok_and(|r| r.created_at_ms < young)
                && c.shared.record(&session).await?.is_none()
                && self.inner.workers.lookup(&session)? == Some(id)
            {
                tracing::info!(session_id = %session, "deleted at another instance: its copy here goes too");
                self.inner.workers.delete_worker(id, &session)?;
                self.inner.journals.close(&session);
                if let Some(fs) = &self.inner.file_store {
                    fs.forget(&session);
                }
                self.inner.registry.sessions().remove(&session);
            }
        }
        Ok(())
    }

    /// Take `session`'s lease (it is free or expired), bring its worker
    /// here and restore its interrupted run by replay. `false`: no such
    /// session. `LeaseHeld` when another instance took it first.
    pub(crate) async fn take(&self, session: &SessionId) -> Result<bool, RuntimeError> {
        let Some(c) = &self.inner.cluster else {
            return Ok(true);
        };
        let _guard = c.taking.lock().await;
        if c.holds(session) {
            return Ok(true);
        }
        let Some(record) = c.shared.record(session).await? else {
            // Deleted at another instance: this home's copy goes too.
            if let Some(id) = self.inner.workers.lookup(session)?
                && self
                    .inner
                    .registry
                    .sessions()
                    .get(session)
                    .is_none_or(|l| l.live_run().is_none())
            {
                self.inner.workers.delete_worker(id, session)?;
                self.inner.journals.close(session);
            }
            return Ok(false);
        };
        let lease = c.shared.acquire(session, c.ttl).await?;
        // Whatever this instance knew of the session's head is stale now.
        self.inner.journals.close(session);
        let head = self.inner.store.head(session).await?;
        let worker = match self.inner.workers.lookup(session)? {
            Some(id) => self.inner.workers.open_worker_any(id)?,
            None => self.inner.workers.adopt_worker(&record)?,
        };
        let local = worker.record()?;
        // The catalog binds the worker (an update at another instance
        // moved it there).
        if let Some(bound) = &record.component
            && local.component.as_deref() != Some(bound.as_str())
        {
            worker.record_generation(local.last_generation, Some(bound))?;
        }
        // The last worktree a generation left (elsewhere, or a fork's
        // generation 0), when this home does not have it.
        if let Some(bytes) = BlobStore::get(&*c.shared, &Cluster::snapshot_key(worker.id())).await?
            && bytes.len() >= 8
        {
            let generation = Generation(u64::from_be_bytes(
                bytes[..8].try_into().unwrap_or_default(),
            ));
            if generation >= local.last_generation
                && let Err(e) = unpack_into(&worker, generation, &bytes[8..])
            {
                tracing::warn!(
                    session_id = %session, "the worktree of generation {generation} is not carried over: {e}"
                );
            }
        }
        if head.last_generation > local.last_generation {
            // Generations ran elsewhere: reserve past them.
            worker.record_generation(head.last_generation, None)?;
        }
        c.held().insert(session.clone());
        tracing::info!("took session {session} (lease token {})", lease.token);
        super::replay::restore_worker(self, worker.id()).await;
        Ok(true)
    }

    /// Start the keeper: every third of the lease time it renews what this
    /// instance holds (and, once it serves, re-registers its URL and
    /// sweeps for expired leases). Called when the runtime opens, so even
    /// a one-shot `cairn run` keeps its session's lease.
    pub(crate) fn start_keeper(&self) {
        let Some(c) = &self.inner.cluster else { return };
        let weak = Arc::downgrade(&self.inner);
        let keeper = tokio::spawn(async move {
            loop {
                let Some(inner) = weak.upgrade() else { return };
                let rt = Runtime { inner };
                let Some(c) = rt.inner.cluster.as_ref() else {
                    return;
                };
                let every = c.ttl / 3;
                let url = c.url.lock().unwrap_or_else(|p| p.into_inner()).clone();
                if let Some(url) = &url
                    && let Err(e) = c.shared.register_instance(url).await
                {
                    tracing::warn!("cannot re-register this instance: {e}");
                }
                rt.keep().await;
                if url.is_some() {
                    rt.sweep().await;
                }
                drop(rt);
                tokio::time::sleep(every).await;
            }
        });
        c.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(keeper);
    }

    /// Serve as one of the instances: register `url` (other instances
    /// forward there) and take part in sweeping for expired leases.
    pub async fn join_cluster(&self, url: &str) -> Result<(), RuntimeError> {
        let Some(c) = &self.inner.cluster else {
            return Ok(());
        };
        c.shared.claim_instance(url, c.ttl).await?;
        *c.url.lock().unwrap_or_else(|p| p.into_inner()) = Some(url.to_string());
        Ok(())
    }

    /// Renew every lease held; let go of those that moved.
    async fn keep(&self) {
        let Some(c) = &self.inner.cluster else { return };
        let held: Vec<SessionId> = c.held().iter().cloned().collect();
        for session in held {
            let Some(token) = c.shared.token(&session) else {
                c.held().remove(&session);
                continue;
            };
            match c.shared.renew(&session, token, c.ttl).await {
                Ok(_) => {}
                Err(e) if e.is_lost_authority() => {
                    c.held().remove(&session);
                    tracing::warn!("session {session} moved to another instance: {e}");
                    // Its run here can write nothing more (the store
                    // refuses its token): end it, and say why.
                    let live = self
                        .inner
                        .registry
                        .sessions()
                        .get(&session)
                        .and_then(|l| l.live_run().cloned());
                    if let Some(run) = live {
                        tracing::warn!(
                            "run {} ends here: session {session}'s lease moved to another instance, which restores the run by replay",
                            run.run_id
                        );
                        run.cancel(
                            crate::journal::event::CancelReason::External,
                            "the session's lease moved to another instance",
                        );
                    }
                    self.inner.journals.close(&session);
                }
                Err(e) => tracing::warn!(session_id = %session, "cannot renew its lease: {e}"),
            }
        }
    }

    /// Take over sessions whose leases expired (their holders died or
    /// paused).
    async fn sweep(&self) {
        let Some(c) = &self.inner.cluster else { return };
        if self
            .inner
            .draining
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        let expired = match c.shared.expired(SWEEP_BATCH).await {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("cannot sweep for expired leases: {e}");
                return;
            }
        };
        for lease in expired {
            if c.holds(&lease.session) {
                continue;
            }
            match self.take(&lease.session).await {
                Ok(true) => {}
                // Leased but never published: a creation that died.
                Ok(false) => self.clear_orphan(&lease.session).await,
                Err(RuntimeError::Store(StoreError::LeaseHeld { .. })) => {}
                Err(e) => tracing::warn!("cannot take session {}: {e}", lease.session),
            }
        }
    }

    /// Clear a session whose creator died between its lease and its
    /// catalog row (its journal, its lease), unless it is being created
    /// now (its lease is live) or was published after all.
    async fn clear_orphan(&self, session: &SessionId) {
        let Some(c) = &self.inner.cluster else { return };
        if c.shared.acquire(session, c.ttl).await.is_err() {
            return;
        }
        match c.shared.drop_orphan(session, true).await {
            Ok(true) => {
                tracing::info!(session_id = %session, "cleared a creation that never finished")
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(session_id = %session, "cannot clear it: {e}"),
        }
    }

    /// A stop begins: this instance stops writing its sessions at once
    /// (their runs are not ended here: each goes on at another instance,
    /// restored by replay, instead of being cancelled by a rolling restart).
    pub(crate) fn hand_over(&self) {
        let Some(c) = &self.inner.cluster else { return };
        let held: Vec<SessionId> = c.held().drain().collect();
        let mut handed = c.handed.lock().unwrap_or_else(|p| p.into_inner());
        for session in held {
            if let Some(token) = c.shared.drop_token(&session) {
                handed.push((session, token));
            }
        }
    }

    /// Give every lease up (a clean stop): other instances take the
    /// sessions at once.
    pub(crate) async fn leave_cluster(&self) {
        let Some(c) = &self.inner.cluster else { return };
        for t in c.tasks.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            t.abort();
        }
        self.hand_over();
        let handed = std::mem::take(&mut *c.handed.lock().unwrap_or_else(|p| p.into_inner()));
        for (session, token) in handed {
            let _ = c.shared.release(&session, token).await;
        }
        let _ = c.shared.unregister_instance().await;
    }

    /// A new session's shared rows: its lease first (so no other instance
    /// writes it), then — after its journal exists — its catalog row.
    pub(crate) async fn lease_new(&self, session: &SessionId) -> Result<(), RuntimeError> {
        let Some(c) = &self.inner.cluster else {
            return Ok(());
        };
        if c.shared.record(session).await?.is_some() {
            return Err(RuntimeError::SessionExists(session.clone()));
        }
        match c.shared.acquire(session, c.ttl).await {
            Ok(lease) => {
                c.held().insert(session.clone());
                // A lease before this one, and no catalog row: a creation
                // that died half-way (its lease expired). Its journal goes.
                if lease.token > 1 && c.shared.drop_orphan(session, false).await? {
                    tracing::info!(session_id = %session, "cleared a creation that never finished");
                }
                Ok(())
            }
            Err(StoreError::LeaseHeld { .. }) => Err(RuntimeError::SessionExists(session.clone())),
            Err(e) => Err(e.into()),
        }
    }

    pub(crate) async fn publish_new(
        &self,
        record: &crate::worker::WorkerRecord,
    ) -> Result<(), RuntimeError> {
        let Some(c) = &self.inner.cluster else {
            return Ok(());
        };
        // `[quota] workers` holds across the cluster: the catalog counts
        // every instance's workers of the workspace.
        let quota = self.inner.config.host.quota_of(
            &record.workspace,
            |q| q.workers,
            crate::config::DEFAULT_WORKERS,
        );
        match c.shared.publish_within(record, quota).await? {
            Ok(true) => Ok(()),
            Ok(false) => Err(RuntimeError::SessionExists(record.session_id.unscoped())),
            Err(held) => Err(super::tree::workers_full(&record.workspace, held, quota)),
        }
    }

    /// Snapshot a generation's worktree into the shared store, within
    /// `workspace`'s ceilings (nothing on a store of its own).
    pub(crate) async fn snapshot_generation(
        &self,
        worker: WorkerId,
        generation: Generation,
        workspace: &str,
    ) {
        let budget = crate::worktree::Budget::of(&self.inner.config.host.ceilings(workspace));
        self.snapshot_with(worker, generation, budget).await;
    }

    /// Snapshot a generation's worktree within `budget`.
    pub(crate) async fn snapshot_with(
        &self,
        worker: WorkerId,
        generation: Generation,
        budget: crate::worktree::Budget,
    ) {
        let Some(cluster) = &self.inner.cluster else {
            return;
        };
        let artifacts = self
            .inner
            .workers
            .open_worker_any(worker)
            .and_then(|w| w.generation_dir(generation))
            .and_then(|d| {
                d.open_dir("artifacts")
                    .map_err(|source| crate::worker::WorkerError::Io {
                        context: format!("generation {generation}: artifacts/"),
                        source,
                    })
            });
        if let Ok(artifacts) = artifacts {
            cluster
                .snapshot(worker, generation, artifacts, budget)
                .await;
        }
    }

    /// Record a worker's binding in the shared catalog.
    pub(crate) async fn bind_shared(
        &self,
        session: &SessionId,
        digest: &str,
    ) -> Result<(), RuntimeError> {
        let Some(c) = &self.inner.cluster else {
            return Ok(());
        };
        c.shared.bind(session, digest).await?;
        Ok(())
    }

    /// Give a session's lease up (a creation that failed).
    pub(crate) async fn release_shared(&self, session: &SessionId) {
        let Some(c) = &self.inner.cluster else { return };
        c.held().remove(session);
        if let Some(token) = c.shared.token(session) {
            let _ = c.shared.release(session, token).await;
        }
    }

    /// Forget a session's shared rows (it was deleted here).
    pub(crate) async fn forget_shared(&self, session: &SessionId) -> Result<(), RuntimeError> {
        let Some(c) = &self.inner.cluster else {
            return Ok(());
        };
        c.shared.forget(session).await?;
        c.held().remove(session);
        Ok(())
    }

    /// Follow `session` through the relay (it is written elsewhere).
    pub(crate) fn relay_follow(
        &self,
        session: &SessionId,
        after: crate::ids::Seq,
    ) -> Option<Box<dyn RelayFollower>> {
        let c = self.inner.cluster.as_ref()?;
        (!c.holds(session)).then(|| c.relay.follow(session, after))
    }

    /// Component bytes another instance stored (a session bound to an
    /// uploaded component, taken over here).
    pub(crate) async fn shared_component(&self, digest: &str) -> Option<Vec<u8>> {
        let c = self.inner.cluster.as_ref()?;
        BlobStore::get(&*c.shared, &component_key(digest)?)
            .await
            .ok()
            .flatten()
    }

    /// Store component bytes for every instance.
    pub(crate) async fn share_component(&self, digest: &str, bytes: &[u8]) {
        let (Some(c), Some(key)) = (&self.inner.cluster, component_key(digest)) else {
            return;
        };
        if let Err(e) = c.shared.put(&key, bytes).await {
            tracing::warn!("cannot share component {digest}: {e}");
        }
    }
}

/// `component/<hex>` for `sha256:<hex>`.
fn component_key(digest: &str) -> Option<String> {
    let hex = digest.strip_prefix("sha256:")?;
    Some(format!("component/{hex}"))
}

/// Lay generation `generation`'s worktree out from a snapshot (when this
/// home does not have it).
fn unpack_into(
    worker: &crate::worker::WorkerDir,
    generation: Generation,
    tree: &[u8],
) -> std::io::Result<()> {
    let runs = worker.runs_dir()?;
    let name = generation.to_string();
    if runs.exists(&name) {
        return Ok(());
    }
    let dir = crate::fsutil::create_dir_new(&runs, &name)?;
    let artifacts = crate::fsutil::create_dir_new(&dir, "artifacts")?;
    crate::worktree::unpack(tree, &artifacts)
}

/// The shared store a runtime opens, from `[store]`.
pub(crate) async fn open(
    config: &crate::config::SharedStoreConfig,
    connectors: &[Arc<dyn SharedStoreConnector>],
) -> Result<Option<Cluster>, RuntimeError> {
    let Some(url) = &config.url else {
        return Ok(None);
    };
    let Some(connector) = connectors.iter().find(|c| c.accepts(url)) else {
        return Err(RuntimeError::Storage(
            "cannot open the shared store ([store] url / --store): this runtime has no shared store registered for its scheme (the cairn binary has PostgreSQL; an embedder registers one with RuntimeBuilder::shared_store)".into(),
        ));
    };
    let instance = config
        .instance
        .clone()
        .unwrap_or_else(|| format!("i-{}", uuid::Uuid::new_v4().simple()));
    let ttl = Duration::from_millis(config.lease_ttl_ms.max(300));
    let outage = Duration::from_millis(config.outage_budget_ms);
    let cluster = Cluster::connect(&**connector, url, &instance, ttl, outage)
        .await
        .map_err(|e| {
            RuntimeError::Storage(format!(
                "cannot open the shared store ([store] url / --store): {e}"
            ))
        })?;
    Ok(Some(cluster))
}
