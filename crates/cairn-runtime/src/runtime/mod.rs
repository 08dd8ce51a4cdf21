//! The one in-process facade. Commands in (`create_session`, `start`,
//! `attach`, `decide`, `cancel`, `continue_run`, `resume`, `shutdown`),
//! journal subscriptions out; nothing outside holds a component, a store
//! handle or a cancel token.

mod audit;
mod cache_mirror;
mod catalog;
pub mod cluster;
mod components;
mod config;
pub mod decisions;
pub(crate) mod delegation;
mod error;
mod grants;
mod guard;
pub use cairn_types::failure;
mod history;
mod leases;
pub mod lineage;
mod listing;
mod loan;
mod observers;
mod registry;
pub mod replay;
mod run;
mod run_index;
mod scope;
mod segments;
mod shutdown;
mod start;
pub mod state;
mod supervise;
pub mod telemetry;
mod tree;
pub mod update;
pub mod update_bulk;
mod worktrees;

use crate::component::{Components, Info, Prepared};
use crate::ids::{DecisionId, RunId, Seq, SessionId, WorkerId};
use crate::journal::event::{
    CancelReason, LifecycleEvent, Liveness, LivenessPolicy, Payload, RunFacts, RunStatus,
};
use crate::journal::{Journals, Subscription};
use crate::store::file::FileStore;
use crate::store::memory::MemoryStore;
use crate::store::{JournalItem, Store, StoreError};
use crate::worker::{Home, WorkerDir, WorkerStatus};
pub use audit::WorkerAudit;
pub use catalog::{Metrics, RunState, RunSummary};
pub use decisions::{DecideError, PendingDecision};
pub use error::RuntimeError;
pub use leases::{Leased, MAX_LEASE_TTL, MIN_LEASE_TTL};
pub use listing::{MAX_PAGE, Page};
pub use observers::{AttachSpec, Observation};
use run::{RunCtx, RunPlan};
pub use segments::{Forked, SegmentStarted};
pub use state::{AgentState, SessionSummary};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

pub use config::{
    ComponentRef, FirstCommit, HOST_WORKSPACE, RuntimeConfig, StartRun, Started, StoreKind,
};

/// A seam told when a generation goes live (`worker.sock` is one): it
/// serves what it serves through the runtime's public calls, and stops
/// when the generation does.
pub trait GenerationSeam: Send + Sync + 'static {
    /// `generation` is live; the guard is stopped when it stops.
    fn live(&self, rt: &Runtime, generation: LiveGeneration<'_>) -> Option<Box<dyn SeamGuard>>;
}

/// What a live generation is, for a [`GenerationSeam`].
pub struct LiveGeneration<'a> {
    /// The run.
    pub run: RunId,
    /// Its session.
    pub session: &'a SessionId,
    /// `runs/<gen>/`.
    pub dir: &'a crate::worker::GenerationDir,
}

/// What a [`GenerationSeam`] serves for one generation.
pub trait SeamGuard: Send {
    /// The generation's run begins to wait on something outside it (a
    /// decision, a host call, a child), before the wait is journaled.
    fn waiting(&self) {}
    /// The generation stopped.
    fn stop(self: Box<Self>);
}

/// A live session's in-memory record: observers, claim, live run. Never
/// serialized; a restart has none of it.
#[derive(Default)]
pub(crate) struct SessionLive {
    observers: HashMap<u64, crate::journal::event::Observer>,
    claimant: Option<u64>,
    /// A claimant whose detach goes in the next run's end write.
    leaves_with_run: Option<u64>,
    run: Option<Arc<RunCtx>>,
    grace: Option<tokio::task::JoinHandle<()>>,
    deleting: bool,
    /// Observers leased from across a process boundary, by name.
    leases: HashMap<String, leases::Lease>,
}

