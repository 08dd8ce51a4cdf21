//! The A2A seam: protocol 1.0, JSON-RPC binding, as the official SDKs
//! speak it (`002_…`). Every component a workspace may use is an agent:
//! its card at `/v1/a2a/{component}/.well-known/agent-card.json`, its
//! JSON-RPC endpoint at `POST /v1/a2a/{component}`; the host's default
//! agent (`[a2a] default_agent`) is described at
//! `/.well-known/agent-card.json`. A task is a run (task id = run id,
//! contextId = session id); the task claims its run until the run ends, so
//! a client that goes away cancels nothing; `CancelTask` does. Methods:
//! `SendMessage`, `SendStreamingMessage`, `GetTask`, `ListTasks`,
//! `CancelTask`, `SubscribeToTask`; push notifications and the extended
//! card are answered with their A2A errors. Task records are the run
//! index's (run id → session id, facts) and the journal, so a subscribe
//! after a restart finds the task.

mod methods;
mod task;

use super::AppState;
use super::auth::Workspace;
use super::error::ApiError;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A2A's JSON-RPC error codes cairn answers with.
pub mod code {
    pub const PARSE: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    pub const TASK_NOT_FOUND: i64 = -32001;
    pub const TASK_NOT_CANCELABLE: i64 = -32002;
    pub const PUSH_NOT_SUPPORTED: i64 = -32003;
    pub const UNSUPPORTED_OPERATION: i64 = -32004;
    pub const EXTENDED_CARD_NOT_CONFIGURED: i64 = -32007;
    pub const VERSION_NOT_SUPPORTED: i64 = -32009;
}

/// A JSON-RPC error.
#[derive(Debug)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }

    pub fn params(message: impl Into<String>) -> Self {
        Self::new(code::INVALID_PARAMS, message)
    }

    fn body(&self, id: &Value) -> Value {
        json!({ "jsonrpc": "2.0", "id": id, "error": { "code": self.code, "message": self.message } })
    }
}

impl From<ApiError> for RpcError {
    fn from(e: ApiError) -> Self {
        let code = match e.status() {
            StatusCode::NOT_FOUND => code::TASK_NOT_FOUND,
            StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => code::INVALID_PARAMS,
            // A live run on the context, a claim held: nothing this call can do now.
            StatusCode::CONFLICT => code::UNSUPPORTED_OPERATION,
            _ => code::INTERNAL,
        };
        RpcError::new(code, format!("{}: {}", e.code, e.message))
    }
}

impl From<cairn_runtime::runtime::RuntimeError> for RpcError {
    fn from(e: cairn_runtime::runtime::RuntimeError) -> Self {
        ApiError::from(e).into()
    }
}

/// One agent: the component, as the URL names it and as stored.
#[derive(Debug, Clone)]
pub struct Agent {
    /// The URL's name: a built-in example name or `sha256:<hex>`.
    pub name: String,
    /// `sha256:<hex>`.
    pub digest: String,
    /// What it says about itself.
    pub info: cairn_runtime::component::Info,
}

async fn agent(s: &AppState, ws: &Workspace, name: &str) -> Result<Agent, ApiError> {
    let component = super::runs::component_ref(s, ws, name).await?;
    let (digest, info) = s.rt.add_component(&component).await?;
    Ok(Agent {
        name: name.to_string(),
        digest,
        info,
    })
}

/// The base of a card's URLs: where the server says it is reached, never
/// the request's `Host` (the default card is shown to anyone). A router
/// not behind `serve` (tests) names a loopback `Host` or `localhost`.
fn base_url(s: &AppState, headers: &HeaderMap) -> String {
    if let Some(url) = s.public_url.get() {
        return url.clone();
    }
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| super::auth::loopback_host(h))
        .unwrap_or("localhost");
    format!("http://{host}")
}

/// The agent card of `agent` (A2A 1.0 `AgentCard`, ProtoJSON).
fn card(s: &AppState, base: &str, agent: &Agent) -> Value {
    let description = format!(
        "{} {}, a cairn controller ({}). Each message runs it as a task (task id = run id) in a session (contextId); pending decisions are input-required, answered by a reply with a data part.",
        agent.info.name, agent.info.version, agent.digest
    );
    let modes = json!(["text/plain", "application/json"]);
    let mut card = json!({
        "name": agent.info.name,
        "description": description,
        "version": agent.info.version,
        "supportedInterfaces": [{
            "url": format!("{base}/v1/a2a/{}", agent.name),
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0",
        }],
        "provider": { "organization": "cairn", "url": base },
        "capabilities": { "streaming": true, "pushNotifications": false, "extendedAgentCard": false },
        "defaultInputModes": modes,
        "defaultOutputModes": ["text/plain"],
        "skills": [{
            "id": agent.name,
            "name": agent.info.name,
            "description": format!("run {} on a message", agent.info.name),
            "tags": ["cairn", "controller"],
            "inputModes": modes,
            "outputModes": ["text/plain"],
        }],
    });
    if s.rt.host_config().has_tokens() {
        card["securitySchemes"] = json!({ "bearer": { "httpAuthSecurityScheme": {
            "scheme": "Bearer",
            "description": "a workspace token from the server's cairn.toml",
        }}});
        card["securityRequirements"] = json!([{ "schemes": { "bearer": { "list": [] } } }]);
    }
    card
}

