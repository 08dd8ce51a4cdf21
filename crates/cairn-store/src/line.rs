//! A journal line, as every store keeps it: one JSON object (with its
//! checksum) per entry.

use crate::JournalItem;
use cairn_types::event::SessionEvent;
use cairn_types::ids::Seq;

/// One line → an entry. A checksum that does not match, not JSON, or no
/// numeric `seq`: corrupt. JSON that is not an event this cairn knows (a
/// newer payload kind): `Unknown`.
pub fn parse_line(line: &[u8]) -> Result<JournalItem, String> {
    cairn_types::event::check_line(line)?;
    // The common case, one parse; the slow path only classifies failures.
    if let Ok(event) = serde_json::from_slice::<SessionEvent>(line) {
        if event.seq.0 == 0 {
            return Err("seq 0 is not a valid entry".to_string());
        }
        return Ok(JournalItem::Event(Box::new(event)));
    }
    let value: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
    let seq = value
        .get("seq")
        .and_then(|s| s.as_u64())
        .ok_or_else(|| "no numeric \"seq\" field".to_string())?;
    if seq == 0 {
        return Err("seq 0 is not a valid entry".to_string());
    }
    Ok(JournalItem::Unknown {
        seq: Seq(seq),
        raw: String::from_utf8_lossy(line).into_owned(),
    })
}
