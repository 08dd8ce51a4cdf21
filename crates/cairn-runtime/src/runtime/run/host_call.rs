//! The capabilities an embedder registered ([`crate::RuntimeBuilder::capability`])
//! and the one durable host call every guest call goes through: live, it
//! journals `host_call_started`, lets the capability stream its progress
//! into the run's journal, and journals `host_call_finished` before the
//! guest sees the answer; replayed, it answers from those entries and calls
//! nobody (see `run/script.rs`).

use super::RunCtx;
use crate::component::capability::call_error;
use crate::component::{CallCtx, CallSink, Capability, Grants};
use crate::config::HostConfig;
use crate::journal::event::{
    AgentEvent, CallError, CallErrorCode, CallUsage, LifecycleEvent, Payload,
};
use async_trait::async_trait;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The registered capabilities and the config their grants come from.
pub(crate) struct Capabilities {
    list: Vec<Arc<dyn Capability>>,
    config: HostConfig,
    telemetry: Arc<crate::runtime::telemetry::Telemetry>,
}

impl Capabilities {
    pub(crate) fn new(
        list: Vec<Arc<dyn Capability>>,
        config: HostConfig,
        telemetry: Arc<crate::runtime::telemetry::Telemetry>,
    ) -> Self {
        Capabilities {
            list,
            config,
            telemetry,
        }
    }

    fn find(&self, name: &str) -> Option<&Arc<dyn Capability>> {
        self.list.iter().find(|c| c.name() == name)
    }

    /// Where `workspace`'s decisions go when nobody present can answer
    /// (a `webhook` capability must be registered to send them).
    pub(crate) fn webhook(&self, workspace: &str) -> Option<crate::config::DecisionsConfig> {
        self.find(WEBHOOK)?;
        self.config
            .workspaces
            .get(workspace)
            .and_then(|w| w.decisions.clone())
    }

    /// Prepare what the run's controller imports (MCP connections and
    /// tool lists) before it starts; ends early when the run is cancelled.
    pub(crate) async fn prepare(
        &self,
        run: &RunCtx,
        prepared: &crate::component::Prepared,
        generation: &std::path::Path,
    ) {
        // Most controllers import no capability to prepare: nothing to
        // resolve on their run's start.
        let wanted: Vec<&Arc<dyn Capability>> = self
            .list
            .iter()
            .filter(|c| c.package().is_some_and(|p| prepared.imports_package(p)))
            .collect();
        if wanted.is_empty() {
            return;
        }
        let workspace = run.workspace.get().cloned().unwrap_or_default();
        let grants = self.grants(&workspace);
        let session = run.session.to_string();
        let sink = Quiet(run.cancel.subscribe());
        let ctx = CallCtx {
            workspace: &workspace,
            grants: &grants,
            sink: &sink,
            timeout: Duration::from_millis(self.config.mcp.call_timeout_ms.max(1)),
            session: &session,
            generation: Some(generation),
            limits: &run.limits,
        };
        for cap in wanted {
            let mut cancel = run.cancel.subscribe();
            tokio::select! {
                _ = cap.prepare(&ctx) => {}
                _ = async { let _ = cancel.wait_for(|c| c.is_some()).await; } => return,
            }
        }
    }

    /// Let every capability drop what it kept for `session`.
    pub(crate) async fn forget(&self, session: &str) {
        for cap in &self.list {
            cap.forget(session).await;
        }
    }

    /// What `workspace` is granted.
    pub(crate) fn grants(&self, workspace: &str) -> Grants {
        self.config.grants(workspace)
    }

    /// Whether `op` of `capability` may be sent again after the host died
    /// while it was under way (an unknown capability: no).
    pub(crate) fn idempotent(
        &self,
        capability: &str,
        op: &str,
        request: &serde_json::Value,
    ) -> bool {
        // Delegation is the runtime's own: a spawn is adopted when asked
        // again (the child's id derives from the run and the spawn's
        // ordinal); the other calls read, or change nothing twice.
        capability == WORKERS
            || self
                .find(capability)
                .is_some_and(|c| c.idempotent(op, request))
    }
}

/// The capability that sends decisions to a workspace's webhook (op
/// `deliver`); the runtime calls it, never a guest.
pub(crate) const WEBHOOK: &str = "webhook";

