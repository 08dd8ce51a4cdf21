//! Calls the first tool its client offered (an OpenAI chat request's
//! `tools`, given in `Start.tools`) with `{"query": <prompt>}`, then
//! finishes; with no tools offered it answers in text.
use cairn_guest::{Controller, Error, Outcome, Start};

struct ToolCaller;

impl Controller for ToolCaller {
    fn run(start: Start) -> Result<Outcome, Error> {
        let offered: serde_json::Value = start
            .tools
            .as_deref()
            .and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or_default();
        let Some(name) = offered["tools"][0]["function"]["name"].as_str() else {
            cairn_guest::emit_text("no tools offered")?;
            return Ok(Outcome::Finished("no tools offered".into()));
        };
        let arguments = serde_json::json!({ "query": start.prompt }).to_string();
        cairn_guest::emit_tool_call("call_1", name, &arguments)?;
        Ok(Outcome::Finished(String::new()))
    }
}

cairn_guest::controller!(ToolCaller);
