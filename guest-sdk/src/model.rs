//! Call a language model through the host (`cairn:model/chat@0.1.0`).
//!
//! The host holds the provider and its key (`[models.NAME]` in the host's
//! `cairn.toml`); the controller names a model entry, never a URL or a key.
//! Every call is journaled before its answer comes back, so a replay gets
//! the same answer without calling anyone. With [`Request::stream`], the
//! model's tokens reach the run's observers while it writes; the call
//! still returns the whole [`Response`] once.
//!
//! ```no_run
//! use cairn_guest::model::{self, Message, Request};
//! # fn f() -> Result<(), cairn_guest::Error> {
//! let answer = model::chat(&Request::new(vec![
//!     Message::system("Answer in one word."),
//!     Message::user("The capital of France?"),
//! ]))?;
//! cairn_guest::emit_text(&answer.text)?;
//! # Ok(()) }
//! ```

use crate::__bindings::cairn::model::chat as wit;

/// Who speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The model's id for it (a [`Message::tool`] answers it by this id).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// Its arguments: the JSON text the model wrote.
    pub arguments: String,
}

impl ToolCall {
    /// The arguments parsed (`Null` when the model wrote no JSON).
    pub fn args(&self) -> serde_json::Value {
        serde_json::from_str(&self.arguments).unwrap_or(serde_json::Value::Null)
    }
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// What they say.
    pub content: String,
    /// An assistant message's tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// The call a tool message answers.
    pub tool_call_id: Option<String>,
}

impl Message {
    fn of(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// Instructions for the model.
    pub fn system(content: impl Into<String>) -> Self {
        Self::of(Role::System, content)
    }

    /// The user's words.
    pub fn user(content: impl Into<String>) -> Self {
        Self::of(Role::User, content)
    }

    /// The model's earlier answer.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::of(Role::Assistant, content)
    }

    /// A response as the model gave it (its text and tool calls), to send
    /// back with the results of its calls.
    pub fn from_response(response: &Response) -> Self {
        Message {
            tool_calls: response.tool_calls.clone(),
            ..Self::of(Role::Assistant, response.text.clone())
        }
    }

    /// A tool's result for the call `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            tool_call_id: Some(tool_call_id.into()),
            ..Self::of(Role::Tool, content)
        }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// Its name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// Its parameters, a JSON Schema.
    pub parameters: serde_json::Value,
}

impl Tool {
    /// A tool named `name` described by `description`, taking `parameters`
    /// (a JSON Schema object).
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: serde_json::Value,
    ) -> Self {
        Tool {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }
}

/// Whether the model must call a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// One model call.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The host's model entry; empty is `default`.
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Tools it may call.
    pub tools: Vec<Tool>,
    /// Whether it must call one.
    pub tool_choice: Option<ToolChoice>,
    /// The most tokens to generate.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Stream the tokens to observers as they come.
    pub stream: bool,
}

impl Request {
    /// A request of the `default` model over `messages`.
    pub fn new(messages: Vec<Message>) -> Self {
        Request {
            model: String::new(),
            messages,
            tools: Vec::new(),
            tool_choice: None,
            max_tokens: None,
            temperature: None,
            stream: false,
        }
    }

    /// Use the model entry `name`.
    pub fn model(mut self, name: impl Into<String>) -> Self {
        self.model = name.into();
        self
    }

    /// Offer these tools.
    pub fn tools(mut self, tools: Vec<Tool>) -> Self {
        self.tools = tools;
        self
    }

    /// Stream the tokens to observers (the call still returns once).
    pub fn stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// At most this many tokens.
    pub fn max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = Some(n);
        self
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// It was done.
    Stop,
    /// Out of tokens.
    Length,
    /// It asked for tool calls.
    ToolCalls,
    /// The provider filtered it.
    ContentFilter,
    /// Something else.
    Other,
}

/// The model's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Its text.
    pub text: String,
    /// The tools it asked to call.
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped.
    pub finish_reason: FinishReason,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// The model that answered.
    pub model: String,
}

