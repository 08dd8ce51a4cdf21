//! cairn's embedded store: everything of a home on disk — its lock
//! ([`home_lock`]), its index and worker aggregates with their run
//! generations ([`worker`]), journal segments ([`file`]), directory blobs
//! ([`blobs`]) — and the owner-only, crash-safe file operations they are
//! made of ([`fsutil`]). The only crate that knows the layout; the
//! runtime reaches it through the traits of `cairn-store` and the
//! [`Workers`] seam.
//!
//! ```
//! use cairn_store::JournalStore;
//! use cairn_store_file::{file::FileStore, worker::Home};
//! use cairn_types::ids::{SegmentId, Seq, SessionId};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let home = Home::open(dir.path())?;
//! let session = SessionId::parse("demo")?;
//! home.create_worker(&session, None, "default")?;
//! let store = FileStore::new(home);
//! assert_eq!(store.head(&session).await?.last_seq, Seq(0));
//! # let _ = SegmentId::new();
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

pub mod blobs;
mod catalog;
#[cfg(feature = "testing")]
pub mod conformance;
pub mod file;
pub mod fsutil;
pub mod home_lock;
pub mod migrate;
pub mod run_index;
pub mod syncfs;
pub mod worker;
pub mod workers;

pub use blobs::DirBlobs;
pub use run_index::FileRunIndex;
pub use workers::{ComponentBytes, Workers};
