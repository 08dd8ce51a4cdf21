//! The one in-process facade. Commands in (`create_session`, `start`,
//! `attach`, `decide`, `cancel`, `continue_run`, `resume`, `shutdown`),
//! journal subscriptions out; nothing outside holds a component, a store
//! handle or a cancel token.

mod catalog;
pub mod decisions;
mod error;
mod listing;
mod run_index;
pub mod failure;
mod history;
pub mod lineage;
mod observers;
pub mod replay;
mod run;
mod segments;
mod socket;
pub mod state;

use crate::component::{Components, Info, Prepared};
use crate::ids::{DecisionId, RunId, Seq, SessionId, WorkerId};
use crate::journal::event::{
    CancelReason, DecidedBy, LifecycleEvent, Liveness, LivenessPolicy, Payload, RunFacts, RunStatus,
};
use crate::journal::{Journals, Subscription};
use crate::store::file::FileStore;
use crate::store::memory::MemoryStore;
use crate::store::{JournalItem, Store, StoreError};
use crate::worker::{Home, WorkerDir, WorkerStatus};
pub use catalog::{Metrics, RunState, RunSummary};
pub use error::RuntimeError;
pub use listing::{MAX_PAGE, Page};
pub use decisions::{DecideError, PendingDecision};
pub use observers::{AttachSpec, Observation};
use run::{RunCtx, RunPlan};
pub use segments::{Forked, SegmentStarted};
pub use state::{AgentState, SessionSummary};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// Which store keeps journals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// The worker aggregates' JSONL segments (durable; the default).
    File,
    /// Memory only, a bounded window per session.
    Memory {
        /// Events kept per session.
        window: usize,
    },
}

/// How a runtime is set up.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The home directory (worker aggregates, index).
    pub home: PathBuf,
    /// Where journals live.
    pub store: StoreKind,
    /// The workspace new workers are attributed to.
    pub workspace: String,
    /// Live events buffered per session for subscribers.
    pub live_window: usize,
    /// Limits and workspaces (`cairn.toml`).
    pub host: crate::config::HostConfig,
    /// How long ended runs stay in memory (their journals stay on disk).
    pub retention: Duration,
    /// Restore interrupted runs by replay when the runtime opens.
    pub restore: bool,
    /// Serve `runs/<gen>/worker.sock` while a generation is live.
    pub sockets: bool,
    /// Only read the home: take no lock, repair, restore and write nothing
    /// (`ls`, `inspect`, `events`, `export`, offline `replay`).
    pub read_only: bool,
    /// What this process is, as the home lock records it (`serve`, `run`, …).
    pub command: String,
}

impl RuntimeConfig {
    /// Defaults for a home, with `cairn.toml` from the home (or `config`) read.
    pub fn load(
        home: impl Into<PathBuf>,
        config: Option<&std::path::Path>,
    ) -> Result<Self, crate::config::ConfigError> {
        let mut c = RuntimeConfig::new(home);
        let path = config
            .map(PathBuf::from)
            .unwrap_or_else(|| c.home.join("cairn.toml"));
        c.host = crate::config::HostConfig::load(&path)?;
        Ok(c)
    }

    /// Defaults for a home: the file store, workspace `local`.
    pub fn new(home: impl Into<PathBuf>) -> Self {
        RuntimeConfig {
            home: home.into(),
            store: StoreKind::File,
            workspace: "local".into(),
            live_window: crate::journal::DEFAULT_LIVE_WINDOW,
            host: crate::config::HostConfig::default(),
            retention: Duration::from_secs(600),
            restore: true,
            sockets: true,
            read_only: false,
            command: "embedded".into(),
        }
    }
}

/// Which component a run uses.
#[derive(Debug, Clone)]
pub enum ComponentRef {
    /// A built-in example, by name.
    BuiltIn(String),
    /// A component file.
    Path(PathBuf),
    /// Component bytes.
    Bytes(Arc<Vec<u8>>),
    /// A component this home stores, by digest (`sha256:<hex>`).
    Digest(String),
}

impl ComponentRef {
    /// A built-in example name, a `sha256:` digest, else a path.
    pub fn parse(text: &str) -> Self {
        if crate::examples::built_in(text).is_some() {
            ComponentRef::BuiltIn(text.to_string())
        } else if text.starts_with("sha256:") {
            ComponentRef::Digest(text.to_string())
        } else {
            ComponentRef::Path(PathBuf::from(text))
        }
    }
}

