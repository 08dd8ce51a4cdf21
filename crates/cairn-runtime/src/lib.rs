//! cairn's runtime: durable workers (one session each, an append-only
//! journal, numbered run generations) running controllers shipped as
//! WebAssembly components, over store traits; the engine is
//! `cairn-component`, the vocabulary `cairn-types`. See the README for the
//! picture; `DESIGN.md` for the rules.
//!
//! Embedding it: open a runtime on a home, start a run of a component (here
//! the built-in `echo`), wait for its end, read its journal.
//!
//! ```
//! use cairn_runtime::runtime::ComponentRef;
//! use cairn_runtime::{Payload, Runtime, RuntimeConfig, RunStatus, Seq, StartRun};
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let home = tempfile::tempdir()?;
//! let rt = Runtime::builder(RuntimeConfig::new(home.path())).open().await?;
//! let echo = ComponentRef::BuiltIn("echo".into());
//! let started = rt.start(StartRun::new(echo, "hello")).await?;
//! let facts = rt.wait(started.run_id).await?;
//! assert_eq!(facts.status, RunStatus::Finished);
//! let kinds: Vec<String> = rt
//!     .read(&started.session_id, Seq(0))
//!     .await?
//!     .iter()
//!     .filter_map(|item| item.event())
//!     .filter_map(|e| match &e.payload {
//!         Payload::Agent(a) => serde_json::to_value(a).ok(),
//!         _ => None,
//!     })
//!     .map(|v| v["type"].as_str().unwrap_or("").to_string())
//!     .collect();
//! assert!(kinds.contains(&"text_delta".to_string()), "{kinds:?}");
//! rt.shutdown(std::time::Duration::from_secs(5)).await;
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

mod builder;
pub use cairn_component as component;
pub mod config;
pub use cairn_journal as journal;
pub use cairn_store_file::{fsutil, home_lock, migrate, worker};
pub use cairn_types::ids;
pub use cairn_types::limits;
pub mod runtime;
pub mod socket;
pub mod store;
pub use cairn_component::worktree;

pub use builder::RuntimeBuilder;
pub use cairn_types::{ErrorCode, FailureCode};
pub use ids::{DecisionId, Generation, RunId, SegmentId, Seq, SessionId, WorkerId};
pub use journal::event::{AgentEvent, LifecycleEvent, Payload, RunFacts, RunStatus, SessionEvent};
pub use runtime::{Runtime, RuntimeConfig, StartRun};
