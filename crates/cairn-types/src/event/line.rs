//! An emit's journal line: its payload's JSON (measured for the run's
//! limits, a delta's written without serde's tagging), then the line built
//! around it as it is, the line's start kept for the run's next emit.

use super::{AgentEvent, LineCache, Payload, SessionEvent, crc};
use serde::Serialize;

impl Payload {
    /// This payload's JSON when it is at most `max` bytes, else `Err` with
    /// its whole length: [`crate::json::json_within`], the same bytes. A
    /// text or reasoning delta — most of what a streaming controller
    /// emits — is written without serde's tagging machinery: its fixed
    /// start, then its text escaped.
    #[doc(hidden)]
    pub fn json_within(&self, max: u64) -> Result<String, u64> {
        let (kind, text) = match self {
            Payload::Agent(AgentEvent::TextDelta { text, by: None }) => ("text_delta", text),
            Payload::Agent(AgentEvent::ReasoningDelta { text, by: None }) => {
                ("reasoning_delta", text)
            }
            _ => return crate::json::json_within(self, max),
        };
        // Escaped, a byte takes at most six (`\u001f`); a delta that could
        // pass `max` so is measured the general way.
        const AROUND: u64 = 64;
        if (text.len() as u64).saturating_mul(6).saturating_add(AROUND) > max {
            return crate::json::json_within(self, max);
        }
        let mut out = Vec::with_capacity(text.len() + AROUND as usize);
        out.extend_from_slice(b"{\"kind\":\"agent\",\"event\":{\"type\":\"");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\",\"text\":");
        // A string always serializes.
        let _ = serde_json::to_writer(&mut out, text);
        out.extend_from_slice(b"}}");
        String::from_utf8(out).map_err(|_| u64::MAX)
    }
}

impl SessionEvent {
    /// Keep the line built around `payload`, the JSON of this entry's
    /// payload its writer serialized already (an emit measures its size
    /// so): the same bytes [`Self::line`] would write, the payload not
    /// serialized twice.
    #[doc(hidden)]
    pub fn with_payload_json(self, payload: &str) -> Self {
        let prefix = self.line_prefix();
        self.with_prefix_and_payload_json(&prefix, payload)
    }

    /// The start of this entry's line, up to its seq: its session, segment
    /// and run — the same for every entry a run journals in one segment,
    /// so a writer builds it once ([`Self::with_prefix_and_payload_json`]).
    #[doc(hidden)]
    pub fn line_prefix(&self) -> String {
        // A field of an entry always serializes (as in `line`).
        fn json<T: Serialize>(out: &mut Vec<u8>, value: &T) {
            let _ = serde_json::to_writer(out, value);
        }
        let mut out = Vec::with_capacity(160);
        out.extend_from_slice(b"{\"session_id\":");
        json(&mut out, &self.session_id);
        out.extend_from_slice(b",\"segment_id\":");
        json(&mut out, &self.segment_id);
        if let Some(run) = &self.run_id {
            out.extend_from_slice(b",\"run_id\":");
            json(&mut out, run);
        }
        String::from_utf8(out).unwrap_or_default()
    }

    /// [`Self::with_payload_json`] with the line's start built already:
    /// `prefix` must be this entry's [`Self::line_prefix`] (checked in
    /// debug builds). One buffer, sized once, the checksum summed in place.
    #[doc(hidden)]
    pub fn with_prefix_and_payload_json(self, prefix: &str, payload: &str) -> Self {
        debug_assert_eq!(prefix, self.line_prefix());
        let mut out = String::with_capacity(prefix.len() + payload.len() + 80 + crc::SUFFIX_LEN);
        out.push_str(prefix);
        out.push_str(",\"seq\":");
        out.push_str(itoa::Buffer::new().format(self.seq.0));
        out.push_str(",\"at_ms\":");
        out.push_str(itoa::Buffer::new().format(self.at_ms));
        out.push_str(",\"payload\":");
        out.push_str(payload);
        if let Some(facts) = &self.facts {
            out.push_str(",\"facts\":");
            // A field of an entry always serializes (as in `line`).
            out.push_str(&serde_json::to_string(facts).unwrap_or_default());
        }
        crc::seal_open(&mut out);
        Self {
            line: LineCache::built(std::sync::Arc::from(out)),
            ..self
        }
    }
}
