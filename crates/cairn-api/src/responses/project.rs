//! A response projected from its run's journal entries: the same builder
//! makes the streamed events as entries arrive, the response a call
//! returns, and the one `GET /v1/responses/{id}` rebuilds — a response is
//! not stored apart from the journal.
//!
//! A response is a run's entries after a seq (where the call that made it
//! began) up to the run's end or to a wait on the client's tool results
//! (its output then ends with the `function_call` items the client runs).

use super::ResponseId;
use cairn_runtime::SessionEvent;
use cairn_runtime::ids::DecisionId;
use cairn_runtime::journal::event::{AgentEvent, LifecycleEvent, Payload, RequestKind, Usage};
use serde_json::{Value, json};
use std::collections::HashMap;

/// How a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The run finished.
    Completed,
    /// The run waits on the client's tool results (the output ends with
    /// the calls).
    ClientWait,
    /// The run waits on a decision of another kind (`cairn_decision`).
    Decision,
    /// The run failed.
    Failed,
    /// The run was cancelled.
    Cancelled,
}

/// What one entry made of the response.
#[derive(Default)]
pub struct Fed {
    /// Streamed events (each with its `type`).
    pub events: Vec<Value>,
    /// A held result that answers a wait now.
    pub answer: Option<(DecisionId, String)>,
    /// The response ended here.
    pub end: Option<End>,
}

/// One response, built entry by entry.
pub struct Builder {
    id: ResponseId,
    model: String,
    created_at: u64,
    /// The function tools the client offered (chat form), echoed back.
    tools: Value,
    offered: Vec<String>,
    /// Results the client sent for calls the run has not waited on yet.
    pub held: HashMap<String, String>,
    /// Whether the run is followed live (a wait on a call emitted before
    /// this response then ends it; rebuilt, it was answered by held results).
    live: bool,
    output: Vec<Value>,
    /// The open message item: its index in `output`.
    open: Option<usize>,
    /// Client calls emitted here and not yet waited on.
    unlinked: Vec<String>,
    emitted: Vec<String>,
    streamed_text: bool,
    status: &'static str,
    error: Option<Value>,
    usage: Option<Usage>,
    decision: Option<Value>,
    seq: u64,
}

fn now_secs() -> u64 {
    cairn_runtime::fsutil::now_ms() / 1000
}

impl Builder {
    pub fn new(id: ResponseId, model: String, tools: Value, live: bool) -> Self {
        let offered = tools
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        Builder {
            id,
            model,
            created_at: now_secs(),
            tools,
            offered,
            held: HashMap::new(),
            live,
            output: Vec::new(),
            open: None,
            unlinked: Vec::new(),
            emitted: Vec::new(),
            streamed_text: false,
            status: "in_progress",
            error: None,
            usage: None,
            decision: None,
            seq: 0,
        }
    }

    /// Its id.
    pub fn id(&self) -> ResponseId {
        self.id
    }

    /// Its run.
    pub fn run(&self) -> cairn_runtime::ids::RunId {
        self.id.run
    }

    /// The response as it stands.
    pub fn response(&self) -> Value {
        let text: String = self
            .output
            .iter()
            .filter(|i| i["type"] == "message")
            .filter_map(|i| i["content"][0]["text"].as_str())
            .collect();
        let mut r = json!({
            "id": self.id.to_string(),
            "object": "response",
            "created_at": self.created_at,
            "status": self.status,
            "model": self.model,
            "output": self.output,
            "output_text": text,
            "parallel_tool_calls": true,
            "tool_choice": "auto",
            "tools": self.tools,
            "error": self.error,
            "incomplete_details": null,
            "instructions": null,
            "metadata": {},
            "previous_response_id": null,
            "store": true,
            "text": { "format": { "type": "text" } },
            "truncation": "disabled",
            "usage": self.usage.map(usage_of),
        });
        if self.status == "completed" {
            r["completed_at"] = json!(now_secs());
        }
        if let Some(d) = &self.decision {
            if self.status == "incomplete" {
                r["incomplete_details"] = json!({ "reason": "decision_requested" });
            }
            r["cairn_decision"] = d.clone();
        }
        r
    }

