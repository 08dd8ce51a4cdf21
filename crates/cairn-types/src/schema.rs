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
