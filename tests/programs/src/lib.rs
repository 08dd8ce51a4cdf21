//! The test fixture controllers under `tests/guests/`, built for
//! wasm32-wasip2 by the build script: a dev-only crate, never part of a
//! release build.

#![deny(missing_docs)]

mod built {
    include!(concat!(env!("OUT_DIR"), "/fixtures.rs"));
}
pub use built::FIXTURES;

/// The path of a fixture's component, by package name.
pub fn fixture(name: &str) -> Option<std::path::PathBuf> {
    FIXTURES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| std::path::PathBuf::from(p))
}
