//! cairn: a host runtime for agent controllers shipped as WebAssembly
//! components. See the README for the picture; `DESIGN.md` for the rules.

pub use cairn_component as component;
pub mod config;
pub mod fsutil;
pub mod home_lock;
pub use cairn_types::ids;
pub mod journal;
pub use cairn_types::limits;
pub mod migrate;
pub mod runtime;
pub mod socket;
pub mod store;
pub mod worker;
pub use cairn_component::worktree;

pub use cairn_types::{ErrorCode, FailureCode};
pub use ids::{DecisionId, Generation, RunId, SegmentId, Seq, SessionId, WorkerId};
pub use journal::event::{AgentEvent, LifecycleEvent, Payload, RunFacts, RunStatus, SessionEvent};
pub use runtime::{Runtime, RuntimeBuilder, RuntimeConfig, StartRun};
