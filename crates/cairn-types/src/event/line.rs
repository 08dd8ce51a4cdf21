//! An emit's journal line: its payload's JSON measured for the run's
//! limits (a text or reasoning delta's only counted), then the line built
//! around it — at once for a payload written already, by the journal's
//! committer for a delta, its text escaped straight into the line — the
//! line's start kept for the run's next emit. Every byte as serde writes
//! the entry (tests below and in `agent_wire.rs`).

use super::{AgentEvent, Payload, SessionEvent, crc};
use crate::ids::{RunId, SegmentId, Seq, SessionId};
use serde::Serialize;

/// A payload's JSON as an emit measured it for the run's limits: a text or
/// reasoning delta's only counted (its line is written later, by the
/// journal's committer, the text escaped straight into it), any other
/// payload's written.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Measured {
    /// A delta's JSON, this many bytes: not written yet.
    Counted(u64),
    /// The payload's JSON.
    Written(String),
}

impl Measured {
    /// The JSON's length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Measured::Counted(len) => *len,
            Measured::Written(json) => json.len() as u64,
        }
    }

    /// Whether the JSON is empty (it never is: a payload is an object).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The JSON when it was written.
    pub fn written(&self) -> Option<&str> {
        match self {
            Measured::Counted(_) => None,
            Measured::Written(json) => Some(json),
        }
    }
}

/// A text or reasoning delta without `by` — most of what a streaming
/// controller emits — whose JSON is a fixed start, its text escaped, and
/// `}}`: its kind and text.
fn delta(payload: &Payload) -> Option<(&'static str, &str)> {
    match payload {
        Payload::Agent(AgentEvent::TextDelta { text, by: None }) => Some(("text_delta", text)),
        Payload::Agent(AgentEvent::ReasoningDelta { text, by: None }) => {
            Some(("reasoning_delta", text))
        }
        _ => None,
    }
}

const DELTA_START: &str = "{\"kind\":\"agent\",\"event\":{\"type\":\"";
const DELTA_TEXT: &str = "\",\"text\":";
const DELTA_END: &str = "}}";

/// A delta's JSON length: its fixed parts and its text as serde_json
/// escapes it.
fn delta_len(kind: &str, text: &str) -> u64 {
    (DELTA_START.len() + kind.len() + DELTA_TEXT.len() + DELTA_END.len()) as u64 + escaped_len(text)
}

/// How serde_json escapes a byte of a string: `None` as it is, else its
/// escape (a `\u00XX` for a control character without a short form).
fn escape(b: u8) -> Option<&'static str> {
    const U: [&str; 32] = [
        "\\u0000", "\\u0001", "\\u0002", "\\u0003", "\\u0004", "\\u0005", "\\u0006", "\\u0007",
        "\\b", "\\t", "\\n", "\\u000b", "\\f", "\\r", "\\u000e", "\\u000f", "\\u0010", "\\u0011",
        "\\u0012", "\\u0013", "\\u0014", "\\u0015", "\\u0016", "\\u0017", "\\u0018", "\\u0019",
        "\\u001a", "\\u001b", "\\u001c", "\\u001d", "\\u001e", "\\u001f",
    ];
    match b {
        b'"' => Some("\\\""),
        b'\\' => Some("\\\\"),
        0..=0x1f => Some(U[b as usize]),
        _ => None,
    }
}

/// Whether some byte of `text` has an [`escape`]: a fold over every byte
/// without an early exit, which the compiler turns into vector code (a
/// delta's text is short; looking at it byte by byte was a few percent of
/// an emit).
fn needs_escape(text: &str) -> bool {
    text.bytes().fold(false, |any, b| {
        any | (b < 0x20) | (b == b'"') | (b == b'\\')
    })
}

/// `text` as a JSON string, quotes included, in serde_json's bytes.
fn escaped_len(text: &str) -> u64 {
    if !needs_escape(text) {
        return 2 + text.len() as u64;
    }
    2 + text
        .bytes()
        .map(|b| escape(b).map_or(1, str::len) as u64)
        .sum::<u64>()
}

/// Push `text` as a JSON string, quotes included, in serde_json's bytes:
/// runs that need no escape copied whole (an escape is ASCII, so a run
/// always ends on a character boundary).
fn push_escaped(out: &mut String, text: &str) {
    if !needs_escape(text) {
        out.push('"');
        out.push_str(text);
        out.push('"');
        return;
    }
    out.push('"');
    let mut from = 0;
    for (i, b) in text.bytes().enumerate() {
        if let Some(escaped) = escape(b) {
            out.push_str(&text[from..i]);
            out.push_str(escaped);
            from = i + 1;
        }
    }
    out.push_str(&text[from..]);
    out.push('"');
}

fn push_delta(out: &mut String, kind: &str, text: &str) {
    out.push_str(DELTA_START);
    out.push_str(kind);
    out.push_str(DELTA_TEXT);
    push_escaped(out, text);
    out.push_str(DELTA_END);
}

impl Payload {
    /// This payload's JSON when it is at most `max` bytes, else `Err` with
    /// its whole length: [`crate::json::json_within`], the same bytes. A
    /// text or reasoning delta is written without serde's tagging
    /// machinery: its fixed start, then its text escaped.
    #[doc(hidden)]
    pub fn json_within(&self, max: u64) -> Result<String, u64> {
        match self.measure(max)? {
            Measured::Written(json) => Ok(json),
            Measured::Counted(len) => {
                let (kind, text) = delta(self).unwrap_or_default();
                let mut out = String::with_capacity(len as usize);
                push_delta(&mut out, kind, text);
                Ok(out)
            }
        }
    }

