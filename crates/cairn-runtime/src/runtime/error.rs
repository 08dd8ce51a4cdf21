//! Why a runtime command was refused, with a stable code for the wire.

use super::decisions::DecideError;
use crate::ErrorCode;
use crate::component::ComponentError;
use crate::ids::{RunId, SessionId, WorkerId};
use crate::store::StoreError;
use crate::worker::WorkerError;

/// Why a command was refused.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The component is unusable.
    #[error(transparent)]
    Component(#[from] ComponentError),
    /// The layout on disk failed.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A decision was refused.
    #[error(transparent)]
    Decide(#[from] DecideError),
    /// The session already has a live run.
    #[error("session {session} already has a live run: {run}")]
    LiveRun {
        /// The session.
        session: SessionId,
        /// Its live run.
        run: RunId,
    },
    /// The session exists already.
    #[error("session {0} exists already")]
    SessionExists(SessionId),
    /// No such session here.
    #[error("no session {0}")]
    UnknownSession(SessionId),
    /// No such built-in example.
    #[error("no built-in example {name:?} (built-in: {known})")]
    UnknownExample {
        /// The name asked for.
        name: String,
        /// The names there are.
        known: String,
    },
    /// No component with that digest is stored here.
    #[error("no component {0} is stored in this home")]
    UnknownComponent(String),
    /// The run names no component and the worker has none yet.
    #[error("session {0} has no component yet: name one")]
    NoComponent(SessionId),
    /// A component update was refused: a run of the session does not
    /// replay against the new component.
    #[error("session {session} stays on its component: {message}")]
    UpdateDiverged {
        /// The session.
        session: SessionId,
        /// The first divergence: the run, seq, what the journal has, what
        /// the new component did.
        message: String,
    },
    /// The worker is bound to another component.
    #[error(
        "worker {worker} is bound to component {bound}; this run names {given}. Replay must re-run the code that wrote the journal, so a worker keeps its component"
    )]
    ComponentMismatch {
        /// The worker.
        worker: WorkerId,
        /// Its binding.
        bound: String,
        /// The component given.
        given: String,
    },
    /// The worker is stale and may not run again.
    #[error("worker {0} is stale (a replay diverged); it is never continued")]
    Stale(WorkerId),
    /// The worker and the session given disagree.
    #[error("worker {worker} holds session {held}, not {given}")]
    SessionMismatch {
        /// The worker.
        worker: WorkerId,
        /// Its session.
        held: SessionId,
        /// The session given.
        given: SessionId,
    },
    /// The liveness policy cannot be honoured by this controller.
    #[error("the controller {name} cannot park, so liveness `park` is refused")]
    UnsupportedPolicy {
        /// The controller's name.
        name: String,
    },
    /// A requested limit is above the workspace's ceiling.
    #[error(transparent)]
    AboveCeiling(#[from] crate::limits::AboveCeiling),
    /// The request is too large.
    #[error("the prompt is {size} bytes; at most {max} are accepted")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// No such run.
    #[error("no run {0}")]
    UnknownRun(RunId),
    /// The run is not in a state the command needs.
    #[error("run {run} is {state}; {needed}")]
    WrongRunState {
        /// The run.
        run: RunId,
        /// Its state.
        state: String,
        /// What the command needs.
        needed: String,
    },
    /// Another observer holds the session's claim.
    #[error(
        "session {session} is claimed by observer {holder}; attach with takeover to displace it"
    )]
    ClaimHeld {
        /// The session.
        session: SessionId,
        /// The claimant.
        holder: String,
    },
    /// Another instance on the shared store holds the session.
    #[error(
        "session {session} is held by instance {holder} (at {url}); ask it, or any instance's HTTP API"
    )]
    HeldElsewhere {
        /// The session.
        session: SessionId,
        /// The holding instance.
        holder: String,
        /// Where it serves.
        url: String,
    },
    /// The runtime is shutting down.
    #[error("the host is shutting down; no new runs start")]
    ShuttingDown,
    /// The request does not fit the session (a seq that is not there, say).
    #[error("{0}")]
    InvalidRequest(String),
    /// The run task ended without a terminal write.
    #[error("{0}")]
    RunLost(String),
    /// Another process owns the home.
    #[error(transparent)]
    HomeBusy(#[from] crate::home_lock::LockError),
    /// The disk refused what the command had to write.
    #[error("{0}")]
    Storage(String),
    /// A quota of the workspace (or the host's capacity) is used up.
    #[error("{0}")]
    Capacity(String),
    /// The decision's run is being restored by replay and has not asked
    /// for it again yet: retry in a moment.
    #[error(
        "decision {decision} of session {session} belongs to a run being restored; retry in a moment"
    )]
    Restoring {
        /// The decision.
        decision: crate::ids::DecisionId,
        /// Its session.
        session: SessionId,
    },
    /// The session's files are corrupt; every other session is unaffected.
    #[error("session {session} is corrupt: {reason}")]
    Corrupt {
        /// The session.
        session: SessionId,
        /// What is wrong (`path:line: what`).
        reason: String,
    },
}

