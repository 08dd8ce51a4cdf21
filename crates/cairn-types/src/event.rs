//! The journal's vocabulary: one [`SessionEvent`] per line. Serde only; no
//! wasmtime here. Inner tags are `"type"` in snake_case; the envelope is
//! adjacently tagged (`{"kind": …, "event": {…}}`) so no field can collide
//! with a tag. Durations are `_ms` integers.

use crate::ids::{DecisionId, Generation, RunId, SegmentId, Seq, SessionId, WorkerId};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod agent_wire;
mod call;
mod crc;
mod kinds;
mod line;
#[doc(hidden)]
pub use line::{LinePrefix, Measured, emit_line, line_prefix};
pub mod u64_text;
pub use call::{CallError, CallErrorCode, CallUsage};
pub use crc::{check_line, unsealed};
pub use kinds::{AGENT_KINDS, REPLAYED_LIFECYCLE, replayed_kinds};

/// One entry in a session's stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionEvent {
    /// The session the entry belongs to.
    pub session_id: SessionId,
    /// The segment it was appended to.
    pub segment_id: SegmentId,
    /// The run it belongs to; absent for session-level events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// Dense per session, from 1; the only order.
    pub seq: Seq,
    /// Wall-clock milliseconds since the Unix epoch; for display only.
    pub at_ms: u64,
    /// What happened.
    pub payload: Payload,
    /// On a run's terminal event only: the run's final facts, written in the
    /// same line so no crash can leave one without the other.
    // Boxed: most entries have none, and an entry's size is what a
    // replay of a million of them allocates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts: Option<Box<RunFacts>>,
    /// The entry's journal line, once serialized (not part of the entry:
    /// a cache, so an entry is serialized once on its whole path — store,
    /// live window, every subscriber). Set it with `Default::default()`.
    /// On the wire this is the line's last field, `crc`: eight hex digits of
    /// the CRC32C of the line as written without it, checked on every read
    /// (see [`check_line`]); read and dropped when an entry is parsed.
    #[serde(
        rename = "crc",
        default,
        skip_serializing,
        deserialize_with = "LineCache::from_crc"
    )]
    #[schemars(
        rename = "crc",
        with = "Option<String>",
        description = "The line's checksum, its last field: eight lowercase hex digits of the CRC32C of every byte of the line before `,\"crc\"`. Checked on every read; lines written before checksums have none."
    )]
    pub line: LineCache,
}

impl SessionEvent {
    /// The entry's journal line (JSON, no newline): serialized on first
    /// use and kept. An entry is not changed once journaled; one changed
    /// after this was called keeps its first line.
    pub fn line(&self) -> &str {
        self.line.0.get_or_init(|| {
            let mut line = Vec::with_capacity(256);
            serde_json::to_writer(&mut line, self).expect("events serialize");
            let line = crc::seal(line);
            String::from_utf8(line)
                .expect("JSON is UTF-8")
                .into_boxed_str()
        })
    }
}

/// A serialized line kept beside an entry (see [`SessionEvent::line`]).
/// Equal to every other (it is a cache), shown as `…`.
#[derive(Clone, Default)]
pub struct LineCache(once_cell::sync::OnceCell<Box<str>>);

impl LineCache {
    /// A cache holding `line` already (see [`line::emit_line`]). Made
    /// whole, not set: an empty cache then set pays a `Once` call (std's
    /// `OnceLock::from` does too), which was 7 % of an emit's host time.
    #[doc(hidden)]
    pub fn built(line: Box<str>) -> Self {
        Self(once_cell::sync::OnceCell::with_value(line))
    }

    /// A parsed line's `crc` field is not kept (the line it sums is checked
    /// before it is parsed); the cache starts empty.
    fn from_crc<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let _: serde::de::IgnoredAny = Deserialize::deserialize(d)?;
        Ok(Self::default())
    }
}

impl PartialEq for LineCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for LineCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("…")
    }
}

/// What the controller did, or what happened to a run or the session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", content = "event", rename_all = "snake_case")]
pub enum Payload {
    /// Emitted by the controller.
    Agent(AgentEvent),
    /// Written by the runtime.
    Lifecycle(LifecycleEvent),
}

