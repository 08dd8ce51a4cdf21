//! The Responses API request as OpenAI clients send it: `input` (text, or
//! items: messages, `function_call`s, `function_call_output`s), function
//! `tools`, `previous_response_id`, `stream`, `background`. Fields that
//! change nothing cairn can do are accepted and ignored; what cairn cannot
//! honour (hosted tools, `conversation`, prompt templates) is a 400 that
//! says so, as is a field that is not OpenAI's.

use crate::error::ApiError;
use crate::tool_results::Given;
use cairn_runtime::journal::event::ImportedTurn;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// The request body: OpenAI's `responses.create`.
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code, reason = "fields accepted for OpenAI compatibility")]
#[serde(deny_unknown_fields)]
pub struct ResponsesRequest {
    /// The component: a built-in example name or `sha256:<hex>`.
    pub model: String,
    /// Text (the run's prompt), or a list of input items.
    #[serde(default)]
    pub input: Value,
    /// A system message: the first turn of a new session's history.
    #[serde(default)]
    pub instructions: Option<Value>,
    /// Function tools (`{"type": "function", "name", "parameters"}`),
    /// given to the controller in `Start.tools` in chat's form.
    #[serde(default)]
    pub tools: Option<Value>,
    /// Given to the controller with `tools`.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    /// Stream events (SSE) or answer once.
    #[serde(default)]
    pub stream: Option<bool>,
    /// A headless run: the call returns at once, `GET` polls it, and no
    /// disconnect cancels it.
    #[serde(default)]
    pub background: Option<bool>,
    /// Continue that response's session.
    #[serde(default)]
    pub previous_response_id: Option<String>,
    /// Refused: use `previous_response_id`.
    #[serde(default)]
    pub conversation: Option<Value>,
    /// Refused: prompt templates are not served.
    #[serde(default)]
    pub prompt: Option<Value>,
    /// Accepted, ignored: every run is stored in its session's journal.
    #[serde(default)]
    pub store: Option<bool>,
    /// Accepted, ignored.
    #[serde(default)]
    pub metadata: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// Accepted, ignored.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Accepted, ignored.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Accepted, ignored.
    #[serde(default)]
    pub top_logprobs: Option<u32>,
    /// Accepted, ignored.
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
    /// Accepted, ignored.
    #[serde(default)]
    pub max_tool_calls: Option<u64>,
    /// Accepted, ignored.
    #[serde(default)]
    pub text: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub reasoning: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub truncation: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub user: Option<String>,
    /// Accepted, ignored.
    #[serde(default)]
    pub include: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub service_tier: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub prompt_cache_key: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub prompt_cache_retention: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub safety_identifier: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub stream_options: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub context_management: Option<Value>,
}

/// What the input asks of the run.
#[derive(Debug, Default)]
pub struct Input {
    /// The items before the run's (a new session's history).
    pub earlier: Vec<ImportedTurn>,
    /// The run's prompt.
    pub prompt: String,
    /// Trailing `function_call_output`s, by call id.
    pub results: Vec<Given>,
}

/// The text of a content value: a string, or its text parts joined.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// One input item as a history turn (`None`: an item history keeps no
/// turn for, such as reasoning).
fn turn_of(item: &Value) -> Result<Option<ImportedTurn>, ApiError> {
    let kind = item["type"].as_str().unwrap_or("message");
    let turn = match kind {
        "message" => {
            let role = item["role"].as_str().ok_or_else(|| {
                ApiError::invalid(
                    "an input message has no role (user, assistant, system or developer)",
                )
            })?;
            if !matches!(role, "user" | "assistant" | "system" | "developer") {
                return Err(ApiError::invalid(format!(
                    "an input message's role is {role:?}: say user, assistant, system or developer"
                )));
            }
            ImportedTurn {
                role: role.to_string(),
                text: text_of(&item["content"]),
                tool_calls: None,
                tool_call_id: None,
            }
        }
        "function_call" | "function_call_output" if !item["call_id"].is_string() => {
            return Err(ApiError::invalid(format!(
                "a {kind} item needs its call_id (the function call it is, or answers)"
            )));
        }
        "function_call" if !item["name"].is_string() => {
            return Err(ApiError::invalid("a function_call item needs its name"));
        }
        "function_call" => ImportedTurn {
            role: "assistant".into(),
            text: String::new(),
            tool_calls: Some(json!([{
                "id": item["call_id"], "type": "function",
                "function": { "name": item["name"], "arguments": item["arguments"] },
            }])),
            tool_call_id: None,
        },
        "function_call_output" => ImportedTurn {
            role: "tool".into(),
            text: text_of(&item["output"]),
            tool_calls: None,
            tool_call_id: item["call_id"].as_str().map(str::to_string),
        },
        _ => return Ok(None),
    };
    Ok(Some(turn))
}

impl ResponsesRequest {
    /// What cairn cannot honour, refused by name.
    pub fn check(&self) -> Result<(), ApiError> {
        if self.conversation.is_some() {
            return Err(ApiError::invalid(
                "conversation is not served: continue with previous_response_id",
            ));
        }
        if self.prompt.is_some() {
            return Err(ApiError::invalid(
                "prompt templates are not served: send input",
            ));
        }
        if let Some(t) = self.tools.as_ref().and_then(Value::as_array)
            && let Some(other) = t.iter().find(|t| t["type"] != "function")
        {
            return Err(ApiError::invalid(format!(
                "only function tools are served (the controller runs its own); got a {} tool",
                other["type"]
            )));
        }
        Ok(())
    }

