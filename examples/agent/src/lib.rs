//! A ReAct-style agent: it asks the host's model (`cairn:model`) what to do,
//! runs the tools the model calls — its own, inside its `artifacts/`
//! directory, and those of the MCP servers its workspace is granted
//! (`cairn:tools`) — asks a person before anything dangerous, feeds the
//! results back, and streams the final answer. Every model answer and tool
//! result is journaled by the host, so a replay of this run calls no model
//! and no tool server.

use cairn_guest::model::{self, Message, Request, Tool, ToolCall};
use cairn_guest::tools;
use cairn_guest::{Approval, Controller, Error, Outcome, Role, Start};
use serde_json::json;

struct Agent;

/// The model is asked at most this many times per run.
const MAX_STEPS: usize = 12;

const SYSTEM: &str = "You are an agent working in a small sandbox directory. \
Use the tools to list, read, write and delete files there; answer briefly \
once the task is done.";

fn tools() -> Vec<Tool> {
    let path =
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]});
    vec![
        Tool::new(
            "list_files",
            "List the files in the sandbox.",
            json!({"type": "object", "properties": {}}),
        ),
        Tool::new("read_file", "Read a file.", path.clone()),
        Tool::new(
            "write_file",
            "Write (replace) a file.",
            json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]}),
        ),
        Tool::new(
            "delete_file",
            "Delete a file (a person approves it first).",
            path,
        ),
    ]
}

/// Tools that need a person's approval before they run.
fn dangerous(name: &str) -> bool {
    name == "delete_file"
}

/// Run one tool in the sandbox; its result (or what went wrong) as text.
fn run_tool(call: &ToolCall) -> Result<String, Error> {
    let args = call.args();
    let path = args["path"].as_str().unwrap_or_default();
    if dangerous(&call.name) {
        let prompt = format!("{} {path:?}?", call.name);
        if let Approval::Denied(reason) = cairn_guest::request_approval(&prompt) {
            return Ok(format!("a person refused: {}", reason.unwrap_or_default()));
        }
    }
    let result = match call.name.as_str() {
        "list_files" => std::fs::read_dir(".").map(|dir| {
            let mut names: Vec<String> = dir
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names.join("\n")
        }),
        "read_file" => std::fs::read_to_string(path),
        "write_file" => std::fs::write(path, args["content"].as_str().unwrap_or_default())
            .map(|_| "written".into()),
        "delete_file" => std::fs::remove_file(path).map(|_| "deleted".into()),
        other => return Ok(format!("there is no tool {other:?}")),
    };
    Ok(result.unwrap_or_else(|e| format!("error: {e}")))
}

impl Controller for Agent {
    fn run(start: Start) -> Result<Outcome, Error> {
        let mut messages = vec![Message::system(SYSTEM)];
        for turn in cairn_guest::turns(16) {
            // A tool result reads as the user's words: the model saw no
            // call of its own it answers.
            messages.push(match turn.role {
                Role::User | Role::Tool => Message::user(turn.text),
                Role::Assistant => Message::assistant(turn.text),
                Role::System => Message::system(turn.text),
            });
        }
        messages.push(Message::user(start.prompt));
        // The sandbox's own tools, then those of the granted MCP servers
        // (a name the sandbox already has stays the sandbox's).
        let mut offered = tools();
        let served: Vec<tools::ToolInfo> = tools::available()?
            .into_iter()
            .filter(|t| !offered.iter().any(|o| o.name == t.name))
            .collect();
        offered.extend(tools::for_model(&served));
        for _ in 0..MAX_STEPS {
            let reply = model::chat(
                &Request::new(messages.clone())
                    .tools(offered.clone())
                    .stream(true),
            )?;
            if reply.tool_calls.is_empty() {
                return Ok(Outcome::Finished(reply.text));
            }
            messages.push(Message::from_response(&reply));
            for call in &reply.tool_calls {
                messages.push(if served.iter().any(|t| t.name == call.name) {
                    tools::answer(call)?
                } else {
                    Message::tool(&call.id, run_tool(call)?)
                });
            }
        }
        Err(Error::new(
            "too_many_steps",
            format!("no answer after {MAX_STEPS} model calls"),
        ))
    }
}

cairn_guest::controller!(Agent);