impl SessionLive {
    /// The session's live run: one whose terminal entry is not yet durable
    /// (a run whose end is written no longer holds the session).
    pub(crate) fn live_run(&self) -> Option<&Arc<RunCtx>> {
        self.run
            .as_ref()
            .filter(|r| !r.ended.load(Ordering::SeqCst))
    }
}

pub(crate) struct Inner {
    /// A reader's mirror of the home's compiled-code cache (removed with it).
    cache_mirror: Option<tempfile::TempDir>,
    /// This runtime's metrics.
    pub(crate) telemetry: Arc<telemetry::Telemetry>,
    /// The home's layout, for the tools that inspect its files
    /// ([`Runtime::home`]); the runtime itself goes through `workers` and
    /// `bytes`.
    home: Home,
    /// The workers this instance serves, with their generation directories.
    workers: Arc<dyn crate::store::Workers>,
    /// Component bytes and workspace grants.
    bytes: Arc<dyn crate::store::ComponentBytes>,
    /// The home's OS lock, held while this runtime owns the home (none for
    /// a reader).
    lock: Mutex<Option<crate::home_lock::HomeLock>>,
    /// What the owner's open repaired, for people.
    recovery: Vec<String>,
    /// Run id → session and facts, without reading journals.
    run_index: Arc<dyn crate::store::RunIndex>,
    /// Set once the embedded index is built from the journals.
    run_index_built: tokio::sync::OnceCell<()>,
    /// Workers each workspace holds (`[quota] workers`), counted from the
    /// home on first use and kept current by creations and deletions.
    worker_counts: Mutex<Option<std::collections::HashMap<String, usize>>>,
    store: Arc<dyn Store>,
    file_store: Option<Arc<FileStore>>,
    /// The shared store and this instance's leases (several instances on
    /// one PostgreSQL); `None` on the home's own store.
    cluster: Option<cluster::Cluster>,
    journals: Journals,
    components: Arc<Components>,
    broker: Arc<decisions::Broker>,
    /// What controllers may call beyond the journal (model, …).
    capabilities: Arc<run::Capabilities>,
    /// Live sessions, hosted runs, drafts, restored runs: one lock.
    registry: registry::Registry,
    draining: AtomicBool,
    /// Whether a clean stop may leave the marker that lets the next owner
    /// skip recovery (cleared when a restore leaves a run unrestored).
    may_mark_clean: AtomicBool,
    /// A run that may park to be resumed at the next start ran here: the
    /// next owner must walk the home to find it, so no clean marker.
    resume_pending: AtomicBool,
    /// Parked runs the restore walk found to resume once the home is open.
    resume_at_start: Mutex<Vec<RunId>>,
    /// Set when shutdown begins: followers' streams end.
    closing: watch::Sender<bool>,
    /// Told when a generation goes live (`worker.sock`, unless
    /// `config.sockets` is off).
    seams: Vec<Arc<dyn GenerationSeam>>,
    /// Ended runs since start: finished, failed, cancelled, parked.
    ended: [std::sync::atomic::AtomicU64; 4],
    /// Decisions a run being restored asked before the restart and its
    /// replay has not asked again yet: answered `409 restoring` (retry),
    /// never `404`.
    restoring: std::sync::Mutex<HashMap<DecisionId, SessionId>>,
    /// Component updates asked while a session's run was live: applied at
    /// its next run's start.
    pub(crate) pending_updates: std::sync::Mutex<HashMap<SessionId, update::PendingUpdate>>,
    config: RuntimeConfig,
}

struct LiveRecord {
    ctx: Arc<RunCtx>,
    done: watch::Receiver<Option<Result<RunFacts, String>>>,
}

/// How long [`Runtime::find_run`] waits for the facts of a run whose
/// terminal entry is being written.
const FACTS_FOLLOW: Duration = Duration::from_secs(2);

/// The runtime. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("home", &self.inner.home)
            .finish()
    }
}

