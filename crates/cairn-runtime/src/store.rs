//! The stores as the runtime names them: the traits, memory
//! implementations and line format of `cairn-store`, and the embedded file
//! store of `cairn-store-file` (its [`file::FileStore`], [`DirBlobs`] and
//! the [`Workers`] seam over the home).

pub use cairn_store::*;
pub use cairn_store_file::{ComponentBytes, DirBlobs, Workers, file};

/// The store conformance suite: `cairn-store`'s, and the file store's
/// [`Workers`] and [`ComponentBytes`] rules.
#[cfg(feature = "testing")]
pub mod conformance {
    pub use cairn_store::conformance::*;
    pub use cairn_store_file::conformance::{component_bytes, workers};
}
