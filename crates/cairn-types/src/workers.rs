//! The `workers` interface (delegation) on the host-call seam: a call is
//! journaled as `host_call_started { capability: "workers", op, request }`
//! with `request` one of these, and answered by `host_call_finished` with
//! the op's response (`spawn`: a [`Child`]; `status` and `wait`: a child's
//! status; `cancel` and `register_peer`: null; `peers`: a list of
//! [`Child`]) or an error (`refused`, with the reason). Journals written
//! before this carry `worker_call { call, result }` with the same `call`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What happens to a child nobody claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChildLiveness {
    /// It keeps running.
    Continue,
    /// It is cancelled.
    Cancel,
    /// It parks at its next decision wait.
    Park,
}

/// One `workers` call, as journaled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "call", rename_all = "snake_case", deny_unknown_fields)]
pub enum WorkersCall {
    /// Spawn a child.
    Spawn {
        /// A built-in example or a `sha256:` digest.
        component: String,
        /// Its prompt.
        prompt: String,
        /// The scope of `artifacts/` lent to it, if any.
        scope: Option<String>,
        /// What happens when nobody claims it.
        liveness: ChildLiveness,
    },
    /// A child's or a peer's state.
    Status {
        /// Its worker id.
        worker_id: String,
    },
    /// Wait for a child's run to end, at most `timeout_ms`.
    Wait {
        /// Its worker id.
        worker_id: String,
        /// The longest wait.
        timeout_ms: u64,
    },
    /// Cancel a child's run.
    Cancel {
        /// Its worker id.
        worker_id: String,
    },
    /// Register a peer.
    RegisterPeer {
        /// Its worker id.
        worker_id: String,
    },
    /// The registered peers.
    Peers,
}

impl WorkersCall {
    /// The op's name (`host_call_started.op`).
    pub fn op(&self) -> &'static str {
        match self {
            WorkersCall::Spawn { .. } => "spawn",
            WorkersCall::Status { .. } => "status",
            WorkersCall::Wait { .. } => "wait",
            WorkersCall::Cancel { .. } => "cancel",
            WorkersCall::RegisterPeer { .. } => "register_peer",
            WorkersCall::Peers => "peers",
        }
    }
}

/// A child or a peer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Child {
    /// Its worker id.
    pub worker_id: String,
    /// Its session id.
    pub session_id: String,
}
