//! Newtype ids. Client-supplied strings never become file names: every store
//! derives names from [`SessionId::storage_key`], a v5 UUID.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;
use uuid::Uuid;

/// Raised when a string is not a valid id; the message names the id kind and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} {value:?}: {why}")]
pub struct InvalidId {
    /// Which kind of id, such as `worker id`.
    pub kind: &'static str,
    /// The offending text (cut to 80 characters).
    pub value: String,
    /// What is wrong with it.
    pub why: String,
}

impl InvalidId {
    fn new(kind: &'static str, value: &str, why: impl Into<String>) -> Self {
        InvalidId {
            kind,
            value: value.chars().take(80).collect(),
            why: why.into(),
        }
    }
}

macro_rules! uuid_v7_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
            /// Mint a new id (UUIDv7: sorts by creation time).
            pub fn new() -> Self {
                $name(Uuid::now_v7())
            }

            /// The UUID inside.
            pub fn as_uuid(&self) -> Uuid {
                self.0
            }

            /// The all-zero id: "none known" (a corrupt session's row).
            pub fn nil() -> Self {
                $name(Uuid::nil())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl std::str::FromStr for $name {
            type Err = InvalidId;

            fn from_str(s: &str) -> Result<Self, InvalidId> {
                let uuid = Uuid::try_parse(s)
                    .map_err(|e| InvalidId::new($kind, s, format!("not a UUID ({e})")))?;
                Ok($name(uuid))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.hyphenated().fmt(f)
            }
        }
    };
}

uuid_v7_id!(
    /// A worker: the durable aggregate `workers/<worker_id>/`.
    WorkerId,
    "worker id"
);
uuid_v7_id!(
    /// A run: one unit of work, start to terminal state.
    RunId,
    "run id"
);
uuid_v7_id!(
    /// A segment: a branch or compacted projection inside a session.
    SegmentId,
    "segment id"
);

/// The namespace of v5 storage keys derived from session ids.
const SESSION_NAMESPACE: Uuid = Uuid::from_u128(0x6a1f_3c2e_9b7d_4e15_8c0a_51f2_d3e4_a6b7);
/// The namespace of decision ids derived from (session, seq).
const DECISION_NAMESPACE: Uuid = Uuid::from_u128(0x0d3c_7a41_52e8_4b9f_a1c6_2e7b_9f40_d815);

/// The longest session id accepted, in bytes.
pub const MAX_SESSION_ID_LEN: usize = 200;

/// A session: one per worker for its lifetime. Clients may choose it, from a
/// safe alphabet: ASCII letters and digits first, then letters, digits and
/// `-_.:@+=`, at most [`MAX_SESSION_ID_LEN`] bytes, never `..` (so no path,
/// control or bidirectional-override character can reach a log, a header or
/// a file name). Stores address it only through [`SessionId::storage_key`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
#[serde(transparent)]
pub struct SessionId(std::sync::Arc<str>);

impl Serialize for SessionId {
    /// By its name: a client, a journal and an export never see a scope.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl SessionId {
    /// Mint a new session id (`s-` and a UUIDv7).
    pub fn new() -> Self {
        SessionId(format!("s-{}", Uuid::now_v7().hyphenated()).into())
    }

