//! `cairn:model/chat@0.1.0`: a controller's model call, sent by the host
//! to the provider a `[models.NAME]` entry names, with the key a secret
//! holds. Retries a 429, a 5xx, a timeout or a dropped connection with
//! backoff, each journaled as a `retrying` event (the session reads
//! `blocked: provider_retry` meanwhile); streams tokens as `text_delta` /
//! `reasoning_delta` / `tool_call` events marked `by: model`.

mod anthropic;
mod openai;
mod wire;

use crate::secrets::{Secret, Secrets};
use async_trait::async_trait;
use cairn_component::capability::call_error;
use cairn_component::{CallCtx, CallReply, Capability};
use cairn_types::event::{AgentEvent, CallError, CallErrorCode, CallUsage};
use cairn_types::model::{ChatRequest, ModelEntry, Provider};
use std::collections::BTreeMap;
use std::time::Duration;

/// The default number of retries of one call.
pub const DEFAULT_RETRIES: u32 = 4;
/// The default time one attempt may take.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest wait between two attempts (a `Retry-After` included).
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The model capability over a host's model table.
#[derive(Debug, Clone)]
pub struct ModelCapability {
    models: BTreeMap<String, ModelEntry>,
    secrets: Secrets,
    client: reqwest::Client,
    /// The first wait between attempts (doubled each time).
    backoff: Duration,
}

/// Why one attempt failed.
#[derive(Debug)]
pub(crate) struct AttemptError {
    /// Worth another attempt (429, 5xx, timeout, a dropped connection).
    pub retryable: bool,
    /// What the provider asked to wait (`Retry-After`).
    pub retry_after: Option<Duration>,
    /// For people (secrets redacted by the caller).
    pub message: String,
    /// The run was cancelled: stop now.
    pub cancelled: bool,
}

impl AttemptError {
    pub(crate) fn fatal(message: impl Into<String>) -> Self {
        AttemptError {
            retryable: false,
            retry_after: None,
            message: message.into(),
            cancelled: false,
        }
    }

    pub(crate) fn retry(message: impl Into<String>) -> Self {
        AttemptError {
            retryable: true,
            retry_after: None,
            message: message.into(),
            cancelled: false,
        }
    }

    pub(crate) fn cancelled() -> Self {
        AttemptError {
            retryable: false,
            retry_after: None,
            message: "the run was cancelled during the call".into(),
            cancelled: true,
        }
    }

    /// A failed HTTP status, with what the body said.
    pub(crate) fn status(
        status: reqwest::StatusCode,
        retry_after: Option<Duration>,
        body: &str,
    ) -> Self {
        let retryable =
            status.as_u16() == 429 || status.as_u16() == 408 || status.is_server_error();
        let snippet: String = body.chars().take(300).collect();
        AttemptError {
            retryable,
            retry_after,
            message: format!("the provider answered {status}: {}", snippet.trim()),
            cancelled: false,
        }
    }

    /// A transport error (connect, timeout, a stream cut short).
    pub(crate) fn transport(e: &reqwest::Error) -> Self {
        let what = if e.is_timeout() {
            "the provider did not answer in time".to_string()
        } else if e.is_connect() {
            "cannot connect to the provider".to_string()
        } else {
            format!("the provider's answer broke off: {}", without_url(e))
        };
        AttemptError::retry(what)
    }
}

/// A reqwest error's text without its URL (a URL may carry a key as a
/// query parameter at some providers).
fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(url.as_str(), "the provider");
    }
    text
}

/// One attempt's inputs.
pub(crate) struct Attempt<'a> {
    pub client: &'a reqwest::Client,
    pub entry: &'a ModelEntry,
    pub key: Option<&'a Secret>,
    pub request: &'a ChatRequest,
    pub ctx: &'a CallCtx<'a>,
    pub timeout: Duration,
}

impl ModelCapability {
    /// The capability over `models`, reading keys from `secrets`.
    pub fn new(
        models: BTreeMap<String, ModelEntry>,
        secrets: BTreeMap<String, cairn_types::model::SecretSource>,
    ) -> Self {
        ModelCapability {
            models,
            secrets: Secrets::new(secrets),
            client: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default(),
            backoff: Duration::from_millis(500),
        }
    }

