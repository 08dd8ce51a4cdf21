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
