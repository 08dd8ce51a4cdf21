//! The host config, `cairn.toml` in the home (or `--config FILE`):
//!
//! ```toml
//! [limits]                 # host defaults and ceilings for every workspace
//! memory_bytes = 268435456
//!
//! [workspaces.acme]
//! tokens = ["a-long-random-secret"]
//! [workspaces.acme.limits] # this workspace's ceilings, under the host's
//! events_per_run = 10000
//! ```
//!
//! A missing file is the defaults with no workspaces (and so no tokens).

use crate::limits::Limits;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// The parsed config.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// Host-wide limits.
    #[serde(default)]
    pub limits: Limits,
    /// Workspaces by name.
    #[serde(default)]
    pub workspaces: BTreeMap<String, WorkspaceConfig>,
    /// The pooling allocator's size.
    #[serde(default)]
    pub pool: PoolConfig,
    /// What each workspace may hold at once, unless it says otherwise.
    #[serde(default)]
    pub quota: Quota,
    /// How long old generations keep their worktrees.
    #[serde(default)]
    pub retention: Retention,
    /// What the HTTP server holds open.
    #[serde(default)]
    pub server: ServerConfig,
    /// The A2A seam.
    #[serde(default)]
    pub a2a: A2aConfig,
    /// The work queue.
    #[serde(default)]
    pub queue: QueueConfig,
    /// What runs do unless they say otherwise.
    #[serde(default)]
    pub runs: RunsConfig,
    /// What browsers may do.
    #[serde(default)]
    pub http: HttpConfig,
    /// Where durable facts live: the home (default) or a shared database.
    #[serde(default)]
    pub store: SharedStoreConfig,
    /// The model table (`[models.NAME]`): what `cairn:model` calls reach.
    /// Granted to the host's own workspace (`local`), and to a workspace
    /// that names them (`[workspaces.W] models = [...]`).
    #[serde(default)]
    pub models: BTreeMap<String, cairn_types::model::ModelEntry>,
    /// Secrets by name (`[secrets] NAME = { env = "VAR" } | { file = "…" }`),
    /// read host-side when a call needs one; only names are ever written.
    #[serde(default)]
    pub secrets: BTreeMap<String, cairn_types::model::SecretSource>,
    /// MCP tool servers (`[mcp.servers.NAME]`) and how long a session's
    /// connections stay warm (`[mcp] idle_ms`): what `cairn:tools` reaches.
    #[serde(default)]
    pub mcp: cairn_types::tools::McpConfig,
}

/// `[store]`: the shared store several `cairn serve` instances run on. With
/// no `url` the home's own files are the store (the embedded default).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SharedStoreConfig {
    /// `postgres://user@host/db` (or `postgresql://…`, or a libpq key/value
    /// string): journals, run facts, the catalog, blobs and leases live
    /// there.
    pub url: Option<String>,
    /// This instance's name in the store (leases name it as their holder).
    /// Default: a fresh one at every start, so a restarted instance never
    /// mistakes an old lease for its own.
    pub instance: Option<String>,
    /// The URL other instances forward requests to (default: the listen
    /// address, `http://ADDR`).
    pub advertise: Option<String>,
    /// How long a session's lease lasts unrenewed; it is renewed every
    /// third of it.
    pub lease_ttl_ms: u64,
    /// How long a write of acknowledged work (a journal append — decision
    /// answers included —, a run's end, a checkpoint) waits for the shared
    /// store's database to come back (a restart, a failover) before it
    /// fails `storage`: runs ride out an outage this long. Default 30,000.
    pub outage_budget_ms: u64,
    /// How the home's file store makes a new session durable at its first
    /// commit (the embedded store only): `auto` (default), `syncfs` or
    /// `each`. See [`FirstCommitSync`].
    pub first_commit_sync: FirstCommitSync,
}

pub use crate::worker::FirstCommitSync;

impl Default for SharedStoreConfig {
    fn default() -> Self {
        SharedStoreConfig {
            url: None,
            instance: None,
            advertise: None,
            lease_ttl_ms: crate::store::lease::DEFAULT_TTL.as_millis() as u64,
            outage_budget_ms: 30_000,
            first_commit_sync: FirstCommitSync::default(),
        }
    }
}

/// `[http]`: browsers. A page served by cairn itself (`/ui/`) is always
/// allowed; pages of other origins only when listed.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Origins (`https://viewer.example`) whose pages may call the API
    /// (CORS), writes included.
    pub allowed_origins: Vec<String>,
    /// Where the `local` workspace's controllers may send requests through
    /// `wasi:http` (`https://api.example.com`, `http://127.0.0.1:*`,
    /// `https://*.example.com`, as Spin writes them); none by default.
    pub allowed_outbound_hosts: Vec<String>,
}

