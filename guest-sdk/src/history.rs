use crate::__bindings::cairn::controller::history as wit;

/// Who spoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A run's prompt.
    User,
    /// A run's final answer.
    Assistant,
}

/// One turn of the session's conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// The journal seq the turn was recorded at.
    pub seq: u64,
    /// The run it belongs to.
    pub run_id: String,
    /// Who spoke.
    pub role: Role,
    /// What was said.
    pub text: String,
}

/// The latest `limit` turns of the session before this run, oldest first.
/// The host caps `limit` at 256.
pub fn turns(limit: u32) -> Vec<Turn> {
    wit::turns(limit)
        .into_iter()
        .map(|t| Turn {
            seq: t.seq,
            run_id: t.run_id,
            role: match t.role {
                wit::Role::User => Role::User,
                wit::Role::Assistant => Role::Assistant,
            },
            text: t.text,
        })
        .collect()
}