/// Why a call gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelError {
    /// The workspace may not use that model, or the request was refused.
    Refused(String),
    /// A limit of the run stops it.
    LimitExceeded(String),
    /// The provider failed, retries spent.
    Provider(String),
    /// The run was cancelled.
    Cancelled,
    /// The host stopped during the call and could not repeat it.
    Interrupted(String),
}

impl std::fmt::Display for ModelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelError::Refused(m) => write!(f, "refused: {m}"),
            ModelError::LimitExceeded(m) => write!(f, "limit exceeded: {m}"),
            ModelError::Provider(m) => write!(f, "the provider failed: {m}"),
            ModelError::Cancelled => f.write_str("cancelled"),
            ModelError::Interrupted(m) => write!(f, "interrupted: {m}"),
        }
    }
}

impl std::error::Error for ModelError {}

impl From<ModelError> for crate::Error {
    fn from(e: ModelError) -> Self {
        let code = match &e {
            ModelError::Refused(_) => "model_refused",
            ModelError::LimitExceeded(_) => "limit_exceeded",
            ModelError::Provider(_) => "model_provider",
            ModelError::Cancelled => "cancelled",
            ModelError::Interrupted(_) => "model_interrupted",
        };
        crate::Error::new(code, e.to_string())
    }
}

fn call_to_wit(c: &ToolCall) -> wit::ToolCall {
    wit::ToolCall {
        id: c.id.clone(),
        name: c.name.clone(),
        arguments: c.arguments.clone(),
    }
}

/// Call the model.
pub fn chat(request: &Request) -> Result<Response, ModelError> {
    let req = wit::Request {
        model: request.model.clone(),
        messages: request
            .messages
            .iter()
            .map(|m| wit::Message {
                role: match m.role {
                    Role::System => wit::Role::System,
                    Role::User => wit::Role::User,
                    Role::Assistant => wit::Role::Assistant,
                    Role::Tool => wit::Role::Tool,
                },
                content: m.content.clone(),
                tool_calls: m.tool_calls.iter().map(call_to_wit).collect(),
                tool_call_id: m.tool_call_id.clone(),
            })
            .collect(),
        tools: request
            .tools
            .iter()
            .map(|t| wit::Tool {
                name: t.name.clone(),
                description: t.description.clone(),
                parameters: t.parameters.to_string(),
            })
            .collect(),
        tool_choice: request.tool_choice.clone().map(|c| match c {
            ToolChoice::Auto => wit::ToolChoice::Auto,
            ToolChoice::None => wit::ToolChoice::None,
            ToolChoice::Required => wit::ToolChoice::Required,
            ToolChoice::Named(n) => wit::ToolChoice::Named(n),
        }),
        max_tokens: request.max_tokens,
        temperature: request.temperature,
        stream: request.stream,
    };
    match wit::chat(&req) {
        Ok(r) => Ok(Response {
            text: r.text,
            tool_calls: r
                .tool_calls
                .into_iter()
                .map(|c| ToolCall {
                    id: c.id,
                    name: c.name,
                    arguments: c.arguments,
                })
                .collect(),
            finish_reason: match r.finish_reason {
                wit::FinishReason::Stop => FinishReason::Stop,
                wit::FinishReason::Length => FinishReason::Length,
                wit::FinishReason::ToolCalls => FinishReason::ToolCalls,
                wit::FinishReason::ContentFilter => FinishReason::ContentFilter,
                wit::FinishReason::Other => FinishReason::Other,
            },
            input_tokens: r.usage.input_tokens,
            output_tokens: r.usage.output_tokens,
            model: r.model,
        }),
        Err(e) => Err(match e {
            wit::ModelError::Refused(m) => ModelError::Refused(m),
            wit::ModelError::LimitExceeded(m) => ModelError::LimitExceeded(m),
            wit::ModelError::Provider(m) => ModelError::Provider(m),
            wit::ModelError::Cancelled => ModelError::Cancelled,
            wit::ModelError::Interrupted(m) => ModelError::Interrupted(m),
        }),
    }
}
