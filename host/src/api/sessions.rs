//! `/v1/sessions`.

use super::AppState;
use super::auth::{Workspace, own_session};
use super::body::parse;
use super::error::ApiError;
use super::wire::{CreateSession, CreatedSession};
use crate::ids::SessionId;
use crate::runtime::SessionSummary;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};

pub async fn create(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    body: Bytes,
) -> Result<(StatusCode, Json<CreatedSession>), ApiError> {
    let req: CreateSession = if body.is_empty() {
        CreateSession::default()
    } else {
        parse(&body)?
    };
    let id = req.id.as_deref().map(SessionId::parse).transpose()?;
    let (session_id, worker_id) = s.rt.create_session_in(id, &ws.0).await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedSession {
            session_id,
            worker_id,
        }),
    ))
}

pub async fn list(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
) -> Result<Json<Vec<SessionSummary>>, ApiError> {
    let mut out = Vec::new();
    for session in s.rt.list_sessions().await? {
        let summary = s.rt.summary(&session).await?;
        if summary.workspace == ws.0 {
            out.push(summary);
        }
    }
    Ok(Json(out))
}

pub async fn get(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Json<SessionSummary>, ApiError> {
    let session = SessionId::parse(&id)?;
    own_session(&s, &ws, &session)?;
    Ok(Json(s.rt.summary(&session).await?))
}

pub async fn delete(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let session = SessionId::parse(&id)?;
    own_session(&s, &ws, &session)?;
    s.rt.delete_session(&session).await?;
    Ok(StatusCode::NO_CONTENT)
}
