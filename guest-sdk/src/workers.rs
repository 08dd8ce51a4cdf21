//! Delegation: spawn child workers and follow them. Every answer here is
//! journaled by the host first, so a replayed run gets the same answers and
//! spawns nothing again.
use crate::__bindings::cairn::controller::workers as wit;

/// What happens to a child when nobody claims it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Liveness {
    /// It keeps running.
    #[default]
    Continue,
    /// It is cancelled.
    Cancel,
    /// It parks at its next decision wait.
    Park,
}

/// A child (or a peer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    /// Its worker id: what [`status`], [`wait`] and [`cancel`] take.
    pub worker_id: String,
    /// Its session id.
    pub session_id: String,
}

/// How a child stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildState {
    /// Its run is live.
    Running,
    /// Its run finished.
    Finished,
    /// Its run failed.
    Failed,
    /// Its run was cancelled.
    Cancelled,
    /// Its run parked or was stopped by its host.
    Stopped,
    /// It was pruned.
    Pruned,
}

/// A child's state and, once its run ended, its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildStatus {
    /// Where it stands.
    pub state: ChildState,
    /// The final text of a finished run.
    pub text: Option<String>,
    /// The error of a failed or cancelled run.
    pub error: Option<String>,
}

fn status_of(s: wit::ChildStatus) -> ChildStatus {
    ChildStatus {
        state: match s.state {
            wit::ChildState::Running => ChildState::Running,
            wit::ChildState::Finished => ChildState::Finished,
            wit::ChildState::Failed => ChildState::Failed,
            wit::ChildState::Cancelled => ChildState::Cancelled,
            wit::ChildState::Stopped => ChildState::Stopped,
            wit::ChildState::Pruned => ChildState::Pruned,
        },
        text: s.text,
        error: s.error,
    }
}

fn child_of(c: wit::Child) -> Child {
    Child {
        worker_id: c.worker_id,
        session_id: c.session_id,
    }
}

/// Spawn a child running `component` (a built-in example name or a
/// `sha256:` digest) on `prompt`, lending it `scope` — a directory of this
/// run's `artifacts/`, the child's `/loan` — if given.
pub fn spawn(component: &str, prompt: &str, scope: Option<&str>) -> Result<Child, String> {
    spawn_with(component, prompt, scope, Liveness::Continue)
}

/// [`spawn`] with a liveness policy for the child.
pub fn spawn_with(
    component: &str,
    prompt: &str,
    scope: Option<&str>,
    liveness: Liveness,
) -> Result<Child, String> {
    wit::spawn(&wit::SpawnRequest {
        component: component.to_string(),
        prompt: prompt.to_string(),
        scope: scope.map(str::to_string),
        liveness: match liveness {
            Liveness::Continue => wit::Liveness::Continue,
            Liveness::Cancel => wit::Liveness::Cancel,
            Liveness::Park => wit::Liveness::Park,
        },
    })
    .map(child_of)
}

/// A child's or a peer's state, read from its journal.
pub fn status(worker_id: &str) -> Result<ChildStatus, String> {
    wit::status(worker_id).map(status_of)
}

/// Wait at most `timeout_ms` for a child's run to end; then its state.
pub fn wait(worker_id: &str, timeout_ms: u64) -> Result<ChildStatus, String> {
    wit::wait(worker_id, timeout_ms).map(status_of)
}

/// Cancel a child's run.
pub fn cancel(worker_id: &str) -> Result<(), String> {
    wit::cancel(worker_id)
}

/// Register a worker of this workspace as a peer (status only).
pub fn register_peer(worker_id: &str) -> Result<(), String> {
    wit::register_peer(worker_id)
}

/// The registered peers.
pub fn peers() -> Vec<Child> {
    wit::peers().into_iter().map(child_of).collect()
}
