//! Uses the session's MCP tools as its prompt says: the prompt is a JSON
//! list of steps, `"list"` or `{"call": NAME, "args": {...}}`; each step's
//! answer (or error) is emitted as a `step` custom event, and the run
//! finishes with all of them as a JSON array. A call whose approval waits
//! parks the run.
use cairn_guest::tools::{self, ToolError};
use cairn_guest::{Controller, Error, Outcome, Start};
use serde_json::{Value, json};

struct McpUser;

fn step(s: &Value) -> Result<Value, ToolError> {
    if s == "list" {
        let list = tools::list()?;
        return Ok(json!(
            list.iter()
                .map(|t| json!({
                    "server": t.server,
                    "name": t.name,
                    "read_only": t.read_only,
                    "approve": t.approve,
                    "schema_type": t.input_schema["type"],
                }))
                .collect::<Vec<_>>()
        ));
    }
    let name = s["call"].as_str().unwrap_or_default();
    let r = tools::call(name, &s["args"])?;
    Ok(json!({"text": r.text, "is_error": r.is_error, "structured": r.structured}))
}

impl Controller for McpUser {
    const CAN_PARK: bool = true;

    fn run(start: Start) -> Result<Outcome, Error> {
        let steps: Vec<Value> = serde_json::from_str(&start.prompt)
            .map_err(|e| Error::new("bad_prompt", format!("the prompt is not a JSON list: {e}")))?;
        let mut out = Vec::new();
        for s in &steps {
            let answer = match step(s) {
                Ok(v) => json!({"ok": v}),
                Err(ToolError::Park) => return Ok(Outcome::Parked(start.prompt.into_bytes())),
                Err(e) => json!({"error": e.to_string()}),
            };
            cairn_guest::emit_custom("step", &answer)?;
            out.push(answer);
        }
        Ok(Outcome::Finished(Value::Array(out).to_string()))
    }
}

cairn_guest::controller!(McpUser);
