//! Event-stream budgets: how many SSE streams one session and one workspace
//! may hold open at once (`[server] streams_per_session`,
//! `streams_per_workspace`). Past either, a new stream is refused `429`
//! with `code: "capacity"` naming the budget; streams already open go on.

use super::error::ApiError;
use cairn_runtime::ErrorCode;
use cairn_runtime::ids::SessionId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The open streams, counted.
#[derive(Clone, Default)]
pub struct Streams {
    counts: Arc<Mutex<Counts>>,
}

#[derive(Default)]
struct Counts {
    by_session: HashMap<SessionId, usize>,
    by_workspace: HashMap<String, usize>,
}

/// One open stream's place; given back when dropped (the stream ended or
/// its client went away).
pub struct Slot {
    streams: Streams,
    workspace: String,
    session: Option<SessionId>,
}

impl Streams {
    /// Take a place for a stream of `workspace` (on `session`, if one).
    pub fn take(
        &self,
        cfg: &cairn_runtime::config::ServerConfig,
        workspace: &str,
        session: Option<&SessionId>,
    ) -> Result<Slot, ApiError> {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let in_workspace = counts.by_workspace.get(workspace).copied().unwrap_or(0);
        if in_workspace >= cfg.streams_per_workspace {
            return Err(full(format!(
                "workspace {workspace:?} holds its limit of {} open event streams ([server] streams_per_workspace)",
                cfg.streams_per_workspace
            )));
        }
        if let Some(s) = session {
            let on_session = counts.by_session.get(s).copied().unwrap_or(0);
            if on_session >= cfg.streams_per_session {
                return Err(full(format!(
                    "session {s} holds its limit of {} open event streams ([server] streams_per_session)",
                    cfg.streams_per_session
                )));
            }
            *counts.by_session.entry(s.clone()).or_default() += 1;
        }
        *counts
            .by_workspace
            .entry(workspace.to_string())
            .or_default() += 1;
        Ok(Slot {
            streams: self.clone(),
            workspace: workspace.to_string(),
            session: session.cloned(),
        })
    }
}

fn full(message: String) -> ApiError {
    ApiError::new(ErrorCode::Capacity, message)
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self
            .streams
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = counts.by_workspace.get_mut(&self.workspace) {
            *n -= 1;
            if *n == 0 {
                counts.by_workspace.remove(&self.workspace);
            }
        }
        if let Some(s) = &self.session
            && let Some(n) = counts.by_session.get_mut(s)
        {
            *n -= 1;
            if *n == 0 {
                counts.by_session.remove(s);
            }
        }
    }
}

/// `stream`, holding `guard` (its slot, a lease) for as long as it is open.
pub fn holding<S: futures_util::Stream, G>(
    stream: S,
    guard: G,
) -> impl futures_util::Stream<Item = S::Item> {
    futures_util::StreamExt::map(stream, move |item| {
        let _ = &guard;
        item
    })
}

/// Take the claim of `session` (over a call the server has not yet seen
/// go), claiming and present, from `after`; while `run` is live the claim
/// leaves with it (its detach goes in the run's end write). What a call
/// that goes on with a run it did not start follows it with: a retry
/// joining its first attempt, tool results answering a waiting run.
pub async fn claim_run(
    s: &super::AppState,
    session: &SessionId,
    after: cairn_runtime::ids::Seq,
    run: cairn_runtime::ids::RunId,
) -> Result<cairn_runtime::runtime::Observation, ApiError> {
    let obs =
        s.rt.attach(
            session,
            cairn_runtime::runtime::AttachSpec {
                takeover: true,
                ..cairn_runtime::runtime::AttachSpec::claiming_present(after)
            },
        )
        .await?;
    if s.rt.live_runs().iter().any(|(_, r)| *r == run) {
        obs.leave_with_run();
    }
    Ok(obs)
}

/// A response with the ids of the run it answers: `x-cairn-session` and
/// `x-cairn-run` (chat and the Responses API alike).
pub fn with_run_ids(
    mut response: axum::response::Response,
    session: &SessionId,
    run: cairn_runtime::ids::RunId,
) -> axum::response::Response {
    use axum::http::HeaderValue;
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(session.name()) {
        h.insert("x-cairn-session", v);
    }
    if let Ok(v) = HeaderValue::from_str(&run.to_string()) {
        h.insert("x-cairn-run", v);
    }
    response
}