    /// Check a client-supplied id against the safe alphabet.
    pub fn parse(s: &str) -> Result<Self, InvalidId> {
        let stored = Self::stored(s)?;
        let allowed = |c: char| c.is_ascii_alphanumeric() || "-_.:@+=".contains(c);
        if !s.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return Err(InvalidId::new(
                "session id",
                s,
                "it must start with an ASCII letter or digit",
            ));
        }
        if let Some(c) = s.chars().find(|c| !allowed(*c)) {
            return Err(InvalidId::new(
                "session id",
                s,
                format!("{c:?} is not allowed (ASCII letters, digits and -_.:@+= are)"),
            ));
        }
        if s.contains("..") {
            return Err(InvalidId::new("session id", s, "it holds \"..\""));
        }
        Ok(stored)
    }

    /// An id as a journal or document stores it: the rules of the ids
    /// written before the safe alphabet (non-empty, bounded, no control
    /// characters), so every stored session still reads.
    fn stored(s: &str) -> Result<Self, InvalidId> {
        if s.is_empty() {
            return Err(InvalidId::new("session id", s, "it is empty"));
        }
        if s.len() > MAX_SESSION_ID_LEN {
            return Err(InvalidId::new(
                "session id",
                s,
                format!("it is {} bytes; at most {MAX_SESSION_ID_LEN}", s.len()),
            ));
        }
        if let Some(c) = s.chars().find(|c| c.is_control()) {
            return Err(InvalidId::new(
                "session id",
                s,
                format!("it holds the control character {c:?}"),
            ));
        }
        Ok(SessionId(s.into()))
    }

    /// The id as stores key it: the name, or for a session of a workspace
    /// other than the host's own, the workspace, [`SCOPE_MARK`] and the name
    /// (see [`SessionId::in_workspace`]).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as its workspace knows it: what clients chose or were given,
    /// what journals, exports and every answer show.
    pub fn name(&self) -> &str {
        match self.0.rsplit_once(SCOPE_MARK) {
            Some((_, name)) => name,
            None => &self.0,
        }
    }

    /// Whether the id is scoped to a workspace other than the host's own.
    pub fn is_scoped(&self) -> bool {
        self.0.contains(SCOPE_MARK)
    }

    /// The v5 UUID every store uses in place of the id itself.
    pub fn storage_key(&self) -> Uuid {
        Uuid::new_v5(&SESSION_NAMESPACE, self.0.as_bytes())
    }

    /// The session named `self` within `workspace`: session ids are one
    /// namespace per workspace, so two workspaces may each hold `s-1`. The
    /// host's own workspace (`local`) keeps bare names, as every session
    /// had before ids were scoped; another workspace's names are kept with
    /// the workspace in front. Clients never see the difference: ids are
    /// shown and serialized by [`SessionId::name`].
    pub fn in_workspace(&self, workspace: &str, host_own: &str) -> SessionId {
        let name = self.name();
        if workspace == host_own {
            SessionId(name.into())
        } else {
            SessionId(format!("{workspace}{SCOPE_MARK}{name}").into())
        }
    }

    /// The session `name` in the same workspace as this one (a child, a
    /// peer, a fork's source: never another workspace's).
    pub fn sibling(&self, name: &SessionId) -> SessionId {
        match self.0.rsplit_once(SCOPE_MARK) {
            Some((ws, _)) => SessionId(format!("{ws}{SCOPE_MARK}{}", name.name()).into()),
            None => SessionId(name.name().into()),
        }
    }

    /// The bare name, unscoped: how a legacy session of another workspace,
    /// made before ids were scoped, is still keyed.
    pub fn unscoped(&self) -> SessionId {
        SessionId(self.name().into())
    }

    /// Whether two ids name the same session name (in whatever workspace).
    pub fn same_name(&self, other: &SessionId) -> bool {
        self.name() == other.name()
    }

    /// An id as a store keys it ([`SessionId::as_str`]): a stored name, or
    /// a workspace, the mark and a stored name.
    pub fn from_key(s: &str) -> Result<Self, InvalidId> {
        match s.rsplit_once(SCOPE_MARK) {
            Some((ws, name)) => {
                if ws.is_empty() || ws.len() > 128 {
                    return Err(InvalidId::new(
                        "session id",
                        s,
                        "its workspace is empty or longer than 128 bytes",
                    ));
                }
                Self::stored(name)?;
                Ok(SessionId(s.into()))
            }
            None => Self::stored(s),
        }
    }
}

/// What separates a scoped session id's workspace from its name (a control
/// character, so no name or stored id can hold it).
pub const SCOPE_MARK: char = '\u{1f}';

/// Serde of a session id as stores key it (the workspace kept), for the
/// documents that must give back the very session they name
/// (`#[serde(with = "crate::ids::session_key")]`).
pub mod session_key {
    use super::SessionId;
    use serde::{Deserialize, Deserializer, Serializer};

    /// The key.
    pub fn serialize<S: Serializer>(id: &SessionId, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(id.as_str())
    }

    /// A key or a bare stored id.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SessionId, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        SessionId::from_key(&s).map_err(serde::de::Error::custom)
    }
}

impl Default for SessionId {
    fn default() -> Self {
        Self::new()
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// Reads the id without an owned copy (a journal line's id has no
        /// escapes, so it is borrowed from the input).
        struct Id;
        impl serde::de::Visitor<'_> for Id {
            type Value = SessionId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a session id (a string)")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<SessionId, E> {
                SessionId::shared(s).map_err(E::custom)
            }
        }
        d.deserialize_str(Id)
    }
}

impl SessionId {
    /// The stored id `s`, sharing the copy this thread made last when it
    /// is the same id: every line of a journal names its session, and a
    /// replay reads them by the million.
    fn shared(s: &str) -> Result<Self, InvalidId> {
        thread_local! {
            static LAST: std::cell::RefCell<Option<SessionId>> =
                const { std::cell::RefCell::new(None) };
        }
        LAST.with(|last| {
            let mut last = last.borrow_mut();
            if let Some(id) = last.as_ref()
                && id.as_str() == s
            {
                return Ok(id.clone());
            }
            let id = SessionId::stored(s)?;
            *last = Some(id.clone());
            Ok(id)
        })
    }
}

