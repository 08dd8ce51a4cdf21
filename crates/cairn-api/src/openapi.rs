//! `GET /openapi.json`: OpenAPI 3.1, built from the handlers' own request
//! and response types (their JSON Schemas come from the types, never by
//! hand). A test checks every operation here is routed.

use super::chat::ChatRequest;
use super::error::ErrorBody;
use super::responses::ResponsesRequest;
use super::wire::*;
use axum::Json;
use cairn_runtime::runtime::{PendingDecision, RunSummary, SessionSummary};
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Value, json};

struct Doc {
    generator: SchemaGenerator,
    paths: serde_json::Map<String, Value>,
}

enum Body {
    None,
    Json(Value, bool),
    Wasm,
}

enum Reply {
    Json(Value),
    Text,
    Stream,
    Empty,
    JsonOrStream(Value),
}

struct Op<'a> {
    method: &'a str,
    path: &'a str,
    summary: &'a str,
    query: Vec<(&'a str, Value, &'a str)>,
    body: Body,
    ok: (u16, Reply),
    errors: &'a [u16],
}

impl Doc {
    fn schema<T: JsonSchema>(&mut self) -> Value {
        serde_json::to_value(self.generator.subschema_for::<T>()).expect("schemas serialize")
    }

    fn add(&mut self, op: Op<'_>) {
        let mut params: Vec<Value> = Vec::new();
        for segment in op.path.split('/') {
            if let Some(name) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                params.push(json!({
                    "name": name, "in": "path", "required": true,
                    "description": "an id: a session id (printable text), or a run or decision UUID",
                    "schema": { "type": "string", "minLength": 1, "maxLength": 200 }
                }));
            }
        }
        for (name, schema, description) in op.query {
            params.push(json!({ "name": name, "in": "query", "required": false, "schema": schema, "description": description }));
        }
        if matches!(op.ok.1, Reply::Stream) {
            params.push(json!({
                "name": "Last-Event-ID", "in": "header", "required": false,
                "description": "resume after this seq (wins over `after`)",
                "schema": { "type": "string", "pattern": "^[0-9]+$" }
            }));
        }
        let mut operation = json!({
            "summary": op.summary,
            "operationId": operation_id(op.method, op.path),
            "tags": [tag(op.path)],
            "parameters": params,
        });
        // Every /v1 route takes a bearer token (when the server has
        // tokens); the root routes are open.
        let guarded = op.path.starts_with("/v1/");
        operation["security"] = match guarded {
            true => json!([{ "bearer": [] }]),
            false => json!([]),
        };
        match op.body {
            Body::None => {}
            Body::Json(schema, required) => {
                operation["requestBody"] = json!({ "required": required, "content": { "application/json": { "schema": schema } } });
            }
            Body::Wasm => {
                operation["requestBody"] = json!({ "required": true, "description": "the component bytes (any content type; application/wasm or application/octet-stream)", "content": { "application/octet-stream": { "schema": { "type": "string", "format": "binary" } } } });
            }
        }
        let mut responses = serde_json::Map::new();
        let ok = match op.ok.1 {
            Reply::Json(schema) => {
                json!({ "description": "success", "content": { "application/json": { "schema": schema } } })
            }
            Reply::Text => {
                json!({ "description": "success", "content": { "text/plain": { "schema": { "type": "string" } } } })
            }
            Reply::Stream => {
                json!({ "description": "Server-Sent Events: one SessionEvent JSON per data line, id = seq; `event: gap` with {\"resumed_at\"}", "content": { "text/event-stream": { "schema": { "type": "string" } } } })
            }
            Reply::Empty => json!({ "description": "done" }),
            Reply::JsonOrStream(schema) => {
                json!({ "description": "JSON (a chat.completion, a response), or with stream=true Server-Sent Events (chat.completion.chunk events then [DONE]; the Responses API's typed events)", "content": { "application/json": { "schema": schema }, "text/event-stream": { "schema": { "type": "string" } } } })
            }
        };
        responses.insert(op.ok.0.to_string(), ok);
        let error = self.schema::<ErrorBody>();
        let unauthorized: &[u16] = if guarded { &[401] } else { &[] };
        for status in op.errors.iter().chain(unauthorized) {
            responses.insert(
                status.to_string(),
                json!({ "description": "an error with a stable code", "content": { "application/json": { "schema": error } } }),
            );
        }
        operation["responses"] = Value::Object(responses);
        let entry = self
            .paths
            .entry(op.path.to_string())
            .or_insert_with(|| json!({}));
        entry[op.method] = operation;
    }
}

