//! A u64 as a decimal string on the wire; a JSON number is accepted too.

use serde::{Deserialize, Deserializer, Serializer};

/// Write the string.
pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&v.to_string())
}

/// Read a string or a number.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Number(u64),
        Text(String),
    }
    match Either::deserialize(d)? {
        Either::Number(n) => Ok(n),
        Either::Text(t) => t
            .parse()
            .map_err(|_| serde::de::Error::custom(format!("{t:?} is not a u64"))),
    }
}