/// `GET /.well-known/agent-card.json`: the host's default agent.
pub async fn default_card(
    State(s): State<AppState>,
    headers: HeaderMap,
) -> Result<axum::Json<Value>, ApiError> {
    let name = s.rt.host_config().a2a.default_agent.clone();
    // The default agent is the operator's choice, shown to anyone: its
    // component is looked up in the default workspace.
    let ws = Workspace(s.rt.default_workspace().to_string());
    let agent = agent(&s, &ws, &name).await?;
    Ok(axum::Json(card(&s, &base_url(&s, &headers), &agent)))
}

/// `GET /v1/a2a/{agent}/.well-known/agent-card.json`.
pub async fn agent_card(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<axum::Json<Value>, ApiError> {
    let agent = agent(&s, &ws, &name).await?;
    Ok(axum::Json(card(&s, &base_url(&s, &headers), &agent)))
}

/// `GET /v1/a2a/.well-known/agent-card.json`: where a client that
/// resolves the card relative to its base URL looks when the agent's URL
/// was given without its trailing slash (`new URL(".well-known/…",
/// ".../v1/a2a/echo")` drops `echo`). The agent is not in the path, so no
/// card can be chosen: the error says which URL to give.
pub async fn unnamed_card() -> ApiError {
    ApiError::not_found(
        "no agent is named in this path: an agent's card is /v1/a2a/{agent}/.well-known/agent-card.json; \
         a client that resolves the card relative to its base URL (@a2a-js/sdk's createFromUrl) \
         needs the agent's URL with its trailing slash: BASE/v1/a2a/{agent}/",
    )
}

/// `GET /v1/a2a`: the cards of every agent the caller may use.
pub async fn agents(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    headers: HeaderMap,
) -> Result<axum::Json<Value>, ApiError> {
    let base = base_url(&s, &headers);
    let mut cards = Vec::new();
    for c in super::components::usable(&s, &ws).await? {
        let agent = Agent {
            name: c.built_in.clone().unwrap_or_else(|| c.digest.clone()),
            digest: c.digest,
            info: cairn_runtime::component::Info {
                name: c.name,
                version: c.version,
                can_park: c.can_park,
            },
        };
        cards.push(card(&s, &base, &agent));
    }
    Ok(axum::Json(json!({ "agents": cards })))
}

/// `POST /v1/a2a/{agent}`: one JSON-RPC 2.0 request.
pub async fn rpc(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // An error names no host path (as every HTTP error body).
    let home = s.rt.clone();
    let fail = move |id: &Value, e: RpcError| {
        let e = RpcError::new(e.code, home.strip_home(&e.message));
        axum::Json(e.body(id)).into_response()
    };
    let req: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return fail(
                &Value::Null,
                RpcError::new(code::PARSE, format!("the body is not JSON: {e}")),
            );
        }
    };
    let id = req.get("id").cloned().unwrap_or(Value::Null);
    if req.get("jsonrpc") != Some(&json!("2.0")) || !req.is_object() {
        return fail(
            &id,
            RpcError::new(code::INVALID_REQUEST, "not a JSON-RPC 2.0 request"),
        );
    }
    let Some(method) = req.get("method").and_then(Value::as_str) else {
        return fail(
            &id,
            RpcError::new(code::INVALID_REQUEST, "the request names no method"),
        );
    };
    if let Some(v) = headers.get("a2a-version").and_then(|v| v.to_str().ok())
        && !v.trim().starts_with("1.")
        && v.trim() != "1"
    {
        return fail(
            &id,
            RpcError::new(
                code::VERSION_NOT_SUPPORTED,
                format!("A2A version {v} is not supported; this server speaks 1.0"),
            ),
        );
    }
    let params = req.get("params").cloned().unwrap_or_else(|| json!({}));
    if !params.is_object() {
        return fail(&id, RpcError::params("params must be an object"));
    }
    let agent = match agent(&s, &ws, &name).await {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    let call = methods::Call {
        s: s.clone(),
        ws,
        agent,
        id: id.clone(),
    };
    let result = match method {
        "SendMessage" => call.send(params).await,
        "SendStreamingMessage" => call.send_streaming(params).await,
        "GetTask" => call.get(params).await,
        "ListTasks" => call.list(params).await,
        "CancelTask" => call.cancel(params).await,
        "SubscribeToTask" => call.subscribe(params).await,
        "GetExtendedAgentCard" => Err(RpcError::new(
            code::EXTENDED_CARD_NOT_CONFIGURED,
            "this agent has no extended card",
        )),
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => Err(RpcError::new(
            code::PUSH_NOT_SUPPORTED,
            "push notifications are not supported; stream or subscribe instead",
        )),
        other => Err(RpcError::new(
            code::METHOD_NOT_FOUND,
            format!("no method {other:?}"),
        )),
    };
    match result {
        Ok(response) => response,
        Err(e) => fail(&id, e),
    }
}

/// A JSON-RPC success body.
pub fn success(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}
