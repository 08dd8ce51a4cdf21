//! The HTTP seam, over real HTTP on 127.0.0.1:0.

use cairn_runtime::runtime::{Runtime, RuntimeConfig};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::time::Duration;

pub struct Server {
    pub base: String,
    pub http: reqwest::Client,
    pub rt: Runtime,
    _tmp: tempfile::TempDir,
}

pub async fn server() -> Server {
    let tmp = tempfile::tempdir().unwrap();
    let rt = Runtime::open(RuntimeConfig::new(tmp.path().join("home")))
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let serving = rt.clone();
    tokio::spawn(async move { cairn_api::serve(listener, serving, std::future::pending()).await });
    Server {
        base,
        http: reqwest::Client::new(),
        rt,
        _tmp: tmp,
    }
}

/// One SSE event.
#[derive(Debug, Clone, Default)]
pub struct Sse {
    pub event: Option<String>,
    pub id: Option<String>,
    pub data: String,
}

/// Reads SSE events from a response.
pub struct SseReader {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: String,
}

impl SseReader {
    pub fn new(resp: reqwest::Response) -> Self {
        SseReader {
            body: Box::pin(resp.bytes_stream()),
            buf: String::new(),
        }
    }

    pub async fn next(&mut self) -> Option<Sse> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut ev = Sse::default();
                let mut data = Vec::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.strip_prefix(' ').unwrap_or(v).to_string());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        ev.event = Some(v.trim().to_string());
                    } else if let Some(v) = line.strip_prefix("id:") {
                        ev.id = Some(v.trim().to_string());
                    }
                }
                if data.is_empty() && ev.event.is_none() {
                    continue; // a keep-alive comment
                }
                ev.data = data.join("\n");
                return Some(ev);
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.body.next())
                .await
                .expect("SSE in time")?;
            self.buf.push_str(&String::from_utf8_lossy(&chunk.ok()?));
        }
    }

    /// Journal events until one of type `kind`.
    pub async fn until(&mut self, kind: &str) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(ev) = self.next().await {
            let v: Value = serde_json::from_str(&ev.data).unwrap_or(Value::Null);
            let hit = v["payload"]["event"]["type"] == kind;
            out.push(v);
            if hit {
                return out;
            }
        }
        panic!("the stream ended before {kind}: {out:?}");
    }
}

fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            e["payload"]["event"]["type"]
                .as_str()
                .unwrap_or("?")
                .to_string()
        })
        .collect()
}

