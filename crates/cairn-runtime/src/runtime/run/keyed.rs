//! Host calls a replay finds by id, not in sequence: an outgoing HTTP
//! request (`wasi:http`) takes its call id when the guest calls `handle`,
//! then goes out while the guest does other things, so its journaled start
//! and end fall wherever the network put them among the run's entries. The
//! sequential script leaves them out (`Script::of_run`); a replay answers a
//! request from the entries of the call with its id — checking that the
//! controller asked the same — and only a call the journal does not hold
//! goes out.
//!
//! Such a call's answer does not move the guest's clock: when the guest
//! takes it is not journaled.

use super::RunCtx;
use super::script::KeyedCall;
use crate::component::HostFailure;
use crate::ids::Seq;
use crate::journal::event::{CallError, CallErrorCode, LifecycleEvent, Payload};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// Whether a capability's calls are replayed by id.
pub(super) fn by_id(capability: &str) -> bool {
    capability == crate::component::HTTP
}

/// The journaled calls of a replay not yet asked for again.
#[derive(Default)]
pub(crate) struct Keyed {
    pub(super) calls: BTreeMap<u64, KeyedCall>,
    /// An offline replay: a call the journal does not hold is a divergence.
    pub(super) offline: bool,
}

impl RunCtx {
    /// Journaled entries of keyed calls the controller has not made again.
    pub(super) fn keyed_remaining(&self) -> usize {
        let keyed = self.keyed.lock().unwrap_or_else(|p| p.into_inner());
        keyed.calls.values().map(KeyedCall::entries).sum()
    }

    /// A call under the id the guest's order gave it: answered from the
    /// journal when it holds the call, else live.
    pub(super) async fn call_by_id(
        &self,
        call_id: u64,
        capability: &str,
        op: &str,
        request: serde_json::Value,
    ) -> Result<Result<serde_json::Value, CallError>, HostFailure> {
        let (found, offline) = {
            let mut keyed = self.keyed.lock().unwrap_or_else(|p| p.into_inner());
            (keyed.calls.remove(&call_id), keyed.offline)
        };
        let got = || {
            serde_json::json!({
                "type": "host_call_started",
                "call_id": call_id,
                "capability": capability,
                "op": op,
                "request": request,
            })
        };
        let Some(call) = found else {
            if offline {
                return Err(self.diverge(
                    Seq(0),
                    serde_json::json!(format!("no {capability} call {call_id}")),
                    got(),
                ));
            }
            return self
                .host_call_live(call_id, capability, op, request, false)
                .await;
        };
        let same = matches!(
            &call.started.payload,
            Payload::Lifecycle(LifecycleEvent::HostCallStarted {
                capability: c, op: o, request: r, ..
            }) if c == capability && o == op && *r == request
        );
        if !same {
            return Err(self.diverge(
                call.started.seq,
                serde_json::to_value(&call.started.payload).unwrap_or_default(),
                got(),
            ));
        }
        // Counted as it was (a request sent again is charged when it goes).
        let charged = || {
            if capability == crate::component::HTTP {
                self.http_requests.fetch_add(1, Ordering::Relaxed);
            }
        };
        match call.finished.as_ref().map(|f| &f.payload) {
            Some(Payload::Lifecycle(LifecycleEvent::HostCallFinished {
                response,
                error,
                usage,
                ..
            })) => {
                charged();
                self.count_call(*usage);
                Ok(match (response, error) {
                    (_, Some(e)) => Err(e.clone()),
                    (Some(r), None) => Ok(r.clone()),
                    (None, None) => Ok(serde_json::Value::Null),
                })
            }
            _ if offline => Err(self.diverge(
                call.started.seq,
                serde_json::json!(format!("the end of {capability} call {call_id}")),
                serde_json::json!("none in the journal"),
            )),
            // The host died while it was under way.
            _ => {
                let idempotent = self
                    .capabilities
                    .get()
                    .is_some_and(|c| c.idempotent(capability, op, &request));
                if idempotent {
                    return self
                        .host_call_live(call_id, capability, op, request, true)
                        .await;
                }
                charged();
                let error = crate::component::capability::call_error(
                    CallErrorCode::Interrupted,
                    format!(
                        "the host stopped while this {capability} {op} call was under way, and it is not safe to send again"
                    ),
                );
                self.lifecycle(LifecycleEvent::HostCallFinished {
                    call_id,
                    response: None,
                    error: Some(error.clone()),
                    usage: None,
                })
                .await?;
                self.count_call(None);
                Ok(Err(error))
            }
        }
    }
}
