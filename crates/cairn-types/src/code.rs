//! The codes of wire errors (`{"error": {"code", "message"}}`), each with
//! its one HTTP status.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A wire error's stable code. The HTTP status of an error is
/// [`ErrorCode::status`] and nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// The body is not JSON.
    InvalidJson,
    /// The body names a field the route does not take.
    UnknownField,
    /// The request is well-formed JSON but asks for something invalid.
    InvalidRequest,
    /// An id in the path or body is not valid.
    InvalidId,
    /// No such session, run, decision, card or component (for this caller).
    NotFound,
    /// The route is served, but not with this method (`Allow` names those
    /// that are).
    MethodNotAllowed,
    /// The session has a live run.
    LiveRun,
    /// The request conflicts with the state it found.
    Conflict,
    /// The session's files are damaged; every other session is unaffected.
    Corrupt,
    /// The run is being restored; retry in a moment.
    Restoring,
    /// The body or a field is above its limit.
    TooLarge,
    /// A request body that is not `application/json`.
    UnsupportedMediaType,
    /// No or a wrong bearer token.
    Unauthorized,
    /// The token may not do this.
    Forbidden,
    /// A liveness or approval policy this host does not carry out.
    UnsupportedPolicy,
    /// The component is not a controller this host can run.
    InvalidComponent,
    /// A requested limit is above the ceiling.
    LimitExceeded,
    /// A quota or the concurrency cap is full; retry later.
    Capacity,
    /// The host is shutting down.
    ShuttingDown,
    /// Another process holds the home.
    HomeBusy,
    /// The store refused (a full disk, a database away); retry later.
    Storage,
    /// Another instance holds the session.
    HeldElsewhere,
    /// This instance lost its authority over the session.
    LostAuthority,
    /// The run behind a chat completion failed; the message names its code.
    RunFailed,
    /// A host bug; the message says what.
    Internal,
}

impl ErrorCode {
    /// Every code, for tables and the OpenAPI listing.
    pub const ALL: &'static [ErrorCode] = &[
        ErrorCode::InvalidJson,
        ErrorCode::UnknownField,
        ErrorCode::InvalidRequest,
        ErrorCode::InvalidId,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::LiveRun,
        ErrorCode::Conflict,
        ErrorCode::Corrupt,
        ErrorCode::Restoring,
        ErrorCode::TooLarge,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::UnsupportedPolicy,
        ErrorCode::InvalidComponent,
        ErrorCode::LimitExceeded,
        ErrorCode::Capacity,
        ErrorCode::ShuttingDown,
        ErrorCode::HomeBusy,
        ErrorCode::Storage,
        ErrorCode::HeldElsewhere,
        ErrorCode::LostAuthority,
        ErrorCode::RunFailed,
        ErrorCode::Internal,
    ];

    /// The HTTP status of an error with this code.
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::InvalidJson
            | ErrorCode::UnknownField
            | ErrorCode::InvalidRequest
            | ErrorCode::InvalidId
            | ErrorCode::UnsupportedPolicy
            | ErrorCode::InvalidComponent
            | ErrorCode::LimitExceeded => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::LiveRun
            | ErrorCode::Conflict
            | ErrorCode::Corrupt
            | ErrorCode::Restoring => 409,
            ErrorCode::TooLarge => 413,
            ErrorCode::UnsupportedMediaType => 415,
            ErrorCode::RunFailed => 424,
            ErrorCode::Capacity => 429,
            ErrorCode::Internal => 500,
            ErrorCode::ShuttingDown
            | ErrorCode::HomeBusy
            | ErrorCode::Storage
            | ErrorCode::HeldElsewhere
            | ErrorCode::LostAuthority => 503,
        }
    }

    /// Whether a client should retry after a moment (`Retry-After`).
    pub fn retryable(self) -> bool {
        self.status() == 503 || self == ErrorCode::Restoring
    }

    /// The snake_case code.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidJson => "invalid_json",
            ErrorCode::UnknownField => "unknown_field",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::InvalidId => "invalid_id",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::LiveRun => "live_run",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Corrupt => "corrupt",
            ErrorCode::Restoring => "restoring",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::UnsupportedPolicy => "unsupported_policy",
            ErrorCode::InvalidComponent => "invalid_component",
            ErrorCode::LimitExceeded => "limit_exceeded",
            ErrorCode::Capacity => "capacity",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::HomeBusy => "home_busy",
            ErrorCode::Storage => "storage",
            ErrorCode::HeldElsewhere => "held_elsewhere",
            ErrorCode::LostAuthority => "lost_authority",
            ErrorCode::RunFailed => "run_failed",
            ErrorCode::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_listed_once_and_serializes_as_its_name() {
        for (i, code) in ErrorCode::ALL.iter().enumerate() {
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                serde_json::Value::from(code.as_str())
            );
            assert!(!ErrorCode::ALL[..i].contains(code), "{code} twice");
            assert!((400..600).contains(&code.status()), "{code}");
        }
    }
}