/// The OpenAPI document.
pub fn document() -> Value {
    let settings = SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = "#/components/schemas/".into());
    let mut d = Doc {
        generator: settings.into_generator(),
        paths: serde_json::Map::new(),
    };
    let uint = json!({ "type": "integer", "minimum": 0 });
    let boolean = json!({ "type": "boolean" });
    let string = json!({ "type": "string" });
    let page_query = || {
        vec![
            (
                "limit",
                json!({ "type": "integer", "minimum": 1, "maximum": 1000 }),
                "rows per page (default 1000)",
            ),
            (
                "cursor",
                json!({ "type": "string" }),
                "the x-next-cursor of the page before",
            ),
        ]
    };
    d.add(Op {
        method: "get",
        path: "/healthz",
        summary: "liveness probe (503 lost_authority once the process lost the home's lock)",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Text),
        errors: &[503],
    });
    d.add(Op {
        method: "get",
        path: "/metrics",
        summary: "Prometheus metrics",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Text),
        errors: &[],
    });
    d.add(Op {
        method: "get",
        path: "/openapi.json",
        summary: "this document",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Json(json!({ "type": "object" }))),
        errors: &[],
    });
    let s = d.schema::<CreateSession>();
    let r = d.schema::<CreatedSession>();
    d.add(Op {
        method: "post",
        path: "/v1/sessions",
        summary: "persist a new session now",
        query: vec![],
        body: Body::Json(s, false),
        ok: (201, Reply::Json(r)),
        errors: &[400, 409, 413],
    });
    let r = d.schema::<Vec<SessionSummary>>();
    d.add(Op {
        method: "get",
        path: "/v1/sessions",
        summary: "list sessions, oldest first; a damaged one has state `corrupt` and its reason; the next page's cursor is the `x-next-cursor` header",
        query: page_query(),
        body: Body::None,
        ok: (200, Reply::Json(r)),
        errors: &[],
    });
    let r = d.schema::<SessionSummary>();
    d.add(Op {
        method: "get",
        path: "/v1/sessions/{id}",
        summary: "a session's summary (state, observers, last run)",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Json(r)),
        errors: &[400, 404],
    });
    d.add(Op {
        method: "delete",
        path: "/v1/sessions/{id}",
        summary: "delete a session: stop its run, remove it",
        query: vec![],
        body: Body::None,
        ok: (204, Reply::Empty),
        errors: &[400, 404],
    });
    let events_query = || {
        vec![
            (
                "after",
                json!({ "type": "integer", "minimum": 0 }),
                "deliver entries after this seq",
            ),
            (
                "claim",
                json!({ "type": "boolean" }),
                "attach as the claimant",
            ),
            (
                "presence",
                json!({ "type": "boolean" }),
                "a human is present",
            ),
            (
                "takeover",
                json!({ "type": "boolean" }),
                "with claim=true: displace the current claimant (it gets observer_detached, displaced) instead of 409",
            ),
        ]
    };
    d.add(Op {
        method: "get",
        path: "/v1/sessions/{id}/events",
        summary: "follow a session (SSE); the connection is the observer",
        query: events_query(),
        body: Body::None,
        ok: (200, Reply::Stream),
        errors: &[400, 404, 409, 429],
    });
    let b = d.schema::<crate::leases::LeaseRequest>();
    let r = d.schema::<cairn_runtime::runtime::Leased>();
    d.add(Op {
        method: "put",
        path: "/v1/sessions/{id}/observers/{name}",
        summary: "lease (or renew) a collecting observer across a process boundary, served where the session is held: counted (a present one routes decisions to the conversation) until released, or detached `expired` when its TTL runs out unrenewed; a stream served from another instance's session holds one",
        query: vec![],
        body: Body::Json(b, false),
        ok: (200, Reply::Json(r)),
        errors: &[400, 404],
    });
    d.add(Op {
        method: "delete",
        path: "/v1/sessions/{id}/observers/{name}",
        summary: "release an observer lease (`observer_detached`, released)",
        query: vec![],
        body: Body::None,
        ok: (204, Reply::Empty),
        errors: &[400, 404],
    });
    let r = d.schema::<cairn_runtime::runtime::SegmentStarted>();
    d.add(Op {
        method: "post",
        path: "/v1/sessions/{id}/compact",
        summary: "compact: a new segment whose first entry summarises the history",
        query: vec![],
        body: Body::None,
        ok: (201, Reply::Json(r)),
        errors: &[400, 404, 409],
    });
    let b = d.schema::<BranchRequest>();
    let r = d.schema::<cairn_runtime::runtime::SegmentStarted>();
    d.add(Op {
        method: "post",
        path: "/v1/sessions/{id}/branch",
        summary: "branch: a sibling segment carrying the history up to a seq",
        query: vec![],
        body: Body::Json(b, true),
        ok: (201, Reply::Json(r)),
        errors: &[400, 404, 409],
    });
    let b = d.schema::<ForkRequest>();
    let r = d.schema::<cairn_runtime::runtime::Forked>();
    d.add(Op {
        method: "post",
        path: "/v1/sessions/{id}/fork",
        summary: "fork before a user message into a new worker and session",
        query: vec![],
        body: Body::Json(b, true),
        ok: (201, Reply::Json(r)),
        errors: &[400, 404, 409],
    });
    let b = d.schema::<crate::wire::UpdateRequest>();
    let r = d.schema::<cairn_runtime::runtime::update::UpdateReport>();
    d.add(Op {
        method: "post",
        path: "/v1/sessions/{id}/update",
        summary: "move the session to another component: every ended run shadow-replayed against it first (mode replay), or unchecked (next_run); 409 names the first divergence; 202 when a run is live (the update is taken at the next run's start, shown as the session's pending_update)",
        query: vec![],
        body: Body::Json(b, true),
        ok: (200, Reply::Json(r.clone())),
        errors: &[400, 404, 409],
    });
    d.paths["/v1/sessions/{id}/update"]["post"]["responses"]["202"] = json!({
        "description": "a run is live: the update waits for the next run's start (`pending: true`)",
        "content": { "application/json": { "schema": r } }
    });
    let b = d.schema::<crate::wire::BulkUpdateRequest>();
    let r = d.schema::<cairn_runtime::runtime::update_bulk::BulkUpdate>();
    d.add(Op {
        method: "post",
        path: "/v1/components/{id}/update",
        summary: "move every session of the workspace bound to this component to `to` where shadow replay finds it compatible (each session compatible, diverges or failed); the report is kept",
        query: vec![],
        body: Body::Json(b, true),
        ok: (200, Reply::Json(r.clone())),
        errors: &[400, 404],
    });
    d.add(Op {
        method: "get",
        path: "/v1/updates/{id}",
        summary: "a bulk update's report",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Json(r)),
        errors: &[404],
    });
    let b = d.schema::<StartRunRequest>();
    let r = d.schema::<StartedRun>();
    d.add(Op {
        method: "post",
        path: "/v1/runs",
        summary: "start a run (headless: liveness continue)",
        query: vec![],
        body: Body::Json(b, true),
        ok: (202, Reply::Json(r)),
        errors: &[400, 404, 409, 413],
    });
    let r = d.schema::<Vec<RunSummary>>();
    d.add(Op {
        method: "get",
        path: "/v1/runs",
        summary: "list runs, newest first; the next page's cursor is the `x-next-cursor` header",
        query: {
            let mut q = page_query();
            q.push((
                "session",
                string.clone(),
                "only this session's runs (all, oldest first)",
            ));
            q
        },
        body: Body::None,
        ok: (200, Reply::Json(r)),
        errors: &[],
    });
    let r = d.schema::<RunSummary>();
    d.add(Op {
        method: "get",
        path: "/v1/runs/{id}",
        summary: "a run's summary and facts",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Json(r)),
        errors: &[400, 404],
    });
    let r = d.schema::<CancelAccepted>();
    d.add(Op {
        method: "post",
        path: "/v1/runs/{id}/cancel",
        summary: "cancel a live run",
        query: vec![],
        body: Body::None,
        ok: (202, Reply::Json(r)),
        errors: &[400, 404, 409],
    });
    let b = d.schema::<ResumeRequest>();
    let r = d.schema::<StartedRun>();
    d.add(Op {
        method: "post",
        path: "/v1/runs/{id}/resume",
        summary: "start a new run from a parked run's checkpoint",
        query: vec![],
        body: Body::Json(b, false),
        ok: (202, Reply::Json(r)),
        errors: &[400, 404, 409],
    });
    d.add(Op {
        method: "get",
        path: "/v1/runs/{id}/events",
        summary: "follow one run (SSE); ends after its terminal event; 204 for a reconnect after it",
        query: events_query(),
        body: Body::None,
        ok: (200, Reply::Stream),
        errors: &[400, 404, 409, 429],
    });
    d.paths["/v1/runs/{id}/events"]["get"]["responses"]["204"] = json!({ "description": "the run ended at or before `after` / `Last-Event-ID`: nothing more will come" });
    let r = d.schema::<Vec<PendingDecision>>();
    d.add(Op {
        method: "get",
        path: "/v1/decisions",
        summary: "pending decisions",
        query: vec![("session", string.clone(), "only this session's")],
        body: Body::None,
        ok: (200, Reply::Json(r)),
        errors: &[400],
    });
    for path in ["/v1/decisions/{id}", "/v1/approvals/{id}"] {
        let b = d.schema::<DecideRequest>();
        let r = d.schema::<Decided>();
        d.add(Op {
            method: "post",
            path,
            summary: "answer a decision (journaled before the controller sees it)",
            query: vec![],
            body: Body::Json(b, true),
            ok: (200, Reply::Json(r)),
            errors: &[400, 404, 409, 413],
        });
    }
    let b = d.schema::<ChatRequest>();
    d.add(Op {
        method: "post",
        path: "/v1/chat/completions",
        summary: "OpenAI-compatible chat: a run of the component `model` names",
        query: vec![],
        body: Body::Json(b, true),
        ok: (200, Reply::JsonOrStream(json!({ "type": "object" }))),
        errors: &[400, 404, 409, 413, 424],
    });
    let b = d.schema::<ResponsesRequest>();
    d.add(Op {
        method: "post",
        path: "/v1/responses",
        summary: "OpenAI Responses API: a run of the component `model` names (background: a headless run)",
        query: vec![],
        body: Body::Json(b, true),
        ok: (200, Reply::JsonOrStream(json!({ "type": "object" }))),
        errors: &[400, 404, 409, 413, 424],
    });
    d.add(Op {
        method: "get",
        path: "/v1/responses/{id}",
        summary: "a response, rebuilt from its run's journal entries",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Json(json!({ "type": "object" }))),
        errors: &[404],
    });
    d.add(Op {
        method: "post",
        path: "/v1/responses/{id}/cancel",
        summary: "cancel a response's live run; the response as it ended (an ended one as it is)",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Json(json!({ "type": "object" }))),
        errors: &[404],
    });
    d.add(Op {
        method: "get",
        path: "/.well-known/agent-card.json",
        summary: "A2A: the host's default agent's card ([a2a] default_agent)",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Json(json!({ "type": "object" }))),
        errors: &[404],
    });
    d.add(Op {
        method: "get",
        path: "/v1/a2a",
        summary: "A2A: the cards of every agent (component) the caller may use",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Json(json!({ "type": "object" }))),
        errors: &[],
    });
    d.add(Op {
        method: "get",
        path: "/v1/a2a/{id}/.well-known/agent-card.json",
        summary: "A2A: an agent's card; {id} is a built-in example name or sha256:<hex>",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Json(json!({ "type": "object" }))),
        errors: &[404],
    });
    d.add(Op {
        method: "post",
        path: "/v1/a2a/{id}",
        summary: "A2A 1.0 JSON-RPC: SendMessage, SendStreamingMessage (SSE), GetTask, ListTasks, CancelTask, SubscribeToTask (SSE); errors are JSON-RPC errors with A2A's codes",
        query: vec![],
        body: Body::Json(json!({ "type": "object", "required": ["jsonrpc", "method"], "properties": { "jsonrpc": { "const": "2.0" }, "id": {}, "method": { "type": "string" }, "params": { "type": "object" } } }), true),
        ok: (200, Reply::JsonOrStream(json!({ "type": "object" }))),
        errors: &[404],
    });
    let b = d.schema::<super::queue::AddCard>();
    let r = d.schema::<cairn_orchestration::Row>();
    d.add(Op {
        method: "post",
        path: "/v1/queue",
        summary: "queue a card (or a higher round of one, which supersedes its row)",
        query: vec![],
        body: Body::Json(b, true),
        ok: (201, Reply::Json(r.clone())),
        errors: &[400, 404, 409],
    });
    let rows = d.schema::<Vec<cairn_orchestration::Row>>();
    d.add(Op {
        method: "get",
        path: "/v1/queue",
        summary: "the workspace's rows",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Json(rows)),
        errors: &[],
    });
    let b = d.schema::<super::queue::AnswerCard>();
    d.add(Op {
        method: "post",
        path: "/v1/queue/{id}/answer",
        summary: "answer an awaiting card: its pending decision, or its question ({id} is the card)",
        query: vec![],
        body: Body::Json(b, true),
        ok: (200, Reply::Json(r.clone())),
        errors: &[400, 404, 409],
    });
    let b = d.schema::<super::queue::ReworkCard>();
    d.add(Op {
        method: "post",
        path: "/v1/queue/{id}/rework",
        summary: "send an ended card back to its worker with a reason ({id} is the card)",
        query: vec![],
        body: Body::Json(b, true),
        ok: (200, Reply::Json(r)),
        errors: &[400, 404, 409],
    });
    d.add(Op {
        method: "get",
        path: "/v1/doctor",
        summary: "what in the served home needs a human (the `cairn doctor --json` report)",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Json(json!({ "type": "object" }))),
        errors: &[],
    });
    d.add(Op {
        method: "post",
        path: "/v1/sessions/{id}/prune",
        summary: "prune a child: stop its run, end its loan, mark it pruned in its parent",
        query: vec![],
        body: Body::None,
        ok: (204, Reply::Empty),
        errors: &[400, 404],
    });
    d.add(Op {
        method: "get",
        path: "/v1/components/{id}",
        summary: "a component's bytes (application/wasm): a built-in's name or digest, or an upload of the caller's workspace",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Text),
        errors: &[404],
    });
    d.add(Op {
        method: "get",
        path: "/v1/sessions/{id}/worktrees/{digest}",
        summary: "a worktree snapshot the session's journal names (worktree_recorded, a workers answer's snapshot), packed (application/octet-stream, `cairn-worktree 1`): what the viewer lays out to replay a run",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Text),
        errors: &[400, 404],
    });
    d.add(Op {
        method: "get",
        path: "/v1/runs/{id}/checkpoint",
        summary: "a parked run's checkpoint bytes (application/octet-stream)",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Text),
        errors: &[400, 404],
    });
    d.add(Op {
        method: "get",
        path: "/v1/sessions/{id}/journal",
        summary: "a page of the session's journal lines: {entries, last_seq, next_after?}",
        query: vec![
            ("after", uint.clone(), "entries after this seq (default 0)"),
            (
                "limit",
                json!({ "type": "integer", "minimum": 1, "maximum": 10000 }),
                "at most this many (default 1000)",
            ),
        ],
        body: Body::None,
        ok: (200, Reply::Json(json!({ "type": "object" }))),
        errors: &[400, 404, 409],
    });
    d.add(Op {
        method: "get",
        path: "/v1/models",
        summary: "OpenAI-compatible: the components the caller may use, as models",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Json(json!({ "type": "object" }))),
        errors: &[],
    });
    d.add(Op {
        method: "get",
        path: "/v1/models/{id}",
        summary: "OpenAI-compatible (`models.retrieve`): one component the caller may use, by the id /v1/models lists",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Json(json!({ "type": "object" }))),
        errors: &[404],
    });
    let r = d.schema::<ComponentInfo>();
    d.add(Op {
        method: "post",
        path: "/v1/components",
        summary: "upload a component (stored by digest, validated against the world)",
        query: vec![],
        body: Body::Wasm,
        ok: (201, Reply::Json(r.clone())),
        errors: &[400, 413],
    });
    // An upload whose compile outlasts the wait answers before it ends.
    d.paths["/v1/components"]["post"]["responses"]["202"] = json!({
        "description": "stored and checked; the compile goes on (`state: compiling`; `GET /v1/components` shows when it is `ready` or `failed`)",
        "content": { "application/json": { "schema": r } }
    });
    let r = d.schema::<Vec<ComponentInfo>>();
    d.add(Op {
        method: "get",
        path: "/v1/components",
        summary: "components this server can run",
        query: vec![],
        body: Body::None,
        ok: (200, Reply::Json(r)),
        errors: &[],
    });
    let _ = (uint, boolean);
    let mut schemas = Value::Object(d.generator.take_definitions(true));
    enums_as_enum(&mut schemas);
    json!({
        "openapi": "3.1.0",
        "info": { "title": "cairn", "version": env!("CARGO_PKG_VERSION"), "description": "A host runtime for agent controllers shipped as WebAssembly components." },
        "paths": Value::Object(d.paths),
        "components": {
            "schemas": schemas,
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer", "description": "a token from the server's cairn.toml ([workspaces.NAME] tokens, or [server] operator_tokens)" } },
        },
    })
}

