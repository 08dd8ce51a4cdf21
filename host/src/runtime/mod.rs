//! The one in-process facade. Commands in (`start`, `decide`, `cancel`),
//! journal subscriptions out; nothing outside holds a component, a store
//! handle or a cancel token.

pub mod decisions;
mod history;
mod run;

use crate::component::{ComponentError, Components, Info, Prepared};
use crate::ids::{DecisionId, Generation, RunId, Seq, SessionId, WorkerId};
use crate::journal::event::{
    CancelReason, DecidedBy, LifecycleEvent, Liveness, LivenessPolicy, Payload, RunFacts,
};
use crate::journal::{Journals, Subscription};
use crate::store::file::FileStore;
use crate::store::memory::MemoryStore;
use crate::store::{JournalItem, Store, StoreError};
use crate::worker::{Home, WorkerError, WorkerStatus};
pub use decisions::{DecideError, PendingDecision};
use run::{RunCtx, RunPlan};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
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

/// Limits of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// Linear memory, bytes.
    pub max_memory_bytes: usize,
    /// Agent events per run.
    pub max_events: u64,
    /// Bytes of one event's payload, as journaled.
    pub max_event_bytes: u64,
    /// Bytes of a prompt.
    pub max_prompt_bytes: usize,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            max_memory_bytes: 256 << 20,
            max_events: 100_000,
            max_event_bytes: 1 << 20,
            max_prompt_bytes: 1 << 20,
        }
    }
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
    /// Per-run limits.
    pub limits: RunLimits,
}