    /// The input's turns, the run's prompt and the trailing results.
    pub fn input(&self) -> Result<Input, ApiError> {
        let items: Vec<Value> = match &self.input {
            Value::String(s) => {
                return Ok(Input {
                    prompt: s.clone(),
                    ..Default::default()
                });
            }
            Value::Array(items) => items.clone(),
            Value::Null => Vec::new(),
            _ => return Err(ApiError::invalid("input is text or a list of items")),
        };
        let mut turns = Vec::new();
        for item in &items {
            turns.extend(turn_of(item)?);
        }
        let results_from = turns
            .iter()
            .rposition(|t| t.role != "tool")
            .map_or(0, |i| i + 1);
        if results_from < turns.len() {
            let results: Vec<Given> = turns[results_from..]
                .iter()
                .map(|t| Given {
                    tool_call_id: t.tool_call_id.clone().unwrap_or_default(),
                    content: t.text.clone(),
                })
                .collect();
            let prompt = results
                .iter()
                .map(|r| r.content.as_str())
                .collect::<Vec<_>>()
                .join("\n");
            turns.truncate(results_from);
            return Ok(Input {
                earlier: turns,
                prompt,
                results,
            });
        }
        let user = turns
            .iter()
            .rposition(|t| t.role == "user")
            .ok_or_else(|| {
                ApiError::invalid(
                    "input holds no user message (nor trailing function_call_output items) to run",
                )
            })?;
        let prompt = turns[user].text.clone();
        turns.truncate(user);
        Ok(Input {
            earlier: turns,
            prompt,
            results: Vec::new(),
        })
    }

    /// The function tools in chat's form, with `tool_choice` and the
    /// results, as the JSON text `Start.tools` carries.
    pub fn start_tools(&self, results: &[Given]) -> Option<String> {
        if self.tools.is_none() && self.tool_choice.is_none() && results.is_empty() {
            return None;
        }
        let mut doc = serde_json::Map::new();
        if let Some(tools) = self.tools.as_ref().and_then(Value::as_array) {
            let chat: Vec<Value> = tools
                .iter()
                .map(|t| {
                    json!({ "type": "function", "function": {
                        "name": t["name"], "description": t["description"],
                        "parameters": t["parameters"],
                    }})
                })
                .collect();
            doc.insert("tools".into(), Value::Array(chat));
        }
        if let Some(c) = &self.tool_choice {
            doc.insert("tool_choice".into(), c.clone());
        }
        if !results.is_empty() {
            doc.insert(
                "tool_results".into(),
                crate::tool_results::as_start(results),
            );
        }
        Some(Value::Object(doc).to_string())
    }

    /// The tools as a response echoes them.
    pub fn echoed_tools(&self) -> Value {
        self.tools.clone().unwrap_or_else(|| json!([]))
    }

    /// The instructions' text, when given.
    pub fn instructions(&self) -> Option<String> {
        self.instructions
            .as_ref()
            .map(text_of)
            .filter(|t| !t.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(input: Value) -> ResponsesRequest {
        serde_json::from_value(json!({ "model": "echo", "input": input })).unwrap()
    }

    #[test]
    fn text_is_the_prompt_and_items_split_into_history_and_the_run() {
        let i = req(json!("hello")).input().unwrap();
        assert_eq!((i.prompt.as_str(), i.earlier.len()), ("hello", 0));
        let i = req(json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "input_text", "text": "one"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "1"}]},
            {"role": "user", "content": "two"},
        ]))
        .input()
        .unwrap();
        assert_eq!(i.prompt, "two");
        let roles: Vec<&str> = i.earlier.iter().map(|t| t.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant"]);
        assert!(i.results.is_empty());
    }

    #[test]
    fn trailing_function_outputs_are_results_by_call_id() {
        let i = req(json!([
            {"role": "user", "content": "oslo"},
            {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "rain"},
        ]))
        .input()
        .unwrap();
        assert_eq!(
            i.results,
            [Given {
                tool_call_id: "c1".into(),
                content: "rain".into()
            }]
        );
        assert_eq!(i.prompt, "rain");
        assert_eq!(i.earlier.len(), 2);
        assert_eq!(i.earlier[1].tool_calls.as_ref().unwrap()[0]["id"], "c1");
    }

    #[test]
    fn malformed_input_is_a_400_that_names_the_problem() {
        for (input, says) in [
            (json!(7), "input is text or a list of items"),
            (json!([{"role": "wizard", "content": "x"}]), "\"wizard\""),
            (json!([{"content": "x"}]), "has no role"),
            (
                json!([{"type": "function_call_output", "output": "x"}]),
                "needs its call_id",
            ),
            (
                json!([{"type": "function_call", "call_id": "c"}]),
                "needs its name",
            ),
            (
                json!([{"role": "assistant", "content": "x"}]),
                "no user message",
            ),
        ] {
            let e = req(input.clone()).input().unwrap_err();
            assert_eq!(e.status(), axum::http::StatusCode::BAD_REQUEST, "{input}");
            assert!(e.message.contains(says), "{input}: {}", e.message);
        }
        let hosted: ResponsesRequest = serde_json::from_value(
            json!({"model": "echo", "input": "x", "tools": [{"type": "web_search"}]}),
        )
        .unwrap();
        assert!(
            hosted
                .check()
                .unwrap_err()
                .message
                .contains("only function tools")
        );
    }
}
