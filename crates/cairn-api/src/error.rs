//! Wire errors: `{"error": {"code", "message"}}` with a stable code.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cairn_runtime::runtime::RuntimeError;
use schemars::JsonSchema;
use serde::Serialize;

pub use cairn_runtime::ErrorCode;

/// An error as it goes on the wire; its HTTP status is its code's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The stable code.
    pub code: ErrorCode,
    /// For people.
    pub message: String,
}

/// The JSON body of every error.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// An error's code and message.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ErrorDetail {
    /// Stable, snake_case; one HTTP status per code.
    pub code: ErrorCode,
    /// For people.
    pub message: String,
}

impl ApiError {
    /// An error with a code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
        }
    }

    /// The HTTP status: the code's.
    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    /// 400 `invalid_request`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        ApiError::new(e.code(), e.to_string())
    }
}

impl From<cairn_runtime::ids::InvalidId> for ApiError {
    fn from(e: cairn_runtime::ids::InvalidId) -> Self {
        ApiError::new(ErrorCode::InvalidId, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let retry = self.code.retryable();
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
            },
        };
        let mut response = (status, axum::Json(body)).into_response();
        // Unavailable for now (the store, a shutdown, a holder, a restore):
        // a client retries after a moment.
        if retry {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        // RFC 6750: a 401 names the scheme a client should answer with.
        if self.code == ErrorCode::Unauthorized {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"cairn\""),
            );
        }
        response
    }
}

/// The largest error body [`no_host_paths`] rewrites (every error body this
/// API writes is far smaller).
const MAX_ERROR_BODY: usize = 64 << 10;

/// No error answer names the host's home: a message that carries a path
/// from below (an I/O error on a session's files) names it relative to the
/// home. Error bodies only; every other response passes untouched.
pub async fn no_host_paths(
    axum::extract::State(s): axum::extract::State<super::AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let response = next.run(req).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (parts, body) = response.into_parts();
    match axum::body::to_bytes(body, MAX_ERROR_BODY).await {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let home = s.rt.home_label();
            let body = if text.contains(&home) {
                axum::body::Body::from(s.rt.strip_home(&text))
            } else {
                axum::body::Body::from(bytes)
            };
            let mut parts = parts;
            parts.headers.remove(axum::http::header::CONTENT_LENGTH);
            Response::from_parts(parts, body)
        }
        Err(_) => Response::from_parts(parts, axum::body::Body::empty()),
    }
}
