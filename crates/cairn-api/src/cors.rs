//! CORS: which pages may call this server (its own origin and those
//! `[http] allowed_origins` lists), preflights answered, responses to
//! allowed origins marked. Used by the viewer's routes and by auth (a
//! cross-origin request from an origin not allowed carries no token).

use super::AppState;
use super::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use cairn_runtime::ErrorCode;

fn same_origin(origin: &str, host: Option<&str>) -> bool {
    origin
        .split_once("://")
        .map(|(_, authority)| authority.trim_end_matches('/'))
        .is_some_and(|authority| Some(authority) == host)
}

/// Whether a page of `origin` may call this server.
pub fn origin_allowed(s: &AppState, origin: &str, host: Option<&str>) -> bool {
    same_origin(origin, host)
        || s.rt
            .host_config()
            .http
            .allowed_origins
            .iter()
            .any(|o| o.trim_end_matches('/') == origin)
}

/// CORS: preflights answered, responses to allowed origins marked.
pub async fn cors(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let Some(origin) = origin else {
        return next.run(req).await;
    };
    let allowed = origin_allowed(&s, &origin, host.as_deref());
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if preflight {
        if !allowed {
            return ApiError::new(
                ErrorCode::Forbidden,
                format!(
                    "origin {origin:?} is not allowed: list it in cairn.toml [http] allowed_origins"
                ),
            )
            .into_response();
        }
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, DELETE, OPTIONS"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(
                "authorization, content-type, last-event-id, x-cairn-session, a2a-version",
            ),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        mark(h, &origin);
        return r;
    }
    let mut r = next.run(req).await;
    if allowed {
        mark(r.headers_mut(), &origin);
    }
    r
}

fn mark(h: &mut axum::http::HeaderMap, origin: &str) {
    if let Ok(v) = HeaderValue::from_str(origin) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("x-cairn-session, x-cairn-run, x-next-cursor"),
    );
}
