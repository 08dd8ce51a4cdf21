//! `cairn:tools/mcp@0.1.0`: the tools of MCP servers (`[mcp.servers.NAME]`),
//! reached with the official Rust SDK (`rmcp`). A session's connections
//! and discovered tool lists are opened on its first call and kept across
//! its runs until `[mcp] idle_ms` passes with no call, the session is
//! deleted, or the server dies (restarted once on the next call). A stdio
//! server's stderr goes to the generation's `mcp.<server>.err.log`.

use crate::secrets::Secrets;
use async_trait::async_trait;
use cairn_component::capability::call_error;
use cairn_component::{CallCtx, CallReply, Capability};
use cairn_types::event::{CallError, CallErrorCode};
use cairn_types::tools::{McpConfig, McpServer, ToolCallRequest, ToolInfo, ToolResult};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, Tool};
use rmcp::service::{RoleClient, RunningService};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most of a server's stderr kept in one generation's log.
const MAX_LOG_BYTES: u64 = 4 << 20;
/// How long a server may take to start and answer `initialize`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// What one warm connection is keyed by: a server started with
/// `{artifacts}` is per generation, any other per session.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    session: String,
    server: String,
    generation: Option<PathBuf>,
}

impl Key {
    fn of(ctx: &CallCtx<'_>, name: &str, server: &McpServer) -> Key {
        Key {
            session: ctx.session.to_string(),
            server: name.to_string(),
            generation: if per_generation(server) {
                ctx.generation.map(Path::to_path_buf)
            } else {
                None
            },
        }
    }
}

/// One open connection and what it offers.
struct Conn {
    service: RunningService<RoleClient, ()>,
    tools: Vec<Tool>,
}

/// A connection slot: filled on first use, emptied when idle or dead.
#[derive(Default)]
struct Slot {
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    used: Mutex<Option<Instant>>,
}

/// The tools capability over a host's `[mcp]` table.
pub struct ToolsCapability {
    config: McpConfig,
    secrets: Secrets,
    slots: Arc<Mutex<HashMap<Key, Arc<Slot>>>>,
    reaper: std::sync::Once,
    /// Servers started (a restart counts), for tests and metrics.
    starts: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for ToolsCapability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolsCapability")
            .field("servers", &self.config.servers.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn server_error(message: impl Into<String>) -> CallError {
    call_error(CallErrorCode::Provider, message)
}

fn refused(message: impl Into<String>) -> CallError {
    call_error(CallErrorCode::Refused, message)
}

/// Whether a server's start depends on the generation.
fn per_generation(server: &McpServer) -> bool {
    server.command.iter().any(|a| a.contains("{artifacts}"))
        || server
            .cwd
            .as_deref()
            .is_some_and(|c| c.contains("{artifacts}"))
}

impl ToolsCapability {
    /// The capability over `config`, expanding secrets from `secrets`.
    pub fn new(
        config: McpConfig,
        secrets: BTreeMap<String, cairn_types::model::SecretSource>,
    ) -> Self {
        // The streamable HTTP client is built without a TLS provider of its
        // own: ring, as everywhere else in the host (an error means one is
        // installed already).
        let _ = rustls::crypto::ring::default_provider().install_default();
        ToolsCapability {
            config,
            secrets: Secrets::new(secrets),
            slots: Arc::default(),
            reaper: std::sync::Once::new(),
            starts: Arc::default(),
        }
    }

    /// Servers started so far (each restart counts).
    pub fn starts(&self) -> u64 {
        self.starts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sessions' connections open now.
    pub fn open(&self) -> usize {
        let slots: Vec<Arc<Slot>> = self.slots.lock().unwrap().values().cloned().collect();
        slots
            .iter()
            .filter(|s| s.conn.try_lock().map(|c| c.is_some()).unwrap_or(true))
            .count()
    }

    /// Close connections idle past `idle_ms`, every quarter of it.
    fn start_reaper(&self) {
        self.reaper.call_once(|| {
            let slots = Arc::downgrade(&self.slots);
            let idle = Duration::from_millis(self.config.idle_ms.max(1));
            let tick = (idle / 4).clamp(Duration::from_millis(5), Duration::from_secs(30));
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(tick).await;
                    let Some(slots) = slots.upgrade() else { return };
                    let idle_keys: Vec<(Key, Arc<Slot>)> = slots
                        .lock()
                        .unwrap()
                        .iter()
                        .filter(|(_, s)| {
                            s.used
                                .lock()
                                .unwrap()
                                .is_some_and(|at| at.elapsed() >= idle)
                        })
                        .map(|(k, s)| (k.clone(), s.clone()))
                        .collect();
                    for (key, slot) in idle_keys {
                        // A call under way holds the slot: it is not idle.
                        if let Ok(mut conn) = slot.conn.try_lock() {
                            // A call under way holds the connection too.
                            if conn.as_ref().is_some_and(|c| Arc::strong_count(c) > 1) {
                                continue;
                            }
                            if let Some(c) = conn.take() {
                                close(c).await;
                            }
                            slots.lock().unwrap().remove(&key);
                        }
                    }
                }
            });
        });
    }