// Deserialized by `agent_wire`, which reads the tag first instead of
// buffering the object: this is the entry a replay reads most often.
/// What a controller can emit.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum AgentEvent {
    /// A piece of the answer.
    TextDelta {
        /// The text.
        text: String,
        /// Who wrote it, when not the controller: `model` for the tokens of
        /// a streamed model call, journaled by the host while it lasts.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<By>,
    },
    /// A piece of reasoning.
    ReasoningDelta {
        /// The text.
        text: String,
        /// Who wrote it, when not the controller (see `text_delta`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<By>,
    },
    /// A tool call.
    ToolCall {
        /// The controller's id for the call.
        id: String,
        /// The tool.
        name: String,
        /// Its arguments.
        arguments: serde_json::Value,
        /// Who made it, when not the controller: `model` for a tool call a
        /// streamed model call asked for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<By>,
    },
    /// Progress through a longer piece of work.
    Progress {
        /// What is happening.
        message: String,
        /// Units done.
        done: u64,
        /// Units in all, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<u64>,
    },
    /// A provider retry: the session is `Blocked { ProviderRetry }` while it lasts.
    Retrying {
        /// The attempt that comes next.
        attempt: u32,
        /// The wait before it.
        after_ms: u64,
        /// Why.
        reason: String,
    },
    /// The controller's own event.
    Custom {
        /// Its name.
        name: String,
        /// Its data.
        data: serde_json::Value,
    },
}

/// How a component update was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UpdateMode {
    /// Every ended run shadow-replayed against the new component first;
    /// switched only when all matched.
    Replay,
    /// Switched unchecked: runs before it replay with their own component.
    NextRun,
    /// The run the session had live parked (or its parked run as it is),
    /// and the new component resumed from that checkpoint: the path for a
    /// change of the checkpoint's format.
    Snapshot,
}

/// Who wrote an agent event the controller did not emit itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum By {
    /// A model call's stream, journaled by the host while the call lasted
    /// (the controller gets the whole response once the call is journaled).
    Model,
}

/// Why an observer went away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DetachCause {
    /// It let go (a dropped guard, a closed connection).
    Released,
    /// Its lease ran out.
    Expired,
    /// Another claimant took over.
    Displaced,
}

/// Why a run was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CancelReason {
    /// Its `timeout_ms` ran out.
    Deadline,
    /// Someone asked (a CLI Ctrl-C, `POST /v1/runs/{id}/cancel`).
    External,
    /// A client-side tool ended it.
    ClientTool,
    /// Its last claimant left and the liveness policy said cancel.
    Unclaimed,
    /// The host is shutting down.
    Shutdown,
}

/// What a run does when its session's last claimant detaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LivenessPolicy {
    /// Cancel it (`Cancelled { unclaimed }`).
    Cancel,
    /// Let it go on.
    Continue,
    /// Park it at its next decision wait.
    Park,
}

/// A liveness policy with its grace window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Liveness {
    /// The policy.
    pub policy: LivenessPolicy,
    /// How long to wait for a new claimant before applying it.
    #[serde(default)]
    pub grace_ms: u64,
}

/// An observer as the journal records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Observer {
    /// The observer's id, unique within the process.
    pub id: String,
    /// Collecting or claiming.
    pub role: ObserverRole,
    /// Whether a human is attending.
    pub present: bool,
}

/// What an observer may do to a run's lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ObserverRole {
    /// Reads; no effect on lifetime.
    Collecting,
    /// Holds the session's right to keep its run going.
    Claiming,
}

/// Where a decision request was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalRoute {
    /// To a present observer.
    Conversational,
    /// To an outside hook.
    Webhook,
    /// Left for any seam to answer.
    Poll,
    /// The run parks.
    Parked,
}

/// What kind of input a decision asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    /// `{"approved": bool, "reason"?: string}`.
    Approval,
    /// A tool's result.
    ToolResult,
    /// A free-form answer.
    Answer,
}

