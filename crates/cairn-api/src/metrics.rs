//! `GET /metrics`: the runtime's registry in the Prometheus text format,
//! and the layer that records every routed request in it.

use super::AppState;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

pub async fn metrics(
    State(s): State<AppState>,
) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        s.rt.render_metrics(),
    )
}

/// Count a routed request by method, route template and status, and time
/// it to its response head.
pub async fn record(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let method = req.method().as_str().to_string();
    let began = std::time::Instant::now();
    let response = next.run(req).await;
    s.rt.telemetry()
        .request(&method, &route, response.status().as_u16(), began.elapsed());
    response
}
