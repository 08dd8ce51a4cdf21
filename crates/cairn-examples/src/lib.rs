//! The built-in example controllers (`echo`, `approval`, `sandbox-probe`,
//! `bench-emit`, `delegate`), compiled for wasm32-wasip2 by the build
//! script and embedded.
//!
//! ```
//! let echo = cairn_examples::built_in("echo").expect("built in");
//! // A component (layer 1), not a core module.
//! assert!(echo.starts_with(b"\0asm") && echo[6..8] == [1, 0]);
//! assert!(cairn_examples::names().contains(&"approval"));
//! assert!(cairn_examples::built_in_digest("echo").unwrap().starts_with("sha256:"));
//! ```

#![deny(missing_docs)]

use sha2::{Digest, Sha256};

mod built {
    include!(concat!(env!("OUT_DIR"), "/guests.rs"));
}
pub use built::BUILT_IN;

/// The bytes of a built-in example, by name.
pub fn built_in(name: &str) -> Option<&'static [u8]> {
    BUILT_IN.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

/// The names of the built-in examples.
pub fn names() -> Vec<&'static str> {
    BUILT_IN.iter().map(|(n, _)| *n).collect()
}

/// The digest of a built-in example, by name, hashed once per process.
pub fn built_in_digest(name: &str) -> Option<&'static str> {
    static DIGESTS: std::sync::OnceLock<Vec<(&'static str, String)>> = std::sync::OnceLock::new();
    DIGESTS
        .get_or_init(|| {
            BUILT_IN
                .iter()
                .map(|(n, b)| (*n, format!("sha256:{}", hex::encode(Sha256::digest(b)))))
                .collect()
        })
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, d)| d.as_str())
}
