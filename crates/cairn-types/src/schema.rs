//! The published JSON Schema of one journal line (`cairn schema journal`;
//! a copy lives in `docs/journal.schema.json`).

use crate::event::SessionEvent;

/// The JSON Schema of one journal line, pretty-printed.
pub fn journal_line() -> String {
    let schema = schemars::schema_for!(SessionEvent);
    let mut text = serde_json::to_string_pretty(&schema).expect("schemas serialize");
    text.push('\n');
    text
}

/// `cairn schema replayed`: the entry kinds a replay feeds back to the
/// controller (its script), and which of them are agent events, as the
/// browser replayer imports them (`viewer/src/replayed.json`).
pub fn replayed() -> String {
    let value = serde_json::json!({
        "kinds": crate::event::replayed_kinds(),
        "agent": crate::event::AGENT_KINDS,
    });
    let mut text = serde_json::to_string_pretty(&value).expect("lists serialize");
    text.push('\n');
    text
}
