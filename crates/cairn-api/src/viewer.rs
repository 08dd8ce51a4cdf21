//! What a browser viewer needs: component bytes, park checkpoints and
//! worktree snapshots (to replay a run in the page), pages of a journal (to fill an `event: gap`,
//! since `EventSource` cannot reconnect to an older id by itself). CORS for
//! its pages is `cors`.

use super::AppState;
use super::auth::{Workspace, own_run, own_session};
use super::error::ApiError;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use cairn_runtime::ids::{Seq, SessionId};
use cairn_runtime::store::JournalItem;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

fn bytes_response(bytes: Vec<u8>, content_type: &'static str, immutable: bool) -> Response {
    let mut r = bytes.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if immutable {
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=31536000, immutable"),
        );
    }
    r
}

/// `GET /v1/components/{digest}`: a component's bytes (a built-in's, or an
/// upload of the caller's workspace); a built-in's name works too.
pub async fn component(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let built_in = cairn_examples::BUILT_IN.iter().find(|(n, b)| {
        *n == name || cairn_examples::built_in_digest(n) == Some(name.as_str()) && !b.is_empty()
    });
    if let Some((_, bytes)) = built_in {
        return Ok(bytes_response(bytes.to_vec(), "application/wasm", true));
    }
    super::auth::own_component(&s, &ws, &name)
        .await
        .map_err(|_| ApiError::not_found(format!("no component {name}")))?;
    let bytes =
        s.rt.component_bytes(&name)
            .ok_or_else(|| ApiError::not_found(format!("no component {name}")))?;
    Ok(bytes_response(bytes, "application/wasm", true))
}

/// `GET /v1/sessions/{id}/worktrees/{digest}`: a worktree snapshot the
/// session's journal names (`worktree_recorded`, a `workers` answer's
/// `snapshot`), packed (`cairn-worktree 1`: per entry a kind byte `d` or
/// `f`, the path's length as 4 big-endian bytes, the path, and for a file
/// its length as 8 big-endian bytes and its bytes) — what the viewer lays
/// out to replay a run in the browser.
pub async fn worktree(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path((id, digest)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let session = own_session(&s, &ws, &SessionId::parse(&id)?)?;
    match s.rt.worktree_snapshot(&session, &digest).await? {
        Some(bytes) => Ok(bytes_response(bytes, "application/octet-stream", true)),
        None => Err(ApiError::not_found(format!(
            "session {id} holds no worktree snapshot {digest}"
        ))),
    }
}

/// `GET /v1/runs/{id}/checkpoint`: a parked run's checkpoint bytes.
pub async fn checkpoint(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let run = super::runs::run_id(&id)?;
    own_run(&s, &ws, run).await?;
    let none = || {
        ApiError::not_found(format!(
            "run {run} has no park checkpoint (it has not parked)"
        ))
    };
    match s.rt.checkpoint_of(run).await {
        Ok(Some(bytes)) => Ok(bytes_response(bytes, "application/octet-stream", true)),
        Ok(None) => Err(none()),
        // A live run has parked nothing yet.
        Err(e @ cairn_runtime::runtime::RuntimeError::WrongRunState { .. }) => {
            Err(ApiError::not_found(format!("{e}; no park checkpoint")))
        }
        Err(e) => Err(e.into()),
    }
}

/// `?after=&limit=` of a journal page.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JournalQuery {
    /// Entries after this seq (default 0: from the start).
    #[serde(default)]
    pub after: Option<u64>,
    /// At most this many (1–10000, default 1000).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `GET /v1/sessions/{id}/journal?after=&limit=`: a page of the session's
/// journal lines: `{"entries": [line…], "last_seq", "next_after"}`
/// (`next_after`: the `after` of the next page, absent at the end). An
/// entry this cairn cannot interpret is `{"seq", "unknown": "<the line>"}`.
pub async fn journal(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    crate::body::QueryArgs(q): crate::body::QueryArgs<JournalQuery>,
) -> Result<Json<Value>, ApiError> {
    let session = own_session(&s, &ws, &SessionId::parse(&id)?)?;
    let limit = q.limit.unwrap_or(1000);
    if !(1..=10_000).contains(&limit) {
        return Err(ApiError::invalid("limit is 1 to 10000"));
    }
    // One more than the page, to know whether another follows.
    let items =
        s.rt.read_page(&session, Seq(q.after.unwrap_or(0)), limit + 1)
            .await
            .map_err(|e| e.for_session(&session))?;
    let more = items.len() > limit;
    let entries: Vec<Value> = items
        .iter()
        .take(limit)
        .map(|i| match i {
            JournalItem::Event(e) => serde_json::to_value(&**e).unwrap_or(Value::Null),
            JournalItem::Unknown { seq, raw } => json!({ "seq": seq, "unknown": raw }),
        })
        .collect();
    let last_seq = s.rt.last_seq(&session).await?;
    let mut page = json!({ "entries": entries, "last_seq": last_seq });
    if more && let Some(last) = items.get(limit - 1) {
        page["next_after"] = json!(last.seq());
    }
    Ok(Json(page))
}
