//! `/v1/runs`.

use super::AppState;
use super::body::{JsonBody, parse};
use super::error::ApiError;
use super::wire::{CancelAccepted, ResumeRequest, StartRunRequest, StartedRun};
use crate::ids::{RunId, SessionId};
use crate::journal::event::{CancelReason, Liveness, LivenessPolicy};
use crate::runtime::{ComponentRef, RunSummary, StartRun};
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;

/// A component named on the wire: a built-in example or an uploaded digest,
/// never a path on the server.
pub fn component_ref(name: &str) -> Result<ComponentRef, ApiError> {
    if crate::examples::built_in(name).is_some() {
        Ok(ComponentRef::BuiltIn(name.to_string()))
    } else if name.starts_with("sha256:") {
        Ok(ComponentRef::Digest(name.to_string()))
    } else {
        Err(ApiError::not_found(format!(
            "no component {name:?}: name a built-in example ({}) or the sha256:<hex> digest of an uploaded one",
            crate::examples::names().join(", ")
        )))
    }
}

pub fn run_id(text: &str) -> Result<RunId, ApiError> {
    Ok(text.parse::<RunId>()?)
}

pub async fn start(
    State(s): State<AppState>,
    JsonBody(req): JsonBody<StartRunRequest>,
) -> Result<(StatusCode, Json<StartedRun>), ApiError> {
    let session = req.session.as_deref().map(SessionId::parse).transpose()?;
    let component = req.component.as_deref().map(component_ref).transpose()?;
    let liveness = req.liveness.map(|l| l.resolve()).unwrap_or(Liveness {
        policy: LivenessPolicy::Continue,
        grace_ms: 0,
    });
    let started = match req.continues {
        Some(run) => {
            let (of, _) = s.rt.find_run(run).await?;
            if session.as_ref().is_some_and(|given| *given != of) {
                return Err(ApiError::invalid(format!(
                    "run {run} belongs to session {of}, not the one given"
                )));
            }
            let mut start = StartRun {
                session: Some(of),
                worker: None,
                component,
                prompt: req.prompt,
                liveness,
                timeout_ms: req.timeout_ms,
                continues: Some(run),
                workspace: None,
                limits: req.limits.unwrap_or_default(),
            };
            let (_, facts) = s.rt.find_run(run).await?;
            if facts.status != crate::journal::event::RunStatus::Finished {
                return Err(crate::runtime::RuntimeError::WrongRunState {
                    run,
                    state: format!("{:?}", facts.status).to_lowercase(),
                    needed: "only a finished run can be continued".into(),
                }
                .into());
            }
            start.component = start.component.take();
            s.rt.start(start).await?
        }
        None => {
            s.rt.start(StartRun {
                session,
                worker: None,
                component,
                prompt: req.prompt,
                liveness,
                timeout_ms: req.timeout_ms,
                continues: None,
                workspace: None,
                limits: req.limits.unwrap_or_default(),
            })
            .await?
        }
    };
    Ok((
        StatusCode::ACCEPTED,
        Json(StartedRun {
            run_id: started.run_id,
            session_id: started.session_id,
        }),
    ))
}

pub async fn list(State(s): State<AppState>) -> Result<Json<Vec<RunSummary>>, ApiError> {
    Ok(Json(s.rt.list_runs().await?))
}

pub async fn get(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<RunSummary>, ApiError> {
    Ok(Json(s.rt.run_summary(run_id(&id)?).await?))
}

pub async fn cancel(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<CancelAccepted>), ApiError> {
    let run = run_id(&id)?;
    match s
        .rt
        .cancel(run, CancelReason::External, "cancelled through the API")
    {
        Ok(()) => Ok((StatusCode::ACCEPTED, Json(CancelAccepted { run_id: run }))),
        Err(crate::runtime::RuntimeError::UnknownRun(_)) => {
            // Known but ended, or unknown.
            let summary = s.rt.run_summary(run).await?;
            Err(ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("run {run} is not live (it is {:?})", summary.state).to_lowercase(),
            ))
        }
        Err(e) => Err(e.into()),
    }
}

pub async fn resume(
    State(s): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<StartedRun>), ApiError> {
    let run = run_id(&id)?;
    let req: ResumeRequest = if body.is_empty() {
        ResumeRequest::default()
    } else {
        parse(&body)?
    };
    let started = s.rt.resume(run, req.liveness.map(|l| l.resolve())).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(StartedRun {
            run_id: started.run_id,
            session_id: started.session_id,
        }),
    ))
}