impl RuntimeConfig {
    /// Defaults for a home: the file store, workspace `local`.
    pub fn new(home: impl Into<PathBuf>) -> Self {
        RuntimeConfig {
            home: home.into(),
            store: StoreKind::File,
            workspace: "local".into(),
            live_window: crate::journal::DEFAULT_LIVE_WINDOW,
            limits: RunLimits::default(),
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
}

impl ComponentRef {
    /// A built-in example name when it is one, else a path.
    pub fn parse(text: &str) -> Self {
        if crate::examples::built_in(text).is_some() {
            ComponentRef::BuiltIn(text.to_string())
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
    /// The component.
    pub component: ComponentRef,
    /// The user's turn.
    pub prompt: String,
    /// What happens when the last claimant leaves.
    pub liveness: Liveness,
    /// The run's deadline.
    pub timeout_ms: Option<u64>,
    /// The run this continues.
    pub continues: Option<RunId>,
    /// Whether the starter is a present human (routes decisions to it).
    pub present: bool,
}

impl StartRun {
    /// A headless run of `component` with `prompt` (liveness `continue`).
    pub fn new(component: ComponentRef, prompt: impl Into<String>) -> Self {
        StartRun {
            session: None,
            worker: None,
            component,
            prompt: prompt.into(),
            liveness: Liveness {
                policy: LivenessPolicy::Continue,
                grace_ms: 0,
            },
            timeout_ms: None,
            continues: None,
            present: false,
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

/// Why a command was refused.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The component is unusable.
    #[error(transparent)]
    Component(#[from] ComponentError),
    /// The layout on disk failed.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A decision was refused.
    #[error(transparent)]
    Decide(#[from] DecideError),
    /// The session already has a live run.
    #[error("session {session} already has a live run: {run}")]
    LiveRun {
        /// The session.
        session: SessionId,
        /// Its live run.
        run: RunId,
    },
    /// No such built-in example.
    #[error("no built-in example {name:?} (built-in: {known})")]
    UnknownExample {
        /// The name asked for.
        name: String,
        /// The names there are.
        known: String,
    },
    /// The worker is bound to another component.
    #[error(
        "worker {worker} is bound to component {bound}; this run names {given}. Replay must re-run the code that wrote the journal, so a worker keeps its component"
    )]
    ComponentMismatch {
        /// The worker.
        worker: WorkerId,
        /// Its binding.
        bound: String,
        /// The component given.
        given: String,
    },
    /// The worker is stale and may not run again.
    #[error("worker {0} is stale (a replay diverged); it is never continued")]
    Stale(WorkerId),
    /// The worker and the session given disagree.
    #[error("worker {worker} holds session {held}, not {given}")]
    SessionMismatch {
        /// The worker.
        worker: WorkerId,
        /// Its session.
        held: SessionId,
        /// The session given.
        given: SessionId,
    },
    /// The liveness policy cannot be honoured by this controller.
    #[error("unsupported_policy: the controller {name} cannot park, so liveness `park` is refused")]
    UnsupportedPolicy {
        /// The controller's name.
        name: String,
    },
    /// The request is too large.
    #[error("the prompt is {size} bytes; at most {max} are accepted")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// No such run in this process.
    #[error("no run {0} in this host")]
    UnknownRun(RunId),
    /// The run task ended without a terminal write.
    #[error("{0}")]
    RunLost(String),
}

pub(crate) struct Inner {
    home: Home,
    store: Arc<dyn Store>,
    file_store: Option<Arc<FileStore>>,
    journals: Journals,
    components: Components,
    broker: Arc<decisions::Broker>,
    /// One live run per session.
    live: Mutex<HashMap<SessionId, RunId>>,
    runs: Mutex<HashMap<RunId, LiveRecord>>,
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
    /// Open a runtime on `config.home`.
    pub fn open(config: RuntimeConfig) -> Result<Runtime, RuntimeError> {
        let home = Home::open(&config.home)?;
        let (store, file_store): (Arc<dyn Store>, _) = match config.store {
            StoreKind::File => {
                let fs = Arc::new(FileStore::new(home.clone()));
                (fs.clone(), Some(fs))
            }
            StoreKind::Memory { window } => (Arc::new(MemoryStore::new(window)), None),
        };
        let journals = Journals::new(store.clone(), config.live_window);
        Ok(Runtime {
            inner: Arc::new(Inner {
                home,
                store,
                file_store,
                journals,
                components: Components::new()?,
                broker: Arc::new(decisions::Broker::default()),
                live: Mutex::new(HashMap::new()),
                runs: Mutex::new(HashMap::new()),
                config,
            }),
        })
    }

    /// The home.
    pub fn home(&self) -> &Home {
        &self.inner.home
    }

    /// What recovery did while opening journals, for people.
    pub fn recovery_notes(&self) -> Vec<String> {
        self.inner
            .file_store
            .as_ref()
            .map(|s| s.take_notes())
            .unwrap_or_default()
    }

    async fn resolve(&self, component: &ComponentRef) -> Result<Arc<Prepared>, RuntimeError> {
        match component {
            ComponentRef::BuiltIn(name) => {
                let bytes = crate::examples::built_in(name).ok_or_else(|| {
                    RuntimeError::UnknownExample {
                        name: name.clone(),
                        known: crate::examples::names().join(", "),
                    }
                })?;
                Ok(self.inner.components.prepare(bytes).await?)
            }
            ComponentRef::Path(path) => Ok(self.inner.components.prepare_file(path).await?.0),
            ComponentRef::Bytes(bytes) => Ok(self.inner.components.prepare(bytes).await?),
        }
    }

    /// Compile and describe a component without running it.
    pub async fn describe(&self, component: &ComponentRef) -> Result<(String, Info), RuntimeError> {
        let p = self.resolve(component).await?;
        Ok((p.digest().to_string(), p.info().clone()))
    }

    /// Start a run. Returns once the run is held (Preparing); the run goes on
    /// in its own task.
    pub async fn start(&self, req: StartRun) -> Result<Started, RuntimeError> {
        let inner = &self.inner;
        if req.prompt.len() > inner.config.limits.max_prompt_bytes {
            return Err(RuntimeError::TooLarge {
                size: req.prompt.len(),
                max: inner.config.limits.max_prompt_bytes,
            });
        }
        let prepared = self.resolve(&req.component).await?;
        if req.liveness.policy == LivenessPolicy::Park && !prepared.info().can_park {
            return Err(RuntimeError::UnsupportedPolicy {
                name: prepared.info().name.clone(),
            });
        }
        // Find or make the worker.
        let existing = match (req.worker, &req.session) {
            (Some(w), _) => Some(w),
            (None, Some(s)) => inner.home.lookup(s)?,
            (None, None) => None,
        };
        let (worker, journal, previous_generation) = match existing {
            Some(worker_id) => {
                let worker = inner.home.open_worker(worker_id)?;
                if let Some(given) = &req.session
                    && given != worker.session_id()
                {
                    return Err(RuntimeError::SessionMismatch {
                        worker: worker_id,
                        held: worker.session_id().clone(),
                        given: given.clone(),
                    });
                }
                let record = worker.record()?;
                if record.status == WorkerStatus::Stale {
                    return Err(RuntimeError::Stale(worker_id));
                }
                if record.component != prepared.digest() {
                    return Err(RuntimeError::ComponentMismatch {
                        worker: worker_id,
                        bound: record.component,
                        given: prepared.digest().to_string(),
                    });
                }
                let journal = inner.journals.open(worker.session_id()).await?;
                let previous = (record.last_generation.0 > 0).then_some(record.last_generation);
                (worker, journal, previous)
            }
            None => {
                let session = req.session.clone().unwrap_or_default();
                let worker = inner.home.create_worker(
                    &session,
                    prepared.digest(),
                    &inner.config.workspace,
                )?;
                let segment = worker.metadata()?.active_segment;
                let journal = inner.journals.create(&session, segment).await?;
                (worker, journal, None::<Generation>)
            }
        };
        let session = worker.session_id().clone();
        let run_id = RunId::new();
        {
            let mut live = inner.live.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(run) = live.get(&session) {
                return Err(RuntimeError::LiveRun { session, run: *run });
            }
            live.insert(session.clone(), run_id);
        }
        let after = journal.last_seq().await;
        let ctx = Arc::new(RunCtx::new(
            run_id,
            session.clone(),
            journal,
            inner.store.clone(),
            inner.broker.clone(),
            req.present,
            inner.config.limits,
        ));
        let (done_tx, done_rx) = watch::channel(None);
        inner.runs.lock().unwrap_or_else(|p| p.into_inner()).insert(
            run_id,
            LiveRecord {
                ctx: ctx.clone(),
                done: done_rx,
            },
        );
        let worker_id = worker.id();
        let started = Started {
            run_id,
            session_id: session.clone(),
            worker_id,
            after,
            info: prepared.info().clone(),
            component: prepared.digest().to_string(),
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
            resumes: None,
            checkpoint: None,
            previous_generation,
        };
        let task_inner = self.inner.clone();
        tokio::spawn(async move {
            let facts = run::run_task(task_inner.clone(), plan).await;
            task_inner
                .live
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&session);
            let _ = done_tx.send(Some(facts));
        });
        Ok(started)
    }

    /// Follow a session from after `after`.
    pub async fn subscribe(
        &self,
        session: &SessionId,
        after: Seq,
    ) -> Result<Subscription, RuntimeError> {
        Ok(self.inner.journals.open(session).await?.subscribe(after))
    }

    /// Read a session's stored entries after `after`.
    pub async fn read(
        &self,
        session: &SessionId,
        after: Seq,
    ) -> Result<Vec<JournalItem>, RuntimeError> {
        Ok(self.inner.store.read(session, after, usize::MAX).await?)
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
        record.ctx.cancel(reason, message);
        Ok(())
    }

    /// Wait for a run started by this runtime to end; its facts.
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

    /// Whether `payload` ends a run.
    pub fn is_terminal(payload: &Payload) -> bool {
        matches!(payload, Payload::Lifecycle(l) if l.is_terminal())
    }
}

/// The terminal lifecycle event's one-line reason, for people.
pub fn describe_terminal(event: &LifecycleEvent) -> String {
    match event {
        LifecycleEvent::Finished { text, .. } => format!("finished: {text}"),
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
