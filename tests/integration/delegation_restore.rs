//! Loans follow the parent's restore (issue 40 item 2): a host killed while
//! `delegate` spawns restores the parent by replay into a new generation;
//! each loaned scope — with what its child wrote, and the child's open
//! `/loan` with it — moves into that generation, so the parent reads its
//! children's output where it looks.

use serde_json::{Value, json};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_while_delegate_spawns_restores_the_parent_with_its_childrens_output() {
    let http = reqwest::Client::new();
    for at in ["spawn-linked", "spawn-recorded"] {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let mut served = super::common::serve_with(&home, &[("CAIRN_CRASH_AT", at)]).unwrap();
        let started: Value = http
            .post(format!("{}/v1/runs", served.url))
            .json(&json!({ "component": "delegate", "prompt": "one | two" }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = started["session_id"].as_str().unwrap().to_string();
        let t = Instant::now();
        while served.child.try_wait().unwrap().is_none() {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{at}: never got there"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(served);
        let served = super::common::serve(&home);
        let t = Instant::now();
        let run = loop {
            let s: Value =
                super::common::get_json(&http, &format!("{}/v1/sessions/{session}", served.url))
                    .await;
            let last = &s["last_run"];
            if last["status"].is_string() && s["state"]["state"] == "done" {
                break last.clone();
            }
            assert!(t.elapsed() < Duration::from_secs(60), "{at}: {s}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(run["status"], "finished", "{at}: {run}");
        drop(served);
        // The restored run's answer: both children's files, read where the
        // parent's new generation looks (before: `no_output: part-1/out.txt`).
        let out = super::common::cairn_in(&home, &["export", &session]);
        let journal = String::from_utf8_lossy(&out.stdout);
        assert!(
            journal.contains("merged 2 parts into merged.txt: one + two"),
            "{at}: {journal}"
        );
    }
}

/// A child holding its loan while the host dies: the parent's restore
/// moves the scope into its new generation, and the child (restored
/// before or after it) writes through `/loan` into the scope where the
/// restored parent reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_open_loan_follows_its_parent_into_the_restored_generation() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (parent, hostile) = {
        let rt = super::delegation::open(&home, None).await;
        let p = super::delegation::grant(&rt, "parent").await;
        let h = super::delegation::grant(&rt, "hostile").await;
        rt.shutdown(Duration::from_secs(5)).await;
        (p, h)
    };
    let http = reqwest::Client::new();
    let served = super::common::serve(&home);
    let steps = json!([
        { "spawn": { "component": hostile, "prompt": "loan-escape", "scope": "lent" } },
        { "wait": 0, "timeout_ms": 600000 },
        { "read": "lent/inside.txt" },
    ]);
    let started: Value = http
        .post(format!("{}/v1/runs", served.url))
        .json(&json!({ "component": parent, "prompt": steps.to_string() }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let session = started["session_id"].as_str().unwrap().to_string();
    // The child holds its loan, waiting on its approval.
    let pending = |url: String| {
        let http = http.clone();
        async move {
            let d: Value = super::common::get_json(&http, &format!("{url}/v1/decisions")).await;
            d.as_array()
                .unwrap()
                .first()
                .and_then(|p| p["decision_id"].as_str().map(str::to_string))
        }
    };
    let t = Instant::now();
    while pending(served.url.clone()).await.is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the child never waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(served); // kill -9
    let served = super::common::serve(&home);
    let t = Instant::now();
    let decision = loop {
        if let Some(d) = pending(served.url.clone()).await {
            break d;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the restored child never asked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let r = http
        .post(format!("{}/v1/decisions/{decision}", served.url))
        .json(&json!({ "value": { "approved": true } }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let t = Instant::now();
    loop {
        let s: Value =
            super::common::get_json(&http, &format!("{}/v1/sessions/{session}", served.url)).await;
        if s["state"]["state"] == "done" && s["last_run"]["status"].is_string() {
            assert_eq!(s["last_run"]["status"], "finished", "{s}");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(served);
    let out = super::common::cairn_in(&home, &["export", &session]);
    let journal = String::from_utf8_lossy(&out.stdout);
    let finished = journal
        .lines()
        .find(|l| l.contains(r#""type":"finished""#))
        .unwrap_or_default();
    assert!(
        finished.contains("written through the loan"),
        "the parent read its child's write: {finished}"
    );
}