/// A request to start a run.
#[derive(Debug, Clone)]
pub struct StartRun {
    /// The session (absent: a new one, unless `worker` is given).
    pub session: Option<SessionId>,
    /// An existing worker to continue (its session, next generation).
    pub worker: Option<WorkerId>,
    /// The component (absent: the worker's own binding).
    pub component: Option<ComponentRef>,
    /// The user's turn.
    pub prompt: String,
    /// What happens when the last claimant leaves.
    pub liveness: Liveness,
    /// The run's deadline.
    pub timeout_ms: Option<u64>,
    /// The run this continues.
    pub continues: Option<RunId>,
    /// The workspace a new session is attributed to (default: the config's).
    pub workspace: Option<String>,
    /// Limits under the workspace's ceilings.
    pub limits: crate::limits::LimitsOverride,
}

impl StartRun {
    /// A headless run of `component` with `prompt` (liveness `continue`).
    pub fn new(component: ComponentRef, prompt: impl Into<String>) -> Self {
        StartRun {
            session: None,
            worker: None,
            component: Some(component),
            prompt: prompt.into(),
            liveness: Liveness {
                policy: LivenessPolicy::Continue,
                grace_ms: 0,
            },
            timeout_ms: None,
            continues: None,
            workspace: None,
            limits: Default::default(),
        }
    }
}

/// What `start` returns at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// The new run.
    pub run_id: RunId,
    /// Its session.
    pub session_id: SessionId,
    /// Its worker.
    pub worker_id: WorkerId,
    /// The session's last seq before the run: follow from here.
    pub after: Seq,
    /// What the controller said about itself.
    pub info: Info,
    /// The component digest.
    pub component: String,
}

/// A live session's in-memory record: observers, claim, live run. Never
/// serialized; a restart has none of it.
#[derive(Default)]
pub(crate) struct SessionLive {
    observers: HashMap<u64, crate::journal::event::Observer>,
    claimant: Option<u64>,
    run: Option<Arc<RunCtx>>,
    grace: Option<tokio::task::JoinHandle<()>>,
    deleting: bool,
}

pub(crate) struct Inner {
    home: Home,
    /// The home's OS lock, held while this runtime owns the home (none for
    /// a reader).
    lock: Mutex<Option<crate::home_lock::HomeLock>>,
    /// What the owner's open repaired, for people.
    recovery: Vec<String>,
    /// Run id → session and facts, without reading journals.
    run_index: run_index::RunIndex,
    store: Arc<dyn Store>,
    file_store: Option<Arc<FileStore>>,
    journals: Journals,
    components: Components,
    broker: Arc<decisions::Broker>,
    sessions: Mutex<HashMap<SessionId, SessionLive>>,
    runs: Mutex<HashMap<RunId, LiveRecord>>,
    draining: AtomicBool,
    /// Set when shutdown begins: followers' streams end.
    closing: watch::Sender<bool>,
    restored: Mutex<Vec<RunId>>,
    /// Draft sessions: a stable id in memory, with its workspace.
    drafts: Mutex<HashMap<SessionId, String>>,
    /// Ended runs since start: finished, failed, cancelled, parked.
    ended: [std::sync::atomic::AtomicU64; 4],
    config: RuntimeConfig,
}

