//! Client tool results, on the chat and Responses seams alike: the agent
//! loop of an OpenAI client. A controller that calls a tool the client
//! offered emits a `tool_call` and, when it wants the result mid-run,
//! waits on a `tool_result` decision whose details name the call
//! (`{"tool_call_id"}`; without it, the oldest call of the run not yet
//! waited on). The client's follow-up carries the results by call id:
//! those a live run waits on answer its decisions (the run goes on, on the
//! same session); with no run waiting, the results start a run that
//! continues the session's last one, given in `Start.tools` as
//! `{"tool_results": [{"tool_call_id", "content"}]}`.

use super::AppState;
use super::auth::{Workspace, is_own};
use cairn_runtime::ids::{DecisionId, RunId, SessionId};
use cairn_runtime::journal::event::CancelReason;
use cairn_runtime::journal::event::{AgentEvent, LifecycleEvent, Payload, RequestKind};
use serde_json::{Value, json};
use std::collections::HashMap;

/// A tool result a client sent back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Given {
    /// The call it answers.
    pub tool_call_id: String,
    /// The tool's text.
    pub content: String,
}

/// The `tool_results` a run started by client results is given.
pub fn as_start(given: &[Given]) -> Value {
    Value::Array(
        given
            .iter()
            .map(|g| json!({ "tool_call_id": g.tool_call_id, "content": g.content }))
            .collect(),
    )
}

/// A run waiting on a client's tool result.
#[derive(Debug, Clone)]
pub struct Wait {
    pub decision: DecisionId,
    pub session: SessionId,
    pub run: RunId,
    /// The call it waits for.
    pub call: String,
}

/// The call a `tool_result` request is for: its details' `tool_call_id`,
/// else the oldest client call emitted before it and not yet waited on
/// (`unlinked`, in emission order).
pub fn call_of(details: &Value, unlinked: &mut Vec<String>) -> Option<String> {
    if let Some(id) = details["tool_call_id"].as_str() {
        unlinked.retain(|c| c != id);
        return Some(id.to_string());
    }
    (!unlinked.is_empty()).then(|| unlinked.remove(0))
}

/// A controller's own tool call (not one its model asked of it).
pub fn client_call_id(payload: &Payload) -> Option<&str> {
    match payload {
        Payload::Agent(AgentEvent::ToolCall { id, by: None, .. }) => Some(id),
        _ => None,
    }
}

/// The client tool waits pending in the caller's workspace (of one
/// session, when named), read from each waiting run's entries.
pub async fn waits(s: &AppState, ws: &Workspace, session: Option<&SessionId>) -> Vec<Wait> {
    let mut by_run: HashMap<RunId, Vec<DecisionId>> = HashMap::new();
    let mut sessions = HashMap::new();
    for p in s.rt.pending_decisions(session) {
        if !is_own(s, ws, &p.session_id) {
            continue;
        }
        sessions.insert(p.run_id, p.session_id.clone());
        by_run.entry(p.run_id).or_default().push(p.decision_id);
    }
    let mut out = Vec::new();
    for (run, pending) in by_run {
        let session = sessions[&run].clone();
        let mut unlinked = Vec::new();
        let after = s.rt.run_after(run).await;
        let _ =
            s.rt.scan(&session, after, |item| {
                let Some(e) = item.event() else { return true };
                if e.run_id != Some(run) {
                    return true;
                }
                if let Some(id) = client_call_id(&e.payload) {
                    unlinked.push(id.to_string());
                }
                if let Payload::Lifecycle(LifecycleEvent::DecisionRequested {
                    decision_id,
                    request_kind: RequestKind::ToolResult,
                    details,
                    ..
                }) = &e.payload
                    && let Some(call) = call_of(details, &mut unlinked)
                    && pending.contains(decision_id)
                {
                    out.push(Wait {
                        decision: decision_id.clone(),
                        session: session.clone(),
                        run,
                        call,
                    });
                }
                true
            })
            .await;
    }
    out
}

/// The one run a client's results answer, and how.
#[derive(Debug)]
pub struct Matched {
    pub session: SessionId,
    pub run: RunId,
    /// The decisions answered now, with the results.
    pub answers: Vec<(DecisionId, String)>,
    /// Results for calls the run has not waited on yet (parallel calls the
    /// client answered together): each answers its wait when it comes.
    pub held: HashMap<String, String>,
}

