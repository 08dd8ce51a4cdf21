//! The `cairn:model` capability's request and response as they are
//! journaled (`host_call_started.request`, `host_call_finished.response`)
//! and handed to a provider: the WIT records' shape in JSON.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Who speaks in a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions.
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// The model's id for it.
    pub id: String,
    /// The tool.
    pub name: String,
    /// Its arguments: the JSON text the model wrote.
    pub arguments: String,
}

/// One message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// What they say.
    pub content: String,
    /// An assistant message's tool calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The call a tool message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    /// Its name.
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// Its parameters (JSON Schema).
    pub parameters: serde_json::Value,
}

/// Whether the model must call a tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// No tool.
    None,
    /// Some tool.
    Required,
    /// This tool.
    Named(String),
}

/// One model call, as the guest made it. `model` names an entry of the
/// workspace's model table, never a provider URL or key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    /// The model entry (`[models.NAME]`).
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Tools it may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    /// Whether it must call one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// The most tokens to generate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Whether the tokens stream to observers while the call lasts.
    #[serde(default)]
    pub stream: bool,
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// Done.
    Stop,
    /// Out of tokens.
    Length,
    /// It asked for tools.
    ToolCalls,
    /// Filtered.
    ContentFilter,
    /// Something else.
    Other,
}

/// The model's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChatResponse {
    /// Its text.
    pub text: String,
    /// The tool calls it asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped.
    pub finish_reason: FinishReason,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// The model that answered, as the provider named it.
    pub model: String,
}

/// Which wire protocol a model entry speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// OpenAI-compatible chat completions (`POST {base_url}/chat/completions`):
    /// OpenAI, Ollama, vLLM, llama.cpp's server, LM Studio.
    Openai,
    /// The Anthropic Messages API (`POST {base_url}/v1/messages`).
    Anthropic,
}

/// `[models.NAME]` in `cairn.toml`: one entry of the model table a
/// controller names in its requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// The wire protocol.
    pub provider: Provider,
    /// Where the provider listens: `https://api.openai.com/v1`,
    /// `http://127.0.0.1:11434/v1` (Ollama), `https://api.anthropic.com`.
    pub base_url: String,
    /// The provider's model name.
    pub model: String,
    /// The secret (`[secrets] NAME`) holding the API key; none for a local
    /// server that takes no key.
    #[serde(default)]
    pub api_key: Option<String>,
    /// Retries after a 429, a 5xx, a timeout or a dropped connection
    /// (default 4), each journaled as a `retrying` event.
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// How long one attempt may take, in milliseconds (default 120 000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// `[secrets] NAME = { env = "VAR" }` or `{ file = "/path" }`: where a
/// secret's value is read, host-side, when a call needs it. Only the name
/// is ever written anywhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum SecretSource {
    /// An environment variable of the host process.
    Env(String),
    /// A file (its contents, trailing newline trimmed).
    File(String),
}