struct LiveRecord {
    ctx: Arc<RunCtx>,
    done: watch::Receiver<Option<Result<RunFacts, String>>>,
}

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
    /// Open a runtime on `config.home`. With `config.restore`, interrupted
    /// runs found there are restored by replay (see [`Runtime::restored`]).
    pub async fn open(config: RuntimeConfig) -> Result<Runtime, RuntimeError> {
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
        let home = match read_only {
            true => Home::open_existing(&config.home)?,
            false => Home::open(&config.home)?,
        };
        let recovery = match read_only {
            true => Vec::new(),
            false => home.recover().notes(),
        };
        let (store, file_store): (Arc<dyn Store>, _) = match config.store {
            StoreKind::File => {
                let fs = Arc::new(match read_only {
                    true => FileStore::read_only(home.clone()),
                    false => FileStore::new(home.clone()),
                });
                (fs.clone(), Some(fs))
            }
            StoreKind::Memory { window } => (Arc::new(MemoryStore::new(window)), None),
        };
        let journals = Journals::new(store.clone(), config.live_window);
        let restore = config.restore && file_store.is_some() && !read_only;
        let rt = Runtime {
            inner: Arc::new(Inner {
                home,
                lock: Mutex::new(lock),
                recovery,
                run_index: Default::default(),
                store,
                file_store,
                journals,
                components: Components::new(
                    config.host.pool.instances,
                    config.host.limits.memory_bytes,
                )?,
                broker: Arc::new(decisions::Broker::default()),
                sessions: Mutex::new(HashMap::new()),
                runs: Mutex::new(HashMap::new()),
                draining: AtomicBool::new(false),
                closing: watch::channel(false).0,
                restored: Mutex::new(Vec::new()),
                drafts: Mutex::new(HashMap::new()),
                ended: Default::default(),
                config,
            }),
        };
        if restore {
            replay::restore_all(&rt).await?;
        }
        Ok(rt)
    }

    /// The home.
    pub fn home(&self) -> &Home {
        &self.inner.home
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

    async fn resolve(
        &self,
        component: &ComponentRef,
    ) -> Result<(Arc<Prepared>, Option<Cow<'static, [u8]>>), RuntimeError> {
        match component {
            ComponentRef::BuiltIn(name) => {
                let unknown = || RuntimeError::UnknownExample {
                    name: name.clone(),
                    known: crate::examples::names().join(", "),
                };
                let bytes = crate::examples::built_in(name).ok_or_else(unknown)?;
                // A warm start hashes nothing: the digest is memoised.
                let digest = crate::examples::built_in_digest(name).ok_or_else(unknown)?;
                let prepared = match self.inner.components.cached(digest) {
                    Some(p) => p,
                    None => self.inner.components.prepare(bytes).await?,
                };
                Ok((prepared, Some(Cow::Borrowed(bytes))))
            }
            ComponentRef::Path(path) => {
                let (p, bytes) = self.inner.components.prepare_file(path).await?;
                Ok((p, Some(Cow::Owned(bytes))))
            }
            ComponentRef::Bytes(bytes) => Ok((
                self.inner.components.prepare(bytes).await?,
                Some(Cow::Owned(bytes.to_vec())),
            )),
            ComponentRef::Digest(digest) => {
                if let Some(p) = self.inner.components.cached(digest) {
                    return Ok((p, None));
                }
                let bytes = self
                    .component_bytes(digest)
                    .ok_or_else(|| RuntimeError::UnknownComponent(digest.clone()))?;
                Ok((self.inner.components.prepare(&bytes).await?, None))
            }
        }
    }

    /// A component's bytes by digest: stored in this home, or built in.
    pub fn component_bytes(&self, digest: &str) -> Option<Vec<u8>> {
        self.inner.home.component(digest).or_else(|| {
            crate::examples::BUILT_IN
                .iter()
                .find(|(_, b)| crate::component::digest_of(b) == digest)
                .map(|(_, b)| b.to_vec())
        })
    }

    /// Compile, validate and describe a component, and keep it in this home.
    pub async fn add_component(
        &self,
        component: &ComponentRef,
    ) -> Result<(String, Info), RuntimeError> {
        let (p, bytes) = self.resolve(component).await?;
        if let Some(bytes) = bytes {
            self.inner.home.put_component(p.digest(), &bytes)?;
        }
        Ok((p.digest().to_string(), p.info().clone()))
    }

    /// Hold a draft session: a stable id in memory, no directory. Its first
    /// run (or [`Runtime::create_session_in`] with its id) persists it.
    pub fn create_draft(
        &self,
        id: Option<SessionId>,
        workspace: &str,
    ) -> Result<SessionId, RuntimeError> {
        let session = id.unwrap_or_default();
        let mut drafts = self.inner.drafts.lock().unwrap_or_else(|p| p.into_inner());
        if drafts.contains_key(&session) || self.inner.home.lookup(&session)?.is_some() {
            return Err(RuntimeError::SessionExists(session));
        }
        drafts.insert(session.clone(), workspace.to_string());
        Ok(session)
    }

    /// The workspace of a draft, if `session` is one.
    pub fn draft_workspace(&self, session: &SessionId) -> Option<String> {
        self.inner
            .drafts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
            .cloned()
    }

    /// Persist a new session (and its worker) now, in the default workspace.
    pub async fn create_session(
        &self,
        id: Option<SessionId>,
    ) -> Result<(SessionId, WorkerId), RuntimeError> {
        let workspace = self.inner.config.workspace.clone();
        self.create_session_in(id, &workspace).await
    }

    /// Persist a new session (and its worker) now, in `workspace`; no
    /// component yet.
    pub async fn create_session_in(
        &self,
        id: Option<SessionId>,
        workspace: &str,
    ) -> Result<(SessionId, WorkerId), RuntimeError> {
        let session = id.unwrap_or_default();
        if self.inner.home.lookup(&session)?.is_some() {
            return Err(RuntimeError::SessionExists(session));
        }
        let worker = self.inner.home.create_worker(&session, None, workspace)?;
        // Staged until its first entry is durable; a failure undoes it, a
        // crash leaves it to the next owner to roll back.
        let created = async {
            let segment = worker.metadata()?.active_segment;
            self.inner.journals.create(&session, segment).await?;
            crate::fsutil::crash_point("create-before-publish");
            worker.publish()?;
            Ok::<_, RuntimeError>(())
        }
        .await;
        if let Err(e) = created {
            self.inner.journals.close(&session);
            if let Some(fs) = &self.inner.file_store {
                fs.forget(&session);
            }
            self.inner.home.discard_staged(&worker);
            return Err(e);
        }
        self.inner
            .drafts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&session);
        Ok((session, worker.id()))
    }

    fn open_worker_of(&self, session: &SessionId) -> Result<WorkerDir, RuntimeError> {
        let id = self
            .inner
            .home
            .lookup(session)?
            .ok_or_else(|| RuntimeError::UnknownSession(session.clone()))?;
        Ok(self.inner.home.open_worker(id)?)
    }

    /// Start a run. Returns once the run is held (Preparing); it goes on in
    /// its own task.
    pub async fn start(&self, req: StartRun) -> Result<Started, RuntimeError> {
        self.start_inner(req, None).await
    }

    async fn start_inner(
        &self,
        req: StartRun,
        resume: Option<(RunId, Vec<u8>)>,
    ) -> Result<Started, RuntimeError> {
        let inner = &self.inner;
        if inner.draining.load(Ordering::SeqCst) {
            return Err(RuntimeError::ShuttingDown);
        }
        let max_prompt = inner.config.host.limits.prompt_bytes;
        if req.prompt.len() as u64 > max_prompt {
            return Err(RuntimeError::TooLarge {
                size: req.prompt.len(),
                max: max_prompt as usize,
            });
        }
        // A component named by the request is checked before anything is laid out.
        let named = match &req.component {
            Some(c) => Some(self.resolve(c).await?),
            None => None,
        };
        // Find or make the worker.
        let existing = match (req.worker, &req.session) {
            (Some(w), _) => Some(w),
            (None, Some(s)) => inner.home.lookup(s)?,
            (None, None) => None,
        };
        let worker = match existing {
            Some(worker_id) => {
                let worker = inner.home.open_worker(worker_id).map_err(|e| match &req.session {
                    Some(s) => RuntimeError::from(e).for_session(s),
                    None => e.into(),
                })?;
                if let Some(given) = &req.session
                    && given != worker.session_id()
                {
                    return Err(RuntimeError::SessionMismatch {
                        worker: worker_id,
                        held: worker.session_id().clone(),
                        given: given.clone(),
                    });
                }
                worker
            }
            None => {
                let workspace = req
                    .workspace
                    .clone()
                    .unwrap_or_else(|| inner.config.workspace.clone());
                let (_, worker) = self
                    .create_session_in(req.session.clone(), &workspace)
                    .await?;
                inner.home.open_worker(worker)?
            }
        };
        let session = worker.session_id().clone();
        let record = worker
            .record()
            .map_err(|e| RuntimeError::from(e).for_session(&session))?;
        if let Some(ws) = &req.workspace
            && *ws != record.workspace
        {
            // Another workspace's session is not there for this caller.
            return Err(RuntimeError::UnknownSession(session));
        }
        let limits = inner
            .config
            .host
            .ceilings(&record.workspace)
            .with(&req.limits)?;
        if req.prompt.len() as u64 > limits.prompt_bytes {
            return Err(RuntimeError::TooLarge {
                size: req.prompt.len(),
                max: limits.prompt_bytes as usize,
            });
        }
        if record.status == WorkerStatus::Stale {
            return Err(RuntimeError::Stale(worker.id()));
        }
        let (prepared, bytes) = match (named, &record.component) {
            (Some(named), _) => named,
            (None, Some(bound)) => self.resolve(&ComponentRef::Digest(bound.clone())).await?,
            (None, None) => return Err(RuntimeError::NoComponent(session)),
        };
        match &record.component {
            Some(bound) if bound != prepared.digest() => {
                return Err(RuntimeError::ComponentMismatch {
                    worker: worker.id(),
                    bound: bound.clone(),
                    given: prepared.digest().to_string(),
                });
            }
            Some(_) => {}
            None => {
                if let Some(bytes) = &bytes {
                    inner.home.put_component(prepared.digest(), bytes)?;
                }
            }
        }
        // An unbound worker is bound with its generation's reservation.
        let bind = record
            .component
            .is_none()
            .then(|| prepared.digest().to_string());
        if req.liveness.policy == LivenessPolicy::Park && !prepared.info().can_park {
            return Err(RuntimeError::UnsupportedPolicy {
                name: prepared.info().name.clone(),
            });
        }
        let journal = inner
            .journals
            .open(&session)
            .await
            .map_err(|e| RuntimeError::from(e).for_session(&session))?;
        let run_id = RunId::new();
        // The worktree carries over from the last generation (generation 0
        // is the worktree a fork brought along, when there is one).
        let previous_generation = Some(record.last_generation);
        let ctx = Arc::new(RunCtx::new(
            run_id,
            session.clone(),
            journal.clone(),
            inner.store.clone(),
            inner.broker.clone(),
            req.liveness,
            limits,
        ));
        // One live run per session: held from this moment (Preparing). A
        // run whose terminal entry is being written is waited for (briefly):
        // whoever saw its end may start the next one at once.
        let mut waited = false;
        loop {
            let finishing = {
                let mut sessions = inner.sessions.lock().unwrap_or_else(|p| p.into_inner());
                let live = sessions.entry(session.clone()).or_default();
                if live.deleting {
                    return Err(RuntimeError::UnknownSession(session));
                }
                match live.run.as_ref().filter(|r| !r.ended.load(Ordering::SeqCst)) {
                    Some(run) if run.finishing.load(Ordering::SeqCst) && !waited => {
                        Some(run.run_id)
                    }
                    Some(run) => {
                        return Err(RuntimeError::LiveRun {
                            session,
                            run: run.run_id,
                        });
                    }
                    None => {
                        ctx.set_present(live.observers.values().any(|o| o.present));
                        live.run = Some(ctx.clone());
                        None
                    }
                }
            };
            match finishing {
                Some(run) => {
                    waited = true;
                    let _ = tokio::time::timeout(Duration::from_secs(5), self.wait(run)).await;
                }
                None => break,
            }
        }
        inner
            .run_index
            .started(run_id, &session, &record.workspace);
        let after = journal.last_seq().await;
        let worker_id = worker.id();
        let started = Started {
            run_id,
            session_id: session.clone(),
            worker_id,
            after,
            info: prepared.info().clone(),
            component: prepared.digest().to_string(),
        };
        let (durable_tx, durable_rx) = tokio::sync::oneshot::channel();
        let (resumes, checkpoint) = match resume {
            Some((r, c)) => (Some(r), Some(c)),
            None => (None, None),
        };
        let plan = RunPlan {
            ctx,
            worker,
            worker_id,
            prepared,
            prompt: req.prompt,
            liveness: req.liveness,
            timeout_ms: req.timeout_ms,
            continues: req.continues,
            resumes,
            checkpoint,
            previous_generation,
            bind,
            generation_floor: Some(journal.last_generation().await),
            replay: None,
            durable: Some(durable_tx),
        };
        self.spawn_run(plan);
        // Answer only once the run's first batch is durable, so an accepted
        // run id never disappears in a crash.
        if durable_rx.await.is_err() {
            // The run ended before its first entries were written.
            if let Err(RuntimeError::RunLost(message)) = self.wait(run_id).await {
                return Err(RuntimeError::Storage(message));
            }
        }
        Ok(started)
    }

    pub(crate) fn spawn_run(&self, plan: RunPlan) {
        let (done_tx, done_rx) = watch::channel(None);
        let run_id = plan.ctx.run_id;
        let session = plan.ctx.session.clone();
        self.inner
            .runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                run_id,
                LiveRecord {
                    ctx: plan.ctx.clone(),
                    done: done_rx,
                },
            );
        let rt = self.clone();
        tokio::spawn(async move {
            let facts = run::run_task(rt.clone(), plan).await;
            if let Ok(f) = &facts {
                rt.inner.run_index.ended(f);
                let i = match f.status {
                    RunStatus::Finished => 0,
                    RunStatus::Failed => 1,
                    RunStatus::Cancelled => 2,
                    RunStatus::Parked => 3,
                };
                rt.inner.ended[i].fetch_add(1, Ordering::Relaxed);
            }
            {
                let mut sessions = rt.inner.sessions.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(live) = sessions.get_mut(&session) {
                    if live.run.as_ref().is_some_and(|r| r.run_id == run_id) {
                        live.run = None;
                    }
                    if let Some(g) = live.grace.take() {
                        g.abort();
                    }
                }
            }
            let _ = done_tx.send(Some(facts));
            // Ended runs stay readable here for the retention window.
            let retention = rt.inner.config.retention;
            let weak = Arc::downgrade(&rt.inner);
            drop(rt);
            tokio::time::sleep(retention).await;
            if let Some(inner) = weak.upgrade() {
                inner
                    .runs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&run_id);
            }
        });
    }

    /// Start a new run after `run` (which finished, with an answer or a
    /// question) in the same session; `continues` records the lineage.
    pub async fn continue_run(
        &self,
        run: RunId,
        prompt: String,
        liveness: Liveness,
    ) -> Result<Started, RuntimeError> {
        let (session, facts) = self.find_run(run).await?;
        if facts.status != RunStatus::Finished {
            return Err(RuntimeError::WrongRunState {
                run,
                state: status_name(facts.status),
                needed: "only a finished run can be continued".into(),
            });
        }
        let mut req = StartRun {
            session: Some(session),
            worker: None,
            component: None,
            prompt,
            liveness,
            timeout_ms: None,
            continues: Some(run),
            workspace: None,
            limits: Default::default(),
        };
        req.component = None;
        self.start(req).await
    }

    /// Start a NEW run in the same session that receives `run`'s park
    /// checkpoint.
    pub async fn resume(
        &self,
        run: RunId,
        liveness: Option<Liveness>,
    ) -> Result<Started, RuntimeError> {
        let (session, facts) = self.find_run(run).await?;
        let Some(key) = facts
            .checkpoint
            .clone()
            .filter(|_| facts.status == RunStatus::Parked)
        else {
            return Err(RuntimeError::WrongRunState {
                run,
                state: status_name(facts.status),
                needed: "only a parked run can be resumed".into(),
            });
        };
        let checkpoint = self.inner.store.checkpoint(&session, &key).await?;
        let req = StartRun {
            session: Some(session),
            worker: None,
            component: None,
            prompt: String::new(),
            liveness: liveness.unwrap_or(Liveness {
                policy: LivenessPolicy::Continue,
                grace_ms: 0,
            }),
            timeout_ms: None,
            continues: None,
            workspace: None,
            limits: Default::default(),
        };
        self.start_inner(req, Some((run, checkpoint))).await
    }

    /// The session and facts of an ended run, from memory or the journal.
    pub async fn find_run(&self, run: RunId) -> Result<(SessionId, RunFacts), RuntimeError> {
        let live = {
            let runs = self.inner.runs.lock().unwrap_or_else(|p| p.into_inner());
            runs.get(&run)
                .map(|r| (r.ctx.session.clone(), r.done.borrow().clone()))
        };
        if let Some((session, done)) = live {
            return match done {
                Some(Ok(facts)) => Ok((session, facts)),
                _ => Err(RuntimeError::WrongRunState {
                    run,
                    state: "live".into(),
                    needed: "it has not ended".into(),
                }),
            };
        }
        match self.run_index().await?.get(run) {
            Some(run_index::IndexedRun {
                session,
                facts: Some(facts),
                ..
            }) => Ok((session, facts)),
            Some(_) => Err(RuntimeError::WrongRunState {
                run,
                state: "interrupted".into(),
                needed: "it has not ended (it is restored when its home's owner opens it)".into(),
            }),
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

    /// The session's last seq.
    pub async fn last_seq(&self, session: &SessionId) -> Result<Seq, RuntimeError> {
        match self.inner.journals.open(session).await {
            Ok(j) => Ok(j.last_seq().await),
            Err(StoreError::UnknownSession(s)) => Err(RuntimeError::UnknownSession(s)),
            Err(e) => Err(e.into()),
        }
    }

    /// The session a worker holds.
    pub fn session_of_worker(&self, worker: WorkerId) -> Result<SessionId, RuntimeError> {
        Ok(self.inner.home.open_worker(worker)?.session_id().clone())
    }

    /// Read a session's stored entries after `after`.
    pub async fn read(
        &self,
        session: &SessionId,
        after: Seq,
    ) -> Result<Vec<JournalItem>, RuntimeError> {
        match self.inner.store.read(session, after, usize::MAX).await {
            Err(StoreError::UnknownSession(s)) => Err(RuntimeError::UnknownSession(s)),
            Err(e) => Err(RuntimeError::from(e).for_session(session)),
            Ok(items) => Ok(items),
        }
    }

    /// Answer a decision (journaled before the controller sees it).
    pub async fn decide(
        &self,
        id: &DecisionId,
        value: serde_json::Value,
    ) -> Result<(), RuntimeError> {
        Ok(self
            .inner
            .broker
            .decide(id, value, DecidedBy::Client)
            .await?)
    }

    /// The session a decision belongs to, when this host knows it.
    pub fn session_of_decision(&self, id: &DecisionId) -> Option<SessionId> {
        self.inner.broker.session_of(id)
    }

    /// The workspace a session is attributed to.
    /// Read leniently: a damaged session still names its workspace when
    /// `worker.json` does, so its owner (and only its owner) learns it is
    /// corrupt.
    pub fn session_workspace(&self, session: &SessionId) -> Result<String, RuntimeError> {
        let worker = self
            .inner
            .home
            .lookup(session)
            .map_err(|e| RuntimeError::from(e).for_session(session))?
            .ok_or_else(|| RuntimeError::UnknownSession(session.clone()))?;
        let entry = self.inner.home.worker_entry(worker);
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
        let runs = self.inner.runs.lock().unwrap_or_else(|p| p.into_inner());
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
            let runs = self.inner.runs.lock().unwrap_or_else(|p| p.into_inner());
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
        let sessions = self
            .inner
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        sessions
            .iter()
            .filter_map(|(s, l)| l.run.as_ref().map(|r| (s.clone(), r.run_id)))
            .collect()
    }

    /// Set once shutdown begins (followers end their streams on it).
    pub fn closing(&self) -> watch::Receiver<bool> {
        self.inner.closing.subscribe()
    }

    /// Begin a shutdown without waiting: refuse new starts, end followers'
    /// streams, and cancel live runs (or park those whose policy is `park`).
    pub fn begin_shutdown(&self) {
        self.cancel_for_shutdown();
    }

    fn cancel_for_shutdown(&self) -> Vec<Arc<RunCtx>> {
        self.inner.draining.store(true, Ordering::SeqCst);
        self.inner.closing.send_replace(true);
        let live: Vec<Arc<RunCtx>> = {
            let runs = self.inner.runs.lock().unwrap_or_else(|p| p.into_inner());
            runs.values().map(|r| r.ctx.clone()).collect()
        };
        for ctx in &live {
            if ctx.liveness.policy == LivenessPolicy::Park {
                ctx.request_park("the host is shutting down");
            } else {
                ctx.cancel(CancelReason::Shutdown, "the host is shutting down");
            }
        }
        live
    }

    /// Drain: [`Runtime::begin_shutdown`], then wait (at most `wait`) for
    /// every controller, remove their sockets, and give the home lock up.
    pub async fn shutdown(&self, wait: Duration) {
        let live = self.cancel_for_shutdown();
        let waits = live.iter().map(|ctx| {
            let rt = self.clone();
            let run = ctx.run_id;
            async move {
                let _ = rt.wait(run).await;
            }
        });
        let all = futures_join_all(waits);
        if tokio::time::timeout(wait, all).await.is_err() {
            for ctx in &live {
                ctx.cancel(CancelReason::Shutdown, "the host is shutting down");
            }
            // Give controllers that ignore the cancel their grace to trap.
            let _ = tokio::time::timeout(
                run::CANCEL_GRACE * 6,
                futures_join_all(live.iter().map(|ctx| {
                    let rt = self.clone();
                    let run = ctx.run_id;
                    async move {
                        let _ = rt.wait(run).await;
                    }
                })),
            )
            .await;
        }
        // Drained: this runtime no longer owns the home.
        self.release_home();
    }
}

async fn futures_join_all<F: std::future::Future<Output = ()>>(futs: impl Iterator<Item = F>) {
    let mut set = Vec::new();
    for f in futs {
        set.push(Box::pin(f));
    }
    for f in set {
        f.await;
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
