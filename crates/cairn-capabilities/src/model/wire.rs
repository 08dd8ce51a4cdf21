//! What both providers share: one POST with a deadline, its status read
//! into a retryable-or-not error, and its body as JSON or as SSE events
//! (eventsource-stream; no parser by hand).

use super::{Attempt, AttemptError};
use futures_util::{Stream, StreamExt};
use std::time::Duration;

/// One attempt within `timeout`: past it, a retryable error.
pub(crate) async fn within<T>(
    timeout: Duration,
    attempt: impl std::future::Future<Output = Result<T, AttemptError>>,
) -> Result<T, AttemptError> {
    match tokio::time::timeout(timeout, attempt).await {
        Ok(r) => r,
        Err(_) => Err(AttemptError::retry(format!(
            "the provider did not finish within {} ms",
            timeout.as_millis()
        ))),
    }
}

/// POST `body` to `url` with `headers`; the response when its status is a
/// success.
pub(crate) async fn post(
    a: &Attempt<'_>,
    url: &str,
    headers: &[(&str, String)],
    body: &serde_json::Value,
) -> Result<reqwest::Response, AttemptError> {
    let mut req = a.client.post(url).json(body);
    for (name, value) in headers {
        req = req.header(*name, value);
    }
    let response = req.send().await.map_err(|e| AttemptError::transport(&e))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64);
    let body = response.text().await.unwrap_or_default();
    Err(AttemptError::status(status, retry_after, &body))
}

/// The whole body as JSON.
pub(crate) async fn json(response: reqwest::Response) -> Result<serde_json::Value, AttemptError> {
    let bytes = response
        .bytes()
        .await
        .map_err(|e| AttemptError::transport(&e))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| AttemptError::fatal(format!("the provider's answer is not JSON: {e}")))
}

/// One SSE event: its name (`event:`; empty when none) and data.
pub(crate) struct Event {
    pub name: String,
    pub data: String,
}

/// The body as SSE events.
pub(crate) fn events(
    response: reqwest::Response,
) -> impl Stream<Item = Result<Event, AttemptError>> + Unpin {
    use eventsource_stream::Eventsource;
    response
        .bytes_stream()
        .eventsource()
        .map(|item| match item {
            Ok(e) => Ok(Event {
                name: e.event,
                data: e.data,
            }),
            Err(eventsource_stream::EventStreamError::Transport(e)) => {
                Err(AttemptError::transport(&e))
            }
            Err(e) => Err(AttemptError::retry(format!(
                "the provider's stream broke off: {e}"
            ))),
        })
}

/// Read a JSON event's data.
pub(crate) fn data(event: &Event) -> Result<serde_json::Value, AttemptError> {
    serde_json::from_str(&event.data).map_err(|e| {
        AttemptError::fatal(format!(
            "the provider streamed an event that is not JSON: {e}"
        ))
    })
}

/// `base` joined with `path`, one slash between.
pub(crate) fn join(base: &str, path: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}