/// Who recorded a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecidedBy {
    /// An observer or API client.
    Client,
    /// The request's default, when its wait expired.
    Expiry,
}

/// Tokens, fuel and time a run used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// Agent events the run emitted.
    pub events: u64,
    /// Bytes of those events, as journaled.
    pub event_bytes: u64,
    /// Wall time from start to end.
    pub wall_ms: u64,
    /// Host calls the run made through capabilities (`host_call_*`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub host_calls: u64,
    /// Model input (prompt) tokens, summed over the run's model calls.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub input_tokens: u64,
    /// Model output (completion) tokens, summed likewise.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub output_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A failure, with a stable code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorInfo {
    /// Stable snake_case code: `controller_error`, `trap`, `limit_exceeded`,
    /// `replay_diverged`, `invalid_component`, …
    pub code: crate::failure::FailureCode,
    /// A sentence for people.
    pub message: String,
    /// Structured details (`{limit, value}`, `{seq, expected, got}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

/// How a finished run ended, as the controller said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FinishOutcome {
    /// It answered.
    Answer,
    /// It asked a clarifying question.
    Question,
}

/// Where a segment came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SegmentLineage {
    /// The parent segment.
    pub segment: SegmentId,
    /// The last parent seq the new segment carries.
    pub through_seq: Seq,
}

