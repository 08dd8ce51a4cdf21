//! How a runtime is set up, and what a start asks for and gets back.

use crate::component::Info;
use crate::ids::{RunId, Seq, SessionId, WorkerId};
use crate::journal::event::{Liveness, LivenessPolicy};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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
    /// Bytes (as journaled) buffered per session, at most (the newest
    /// entry is always held).
    pub live_window_bytes: u64,
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
        c.retention = Duration::from_millis(c.host.retention.ended_runs_ms);
        Ok(c)
    }

    /// Defaults for a home: the file store, workspace `local`.
    pub fn new(home: impl Into<PathBuf>) -> Self {
        RuntimeConfig {
            home: home.into(),
            store: StoreKind::File,
            workspace: HOST_WORKSPACE.into(),
            live_window: crate::journal::DEFAULT_LIVE_WINDOW,
            live_window_bytes: crate::journal::DEFAULT_LIVE_WINDOW_BYTES,
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
        Self::named(text).unwrap_or_else(|| ComponentRef::Path(PathBuf::from(text)))
    }

    /// A built-in example name or a `sha256:` digest; never a path (what a
    /// name from the wire, a queue card or a guest may be).
    pub fn named(text: &str) -> Option<Self> {
        if cairn_examples::built_in(text).is_some() {
            Some(ComponentRef::BuiltIn(text.to_string()))
        } else if text.starts_with("sha256:") {
            Some(ComponentRef::Digest(text.to_string()))
        } else {
            None
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
    /// What the client offered besides the prompt (a chat request's tools),
    /// as JSON text; journaled in `Started` and given to the controller.
    pub tools: Option<String>,
    /// When the run's first entries are committed.
    pub first_commit: FirstCommit,
    /// Should it park, resume it at the host's next start (`None`: the
    /// host's `[runs] resume_on_start`).
    pub resume_on_start: Option<bool>,
}

/// When a run's first entries (its generation's reservation and `Started`)
/// are committed. Either way [`crate::Runtime::start`] answers only once
/// they are durable, and they are committed before anything that depends
/// on them (every entry after them is committed after them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FirstCommit {
    /// Before the controller is instantiated (`POST /v1/runs`: its `202`
    /// comes as soon as it can).
    #[default]
    Now,
    /// With the run's next commit — its first input, its end — or within
    /// [`crate::journal::COMMIT_DELAY`], while the controller starts: a
    /// caller that waits for the run anyway (chat, `cairn run`) gets a
    /// short run's start, events and end in one write and one sync.
    WithRun,
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
            tools: None,
            first_commit: FirstCommit::Now,
            resume_on_start: None,
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

pub use crate::config::HOST_WORKSPACE;