impl RuntimeError {
    /// A stable snake_case code for wire errors.
    pub fn code(&self) -> ErrorCode {
        if self.out_of_space() {
            // A full disk (or quota) is the store's, whatever was writing.
            return ErrorCode::Storage;
        }
        match self {
            RuntimeError::Component(ComponentError::Capacity(_)) => ErrorCode::Capacity,
            RuntimeError::Component(_) => ErrorCode::InvalidComponent,
            RuntimeError::Capacity(_) => ErrorCode::Capacity,
            RuntimeError::Restoring { .. } => ErrorCode::Restoring,
            RuntimeError::LiveRun { .. } => ErrorCode::LiveRun,
            RuntimeError::SessionExists(_) => ErrorCode::Conflict,
            RuntimeError::UnknownSession(_)
            | RuntimeError::UnknownRun(_)
            | RuntimeError::UnknownExample { .. }
            | RuntimeError::UnknownComponent(_) => ErrorCode::NotFound,
            RuntimeError::Decide(DecideError::NotPending(_)) => ErrorCode::NotFound,
            RuntimeError::Decide(DecideError::Conflict { .. }) => ErrorCode::Conflict,
            RuntimeError::UnsupportedPolicy { .. } => ErrorCode::UnsupportedPolicy,
            RuntimeError::TooLarge { .. } => ErrorCode::TooLarge,
            RuntimeError::AboveCeiling(_) => ErrorCode::LimitExceeded,
            RuntimeError::ClaimHeld { .. }
            | RuntimeError::ComponentMismatch { .. }
            | RuntimeError::UpdateDiverged { .. } => ErrorCode::Conflict,
            RuntimeError::SessionMismatch { .. }
            | RuntimeError::NoComponent(_)
            | RuntimeError::InvalidRequest(_) => ErrorCode::InvalidRequest,
            RuntimeError::WrongRunState { .. } | RuntimeError::Stale(_) => ErrorCode::Conflict,
            RuntimeError::ShuttingDown => ErrorCode::ShuttingDown,
            RuntimeError::HomeBusy(_) => ErrorCode::HomeBusy,
            RuntimeError::Storage(_) => ErrorCode::Storage,
            RuntimeError::HeldElsewhere { .. } => ErrorCode::HeldElsewhere,
            RuntimeError::Store(e) if e.is_lost_authority() => ErrorCode::LostAuthority,
            RuntimeError::Store(
                StoreError::Database { .. }
                | StoreError::Unavailable { .. }
                | StoreError::Io { .. },
            ) => ErrorCode::Storage,
            // An answer the journal could not record: retry it.
            RuntimeError::Decide(DecideError::Store { source, .. })
                if source.is_lost_authority() =>
            {
                ErrorCode::LostAuthority
            }
            RuntimeError::Decide(DecideError::Store { .. }) => ErrorCode::Storage,
            RuntimeError::Corrupt { .. } => ErrorCode::Corrupt,
            _ => ErrorCode::Internal,
        }
    }

    /// Whether a disk or quota refused a write somewhere in this error's
    /// causes (`ENOSPC`, `EDQUOT`): retryable once space returns, never
    /// damage.
    pub fn out_of_space(&self) -> bool {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = cause {
            if let Some(io) = e.downcast_ref::<std::io::Error>()
                && (io.kind() == std::io::ErrorKind::StorageFull
                    || io.kind() == std::io::ErrorKind::QuotaExceeded
                    || matches!(io.raw_os_error(), Some(28 | 122)))
            {
                return true;
            }
            cause = e.source();
        }
        false
    }

    /// This error, as a `corrupt` one when it says that `session`'s own
    /// files are damaged (a corrupt line, an unreadable document, an I/O
    /// failure on them): such a fault belongs to that session alone.
    pub fn for_session(self, session: &SessionId) -> RuntimeError {
        if self.out_of_space() {
            return self;
        }
        let damaged = match &self {
            RuntimeError::Store(
                StoreError::Corrupt { .. } | StoreError::Io { .. } | StoreError::Layout(_),
            ) => true,
            RuntimeError::Store(e) if e.is_lost_authority() => false,
            RuntimeError::Worker(WorkerError::NoSuchWorker(_) | WorkerError::NoHome(_)) => false,
            RuntimeError::Worker(_) => true,
            _ => false,
        };
        if damaged {
            RuntimeError::Corrupt {
                session: session.clone(),
                reason: self.to_string(),
            }
        } else {
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a store failed to write is `storage` on the wire (retryable,
    /// 503), whatever call met it; a full disk is, under any wrapping.
    #[test]
    fn store_failures_are_storage_never_internal() {
        let id =
            crate::ids::DecisionId::derive(&SessionId::parse("s").unwrap(), crate::ids::Seq(1));
        let dropped = StoreError::Database {
            context: "append".into(),
            message: "connection closed".into(),
        };
        let cases = [
            RuntimeError::Decide(DecideError::Store {
                id: id.clone(),
                source: dropped,
            }),
            RuntimeError::Store(StoreError::Io {
                context: "append".into(),
                source: std::io::Error::other("broken pipe"),
            }),
            RuntimeError::Store(StoreError::Unavailable {
                context: "append".into(),
                message: "the database system is shutting down".into(),
            }),
            RuntimeError::Worker(WorkerError::Io {
                context: "cannot create worker".into(),
                source: std::io::Error::from_raw_os_error(28),
            }),
        ];
        for e in cases {
            assert_eq!(e.code(), "storage", "{e}");
        }
        let full = RuntimeError::Worker(WorkerError::Io {
            context: "x".into(),
            source: std::io::Error::from_raw_os_error(28),
        });
        assert!(
            matches!(
                full.for_session(&SessionId::parse("s").unwrap()),
                RuntimeError::Worker(_)
            ),
            "a full disk is not damage"
        );
    }
}