    /// This payload's JSON measured, when it is at most `max` bytes, else
    /// `Err` with its whole length: a delta's counted, not written (see
    /// [`Measured`]); any other payload's as [`Self::json_within`].
    #[doc(hidden)]
    pub fn measure(&self, max: u64) -> Result<Measured, u64> {
        match delta(self) {
            Some((kind, text)) => match delta_len(kind, text) {
                len if len > max => Err(len),
                len => Ok(Measured::Counted(len)),
            },
            None => crate::json::json_within(self, max).map(Measured::Written),
        }
    }
}

/// The start of a line, up to its seq: its session, segment and run —
/// the same for every entry a run journals in one segment, so a writer
/// builds it once ([`emit_line`]).
#[doc(hidden)]
pub fn line_prefix(session: &SessionId, segment: &SegmentId, run: Option<&RunId>) -> String {
    // A field of an entry always serializes (as in `line`).
    fn json<T: Serialize>(out: &mut Vec<u8>, value: &T) {
        let _ = serde_json::to_writer(out, value);
    }
    let mut out = Vec::with_capacity(160);
    out.extend_from_slice(b"{\"session_id\":");
    json(&mut out, session);
    out.extend_from_slice(b",\"segment_id\":");
    json(&mut out, segment);
    if let Some(run) = run {
        out.extend_from_slice(b",\"run_id\":");
        json(&mut out, run);
    }
    String::from_utf8(out).unwrap_or_default()
}

/// A line's start ([`line_prefix`]) with the checksum of its bytes: a
/// line built on it sums only what follows (the CRC32C continues from
/// the start's), which is more than half of an emitted delta's line.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinePrefix {
    text: String,
    sum: u32,
}

impl LinePrefix {
    /// The start of the lines of `run`'s entries in `segment`.
    pub fn new(session: &SessionId, segment: &SegmentId, run: Option<&RunId>) -> Self {
        let text = line_prefix(session, segment, run);
        let sum = crc32c::crc32c(text.as_bytes());
        LinePrefix { text, sum }
    }

    /// The start itself.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// The line of an entry without facts whose start is `prefix` and whose
/// payload's JSON is `payload`: the bytes [`SessionEvent::line`] writes,
/// in one buffer of exactly their length (kept as it is:
/// [`super::LineCache::built`]), the checksum summed in place. What an
/// emit's entry is built around, before the entry exists.
#[doc(hidden)]
pub fn emit_line(prefix: &LinePrefix, seq: Seq, at_ms: u64, payload: &str) -> Box<str> {
    line_around(prefix, seq, at_ms, Json::Written(payload))
}

/// A payload's JSON as a line takes it: written already, or a delta's, to
/// write straight into the line.
enum Json<'a> {
    Written(&'a str),
    Delta(&'static str, &'a str),
}

impl Json<'_> {
    fn len(&self) -> usize {
        match self {
            Json::Written(json) => json.len(),
            Json::Delta(kind, text) => delta_len(kind, text) as usize,
        }
    }
}

fn line_around(start: &LinePrefix, seq: Seq, at_ms: u64, payload: Json<'_>) -> Box<str> {
    const SEQ: &str = ",\"seq\":";
    const AT: &str = ",\"at_ms\":";
    const PAYLOAD: &str = ",\"payload\":";
    let mut seq_digits = itoa::Buffer::new();
    let seq_digits = seq_digits.format(seq.0);
    let mut at_digits = itoa::Buffer::new();
    let at_digits = at_digits.format(at_ms);
    let prefix = start.as_str();
    let len = prefix.len()
        + SEQ.len()
        + seq_digits.len()
        + AT.len()
        + at_digits.len()
        + PAYLOAD.len()
        + payload.len()
        + crc::SUFFIX_LEN;
    let mut out = String::with_capacity(len);
    out.push_str(prefix);
    out.push_str(SEQ);
    out.push_str(seq_digits);
    out.push_str(AT);
    out.push_str(at_digits);
    out.push_str(PAYLOAD);
    match payload {
        Json::Written(json) => out.push_str(json),
        Json::Delta(kind, text) => push_delta(&mut out, kind, text),
    }
    crc::seal_open_after(&mut out, start.text.len(), start.sum);
    debug_assert_eq!(out.len(), len);
    out.into_boxed_str()
}

impl SessionEvent {
    /// The start of this entry's line, up to its seq ([`line_prefix`]).
    #[doc(hidden)]
    pub fn line_prefix(&self) -> String {
        line_prefix(&self.session_id, &self.segment_id, self.run_id.as_ref())
    }

    /// Whether this entry's line is built.
    #[doc(hidden)]
    pub fn has_line(&self) -> bool {
        self.line.0.get().is_some()
    }

    /// [`Self::line`], built (when it is not yet) around `prefix`, this
    /// entry's [`Self::line_prefix`] (checked in debug builds): the same
    /// bytes, a delta's text escaped straight into the line. What the
    /// journal's committer builds an emitted delta's line with, off the
    /// emitting guest's thread (see [`Measured`]).
    #[doc(hidden)]
    pub fn line_from_prefix(&self, prefix: &LinePrefix) -> &str {
        if self.facts.is_some() {
            // A run's end: written once a run, the general way.
            return self.line();
        }
        self.line.0.get_or_init(|| {
            debug_assert_eq!(prefix.as_str(), self.line_prefix());
            let written;
            let json = match delta(&self.payload) {
                Some((kind, text)) => Json::Delta(kind, text),
                None => {
                    // A payload always serializes (as in `line`).
                    written = crate::json::json_within(&self.payload, u64::MAX).unwrap_or_default();
                    Json::Written(&written)
                }
            };
            line_around(prefix, self.seq, self.at_ms, json)
        })
    }
}
