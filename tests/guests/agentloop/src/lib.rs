//! An agent loop over the client's tools. With tool results in its
//! `Start` (a run continuing one that ended with tool calls) it answers
//! `results: <id>=<content>; …`. Otherwise it calls every tool the client
//! offered with `{"query": <prompt>}`: mid-run, waiting for each result,
//! then answers `answers: <name>=<result>; …` — or, when the prompt starts
//! with `end `, by ending the run with the calls (the client answers them
//! with a new run). The prompt `history` answers the session's history as
//! the controller reads it (`<role>[<call id>]=<text>; …`). With no tools
//! offered it answers its prompt.
use cairn_guest::{Controller, Error, Outcome, Role, Start, client_tools};

struct AgentLoop;

fn say(text: String) -> Result<Outcome, Error> {
    cairn_guest::emit_text(&text)?;
    Ok(Outcome::Finished(text))
}

impl Controller for AgentLoop {
    fn run(start: Start) -> Result<Outcome, Error> {
        if start.prompt == "history" {
            let turns: Vec<String> = cairn_guest::turns(32)
                .into_iter()
                .map(|t| {
                    let role = match t.role {
                        Role::User => "user",
                        Role::Assistant => "assistant",
                        Role::System => "system",
                        Role::Tool => "tool",
                    };
                    let id = t.tool_call_id.map(|i| format!("[{i}]")).unwrap_or_default();
                    let calls = t.tool_calls.map(|c| format!("{{{c}}}")).unwrap_or_default();
                    format!("{role}{id}={}{calls}", t.text)
                })
                .collect();
            return say(format!("history: {}", turns.join("; ")));
        }
        let given = client_tools::results(&start);
        if !given.is_empty() {
            let parts: Vec<String> = given
                .iter()
                .map(|g| format!("{}={}", g.tool_call_id, g.content))
                .collect();
            return say(format!("results: {}", parts.join("; ")));
        }
        let offered = client_tools::offered(&start);
        if offered.is_empty() {
            return say(start.prompt);
        }
        if let Some(query) = start.prompt.strip_prefix("end ") {
            let arguments = serde_json::json!({ "query": query }).to_string();
            for (i, tool) in offered.iter().enumerate() {
                cairn_guest::emit_tool_call(&format!("end_{}", i + 1), &tool.name, &arguments)?;
            }
            return Ok(Outcome::Finished(String::new()));
        }
        let arguments = serde_json::json!({ "query": start.prompt });
        let calls: Vec<(&str, serde_json::Value)> = offered
            .iter()
            .map(|t| (t.name.as_str(), arguments.clone()))
            .collect();
        let mut parts = Vec::new();
        for (tool, result) in offered.iter().zip(client_tools::call_all(&calls)) {
            parts.push(format!("{}={}", tool.name, result?));
        }
        say(format!("answers: {}", parts.join("; ")))
    }
}

cairn_guest::controller!(AgentLoop);