impl std::str::FromStr for SessionId {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, InvalidId> {
        SessionId::parse(s)
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A journal sequence number: dense per session, starting at 1. `Seq(0)` is
/// the cursor "before everything".
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(transparent)]
pub struct Seq(pub u64);

impl Seq {
    /// The seq after this one.
    pub fn next(self) -> Seq {
        Seq(self.0 + 1)
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A run generation: per worker, monotonic from 1, reserved durably before
/// every instantiation.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(transparent)]
pub struct Generation(pub u64);

impl Generation {
    /// The generation after this one.
    pub fn next(self) -> Generation {
        Generation(self.0 + 1)
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A decision a controller waits for; derived from (session, seq of the
/// request) so parallel requests never collide.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(transparent)]
pub struct DecisionId(Uuid);

impl DecisionId {
    /// The id of the decision requested at `seq` in `session`.
    pub fn derive(session: &SessionId, seq: Seq) -> Self {
        let mut name = session.storage_key().as_bytes().to_vec();
        name.extend_from_slice(&seq.0.to_be_bytes());
        DecisionId(Uuid::new_v5(&DECISION_NAMESPACE, &name))
    }
}

impl std::str::FromStr for DecisionId {
    type Err = InvalidId;
    fn from_str(s: &str) -> Result<Self, InvalidId> {
        Uuid::try_parse(s)
            .map(DecisionId)
            .map_err(|e| InvalidId::new("decision id", s, format!("not a UUID ({e})")))
    }
}

impl fmt::Display for DecisionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_that_try_paths_are_keyed_not_joined() {
        // Refused as a new id; one stored before the safe alphabet still
        // only ever becomes a v5 key.
        assert!(SessionId::parse("../../etc/passwd").is_err());
        let evil = SessionId::stored("../../etc/passwd").unwrap();
        let key = evil.storage_key().to_string();
        assert_eq!(key.len(), 36);
        assert!(!key.contains('/') && !key.contains('.'));
        assert_ne!(
            evil.storage_key(),
            SessionId::parse("other").unwrap().storage_key()
        );
    }

    #[test]
    fn new_session_ids_keep_to_the_safe_alphabet() {
        for good in ["s-01", "my.session", "user@host:1", "a+b=c_d-e"] {
            assert!(SessionId::parse(good).is_ok(), "{good}");
        }
        for (bad, why) in [
            ("..", "start"),
            ("a..b", "\"..\""),
            ("a/b", "'/'"),
            ("a b", "' '"),
            ("a\u{202e}b", "not allowed"),
            ("-a", "start"),
        ] {
            let err = SessionId::parse(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn bad_session_ids_are_refused_with_a_reason() {
        assert!(
            SessionId::parse("")
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        let long = "x".repeat(MAX_SESSION_ID_LEN + 1);
        assert!(
            SessionId::parse(&long)
                .unwrap_err()
                .to_string()
                .contains("at most")
        );
        assert!(
            SessionId::parse("a\nb")
                .unwrap_err()
                .to_string()
                .contains("control")
        );
        assert!(serde_json::from_str::<SessionId>("\"\"").is_err());
    }

    #[test]
    fn session_ids_read_from_lines_share_one_copy_and_are_still_checked() {
        let a: SessionId = serde_json::from_str("\"s-1\"").unwrap();
        let b: SessionId = serde_json::from_str("\"s-1\"").unwrap();
        assert!(
            std::sync::Arc::ptr_eq(&a.0, &b.0),
            "one copy for a run of lines"
        );
        // Escaped, another id, then the first again: each is its own text.
        let escaped: SessionId = serde_json::from_str("\"s-\\u0032\"").unwrap();
        assert_eq!(escaped.as_str(), "s-2");
        let c: SessionId = serde_json::from_str("\"s-1\"").unwrap();
        assert_eq!(c, a);
        // What the stored rules refuse is refused whatever was read before.
        let err = serde_json::from_str::<SessionId>("\"s-1\\n\"").unwrap_err();
        assert!(err.to_string().contains("control"), "{err}");
        let err = serde_json::from_str::<SessionId>("7").unwrap_err();
        assert!(err.to_string().contains("session id"), "{err}");
        let from_value: SessionId = serde_json::from_value(serde_json::json!("s-3")).unwrap();
        assert_eq!(from_value.as_str(), "s-3");
    }

    #[test]
    fn decision_ids_differ_by_seq_and_session() {
        let a = SessionId::parse("a").unwrap();
        let b = SessionId::parse("b").unwrap();
        assert_ne!(
            DecisionId::derive(&a, Seq(3)),
            DecisionId::derive(&a, Seq(4))
        );
        assert_ne!(
            DecisionId::derive(&a, Seq(3)),
            DecisionId::derive(&b, Seq(3))
        );
        assert_eq!(
            DecisionId::derive(&a, Seq(3)),
            DecisionId::derive(&a, Seq(3))
        );
    }

    #[test]
    fn uuid_ids_parse_and_refuse() {
        let w = WorkerId::new();
        assert_eq!(w.to_string().parse::<WorkerId>().unwrap(), w);
        let err = "../x".parse::<WorkerId>().unwrap_err();
        assert!(err.to_string().contains("worker id"), "{err}");
    }
}