    /// The first wait between attempts (tests shorten it).
    pub fn with_backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    async fn chat(&self, ctx: &CallCtx<'_>, request: ChatRequest) -> Result<CallReply, CallError> {
        let Some(entry) = self.models.get(&request.model) else {
            return Err(call_error(
                CallErrorCode::Refused,
                format!(
                    "there is no model {:?} in this host's [models] (add [models.{}] to cairn.toml)",
                    request.model, request.model
                ),
            ));
        };
        if !ctx.grants.models.contains(&request.model) {
            return Err(call_error(
                CallErrorCode::Refused,
                format!(
                    "workspace {:?} may not use the model {:?} (grant it with [workspaces.{}] models = [\"{}\"])",
                    ctx.workspace, request.model, ctx.workspace, request.model
                ),
            ));
        }
        let key = match &entry.api_key {
            Some(name) => Some(
                self.secrets
                    .resolve(name)
                    .map_err(|e| call_error(CallErrorCode::Provider, e.0))?,
            ),
            None => None,
        };
        let retries = entry.max_retries.unwrap_or(DEFAULT_RETRIES);
        let per_attempt = entry
            .timeout_ms
            .map_or(DEFAULT_ATTEMPT_TIMEOUT, Duration::from_millis);
        let mut attempt = 0u32;
        loop {
            let attempt_in = Attempt {
                client: &self.client,
                entry,
                key: key.as_ref(),
                request: &request,
                ctx,
                timeout: per_attempt.min(ctx.timeout),
            };
            let result = match entry.provider {
                Provider::Openai => openai::send(attempt_in).await,
                Provider::Anthropic => anthropic::send(attempt_in).await,
            };
            let error = match result {
                Ok(response) => {
                    let usage = CallUsage {
                        input_tokens: response.input_tokens,
                        output_tokens: response.output_tokens,
                    };
                    return Ok(CallReply {
                        response: serde_json::to_value(&response).map_err(|e| {
                            call_error(
                                CallErrorCode::Provider,
                                format!("cannot encode the response: {e}"),
                            )
                        })?,
                        usage: Some(usage),
                    });
                }
                Err(e) => e,
            };
            if error.cancelled {
                return Err(call_error(CallErrorCode::Cancelled, error.message));
            }
            let message = self.secrets.redact(&error.message);
            if !error.retryable || attempt >= retries {
                let message = match attempt {
                    0 => message,
                    n => format!("{message} (after {} attempts)", n + 1),
                };
                return Err(call_error(CallErrorCode::Provider, message));
            }
            attempt += 1;
            let wait = error
                .retry_after
                .unwrap_or_else(|| self.backoff.saturating_mul(1 << (attempt - 1).min(6)))
                .min(MAX_BACKOFF);
            tracing::info!(
                workspace = ctx.workspace,
                model = request.model,
                attempt,
                after_ms = wait.as_millis() as u64,
                reason = message,
                "retrying a model call"
            );
            ctx.sink
                .event(AgentEvent::Retrying {
                    attempt: attempt + 1,
                    after_ms: wait.as_millis() as u64,
                    reason: message,
                })
                .await?;
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = ctx.sink.cancelled() => {
                    return Err(call_error(CallErrorCode::Cancelled, "the run was cancelled during the call"));
                }
            }
        }
    }
}

#[async_trait]
impl Capability for ModelCapability {
    fn name(&self) -> &'static str {
        "model"
    }

    fn idempotent(&self, op: &str, _request: &serde_json::Value) -> bool {
        // A model call has no effect but its cost: sent again on restore.
        op == "chat"
    }

    async fn call(
        &self,
        ctx: &CallCtx<'_>,
        op: &str,
        request: serde_json::Value,
    ) -> Result<CallReply, CallError> {
        if op != "chat" {
            return Err(call_error(
                CallErrorCode::Refused,
                format!("the model capability has no operation {op:?}"),
            ));
        }
        let request: ChatRequest = serde_json::from_value(request).map_err(|e| {
            call_error(
                CallErrorCode::Refused,
                format!("the model request does not read: {e}"),
            )
        })?;
        self.chat(ctx, request).await
    }
}

/// Emit a tool call the model asked for, once it is whole (`by: model`;
/// arguments that are not JSON go as the text the model wrote).
pub(crate) async fn stream_tool_call(
    ctx: &CallCtx<'_>,
    call: &cairn_types::model::ToolCall,
) -> Result<(), AttemptError> {
    let arguments = serde_json::from_str(&call.arguments)
        .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
    stream_event(
        ctx,
        AgentEvent::ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments,
            by: Some(cairn_types::event::By::Model),
        },
    )
    .await
}

/// Emit a streamed piece (`by: model`); `Err` when the run may write no more.
pub(crate) async fn stream_event(ctx: &CallCtx<'_>, event: AgentEvent) -> Result<(), AttemptError> {
    ctx.sink
        .event(event)
        .await
        .map_err(|_| AttemptError::cancelled())
}
