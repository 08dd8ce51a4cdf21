//! Why a run failed: the `error.code` of a `failed` terminal entry.

use serde::{Deserialize, Serialize};

/// The codes the host writes in `error.code` (the wire keeps the string,
/// so journals from newer hosts still read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureCode {
    /// A limit of the run was broken.
    LimitExceeded,
    /// A replay did not reproduce the journal.
    ReplayDiverged,
    /// The controller returned `failed`.
    ControllerError,
    /// The park checkpoint could not be stored.
    Checkpoint,
    /// The host stopped between reserving a generation and starting.
    Interrupted,
    /// The disk refused an append (ENOSPC, EIO).
    Storage,
    /// Another writer appended to the session: this run lost authority.
    LostAuthority,
    /// An interrupted run could not be restored (not a divergence).
    RestoreFailed,
}

impl FailureCode {
    /// The snake_case code.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureCode::LimitExceeded => "limit_exceeded",
            FailureCode::ReplayDiverged => "replay_diverged",
            FailureCode::ControllerError => "controller_error",
            FailureCode::Checkpoint => "checkpoint",
            FailureCode::Interrupted => "interrupted",
            FailureCode::Storage => "storage",
            FailureCode::LostAuthority => "lost_authority",
            FailureCode::RestoreFailed => "restore_failed",
        }
    }

    /// Whether `code` (as written) is this one.
    pub fn is(self, code: &str) -> bool {
        self.as_str() == code
    }
}
