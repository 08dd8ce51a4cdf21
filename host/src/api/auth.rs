//! Workspaces: every `/v1/` route acts for the workspace of the caller's
//! bearer token (`Authorization: Bearer …`, tokens from `cairn.toml`), or for
//! the default workspace when no tokens are configured (`--insecure-local`).
//! Anything of another workspace is `404`, never `403`, so ids cannot be probed.

use super::AppState;
use super::error::ApiError;
use crate::ids::{RunId, SessionId};
use crate::runtime::RuntimeError;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The caller's workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace(pub String);

/// The middleware: resolve the token, or answer 401.
pub async fn authenticate(State(s): State<AppState>, mut req: Request, next: Next) -> Response {
    if !req.uri().path().starts_with("/v1/") {
        return next.run(req).await;
    }
    let config = s.rt.host_config();
    let workspace = if config.has_tokens() {
        let token = req
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match token.and_then(|t| config.workspace_of(t)) {
            Some(ws) => ws.to_string(),
            None => {
                return ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "send `Authorization: Bearer <token>` with a token from the server's cairn.toml",
                )
                .into_response();
            }
        }
    } else {
        s.rt.default_workspace().to_string()
    };
    req.extensions_mut().insert(Workspace(workspace));
    next.run(req).await
}

/// Fail unless `session` is the caller's (as if it did not exist).
pub fn own_session(s: &AppState, ws: &Workspace, session: &SessionId) -> Result<(), ApiError> {
    match s.rt.session_workspace(session) {
        Ok(owner) if owner == ws.0 => Ok(()),
        Ok(_) | Err(RuntimeError::UnknownSession(_)) => {
            Err(ApiError::not_found(format!("no session {session}")))
        }
        Err(RuntimeError::Worker(crate::worker::WorkerError::NoSuchWorker(_))) => {
            Err(ApiError::not_found(format!("no session {session}")))
        }
        Err(e) => Err(e.into()),
    }
}

/// The run's session, when the run is the caller's.
pub async fn own_run(s: &AppState, ws: &Workspace, run: RunId) -> Result<SessionId, ApiError> {
    let session = s.rt.session_of_run(run).await?;
    own_session(s, ws, &session).map_err(|_| ApiError::not_found(format!("no run {run}")))?;
    Ok(session)
}

/// Whether the caller may run a component digest: a built-in, or one its
/// workspace uploaded.
pub fn own_component(s: &AppState, ws: &Workspace, digest: &str) -> Result<(), ApiError> {
    let built_in = crate::examples::BUILT_IN
        .iter()
        .any(|(_, b)| crate::component::digest_of(b) == digest);
    if built_in || s.rt.home().granted(&ws.0).iter().any(|d| d == digest) {
        Ok(())
    } else {
        Err(ApiError::not_found(format!("no component {digest}")))
    }
}
