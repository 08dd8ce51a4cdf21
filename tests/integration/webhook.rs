//! Decisions by webhook: a decision nobody present can answer is POSTed,
//! signed, to the workspace's `[workspaces.W.decisions] webhook` (a real
//! receiver on loopback), which answers through `POST /v1/decisions/{id}`;
//! a receiver that keeps failing leaves the decision pending, and says so.

use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &str = "whsec-0123456789abcdef";

/// What a receiver got: each delivery's headers and body.
type Deliveries = Arc<Mutex<Vec<(axum::http::HeaderMap, Vec<u8>)>>>;

/// A receiver: records (headers, body); answers `status`; when `answer`
/// is set, approves the decision through the API it names.
async fn receiver(status: u16, answer: Option<String>) -> (String, Deliveries) {
    let seen: Deliveries = Arc::default();
    let log = seen.clone();
    let handler = move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
        let log = log.clone();
        let answer = answer.clone();
        async move {
            log.lock().unwrap().push((headers, body.to_vec()));
            if let Some(base) = answer {
                let v: Value = serde_json::from_slice(&body).unwrap();
                let id = v["decision_id"].as_str().unwrap().to_string();
                tokio::spawn(async move {
                    reqwest::Client::new()
                        .post(format!("{base}/v1/decisions/{id}"))
                        .json(
                            &json!({"value": {"approved": true, "reason": "the webhook said so"}}),
                        )
                        .send()
                        .await
                        .unwrap();
                });
            }
            axum::http::StatusCode::from_u16(status).unwrap()
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/hook", axum::routing::post(handler));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

fn config(dir: &std::path::Path, hook: &str) -> String {
    let key = dir.join("hook.secret");
    std::fs::write(&key, SECRET).unwrap();
    format!(
        "[secrets]\nhook = {{ file = \"{}\" }}\n[workspaces.local.decisions]\nwebhook = \"{hook}\"\nsecret = \"hook\"\n",
        key.display()
    )
}

async fn run_state(base: &str, run: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{base}/v1/runs/{run}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn until_ended(base: &str, run: &str) -> Value {
    let t = Instant::now();
    loop {
        let v = run_state(base, run).await;
        if v["state"] == "finished" || v["state"] == "failed" {
            return v;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{v}");
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}

#[tokio::test]
async fn a_decision_nobody_present_can_answer_goes_to_the_webhook_signed() {
    let tmp = tempfile::tempdir().unwrap();
    // The receiver answers through the API of the server made next.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (hook, seen) = receiver(202, Some(base.clone())).await;
    let rt =
        crate::common::runtime_with(&tmp.path().join("home"), Some(&config(tmp.path(), &hook)))
            .await;
    let serving = rt.clone();
    tokio::spawn(async move { cairn_api::serve(listener, serving, std::future::pending()).await });
    let r: Value = reqwest::Client::new()
        .post(format!("{base}/v1/runs"))
        .json(&json!({"component": "approval", "prompt": "deploy by webhook"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run = r["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    let end = until_ended(&base, &run).await;
    assert_eq!(end["state"], "finished", "{end}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "one delivery");
    let (headers, body) = &seen[0];
    assert_eq!(
        headers["x-cairn-signature"],
        cairn_capabilities::webhook::signature(SECRET.as_bytes(), body).as_str()
    );
    assert_eq!(headers["content-type"], "application/json");
    let sent: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(sent["run_id"], run.as_str());
    assert_eq!(sent["request_kind"], "approval");
    assert_eq!(
        headers["x-cairn-delivery"],
        sent["decision_id"].as_str().unwrap()
    );
    assert!(!String::from_utf8_lossy(body).contains(SECRET));
    let session = cairn_runtime::SessionId::parse(r["session_id"].as_str().unwrap()).unwrap();
    let events = crate::common::entries_json(&rt, &session).await;
    let routed: Vec<&Value> = events
        .iter()
        .filter(|e| e["payload"]["event"]["type"] == "approval_routed")
        .collect();
    assert_eq!(
        routed[0]["payload"]["event"]["route"], "webhook",
        "{events:?}"
    );
    let recorded = events
        .iter()
        .find(|e| e["payload"]["event"]["type"] == "decision_recorded")
        .unwrap();
    assert_eq!(
        recorded["payload"]["event"]["value"]["reason"],
        "the webhook said so"
    );
}

#[tokio::test]
async fn a_webhook_that_keeps_failing_leaves_the_decision_pending_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let (hook, seen) = receiver(500, None).await;
    let (_home, _rt, base) = crate::common::served_here(Some(&config(tmp.path(), &hook))).await;
    let http = reqwest::Client::new();
    let r: Value = http
        .post(format!("{base}/v1/runs"))
        .json(&json!({"component": "approval", "prompt": "deploy"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run = r["run_id"].as_str().unwrap().to_string();
    // Five attempts over 7.5 s of backoff, then the failure on the decision.
    let t = Instant::now();
    let pending = loop {
        let d: Value = http
            .get(format!("{base}/v1/decisions"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if let Some(p) = d.as_array().unwrap().first()
            && p["delivery_failed"].is_string()
        {
            break p.clone();
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{d}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let why = pending["delivery_failed"].as_str().unwrap();
    assert!(why.contains("500") && why.contains("5 attempts"), "{why}");
    assert_eq!(seen.lock().unwrap().len(), 5);
    // Still pending: any seam may answer it.
    let id = pending["decision_id"].as_str().unwrap();
    let r = http
        .post(format!("{base}/v1/decisions/{id}"))
        .json(&json!({"value": {"approved": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let end = until_ended(&base, &run).await;
    assert_eq!(end["state"], "finished", "{end}");
}

/// kill -9 of `cairn serve` with a decision delivered to the webhook and
/// unanswered: the restored run's request is delivered again (the same
/// decision id) and its answer finishes the run.
#[tokio::test]
async fn a_decision_delivered_before_a_crash_is_delivered_again_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (hook, seen) = receiver(202, None).await;
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("cairn.toml"), config(tmp.path(), &hook)).unwrap();
    let served = crate::common::serve(&home);
    let http = reqwest::Client::new();
    let r: Value = http
        .post(format!("{}/v1/runs", served.url))
        .json(&json!({"component": "approval", "prompt": "deploy through a crash"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run = r["run_id"].as_str().unwrap().to_string();
    let t = Instant::now();
    while seen.lock().unwrap().is_empty() {
        assert!(t.elapsed() < Duration::from_secs(30), "no first delivery");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(served); // kill -9
    let served = crate::common::serve(&home);
    let t = Instant::now();
    while seen.lock().unwrap().len() < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no delivery after the restart"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let deliveries = seen.lock().unwrap().clone();
    let ids: Vec<&str> = deliveries
        .iter()
        .map(|(h, _)| h["x-cairn-delivery"].to_str().unwrap())
        .collect();
    assert_eq!(ids[0], ids[1], "the same decision, delivered again");
    let t = Instant::now();
    loop {
        let r = http
            .post(format!("{}/v1/decisions/{}", served.url, ids[0]))
            .json(&json!({"value": {"approved": true}}))
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{}", r.status());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let end = until_ended(&served.url, &run).await;
    assert_eq!(end["state"], "finished", "{end}");
}