    fn slot(&self, key: &Key) -> Arc<Slot> {
        self.slots
            .lock()
            .unwrap()
            .entry(key.clone())
            .or_default()
            .clone()
    }

    /// The open connection to `name` for this call's session, started (or
    /// restarted, once, when it died) as needed.
    async fn connection(
        &self,
        ctx: &CallCtx<'_>,
        name: &str,
        server: &McpServer,
    ) -> Result<Arc<Conn>, CallError> {
        self.start_reaper();
        let slot = self.slot(&Key::of(ctx, name, server));
        let mut conn = slot.conn.lock().await;
        // Used now (a start that takes longer than `idle_ms` is not idle).
        let touch = || *slot.used.lock().unwrap() = Some(Instant::now());
        touch();
        if let Some(c) = conn.as_ref() {
            if !c.service.is_transport_closed() {
                return Ok(c.clone());
            }
            tracing::warn!(server = name, "an MCP server died; starting it again");
            if let Some(c) = conn.take() {
                close(c).await;
            }
        }
        let fresh = Arc::new(self.connect(ctx, name, server).await?);
        *conn = Some(fresh.clone());
        touch();
        Ok(fresh)
    }

    async fn connect(
        &self,
        ctx: &CallCtx<'_>,
        name: &str,
        server: &McpServer,
    ) -> Result<Conn, CallError> {
        let started = Instant::now();
        let service = match &server.url {
            Some(url) => self.reach(name, url, server).await?,
            None => self.spawn(ctx, name, server).await?,
        };
        self.starts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tools = tokio::time::timeout(CONNECT_TIMEOUT, service.list_all_tools())
            .await
            .map_err(|_| {
                server_error(format!(
                    "mcp server {name:?} did not list its tools in time"
                ))
            })?
            .map_err(|e| {
                server_error(format!(
                    "mcp server {name:?} did not list its tools: {}",
                    self.secrets.redact(&e.to_string())
                ))
            })?;
        tracing::info!(
            server = name,
            tools = tools.len(),
            ms = started.elapsed().as_millis() as u64,
            "an MCP server is ready"
        );
        Ok(Conn { service, tools })
    }