    fn event(&mut self, kind: &str, mut body: Value) -> Value {
        self.seq += 1;
        body["type"] = json!(kind);
        body["sequence_number"] = json!(self.seq);
        body
    }

    /// The events a stream opens with.
    pub fn opening(&mut self) -> Vec<Value> {
        let r = self.response();
        vec![
            self.event("response.created", json!({ "response": r })),
            self.event("response.in_progress", json!({ "response": r })),
        ]
    }

    fn item_id(&self, kind: &str, e: &SessionEvent) -> String {
        format!(
            "{kind}_{}_{}",
            self.id.run.to_string().replace('-', ""),
            e.seq.0
        )
    }

    fn open_message(&mut self, e: &SessionEvent, out: &mut Vec<Value>) -> usize {
        if let Some(i) = self.open {
            return i;
        }
        let item = json!({
            "id": self.item_id("msg", e),
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        });
        let index = self.output.len();
        self.output.push(item.clone());
        self.open = Some(index);
        let id = item["id"].clone();
        out.push(self.event(
            "response.output_item.added",
            json!({ "output_index": index, "item": item }),
        ));
        let part = json!({ "type": "output_text", "text": "", "annotations": [] });
        self.output[index]["content"] = json!([part.clone()]);
        out.push(self.event(
            "response.content_part.added",
            json!({ "item_id": id, "output_index": index, "content_index": 0, "part": part }),
        ));
        index
    }

    fn close_message(&mut self, out: &mut Vec<Value>) {
        let Some(index) = self.open.take() else {
            return;
        };
        self.output[index]["status"] = json!("completed");
        let item = self.output[index].clone();
        let id = item["id"].clone();
        let part = item["content"][0].clone();
        out.push(self.event(
            "response.output_text.done",
            json!({ "item_id": id, "output_index": index, "content_index": 0,
                    "text": part["text"], "logprobs": [] }),
        ));
        out.push(self.event(
            "response.content_part.done",
            json!({ "item_id": id, "output_index": index, "content_index": 0, "part": part }),
        ));
        out.push(self.event(
            "response.output_item.done",
            json!({ "output_index": index, "item": item }),
        ));
    }

    fn text(&mut self, e: &SessionEvent, delta: &str, out: &mut Vec<Value>) {
        if delta.is_empty() {
            return;
        }
        let index = self.open_message(e, out);
        // Appended in place: a long answer is not copied at every delta.
        if let Value::String(text) = &mut self.output[index]["content"][0]["text"] {
            text.push_str(delta);
        }
        let id = self.output[index]["id"].clone();
        out.push(self.event(
            "response.output_text.delta",
            json!({ "item_id": id, "output_index": index, "content_index": 0,
                    "delta": delta, "logprobs": [] }),
        ));
    }

    fn call(
        &mut self,
        e: &SessionEvent,
        id: &str,
        name: &str,
        arguments: &str,
        out: &mut Vec<Value>,
    ) {
        self.close_message(out);
        let item_id = self.item_id("fc", e);
        let index = self.output.len();
        let mut item = json!({
            "id": item_id, "type": "function_call", "status": "in_progress",
            "call_id": id, "name": name, "arguments": "",
        });
        out.push(self.event(
            "response.output_item.added",
            json!({ "output_index": index, "item": item }),
        ));
        out.push(self.event(
            "response.function_call_arguments.delta",
            json!({ "item_id": item_id, "output_index": index, "delta": arguments }),
        ));
        out.push(self.event(
            "response.function_call_arguments.done",
            json!({ "item_id": item_id, "output_index": index, "name": name, "arguments": arguments }),
        ));
        item["arguments"] = json!(arguments);
        item["status"] = json!("completed");
        self.output.push(item.clone());
        out.push(self.event(
            "response.output_item.done",
            json!({ "output_index": index, "item": item }),
        ));
        self.unlinked.push(id.to_string());
        self.emitted.push(id.to_string());
    }