/// A stable operationId from the method and path: `GET /v1/runs/{id}` is
/// `get_runs_by_id`.
fn operation_id(method: &str, path: &str) -> String {
    let mut id = method.to_string();
    for segment in path.split('/').filter(|s| !s.is_empty() && *s != "v1") {
        id.push('_');
        match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            Some(param) => {
                id.push_str("by_");
                id.push_str(param);
            }
            None => id.extend(
                segment
                    .trim_start_matches('.')
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }),
            ),
        }
    }
    id
}

/// The tag of a path: the resource it names.
fn tag(path: &str) -> &'static str {
    let first = path
        .trim_start_matches("/v1")
        .split('/')
        .nth(1)
        .unwrap_or("");
    match first {
        "sessions" => "sessions",
        "runs" => "runs",
        "decisions" | "approvals" => "decisions",
        "chat" | "models" | "responses" => "chat",
        "queue" | "doctor" => "queue",
        "a2a" | ".well-known" => "a2a",
        "components" => "components",
        "ui" => "viewer",
        _ => "meta",
    }
}

/// Unit-variant enums as `{"type": "string", "enum": [...]}`: schemars
/// writes them as a `oneOf` of documented consts, which generated clients
/// (openapi-python-client, openapi-generator) refuse. The variants' docs
/// move into the description.
fn enums_as_enum(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            let consts: Option<Vec<(String, Option<String>)>> =
                map.get("oneOf")
                    .and_then(Value::as_array)
                    .and_then(|items| {
                        items
                            .iter()
                            .map(|item| {
                                let text = item.get("const")?.as_str()?.to_string();
                                let only = item.as_object()?.keys().all(|k| {
                                    matches!(k.as_str(), "const" | "type" | "description")
                                });
                                only.then(|| {
                                    let doc = item.get("description").and_then(Value::as_str);
                                    (text, doc.map(str::to_string))
                                })
                            })
                            .collect()
                    });
            if let Some(consts) = consts.filter(|c| !c.is_empty()) {
                map.remove("oneOf");
                let mut description = map
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                for (value, doc) in &consts {
                    if let Some(doc) = doc {
                        description.push_str(&format!("\n- `{value}`: {doc}"));
                    }
                }
                map.insert("type".into(), json!("string"));
                map.insert(
                    "enum".into(),
                    consts.iter().map(|(v, _)| json!(v)).collect::<Value>(),
                );
                map.insert("description".into(), json!(description.trim_start()));
            }
            for value in map.values_mut() {
                enums_as_enum(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(enums_as_enum),
        _ => {}
    }
}

/// The operations, as (method, path), for tests.
pub fn operations() -> Vec<(String, String)> {
    let doc = document();
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            out.push((method.to_uppercase(), path.clone()));
        }
    }
    out
}

/// `GET /openapi.json`.
pub async fn serve() -> Json<Value> {
    Json(document())
}
