//! `/v1/decisions` (and `/v1/approvals/{id}`, an alias).

use super::AppState;
use super::body::JsonBody;
use super::error::ApiError;
use super::wire::{DecideRequest, Decided, DecisionsQuery};
use crate::ids::{DecisionId, SessionId};
use crate::runtime::PendingDecision;
use axum::Json;
use axum::extract::{Path, Query, State};

pub async fn list(
    State(s): State<AppState>,
    Query(q): Query<DecisionsQuery>,
) -> Result<Json<Vec<PendingDecision>>, ApiError> {
    let session = q.session.as_deref().map(SessionId::parse).transpose()?;
    Ok(Json(s.rt.pending_decisions(session.as_ref())))
}

pub async fn decide(
    State(s): State<AppState>,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<DecideRequest>,
) -> Result<Json<Decided>, ApiError> {
    let id: DecisionId = id.parse()?;
    s.rt.decide(&id, req.value).await?;
    Ok(Json(Decided {
        decision_id: id.to_string(),
        recorded: true,
    }))
}