/// `[runs]`: defaults of every run.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunsConfig {
    /// A run that parks is resumed at the host's next start (a run's own
    /// `resume_on_start` wins).
    pub resume_on_start: bool,
    /// A run whose controller waits on a timer at least this long (ms)
    /// leaves memory meanwhile and is restored by replay shortly before
    /// the timer is due; 0: never.
    pub evict_idle_ms: u64,
}

impl Default for RunsConfig {
    fn default() -> Self {
        RunsConfig {
            resume_on_start: false,
            evict_idle_ms: 5_000,
        }
    }
}

/// `[queue]`: the work queue's dispatcher.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// Rows `processing` at once: the open workers of the queue.
    pub max_concurrency: usize,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig { max_concurrency: 4 }
    }
}

/// `[a2a]`: the A2A seam. Every component a workspace may use is an agent
/// (`/v1/a2a/{component}`); the host's default agent is the one
/// `/.well-known/agent-card.json` describes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct A2aConfig {
    /// The default agent: a built-in example name or a `sha256:` digest.
    pub default_agent: String,
}

impl Default for A2aConfig {
    fn default() -> Self {
        A2aConfig {
            default_agent: "echo".into(),
        }
    }
}

/// `[server]`: connection and stream budgets of `cairn serve`, so no client
/// can hold the host's descriptors or its event streams.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Connections open at once; past it a new connection gets `503` with
    /// `code: "capacity"` and is closed.
    pub max_connections: usize,
    /// A request's header must arrive within this (a keep-alive connection
    /// idle this long between requests is closed too).
    pub header_timeout_ms: u64,
    /// Event streams (SSE) open at once on one session.
    pub streams_per_session: usize,
    /// Event streams (SSE) open at once in one workspace.
    pub streams_per_workspace: usize,
    /// Tokens of the host's operator: they read the host-wide views
    /// (`GET /v1/doctor` of every workspace, `/metrics`) and act for no
    /// workspace.
    pub operator_tokens: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_connections: 4096,
            header_timeout_ms: 10_000,
            streams_per_session: 64,
            streams_per_workspace: 1024,
            operator_tokens: Vec::new(),
        }
    }
}

/// `[retention]`: what is kept of old generations. Seed 000 leaves the
/// policy to the host; cairn keeps the whole `runs/<gen>/` of the newest
/// `keep_generations` generations of a worker, and of older ones removes
/// only `artifacts/` (their logs stay as evidence, each bounded by
/// `log_bytes`). Pruned when a run ends, off the async threads.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Retention {
    /// Generations whose worktree is kept (0: keep every one).
    pub keep_generations: u64,
    /// How long an ended run stays on its session in memory, so a late
    /// observer sees its ending; then it retires (`run_retired`; its state
    /// reads `retired`, its journal stays readable).
    pub ended_runs_ms: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep_generations: 8,
            ended_runs_ms: 600_000,
        }
    }
}

/// `[quota]` (and `[workspaces.NAME.quota]`): what one workspace may hold
/// at once, so no tenant can take the host from the others.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Quota {
    /// Live runs (preparing, running or waiting on a decision). 0: a fair
    /// share — the pool's instances, less a reserve for describes, split
    /// evenly between the configured workspaces.
    pub live_runs: usize,
    /// Runs waiting on a decision; a workspace holding this many starts no
    /// more runs until one is answered. 0: no cap beyond `live_runs`.
    pub waiting_runs: usize,
    /// Components uploaded (distinct digests). 0: the default, 256.
    pub uploads: usize,
    /// Bytes of the components uploaded, together. 0: the default, 1 GiB.
    pub component_bytes: u64,
    /// Work-queue cards open at once (pending, processing or awaiting). 0: the default, 1,000.
    pub cards: usize,
    /// Workers (sessions, delegated children included) the workspace
    /// holds until it deletes them. 0: the default, 100,000.
    pub workers: usize,
}

/// The default `uploads` quota.
pub const DEFAULT_UPLOADS: usize = 256;
/// The default `cards` quota.
pub const DEFAULT_CARDS: usize = 1000;
/// The default `workers` quota.
pub const DEFAULT_WORKERS: usize = 100_000;
/// The default `component_bytes` quota.
pub const DEFAULT_COMPONENT_BYTES: u64 = 1 << 30;

/// Instances kept back from the fair share (describes of new uploads).
const RESERVED_INSTANCES: usize = 16;

/// `[pool]`: how many instances the pooling allocator holds ready. Set
/// `instances = 0` to allocate on demand instead.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    /// Component instances live at once (runs plus describes).
    pub instances: u32,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig { instances: 1000 }
    }
}

