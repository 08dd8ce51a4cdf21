//! Why a run failed: the `error.code` of a `failed` terminal entry.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::fmt;

/// The codes the host writes in `error.code`. A code this host does not
/// know (a journal from a newer host) reads as [`FailureCode::Other`] and is
/// written back unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureCode {
    /// A limit of the run was broken.
    LimitExceeded,
    /// A replay did not reproduce the journal.
    ReplayDiverged,
    /// The controller returned `failed`.
    ControllerError,
    /// The park checkpoint could not be stored.
    Checkpoint,
    /// The host stopped between reserving a generation and starting.
    Interrupted,
    /// The disk refused an append (ENOSPC, EIO).
    Storage,
    /// Another writer appended to the session: this run lost authority.
    LostAuthority,
    /// An interrupted run could not be restored (not a divergence).
    RestoreFailed,
    /// The run's generation directory could not be made or opened.
    Generation,
    /// The component could not be instantiated (a missing import, a
    /// refused preopen).
    Setup,
    /// The guest trapped (an `unreachable`, an out-of-bounds access, a
    /// host call it misused).
    Trap,
    /// The component is not a controller this host can run.
    InvalidComponent,
    /// A code this host does not know, kept as written.
    Other(String),
}

impl FailureCode {
    /// Every code this host writes, for schemas and tables.
    pub const KNOWN: &'static [FailureCode] = &[
        FailureCode::LimitExceeded,
        FailureCode::ReplayDiverged,
        FailureCode::ControllerError,
        FailureCode::Checkpoint,
        FailureCode::Interrupted,
        FailureCode::Storage,
        FailureCode::LostAuthority,
        FailureCode::RestoreFailed,
        FailureCode::Generation,
        FailureCode::Setup,
        FailureCode::Trap,
        FailureCode::InvalidComponent,
    ];

    /// The snake_case code.
    pub fn as_str(&self) -> &str {
        match self {
            FailureCode::LimitExceeded => "limit_exceeded",
            FailureCode::ReplayDiverged => "replay_diverged",
            FailureCode::ControllerError => "controller_error",
            FailureCode::Checkpoint => "checkpoint",
            FailureCode::Interrupted => "interrupted",
            FailureCode::Storage => "storage",
            FailureCode::LostAuthority => "lost_authority",
            FailureCode::RestoreFailed => "restore_failed",
            FailureCode::Generation => "generation",
            FailureCode::Setup => "setup",
            FailureCode::Trap => "trap",
            FailureCode::InvalidComponent => "invalid_component",
            FailureCode::Other(code) => code,
        }
    }

    /// The code written as `code`.
    pub fn parse(code: &str) -> FailureCode {
        Self::KNOWN
            .iter()
            .find(|known| known.as_str() == code)
            .cloned()
            .unwrap_or_else(|| FailureCode::Other(code.to_string()))
    }
}

impl fmt::Display for FailureCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for FailureCode {
    fn from(code: &str) -> Self {
        FailureCode::parse(code)
    }
}

impl PartialEq<str> for FailureCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for FailureCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for FailureCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FailureCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let code = Cow::<'de, str>::deserialize(d)?;
        Ok(FailureCode::parse(&code))
    }
}

impl JsonSchema for FailureCode {
    fn schema_name() -> Cow<'static, str> {
        "FailureCode".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let known: Vec<&str> = Self::KNOWN.iter().map(|c| c.as_str()).collect();
        json_schema!({
            "type": "string",
            "description": "Why a run failed, snake_case. A newer host may write a code not listed here; readers keep it as written.",
            "examples": known,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_code_reads_back_and_an_unknown_one_is_kept() {
        for code in FailureCode::KNOWN {
            let text = serde_json::to_string(code).unwrap();
            assert_eq!(&serde_json::from_str::<FailureCode>(&text).unwrap(), code);
        }
        let newer: FailureCode = serde_json::from_str("\"quota_gone\"").unwrap();
        assert_eq!(newer, FailureCode::Other("quota_gone".into()));
        assert_eq!(serde_json::to_string(&newer).unwrap(), "\"quota_gone\"");
    }
}
