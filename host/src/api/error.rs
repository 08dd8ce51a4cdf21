//! Wire errors: `{"error": {"code", "message"}}` with a stable code.

use crate::runtime::RuntimeError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Serialize;

/// An error as it goes on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The stable code.
    pub code: &'static str,
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
    /// Stable, snake_case: `invalid_json`, `unknown_field`, `invalid_request`,
    /// `invalid_id`, `not_found`, `live_run`, `conflict`, `too_large`,
    /// `unauthorized`, `unsupported_policy`, `invalid_component`,
    /// `limit_exceeded`, `shutting_down`, `internal`.
    pub code: String,
    /// For people.
    pub message: String,
}

impl ApiError {
    /// An error with a status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 400 `invalid_request`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        let code = e.code();
        let status = match code {
            "not_found" => StatusCode::NOT_FOUND,
            "live_run" | "conflict" | "corrupt" => StatusCode::CONFLICT,
            "storage" | "held_elsewhere" | "lost_authority" => StatusCode::SERVICE_UNAVAILABLE,
            "capacity" => StatusCode::TOO_MANY_REQUESTS,
            "too_large" => StatusCode::PAYLOAD_TOO_LARGE,
            "unsupported_policy" | "invalid_component" | "invalid_request" | "limit_exceeded" => {
                StatusCode::BAD_REQUEST
            }
            "shutting_down" => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl From<crate::ids::InvalidId> for ApiError {
    fn from(e: crate::ids::InvalidId) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_id", e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
            },
        };
        (self.status, axum::Json(body)).into_response()
    }
}