    /// Start a stdio server as a child process, with only `PATH` of the
    /// host's environment and its own (secrets expanded).
    async fn spawn(
        &self,
        ctx: &CallCtx<'_>,
        name: &str,
        server: &McpServer,
    ) -> Result<RunningService<RoleClient, ()>, CallError> {
        let artifacts = ctx.generation.map(|g| g.join("artifacts"));
        let place = |text: &str| -> Result<String, CallError> {
            if !text.contains("{artifacts}") {
                return Ok(text.to_string());
            }
            match &artifacts {
                Some(a) => Ok(text.replace("{artifacts}", &a.to_string_lossy())),
                None => Err(refused(format!(
                    "mcp server {name:?} names {{artifacts}}, and this call has no run directory"
                ))),
            }
        };
        let (program, args) = server
            .command
            .split_first()
            .ok_or_else(|| refused(format!("mcp server {name:?} has no command")))?;
        let mut cmd = tokio::process::Command::new(place(program)?);
        for a in args {
            cmd.arg(place(a)?);
        }
        cmd.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        for (k, v) in &server.env {
            let value = self
                .secrets
                .expand(v)
                .map_err(|e| refused(format!("mcp server {name:?}: its env {k}: {}", e.0)))?;
            cmd.env(k, value);
        }
        if let Some(cwd) = &server.cwd {
            cmd.current_dir(place(cwd)?);
        }
        cmd.kill_on_drop(true);
        let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| {
                server_error(format!("mcp server {name:?} cannot start ({program}): {e}"))
            })?;
        if let Some(stderr) = stderr {
            keep_log(stderr, ctx.generation, name);
        }
        tokio::time::timeout(CONNECT_TIMEOUT, ().serve(transport))
            .await
            .map_err(|_| server_error(format!("mcp server {name:?} did not initialize in time")))?
            .map_err(|e| {
                server_error(format!(
                    "mcp server {name:?} did not initialize: {}",
                    self.secrets.redact(&e.to_string())
                ))
            })
    }

    /// Close `dead` if it is still the session's connection to `name`.
    async fn discard(&self, ctx: &CallCtx<'_>, name: &str, server: &McpServer, dead: &Arc<Conn>) {
        let slot = self.slot(&Key::of(ctx, name, server));
        let mut conn = slot.conn.lock().await;
        if conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, dead)) {
            conn.take();
        }
    }

    /// Reach a server over streamable HTTP, its headers' secrets expanded
    /// (`Authorization: Bearer …` goes as the transport's bearer token).
    async fn reach(
        &self,
        name: &str,
        url: &str,
        server: &McpServer,
    ) -> Result<RunningService<RoleClient, ()>, CallError> {
        use reqwest::header::{HeaderName, HeaderValue};
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
        let mut headers = HashMap::new();
        for (k, v) in &server.headers {
            let value = self
                .secrets
                .expand(v)
                .map_err(|e| refused(format!("mcp server {name:?}: its header {k}: {}", e.0)))?;
            if k.eq_ignore_ascii_case("authorization")
                && let Some(token) = value.strip_prefix("Bearer ")
            {
                config = config.auth_header(token.to_string());
                continue;
            }
            let header = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| refused(format!("mcp server {name:?}: {k:?} is not a header name")))?;
            let value = HeaderValue::from_str(&value).map_err(|_| {
                refused(format!(
                    "mcp server {name:?}: the header {k} has a value no header may carry"
                ))
            })?;
            headers.insert(header, value);
        }
        let transport = rmcp::transport::StreamableHttpClientTransport::from_config(
            config.custom_headers(headers),
        );
        tokio::time::timeout(CONNECT_TIMEOUT, ().serve(transport))
            .await
            .map_err(|_| {
                server_error(format!(
                    "mcp server {name:?} ({url}) did not initialize in time"
                ))
            })?
            .map_err(|e| {
                server_error(format!(
                    "mcp server {name:?} ({url}) did not initialize: {}",
                    self.secrets.redact(&e.to_string())
                ))
            })
    }

    /// The granted servers, by name.
    fn granted<'c>(&'c self, ctx: &CallCtx<'_>) -> Vec<(&'c str, &'c McpServer)> {
        self.config
            .servers
            .iter()
            .filter(|(name, _)| ctx.grants.mcp.iter().any(|g| g == *name))
            .map(|(n, s)| (n.as_str(), s))
            .collect()
    }

    async fn list(&self, ctx: &CallCtx<'_>) -> Result<Vec<ToolInfo>, CallError> {
        let servers = self.granted(ctx);
        if servers.is_empty() {
            return Err(refused(format!(
                "workspace {:?} is granted no MCP servers ([workspaces.{}] mcp = [...] in cairn.toml)",
                ctx.workspace, ctx.workspace
            )));
        }
        let mut listed: Vec<(String, &McpServer, Tool)> = Vec::new();
        for (name, server) in servers {
            let conn = self.connection(ctx, name, server).await?;
            for tool in &conn.tools {
                listed.push((name.to_string(), server, tool.clone()));
            }
        }
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (_, _, tool) in &listed {
            *seen.entry(tool.name.to_string()).or_default() += 1;
        }
        Ok(listed
            .into_iter()
            .map(|(server_name, server, tool)| {
                let own = tool.name.to_string();
                let name = if seen[&own] > 1 {
                    format!("{server_name}__{own}")
                } else {
                    own.clone()
                };
                let hinted = tool
                    .annotations
                    .as_ref()
                    .and_then(|a| a.read_only_hint)
                    .unwrap_or(false);
                ToolInfo {
                    server: server_name,
                    description: tool.description.as_deref().unwrap_or_default().to_string(),
                    input_schema: serde_json::Value::Object((*tool.input_schema).clone()),
                    read_only: hinted || server.is_read_only(&own),
                    approve: server.needs_approval(&own),
                    name,
                }
            })
            .collect())
    }

    async fn call_tool(
        &self,
        ctx: &CallCtx<'_>,
        request: ToolCallRequest,
    ) -> Result<ToolResult, CallError> {
        let Some((name, server)) = self
            .granted(ctx)
            .into_iter()
            .find(|(n, _)| *n == request.server)
        else {
            return Err(refused(format!(
                "workspace {:?} is not granted the mcp server {:?}",
                ctx.workspace, request.server
            )));
        };
        let arguments = match &request.arguments {
            serde_json::Value::Object(o) => o.clone(),
            _ => return Err(refused("a tool's arguments must be a JSON object")),
        };
        let mut attempts = 0;
        let result = loop {
            attempts += 1;
            let conn = self.connection(ctx, name, server).await?;
            let params =
                CallToolRequestParams::new(request.tool.clone()).with_arguments(arguments.clone());
            let result = tokio::select! {
                r = tokio::time::timeout(ctx.timeout, conn.service.call_tool(params)) => r,
                _ = ctx.sink.cancelled() => {
                    return Err(call_error(CallErrorCode::Cancelled, "the run was cancelled during the call"));
                }
            };
            let lost = matches!(
                result,
                Ok(Err(
                    rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_)
                ))
            );
            if !lost {
                break result;
            }
            // The server died under the call: the connection goes (the
            // next call starts it again); a read-only call is sent again
            // once, one that changes things is reported (it may have run).
            self.discard(ctx, name, server, &conn).await;
            if attempts > 1 || !request.read_only {
                break result;
            }
        };
        // Idle time counts from a call's end.
        *self.slot(&Key::of(ctx, name, server)).used.lock().unwrap() = Some(Instant::now());
        let result = match result {
            Err(_) => {
                return Err(server_error(format!(
                    "the tool {:?} of {name:?} did not answer within {} ms",
                    request.tool,
                    ctx.timeout.as_millis()
                )));
            }
            Ok(Err(e)) => {
                return Err(server_error(format!(
                    "the tool {:?} of {name:?} failed: {}",
                    request.tool,
                    self.secrets.redact(&e.to_string())
                )));
            }
            Ok(Ok(r)) => r,
        };
        let text: Vec<&str> = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
            .collect();
        // What a server says may echo a secret it was started with: the
        // journal gets the secret's name instead.
        let redacted = |v: serde_json::Value| -> serde_json::Value {
            let text = self.secrets.redact(&v.to_string());
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)
        };
        Ok(ToolResult {
            text: self.secrets.redact(&text.join("\n")),
            content: redacted(
                serde_json::to_value(&result.content)
                    .unwrap_or(serde_json::Value::Array(Vec::new())),
            ),
            structured: result.structured_content.clone().map(redacted),
            is_error: result.is_error.unwrap_or(false),
        })
    }
}

