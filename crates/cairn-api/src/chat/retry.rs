//! One call, one run: a chat call that is retried — the same
//! `Idempotency-Key`, or (the OpenAI SDKs send no key) `x-stainless-retry-count`
//! ≥ 1 with the very same body — joins the run its first attempt started
//! instead of starting another. The first attempt's run gets a grace window
//! (`GRACE_MS`) before a lost client cancels it, so the retry finds it live.

use axum::http::HeaderMap;
use cairn_runtime::ids::{RunId, Seq, SessionId};
use sha2::Digest;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a call's run waits for a retry to claim it once its client is
/// gone (a call that cannot be retried gets none).
pub const GRACE_MS: u64 = 5_000;

/// How long a call can be joined by a retry.
const REMEMBERED: Duration = Duration::from_secs(600);

/// Calls remembered at most (the oldest forgotten past it).
const MAX_CALLS: usize = 10_000;

/// A call that may be retried: its key, and whether this attempt is a retry.
#[derive(Debug, Clone)]
pub struct Call {
    key: String,
    retry: bool,
}

impl Call {
    /// The call a request is, when it may be retried.
    pub fn of(workspace: &str, headers: &HeaderMap, body: &[u8]) -> Option<Call> {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        if let Some(key) = text("idempotency-key").filter(|k| !k.is_empty() && k.len() <= 256) {
            return Some(Call {
                key: format!("{workspace}\u{0}key\u{0}{key}"),
                retry: true,
            });
        }
        let count: u32 = text("x-stainless-retry-count")?.parse().ok()?;
        Some(Call {
            key: format!(
                "{workspace}\u{0}body\u{0}{}",
                hex::encode(sha2::Sha256::digest(body))
            ),
            retry: count >= 1,
        })
    }
}

/// What a call started.
#[derive(Debug, Clone)]
pub struct Started {
    /// Its session.
    pub session: SessionId,
    /// Its run.
    pub run: RunId,
    /// The session's seq before the run: a join reads from there.
    pub after: Seq,
}

/// The calls this server answered lately, by key.
#[derive(Clone, Default)]
pub struct Calls(Arc<Mutex<HashMap<String, (Started, Instant)>>>);

impl Calls {
    /// The run a retry joins, if this call is a retry of one remembered.
    pub fn joinable(&self, call: &Call) -> Option<Started> {
        if !call.retry {
            return None;
        }
        let calls = self.0.lock().unwrap_or_else(|p| p.into_inner());
        calls
            .get(&call.key)
            .filter(|(_, at)| at.elapsed() < REMEMBERED)
            .map(|(s, _)| s.clone())
    }

    /// Remember what a call started.
    pub fn remember(&self, call: Call, started: Started) {
        let mut calls = self.0.lock().unwrap_or_else(|p| p.into_inner());
        calls.retain(|_, (_, at)| at.elapsed() < REMEMBERED);
        if calls.len() >= MAX_CALLS
            && let Some(oldest) = calls
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone())
        {
            calls.remove(&oldest);
        }
        calls.insert(call.key, (started, Instant::now()));
    }
}
