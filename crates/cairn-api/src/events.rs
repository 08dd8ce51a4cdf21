//! Server-Sent Events: one SessionEvent JSON per `data:` line, SSE `id` =
//! seq, `Last-Event-ID` honoured, keep-alives, a Gap as `event: gap`. The
//! connection is the observer: dropping it detaches.

use super::AppState;
use super::auth::{Workspace, own_run, own_session};
use super::error::ApiError;
use super::runs::run_id;
use super::wire::EventsQuery;
use axum::Extension;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use cairn_runtime::ids::{Seq, SessionId};
use cairn_runtime::journal::Delivery;
use cairn_runtime::journal::event::ObserverRole;
use cairn_runtime::runtime::{AttachSpec, Observation};
use futures_util::stream::{self, Stream};
use std::convert::Infallible;
use std::time::Duration;

/// The keep-alive interval of every stream.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    match headers.get("last-event-id") {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(Some)
            .ok_or_else(|| ApiError::invalid("Last-Event-ID must be a journal seq (an integer)")),
    }
}

/// One delivery as an SSE event.
pub fn sse_event(d: &Delivery) -> Event {
    match d {
        Delivery::Event(e) => Event::default().id(e.seq.to_string()).data(e.line()),
        Delivery::Unknown { seq, raw } => Event::default().id(seq.to_string()).data(raw.clone()),
        Delivery::Gap { resumed_at } => Event::default()
            .event("gap")
            .data(serde_json::json!({ "resumed_at": resumed_at }).to_string()),
    }
}

/// A stream of an observation's deliveries; `stop` ends it after an event.
/// When the host shuts down the stream ends with one `event: shutdown`.
fn stream_of(
    rt: cairn_runtime::runtime::Runtime,
    obs: Observation,
    keep: impl Fn(&Delivery) -> bool + Send + Sync + 'static,
    stop: impl Fn(&Delivery) -> bool + Send + Sync + 'static,
) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    let keep = std::sync::Arc::new(keep);
    let stop = std::sync::Arc::new(stop);
    let closing = rt.closing();
    stream::unfold(Some((obs, closing)), move |state| {
        let keep = keep.clone();
        let stop = stop.clone();
        let rt = rt.clone();
        async move {
            let (mut obs, mut closing) = state?;
            loop {
                let next = tokio::select! {
                    d = obs.next() => d,
                    _ = closing.wait_for(|c| *c) => {
                        let event = Event::default().event("shutdown").data(
                            serde_json::json!({ "reason": "the host is shutting down" }).to_string(),
                        );
                        return Some((Ok(event), None));
                    }
                };
                match next {
                    Some(Ok(d)) => {
                        if !keep(&d) {
                            continue;
                        }
                        let event = sse_event(&d);
                        let next = if stop(&d) { None } else { Some((obs, closing)) };
                        return Some((Ok(event), next));
                    }
                    Some(Err(e)) => {
                        // Named relative to the home: a client never learns its path.
                        let message = rt.strip_home(&e.to_string());
                        let event = Event::default()
                            .event("error")
                            .data(serde_json::json!({ "error": { "code": "internal", "message": message } }).to_string());
                        return Some((Ok(event), None));
                    }
                    None => return None,
                }
            }
        }
    })
}

/// The observer a stream request asks for: `claim`, `presence`, and where
/// to start (`Last-Event-ID` wins over `after`).
fn attach_spec(q: &EventsQuery, headers: &HeaderMap) -> Result<AttachSpec, ApiError> {
    let after = last_event_id(headers)?.or(q.after).unwrap_or(0);
    Ok(AttachSpec {
        role: if q.claim.unwrap_or(false) {
            ObserverRole::Claiming
        } else {
            ObserverRole::Collecting
        },
        present: q.presence.unwrap_or(false),
        after: Seq(after),
        takeover: match (q.takeover.unwrap_or(false), q.claim.unwrap_or(false)) {
            (true, false) => {
                return Err(ApiError::invalid(
                    "takeover=true displaces a claimant: it needs claim=true",
                ));
            }
            (takeover, _) => takeover,
        },
    })
}

pub async fn session_events(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    crate::body::QueryArgs(q): crate::body::QueryArgs<EventsQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let session = own_session(&s, &ws, &SessionId::parse(&id)?)?;
    let slot = s
        .streams
        .take(&s.rt.host_config().server, &ws.0, Some(&session))?;
    let obs = s.rt.attach(&session, attach_spec(&q, &headers)?).await?;
    let lease = super::leases::keep(&s, &session, &obs, &headers);
    let stream = stream_of(s.rt.clone(), obs, |_| true, |_| false);
    Ok(Sse::new(super::streams::holding(stream, (slot, lease)))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

pub async fn run_events(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    crate::body::QueryArgs(q): crate::body::QueryArgs<EventsQuery>,
    headers: HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    let run = run_id(&id)?;
    let session = own_run(&s, &ws, run).await?;
    // A reconnect after the run's last entry: nothing more will come.
    let spec = attach_spec(&q, &headers)?;
    if let Ok((_, facts)) = s.rt.find_run(run).await
        && spec.after >= facts.last_seq
    {
        return Ok(axum::http::StatusCode::NO_CONTENT.into_response());
    }
    let slot = s
        .streams
        .take(&s.rt.host_config().server, &ws.0, Some(&session))?;
    let obs = s.rt.attach(&session, spec).await?;
    let lease = super::leases::keep(&s, &session, &obs, &headers);
    let mine = move |d: &Delivery| match d {
        Delivery::Event(e) => e.run_id == Some(run),
        _ => true,
    };
    let end = move |d: &Delivery| matches!(d, Delivery::Event(e) if e.run_id == Some(run) && e.facts.is_some());
    let stream = stream_of(s.rt.clone(), obs, mine, end);
    Ok(Sse::new(super::streams::holding(stream, (slot, lease)))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}