async fn close(conn: Arc<Conn>) {
    if let Ok(conn) = Arc::try_unwrap(conn) {
        let _ = tokio::time::timeout(Duration::from_secs(5), conn.service.cancel()).await;
    }
}

/// Copy a server's stderr into the generation's log (capped), or drop it.
fn keep_log(mut stderr: tokio::process::ChildStderr, generation: Option<&Path>, server: &str) {
    use tokio::io::AsyncReadExt;
    let file = generation.and_then(|g| {
        let dir = cap_std::fs::Dir::open_ambient_dir(g, cap_std::ambient_authority()).ok()?;
        let mut opts = cap_std::fs::OpenOptions::new();
        opts.append(true).create(true);
        let name: String = server
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        dir.open_with(format!("mcp.{name}.err.log"), &opts).ok()
    });
    tokio::spawn(async move {
        let mut file = file.map(|f| f.into_std());
        let mut written = 0u64;
        let mut buf = vec![0u8; 8192];
        loop {
            match stderr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if let Some(f) = file.as_mut()
                        && written < MAX_LOG_BYTES
                    {
                        use std::io::Write;
                        let take = (n as u64).min(MAX_LOG_BYTES - written) as usize;
                        let _ = f.write_all(&buf[..take]);
                        written += take as u64;
                    }
                }
            }
        }
    });
}

#[async_trait]
impl Capability for ToolsCapability {
    fn name(&self) -> &'static str {
        "tools"
    }

    fn idempotent(&self, op: &str, request: &serde_json::Value) -> bool {
        op == "list" || request["read_only"].as_bool().unwrap_or(false)
    }

    fn package(&self) -> Option<&'static str> {
        Some("cairn:tools")
    }

    async fn prepare(&self, ctx: &CallCtx<'_>) {
        for (name, server) in self.granted(ctx) {
            if let Err(e) = self.connection(ctx, name, server).await {
                tracing::warn!(
                    server = name,
                    error = e.message,
                    "an MCP server did not open for a run"
                );
            }
        }
    }

    async fn forget(&self, session: &str) {
        let gone: Vec<(Key, Arc<Slot>)> = {
            let mut slots = self.slots.lock().unwrap();
            let keys: Vec<Key> = slots
                .keys()
                .filter(|k| k.session == session)
                .cloned()
                .collect();
            keys.into_iter()
                .filter_map(|k| slots.remove(&k).map(|s| (k, s)))
                .collect()
        };
        for (_, slot) in gone {
            if let Some(c) = slot.conn.lock().await.take() {
                close(c).await;
            }
        }
    }

    async fn call(
        &self,
        ctx: &CallCtx<'_>,
        op: &str,
        request: serde_json::Value,
    ) -> Result<CallReply, CallError> {
        let response = match op {
            "list" => serde_json::to_value(self.list(ctx).await?),
            "call" => {
                let request: ToolCallRequest = serde_json::from_value(request)
                    .map_err(|e| refused(format!("a tool call does not read: {e}")))?;
                serde_json::to_value(self.call_tool(ctx, request).await?)
            }
            other => return Err(refused(format!("cairn:tools has no operation {other:?}"))),
        }
        .map_err(|e| server_error(format!("cannot encode the answer: {e}")))?;
        Ok(CallReply {
            response,
            usage: None,
        })
    }
}