impl Runtime {
    /// Open a runtime over `config` with the parts a [`RuntimeBuilder`]
    /// registered (see [`Runtime::open`]).
    ///
    /// [`RuntimeBuilder`]: crate::RuntimeBuilder
    pub(crate) async fn open_with(
        config: RuntimeConfig,
        connectors: &[Arc<dyn crate::store::SharedStoreConnector>],
        capabilities: Vec<Arc<dyn crate::component::Capability>>,
        seams: Vec<Arc<dyn GenerationSeam>>,
    ) -> Result<Runtime, RuntimeError> {
        let read_only = config.read_only;
        // One writer per home: the lock first, before anything is read
        // that a writer could be changing.
        let lock = match read_only {
            true => None,
            false => Some(crate::home_lock::HomeLock::acquire(
                &config.home,
                &config.command,
            )?),
        };
        // The previous owner stopped cleanly: nothing to repair, no run
        // interrupted (the walks below are skipped).
        let home = match read_only {
            true => Home::open_existing(&config.home)?,
            false => Home::open(&config.home)?,
        };
        // ... and only if the home still holds what its marker vouched
        // for: a lost index entry or worker directory is walked for (a
        // lookup miss would otherwise make a second worker of a session).
        // A crash of the previous owner's process in this boot: its live
        // index names every worker a restore must look at.
        let mut live_index = lock.as_ref().is_some_and(|l| l.previous_kept_live_index());
        let was_clean = lock.as_ref().is_some_and(|l| {
            l.was_clean() && l.vouched().is_some() && l.vouched() == home.vouched().ok()
        });
        // The workers each workspace held, as a clean stop left them (else
        // counted from the home at the first creation).
        let worker_counts = match read_only {
            true => None,
            false => home.take_worker_counts(was_clean),
        };
        let recovery = match read_only {
            true => Vec::new(),
            false => {
                // Legacy roots in the home are migrated before anything
                // else reads it (seed 000), under the lock just taken.
                let mut notes = match config.store {
                    StoreKind::File => crate::migrate::at_startup(&home),
                    StoreKind::Memory { .. } => Vec::new(),
                };
                if !was_clean {
                    // After a crash of its process in this boot, the
                    // previous owner's live index lists every worker whose
                    // layout or run was changing: only those are opened.
                    let listed = match live_index {
                        true => home
                            .live_workers()
                            .ok()
                            .filter(|listed| home.live_index_holds(listed)),
                        false => None,
                    };
                    let recovery = match &listed {
                        Some(listed) => home.recover_listed(listed),
                        None => {
                            // Walked whole: restore walks every worker too.
                            live_index = false;
                            home.recover()
                        }
                    };
                    notes.extend(recovery.notes());
                }
                notes
            }
        };
        // The owner, its recovery done, opens settled workers without
        // probing for markers (a reader cannot: the owner changes them).
        if !read_only {
            home.keep_settled();
        }
        let cluster = match read_only {
            true => None,
            false => cluster::open(&config.host.store, connectors).await?,
        };
        let (store, file_store): (Arc<dyn Store>, _) = match (config.store, &cluster) {
            (_, Some(c)) => (c.shared.clone(), None),
            (StoreKind::File, None) => {
                home.set_first_commit_sync(config.host.store.first_commit_sync);
                let fs = Arc::new(match read_only {
                    true => FileStore::read_only(home.clone()),
                    false => FileStore::new(home.clone()),
                });
                (fs.clone(), Some(fs))
            }
            (StoreKind::Memory { window }, None) => (Arc::new(MemoryStore::new(window)), None),
        };
        let run_index: Arc<dyn crate::store::RunIndex> = match (&cluster, &file_store) {
            (Some(c), _) => c.shared.clone(),
            // The owner of a file home keeps its run index across restarts;
            // it is loaded when the previous owner's log is sure to be whole
            // (a clean stop, or a crash of its process in this boot).
            (None, Some(_)) if !read_only => {
                let trusted = lock
                    .as_ref()
                    .is_some_and(|l| l.previous_kept_indexes() && (l.was_clean() || live_index));
                match home.root().open_dir("index") {
                    Ok(index) => Arc::new(cairn_store_file::FileRunIndex::open(index, trusted)),
                    Err(_) => Arc::new(crate::store::MemoryRunIndex::default()),
                }
            }
            _ => Arc::new(crate::store::MemoryRunIndex::default()),
        };
        let journals = Journals::new(store.clone(), config.live_window)
            .with_window_bytes(
                config
                    .live_window_bytes
                    .min(config.host.limits.live_window_bytes),
            )
            .with_total_bytes(config.host.limits.live_total_bytes);
        let telemetry = Arc::new(telemetry::Telemetry::default());
        let model_telemetry = telemetry.clone();
        let observing = telemetry.clone();
        let journals = journals.with_commit_observer(Arc::new(move |took, entries| {
            observing.committed(took, entries)
        }));
        let restore = config.restore && file_store.is_some() && !read_only && !was_clean;
        // This owner may leave the clean-stop marker when it stops if it
        // knows the home has nothing to repair or restore: it found it
        // clean, or walks it now.
        let may_mark_clean =
            file_store.is_some() && cluster.is_none() && !read_only && (was_clean || restore);
        // The owner keeps compiled code in the home (a reader writes
        // nothing there).
        let home_cache = config.home.join("cache").join("compiled");
        // A reader reads it through a private mirror (it writes nothing
        // in the home).
        let cache_mirror = read_only
            .then(|| cache_mirror::mirror(&home_cache))
            .flatten();
        let cache_dir = match &cache_mirror {
            Some(m) => Some(m.path().to_path_buf()),
            None => (!read_only).then_some(home_cache),
        };
        let components = Arc::new(Components::new(
            config.host.pool.instances,
            config.host.limits.memory_bytes,
            cache_dir.as_deref(),
        )?);
        components.set_cache_budget(config.host.limits.component_cache_bytes);
        let rt = Runtime {
            inner: Arc::new(Inner {
                cache_mirror,
                telemetry,
                workers: Arc::new(home.clone()),
                bytes: Arc::new(home.clone()),
                home,
                lock: Mutex::new(lock),
                recovery,
                run_index,
                run_index_built: Default::default(),
                worker_counts: Mutex::new(worker_counts),
                store,
                file_store,
                cluster,
                journals,
                components,
                broker: Arc::new(decisions::Broker::default()),
                capabilities: Arc::new(run::Capabilities::new(
                    capabilities,
                    config.host.clone(),
                    model_telemetry,
                )),
                registry: Default::default(),
                draining: AtomicBool::new(false),
                may_mark_clean: AtomicBool::new(may_mark_clean),
                resume_pending: AtomicBool::new(false),
                resume_at_start: Default::default(),
                seams,
                closing: watch::channel(false).0,
                ended: Default::default(),
                restoring: Default::default(),
                pending_updates: Default::default(),
                config,
            }),
        };
        if restore {
            replay::restore_all(&rt, live_index).await?;
            // Parked runs that asked for it are resumed now (`resume_on_start`).
            let parked = std::mem::take(
                &mut *rt
                    .inner
                    .resume_at_start
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()),
            );
            for run in parked {
                if let Err(e) = rt.resume(run, None).await {
                    tracing::warn!("parked run {run} not resumed at start: {e}");
                }
            }
        }
        rt.watch_lock();
        rt.start_keeper();
        Ok(rt)
    }

    /// Whether `session` is persisted here (a draft is not).
    pub fn session_exists(&self, session: &SessionId) -> Result<bool, RuntimeError> {
        Ok(self
            .inner
            .workers
            .lookup(session)
            .map_err(|e| RuntimeError::from(e).for_session(session))?
            .is_some())
    }

    /// For a reader: the files of its mirror of the home's compiled-code
    /// cache (a component it had to compile adds some); `None` when it
    /// reads none (an owner, or a home with no cache yet).
    pub fn compiled_cache_files(&self) -> Option<usize> {
        self.inner
            .cache_mirror
            .as_ref()
            .map(|m| cache_mirror::files(m.path()))
    }

    /// The home: the file store's layout, for tools that inspect it
    /// (`doctor`, the work queue's worktree markers, tests). Seams use the
    /// runtime's calls instead.
    pub fn home(&self) -> &Home {
        &self.inner.home
    }

    /// Where a person finds `session`'s journal (its file on the home, its
    /// rows on a shared store), for messages.
    pub fn journal_location(&self, session: &SessionId) -> Option<String> {
        self.inner.store.location(session)
    }

    /// The workers this instance serves (their documents and generation
    /// directories).
    pub fn workers(&self) -> &dyn crate::store::Workers {
        &*self.inner.workers
    }

    /// What recovery did while opening the home and its journals, for
    /// people.
    pub fn recovery_notes(&self) -> Vec<String> {
        let mut notes = self.inner.recovery.clone();
        notes.extend(
            self.inner
                .file_store
                .as_ref()
                .map(|s| s.take_notes())
                .unwrap_or_default(),
        );
        notes
    }

    /// Record the URL this process serves its home at (in the home lock, so
    /// a second writer is sent there).
    pub fn set_served_url(&self, url: &str) -> Result<(), RuntimeError> {
        let mut lock = self.inner.lock.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(lock) = lock.as_mut() {
            lock.set_url(url)?;
        }
        Ok(())
    }

    /// Give the home lock up (at the end of a shutdown).
    pub fn release_home(&self) {
        self.inner
            .lock
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    /// The session and facts of an ended run, from memory or the journal.
    /// A run whose end is being written is waited for (at most
    /// [`FACTS_FOLLOW`]): an ended run's facts never come back as "live"
    /// once the journal shows its end.
    pub async fn find_run(&self, run: RunId) -> Result<(SessionId, RunFacts), RuntimeError> {
        let live = {
            let runs = self.inner.registry.runs();
            runs.get(&run)
                .map(|r| (r.ctx.session.clone(), r.ctx.clone(), r.done.clone()))
        };
        if let Some((session, ctx, mut done)) = live {
            // Its terminal entry is being written, or is written — and
            // readable in the journal (a summary says the run ended) —
            // before its task publishes the facts: they follow within
            // moments (a disk refusing the entry: not waited out).
            if done.borrow().is_none() && ctx.finishing.load(Ordering::SeqCst) {
                let _ = tokio::time::timeout(FACTS_FOLLOW, done.wait_for(|d| d.is_some())).await;
            }
            let done = done.borrow().clone();
            return match done {
                Some(Ok(facts)) => Ok((session, facts)),
                _ => Err(RuntimeError::WrongRunState {
                    run,
                    state: "live".into(),
                    needed: "it has not ended".into(),
                }),
            };
        }
        match self.run_index().await?.get(run).await? {
            Some(crate::store::IndexedRun {
                session,
                facts: Some(facts),
                ..
            }) => Ok((session, facts)),
            // An end the index missed (a crash between the terminal write
            // and the index's line): the store keeps the facts with it.
            Some(crate::store::IndexedRun { session, .. }) => {
                match self.inner.store.run_facts(&session, run).await {
                    Ok(Some(facts)) => Ok((session, facts)),
                    _ => Err(RuntimeError::WrongRunState {
                        run,
                        state: "interrupted".into(),
                        needed: "it has not ended (it is restored when its home's owner opens it)"
                            .into(),
                    }),
                }
            }
            None => Err(RuntimeError::UnknownRun(run)),
        }
    }

    /// Follow a session from after `after`, without attaching as an observer.
    pub async fn subscribe(
        &self,
        session: &SessionId,
        after: Seq,
    ) -> Result<Subscription, RuntimeError> {
        match self.inner.journals.open(session).await {
            Ok(j) => Ok(j.subscribe(after)),
            Err(StoreError::UnknownSession(s)) => Err(RuntimeError::UnknownSession(s)),
            Err(e) => Err(RuntimeError::from(e).for_session(session)),
        }
    }

    /// The session's history (its active lineage's turns), the latest `limit`.
    pub async fn history(
        &self,
        session: &SessionId,
        limit: usize,
    ) -> Result<Vec<crate::component::Turn>, RuntimeError> {
        let events = self.events_of(session).await?;
        Ok(history::turns_of(&events, None, limit))
    }

    /// Record earlier conversation in a session (a chat request's messages
    /// before the one it runs) as one `HistoryImported` entry; returns its
    /// seq once it is durable.
    pub async fn import_history(
        &self,
        session: &SessionId,
        turns: Vec<crate::journal::event::ImportedTurn>,
        because: Option<String>,
    ) -> Result<Seq, RuntimeError> {
        let journal = match self.inner.journals.open(session).await {
            Ok(j) => j,
            Err(StoreError::UnknownSession(s)) => return Err(RuntimeError::UnknownSession(s)),
            Err(e) => return Err(RuntimeError::from(e).for_session(session)),
        };
        let payload = Payload::Lifecycle(LifecycleEvent::HistoryImported { turns, because });
        Ok(journal.append(None, payload).await?.seq)
    }

    /// The park checkpoint of a parked run (`None`: the run has none).
    pub async fn checkpoint_of(&self, run: RunId) -> Result<Option<Vec<u8>>, RuntimeError> {
        let (session, facts) = self.find_run(run).await?;
        match facts.checkpoint {
            Some(key) => Ok(Some(self.inner.store.checkpoint(&session, &key).await?)),
            None => Ok(None),
        }
    }

    /// Whether this runtime only reads its home (no lock, no writes).
    pub fn is_read_only(&self) -> bool {
        self.inner.config.read_only
    }

    /// The session's last seq.
    pub async fn last_seq(&self, session: &SessionId) -> Result<Seq, RuntimeError> {
        match self.inner.journals.open(session).await {
            Ok(j) => Ok(j.last_seq().await),
            Err(StoreError::UnknownSession(s)) => Err(RuntimeError::UnknownSession(s)),
            Err(e) => Err(e.into()),
        }
    }

    /// The last seq minted in a session, committed or not: where an
    /// observer about to start a run subscribes from (it sees what comes
    /// after, once committed) without forcing a commit of its own.
    pub async fn minted_seq(&self, session: &SessionId) -> Result<Seq, RuntimeError> {
        match self.inner.journals.open(session).await {
            Ok(j) => Ok(j.minted_seq().await),
            Err(StoreError::UnknownSession(s)) => Err(RuntimeError::UnknownSession(s)),
            Err(e) => Err(e.into()),
        }
    }

    /// The session a worker holds.
    pub fn session_of_worker(&self, worker: WorkerId) -> Result<SessionId, RuntimeError> {
        Ok(self.inner.workers.open_worker(worker)?.session_id().clone())
    }

    /// Read a session's stored entries after `after`.
    pub async fn read(
        &self,
        session: &SessionId,
        after: Seq,
    ) -> Result<Vec<JournalItem>, RuntimeError> {
        self.read_page(session, after, usize::MAX).await
    }

    /// Read at most `limit` of a session's stored entries after `after`
    /// (the store reads only those).
    pub async fn read_page(
        &self,
        session: &SessionId,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<JournalItem>, RuntimeError> {
        match self.inner.store.read(session, after, limit).await {
            Err(StoreError::UnknownSession(s)) => Err(RuntimeError::UnknownSession(s)),
            // Named relative to the home: a client never learns its path.
            Err(e) => Err(self.home_relative(RuntimeError::from(e).for_session(session))),
            Ok(items) => Ok(items),
        }
    }

    /// The workspace a session is attributed to.
    /// Read leniently: a damaged session still names its workspace when
    /// `worker.json` does, so its owner (and only its owner) learns it is
    /// corrupt.
    pub fn session_workspace(&self, session: &SessionId) -> Result<String, RuntimeError> {
        let worker = self
            .inner
            .workers
            .lookup(session)
            .map_err(|e| RuntimeError::from(e).for_session(session))?
            .ok_or_else(|| RuntimeError::UnknownSession(session.clone()))?;
        let entry = self.inner.workers.worker_entry(worker);
        match entry.workspace {
            Some(ws) => Ok(ws),
            // Nothing names its workspace any more: the host's own.
            None => Ok(self.inner.config.workspace.clone()),
        }
    }

    /// The host config.
    pub fn host_config(&self) -> &crate::config::HostConfig {
        &self.inner.config.host
    }

    /// The default workspace (for unauthenticated local use).
    pub fn default_workspace(&self) -> &str {
        &self.inner.config.workspace
    }

    /// The pending decisions, optionally of one session.
    pub fn pending_decisions(&self, session: Option<&SessionId>) -> Vec<PendingDecision> {
        self.inner.broker.pending(session)
    }

    /// Ask a live run to stop.
    pub fn cancel(
        &self,
        run: RunId,
        reason: CancelReason,
        message: &str,
    ) -> Result<(), RuntimeError> {
        let runs = self.inner.registry.runs();
        let record = runs.get(&run).ok_or(RuntimeError::UnknownRun(run))?;
        if let Some(Ok(facts)) = &*record.done.borrow() {
            return Err(RuntimeError::WrongRunState {
                run,
                state: status_name(facts.status),
                needed: "only a live run can be cancelled".into(),
            });
        }
        record.ctx.cancel(reason, message);
        Ok(())
    }

    /// Wait for a run hosted by this runtime to end; its facts.
    pub async fn wait(&self, run: RunId) -> Result<RunFacts, RuntimeError> {
        let mut done = {
            let runs = self.inner.registry.runs();
            runs.get(&run)
                .ok_or(RuntimeError::UnknownRun(run))?
                .done
                .clone()
        };
        let result = done
            .wait_for(|d| d.is_some())
            .await
            .map_err(|_| RuntimeError::RunLost(format!("run {run} ended without a result")))?
            .clone()
            .expect("waited for Some");
        result.map_err(RuntimeError::RunLost)
    }

    /// The live runs, by session.
    pub fn live_runs(&self) -> Vec<(SessionId, RunId)> {
        let sessions = self.inner.registry.sessions();
        sessions
            .iter()
            .filter_map(|(s, l)| l.live_run().map(|r| (s.clone(), r.run_id)))
            .collect()
    }
}

fn status_name(s: RunStatus) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Whether `payload` ends a run.
pub fn is_terminal(payload: &Payload) -> bool {
    matches!(payload, Payload::Lifecycle(l) if l.is_terminal())
}

/// The terminal lifecycle event's one-line reason, for people.
pub fn describe_terminal(event: &LifecycleEvent) -> String {
    match event {
        LifecycleEvent::Finished { text, outcome, .. } => match outcome {
            crate::journal::event::FinishOutcome::Answer => format!("finished: {text}"),
            crate::journal::event::FinishOutcome::Question => {
                format!("finished with a question: {text}")
            }
        },
        LifecycleEvent::Cancelled { reason, message } => {
            format!(
                "cancelled ({}): {message}",
                serde_json::to_value(reason)
                    .unwrap_or_default()
                    .as_str()
                    .unwrap_or("?")
            )
        }
        LifecycleEvent::Failed { error } => format!("failed ({}): {}", error.code, error.message),
        LifecycleEvent::Parked { checkpoint } => format!("parked (checkpoint {checkpoint})"),
        other => format!("{other:?}"),
    }
}
