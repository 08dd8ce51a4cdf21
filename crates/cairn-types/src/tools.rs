//! `cairn:tools/mcp@0.1.0` on the host-call seam: MCP tool servers the host
//! runs (or reaches) for a session, configured in `cairn.toml`
//! (`[mcp.servers.NAME]`) and granted to workspaces by name. A call is
//! journaled as `host_call_started { capability: "tools", op, request }`:
//! op `list` (request `{}`, response a list of [`ToolInfo`]) or op `call`
//! (request a [`ToolCallRequest`], response a [`ToolResult`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The default time a session's MCP connections stay open with no call.
pub const DEFAULT_IDLE_MS: u64 = 300_000;
/// The default time one tool call may take.
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 120_000;

/// `[mcp]`: the tool servers and how long their connections stay warm.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// How long a session's connections stay open with no call, in
    /// milliseconds (default 300 000): across that session's runs, until
    /// this passes, the config changes or the session is deleted.
    #[serde(default = "default_idle_ms")]
    pub idle_ms: u64,
    /// How long one tool call may take, in milliseconds (default 120 000).
    #[serde(default = "default_call_timeout_ms")]
    pub call_timeout_ms: u64,
    /// The servers by name.
    #[serde(default)]
    pub servers: BTreeMap<String, McpServer>,
}

fn default_idle_ms() -> u64 {
    DEFAULT_IDLE_MS
}

fn default_call_timeout_ms() -> u64 {
    DEFAULT_CALL_TIMEOUT_MS
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            idle_ms: DEFAULT_IDLE_MS,
            call_timeout_ms: DEFAULT_CALL_TIMEOUT_MS,
            servers: BTreeMap::new(),
        }
    }
}

/// `[mcp.servers.NAME]`: one MCP server, started as a child process over
/// stdio (`command`) or reached over streamable HTTP (`url`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// The program and its arguments (stdio). `{artifacts}` in an argument
    /// names the run's `artifacts/` directory (the server is then started
    /// per generation, so it sees only that run's worktree).
    #[serde(default)]
    pub command: Vec<String>,
    /// The server's working directory (`{artifacts}` as above; default:
    /// the generation's directory).
    #[serde(default)]
    pub cwd: Option<String>,
    /// The child's environment (nothing else of the host's is passed but
    /// `PATH`); a value may be a template naming secrets:
    /// `"{{secret:github}}"`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The streamable HTTP endpoint (`https://…/mcp`, or `http://` on
    /// loopback).
    #[serde(default)]
    pub url: Option<String>,
    /// Headers sent to `url`; a value may name secrets:
    /// `"Bearer {{secret:github}}"`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Tools (glob patterns over their names: `delete_*`) a person approves
    /// before each call: the host asks the decision first and calls only
    /// when it is approved.
    #[serde(default)]
    pub approve: Vec<String>,
    /// Tools (glob patterns) that change nothing: a call the host died
    /// during is sent again on restore (others are answered `interrupted`).
    /// A tool the server annotates `readOnlyHint` is read-only too.
    #[serde(default)]
    pub read_only: Vec<String>,
}

impl McpServer {
    /// The secrets its env and headers name.
    pub fn secrets(&self) -> Vec<String> {
        let mut out = Vec::new();
        for value in self.env.values().chain(self.headers.values()) {
            out.extend(secret_names(value));
        }
        out.sort();
        out.dedup();
        out
    }

    /// Whether `tool` must be approved before each call.
    pub fn needs_approval(&self, tool: &str) -> bool {
        self.approve.iter().any(|p| glob_match(p, tool))
    }

    /// Whether `tool` is configured read-only.
    pub fn is_read_only(&self, tool: &str) -> bool {
        self.read_only.iter().any(|p| glob_match(p, tool))
    }
}

/// The secret names a `{{secret:NAME}}` template holds.
pub fn secret_names(template: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(at) = rest.find("{{secret:") {
        let after = &rest[at + "{{secret:".len()..];
        match after.find("}}") {
            Some(end) => {
                out.push(after[..end].trim().to_string());
                rest = &after[end + 2..];
            }
            None => break,
        }
    }
    out
}

/// Whether `name` matches `pattern`, where `*` matches any run of
/// characters and `?` one character.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matching with one backtrack point for the latest `*`.
    let (mut i, mut j) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    while i < p.len() && p[i] == '*' {
        i += 1;
    }
    i == p.len()
}

/// One tool of the session's servers, as `list` answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolInfo {
    /// The server (`[mcp.servers.NAME]`) it belongs to.
    pub server: String,
    /// The name to call it by (the server's own name, or
    /// `SERVER__NAME` when two granted servers offer the same name).
    pub name: String,
    /// What it does, for a model.
    pub description: String,
    /// Its arguments, a JSON Schema document.
    pub input_schema: serde_json::Value,
    /// It changes nothing (configured, or annotated by the server).
    pub read_only: bool,
    /// A person approves each call first.
    pub approve: bool,
}

/// A `call` as journaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCallRequest {
    /// The server.
    pub server: String,
    /// The tool's name on that server.
    pub tool: String,
    /// Its arguments (a JSON object).
    pub arguments: serde_json::Value,
    /// The tool changes nothing (as `list` said): a restore may send the
    /// call again when the host died during it.
    #[serde(default)]
    pub read_only: bool,
}

/// A tool's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolResult {
    /// The text parts of its content, joined by newlines.
    pub text: String,
    /// Its whole content (MCP content blocks), a JSON array.
    pub content: serde_json::Value,
    /// Its structured result, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<serde_json::Value>,
    /// The tool reported a failure (the text says what): the model should
    /// see it and may try otherwise.
    pub is_error: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_spin_and_shells_write_them() {
        assert!(glob_match("delete_*", "delete_file"));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("write_?", "write_a"));
        assert!(!glob_match("write_?", "write_ab"));
        assert!(!glob_match("delete_*", "read_file"));
        assert!(glob_match("*_file", "read_file"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        assert!(glob_match("", ""));
        assert!(!glob_match("", "x"));
    }

    #[test]
    fn secret_templates_name_their_secrets() {
        assert_eq!(
            secret_names("Bearer {{secret:github}} and {{secret: other }}"),
            vec!["github".to_string(), "other".to_string()]
        );
        assert!(secret_names("plain").is_empty());
        assert!(secret_names("{{secret:broken").is_empty());
    }
}
