//! A run seen as an A2A task. The run's journal entries, folded one at a
//! time, give the task's state and the stream's updates, in A2A 1.0's
//! ProtoJSON (camelCase fields, enum values by name): text deltas are
//! artifact updates (append), progress, reasoning and tool calls are
//! `working` status updates, a pending decision is `input-required` with
//! the request in the status message, and the end maps `finished` →
//! `completed`, a question → `input-required`, `cancelled` → `canceled`,
//! `failed` → `failed` (a parked run is `input-required` too: it waits to be
//! resumed). Task id = run id, contextId = session id.

use cairn_runtime::SessionEvent;
use cairn_runtime::ids::{RunId, SessionId};
use cairn_runtime::journal::event::{AgentEvent, FinishOutcome, LifecycleEvent, Payload};
use serde_json::{Value, json};

/// The id of the one artifact a task has: the run's text.
pub const ARTIFACT_ID: &str = "response";

/// A2A's task states cairn uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Failed,
    Canceled,
}

impl TaskState {
    /// The ProtoJSON name.
    pub fn wire(self) -> &'static str {
        match self {
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
        }
    }

    /// By ProtoJSON name (or its number).
    pub fn parse(v: &Value) -> Option<Self> {
        let all = [
            TaskState::Submitted,
            TaskState::Working,
            TaskState::Completed,
            TaskState::Failed,
            TaskState::Canceled,
            TaskState::InputRequired,
        ];
        match v {
            Value::String(s) => all.into_iter().find(|t| t.wire() == s),
            Value::Number(n) => n
                .as_u64()
                .and_then(|n| n.checked_sub(1))
                .and_then(|i| all.get(i as usize).copied()),
            _ => None,
        }
    }

    /// Completed, failed or canceled: nothing more happens to the task.
    pub fn terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled
        )
    }

    /// Where a stream of the task stops: the end, or waiting on input.
    pub fn interrupted(self) -> bool {
        self.terminal() || self == TaskState::InputRequired
    }
}

/// The task as the run's entries so far make it.
#[derive(Debug, Clone)]
pub struct TaskView {
    run: RunId,
    session: SessionId,
    prompt: Option<(u64, String)>,
    text: String,
    artifact_started: bool,
    state: TaskState,
    message: Option<Value>,
    at_ms: u64,
    pending: Vec<String>,
    component: Option<String>,
    ended: bool,
}

impl TaskView {
    /// A task of which nothing is known yet (`submitted`).
    pub fn new(run: RunId, session: SessionId) -> Self {
        TaskView {
            run,
            session,
            prompt: None,
            text: String::new(),
            artifact_started: false,
            state: TaskState::Submitted,
            message: None,
            at_ms: cairn_runtime::fsutil::now_ms(),
            pending: Vec::new(),
            component: None,
            ended: false,
        }
    }

    /// The component the run started with (`sha256:<hex>`), once seen.
    pub fn component(&self) -> Option<&str> {
        self.component.as_deref()
    }

    /// Whether the run has ended (a question or a park included).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The run.
    pub fn run(&self) -> RunId {
        self.run
    }

    /// Its session.
    pub fn session(&self) -> &SessionId {
        &self.session
    }

    /// Its state.
    pub fn state(&self) -> TaskState {
        self.state
    }

    /// The decisions it waits on, oldest first.
    pub fn pending(&self) -> &[String] {
        &self.pending
    }

    fn message(&self, seq: u64, parts: Vec<Value>, kind: &str) -> Value {
        json!({
            "messageId": format!("{}-{seq}", self.run),
            "contextId": self.session,
            "taskId": self.run,
            "role": "ROLE_AGENT",
            "parts": parts,
            "metadata": { "cairn": { "kind": kind, "seq": seq } },
        })
    }

    fn status(&self) -> Value {
        let mut status = json!({
            "state": self.state.wire(),
            "timestamp": cairn_runtime::fsutil::rfc3339_ms(self.at_ms),
        });
        if let Some(m) = &self.message {
            status["message"] = m.clone();
        }
        status
    }

    fn status_update(&self) -> Value {
        json!({ "statusUpdate": {
            "taskId": self.run,
            "contextId": self.session,
            "status": self.status(),
        }})
    }

    fn artifact_update(&mut self, text: &str, last: bool) -> Value {
        let append = self.artifact_started;
        self.artifact_started = true;
        json!({ "artifactUpdate": {
            "taskId": self.run,
            "contextId": self.session,
            "artifact": { "artifactId": ARTIFACT_ID, "name": "response", "parts": [{ "text": text }] },
            "append": append,
            "lastChunk": last,
        }})
    }

    fn set(&mut self, state: TaskState, message: Option<Value>, at_ms: u64) -> Value {
        self.state = state;
        self.message = message;
        self.at_ms = at_ms;
        self.status_update()
    }