/// One message of imported history, as the client sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportedTurn {
    /// `user`, `assistant`, `system`, `developer` or `tool`.
    pub role: String,
    /// Its text (content parts joined; empty when it had none).
    pub text: String,
    /// An assistant message's tool calls, as the client sent them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<serde_json::Value>,
    /// A tool message's call id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// What happened to a run or the session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum LifecycleEvent {
    /// A segment begins; always its first entry.
    SegmentCreated {
        /// The new segment.
        segment_id: SegmentId,
        /// Set when it compacts an earlier one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        compacted_from: Option<SegmentLineage>,
        /// Set when it branches from an earlier one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        forked_from: Option<SegmentLineage>,
    },
    /// A compaction's summary: the first own entry of a compacted segment,
    /// standing for the parent's history through `through_seq`.
    CompactionSummary {
        /// The summary.
        text: String,
        /// The last parent seq it covers.
        through_seq: Seq,
    },
    /// Earlier conversation a client brought to a new session (a chat
    /// request's `messages` before the one it runs): history the session
    /// starts with, not runs. `history.turns` gives its user and assistant
    /// turns.
    HistoryImported {
        /// The messages, oldest first.
        turns: Vec<ImportedTurn>,
        /// Why: `resumed_by_replay` when the work queue replayed a card's
        /// transcript into a fresh worker; absent for a client's history.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        because: Option<String>,
    },
    /// This session was forked from another one, before a user message.
    ForkedFrom {
        /// The source session.
        parent_session_id: SessionId,
        /// The source's `Started` entry the fork was taken before.
        before_seq: Seq,
        /// That message, for re-editing.
        prompt: String,
    },
    /// A generation was reserved (and fsynced in `worker.json`) for a run.
    GenerationReserved {
        /// The worker.
        worker_id: WorkerId,
        /// The generation.
        generation: Generation,
    },
    /// A run started; its prompt is the user's turn.
    // Its texts are boxed strings (no spare capacity to hold): this is the
    // largest variant, and every entry is as large as it — at 240 bytes an
    // entry's shared allocation fits the allocator's 256-byte class, not
    // its 320-byte one (a memory journal keeps every entry; a replay holds
    // them all).
    Started {
        /// The component, `sha256:<hex>`.
        component: Box<str>,
        /// The user's turn.
        prompt: Box<str>,
        /// What the client offered besides the prompt (a chat request's
        /// `{"tools", "tool_choice"}`), as the JSON text the controller got.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tools: Option<Box<str>>,
        /// The run's deadline, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
        /// What happens when its last claimant leaves.
        liveness: Liveness,
        /// The generation running it.
        generation: Generation,
        /// The run it continues, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        continues: Option<RunId>,
        /// The parked run it resumes, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resumes: Option<RunId>,
        /// Should it park, the next start of the host resumes it
        /// (`resume_on_start`; absent: false).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        resume_on_start: bool,
        /// The seed of the guest's randomness, so replays see the same.
        /// Written as a decimal string, so a JSON reader that keeps numbers
        /// as doubles (a browser) keeps it exact; a number (older
        /// journals) still reads.
        #[serde(with = "u64_text")]
        #[schemars(with = "String")]
        seed: u64,
    },
    /// An observer attached.
    ObserverAttached {
        /// Who.
        observer: Observer,
    },
    /// An observer detached.
    ObserverDetached {
        /// Who.
        observer: Observer,
        /// Why.
        because: DetachCause,
    },
    /// The last claimant left while a run was live.
    ClaimsExhausted,
    /// The liveness policy was applied.
    LivenessDecided {
        /// What it decided.
        policy: LivenessPolicy,
    },
    /// The controller asked for a decision.
    DecisionRequested {
        /// Derived from (session, this seq).
        decision_id: DecisionId,
        /// What is asked for.
        request_kind: RequestKind,
        /// The question.
        prompt: String,
        /// Details for whoever decides.
        details: serde_json::Value,
        /// How long the controller waits.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
        /// The answer recorded on expiry.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        default_value: Option<serde_json::Value>,
    },
    /// The request was routed.
    ApprovalRouted {
        /// Which request.
        decision_id: DecisionId,
        /// Where to.
        route: ApprovalRoute,
        /// Why there.
        because: String,
    },
    /// A decision was recorded; the controller sees it after this line.
    DecisionRecorded {
        /// Which request.
        decision_id: DecisionId,
        /// The answer.
        value: serde_json::Value,
        /// Who answered.
        by: DecidedBy,
    },
    /// The controller's wait ended with no answer and no default.
    DecisionTimedOut {
        /// Which request.
        decision_id: DecisionId,
    },
    /// A run was restored by replaying its journal into a fresh generation.
    ResumedByReplay {
        /// The new generation.
        generation: Generation,
        /// The last journaled seq the replay fed back.
        through_seq: Seq,
    },
    /// The run finished.
    Finished {
        /// What it used.
        usage: Usage,
        /// An answer or a question.
        outcome: FinishOutcome,
        /// The final text.
        text: String,
    },
    /// The run was cancelled.
    Cancelled {
        /// Why.
        reason: CancelReason,
        /// Details for people.
        message: String,
    },
    /// The run failed.
    Failed {
        /// What went wrong.
        error: ErrorInfo,
    },
    /// The run parked; resume starts a new run from the checkpoint.
    Parked {
        /// The store key of the checkpoint (never a path).
        checkpoint: String,
    },
    /// A capability call (`cairn:model` `chat`, …) is under way. Journaled
    /// before the call goes out; `host_call_finished` with the same
    /// `call_id` carries what the guest got. A replay answers from the pair
    /// and never calls out.
    HostCallStarted {
        /// Dense per run, from 1.
        call_id: u64,
        /// The capability: `model`.
        capability: String,
        /// Its operation: `chat`.
        op: String,
        /// The request as the guest made it (names, never secrets).
        request: serde_json::Value,
    },
    /// A capability call ended; the guest sees this answer after this line.
    HostCallFinished {
        /// The call's id.
        call_id: u64,
        /// What the call returned.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response: Option<serde_json::Value>,
        /// Or why it returned nothing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<CallError>,
        /// What it used, when the capability counts (model tokens).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<CallUsage>,
    },
    /// The worker's component binding changed (`cairn update`): runs after
    /// this entry start with `to`; each run replays with the component its
    /// `started` names.
    ComponentUpdated {
        /// The digest it was bound to.
        from: String,
        /// The digest it is bound to now.
        to: String,
        /// How the switch was checked.
        mode: UpdateMode,
        /// Ended runs shadow-replayed against `to` and matched (0 in
        /// `next_run` mode).
        checked_runs: u64,
        /// The session's last seq before the switch.
        at_seq: Seq,
    },
    /// The run (the entry's `run_id`) retired: its retention window
    /// (`[retention] ended_runs_ms`) passed since it ended. Its entries stay
    /// readable; the host keeps no record of it in memory.
    RunRetired {
        /// How long it had ended, in milliseconds.
        after_ms: u64,
    },
    /// A timer the run's controller set (`wasi:clocks/monotonic-clock`'s
    /// `subscribe-*`, the `timer`-th of the run, from 1): due at `due_ms`
    /// (wall time). Journaled when it is first waited on; a restore waits
    /// until then, not a whole duration again.
    TimerSet {
        /// Its number in the run.
        timer: u64,
        /// When it is due (ms since the epoch).
        due_ms: u64,
    },
    /// That timer fired: the controller saw it ready at its `checks`-th
    /// look (a replay answers the looks before not ready), and the run's
    /// clocks moved to its due time.
    TimerFired {
        /// Its number in the run.
        timer: u64,
        /// The look it was ready at.
        checks: u64,
    },
    /// The worktree the run's generation started from (carried from the
    /// one before), as a content-addressed snapshot in the worker aggregate
    /// (`session/worktrees/`): what an offline replay lays out before it
    /// re-runs the run. Written only for a tree that is not empty.
    WorktreeRecorded {
        /// `sha256:<hex>` of its manifest.
        digest: String,
        /// Files in it.
        files: u64,
        /// Their bytes.
        bytes: u64,
    },
    /// A `workers` call (delegation) and the answer the controller got,
    /// journaled before it saw it: a replay answers the call from here and
    /// spawns nothing again.
    WorkerCall {
        /// The call: `{"call": "spawn" | "status" | "wait" | "cancel" |
        /// "register_peer" | "peers", …its arguments}`.
        call: serde_json::Value,
        /// `{"ok": …}` or `{"error": "…"}`.
        result: serde_json::Value,
    },
    /// A child's run ended: a hint for people in the parent's journal,
    /// never an input to a replay (`status`/`wait` read the child's own
    /// journal).
    ChildNotification {
        /// The child worker.
        worker_id: WorkerId,
        /// Its session.
        session_id: SessionId,
        /// Its run that ended.
        child_run_id: RunId,
        /// `finished`, `failed`, `cancelled` or `stopped`.
        status: String,
    },
}

