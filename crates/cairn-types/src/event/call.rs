//! What a host call used and why one gave no response, as
//! `host_call_finished` carries them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a host call used, as its capability reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallUsage {
    /// Input (prompt) tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output (completion) tokens.
    #[serde(default)]
    pub output_tokens: u64,
}

/// Why a host call gave no response: the error value the guest got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallError {
    /// What kind of failure.
    pub code: CallErrorCode,
    /// A sentence for people (never a secret).
    pub message: String,
}

/// The kinds of host-call failure a guest sees (values, never traps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CallErrorCode {
    /// The workspace is not granted what the call names, or the request
    /// is not one the capability takes.
    Refused,
    /// A limit of the run (`model_calls`, `model_tokens`, …) stops it.
    LimitExceeded,
    /// The provider (or the far side) failed, retries spent.
    Provider,
    /// The run was cancelled while the call was under way.
    Cancelled,
    /// The host died while the call was under way and the operation is not
    /// safe to repeat.
    Interrupted,
}

impl CallErrorCode {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            CallErrorCode::Refused => "refused",
            CallErrorCode::LimitExceeded => "limit_exceeded",
            CallErrorCode::Provider => "provider",
            CallErrorCode::Cancelled => "cancelled",
            CallErrorCode::Interrupted => "interrupted",
        }
    }
}
