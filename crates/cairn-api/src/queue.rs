//! `/v1/queue` and `/v1/doctor`: the work queue, workspace-scoped like
//! every route (a card of another workspace is `404`).

use super::AppState;
use super::auth::Workspace;
use super::body::JsonBody;
use super::error::ApiError;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use cairn_orchestration::{AnswerValue, NewCard, QueueError, Row};
use cairn_runtime::ErrorCode;
use schemars::JsonSchema;
use serde::Deserialize;

impl From<QueueError> for ApiError {
    fn from(e: QueueError) -> Self {
        match e {
            QueueError::Invalid(m) => ApiError::invalid(m),
            QueueError::NotFound(m) => ApiError::not_found(m),
            QueueError::Conflict(m) => ApiError::new(ErrorCode::Conflict, m),
            QueueError::Capacity(m) => ApiError::new(ErrorCode::Capacity, m),
            QueueError::Store(s) => ApiError::new(ErrorCode::Storage, s.to_string()),
            QueueError::Runtime(r) => r.into(),
        }
    }
}

/// `POST /v1/queue`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddCard {
    /// `[a-z0-9][a-z0-9-]{0,63}`.
    pub card: String,
    /// A built-in example name or the `sha256:<hex>` of an uploaded component.
    pub component: String,
    /// The card's prompt.
    pub prompt: String,
    /// The round (default 1); a higher one supersedes the card's row.
    #[serde(default)]
    pub round: Option<u32>,
}

/// `POST /v1/queue/{card}/answer`: exactly one of `text` and `value`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerCard {
    /// The answer as text.
    #[serde(default)]
    pub text: Option<String>,
    /// The answer as JSON (a decision's value, such as `{"approved": true}`).
    #[serde(default)]
    pub value: Option<serde_json::Value>,
}

/// `POST /v1/queue/{card}/rework`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReworkCard {
    /// Why: given to the worker in its resume prompt.
    pub reason: String,
}

/// `POST /v1/queue`: add a card (or a higher round of one).
pub async fn add(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    JsonBody(req): JsonBody<AddCard>,
) -> Result<(StatusCode, Json<Row>), ApiError> {
    super::runs::component_ref(&s, &ws, &req.component).await?;
    let row = s
        .queue
        .add(NewCard {
            card: req.card,
            component: req.component,
            prompt: req.prompt,
            round: req.round,
            workspace: ws.0,
        })
        .await?;
    Ok((StatusCode::CREATED, Json(row)))
}

/// `GET /v1/queue`: the workspace's rows.
pub async fn list(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
) -> Result<Json<Vec<Row>>, ApiError> {
    Ok(Json(s.queue.rows(Some(&ws.0))?))
}

/// `POST /v1/queue/{card}/answer`: answer an awaiting card.
pub async fn answer(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(card): Path<String>,
    JsonBody(req): JsonBody<AnswerCard>,
) -> Result<Json<Row>, ApiError> {
    cairn_orchestration::check_card(&card)?;
    let answer = match (req.text, req.value) {
        (Some(t), None) => AnswerValue::Text(t),
        (None, Some(v)) => AnswerValue::Value(v),
        _ => return Err(ApiError::invalid("give exactly one of `text` and `value`")),
    };
    Ok(Json(s.queue.answer(&ws.0, &card, answer).await?))
}

/// `POST /v1/queue/{card}/rework`: send a card back with a reason.
pub async fn rework(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(card): Path<String>,
    JsonBody(req): JsonBody<ReworkCard>,
) -> Result<Json<Row>, ApiError> {
    cairn_orchestration::check_card(&card)?;
    Ok(Json(s.queue.rework(&ws.0, &card, &req.reason).await?))
}

/// `GET /v1/doctor`: the doctor's report of this served home.
///
/// With tokens it reports only the caller's workspace (no home path, no
/// other workspace's counts); an operator token (`[server]
/// operator_tokens`), or a server without tokens, gets the whole home.
pub async fn doctor(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    operator: Option<Extension<super::auth::Operator>>,
) -> Json<cairn_orchestration::doctor::Report> {
    let scope = match operator.is_some() || !s.rt.host_config().has_tokens() {
        true => None,
        false => Some(ws.0.as_str()),
    };
    Json(cairn_orchestration::doctor::examine_in(&s.rt, true, scope).await)
}