/// The language model capability (`cairn:model`): the one whose calls
/// count against `model_calls`, `model_tokens` and `model_wall_ms`.
pub(crate) const MODEL: &str = "model";

/// MCP tools (`cairn:tools`): the one whose calls count against
/// `tool_calls`.
pub(crate) const TOOLS: &str = "tools";

/// The runtime's own capability: delegation (`cairn:controller/workers`).
pub(crate) const WORKERS: &str = "workers";

fn refused(message: impl Into<String>) -> CallError {
    call_error(CallErrorCode::Refused, message)
}

/// A live call's progress, journaled as the run's agent events.
struct Progress<'a> {
    ctx: &'a RunCtx,
}

#[async_trait]
impl CallSink for Progress<'_> {
    async fn event(&self, event: AgentEvent) -> Result<(), CallError> {
        let ctx = self.ctx;
        if ctx.cancel.borrow().is_some() || ctx.failure().is_some() {
            return Err(call_error(CallErrorCode::Cancelled, "the run is cancelled"));
        }
        let retrying = matches!(event, AgentEvent::Retrying { .. });
        let payload = Payload::Agent(event);
        let json = ctx
            .measured(&payload)
            .map_err(|what| call_error(CallErrorCode::LimitExceeded, what))?;
        ctx.retrying.store(retrying, Ordering::Relaxed);
        ctx.append_agent(payload, &json, "a host call's progress")
            .await
            .map_err(|failure| call_error(CallErrorCode::Cancelled, failure.0))?;
        Ok(())
    }

    async fn cancelled(&self) {
        let mut rx = self.ctx.cancel.subscribe();
        let _ = rx.wait_for(|c| c.is_some()).await;
    }
}

impl RunCtx {
    /// Charge a call against the run's per-capability limits before it
    /// goes out; the limit it would break, as the guest's error value.
    fn charge_call(&self, capability: &str, op: &str) -> Result<(), CallError> {
        let limit_error = |what: String| call_error(CallErrorCode::LimitExceeded, what);
        if capability == crate::component::HTTP {
            let requests = self.http_requests.fetch_add(1, Ordering::Relaxed) + 1;
            if requests > self.limits.http_requests {
                return Err(limit_error(self.break_limit(
                    "http_requests",
                    requests,
                    self.limits.http_requests,
                )));
            }
            return Ok(());
        }
        if capability == TOOLS && op == "call" {
            let calls = self.tool_calls.fetch_add(1, Ordering::Relaxed) + 1;
            if calls > self.limits.tool_calls {
                return Err(limit_error(self.break_limit(
                    "tool_calls",
                    calls,
                    self.limits.tool_calls,
                )));
            }
            return Ok(());
        }
        if capability != MODEL {
            return Ok(());
        }
        let calls = self.model_calls.fetch_add(1, Ordering::Relaxed) + 1;
        if calls > self.limits.model_calls {
            return Err(limit_error(self.break_limit(
                "model_calls",
                calls,
                self.limits.model_calls,
            )));
        }
        let tokens = self.tokens();
        if tokens >= self.limits.model_tokens {
            return Err(limit_error(self.break_limit(
                "model_tokens",
                tokens,
                self.limits.model_tokens,
            )));
        }
        let spent = self.model_wall_ms.load(Ordering::Relaxed);
        if spent >= self.limits.model_wall_ms {
            return Err(limit_error(self.break_limit(
                "model_wall_ms",
                spent,
                self.limits.model_wall_ms,
            )));
        }
        Ok(())
    }

    fn tokens(&self) -> u64 {
        self.input_tokens.load(Ordering::Relaxed) + self.output_tokens.load(Ordering::Relaxed)
    }

    /// Count what a call used (live or replayed); past `model_tokens` the
    /// run ends `limit_exceeded` (the guest still gets this answer).
    pub(crate) fn count_call(&self, usage: Option<CallUsage>) {
        self.host_call_count.fetch_add(1, Ordering::Relaxed);
        if let Some(u) = usage {
            self.input_tokens
                .fetch_add(u.input_tokens, Ordering::Relaxed);
            self.output_tokens
                .fetch_add(u.output_tokens, Ordering::Relaxed);
            let tokens = self.tokens();
            if tokens > self.limits.model_tokens {
                self.break_limit("model_tokens", tokens, self.limits.model_tokens);
            }
        }
    }

