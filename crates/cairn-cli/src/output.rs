//! How events read for people: one line each, `#seq` first.

use cairn_runtime::journal::Delivery;
use cairn_runtime::journal::event::{AgentEvent, LifecycleEvent, Payload, SessionEvent};

/// One line for an event.
pub fn line(event: &SessionEvent) -> String {
    let body = match &event.payload {
        Payload::Agent(a) => match a {
            AgentEvent::TextDelta { text, by: None } => format!("text       {}", quote(text)),
            AgentEvent::TextDelta { text, by: Some(_) } => {
                format!("model      {}", quote(text))
            }
            AgentEvent::ReasoningDelta { text, by } => format!(
                "{}  {}",
                if by.is_some() {
                    "model thinks"
                } else {
                    "reasoning"
                },
                quote(text)
            ),
            AgentEvent::ToolCall {
                id,
                name,
                arguments,
                by,
            } => format!(
                "{}  {name} ({id}) {arguments}",
                if by.is_some() {
                    "model asks"
                } else {
                    "tool call"
                }
            ),
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
            LifecycleEvent::ObserverAttached { observer } => format!(
                "attached   {} ({}{})",
                observer.id,
                wire(&observer.role),
                if observer.present { ", present" } else { "" }
            ),
            LifecycleEvent::ObserverDetached { observer, because } => {
                format!("detached   {} ({})", observer.id, wire(because))
            }
            LifecycleEvent::ClaimsExhausted => "claims exhausted".to_string(),
            LifecycleEvent::LivenessDecided { policy } => format!("liveness   {}", wire(policy)),
            LifecycleEvent::DecisionRequested {
                decision_id,
                prompt,
                request_kind,
                ..
            } => {
                format!(
                    "decision?  {} {} [{decision_id}]",
                    wire(request_kind),
                    quote(prompt)
                )
            }
            LifecycleEvent::ApprovalRouted { route, because, .. } => {
                format!("routed     {}: {because}", wire(route))
            }
            LifecycleEvent::DecisionRecorded { value, by, .. } => {
                format!("decided    {value} (by {})", wire(by))
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
            LifecycleEvent::HostCallStarted {
                call_id,
                capability,
                op,
                request,
            } => {
                let on = ["model", "component", "worker_id"]
                    .iter()
                    .find_map(|k| request[*k].as_str())
                    .map(|w| format!(" {w}"))
                    .unwrap_or_default();
                format!("call {call_id:<5} {capability} {op}{on}")
            }
            LifecycleEvent::HostCallFinished {
                call_id,
                response,
                error,
                usage,
            } => match (error, response) {
                (Some(e), _) => format!("call {call_id:<5} → {}: {}", e.code.as_str(), e.message),
                (None, Some(r)) if r.get("finish_reason").is_some() => {
                    let calls = r["tool_calls"].as_array().map_or(0, Vec::len);
                    let tokens = usage
                        .map(|u| {
                            format!(" ({} in, {} out tokens)", u.input_tokens, u.output_tokens)
                        })
                        .unwrap_or_default();
                    match calls {
                        0 => format!(
                            "call {call_id:<5} → {}{tokens}",
                            quote(r["text"].as_str().unwrap_or_default())
                        ),
                        n => format!("call {call_id:<5} → {n} tool call(s){tokens}"),
                    }
                }
                (None, Some(r)) => format!("call {call_id:<5} → {r}"),
                (None, None) => format!("call {call_id:<5} → (nothing)"),
            },
            LifecycleEvent::ComponentUpdated {
                from,
                to,
                mode,
                checked_runs,
                ..
            } => format!(
                "update     {from} → {to} ({}, {checked_runs} runs checked)",
                match mode {
                    cairn_runtime::journal::event::UpdateMode::Replay => "replay",
                    cairn_runtime::journal::event::UpdateMode::NextRun => "next run",
                    cairn_runtime::journal::event::UpdateMode::Snapshot => "snapshot",
                }
            ),
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
            other => cairn_runtime::runtime::describe_terminal(other),
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

/// A value as the journal spells it (`claiming`, `displaced`), never a
/// Rust debug form.
fn wire<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_runtime::journal::event::{DetachCause, Observer, ObserverRole};

    fn entry(payload: Payload) -> SessionEvent {
        SessionEvent {
            session_id: cairn_runtime::ids::SessionId::parse("s-1").unwrap(),
            segment_id: cairn_runtime::ids::SegmentId::new(),
            run_id: None,
            seq: cairn_runtime::ids::Seq(7),
            at_ms: 0,
            payload,
            facts: None,
            line: Default::default(),
        }
    }

    #[test]
    fn observers_read_as_the_journal_spells_them() {
        let observer = Observer {
            id: "o1".into(),
            role: ObserverRole::Claiming,
            present: true,
        };
        let attached = line(&entry(Payload::Lifecycle(
            LifecycleEvent::ObserverAttached {
                observer: observer.clone(),
            },
        )));
        assert_eq!(attached, "#7    attached   o1 (claiming, present)");
        let detached = line(&entry(Payload::Lifecycle(
            LifecycleEvent::ObserverDetached {
                observer,
                because: DetachCause::Displaced,
            },
        )));
        assert_eq!(detached, "#7    detached   o1 (displaced)");
    }
}
