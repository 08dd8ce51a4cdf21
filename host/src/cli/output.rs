//! How events read for people: one line each, `#seq` first.

use crate::journal::Delivery;
use crate::journal::event::{AgentEvent, LifecycleEvent, Payload, SessionEvent};

/// One line for an event.
pub fn line(event: &SessionEvent) -> String {
    let body = match &event.payload {
        Payload::Agent(a) => match a {
            AgentEvent::TextDelta { text } => format!("text       {}", quote(text)),
            AgentEvent::ReasoningDelta { text } => format!("reasoning  {}", quote(text)),
            AgentEvent::ToolCall {
                id,
                name,
                arguments,
            } => format!("tool call  {name} ({id}) {arguments}"),
            AgentEvent::Progress {
                message,
                done,
                total,
            } => match total {
                Some(t) => format!("progress   {message} {done}/{t}"),
                None => format!("progress   {message} {done}"),
            },
            AgentEvent::Retrying {
                attempt,
                after_ms,
                reason,
            } => {
                format!("retrying   attempt {attempt} in {after_ms} ms: {reason}")
            }
            AgentEvent::Custom { name, data } => format!("{name:<10} {data}"),
        },
        Payload::Lifecycle(l) => match l {
            LifecycleEvent::SegmentCreated { segment_id, .. } => {
                format!("segment    {segment_id} created")
            }
            LifecycleEvent::GenerationReserved { generation, .. } => {
                format!("generation {generation} reserved")
            }
            LifecycleEvent::Started {
                component, prompt, ..
            } => {
                format!(
                    "started    {} prompt {}",
                    short_digest(component),
                    quote(prompt)
                )
            }
            LifecycleEvent::ObserverAttached { observer } => format!("attached   {observer:?}"),
            LifecycleEvent::ObserverDetached { observer, because } => {
                format!("detached   {} ({because:?})", observer.id)
            }
            LifecycleEvent::ClaimsExhausted => "claims exhausted".to_string(),
            LifecycleEvent::LivenessDecided { policy } => format!("liveness   {policy:?}"),
            LifecycleEvent::DecisionRequested {
                decision_id,
                prompt,
                request_kind,
                ..
            } => {
                format!(
                    "decision?  {request_kind:?} {} [{decision_id}]",
                    quote(prompt)
                )
            }
            LifecycleEvent::ApprovalRouted { route, because, .. } => {
                format!("routed     {route:?}: {because}")
            }
            LifecycleEvent::DecisionRecorded { value, by, .. } => {
                format!("decided    {value} (by {by:?})")
            }
            LifecycleEvent::DecisionTimedOut { .. } => "decision timed out".to_string(),
            LifecycleEvent::ResumedByReplay {
                generation,
                through_seq,
            } => {
                format!("resumed by replay in generation {generation} through #{through_seq}")
            }
            LifecycleEvent::WorkerCall { call, result } => {
                let what = call["call"].as_str().unwrap_or("?");
                let answer = match result.get("error") {
                    Some(e) => format!("refused: {}", e.as_str().unwrap_or_default()),
                    None => result["ok"].to_string(),
                };
                let on = call["worker_id"]
                    .as_str()
                    .or(call["component"].as_str())
                    .unwrap_or("");
                format!("workers    {what} {on} → {answer}")
            }
            LifecycleEvent::ChildNotification {
                worker_id, status, ..
            } => format!("child      {worker_id} {status} (a hint)"),
            LifecycleEvent::HistoryImported { turns, because } => format!(
                "imported   {} turns of history{}",
                turns.len(),
                because
                    .as_deref()
                    .map(|b| format!(" ({b})"))
                    .unwrap_or_default()
            ),
            other => crate::runtime::describe_terminal(other),
        },
    };
    format!("#{:<4} {body}", event.seq.0)
}

/// One line for any delivery.
pub fn delivery(d: &Delivery) -> String {
    match d {
        Delivery::Event(e) => line(e),
        Delivery::Unknown { seq, raw } => format!("#{:<4} (unknown entry) {raw}", seq.0),
        Delivery::Gap { resumed_at } => format!("…     missed events; resuming at #{resumed_at}"),
    }
}

/// A delivery as one JSON line (the journal line itself).
pub fn json(d: &Delivery) -> String {
    match d {
        Delivery::Event(e) => e.line().to_string(),
        Delivery::Unknown { raw, .. } => raw.clone(),
        Delivery::Gap { resumed_at } => {
            serde_json::json!({ "gap": { "resumed_at": resumed_at } }).to_string()
        }
    }
}

fn short_digest(d: &str) -> &str {
    &d[..d.len().min(19)]
}

fn quote(text: &str) -> String {
    const MAX: usize = 200;
    if text.chars().count() > MAX {
        let cut: String = text.chars().take(MAX).collect();
        format!("{cut:?}… ({} bytes)", text.len())
    } else {
        format!("{text:?}")
    }
}
