//! `echo`: emits the prompt back as several text deltas, then finishes with it.
//! Tools a client offered (an OpenAI chat request's `tools`) are echoed too,
//! as one `offered_tools` custom event.
use cairn_guest::{Controller, Error, Outcome, Start};

struct Echo;

impl Controller for Echo {
    fn run(start: Start) -> Result<Outcome, Error> {
        cairn_guest::emit_progress("echoing", 0, Some(1))?;
        if let Some(tools) = start.tools.as_deref() {
            let tools = serde_json::from_str(tools).unwrap_or(serde_json::Value::Null);
            cairn_guest::emit_custom("offered_tools", &tools)?;
        }
        for word in start.prompt.split_inclusive(' ') {
            cairn_guest::emit_text(word)?;
        }
        cairn_guest::emit_progress("echoing", 1, Some(1))?;
        Ok(Outcome::Finished(start.prompt))
    }
}

cairn_guest::controller!(Echo);
