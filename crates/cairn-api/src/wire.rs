//! Request and response bodies of the HTTP API. Requests reject unknown
//! fields; every type has a JSON Schema in `/openapi.json`.

use cairn_runtime::ids::{RunId, SessionId, WorkerId};
use cairn_runtime::journal::event::{Liveness, LivenessPolicy};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `POST /v1/sessions`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// A session id of the client's choosing (any printable text up to 200
    /// bytes), or a draft's id to persist it.
    #[serde(default)]
    pub id: Option<String>,
    /// Hold the session as a draft: a stable id in memory, no directory,
    /// until its first run or an explicit persist.
    #[serde(default)]
    pub draft: bool,
}

/// A persisted session, or a draft.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CreatedSession {
    /// The session.
    pub session_id: SessionId,
    /// Its worker (absent for a draft).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<WorkerId>,
    /// Whether it is a draft.
    pub draft: bool,
}

/// `POST /v1/sessions/{id}/branch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BranchRequest {
    /// The entry of the active lineage the branch carries up to.
    pub at_seq: u64,
}

/// `POST /v1/sessions/{id}/fork`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// A user message (`started` entry): the fork carries what came before it.
    pub before_seq: u64,
    /// The new session's id (default: minted).
    #[serde(default)]
    pub id: Option<String>,
    /// Bind the fork to another component (a built-in example or the
    /// `sha256:` digest of an upload the workspace may use).
    #[serde(default)]
    pub component: Option<String>,
    /// With `component`: `replay` (default: every run the fork carries
    /// shadow-replayed first; a divergence is `409` and nothing is made)
    /// or `next_run` (unchecked).
    #[serde(default)]
    pub mode: Option<cairn_runtime::journal::event::UpdateMode>,
}

/// `POST /v1/sessions/{id}/update`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateRequest {
    /// The component to move to: a built-in example or the `sha256:` digest
    /// of an upload the workspace may use.
    pub component: String,
    /// `replay` (default: every ended run shadow-replayed first, switched
    /// only if all match) or `next_run` (unchecked).
    #[serde(default)]
    pub mode: Option<cairn_runtime::journal::event::UpdateMode>,
    /// Check only; switch nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// `POST /v1/components/{digest}/update`: every session of the workspace
/// bound to the digest, shadow-replayed against `to`; the compatible ones
/// switched unless `dry_run`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkUpdateRequest {
    /// The component to move to: a built-in example or the `sha256:` digest
    /// of an upload the workspace may use.
    pub to: String,
    /// Check only; switch nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// A liveness policy: a name, or the policy with its grace window.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum LivenessSpec {
    /// `"cancel" | "continue" | "park"`, no grace.
    Policy(LivenessPolicy),
    /// `{"policy", "grace_ms"}`.
    Full(Liveness),
}

impl LivenessSpec {
    /// As the runtime takes it.
    pub fn resolve(self) -> Liveness {
        match self {
            LivenessSpec::Policy(policy) => Liveness {
                policy,
                grace_ms: 0,
            },
            LivenessSpec::Full(l) => l,
        }
    }
}

/// `POST /v1/runs`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRunRequest {
    /// The session (absent: a new one).
    #[serde(default)]
    pub session: Option<String>,
    /// A built-in example name or `sha256:<hex>` of an uploaded component
    /// (absent: the session's own).
    #[serde(default)]
    pub component: Option<String>,
    /// The user's turn.
    #[serde(default)]
    pub prompt: String,
    /// What happens when the last claimant leaves (default: `continue`).
    #[serde(default)]
    pub liveness: Option<LivenessSpec>,
    /// The run's deadline.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// The finished run this one continues.
    #[serde(default)]
    pub continues: Option<RunId>,
    /// Limits for this run, each at most the workspace's ceiling.
    #[serde(default)]
    pub limits: Option<cairn_runtime::limits::LimitsOverride>,
    /// Should the run park, resume it at the host's next start (default:
    /// the host's `[runs] resume_on_start`).
    #[serde(default)]
    pub resume_on_start: Option<bool>,
}

/// A run that was started.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct StartedRun {
    /// The run.
    pub run_id: RunId,
    /// Its session.
    pub session_id: SessionId,
}

/// `POST /v1/runs/{id}/resume` (the body may be empty).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeRequest {
    /// The new run's liveness (default: `continue`).
    #[serde(default)]
    pub liveness: Option<LivenessSpec>,
}

/// `POST /v1/runs/{id}/cancel` answers this.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CancelAccepted {
    /// The run asked to stop.
    pub run_id: RunId,
}

/// `POST /v1/decisions/{id}`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideRequest {
    /// The answer, any JSON; an approval is `{"approved": bool, "reason"?: string}`.
    pub value: serde_json::Value,
}

/// A recorded decision.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Decided {
    /// The decision.
    pub decision_id: String,
    /// Always true: the answer is journaled.
    pub recorded: bool,
}

/// A component this server can run.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ComponentInfo {
    /// `sha256:<hex>`.
    pub digest: String,
    /// Its name, from `describe()`.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Whether it can park.
    pub can_park: bool,
    /// The built-in example name, when it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub built_in: Option<String>,
    /// `ready` (compiled: `name`, `version` and `can_park` are its
    /// `describe()`), `compiling` (an upload answered before its compile
    /// ended: those three are empty until then), or `failed` (`error` says
    /// why; a run naming it is refused the same way).
    pub state: ComponentState,
    /// Why its compile failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where a component's compile stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ComponentState {
    /// Compiled and described.
    Ready,
    /// Stored and checked; the compile goes on.
    Compiling,
    /// The compile failed.
    Failed,
}

/// `?after=&claim=&presence=` of an event stream.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Deliver entries after this seq (a `Last-Event-ID` header wins).
    #[serde(default)]
    pub after: Option<u64>,
    /// Attach as the claimant (default: collect).
    #[serde(default)]
    pub claim: Option<bool>,
    /// A human is present (routes decisions conversationally).
    #[serde(default)]
    pub presence: Option<bool>,
    /// With `claim=true`: displace the current claimant instead of being
    /// refused (`409 conflict`); it sees `observer_detached` with
    /// `because: displaced`.
    #[serde(default)]
    pub takeover: Option<bool>,
}

/// `?session=` of the pending decisions.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionsQuery {
    /// Only this session's.
    #[serde(default)]
    pub session: Option<String>,
}

/// `?limit=&cursor=` of a listing (`GET /v1/sessions`); the next page's
/// cursor comes back in the `x-next-cursor` header.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Rows per page (1–1000, default 1000).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Where to go on: the `x-next-cursor` of the page before.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `?limit=&cursor=&session=` of `GET /v1/runs`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    /// Rows per page (1–1000, default 1000).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Where to go on: the `x-next-cursor` of the page before.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Only this session's runs (all of them, oldest first).
    #[serde(default)]
    pub session: Option<String>,
}

/// The `x-next-cursor` header of a page that has a next one.
pub fn next_cursor_header(cursor: Option<String>) -> axum::http::HeaderMap {
    let mut headers = axum::http::HeaderMap::new();
    if let Some(c) = cursor.and_then(|c| c.parse().ok()) {
        headers.insert("x-next-cursor", c);
    }
    headers
}