    /// Fold one entry; returns the stream updates (`StreamResponse`s) it
    /// makes, none for an entry of another run or one A2A does not show.
    pub fn apply(&mut self, e: &SessionEvent) -> Vec<Value> {
        if e.run_id != Some(self.run) {
            return Vec::new();
        }
        let seq = e.seq.0;
        let at = e.at_ms;
        let text_part = |t: &str| json!({ "text": t });
        match &e.payload {
            Payload::Agent(AgentEvent::TextDelta { text, .. }) => {
                self.text.push_str(text);
                vec![self.artifact_update(text, false)]
            }
            Payload::Agent(AgentEvent::ReasoningDelta { text, .. }) => {
                let m = self.message(seq, vec![text_part(text)], "reasoning");
                vec![self.set(TaskState::Working, Some(m), at)]
            }
            Payload::Agent(AgentEvent::Progress {
                message,
                done,
                total,
            }) => {
                let line = match total {
                    Some(t) => format!("{message} ({done}/{t})"),
                    None => format!("{message} ({done})"),
                };
                let parts = vec![
                    text_part(&line),
                    json!({ "data": { "message": message, "done": done, "total": total } }),
                ];
                let m = self.message(seq, parts, "progress");
                vec![self.set(TaskState::Working, Some(m), at)]
            }
            Payload::Agent(AgentEvent::ToolCall {
                id,
                name,
                arguments,
                ..
            }) => {
                let parts =
                    vec![json!({ "data": { "id": id, "name": name, "arguments": arguments } })];
                let m = self.message(seq, parts, "tool_call");
                vec![self.set(TaskState::Working, Some(m), at)]
            }
            Payload::Agent(_) => Vec::new(),
            Payload::Lifecycle(l) => self.lifecycle(l, seq, at),
        }
    }

    fn lifecycle(&mut self, l: &LifecycleEvent, seq: u64, at: u64) -> Vec<Value> {
        if l.is_terminal() {
            self.ended = true;
        }
        match l {
            LifecycleEvent::Started {
                prompt, component, ..
            } => {
                self.prompt = Some((seq, prompt.to_string()));
                self.component = Some(component.to_string());
                vec![self.set(TaskState::Working, None, at)]
            }
            LifecycleEvent::ResumedByReplay { .. } => Vec::new(),
            LifecycleEvent::DecisionRequested {
                decision_id,
                request_kind,
                prompt,
                details,
                ..
            } => {
                self.pending.push(decision_id.to_string());
                let parts = vec![
                    json!({ "text": prompt }),
                    json!({ "data": {
                        "decision_id": decision_id,
                        "request_kind": request_kind,
                        "prompt": prompt,
                        "details": details,
                    }}),
                ];
                let m = self.message(seq, parts, "decision_requested");
                vec![self.set(TaskState::InputRequired, Some(m), at)]
            }
            LifecycleEvent::DecisionRecorded { decision_id, .. }
            | LifecycleEvent::DecisionTimedOut { decision_id } => {
                let id = decision_id.to_string();
                self.pending.retain(|p| *p != id);
                if self.pending.is_empty() && self.state == TaskState::InputRequired {
                    vec![self.set(TaskState::Working, None, at)]
                } else {
                    Vec::new()
                }
            }
            LifecycleEvent::Finished { outcome, text, .. } => {
                let mut out = Vec::new();
                if !self.artifact_started && !text.is_empty() {
                    self.text = text.clone();
                    out.push(self.artifact_update(text, true));
                } else if self.artifact_started {
                    out.push(self.artifact_update("", true));
                }
                let (state, message) = match outcome {
                    FinishOutcome::Answer => (TaskState::Completed, None),
                    FinishOutcome::Question => (
                        TaskState::InputRequired,
                        Some(self.message(seq, vec![json!({ "text": text })], "question")),
                    ),
                };
                self.pending.clear();
                out.push(self.set(state, message, at));
                out
            }
            LifecycleEvent::Parked { .. } => {
                let line = format!(
                    "the run parked; resume it with POST /v1/runs/{}/resume",
                    self.run
                );
                let m = self.message(seq, vec![json!({ "text": line })], "parked");
                self.pending.clear();
                vec![self.set(TaskState::InputRequired, Some(m), at)]
            }
            LifecycleEvent::Cancelled { message, .. } => {
                let m = self.message(seq, vec![json!({ "text": message })], "cancelled");
                self.pending.clear();
                vec![self.set(TaskState::Canceled, Some(m), at)]
            }
            LifecycleEvent::Failed { error } => {
                let line = format!("{}: {}", error.code, error.message);
                let m = self.message(seq, vec![json!({ "text": line })], "failed");
                self.pending.clear();
                vec![self.set(TaskState::Failed, Some(m), at)]
            }
            _ => Vec::new(),
        }
    }

    /// The `Task`, with at most `history_length` messages of history (the
    /// user's prompt, and the agent's status message).
    pub fn task(&self, history_length: Option<usize>) -> Value {
        let mut history = Vec::new();
        if let Some((seq, prompt)) = &self.prompt {
            history.push(json!({
                "messageId": format!("{}-{seq}", self.run),
                "contextId": self.session,
                "taskId": self.run,
                "role": "ROLE_USER",
                "parts": [{ "text": prompt }],
            }));
        }
        if let Some(m) = &self.message {
            history.push(m.clone());
        }
        if let Some(n) = history_length {
            let skip = history.len().saturating_sub(n);
            history.drain(..skip);
        }
        let mut task = json!({
            "id": self.run,
            "contextId": self.session,
            "status": self.status(),
            "history": history,
            "metadata": { "cairn": { "run_id": self.run, "session_id": self.session } },
        });
        if self.artifact_started || !self.text.is_empty() {
            task["artifacts"] = json!([{
                "artifactId": ARTIFACT_ID,
                "name": "response",
                "parts": [{ "text": self.text }],
            }]);
        }
        task
    }
}
