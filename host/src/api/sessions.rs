//! `/v1/sessions`.

use super::AppState;
use super::body::parse;
use super::error::ApiError;
use super::wire::{CreateSession, CreatedSession};
use crate::ids::SessionId;
use crate::runtime::SessionSummary;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;

pub async fn create(
    State(s): State<AppState>,
    body: Bytes,
) -> Result<(StatusCode, Json<CreatedSession>), ApiError> {
    let req: CreateSession = if body.is_empty() {
        CreateSession::default()
    } else {
        parse(&body)?
    };
    let id = req.id.as_deref().map(SessionId::parse).transpose()?;
    let (session_id, worker_id) = s.rt.create_session(id).await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedSession {
            session_id,
            worker_id,
        }),
    ))
}

pub async fn list(State(s): State<AppState>) -> Result<Json<Vec<SessionSummary>>, ApiError> {
    let mut out = Vec::new();
    for session in s.rt.list_sessions().await? {
        out.push(s.rt.summary(&session).await?);
    }
    Ok(Json(out))
}

pub async fn get(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<SessionSummary>, ApiError> {
    let session = SessionId::parse(&id)?;
    Ok(Json(s.rt.summary(&session).await?))
}

pub async fn delete(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let session = SessionId::parse(&id)?;
    s.rt.delete_session(&session).await?;
    Ok(StatusCode::NO_CONTENT)
}