/// One workspace.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceConfig {
    /// Bearer tokens that act for it.
    #[serde(default)]
    pub tokens: Vec<String>,
    /// Its ceilings (each capped by the host's).
    #[serde(default)]
    pub limits: Option<Limits>,
    /// Its quota (default: the host's `[quota]`).
    #[serde(default)]
    pub quota: Option<Quota>,
    /// The model entries it may call (none unless named).
    #[serde(default)]
    pub models: Vec<String>,
    /// The secrets it may have used on its behalf (HTTP header templates;
    /// a granted model's key needs no grant of its own).
    #[serde(default)]
    pub secrets: Vec<String>,
    /// The MCP servers (`[mcp.servers.NAME]`) its runs may use (none
    /// unless named).
    #[serde(default)]
    pub mcp: Vec<String>,
    /// Where its decisions go when nobody present can answer them.
    #[serde(default)]
    pub decisions: Option<DecisionsConfig>,
    /// Where its controllers may send requests through `wasi:http` (none
    /// unless named; patterns as in `[http] allowed_outbound_hosts`).
    #[serde(default)]
    pub allowed_outbound_hosts: Vec<String>,
}

/// `[workspaces.W.decisions]`: a decision nobody present can answer is
/// POSTed to `webhook` (route `webhook`), signed with the secret when one
/// is named; the answer comes back through `POST /v1/decisions/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionsConfig {
    /// The receiver's URL (`https://…`, or `http://` on loopback).
    pub webhook: String,
    /// The secret (`[secrets] NAME`) the body's HMAC-SHA256 is keyed with
    /// (`x-cairn-signature: sha256=<hex>`).
    #[serde(default)]
    pub secret: Option<String>,
}

/// The config file is unreadable or wrong.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct ConfigError {
    /// The file.
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