    fn finish(&mut self, status: &'static str, e: &SessionEvent, out: &mut Vec<Value>) {
        self.close_message(out);
        self.status = status;
        self.usage = Some(e.facts.as_ref().map(|f| f.usage).unwrap_or_default());
        let kind = match status {
            "completed" => "response.completed",
            "incomplete" => "response.incomplete",
            _ => "response.failed",
        };
        let r = self.response();
        out.push(self.event(kind, json!({ "response": r })));
    }

    /// Feed one entry of the response's run.
    pub fn feed(&mut self, e: &SessionEvent) -> Fed {
        let mut fed = Fed::default();
        let out = &mut fed.events;
        match &e.payload {
            Payload::Agent(AgentEvent::TextDelta { text, .. }) => {
                self.streamed_text = true;
                self.text(e, text, out);
            }
            Payload::Agent(AgentEvent::ToolCall {
                id,
                name,
                arguments,
                by: None,
            }) if self.offered.iter().any(|o| o == name) => {
                self.call(e, id, name, &arguments.to_string(), out);
            }
            Payload::Lifecycle(LifecycleEvent::DecisionRequested {
                decision_id,
                request_kind,
                prompt,
                details,
                ..
            }) => {
                let call = match request_kind {
                    RequestKind::ToolResult => {
                        crate::tool_results::call_of(details, &mut self.unlinked)
                    }
                    _ => None,
                };
                if let Some(call) = call {
                    if let Some(content) = self.held.remove(&call) {
                        fed.answer = Some((decision_id.clone(), content));
                        return fed;
                    }
                    if self.live || self.emitted.contains(&call) {
                        self.finish("completed", e, out);
                        fed.end = Some(End::ClientWait);
                    }
                    return fed;
                }
                self.decision = Some(json!({
                    "decision_id": decision_id,
                    "run_id": self.id.run,
                    "request_kind": request_kind,
                    "prompt": prompt,
                    "details": details,
                    "answer_url": format!("/v1/decisions/{decision_id}"),
                }));
                // A call ends on it (the run handed over to wait); rebuilt,
                // the response goes on once it is answered.
                if self.live {
                    self.finish("incomplete", e, out);
                    fed.end = Some(End::Decision);
                }
            }
            Payload::Lifecycle(LifecycleEvent::DecisionRecorded { decision_id, .. })
                if self
                    .decision
                    .as_ref()
                    .is_some_and(|d| d["decision_id"] == json!(decision_id)) =>
            {
                self.decision = None;
            }
            Payload::Lifecycle(end) if end.is_terminal() => match end {
                LifecycleEvent::Finished { text, .. } => {
                    if !self.streamed_text {
                        self.text(e, text, out);
                    }
                    self.finish("completed", e, out);
                    fed.end = Some(End::Completed);
                }
                LifecycleEvent::Cancelled { message, .. } => {
                    self.error = Some(json!({ "code": "cancelled", "message": message }));
                    self.finish("cancelled", e, out);
                    fed.end = Some(End::Cancelled);
                }
                LifecycleEvent::Failed { error } => {
                    self.error = Some(json!({
                        "code": error.code.to_string(), "message": error.message,
                    }));
                    self.finish("failed", e, out);
                    fed.end = Some(End::Failed);
                }
                _ => {
                    self.finish("incomplete", e, out);
                    fed.end = Some(End::Completed);
                }
            },
            _ => {}
        }
        fed
    }
}

/// The Responses API's usage: model tokens when the run called a model,
/// else one output token per event the controller emitted.
fn usage_of(u: Usage) -> Value {
    let output = match u.output_tokens {
        0 => u.events,
        n => n,
    };
    json!({
        "input_tokens": u.input_tokens,
        "input_tokens_details": { "cached_tokens": 0 },
        "output_tokens": output,
        "output_tokens_details": { "reasoning_tokens": 0 },
        "total_tokens": u.input_tokens + output,
    })
}
