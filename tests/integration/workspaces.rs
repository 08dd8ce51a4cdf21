//! Workspaces: a token for workspace B reaches nothing of A on any route,
//! and gets 404 (not 403), so ids cannot be probed.

use crate::api::SseReader;
use cairn_runtime::runtime::{Runtime, RuntimeConfig};
use serde_json::{Value, json};

const A: &str = "token-for-workspace-a-0123456789";
const B: &str = "token-for-workspace-b-9876543210";

async fn served() -> (String, Runtime, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("cairn.toml"),
        format!("[workspaces.a]\ntokens = [\"{A}\"]\n[workspaces.b]\ntokens = [\"{B}\"]\n[workspaces.b.limits]\nevents_per_run = 5\n"),
    )
    .unwrap();
    let rt = Runtime::open(RuntimeConfig::load(&home, None).unwrap())
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let serving = rt.clone();
    tokio::spawn(async move { cairn_api::serve(listener, serving, std::future::pending()).await });
    (base, rt, tmp)
}

#[tokio::test]
async fn a_foreign_token_reaches_nothing() {
    let (base, _rt, _tmp) = served().await;
    let http = reqwest::Client::new();
    let as_ = |token: &'static str| move |req: reqwest::RequestBuilder| req.bearer_auth(token);
    let a = as_(A);
    let b = as_(B);
    // Without a token, or with a wrong one: 401.
    let resp = http
        .get(format!("{base}/v1/sessions"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let resp = http
        .get(format!("{base}/v1/sessions"))
        .bearer_auth("not-a-token-of-anyone")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(
        http.get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    // A's resources: a run waiting on a decision, an uploaded component.
    let started: Value = a(http.post(format!("{base}/v1/runs")))
        .json(&json!({"component": "approval", "prompt": "a's secret plan"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let session = started["session_id"].as_str().unwrap().to_string();
    let run = started["run_id"].as_str().unwrap().to_string();
    let decision = loop {
        let pending: Value = a(http.get(format!("{base}/v1/decisions")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if let Some(id) = pending[0]["decision_id"].as_str() {
            break id.to_string();
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    let upload: Value = a(http.post(format!("{base}/v1/components")))
        .body(std::fs::read(crate::common::fixture("counter")).unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let digest = upload["digest"].as_str().unwrap().to_string();

    // B walks every route at A's ids.
    let s = crate::common::enc(&session);
    let cases: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", format!("/v1/sessions/{s}"), None),
        ("DELETE", format!("/v1/sessions/{s}"), None),
        ("POST", format!("/v1/sessions/{s}/compact"), Some(json!({}))),
        (
            "POST",
            format!("/v1/sessions/{s}/branch"),
            Some(json!({"at_seq": 1})),
        ),
        (
            "POST",
            format!("/v1/sessions/{s}/fork"),
            Some(json!({"before_seq": 3})),
        ),
        ("GET", format!("/v1/sessions/{s}/events?after=0"), None),
        ("GET", format!("/v1/decisions?session={s}"), None),
        ("GET", format!("/v1/runs/{run}"), None),
        ("POST", format!("/v1/runs/{run}/cancel"), Some(json!({}))),
        ("POST", format!("/v1/runs/{run}/resume"), Some(json!({}))),
        ("GET", format!("/v1/runs/{run}/events"), None),
        (
            "POST",
            format!("/v1/decisions/{decision}"),
            Some(json!({"value": {"approved": true}})),
        ),
        (
            "POST",
            format!("/v1/approvals/{decision}"),
            Some(json!({"value": {"approved": true}})),
        ),
        (
            "POST",
            "/v1/runs".into(),
            Some(json!({"continues": run, "prompt": "x"})),
        ),
        (
            "POST",
            "/v1/runs".into(),
            Some(json!({"component": digest, "prompt": "x"})),
        ),
    ];
    for (method, path, body) in cases {
        let mut req = b(http.request(method.parse().unwrap(), format!("{base}{path}")));
        if let Some(body) = &body {
            req = req.json(body);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert_eq!(status, 404, "{method} {path} as B: {text}");
        assert!(!text.contains("secret plan"), "{text}");
    }
    // Lists show B nothing of A.
    for path in ["/v1/sessions", "/v1/runs", "/v1/decisions"] {
        let list: Value = b(http.get(format!("{base}{path}")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(list, json!([]), "{path}");
    }
    let comps: Value = b(http.get(format!("{base}/v1/components")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        comps
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["digest"] != digest.as_str())
    );
    // A's session id, named by B, is B's own (ids are per workspace): a
    // run and a chat into it make and use B's session of that name.
    let resp = b(http.post(format!("{base}/v1/runs")))
        .json(&json!({"session": session, "component": "echo", "prompt": "b's"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let resp = b(http.post(format!("{base}/v1/chat/completions")))
        .header("x-cairn-session", &session)
        .json(&json!({"model": "echo", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    let text = resp.text().await.unwrap();
    assert!(!text.contains("secret plan"), "{text}");
    let b_view: Value = b(http.get(format!("{base}/v1/sessions/{s}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let a_view: Value = a(http.get(format!("{base}/v1/sessions/{s}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(b_view["session_id"], a_view["session_id"]);
    assert_ne!(b_view["worker_id"], a_view["worker_id"], "{b_view}");

    // A's run is untouched: still waiting, and A can finish it.
    let summary: Value = a(http.get(format!("{base}/v1/sessions/{s}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(summary["state"]["state"], "blocked");
    let resp = a(http.post(format!("{base}/v1/decisions/{decision}")))
        .json(&json!({"value": {"approved": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut events = SseReader::new(
        a(http.get(format!("{base}/v1/runs/{run}/events")))
            .send()
            .await
            .unwrap(),
    );
    let seen = events.until("finished").await;
    assert_eq!(seen.last().unwrap()["payload"]["event"]["text"], "approved");

    // Workspace ceilings apply: B may emit at most 5 events per run.
    let started: Value = b(http.post(format!("{base}/v1/runs")))
        .json(&json!({"component": "echo", "prompt": "one two three four five six seven"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_b = started["run_id"].as_str().unwrap();
    let mut events = SseReader::new(
        b(http.get(format!("{base}/v1/runs/{run_b}/events")))
            .send()
            .await
            .unwrap(),
    );
    let seen = events.until("failed").await;
    assert_eq!(
        seen.last().unwrap()["payload"]["event"]["error"]["details"]["limit"],
        "events_per_run"
    );
    let resp = b(http.post(format!("{base}/v1/runs")))
        .json(&json!({"component": "echo", "prompt": "x", "limits": {"events_per_run": 6}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "limit_exceeded");
}

/// `/metrics` counts every workspace: with tokens configured, it needs one.
#[tokio::test]
async fn metrics_need_a_token_when_tokens_exist() {
    let (base, _rt, _tmp) = served().await;
    let http = reqwest::Client::new();
    let resp = http.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let resp = http
        .get(format!("{base}/metrics"))
        .bearer_auth(A)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

/// One workspace filling its quota of live runs is refused with `429
/// capacity` naming the quota; another workspace starts as before.
#[tokio::test]
async fn a_workspace_at_its_live_run_quota_cannot_starve_another() {
    let (base, _tmp) = served_with(&format!(
        "[workspaces.a]\ntokens = [\"{A}\"]\n[workspaces.a.quota]\nlive_runs = 3\n[workspaces.b]\ntokens = [\"{B}\"]\n"
    ))
    .await;
    let http = reqwest::Client::new();
    let start = |token: &'static str| start_approval(&http, &base, token);
    for _ in 0..3 {
        assert_eq!(start(A).await.unwrap().status(), 202);
    }
    let refused = start(A).await.unwrap();
    assert_eq!(refused.status(), 429);
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "capacity");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("live_runs = 3"),
        "{body}"
    );
    for _ in 0..4 {
        assert_eq!(start(B).await.unwrap().status(), 202, "b is not starved");
    }
}

/// Serve a home whose `cairn.toml` is `config`.
pub async fn served_with(config: &str) -> (String, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("cairn.toml"), config).unwrap();
    let rt = Runtime::open(RuntimeConfig::load(&home, None).unwrap())
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(cairn_api::serve(listener, rt, std::future::pending()));
    (base, tmp)
}

/// Start a run of the `approval` example (it waits on its decision).
fn start_approval(
    http: &reqwest::Client,
    base: &str,
    token: &'static str,
) -> impl std::future::Future<Output = reqwest::Result<reqwest::Response>> {
    http.post(format!("{base}/v1/runs"))
        .bearer_auth(token)
        .json(&serde_json::json!({ "component": "approval", "prompt": "hold" }))
        .send()
}

async fn capacity_message(resp: reqwest::Response) -> String {
    assert_eq!(resp.status(), 429);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "capacity", "{body}");
    body["error"]["message"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn upload_and_waiting_run_quotas_hold_one_workspace_and_not_another() {
    let (base, _tmp) = served_with(&format!(
        "[workspaces.a]\ntokens = [\"{A}\"]\n[workspaces.a.quota]\nuploads = 1\nwaiting_runs = 2\n\
         [workspaces.b]\ntokens = [\"{B}\"]\n[workspaces.b.quota]\ncomponent_bytes = 1000\n"
    ))
    .await;
    let http = reqwest::Client::new();
    let upload = |token: &'static str, fixture: &str| {
        let bytes = std::fs::read(crate::common::fixture(fixture)).unwrap();
        http.post(format!("{base}/v1/components"))
            .bearer_auth(token)
            .header("content-type", "application/wasm")
            .body(bytes)
            .send()
    };
    assert_eq!(upload(A, "counter").await.unwrap().status(), 201);
    // The same bytes again are free; other bytes are past the quota.
    assert_eq!(upload(A, "counter").await.unwrap().status(), 201);
    let message = capacity_message(upload(A, "spinner").await.unwrap()).await;
    assert!(message.contains("uploads = 1"), "{message}");
    // B's byte quota is its own.
    let message = capacity_message(upload(B, "spinner").await.unwrap()).await;
    assert!(message.contains("component_bytes = 1000"), "{message}");
    // Waiting runs: A holds two, a third start is refused; B starts freely.
    let start = |token: &'static str| start_approval(&http, &base, token);
    for _ in 0..2 {
        assert_eq!(start(A).await.unwrap().status(), 202);
    }
    // Both wait on their decision before the third start.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let pending: serde_json::Value = http
            .get(format!("{base}/v1/decisions"))
            .bearer_auth(A)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if pending.as_array().map_or(0, |a| a.len()) == 2 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{pending}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let message = capacity_message(start(A).await.unwrap()).await;
    assert!(message.contains("waiting_runs = 2"), "{message}");
    for _ in 0..3 {
        assert_eq!(start(B).await.unwrap().status(), 202, "b is not held");
    }
}