#[tokio::test]
async fn a_streamed_chat_completion_is_openai_chunks() {
    let s = server().await;
    let resp = s
        .http
        .post(format!("{}/v1/chat/completions", s.base))
        .json(&json!({"model": "echo", "stream": true, "temperature": 0.2,
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "streamed chat works"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let session = resp.headers()["x-cairn-session"]
        .to_str()
        .unwrap()
        .to_string();
    let mut sse = SseReader::new(resp);
    let mut content = String::new();
    let mut finish = None;
    let mut done = false;
    while let Some(ev) = sse.next().await {
        if ev.data == "[DONE]" {
            done = true;
            break;
        }
        let chunk: Value = serde_json::from_str(&ev.data).unwrap();
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "echo");
        assert!(chunk["id"].as_str().unwrap().starts_with("chatcmpl-"));
        let choice = &chunk["choices"][0];
        content.push_str(choice["delta"]["content"].as_str().unwrap_or(""));
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
    }
    assert!(done);
    assert_eq!(content, "streamed chat works");
    assert_eq!(finish.as_deref(), Some("stop"));
    // Non-streamed, in the same session (named by the header).
    let resp = s
        .http
        .post(format!("{}/v1/chat/completions", s.base))
        .header("x-cairn-session", &session)
        .json(&json!({"model": "echo", "messages": [{"role": "user", "content": [{"type": "text", "text": "once"}]}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["content"], "once");
    let runs: Value = s
        .http
        .get(format!("{}/v1/runs", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 2);
    assert!(
        runs.as_array()
            .unwrap()
            .iter()
            .all(|r| r["session_id"] == session.as_str())
    );
}

#[tokio::test]
async fn a_headless_run_is_followed_by_a_later_claimant_and_unblocked_over_http() {
    let s = server().await;
    let resp = s
        .http
        .post(format!("{}/v1/runs", s.base))
        .json(&json!({"component": "approval", "prompt": "deploy", "liveness": "continue"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let started: Value = resp.json().await.unwrap();
    let (run, session) = (
        started["run_id"].as_str().unwrap().to_string(),
        started["session_id"].as_str().unwrap().to_string(),
    );
    // The starter is gone; the run waits. A second start is refused.
    let again = s
        .http
        .post(format!("{}/v1/runs", s.base))
        .json(&json!({"session": session, "component": "approval", "prompt": "again"}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409);
    let err: Value = again.json().await.unwrap();
    assert_eq!(err["error"]["code"], "live_run");
    assert!(err["error"]["message"].as_str().unwrap().contains(&run));

    let resp = s
        .http
        .get(format!(
            "{}/v1/sessions/{session}/events?after=0&claim=true&presence=true",
            s.base
        ))
        .send()
        .await
        .unwrap();
    let mut sse = SseReader::new(resp);
    let replayed = sse.until("approval_routed").await;
    assert_eq!(
        types(&replayed)[..3],
        ["segment_created", "generation_reserved", "started"]
    );
    let requested = replayed
        .iter()
        .find(|e| e["payload"]["event"]["type"] == "decision_requested")
        .unwrap();
    let id = requested["payload"]["event"]["decision_id"]
        .as_str()
        .unwrap();
    let summary: Value = s
        .http
        .get(format!("{}/v1/sessions/{session}", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        summary["state"],
        json!({"state": "blocked", "on": "approval"})
    );
    assert_eq!(summary["observers"]["claiming"], 1);
    let pending: Value = s
        .http
        .get(format!("{}/v1/decisions?session={session}", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(pending[0]["decision_id"], id);
    let decided = s
        .http
        .post(format!("{}/v1/decisions/{id}", s.base))
        .json(&json!({"value": {"approved": true, "reason": "looks fine"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 200);
    let live = sse.until("finished").await;
    let mut all = types(&replayed);
    all.extend(types(&live));
    all.retain(|k| k != "observer_attached");
    let tail: Vec<&str> = all
        .iter()
        .map(String::as_str)
        .skip_while(|k| *k != "decision_requested")
        .collect();
    assert_eq!(
        tail,
        [
            "decision_requested",
            "approval_routed",
            "decision_recorded",
            "text_delta",
            "finished"
        ]
    );
    let attached = types(&replayed)
        .iter()
        .chain(types(&live).iter())
        .filter(|k| *k == "observer_attached")
        .count();
    assert_eq!(attached, 1, "replay then live, each event once");
    assert_eq!(
        live.last().unwrap()["payload"]["event"]["text"],
        "approved: looks fine"
    );
    // The same answer again is fine; another is a conflict, through the alias too.
    let same = s
        .http
        .post(format!("{}/v1/approvals/{id}", s.base))
        .json(&json!({"value": {"approved": true, "reason": "looks fine"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(same.status(), 200);
    let other = s
        .http
        .post(format!("{}/v1/decisions/{id}", s.base))
        .json(&json!({"value": {"approved": false}}))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 409);
    let run_info: Value = s
        .http
        .get(format!("{}/v1/runs/{run}", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run_info["state"], "finished");
    assert_eq!(run_info["facts"]["status"], "finished");
}

#[tokio::test]
async fn a_reconnect_with_last_event_id_has_no_duplicate_and_no_hole() {
    let s = server().await;
    let started: Value = s
        .http
        .post(format!("{}/v1/runs", s.base))
        .json(&json!({"component": "echo", "prompt": "a b c d e f g h"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let session = started["session_id"].as_str().unwrap();
    let run = started["run_id"].as_str().unwrap();
    // Wait for the end through the run's own stream.
    let mut all = SseReader::new(
        s.http
            .get(format!("{}/v1/runs/{run}/events", s.base))
            .send()
            .await
            .unwrap(),
    );
    let whole = all.until("finished").await;
    assert!(
        all.next().await.is_none(),
        "the run stream ends after its terminal event"
    );
    let mut first = SseReader::new(
        s.http
            .get(format!("{}/v1/sessions/{session}/events", s.base))
            .send()
            .await
            .unwrap(),
    );
    let mut seen = Vec::new();
    for _ in 0..5 {
        let ev = first.next().await.unwrap();
        seen.push(ev.id.clone().unwrap().parse::<u64>().unwrap());
    }
    drop(first);
    let resp = s
        .http
        .get(format!("{}/v1/sessions/{session}/events?after=1", s.base))
        .header("Last-Event-ID", seen.last().unwrap().to_string())
        .send()
        .await
        .unwrap();
    let mut second = SseReader::new(resp);
    let rest = second.until("finished").await;
    let resumed: Vec<u64> = rest.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        resumed[0],
        seen.last().unwrap() + 1,
        "Last-Event-ID wins over ?after"
    );
    let mut joined = seen.clone();
    joined.extend(&resumed);
    let dense: Vec<u64> = (1..=*joined.last().unwrap()).collect();
    let without_observers: Vec<u64> = joined.clone();
    assert_eq!(
        without_observers.len(),
        without_observers
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        "no duplicate"
    );
    assert!(
        dense.iter().all(|s| joined.contains(s)),
        "no hole: {joined:?}"
    );
    assert!(whole.len() >= 8);
}

#[tokio::test]
async fn a_chat_client_disconnect_cancels_the_run_in_order() {
    let s = server().await;
    let resp = s
        .http
        .post(format!("{}/v1/chat/completions", s.base))
        .json(&json!({"model": "approval", "stream": true, "messages": [{"role": "user", "content": "may I?"}]}))
        .send()
        .await
        .unwrap();
    let session = resp.headers()["x-cairn-session"]
        .to_str()
        .unwrap()
        .to_string();
    let run = resp.headers()["x-cairn-run"].to_str().unwrap().to_string();
    let mut sse = SseReader::new(resp);
    loop {
        let ev = sse.next().await.unwrap();
        // A decision comes as an ordinary chunk (an empty delta) with the
        // request in `cairn_decision`: an OpenAI client's loop survives it.
        assert_eq!(ev.event, None, "chat frames are unnamed");
        let v: Value = serde_json::from_str(&ev.data).unwrap();
        if let Some(d) = v.get("cairn_decision") {
            assert_eq!(v["choices"][0]["delta"], json!({}));
            assert_eq!(d["run_id"], run.as_str());
            break;
        }
    }
    drop(sse); // the client goes away
    let run_id: cairn_runtime::RunId = run.parse().unwrap();
    let facts = tokio::time::timeout(Duration::from_secs(20), s.rt.wait(run_id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(facts.status, cairn_runtime::RunStatus::Cancelled);
    let session_id = cairn_runtime::SessionId::parse(&session).unwrap();
    let events: Vec<Value> =
        s.rt.read(&session_id, cairn_runtime::Seq(0))
            .await
            .unwrap()
            .iter()
            .filter_map(|i| i.event().map(|e| serde_json::to_value(e).unwrap()))
            .collect();
    let kinds = types(&events);
    let at = kinds.iter().position(|k| k == "observer_detached").unwrap();
    assert_eq!(
        kinds[at..],
        [
            "observer_detached",
            "claims_exhausted",
            "liveness_decided",
            "cancelled"
        ]
    );
    assert_eq!(
        events.last().unwrap()["payload"]["event"]["reason"],
        "unclaimed"
    );
    assert_eq!(events[at + 2]["payload"]["event"]["policy"], "cancel");
}

pub async fn status_and_code(resp: reqwest::Response) -> (u16, String) {
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    (
        status,
        body["error"]["code"].as_str().unwrap_or("").to_string(),
    )
}

#[tokio::test]
async fn components_upload_by_digest_and_the_openapi_document_covers_every_route() {
    let s = server().await;
    let bytes = std::fs::read(crate::common::fixture("counter")).unwrap();
    let resp = s
        .http
        .post(format!("{}/v1/components", s.base))
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let info: Value = resp.json().await.unwrap();
    assert_eq!(info["name"], "counter");
    assert_eq!(info["can_park"], true);
    let digest = info["digest"].as_str().unwrap().to_string();
    let resp = s
        .http
        .post(format!("{}/v1/runs", s.base))
        .json(&json!({"component": digest, "prompt": "3"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let list: Value = s
        .http
        .get(format!("{}/v1/components", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|c| c["digest"] == digest.as_str())
    );
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|c| c["built_in"] == "echo")
    );
    let other = std::fs::read(crate::common::fixture("wrong-world")).unwrap();
    let resp = s
        .http
        .post(format!("{}/v1/components", s.base))
        .body(other)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "invalid_component");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("missing export `run`"),
        "{body}"
    );

    let doc: Value = s
        .http
        .get(format!("{}/openapi.json", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["components"]["schemas"]["SessionSummary"].is_object());
    for (method, path) in cairn_api::openapi::operations() {
        let url = format!(
            "{}{}",
            s.base,
            path.replace("{id}", "00000000-0000-0000-0000-000000000000")
        );
        let req = s
            .http
            .request(method.parse().unwrap(), &url)
            .header("content-type", "application/json")
            .body("{}");
        let resp = tokio::time::timeout(Duration::from_secs(10), req.send())
            .await
            .unwrap()
            .unwrap();
        if resp.status() == 404 {
            let body: Value = resp.json().await.unwrap_or(Value::Null);
            assert_ne!(
                body["error"]["message"], "no such route",
                "{method} {path} is in the document but not routed"
            );
        }
    }
    let metrics = s
        .http
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("cairn_events_appended_total")
            && metrics.contains("cairn_runs{state=\"running\"}"),
        "{metrics}"
    );
}

/// A server without tokens answers only under a loopback name (no DNS
/// rebinding) and takes writes only from its own origin (no page on
/// another site can start runs or answer decisions).
#[tokio::test]
async fn a_local_server_refuses_foreign_hosts_and_cross_origin_writes() {
    let s = server().await;
    let host = s.base.trim_start_matches("http://").to_string();
    let resp = s
        .http
        .get(format!("{}/healthz", s.base))
        .header("host", "attacker.example:80")
        .send()
        .await
        .unwrap();
    assert_eq!(status_and_code(resp).await, (403, "forbidden".into()));
    for name in [
        host.clone(),
        format!("localhost:{}", host.split(':').nth(1).unwrap()),
    ] {
        let resp = s
            .http
            .get(format!("{}/healthz", s.base))
            .header("host", name.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{name}");
    }
    let body = json!({ "component": "echo", "prompt": "x" });
    let resp = s
        .http
        .post(format!("{}/v1/runs", s.base))
        .header("origin", "http://attacker.example")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(status_and_code(resp).await, (403, "forbidden".into()));
    let resp = s
        .http
        .post(format!("{}/v1/runs", s.base))
        .header("origin", "null")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let resp = s
        .http
        .post(format!("{}/v1/runs", s.base))
        .header("origin", s.base.as_str())
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202, "its own origin may write");
}
