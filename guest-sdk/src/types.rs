use crate::__bindings::cairn::controller::types as wit;

/// Everything a run starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// The run's id.
    pub run_id: String,
    /// The session's id; stable for the worker's lifetime.
    pub session_id: String,
    /// The worker hosting the session.
    pub worker_id: String,
    /// This run's generation (a fresh instantiation per run).
    pub generation: u64,
    /// The user's turn; may be empty.
    pub prompt: String,
    /// The run this one continues, if any.
    pub continues: Option<String>,
    /// The checkpoint to resume from, when this run resumes a parked one.
    pub checkpoint: Option<Vec<u8>>,
    /// What the client offered besides the prompt, as JSON text, when it
    /// offered anything: an OpenAI chat request's
    /// `{"tools": [...], "tool_choice": ...}`.
    pub tools: Option<String>,
}

impl From<wit::Start> for Start {
    fn from(s: wit::Start) -> Self {
        Start {
            run_id: s.run_id,
            session_id: s.session_id,
            worker_id: s.worker_id,
            generation: s.generation,
            prompt: s.prompt,
            continues: s.continues,
            checkpoint: s.checkpoint,
            tools: s.tools,
        }
    }
}

/// What the controller says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    /// The controller's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Whether it can park.
    pub can_park: bool,
}

/// How a run ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done; the text is the final answer.
    Finished(String),
    /// A clarifying question; answered by a new run that continues this one.
    Question(String),
    /// Stop here; resume later from these bytes.
    Parked(Vec<u8>),
}

impl From<Outcome> for wit::Outcome {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Finished(text) => wit::Outcome::Finished(text),
            Outcome::Question(text) => wit::Outcome::Question(text),
            Outcome::Parked(bytes) => wit::Outcome::Parked(bytes),
        }
    }
}

/// A failure that ends the run `failed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// A stable code in snake_case.
    pub code: String,
    /// A sentence for people.
    pub message: String,
}

impl Error {
    /// An error with a code and a message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Error {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}
