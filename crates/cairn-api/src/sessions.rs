//! `/v1/sessions`: create (or hold a draft), list, summary, delete, and the
//! segment operations: compact, branch, fork.

use super::AppState;
use super::auth::{Workspace, own_session};
use super::body::{JsonBody, parse};
use super::error::ApiError;
use super::wire::{BranchRequest, CreateSession, CreatedSession, ForkRequest, PageQuery};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::{Extension, Json};
use cairn_runtime::ids::{Seq, SessionId};
use cairn_runtime::runtime::{Forked, SegmentStarted, SessionSummary};

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
    if req.draft {
        let session_id = s.rt.create_draft(id, &ws.0)?;
        return Ok((
            StatusCode::CREATED,
            Json(CreatedSession {
                session_id,
                worker_id: None,
                draft: true,
            }),
        ));
    }
    let (session_id, worker_id) = s.rt.create_session_in(id, &ws.0).await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedSession {
            session_id,
            worker_id: Some(worker_id),
            draft: false,
        }),
    ))
}

pub async fn list(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    crate::body::QueryArgs(q): crate::body::QueryArgs<PageQuery>,
) -> Result<(HeaderMap, Json<Vec<SessionSummary>>), ApiError> {
    let page =
        s.rt.sessions_page(
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
) -> Result<Json<SessionSummary>, ApiError> {
    let session = own_session(&s, &ws, &SessionId::parse(&id)?)?;
    Ok(Json(s.rt.summary(&session).await?))
}

pub async fn delete(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let session = own_session(&s, &ws, &SessionId::parse(&id)?)?;
    s.rt.delete_session(&session).await?;
    // The work queue's records of it go too (a card's key never gets a
    // second worker by an answer after its session is gone).
    if let Err(e) = s.queue.session_deleted(&session).await {
        tracing::warn!(session = %session, error = %e, "session deleted; the work queue not told");
    }
    Ok(StatusCode::NO_CONTENT)
}

pub async fn compact(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<SegmentStarted>), ApiError> {
    let session = own_session(&s, &ws, &SessionId::parse(&id)?)?;
    Ok((StatusCode::CREATED, Json(s.rt.compact(&session).await?)))
}

/// `POST /v1/sessions/{id}/prune`: prune a child (stop its run, end its
/// loan, mark it pruned in its parent's metadata).
pub async fn prune(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let session = own_session(&s, &ws, &SessionId::parse(&id)?)?;
    s.rt.prune(&session).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn branch(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<BranchRequest>,
) -> Result<(StatusCode, Json<SegmentStarted>), ApiError> {
    let session = own_session(&s, &ws, &SessionId::parse(&id)?)?;
    Ok((
        StatusCode::CREATED,
        Json(s.rt.branch(&session, Seq(req.at_seq)).await?),
    ))
}

/// `POST /v1/sessions/{id}/update`: move the session's worker to another
/// component (see `cairn_runtime::runtime::update`); `409 conflict` naming
/// the first divergence when a run does not replay against it.
pub async fn update(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<crate::wire::UpdateRequest>,
) -> Result<
    (
        StatusCode,
        Json<cairn_runtime::runtime::update::UpdateReport>,
    ),
    ApiError,
> {
    let session = own_session(&s, &ws, &SessionId::parse(&id)?)?;
    let component = crate::runs::component_ref(&s, &ws, &req.component).await?;
    let mode = req
        .mode
        .unwrap_or(cairn_runtime::journal::event::UpdateMode::Replay);
    let report = s.rt.update(&session, &component, mode, req.dry_run).await?;
    // A live run: the update is taken at the next run's start.
    let status = match report.pending {
        true => StatusCode::ACCEPTED,
        false => StatusCode::OK,
    };
    Ok((status, Json(report)))
}

pub async fn fork(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<ForkRequest>,
) -> Result<(StatusCode, Json<Forked>), ApiError> {
    let session = own_session(&s, &ws, &SessionId::parse(&id)?)?;
    let new_id = req.id.as_deref().map(SessionId::parse).transpose()?;
    let forked = match &req.component {
        None => s.rt.fork(&session, Seq(req.before_seq), new_id).await?,
        Some(c) => {
            let component = crate::runs::component_ref(&s, &ws, c).await?;
            let mode = req
                .mode
                .unwrap_or(cairn_runtime::journal::event::UpdateMode::Replay);
            s.rt.fork_onto(&session, Seq(req.before_seq), new_id, &component, mode)
                .await?
        }
    };
    Ok((StatusCode::CREATED, Json(forked)))
}
