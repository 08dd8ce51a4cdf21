//! The A2A seam's edges over raw JSON-RPC: every malformed or refused call
//! gets A2A's error code (never a 5xx, never a hang), and a task of one
//! workspace does not exist for another. The official client's happy paths
//! are in `clients.rs`.

use super::api::server;
use serde_json::{Value, json};

async fn rpc(http: &reqwest::Client, url: &str, token: Option<&str>, body: Value) -> (u16, Value) {
    let mut req = http.post(url).json(&body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn call(method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params })
}

fn send(text: &str) -> Value {
    call(
        "SendMessage",
        json!({ "message": { "messageId": "m1", "role": "ROLE_USER", "parts": [{ "text": text }] } }),
    )
}

#[tokio::test]
async fn malformed_and_refused_calls_get_a2a_error_codes() {
    let s = server().await;
    let url = format!("{}/v1/a2a/echo", s.base);
    let raw = s
        .http
        .post(&url)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 200);
    let body: Value = raw.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32700, "{body}");
    assert_eq!(body["id"], Value::Null);

    let cases = [
        (json!({ "id": 1, "method": "GetTask" }), -32600),
        (call("NoSuchMethod", json!({})), -32601),
        (call("SendMessage", json!({})), -32602),
        (
            call(
                "SendMessage",
                json!({ "message": { "parts": [{ "url": "http://x" }] } }),
            ),
            -32602,
        ),
        (call("GetTask", json!({ "id": "not-a-task" })), -32001),
        (
            call(
                "GetTask",
                json!({ "id": "01a22ded-57ae-7468-b879-2f50533ac99f" }),
            ),
            -32001,
        ),
        (call("CancelTask", json!({})), -32602),
        (call("CreateTaskPushNotificationConfig", json!({})), -32003),
        (call("GetExtendedAgentCard", json!({})), -32007),
        (
            call("ListTasks", json!({ "status": "TASK_STATE_NOPE" })),
            -32602,
        ),
    ];
    for (body, code) in cases {
        let (status, reply) = rpc(&s.http, &url, None, body.clone()).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(reply["jsonrpc"], "2.0");
        assert_eq!(reply["error"]["code"], code, "{body} → {reply}");
        assert!(reply["error"]["message"].as_str().unwrap().len() > 5);
    }
    let old = s
        .http
        .post(&url)
        .header("A2A-Version", "0.3")
        .json(&call("GetTask", json!({ "id": "x" })))
        .send()
        .await
        .unwrap();
    let body: Value = old.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32009, "{body}");

    // An agent that is no component is no endpoint.
    let (status, body) = rpc(
        &s.http,
        &format!("{}/v1/a2a/nobody", s.base),
        None,
        send("x"),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found"))
    );

    // A task of one agent is not a task of another; a finished task takes
    // no more messages and cannot be canceled.
    let (_, done) = rpc(&s.http, &url, None, send("done soon")).await;
    let task = done["result"]["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        done["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let approval = format!("{}/v1/a2a/approval", s.base);
    let (_, other) = rpc(
        &s.http,
        &approval,
        None,
        call("GetTask", json!({ "id": task })),
    )
    .await;
    assert_eq!(other["error"]["code"], -32001, "{other}");
    let reply =
        json!({ "message": { "messageId": "m2", "taskId": task, "parts": [{ "text": "more" }] } });
    let (_, refused) = rpc(&s.http, &url, None, call("SendMessage", reply)).await;
    assert_eq!(refused["error"]["code"], -32004, "{refused}");
    let (_, cancel) = rpc(
        &s.http,
        &url,
        None,
        call("CancelTask", json!({ "id": task })),
    )
    .await;
    assert_eq!(cancel["error"]["code"], -32002, "{cancel}");
}

