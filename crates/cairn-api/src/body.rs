//! The JSON body extractor: a size limit, strict parsing, and errors that
//! say which: `invalid_json` (not JSON), `unknown_field`, `invalid_request`
//! (JSON of the wrong shape), `too_large`.

use super::error::ApiError;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use cairn_runtime::ErrorCode;
use serde::de::DeserializeOwned;

/// The largest JSON body accepted.
pub const MAX_JSON_BYTES: usize = 2 << 20;

/// A JSON request body of type `T`.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let RawBody(bytes) = RawBody::from_request(req, state).await?;
        parse(&bytes).map(JsonBody)
    }
}

/// A JSON request's bytes, unparsed (a handler that also hashes them),
/// with the same errors as [`JsonBody`]: `too_large`, `invalid_request`.
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        Bytes::from_request(req, state)
            .await
            .map(RawBody)
            .map_err(|e| {
                if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(
                        ErrorCode::TooLarge,
                        format!("the body is over {MAX_JSON_BYTES} bytes"),
                    )
                } else {
                    ApiError::invalid(format!("cannot read the body: {e}"))
                }
            })
    }
}

/// Parse a JSON body strictly.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.len() > MAX_JSON_BYTES {
        return Err(ApiError::new(
            ErrorCode::TooLarge,
            format!(
                "the body is {} bytes; at most {MAX_JSON_BYTES}",
                bytes.len()
            ),
        ));
    }
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::new(ErrorCode::InvalidJson, format!("the body is not JSON: {e}")))?;
    cairn_runtime::journal::check_json_depth("the body", &value).map_err(ApiError::invalid)?;
    serde_json::from_value(value).map_err(|e| {
        let msg = e.to_string();
        if msg.starts_with("unknown field") {
            ApiError::new(ErrorCode::UnknownField, msg)
        } else {
            ApiError::invalid(msg)
        }
    })
}

/// A query string of type `T`: an error is the JSON error body
/// (`invalid_request`, naming what is wrong), never axum's plain text.
pub struct QueryArgs<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> axum::extract::FromRequestParts<S> for QueryArgs<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(q)| QueryArgs(q))
            .map_err(|e| {
                ApiError::invalid(format!("the query string does not read: {}", e.body_text()))
            })
    }
}
