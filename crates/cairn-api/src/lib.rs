//! The HTTP seam (axum). Every handler calls the runtime and reads journal
//! subscriptions; none holds a component, a store or a cancel token.
//!
//! Serving a runtime on loopback and asking it as an OpenAI client would:
//!
//! ```
//! use cairn_runtime::{Runtime, RuntimeConfig};
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let home = tempfile::tempdir()?;
//! let rt = Runtime::builder(RuntimeConfig::new(home.path())).open().await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let url = format!("http://{}", listener.local_addr()?);
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let server = tokio::spawn(cairn_api::serve(listener, rt.clone(), async {
//!     let _ = stopped.await;
//! }));
//! let request = serde_json::json!({
//!     "model": "echo",
//!     "messages": [{"role": "user", "content": "hello"}],
//! });
//! let reply: serde_json::Value = reqwest::Client::new()
//!     .post(format!("{url}/v1/chat/completions"))
//!     .json(&request)
//!     .send()
//!     .await?
//!     .error_for_status()?
//!     .json()
//!     .await?;
//! let answer = reply["choices"][0]["message"]["content"].as_str().unwrap_or_default();
//! assert!(answer.contains("hello"), "{reply}");
//! let _ = stop.send(());
//! server.await??;
//! rt.shutdown(std::time::Duration::from_secs(5)).await;
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

mod a2a;
pub mod auth;
pub mod body;
mod chat;
mod components;
mod cors;
mod decisions;
pub mod error;
mod events;
pub mod forward;
mod leases;
mod listen;
mod metrics;
pub mod openapi;
pub mod queue;
mod responses;
mod runs;
mod sessions;
mod streams;
mod tool_results;
mod ui;
mod viewer;
pub mod wire;

use axum::Router;
use axum::routing::{get, post};
use cairn_runtime::runtime::Runtime;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The runtime.
    pub rt: Runtime,
    /// Open event streams, counted against their budgets.
    pub streams: streams::Streams,
    /// Uploads being compiled, counted against the upload quotas.
    pub uploads: components::Uploads,
    /// Chat calls lately answered, so a retry joins its first attempt's run.
    pub calls: chat::retry::Calls,
    /// The work queue of the served home.
    pub queue: std::sync::Arc<cairn_orchestration::Queue>,
    /// Where clients reach this server (`[store] advertise`, else the
    /// listening address): the base of the URLs an agent card names. Never
    /// taken from a request's `Host`.
    pub public_url: std::sync::Arc<std::sync::OnceLock<String>>,
}

/// The largest component upload accepted.
pub const MAX_COMPONENT_BYTES: usize = 64 << 20;

/// The router: a function of the state.
pub fn router(rt: Runtime) -> Router {
    router_with(
        rt.clone(),
        cairn_orchestration::Queue::open(rt).expect("the queue opens"),
    )
}

/// The router over `queue` (whose dispatcher the caller runs).
pub fn router_with(rt: Runtime, queue: std::sync::Arc<cairn_orchestration::Queue>) -> Router {
    let state = AppState {
        rt,
        streams: Default::default(),
        uploads: Default::default(),
        calls: Default::default(),
        queue,
        public_url: Default::default(),
    };
    router_of(state)
}

fn router_of(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/ui", get(ui::root_redirect))
        .route("/ui/", get(ui::index))
        .route("/ui/{file}", get(ui::file))
        .route("/metrics", get(metrics::metrics))
        .route("/openapi.json", get(openapi::serve))
        .route("/v1/sessions", post(sessions::create).get(sessions::list))
        .route(
            "/v1/sessions/{id}",
            get(sessions::get).delete(sessions::delete),
        )
        .route("/v1/sessions/{id}/events", get(events::session_events))
        .route("/v1/sessions/{id}/compact", post(sessions::compact))
        .route("/v1/sessions/{id}/branch", post(sessions::branch))
        .route("/v1/sessions/{id}/prune", post(sessions::prune))
        .route("/v1/sessions/{id}/fork", post(sessions::fork))
        .route("/v1/sessions/{id}/update", post(sessions::update))
        .route(
            "/v1/sessions/{id}/observers/{name}",
            axum::routing::put(leases::lease).delete(leases::release),
        )
        .route("/v1/runs", post(runs::start).get(runs::list))
        .route("/v1/runs/{id}", get(runs::get))
        .route("/v1/runs/{id}/cancel", post(runs::cancel))
        .route("/v1/runs/{id}/resume", post(runs::resume))
        .route("/v1/runs/{id}/events", get(events::run_events))
        .route("/v1/runs/{id}/checkpoint", get(viewer::checkpoint))
        .route("/v1/sessions/{id}/journal", get(viewer::journal))
        .route(
            "/v1/sessions/{id}/worktrees/{digest}",
            get(viewer::worktree),
        )
        .route("/v1/components/{digest}", get(viewer::component))
        .route(
            "/v1/components/{digest}/update",
            post(components::update_all),
        )
        .route("/v1/updates/{id}", get(components::update_report))
        .route("/v1/decisions", get(decisions::list))
        .route("/v1/decisions/{id}", post(decisions::decide))
        .route("/v1/approvals/{id}", post(decisions::decide))
        .route(
            "/v1/chat/completions",
            post(chat::completions).layer(axum::middleware::map_response(chat::no_retry)),
        )
        .route(
            "/v1/responses",
            post(responses::create).layer(axum::middleware::map_response(chat::no_retry)),
        )
        .route("/v1/responses/{id}", get(responses::get))
        .route("/v1/responses/{id}/cancel", post(responses::cancel))
        .route("/v1/models", get(chat::models))
        .route("/v1/models/{id}", get(chat::model))
        .route("/v1/queue", post(queue::add).get(queue::list))
        .route("/v1/queue/{card}/answer", post(queue::answer))
        .route("/v1/queue/{card}/rework", post(queue::rework))
        .route("/v1/doctor", get(queue::doctor))
        .route("/.well-known/agent-card.json", get(a2a::default_card))
        .route("/v1/a2a", get(a2a::agents))
        .route(
            "/v1/a2a/.well-known/agent-card.json",
            get(a2a::unnamed_card),
        )
        .route("/v1/a2a/{agent}", post(a2a::rpc))
        .route(
            "/v1/a2a/{agent}/.well-known/agent-card.json",
            get(a2a::agent_card),
        )
        .route(
            "/v1/components",
            post(components::upload)
                .get(components::list)
                .layer(axum::extract::DefaultBodyLimit::max(MAX_COMPONENT_BYTES)),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::record,
        ))
        .fallback(|| async { error::ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|req: axum::extract::Request| async move {
            error::ApiError::new(
                cairn_runtime::ErrorCode::MethodNotAllowed,
                format!("{} is not served at {}", req.method(), req.uri().path()),
            )
        })
        .layer(axum::extract::DefaultBodyLimit::max(body::MAX_JSON_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            forward::route,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::guard,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            error::no_host_paths,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            cors::cors,
        ))
        .with_state(state)
}

/// `GET /healthz`: `ok`, or `503 lost_authority` once this process lost
/// the home's lock (it writes nothing more: take it out of rotation).
async fn healthz(
    axum::extract::State(s): axum::extract::State<AppState>,
) -> Result<&'static str, error::ApiError> {
    match s.rt.lock_lost() {
        None => Ok("ok\n"),
        Some(reason) => Err(error::ApiError::new(
            cairn_runtime::ErrorCode::LostAuthority,
            format!("this process lost the home's lock ({reason}) and writes nothing more"),
        )),
    }
}

/// Serve until `shutdown` resolves; then drain the runtime (see
/// its accept loop: connection budget, header timeout, `TCP_NODELAY`).
pub async fn serve(
    listener: tokio::net::TcpListener,
    rt: Runtime,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let queue = cairn_orchestration::Queue::open(rt.clone())
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    // `cairn serve` runs the queue's dispatcher.
    let dispatcher = queue.clone();
    tokio::spawn(async move {
        if let Err(e) = dispatcher.work(false).await {
            tracing::error!(error = %e, "the work queue's dispatcher stopped");
        }
    });
    let state = AppState {
        rt: rt.clone(),
        streams: Default::default(),
        uploads: Default::default(),
        calls: Default::default(),
        queue,
        public_url: Default::default(),
    };
    let _ = state.public_url.set(public_url(&rt, &listener));
    let app = router_of(state);
    listen::serve(listener, rt, app, shutdown).await
}

/// `[store] advertise`, else `http://` and the listening address (a
/// wildcard address named by loopback, its port kept).
fn public_url(rt: &Runtime, listener: &tokio::net::TcpListener) -> String {
    if let Some(url) = &rt.host_config().store.advertise {
        return url.trim_end_matches('/').to_string();
    }
    match listener.local_addr() {
        Ok(addr) if addr.ip().is_unspecified() => format!("http://127.0.0.1:{}", addr.port()),
        Ok(addr) => format!("http://{addr}"),
        Err(_) => "http://127.0.0.1".to_string(),
    }
}