/// The run the results answer: the one run waiting on any of them (none,
/// or results spread over several runs, match nothing).
pub fn matching(waits: &[Wait], given: &[Given]) -> Option<Matched> {
    let answered = |w: &&Wait| given.iter().any(|g| g.tool_call_id == w.call);
    let mut runs: Vec<RunId> = waits.iter().filter(answered).map(|w| w.run).collect();
    runs.sort();
    runs.dedup();
    let [run] = runs[..] else { return None };
    let mine: Vec<&Wait> = waits.iter().filter(|w| w.run == run).collect();
    let mut answers = Vec::new();
    let mut held = HashMap::new();
    for g in given {
        match mine.iter().find(|w| w.call == g.tool_call_id) {
            Some(w) => answers.push((w.decision.clone(), g.content.clone())),
            None => {
                held.insert(g.tool_call_id.clone(), g.content.clone());
            }
        }
    }
    Some(Matched {
        session: mine[0].session.clone(),
        run,
        answers,
        held,
    })
}

/// Go on with the run the results answer: claim it from here (so the call
/// follows what comes next, and a disconnect ends it as the call's own run
/// would), then answer its waits. The observation, the seq it follows
/// from, and the results held for waits still to come.
pub async fn take_up(
    s: &AppState,
    m: Matched,
) -> Result<
    (
        cairn_runtime::runtime::Observation,
        cairn_runtime::ids::Seq,
        HashMap<String, String>,
    ),
    crate::error::ApiError,
> {
    let after = s.rt.minted_seq(&m.session).await?;
    let obs = crate::streams::claim_run(s, &m.session, after, m.run).await?;
    for (decision, content) in m.answers {
        s.rt.decide(&decision, Value::String(content)).await?;
    }
    Ok((obs, after, m.held))
}

/// Why the results answer no wait of a session whose run is live: names
/// the calls it waits on, so the client can see its mistake.
pub fn mismatch(session: &SessionId, waits: &[Wait], given: &[Given]) -> String {
    let sent: Vec<&str> = given.iter().map(|g| g.tool_call_id.as_str()).collect();
    let waited: Vec<&str> = waits
        .iter()
        .filter(|w| w.session == *session)
        .map(|w| w.call.as_str())
        .collect();
    match waited.is_empty() {
        true => format!(
            "session {session} has a live run that waits on no tool result; the tool messages answer {}",
            sent.join(", ")
        ),
        false => format!(
            "session {session}'s run waits on the results of {}; the tool messages answer {}",
            waited.join(", "),
            sent.join(", ")
        ),
    }
}

/// The client went on — a new message instead of the results its session's
/// run waits on: that run is cancelled (`client_tool`), its calls
/// abandoned, so the new message can start the next run. Returns whether a
/// run was waiting.
pub async fn abandon(s: &AppState, ws: &Workspace, session: &SessionId) -> bool {
    let waits = waits(s, ws, Some(session)).await;
    let Some(run) = waits.first().map(|w| w.run) else {
        return false;
    };
    let calls: Vec<&str> = waits.iter().map(|w| w.call.as_str()).collect();
    let message = format!(
        "the client went on without the results of {}",
        calls.join(", ")
    );
    if s.rt.cancel(run, CancelReason::ClientTool, &message).is_ok() {
        let _ = s.rt.wait(run).await;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(run: RunId, session: &SessionId, call: &str, seq: u64) -> Wait {
        Wait {
            decision: DecisionId::derive(session, cairn_runtime::ids::Seq(seq)),
            session: session.clone(),
            run,
            call: call.into(),
        }
    }

    fn given(id: &str, content: &str) -> Given {
        Given {
            tool_call_id: id.into(),
            content: content.into(),
        }
    }

    #[test]
    fn a_wait_names_its_call_or_takes_the_oldest_unwaited_one() {
        let mut unlinked = vec!["a".to_string(), "b".to_string()];
        assert_eq!(
            call_of(&json!({"tool_call_id": "b"}), &mut unlinked).as_deref(),
            Some("b")
        );
        assert_eq!(unlinked, ["a"]);
        assert_eq!(call_of(&json!({}), &mut unlinked).as_deref(), Some("a"));
        assert_eq!(call_of(&json!({}), &mut unlinked), None);
    }

    #[test]
    fn results_answer_the_one_run_that_waits_on_them_and_hold_the_rest() {
        let s = SessionId::parse("s-one").unwrap();
        let (r1, r2) = (RunId::new(), RunId::new());
        let waits = [wait(r1, &s, "c1", 1), wait(r2, &s, "c9", 2)];
        let m = matching(&waits, &[given("c1", "x"), given("c2", "y")]).unwrap();
        assert_eq!(m.run, r1);
        assert_eq!(m.answers.len(), 1);
        assert_eq!(m.answers[0].1, "x");
        assert_eq!(m.held.get("c2").map(String::as_str), Some("y"));
        // Results spread over two runs, or for no run, match nothing.
        assert!(matching(&waits, &[given("c1", "x"), given("c9", "z")]).is_none());
        assert!(matching(&waits, &[given("nobody", "x")]).is_none());
        assert!(mismatch(&s, &waits, &[given("nobody", "x")]).contains("c1, c9"));
    }
}
