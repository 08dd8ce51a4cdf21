use crate::__bindings::cairn::controller::decisions as wit;

/// What kind of input a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// A yes/no approval.
    Approval,
    /// A tool's result.
    ToolResult,
    /// A free-form answer.
    Answer,
}

/// How a wait for a decision ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Someone decided; the value is JSON.
    Decided(serde_json::Value),
    /// Nobody answered in time and there was no default.
    TimedOut,
    /// The run was cancelled while waiting.
    Cancelled,
    /// The host asks the controller to park.
    Park,
    /// The host refused the request itself (a value nested deeper than it
    /// accepts, say); nothing was journaled, and the text says why.
    Refused(String),
}

/// Ask for a decision and wait for it. `details` is shown to whoever decides;
/// `timeout_ms` of `None` waits until answered, cancelled or parked.
pub fn request(
    kind: RequestKind,
    prompt: &str,
    details: &serde_json::Value,
    timeout_ms: Option<u64>,
    default_value: Option<&serde_json::Value>,
) -> Answer {
    let req = wit::Request {
        kind: match kind {
            RequestKind::Approval => wit::RequestKind::Approval,
            RequestKind::ToolResult => wit::RequestKind::ToolResult,
            RequestKind::Answer => wit::RequestKind::Answer,
        },
        prompt: prompt.to_string(),
        details: details.to_string(),
        timeout_ms,
        default_value: default_value.map(|v| v.to_string()),
    };
    match wit::wait(&req) {
        Ok(wit::Answer::Decided(value)) => Answer::Decided(
            serde_json::from_str(&value).unwrap_or(serde_json::Value::String(value)),
        ),
        Ok(wit::Answer::TimedOut) => Answer::TimedOut,
        Ok(wit::Answer::Cancelled) => Answer::Cancelled,
        Ok(wit::Answer::Park) => Answer::Park,
        Err(wit::WaitError::Invalid(why)) => Answer::Refused(why),
    }
}

/// The answer to an approval request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approval {
    /// Approved, perhaps with a reason.
    Approved(Option<String>),
    /// Denied, perhaps with a reason.
    Denied(Option<String>),
    /// Nobody answered in time.
    TimedOut,
    /// The run was cancelled while waiting.
    Cancelled,
    /// The host asks the controller to park.
    Park,
}

/// Ask for approval of `prompt` and wait for the answer.
pub fn request_approval(prompt: &str) -> Approval {
    match request(
        RequestKind::Approval,
        prompt,
        &serde_json::json!({}),
        None,
        None,
    ) {
        Answer::Decided(value) => {
            let reason = value
                .get("reason")
                .and_then(|r| r.as_str())
                .map(str::to_string);
            if value.get("approved").and_then(|a| a.as_bool()) == Some(true) {
                Approval::Approved(reason)
            } else {
                Approval::Denied(reason)
            }
        }
        Answer::TimedOut => Approval::TimedOut,
        Answer::Cancelled => Approval::Cancelled,
        Answer::Park => Approval::Park,
        // `{}` details are never refused; were they, nothing was approved.
        Answer::Refused(why) => Approval::Denied(Some(why)),
    }
}
