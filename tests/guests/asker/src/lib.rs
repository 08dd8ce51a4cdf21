//! Asks one decision per word of its prompt (`approval`, `tool_result`,
//! `answer`), in order, and finishes with the answers as a JSON list.
use cairn_guest::{Answer, Controller, Error, Outcome, RequestKind, Start};
use serde_json::{Value, json};

struct Asker;

impl Controller for Asker {
    fn run(start: Start) -> Result<Outcome, Error> {
        let mut out = Vec::new();
        for (i, word) in start.prompt.split_whitespace().enumerate() {
            let kind = match word {
                "approval" => RequestKind::Approval,
                "tool_result" => RequestKind::ToolResult,
                "answer" => RequestKind::Answer,
                other => return Err(Error::new("bad_prompt", format!("{other} is not a kind"))),
            };
            let answer =
                cairn_guest::request(kind, &format!("question {}", i + 1), &json!({}), None, None);
            out.push(match answer {
                Answer::Decided(v) => v,
                other => json!({ "not_decided": format!("{other:?}") }),
            });
        }
        Ok(Outcome::Finished(Value::Array(out).to_string()))
    }
}

cairn_guest::controller!(Asker);
