//! The words cairn speaks: ids, the journal's vocabulary and its schema,
//! limits, and the codes of failures and wire errors. No I/O lives here;
//! every other cairn crate builds on these types.
//!
//! ```
//! use cairn_types::{ErrorCode, SessionId};
//!
//! // An id that tries to leave its directory is refused, saying why.
//! let refused = SessionId::parse("../etc").unwrap_err();
//! assert_eq!(refused.kind, "session id");
//! // A wire error's code is its HTTP status, and snake_case on the wire.
//! assert_eq!(ErrorCode::NotFound.status(), 404);
//! assert_eq!(serde_json::to_value(ErrorCode::HomeBusy)?, "home_busy");
//! # Ok::<(), serde_json::Error>(())
//! ```

#![deny(missing_docs)]

pub mod code;
pub mod event;
pub mod failure;
pub mod http;
pub mod ids;
pub mod json;
pub mod limits;
pub mod model;
pub mod schema;
pub mod tools;
pub mod workers;

pub use code::ErrorCode;
pub use event::{
    AgentEvent, ErrorInfo, LifecycleEvent, Payload, RunFacts, RunStatus, SessionEvent,
};
pub use failure::FailureCode;
pub use ids::{DecisionId, Generation, RunId, SegmentId, Seq, SessionId, WorkerId};
pub use limits::{Limits, LimitsOverride};
