//! The seam every capability plugs into (Spin's factors, Golem's durable
//! host calls): a [`Capability`] answers a guest's host call live; the
//! run's side ([`crate::RunHost::host_call`]) decides live-or-replay once
//! per call and journals `host_call_started` / `host_call_finished` around
//! it, so a capability never sees the journal.

use async_trait::async_trait;
use cairn_types::event::{AgentEvent, CallError, CallErrorCode, CallUsage};

/// What one workspace is granted, resolved from the host config by the
/// runtime for each call (a capability enforces it; the guest cannot see
/// or change it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// Model entries (`[models.NAME]`) the workspace may call.
    pub models: Vec<String>,
    /// Secrets (`[secrets]`) the workspace may have used on its behalf.
    pub secrets: Vec<String>,
    /// MCP servers (`[mcp.servers.NAME]`) the workspace's runs may use.
    pub mcp: Vec<String>,
    /// Where its controllers' `wasi:http` requests may go (`scheme://host[:port]`
    /// patterns; see [`cairn_types::http::HostPattern`]).
    pub allowed_outbound_hosts: Vec<String>,
}

/// What a capability's call reports while it lasts.
#[async_trait]
pub trait CallSink: Send + Sync {
    /// Journal an agent event of the run on the call's behalf (a streamed
    /// token marked `by: model`, a `retrying`). `Err` when the run may write
    /// no more (cancelled, over a limit): the call should stop.
    async fn event(&self, event: AgentEvent) -> Result<(), CallError>;
    /// Resolves once the run is cancelled (or a limit broke): the call
    /// should abort what it has under way and return `cancelled`.
    async fn cancelled(&self);
}

/// The context of one live call.
pub struct CallCtx<'a> {
    /// The workspace the run counts against.
    pub workspace: &'a str,
    /// What that workspace may use.
    pub grants: &'a Grants,
    /// Where the call's progress goes.
    pub sink: &'a dyn CallSink,
    /// The time the call may take at most (the run's remaining budget).
    pub timeout: std::time::Duration,
    /// The session the call is made for (a capability may keep what it
    /// prepared for a session warm across its runs).
    pub session: &'a str,
    /// The run's generation directory (`runs/<generation>/`, whose
    /// `artifacts/` is the guest's filesystem); none for calls the runtime
    /// makes on its own behalf.
    pub generation: Option<&'a std::path::Path>,
    /// The run's limits (`http_body_bytes` bounds a response's body).
    pub limits: &'a cairn_types::limits::Limits,
}

impl std::fmt::Debug for CallCtx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallCtx")
            .field("workspace", &self.workspace)
            .field("grants", &self.grants)
            .field("timeout", &self.timeout)
            .field("session", &self.session)
            .field("generation", &self.generation)
            .finish()
    }
}

/// What a live call returned.
#[derive(Debug, Clone, PartialEq)]
pub struct CallReply {
    /// The response the guest gets (journaled as it is).
    pub response: serde_json::Value,
    /// What it used, if the capability counts.
    pub usage: Option<CallUsage>,
}

/// A way out of the sandbox the host provides: a model, tools, the web.
#[async_trait]
pub trait Capability: Send + Sync + 'static {
    /// Its name in the journal (`host_call_started.capability`): `model`.
    fn name(&self) -> &'static str;
    /// Whether `op` with `request` may be sent again when the host died
    /// while it was under way (a model call may; a tool with side effects
    /// may not, and is answered `interrupted` instead).
    fn idempotent(&self, op: &str, request: &serde_json::Value) -> bool;
    /// The WIT package a guest imports to use it (`cairn:tools`), when
    /// its runs should be prepared before they start.
    fn package(&self) -> Option<&'static str> {
        None
    }
    /// Open what a run of this session will use (seed 002's `Preparing`:
    /// MCP connections and their tool lists), before its controller starts;
    /// the session reads `preparing` meanwhile. Never journaled: a failure
    /// here is met again, as a value, by the guest's own call.
    async fn prepare(&self, ctx: &CallCtx<'_>) {
        let _ = ctx;
    }
    /// Let go of what was prepared for `session` (its connections, its
    /// tool list): the session was deleted.
    async fn forget(&self, session: &str) {
        let _ = session;
    }
    /// Do the call. Errors are values the guest sees.
    async fn call(
        &self,
        ctx: &CallCtx<'_>,
        op: &str,
        request: serde_json::Value,
    ) -> Result<CallReply, CallError>;
}

/// A call error of `code` saying `message`.
pub fn call_error(code: CallErrorCode, message: impl Into<String>) -> CallError {
    CallError {
        code,
        message: message.into(),
    }
}
