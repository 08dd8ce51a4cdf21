//! Outgoing HTTP for controllers (`wasi:http`), sent here: the runtime
//! journals each request and response (capability `http`, op `request`)
//! and replays them; this side checks the workspace's
//! `allowed_outbound_hosts` (every hop: redirects are the guest's to
//! follow), fills `{{secret:NAME}}` header templates with granted secrets,
//! bounds the time (`http_timeout_ms`) and the response's body
//! (`http_body_bytes`), and redacts any secret a server echoes back.
//!
//! An error names its kind first (`connection-refused: …`): the guest
//! gets the matching `wasi:http` `error-code`.

use crate::secrets::Secrets;
use async_trait::async_trait;
use cairn_component::capability::call_error;
use cairn_component::{CallCtx, CallReply, Capability};
use cairn_types::event::{CallError, CallErrorCode};
use cairn_types::http::{
    HttpRequest, HttpResponse, allowed, decode_body, encode_body, idempotent_method,
};
use futures_util::StreamExt;
use std::collections::BTreeMap;
use std::time::Duration;

/// The `http` capability.
#[derive(Debug, Clone)]
pub struct HttpCapability {
    secrets: Secrets,
    client: reqwest::Client,
}

impl HttpCapability {
    /// Requests whose header templates read `secrets`.
    pub fn new(secrets: BTreeMap<String, cairn_types::model::SecretSource>) -> Self {
        HttpCapability {
            secrets: Secrets::new(secrets),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default(),
        }
    }
}

fn refused(message: String) -> CallError {
    call_error(CallErrorCode::Refused, message)
}

fn failed(kind: &str, message: impl std::fmt::Display) -> CallError {
    call_error(CallErrorCode::Provider, format!("{kind}: {message}"))
}

/// A reqwest error as `kind: message` (its causes included).
fn network_error(e: &reqwest::Error) -> (&'static str, String) {
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    let kind = if e.is_timeout() {
        if e.is_connect() {
            "connection-timeout"
        } else {
            "response-timeout"
        }
    } else if message.contains("dns error") {
        "dns-error"
    } else if e.is_connect() {
        "connection-refused"
    } else if e.is_builder() {
        "uri-invalid"
    } else {
        "internal"
    };
    (kind, message)
}

impl HttpCapability {
    async fn send(
        &self,
        ctx: &CallCtx<'_>,
        request: HttpRequest,
    ) -> Result<HttpResponse, CallError> {
        let url = reqwest::Url::parse(&request.url)
            .map_err(|e| failed("uri-invalid", format!("{:?}: {e}", request.url)))?;
        let scheme = url.scheme().to_string();
        let host = url.host_str().unwrap_or_default().to_string();
        let Some(port) = url.port_or_known_default() else {
            return Err(failed(
                "uri-invalid",
                format!("{:?} names no port", request.url),
            ));
        };
        if !allowed(&ctx.grants.allowed_outbound_hosts, &scheme, &host, port) {
            return Err(refused(format!(
                "{scheme}://{host}:{port} is not in this workspace's allowed_outbound_hosts"
            )));
        }
        let method = reqwest::Method::from_bytes(request.method.as_bytes()).map_err(|_| {
            failed(
                "uri-invalid",
                format!("{:?} is not an HTTP method", request.method),
            )
        })?;
        let mut builder = self.client.request(method, url).timeout(ctx.timeout);
        for (name, value) in &request.headers {
            let value = if value.contains("{{secret:") {
                if let Some(secret) = cairn_types::tools::secret_names(value)
                    .into_iter()
                    .find(|s| !ctx.grants.secrets.contains(s))
                {
                    return Err(refused(format!(
                        "the header {name} names the secret {secret:?}, which this workspace is not granted"
                    )));
                }
                self.secrets
                    .expand(value)
                    .map_err(|e| failed("internal", e.0))?
            } else {
                value.clone()
            };
            builder = builder.header(name.as_str(), value);
        }
        let body = decode_body(&request.body, &request.body_base64).map_err(refused)?;
        if !body.is_empty() {
            builder = builder.body(body);
        }
        let response = builder.send().await.map_err(|e| {
            let (kind, message) = network_error(&e);
            failed(kind, self.secrets.redact(&message))
        })?;
        let status = response.status().as_u16();
        let headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    self.secrets.redact(&String::from_utf8_lossy(v.as_bytes())),
                )
            })
            .collect();
        let limit = ctx.limits.http_body_bytes;
        let mut bytes = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                let (kind, message) = network_error(&e);
                failed(kind, self.secrets.redact(&message))
            })?;
            if (bytes.len() + chunk.len()) as u64 > limit {
                return Err(failed(
                    "response-body-size",
                    format!("the response's body passed http_body_bytes ({limit} bytes)"),
                ));
            }
            bytes.extend_from_slice(&chunk);
        }
        let (body, body_base64) = encode_body(&bytes);
        Ok(HttpResponse {
            status,
            headers,
            // A server that echoes a secret back does not hand it over.
            body: body.map(|b| self.secrets.redact(&b)),
            body_base64,
        })
    }
}

#[async_trait]
impl Capability for HttpCapability {
    fn name(&self) -> &'static str {
        cairn_component::HTTP
    }

    fn idempotent(&self, op: &str, request: &serde_json::Value) -> bool {
        op == "request" && request["method"].as_str().is_some_and(idempotent_method)
    }

    async fn call(
        &self,
        ctx: &CallCtx<'_>,
        op: &str,
        request: serde_json::Value,
    ) -> Result<CallReply, CallError> {
        if op != "request" {
            return Err(refused(format!(
                "the http capability has no operation {op:?}"
            )));
        }
        let request: HttpRequest = serde_json::from_value(request)
            .map_err(|e| refused(format!("the request does not read: {e}")))?;
        let response = self.send(ctx, request).await?;
        let response = serde_json::to_value(&response)
            .map_err(|e| failed("internal", format!("cannot encode the response: {e}")))?;
        Ok(CallReply {
            response,
            usage: None,
        })
    }
}