impl HostConfig {
    /// Load `path`; a missing file is the defaults.
    pub fn load(path: &Path) -> Result<HostConfig, ConfigError> {
        let err = |reason: String| ConfigError {
            path: path.display().to_string(),
            reason,
        };
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HostConfig::default()),
            Err(e) => return Err(err(e.to_string())),
        };
        let config: HostConfig = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
        let mut seen = BTreeMap::new();
        for (name, ws) in &config.workspaces {
            for token in &ws.tokens {
                if token.len() < 16 {
                    return Err(err(format!(
                        "a token of workspace {name:?} is shorter than 16 characters"
                    )));
                }
                if let Some(other) = seen.insert(token.clone(), name.clone()) {
                    return Err(err(format!(
                        "workspaces {other:?} and {name:?} share a token"
                    )));
                }
            }
        }
        for (name, model) in &config.models {
            if let Some(secret) = &model.api_key
                && !config.secrets.contains_key(secret)
            {
                return Err(err(format!(
                    "model {name:?} names the secret {secret:?}, which [secrets] does not define"
                )));
            }
            if !(model.base_url.starts_with("http://") || model.base_url.starts_with("https://")) {
                return Err(err(format!(
                    "model {name:?}: base_url must start with http:// or https://"
                )));
            }
        }
        for (name, server) in &config.mcp.servers {
            match (server.command.is_empty(), &server.url) {
                (false, None) => {}
                (true, Some(url)) if url.starts_with("http://") || url.starts_with("https://") => {}
                (true, Some(_)) => {
                    return Err(err(format!(
                        "mcp server {name:?}: url must start with http:// or https://"
                    )));
                }
                _ => {
                    return Err(err(format!(
                        "mcp server {name:?} needs exactly one of command = [...] (stdio) and url = \"…\" (streamable HTTP)"
                    )));
                }
            }
            if let Some(secret) = server
                .secrets()
                .into_iter()
                .find(|s| !config.secrets.contains_key(s))
            {
                return Err(err(format!(
                    "mcp server {name:?} names the secret {secret:?}, which [secrets] does not define"
                )));
            }
        }
        for pattern in &config.http.allowed_outbound_hosts {
            cairn_types::http::HostPattern::parse(pattern)
                .map_err(|e| err(format!("[http] {e}")))?;
        }
        for (name, ws) in &config.workspaces {
            for pattern in &ws.allowed_outbound_hosts {
                cairn_types::http::HostPattern::parse(pattern)
                    .map_err(|e| err(format!("workspace {name:?}: {e}")))?;
            }
            if let Some(server) = ws.mcp.iter().find(|m| !config.mcp.servers.contains_key(*m)) {
                return Err(err(format!(
                    "workspace {name:?} is granted the mcp server {server:?}, which [mcp.servers] does not define"
                )));
            }
            if let Some(model) = ws.models.iter().find(|m| !config.models.contains_key(*m)) {
                return Err(err(format!(
                    "workspace {name:?} is granted the model {model:?}, which [models] does not define"
                )));
            }
            if let Some(d) = &ws.decisions {
                if !(d.webhook.starts_with("http://") || d.webhook.starts_with("https://")) {
                    return Err(err(format!(
                        "workspace {name:?}: decisions.webhook must start with http:// or https://"
                    )));
                }
                if let Some(secret) = d
                    .secret
                    .as_ref()
                    .filter(|s| !config.secrets.contains_key(*s))
                {
                    return Err(err(format!(
                        "workspace {name:?}: decisions.secret names {secret:?}, which [secrets] does not define"
                    )));
                }
            }
            if let Some(secret) = ws.secrets.iter().find(|s| !config.secrets.contains_key(*s)) {
                return Err(err(format!(
                    "workspace {name:?} is granted the secret {secret:?}, which [secrets] does not define"
                )));
            }
        }
        Ok(config)
    }

    /// What `workspace` may use through capabilities: everything defined at
    /// the top level for the host's own workspace (local mode and `cairn
    /// run`), only what it names for any other.
    pub fn grants(&self, workspace: &str) -> crate::component::Grants {
        if workspace == HOST_WORKSPACE {
            return crate::component::Grants {
                models: self.models.keys().cloned().collect(),
                secrets: self.secrets.keys().cloned().collect(),
                mcp: self.mcp.servers.keys().cloned().collect(),
                allowed_outbound_hosts: self.http.allowed_outbound_hosts.clone(),
            };
        }
        match self.workspaces.get(workspace) {
            Some(ws) => crate::component::Grants {
                models: ws.models.clone(),
                secrets: ws.secrets.clone(),
                mcp: ws.mcp.clone(),
                allowed_outbound_hosts: ws.allowed_outbound_hosts.clone(),
            },
            None => crate::component::Grants::default(),
        }
    }

    /// The workspace a bearer token acts for.
    pub fn workspace_of(&self, token: &str) -> Option<&str> {
        self.workspaces
            .iter()
            .find(|(_, ws)| {
                ws.tokens
                    .iter()
                    .any(|t| constant_time_eq(t.as_bytes(), token.as_bytes()))
            })
            .map(|(name, _)| name.as_str())
    }

    /// Whether any token is configured.
    pub fn has_tokens(&self) -> bool {
        self.workspaces.values().any(|w| !w.tokens.is_empty())
            || !self.server.operator_tokens.is_empty()
    }

    /// Whether `token` is one of `[server] operator_tokens`.
    pub fn is_operator(&self, token: &str) -> bool {
        self.server
            .operator_tokens
            .iter()
            .any(|t| constant_time_eq(t.as_bytes(), token.as_bytes()))
    }

    /// A workspace's ceilings: its own, capped by the host's.
    pub fn ceilings(&self, workspace: &str) -> Limits {
        match self.workspaces.get(workspace).and_then(|w| w.limits) {
            Some(own) => own.min(self.limits),
            None => self.limits,
        }
    }
}

impl HostConfig {
    /// How many live runs `workspace` may hold at once.
    pub fn live_run_quota(&self, workspace: &str) -> usize {
        let own = self
            .workspaces
            .get(workspace)
            .and_then(|w| w.quota)
            .map_or(0, |q| q.live_runs);
        let host = self.quota.live_runs;
        match (own, host) {
            (0, 0) => self.fair_share(),
            (0, h) => h,
            (o, _) => o,
        }
    }

    /// A quota of `workspace`: its own when set (non-zero), else the
    /// host's, else `default`.
    pub fn quota_of<T: Copy + PartialEq + Default>(
        &self,
        workspace: &str,
        pick: impl Fn(&Quota) -> T,
        default: T,
    ) -> T {
        let zero = T::default();
        let own = self
            .workspaces
            .get(workspace)
            .and_then(|w| w.quota.as_ref())
            .map_or(zero, &pick);
        let host = pick(&self.quota);
        match (own != zero, host != zero) {
            (true, _) => own,
            (false, true) => host,
            (false, false) => default,
        }
    }

    fn fair_share(&self) -> usize {
        let pool = self.pool.instances as usize;
        if pool == 0 {
            // On demand: memory, not slots, is what runs out; the host's
            // limits bound each run.
            return 10_000;
        }
        let tenants = self.workspaces.len().max(1);
        let reserve = RESERVED_INSTANCES.min(pool / 4);
        ((pool - reserve) / tenants).max(1)
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

/// The host's own workspace: local mode, `cairn run` and the CLI act for
/// it; its sessions are keyed by their bare names.
pub const HOST_WORKSPACE: &str = "local";
