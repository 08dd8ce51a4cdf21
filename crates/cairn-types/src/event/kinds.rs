//! Every entry's `type` as a name, and which kinds a replay feeds back to
//! its controller: the one list restore, `cairn replay` and the browser's
//! replayer share.

use super::{AgentEvent, LifecycleEvent, Payload};

/// Every agent event's `type`.
pub const AGENT_KINDS: &[&str] = &[
    "text_delta",
    "reasoning_delta",
    "tool_call",
    "progress",
    "retrying",
    "custom",
];

/// The lifecycle entries a replay feeds back to its controller beside
/// every agent event: those that answer an import. With [`AGENT_KINDS`],
/// the one list of a run's script ([`replayed_kinds`]): restore and `cairn
/// replay` use it ([`Payload::replayed`]), and so does the browser's
/// replayer (through `cairn schema replayed`).
pub const REPLAYED_LIFECYCLE: &[&str] = &[
    "decision_requested",
    "approval_routed",
    "decision_recorded",
    "decision_timed_out",
    "worker_call",
    "host_call_started",
    "host_call_finished",
];

/// Every kind a replay feeds back: the agent events, then
/// [`REPLAYED_LIFECYCLE`].
pub fn replayed_kinds() -> Vec<&'static str> {
    AGENT_KINDS
        .iter()
        .chain(REPLAYED_LIFECYCLE)
        .copied()
        .collect()
}

impl Payload {
    /// This entry's `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Payload::Agent(a) => match a {
                AgentEvent::TextDelta { .. } => "text_delta",
                AgentEvent::ReasoningDelta { .. } => "reasoning_delta",
                AgentEvent::ToolCall { .. } => "tool_call",
                AgentEvent::Progress { .. } => "progress",
                AgentEvent::Retrying { .. } => "retrying",
                AgentEvent::Custom { .. } => "custom",
            },
            Payload::Lifecycle(l) => l.kind(),
        }
    }

    /// Whether a replay feeds this entry back ([`replayed_kinds`]).
    pub fn replayed(&self) -> bool {
        match self {
            Payload::Agent(_) => true,
            Payload::Lifecycle(l) => REPLAYED_LIFECYCLE.contains(&l.kind()),
        }
    }
}

impl LifecycleEvent {
    /// This entry's `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            LifecycleEvent::SegmentCreated { .. } => "segment_created",
            LifecycleEvent::CompactionSummary { .. } => "compaction_summary",
            LifecycleEvent::HistoryImported { .. } => "history_imported",
            LifecycleEvent::ForkedFrom { .. } => "forked_from",
            LifecycleEvent::GenerationReserved { .. } => "generation_reserved",
            LifecycleEvent::Started { .. } => "started",
            LifecycleEvent::ObserverAttached { .. } => "observer_attached",
            LifecycleEvent::ObserverDetached { .. } => "observer_detached",
            LifecycleEvent::ClaimsExhausted => "claims_exhausted",
            LifecycleEvent::LivenessDecided { .. } => "liveness_decided",
            LifecycleEvent::DecisionRequested { .. } => "decision_requested",
            LifecycleEvent::ApprovalRouted { .. } => "approval_routed",
            LifecycleEvent::DecisionRecorded { .. } => "decision_recorded",
            LifecycleEvent::DecisionTimedOut { .. } => "decision_timed_out",
            LifecycleEvent::ResumedByReplay { .. } => "resumed_by_replay",
            LifecycleEvent::Finished { .. } => "finished",
            LifecycleEvent::Cancelled { .. } => "cancelled",
            LifecycleEvent::Failed { .. } => "failed",
            LifecycleEvent::Parked { .. } => "parked",
            LifecycleEvent::HostCallStarted { .. } => "host_call_started",
            LifecycleEvent::HostCallFinished { .. } => "host_call_finished",
            LifecycleEvent::WorkerCall { .. } => "worker_call",
            LifecycleEvent::ComponentUpdated { .. } => "component_updated",
            LifecycleEvent::RunRetired { .. } => "run_retired",
            LifecycleEvent::WorktreeRecorded { .. } => "worktree_recorded",
            LifecycleEvent::TimerSet { .. } => "timer_set",
            LifecycleEvent::TimerFired { .. } => "timer_fired",
            LifecycleEvent::ChildNotification { .. } => "child_notification",
        }
    }
}
