//! The server's accept loop: a connection budget (`[server]
//! max_connections`; past it a new connection is answered `503` with
//! `code: "capacity"` and closed), a header timeout that also closes idle
//! keep-alive connections (`header_timeout_ms`), `TCP_NODELAY` on every
//! connection, and a graceful drain on shutdown.

use cairn_runtime::runtime::Runtime;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long connections get to close once shutdown began.
const DRAIN: Duration = Duration::from_secs(5);

/// Serve `app` on `listener` until `shutdown` resolves; then drain.
pub async fn serve(
    listener: tokio::net::TcpListener,
    rt: Runtime,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let cfg = rt.host_config().server.clone();
    let max = cfg.max_connections.max(1);
    let permits = Arc::new(Semaphore::new(max));
    // Every connection task is tracked; shutdown waits for exactly those.
    let (closing, connections) = (CancellationToken::new(), TaskTracker::new());
    let header_timeout = Duration::from_millis(cfg.header_timeout_ms.max(1));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            // Out of descriptors, say: wait a little rather than spin.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let (app, close) = (app.clone(), closing.clone());
                connections.spawn(async move {
                    connection(stream, app, close, header_timeout).await;
                    drop(permit);
                });
            }
            Err(_) => {
                tokio::spawn(refuse(stream, max));
            }
        }
    }
    // Streams end and runs are cancelled (or parked) now, so the
    // connections waiting on them close and the drain can finish.
    rt.begin_shutdown();
    closing.cancel();
    connections.close();
    let _ = tokio::time::timeout(DRAIN, connections.wait()).await;
    rt.shutdown(DRAIN).await;
    Ok(())
}

async fn connection(
    stream: tokio::net::TcpStream,
    app: axum::Router,
    close: CancellationToken,
    header_timeout: Duration,
) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    let app = tower::ServiceExt::map_request(app, normalize_path);
    let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = close.cancelled() => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// The server is full: say so, once, and close.
async fn refuse(mut stream: tokio::net::TcpStream, max: usize) {
    let body = serde_json::json!({"error": {
        "code": cairn_runtime::ErrorCode::Capacity,
        "message": format!("the server holds its limit of {max} connections ([server] max_connections); try again shortly"),
    }})
    .to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// A path as clients write it when they join a base URL that ends in `/`
/// with a path that starts with one (`…/echo//.well-known/agent-card.json`),
/// or add a trailing `/`: runs of `/` are one, and a trailing `/` goes
/// (the root aside), so every documented URL resolves either way.
fn normalize_path<B>(mut req: axum::http::Request<B>) -> axum::http::Request<B> {
    let path = req.uri().path();
    if !(path.contains("//") || (path.len() > 1 && path.ends_with('/'))) {
        return req;
    }
    let mut clean = String::with_capacity(path.len());
    for c in path.chars() {
        if !(c == '/' && clean.ends_with('/')) {
            clean.push(c);
        }
    }
    while clean.len() > 1 && clean.ends_with('/') {
        clean.pop();
    }
    if clean.is_empty() {
        clean.push('/');
    }
    // `/ui/` is the viewer's own page: its trailing `/` stays.
    if path.starts_with("/ui/") && clean == "/ui" {
        return req;
    }
    let with_query = match req.uri().query() {
        Some(q) => format!("{clean}?{q}"),
        None => clean,
    };
    if let Ok(pq) = with_query.parse::<axum::http::uri::PathAndQuery>() {
        let mut parts = req.uri().clone().into_parts();
        parts.path_and_query = Some(pq);
        if let Ok(uri) = axum::http::Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
    }
    req
}

#[cfg(test)]
mod tests {
    #[test]
    fn paths_are_normalized_as_clients_join_them() {
        let norm = |p: &str| {
            super::normalize_path(axum::http::Request::builder().uri(p).body(()).unwrap())
                .uri()
                .to_string()
        };
        assert_eq!(
            norm("/v1/a2a/echo//.well-known/agent-card.json"),
            "/v1/a2a/echo/.well-known/agent-card.json"
        );
        assert_eq!(
            norm("/.well-known/agent-card.json/"),
            "/.well-known/agent-card.json"
        );
        assert_eq!(norm("/v1/sessions/?limit=2"), "/v1/sessions?limit=2");
        assert_eq!(norm("/ui/"), "/ui/");
        assert_eq!(norm("/ui/#x"), "/ui/");
        assert_eq!(norm("/"), "/");
        assert_eq!(norm("/v1/runs"), "/v1/runs");
    }
}
