//! Workspaces: every `/v1/` route acts for the workspace of the caller's
//! bearer token (`Authorization: Bearer …`, tokens from `cairn.toml`), or for
//! the default workspace when no tokens are configured (`--insecure-local`).
//! Anything of another workspace is `404`, never `403`, so ids cannot be probed.

use super::AppState;
use super::error::ApiError;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use cairn_runtime::ErrorCode;
use cairn_runtime::ids::{RunId, SessionId};
use cairn_runtime::runtime::RuntimeError;

/// The caller's workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace(pub String);

/// Whether a `Host` header names this machine's loopback.
pub(crate) fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        // [::1]:port
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(n, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                n
            } else {
                host
            }
        }),
    };
    let name = name.to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn forbidden(message: String) -> Response {
    ApiError::new(ErrorCode::Forbidden, message).into_response()
}

/// What a browser must not be able to do to a server without tokens
/// (`--insecure-local`): reach it under a name that is not loopback (DNS
/// rebinding), or write to it from another origin. And on every server a
/// request body is JSON only when it says so (`text/plain` is how a page
/// sends a body without asking first).
pub async fn guard(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    let header = |name| {
        headers
            .get(name)
            .and_then(|v: &axum::http::HeaderValue| v.to_str().ok())
    };
    let local = !s.rt.host_config().has_tokens();
    let host = header(axum::http::header::HOST);
    if local
        && let Some(host) = host
        && !loopback_host(host)
    {
        return forbidden(format!(
            "this server serves without tokens, so only under a loopback name; Host {host:?} is not one"
        ));
    }
    let writes = !matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    );
    // A GET that claims, marks presence or takes over changes who holds a
    // session: it is a write as far as other origins go.
    let acts = writes || get_with_side_effect(req.uri());
    if local && acts {
        if let Some(origin) = header(axum::http::header::ORIGIN)
            && !super::cors::origin_allowed(&s, origin, host)
        {
            return forbidden(format!(
                "a write from origin {origin:?} is refused: this server serves without tokens and takes writes (and claiming, presence or takeover on a GET) only from its own origin and [http] allowed_origins"
            ));
        }
        // A page's plain GET (an image, a link) carries no Origin, but
        // the browser says the request crossed sites.
        if header(axum::http::header::ORIGIN).is_none()
            && let Some(site) = header(axum::http::HeaderName::from_static("sec-fetch-site"))
            && (site == "cross-site" || site == "same-site")
        {
            return forbidden(format!(
                "a request from another site ({site}, no Origin) that claims, marks presence or takes over is refused: this server serves without tokens"
            ));
        }
    }
    let path = req.uri().path();
    if writes && path != "/v1/components" {
        let has_body = header(axum::http::header::CONTENT_LENGTH).is_some_and(|l| l != "0")
            || headers.contains_key(axum::http::header::TRANSFER_ENCODING);
        let json = header(axum::http::header::CONTENT_TYPE).is_some_and(|t| {
            let t = t.to_ascii_lowercase();
            t.starts_with("application/json")
                || t.starts_with("application/") && t.contains("+json")
        });
        let typed = headers.contains_key(axum::http::header::CONTENT_TYPE);
        if (has_body || typed) && !json {
            return ApiError::new(
                ErrorCode::UnsupportedMediaType,
                "request bodies are JSON: send `Content-Type: application/json`",
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// Whether a GET's query asks for a side effect: `claim`, `presence` or
/// `takeover` set to anything but `false`/`0`. The query is decoded as the
/// handlers decode it (`%63laim=true` is `claim`); one that does not decode
/// counts as asking.
fn get_with_side_effect(uri: &axum::http::Uri) -> bool {
    if uri.query().is_none() {
        return false;
    }
    match axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri) {
        Ok(axum::extract::Query(pairs)) => pairs.iter().any(|(name, value)| {
            matches!(name.as_str(), "claim" | "presence" | "takeover")
                && !matches!(value.as_str(), "false" | "0")
        }),
        Err(_) => true,
    }
}

/// Set on a request made with one of `[server] operator_tokens`.
#[derive(Debug, Clone, Copy)]
pub struct Operator;

/// The middleware: resolve the token, or answer 401. `/v1/` routes and,
/// when tokens exist, `/metrics` (it counts every workspace) need one.
pub async fn authenticate(State(s): State<AppState>, mut req: Request, next: Next) -> Response {
    let config = s.rt.host_config();
    let path = req.uri().path();
    let guarded = path.starts_with("/v1/") || (path == "/metrics" && config.has_tokens());
    if !guarded {
        return next.run(req).await;
    }
    // A built-in agent's card is public, as the default agent's is (each
    // names the bearer scheme its calls need); an upload's card is its
    // workspace's.
    if req.method() == axum::http::Method::GET
        && let Some(agent) = path
            .strip_prefix("/v1/a2a/")
            .and_then(|p| p.strip_suffix("/.well-known/agent-card.json"))
        && cairn_examples::names().contains(&agent)
    {
        req.extensions_mut()
            .insert(Workspace(s.rt.default_workspace().to_string()));
        return next.run(req).await;
    }
    let workspace = if config.has_tokens() {
        let token = req
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match token.and_then(|t| config.workspace_of(t)) {
            Some(ws) => ws.to_string(),
            None if token.is_some_and(|t| config.is_operator(t)) => {
                // The operator reads the host-wide views and acts for no
                // workspace.
                if !(path == "/metrics" || path == "/v1/doctor") {
                    return forbidden(format!(
                        "an operator token reads only GET /v1/doctor and /metrics; {path} needs a workspace token"
                    ));
                }
                req.extensions_mut().insert(Operator);
                String::new()
            }
            None => {
                return ApiError::new(ErrorCode::Unauthorized,
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

/// The caller's session named `name`, as stores key it; `404` when its
/// workspace holds none (another workspace's session of that name answers
/// the same: it is not there for this caller).
pub fn own_session(s: &AppState, ws: &Workspace, name: &SessionId) -> Result<SessionId, ApiError> {
    match s.rt.resolve_session(&ws.0, name) {
        Ok(key) => Ok(key),
        Err(RuntimeError::UnknownSession(_)) => {
            Err(ApiError::not_found(format!("no session {name}")))
        }
        Err(e) => Err(e.into()),
    }
}

/// The caller's session named `name`, if its workspace holds one.
pub fn find_own(
    s: &AppState,
    ws: &Workspace,
    name: &SessionId,
) -> Result<Option<SessionId>, ApiError> {
    match s.rt.resolve_session(&ws.0, name) {
        Ok(key) => Ok(Some(key)),
        Err(RuntimeError::UnknownSession(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Whether `session` (as stores key it) is the caller's.
pub fn is_own(s: &AppState, ws: &Workspace, session: &SessionId) -> bool {
    s.rt.session_workspace(session)
        .is_ok_and(|owner| owner == ws.0)
}

/// The key a session named `name` has or would get in the caller's
/// workspace: its own session of that name, else a new one's key.
pub fn session_key(s: &AppState, ws: &Workspace, name: &SessionId) -> Result<SessionId, ApiError> {
    match s.rt.resolve_session(&ws.0, name) {
        Ok(key) => Ok(key),
        Err(RuntimeError::UnknownSession(_)) => Ok(s.rt.scoped(name, &ws.0)),
        Err(e) => Err(e.into()),
    }
}

/// The run's session, when the run is the caller's.
pub async fn own_run(s: &AppState, ws: &Workspace, run: RunId) -> Result<SessionId, ApiError> {
    let session = s.rt.session_of_run(run).await?;
    if !is_own(s, ws, &session) {
        return Err(ApiError::not_found(format!("no run {run}")));
    }
    Ok(session)
}

/// Whether the caller may run a component digest: a built-in, or one its
/// workspace uploaded (compiled, or still compiling).
pub async fn own_component(s: &AppState, ws: &Workspace, digest: &str) -> Result<(), ApiError> {
    let built_in = cairn_examples::BUILT_IN
        .iter()
        .any(|(_, b)| cairn_runtime::component::digest_of(b) == digest);
    // An upload still compiling may be run: the run waits for the compile.
    if built_in || s.uploads.compiling(&ws.0, digest) || s.rt.may_use(&ws.0, digest).await {
        Ok(())
    } else {
        Err(ApiError::not_found(format!("no component {digest}")))
    }
}