#[tokio::test]
async fn a_task_of_one_workspace_is_not_found_from_another() {
    let (base, _tmp) = super::workspaces::served_with(&format!(
        "[workspaces.a]\ntokens = [\"{A}\"]\n[workspaces.b]\ntokens = [\"{B}\"]\n"
    ))
    .await;
    const A: &str = "a2a-token-of-workspace-a-0123456789";
    const B: &str = "a2a-token-of-workspace-b-9876543210";
    let http = reqwest::Client::new();
    let url = format!("{base}/v1/a2a/echo");
    let (status, _) = rpc(&http, &url, None, send("no token")).await;
    assert_eq!(status, 401);
    // A built-in agent's card is public, as the default one is, and names
    // the scheme its calls need; an upload's card is its workspace's.
    let card = http
        .get(format!("{base}/v1/a2a/echo/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(card.status(), 200);
    let card: Value = card.json().await.unwrap();
    assert!(card["securitySchemes"]["bearer"].is_object(), "{card}");
    let upload = http
        .get(format!(
            "{base}/v1/a2a/sha256:{}/.well-known/agent-card.json",
            "0".repeat(64)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(upload.status(), 401);
    // The challenge names the scheme (RFC 6750).
    let r = http
        .post(&url)
        .json(&send("no token"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["www-authenticate"].to_str().unwrap(),
        "Bearer realm=\"cairn\""
    );
    let (_, mine) = rpc(&http, &url, Some(A), send("mine")).await;
    let task = mine["result"]["task"]["id"].as_str().unwrap().to_string();
    let context = mine["result"]["task"]["contextId"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, got) = rpc(&http, &url, Some(B), call("GetTask", json!({ "id": task }))).await;
    assert_eq!(got["error"]["code"], -32001, "{got}");
    let (_, listed) = rpc(&http, &url, Some(B), call("ListTasks", json!({}))).await;
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");
    let into = json!({ "message": { "messageId": "m3", "contextId": context, "parts": [{ "text": "hijack" }] } });
    // A's contextId, named by B, is a context of B's own (context ids are
    // per workspace): B's message starts a task there, A's context is
    // untouched.
    let (_, theirs) = rpc(&http, &url, Some(B), call("SendMessage", into)).await;
    assert_eq!(
        theirs["result"]["task"]["contextId"],
        context.as_str(),
        "{theirs}"
    );
    assert_ne!(theirs["result"]["task"]["id"], task.as_str(), "{theirs}");
    let (_, listed) = rpc(&http, &url, Some(A), call("ListTasks", json!({}))).await;
    assert_eq!(listed["result"]["tasks"][0]["id"], task.as_str());
    assert_eq!(
        listed["result"]["tasks"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    assert!(!listed.to_string().contains("hijack"), "{listed}");
    // Cards name the bearer scheme when tokens are configured.
    let card: Value = http
        .get(format!("{base}/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
}

/// A client that sends its next message the moment the last one's task
/// completes finds the context free: the task lets go of its run's claim
/// before `SendMessage` answers (it once answered first, and the next
/// message on the context met `conflict: … is claimed`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_to_back_messages_on_one_context_never_meet_a_held_claim() {
    let s = server().await;
    let url = format!("{}/v1/a2a/echo", s.base);
    let (_, first) = rpc(&s.http, &url, None, send("turn 0")).await;
    let context = first["result"]["task"]["contextId"]
        .as_str()
        .unwrap_or_else(|| panic!("{first}"))
        .to_string();
    for i in 1..30 {
        let body = call(
            "SendMessage",
            json!({ "message": { "messageId": format!("m{i}"), "role": "ROLE_USER", "contextId": context, "parts": [{ "text": format!("turn {i}") }] } }),
        );
        let (status, reply) = rpc(&s.http, &url, None, body).await;
        assert_eq!(status, 200);
        assert_eq!(
            reply["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "message {i}: {reply}"
        );
    }
}

/// The same for `SendStreamingMessage`: once its stream has ended with the
/// task, the next message on the context finds the claim let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_to_back_streamed_messages_on_one_context_never_meet_a_held_claim() {
    let s = server().await;
    let url = format!("{}/v1/a2a/echo", s.base);
    let (_, first) = rpc(&s.http, &url, None, send("turn 0")).await;
    let context = first["result"]["task"]["contextId"]
        .as_str()
        .unwrap_or_else(|| panic!("{first}"))
        .to_string();
    for i in 1..20 {
        let body = call(
            "SendStreamingMessage",
            json!({ "message": { "messageId": format!("s{i}"), "role": "ROLE_USER", "contextId": context, "parts": [{ "text": format!("turn {i}") }] } }),
        );
        let r = s.http.post(&url).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        assert!(
            !text.contains("is claimed"),
            "message {i} met a held claim: {text}"
        );
        assert!(text.contains("TASK_STATE_COMPLETED"), "message {i}: {text}");
    }
}
