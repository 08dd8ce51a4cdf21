//! Decisions by webhook (seed 002's `Webhook` route): a decision nobody
//! present can answer is POSTed to the workspace's `[workspaces.W.decisions]
//! webhook`, its body signed `x-cairn-signature: sha256=<hex HMAC-SHA256 of
//! the body>` with the named secret; retried with backoff; the answer comes
//! back through `POST /v1/decisions/{id}`. The runtime calls this (op
//! `deliver`), never a guest.

use crate::secrets::Secrets;
use async_trait::async_trait;
use cairn_component::capability::call_error;
use cairn_component::{CallCtx, CallReply, Capability};
use cairn_types::event::{CallError, CallErrorCode};
use hmac::{Hmac, Mac};
use std::collections::BTreeMap;
use std::time::Duration;

/// Attempts of one delivery.
pub const ATTEMPTS: u32 = 5;

/// The webhook capability.
#[derive(Debug, Clone)]
pub struct WebhookCapability {
    secrets: Secrets,
    client: reqwest::Client,
    backoff: Duration,
}

/// The signature header's value for `body` keyed with `key`:
/// `sha256=<hex>`.
pub fn signature(key: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

impl WebhookCapability {
    /// Deliveries keyed with `secrets`.
    pub fn new(secrets: BTreeMap<String, cairn_types::model::SecretSource>) -> Self {
        WebhookCapability {
            secrets: Secrets::new(secrets),
            client: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap_or_default(),
            backoff: Duration::from_millis(500),
        }
    }

    /// The first wait between attempts (doubled each time; tests shorten it).
    pub fn with_backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    async fn deliver(
        &self,
        ctx: &CallCtx<'_>,
        call: serde_json::Value,
    ) -> Result<CallReply, CallError> {
        let provider = |m: String| call_error(CallErrorCode::Provider, m);
        let url = call["url"]
            .as_str()
            .ok_or_else(|| call_error(CallErrorCode::Refused, "a delivery names no url"))?;
        let body = serde_json::to_vec(&call["body"]).map_err(|e| provider(e.to_string()))?;
        let signed = match call["secret"].as_str() {
            Some(name) => Some(
                self.secrets
                    .resolve(name)
                    .map(|s| signature(s.expose().as_bytes(), &body))
                    .map_err(|e| provider(e.0))?,
            ),
            None => None,
        };
        let id = call["body"]["decision_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                let wait = self.backoff.saturating_mul(1 << (attempt - 1));
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = ctx.sink.cancelled() => return Err(call_error(CallErrorCode::Cancelled, "the run ended")),
                }
            }
            let mut req = self
                .client
                .post(url)
                .header("content-type", "application/json")
                .header("x-cairn-delivery", &id)
                .body(body.clone());
            if let Some(sig) = &signed {
                req = req.header("x-cairn-signature", sig);
            }
            match req.send().await {
                Ok(r) if r.status().is_success() => {
                    return Ok(CallReply {
                        response: serde_json::json!({ "status": r.status().as_u16(), "attempts": attempt + 1 }),
                        usage: None,
                    });
                }
                Ok(r) => last = format!("the webhook answered {}", r.status()),
                Err(e) if e.is_timeout() => last = "the webhook did not answer in time".into(),
                Err(_) => last = "cannot reach the webhook".into(),
            }
        }
        Err(provider(format!("{last} ({ATTEMPTS} attempts)")))
    }
}

#[async_trait]
impl Capability for WebhookCapability {
    fn name(&self) -> &'static str {
        "webhook"
    }

    fn idempotent(&self, _op: &str, _request: &serde_json::Value) -> bool {
        true
    }

    async fn call(
        &self,
        ctx: &CallCtx<'_>,
        op: &str,
        request: serde_json::Value,
    ) -> Result<CallReply, CallError> {
        match op {
            "deliver" => self.deliver(ctx, request).await,
            other => Err(call_error(
                CallErrorCode::Refused,
                format!("the webhook capability has no operation {other:?}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_signature_is_the_hex_hmac_sha256_of_the_body() {
        // RFC 4231 test case 2.
        assert_eq!(
            super::signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
