//! The built-in example controllers, compiled by the build script.

include!(concat!(env!("OUT_DIR"), "/guests.rs"));

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
                .map(|(n, b)| (*n, crate::component::digest_of(b)))
                .collect()
        })
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, d)| d.as_str())
}
