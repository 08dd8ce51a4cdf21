//! The chat-completions request as OpenAI clients send it. Every field of
//! OpenAI's API is accepted: the ones that change nothing cairn can do are
//! ignored, `tools`/`tool_choice` reach the controller, `n` must be 1, and
//! `stream_options.include_usage` sends the usage chunk. A field that is
//! not OpenAI's is still a 400 (`unknown_field`), as OpenAI answers it.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChatRole {
    /// Instructions (imported as history, not run).
    System,
    /// Instructions, newer name (imported as history, not run).
    Developer,
    /// The user; the last user message is the run's prompt.
    User,
    /// The assistant (with text, or with `tool_calls`).
    Assistant,
    /// A tool's result; run as the prompt when it is the last message.
    Tool,
    /// A function's result (the older form of `tool`).
    Function,
}

impl ChatRole {
    pub fn as_str(self) -> &'static str {
        match self {
            ChatRole::System => "system",
            ChatRole::Developer => "developer",
            ChatRole::User => "user",
            ChatRole::Assistant => "assistant",
            ChatRole::Tool => "tool",
            ChatRole::Function => "function",
        }
    }
}

/// One chat message, as the SDKs send it (an SDK's `message.model_dump()`
/// included: `refusal`, `annotations`, `audio`, `function_call` and
/// `tool_calls` may be present and `null`).
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code, reason = "accepted for OpenAI compatibility")]
#[serde(deny_unknown_fields)]
pub struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant`, `tool` or `function`.
    pub role: ChatRole,
    /// Text, an array of content parts (`{"type": "text", "text"}`), or null.
    #[serde(default)]
    pub content: Value,
    /// An optional participant name.
    #[serde(default)]
    pub name: Option<String>,
    /// An assistant message's tool calls.
    #[serde(default)]
    pub tool_calls: Option<Value>,
    /// A tool message's call id.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// Accepted, ignored.
    #[serde(default)]
    pub refusal: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub annotations: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub audio: Option<Value>,
    /// Accepted, ignored (the older form of `tool_calls`).
    #[serde(default)]
    pub function_call: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub reasoning_content: Option<Value>,
}

impl ChatMessage {
    /// The message's text: a string, or its text parts joined.
    pub fn text(&self) -> String {
        match &self.content {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter(|p| p["type"] == "text")
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join(""),
            _ => String::new(),
        }
    }
}

/// The request body: OpenAI's chat-completions request.
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code, reason = "fields accepted for OpenAI compatibility")]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    /// The component: a built-in example name or `sha256:<hex>`.
    pub model: String,
    /// The conversation. The last `user` (or trailing `tool`) message is the
    /// run's prompt; on a new session the messages before it are imported
    /// as its history.
    pub messages: Vec<ChatMessage>,
    /// Stream chunks (SSE) or answer once.
    #[serde(default)]
    pub stream: Option<bool>,
    /// `{"include_usage": true}` sends a last chunk with `usage` and no
    /// choices.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Given to the controller in `Start.tools` with `tool_choice`.
    #[serde(default)]
    pub tools: Option<Value>,
    /// Given to the controller in `Start.tools` with `tools`.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    /// Only 1 is supported.
    #[serde(default)]
    pub n: Option<u32>,
    /// Accepted, ignored.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Accepted, ignored.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Accepted, ignored.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Accepted, ignored.
    #[serde(default)]
    pub max_completion_tokens: Option<u64>,
    /// Accepted, ignored.
    #[serde(default)]
    pub user: Option<String>,
    /// Accepted, ignored.
    #[serde(default)]
    pub stop: Option<Value>,
    /// Accepted, ignored (the run's randomness is journaled by cairn).
    #[serde(default)]
    pub seed: Option<i64>,
    /// Accepted, ignored.
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    /// Accepted, ignored.
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    /// Accepted, ignored.
    #[serde(default)]
    pub logit_bias: Option<Value>,
    /// Accepted, ignored: no log probabilities are returned.
    #[serde(default)]
    pub logprobs: Option<bool>,
    /// Accepted, ignored.
    #[serde(default)]
    pub top_logprobs: Option<u32>,
    /// Accepted, ignored.
    #[serde(default)]
    pub response_format: Option<Value>,
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
    pub functions: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub function_call: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub modalities: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub audio: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub prediction: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub reasoning_effort: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub verbosity: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub service_tier: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub web_search_options: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub prompt_cache_key: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub prompt_cache_retention: Option<Value>,
    /// Accepted, ignored.
    #[serde(default)]
    pub safety_identifier: Option<Value>,
}

/// `stream_options`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[allow(dead_code, reason = "accepted for OpenAI compatibility")]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    /// Send a last chunk with the run's `usage` and `choices: []`.
    #[serde(default)]
    pub include_usage: Option<bool>,
    /// Accepted, ignored.
    #[serde(default)]
    pub include_obfuscation: Option<bool>,
}

impl ChatRequest {
    /// `{"tools", "tool_choice", "tool_results"}` as JSON text, when the
    /// client sent any.
    pub fn tools_json(&self, results: &[crate::tool_results::Given]) -> Option<String> {
        if self.tools.is_none() && self.tool_choice.is_none() && results.is_empty() {
            return None;
        }
        let mut doc = serde_json::Map::new();
        if !results.is_empty() {
            doc.insert(
                "tool_results".into(),
                crate::tool_results::as_start(results),
            );
        }
        if let Some(t) = &self.tools {
            doc.insert("tools".into(), t.clone());
        }
        if let Some(c) = &self.tool_choice {
            doc.insert("tool_choice".into(), c.clone());
        }
        Some(Value::Object(doc).to_string())
    }

    /// The messages the run answers: the last `user` message, or the
    /// `tool`/`function` results that end the conversation.
    pub fn prompt_range(&self) -> Option<std::ops::Range<usize>> {
        let is_result = |m: &ChatMessage| matches!(m.role, ChatRole::Tool | ChatRole::Function);
        let len = self.messages.len();
        if self.messages.last().is_some_and(is_result) {
            let start = self
                .messages
                .iter()
                .rposition(|m| !is_result(m))
                .map_or(0, |i| i + 1);
            return Some(start..len);
        }
        let user = self
            .messages
            .iter()
            .rposition(|m| m.role == ChatRole::User)?;
        Some(user..user + 1)
    }

    /// The trailing `tool` messages as results by call id (empty when the
    /// conversation does not end with tool results, or one lacks its id).
    pub fn trailing_results(&self) -> Vec<crate::tool_results::Given> {
        let Some(range) = self.prompt_range() else {
            return Vec::new();
        };
        let trailing = &self.messages[range];
        let given: Vec<_> = trailing
            .iter()
            .filter(|m| m.role == ChatRole::Tool)
            .filter_map(|m| {
                Some(crate::tool_results::Given {
                    tool_call_id: m.tool_call_id.clone()?,
                    content: m.text(),
                })
            })
            .collect();
        match given.len() == trailing.len() {
            true => given,
            false => Vec::new(),
        }
    }

    /// The names of the function tools the client offered: a controller's
    /// `tool_call` of one of these is the client's to run.
    pub fn offered_tools(&self) -> Vec<String> {
        self.tools
            .as_ref()
            .and_then(Value::as_array)
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether the usage chunk was asked for.
    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }
}