impl LifecycleEvent {
    /// Whether this event ends a run.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            LifecycleEvent::Finished { .. }
                | LifecycleEvent::Cancelled { .. }
                | LifecycleEvent::Failed { .. }
                | LifecycleEvent::Parked { .. }
        )
    }
}

/// A run's final status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// It finished (an answer or a question).
    Finished,
    /// It failed.
    Failed,
    /// It was cancelled.
    Cancelled,
    /// It parked.
    Parked,
}

/// The persisted facts of an ended run, carried by its terminal event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunFacts {
    /// The run.
    pub run_id: RunId,
    /// Its session.
    pub session_id: SessionId,
    /// The component, `sha256:<hex>`.
    pub component: String,
    /// How it ended.
    pub status: RunStatus,
    /// For a finished run: answer or question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<FinishOutcome>,
    /// What it used.
    pub usage: Usage,
    /// When it started (ms since the epoch).
    pub started_at_ms: u64,
    /// When it ended.
    pub ended_at_ms: u64,
    /// Its first journal entry.
    pub first_seq: Seq,
    /// Its terminal entry.
    pub last_seq: Seq,
    /// The generation that ran it.
    pub generation: Generation,
    /// The checkpoint key, when parked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// Decisions still unanswered when it ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_decisions: Vec<DecisionId>,
    /// The run it continued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<RunId>,
    /// The parked run it resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumes: Option<RunId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A replay holds every entry of a session at once: an entry's size is
    /// what a million of them cost (a run's facts, on one entry in many,
    /// are boxed for that, and `Started`'s texts), and every emit
    /// allocates one.
    #[test]
    fn an_entry_stays_small() {
        let size = std::mem::size_of::<SessionEvent>();
        // Shared (`Arc`: two counts in front), within 256 bytes.
        assert!(size <= 240, "SessionEvent is {size} bytes");
    }
}