    /// Do a call live, journaling its start unless `restarted` (a call
    /// whose start the journal holds, sent again on restore), and its end.
    pub(crate) async fn host_call_live(
        &self,
        call_id: u64,
        capability: &str,
        op: &str,
        request: serde_json::Value,
        restarted: bool,
    ) -> Result<Result<serde_json::Value, CallError>, crate::component::HostFailure> {
        if !restarted {
            let size = crate::journal::json_len(&request) + 160;
            self.admit(&[size]).map_err(|what| {
                crate::component::HostFailure(format!("a host call broke a limit: {what}"))
            })?;
            let entry = Payload::Lifecycle(LifecycleEvent::HostCallStarted {
                call_id,
                capability: capability.to_string(),
                op: op.to_string(),
                request: request.clone(),
            });
            let safe_to_repeat = self
                .capabilities
                .get()
                .is_some_and(|c| c.idempotent(capability, op, &request));
            if safe_to_repeat {
                // Committed with the call's end (or sooner): a crash before
                // that commit loses a call the restore makes again anyway.
                self.journal
                    .append_seq(Some(self.run_id), entry)
                    .await
                    .map_err(|e| self.refused("a host call", e))?;
            } else {
                // Durable before the call goes out: a restore must know it
                // may have happened, and answer it `interrupted`.
                self.journal
                    .append(Some(self.run_id), entry)
                    .await
                    .map_err(|e| self.refused("a host call", e))?;
            }
        }
        let _suspended = self.suspended();
        let started = Instant::now();
        let model = (capability == MODEL)
            .then(|| request["model"].as_str().unwrap_or_default().to_string());
        let result = self.call_capability(capability, op, request).await;
        if let (Some(model), Some(caps)) = (&model, self.capabilities.get()) {
            let workspace = self.workspace.get().map(String::as_str).unwrap_or_default();
            let (outcome, usage) = match &result {
                Ok(reply) => ("ok", reply.usage),
                Err(e) => (e.code.as_str(), None),
            };
            caps.telemetry.model_call(workspace, model, outcome, usage);
        }
        if capability == MODEL {
            self.model_wall_ms
                .fetch_add(started.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
        self.retrying.store(false, Ordering::Relaxed);
        let (response, error, usage) = match result {
            Ok(reply) => (Some(reply.response), None, reply.usage),
            Err(e) => (None, Some(e), None),
        };
        let size = response.as_ref().map_or(0, crate::journal::json_len)
            + error.as_ref().map_or(0, |e| e.message.len() as u64)
            + 160;
        self.admit(&[size]).map_err(|what| {
            crate::component::HostFailure(format!("a host call's answer broke a limit: {what}"))
        })?;
        let entry = self
            .lifecycle(LifecycleEvent::HostCallFinished {
                call_id,
                response: response.clone(),
                error: error.clone(),
                usage,
            })
            .await?;
        // The guest's clock reads the journaled time of its latest input
        // (a call answered in any order is not one: see `run/keyed.rs`).
        if !super::keyed::by_id(capability) {
            self.advance_clock(entry.at_ms);
        }
        self.count_call(usage);
        Ok(match (response, error) {
            (Some(r), None) => Ok(r),
            (_, Some(e)) => Err(e),
            (None, None) => Err(refused("the call returned nothing")),
        })
    }

    /// A `workers` call, done by the runtime that hosts the run.
    async fn call_workers(
        &self,
        request: serde_json::Value,
    ) -> Result<crate::component::CallReply, CallError> {
        if self.cancel.borrow().is_some() {
            return Err(refused("the run is cancelled"));
        }
        let Some(supervisor) = self.supervisor.get().and_then(|s| s.upgrade()) else {
            return Err(refused("this host cannot delegate (an offline replay)"));
        };
        let answer = supervisor.workers_call(self, &request).await;
        match answer.get("error").and_then(|e| e.as_str()) {
            Some(e) => Err(refused(e)),
            None => Ok(crate::component::CallReply {
                response: answer.get("ok").cloned().unwrap_or_default(),
                usage: None,
            }),
        }
    }

    async fn call_capability(
        &self,
        capability: &str,
        op: &str,
        request: serde_json::Value,
    ) -> Result<crate::component::CallReply, CallError> {
        if capability == WORKERS {
            return self.call_workers(request).await;
        }
        let Some(caps) = self.capabilities.get().cloned() else {
            return Err(refused(format!(
                "this host provides no {capability} capability (an offline replay calls nobody)"
            )));
        };
        let Some(cap) = caps.find(capability).cloned() else {
            return Err(refused(format!(
                "this host provides no {capability} capability"
            )));
        };
        if self.cancel.borrow().is_some() {
            return Err(call_error(CallErrorCode::Cancelled, "the run is cancelled"));
        }
        self.charge_call(capability, op)?;
        let workspace = self.workspace.get().cloned().unwrap_or_default();
        let grants = caps.grants(&workspace);
        let timeout = if capability == MODEL {
            self.limits
                .model_wall_ms
                .saturating_sub(self.model_wall_ms.load(Ordering::Relaxed))
        } else if capability == crate::component::HTTP {
            self.limits.http_timeout_ms
        } else {
            caps.config.mcp.call_timeout_ms
        };
        let sink = Progress { ctx: self };
        let session = self.session.to_string();
        let generation = self
            .place()
            .and_then(|p| p.artifacts.parent().map(std::path::Path::to_path_buf));
        let call = CallCtx {
            workspace: &workspace,
            grants: &grants,
            sink: &sink,
            timeout: Duration::from_millis(timeout.max(1)),
            session: &session,
            generation: generation.as_deref(),
            limits: &self.limits,
        };
        let mut cancel = self.cancel.subscribe();
        tokio::select! {
            reply = cap.call(&call, op, request) => reply,
            _ = async { let _ = cancel.wait_for(|c| c.is_some()).await; } => {
                Err(call_error(CallErrorCode::Cancelled, "the run was cancelled during the call"))
            }
            _ = tokio::time::sleep(call.timeout), if capability == MODEL => {
                let what = self.break_limit("model_wall_ms", self.limits.model_wall_ms, self.limits.model_wall_ms);
                Err(call_error(CallErrorCode::LimitExceeded, what))
            }
        }
    }
}

/// A sink for calls the runtime makes on its own behalf: nothing to journal.
struct Quiet(tokio::sync::watch::Receiver<Option<super::Cancel>>);

#[async_trait]
impl CallSink for Quiet {
    async fn event(&self, _event: AgentEvent) -> Result<(), CallError> {
        Ok(())
    }

    async fn cancelled(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|c| c.is_some()).await;
    }
}

impl RunCtx {
    /// Send a pending decision to the workspace's webhook, off the run's
    /// path (the run waits for an answer from any seam meanwhile). A
    /// delivery that fails, retries spent, is noted on the pending
    /// decision; the decision stays pending.
    pub(crate) fn deliver(
        &self,
        caps: Arc<Capabilities>,
        hook: crate::config::DecisionsConfig,
        id: &crate::ids::DecisionId,
        request: &crate::component::DecisionRequest,
    ) {
        let Some(cap) = caps.find(WEBHOOK).cloned() else {
            return;
        };
        let workspace = self.workspace.get().cloned().unwrap_or_default();
        let body = serde_json::json!({
            "decision_id": id,
            "session_id": self.session,
            "run_id": self.run_id,
            "request_kind": request.kind,
            "prompt": request.prompt,
            "details": request.details,
            "timeout_ms": request.timeout_ms,
            "default_value": request.default_value,
            "answer": format!("POST /v1/decisions/{id}"),
        });
        let call = serde_json::json!({ "url": hook.webhook, "secret": hook.secret, "body": body });
        let broker = self.broker.clone();
        let id = id.clone();
        let cancel = self.cancel.subscribe();
        let session = self.session.to_string();
        let limits = self.limits;
        tokio::spawn(async move {
            let grants = caps.grants(&workspace);
            let sink = Quiet(cancel);
            let ctx = CallCtx {
                workspace: &workspace,
                grants: &grants,
                sink: &sink,
                timeout: Duration::from_secs(60),
                session: &session,
                generation: None,
                limits: &limits,
            };
            if let Err(e) = cap.call(&ctx, "deliver", call).await {
                tracing::warn!(decision_id = %id, workspace, error = e.message, "a decision's webhook delivery failed");
                broker.note_delivery(&id, e.message);
            }
        });
    }
}
