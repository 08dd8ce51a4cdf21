//! `/v1/runs`.

use super::AppState;
use super::auth::{Workspace, own_component, own_run, own_session, session_key};
use super::body::parse;
use super::error::ApiError;
use super::wire::{CancelAccepted, ResumeRequest, StartRunRequest, StartedRun};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use cairn_runtime::ids::{RunId, SessionId};
use cairn_runtime::journal::event::{CancelReason, Liveness, LivenessPolicy, RunStatus};
use cairn_runtime::runtime::{ComponentRef, RunSummary, RuntimeError, StartRun};

/// A component named on the wire: a built-in example or an uploaded digest
/// of the caller's workspace, never a path on the server.
pub async fn component_ref(
    s: &AppState,
    ws: &Workspace,
    name: &str,
) -> Result<ComponentRef, ApiError> {
    if let Some(c @ ComponentRef::BuiltIn(_)) = ComponentRef::named(name) {
        Ok(c)
    } else if name.starts_with("sha256:") {
        own_component(s, ws, name).await?;
        Ok(ComponentRef::Digest(name.to_string()))
    } else {
        Err(ApiError::not_found(format!(
            "no component {name:?}: name a built-in example ({}) or the sha256:<hex> digest of an uploaded one",
            cairn_examples::names().join(", ")
        )))
    }
}

pub fn run_id(text: &str) -> Result<RunId, ApiError> {
    Ok(text.parse::<RunId>()?)
}

fn state_name(status: RunStatus) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

pub async fn start(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    headers: axum::http::HeaderMap,
    crate::body::RawBody(body): crate::body::RawBody,
) -> Result<(StatusCode, Json<StartedRun>), ApiError> {
    let req: StartRunRequest = crate::body::parse(&body)?;
    // A retried start (the same `Idempotency-Key`, or an SDK's retry of
    // the same body) answers with the run its first attempt started.
    let call = crate::chat::retry::Call::of(&ws.0, &headers, &body);
    if let Some(prev) = call.as_ref().and_then(|c| s.calls.joinable(c)) {
        return Ok((
            StatusCode::ACCEPTED,
            Json(StartedRun {
                run_id: prev.run,
                session_id: prev.session,
            }),
        ));
    }
    // The caller's session of that name, or the key a new one gets:
    // another workspace's session of the name is not in the way.
    let mut session = match req.session.as_deref().map(SessionId::parse).transpose()? {
        Some(name) => Some(session_key(&s, &ws, &name)?),
        None => None,
    };
    let component = match req.component.as_deref() {
        Some(c) => Some(component_ref(&s, &ws, c).await?),
        None => None,
    };
    let liveness = req.liveness.map(|l| l.resolve()).unwrap_or(Liveness {
        policy: LivenessPolicy::Continue,
        grace_ms: 0,
    });
    if let Some(run) = req.continues {
        let of = own_run(&s, &ws, run).await?;
        if session.as_ref().is_some_and(|given| *given != of) {
            return Err(ApiError::invalid(format!(
                "run {run} belongs to another session than the one given"
            )));
        }
        let (_, facts) = s.rt.find_run(run).await?;
        if facts.status != RunStatus::Finished {
            return Err(RuntimeError::WrongRunState {
                run,
                state: state_name(facts.status),
                needed: "only a finished run can be continued".into(),
            }
            .into());
        }
        session = Some(of);
    }
    let started =
        s.rt.start(StartRun {
            session,
            worker: None,
            component,
            prompt: req.prompt,
            liveness,
            timeout_ms: req.timeout_ms,
            continues: req.continues,
            workspace: Some(ws.0.clone()),
            limits: req.limits.unwrap_or_default(),
            tools: None,
            first_commit: cairn_runtime::runtime::FirstCommit::Now,
            resume_on_start: req.resume_on_start,
        })
        .await?;
    if let Some(c) = call {
        s.calls.remember(
            c,
            crate::chat::retry::Started {
                session: started.session_id.clone(),
                run: started.run_id,
                after: cairn_runtime::ids::Seq(0),
            },
        );
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(StartedRun {
            run_id: started.run_id,
            session_id: started.session_id,
        }),
    ))
}

pub async fn list(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    crate::body::QueryArgs(q): crate::body::QueryArgs<super::wire::RunsQuery>,
) -> Result<(axum::http::HeaderMap, Json<Vec<RunSummary>>), ApiError> {
    if let Some(session) = &q.session {
        let session = own_session(&s, &ws, &cairn_runtime::ids::SessionId::parse(session)?)?;
        let runs =
            s.rt.session_runs(&session)
                .await
                .map_err(|e| e.for_session(&session))?;
        return Ok((Default::default(), Json(runs)));
    }
    let page =
        s.rt.runs_page(
            Some(&ws.0),
            q.cursor.as_deref(),
            q.limit.unwrap_or(cairn_runtime::runtime::MAX_PAGE),
        )
        .await?;
    Ok((
        super::wire::next_cursor_header(page.next_cursor),
        Json(page.items),
    ))
}

pub async fn get(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Json<RunSummary>, ApiError> {
    let run = run_id(&id)?;
    own_run(&s, &ws, run).await?;
    Ok(Json(s.rt.run_summary(run).await?))
}

pub async fn cancel(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<CancelAccepted>), ApiError> {
    let run = run_id(&id)?;
    own_run(&s, &ws, run).await?;
    match s
        .rt
        .cancel(run, CancelReason::External, "cancelled through the API")
    {
        Ok(()) => Ok((StatusCode::ACCEPTED, Json(CancelAccepted { run_id: run }))),
        Err(RuntimeError::UnknownRun(_)) => {
            // Journaled here but not live in this process: ended, or interrupted.
            let summary = s.rt.run_summary(run).await?;
            Err(RuntimeError::WrongRunState {
                run,
                state: serde_json::to_value(summary.state)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                needed: "only a live run can be cancelled".into(),
            }
            .into())
        }
        Err(e) => Err(e.into()),
    }
}

pub async fn resume(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<StartedRun>), ApiError> {
    let run = run_id(&id)?;
    let req: ResumeRequest = if body.is_empty() {
        ResumeRequest::default()
    } else {
        parse(&body)?
    };
    own_run(&s, &ws, run).await?;
    let started = s.rt.resume(run, req.liveness.map(|l| l.resolve())).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(StartedRun {
            run_id: started.run_id,
            session_id: started.session_id,
        }),
    ))
}
