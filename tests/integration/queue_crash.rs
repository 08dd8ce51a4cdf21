//! A crash at each of the queue's writes (issue 40 item 1): the ledger row,
//! then the record, then the row. Recovery reads what the worker's journal
//! says happened before it dispatches anything — an ended run ends the
//! card, a recorded answer is the answer — so no card runs twice and no
//! acknowledged answer ends `failed`.

use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

async fn rows(http: &reqwest::Client, url: &str) -> Vec<Value> {
    let v: Value = super::common::get_json(http, &format!("{url}/v1/queue")).await;
    v.as_array().unwrap().clone()
}

/// Wait for the card's row to reach `state`.
async fn until_state(http: &reqwest::Client, url: &str, card: &str, state: &str) -> Value {
    let t = Instant::now();
    loop {
        let rows = rows(http, url).await;
        if let Some(r) = rows
            .iter()
            .find(|r| r["card"] == card && r["state"] == state)
        {
            return r.clone();
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{card} never {state}: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait for a server started at a crash point to abort there.
async fn aborted(served: &mut super::common::Served, at: &str) {
    let t = Instant::now();
    while served.child.try_wait().unwrap().is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{at} was never reached"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ledger(home: &Path) -> Vec<Value> {
    std::fs::read_to_string(home.join("queue/ledger.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The `started` entries of a session's journal, read with `cairn export`.
fn started_runs(home: &Path, session: &str) -> usize {
    let out = super::common::cairn_in(home, &["export", session]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(r#""type":"started""#))
        .count()
}

async fn add(http: &reqwest::Client, url: &str, card: &str, component: &str) {
    let r = http
        .post(format!("{url}/v1/queue"))
        .json(&json!({ "card": card, "component": component, "prompt": card }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_each_queue_write_runs_no_card_twice_and_loses_no_answer() {
    let http = reqwest::Client::new();
    for at in ["queue-ledgered", "queue-recorded"] {
        // A card that ends at once: killed after its ledger row, or after
        // its record too (before: the row stayed processing, the record
        // said its run had ended, and recovery ran the card again).
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let mut served = super::common::serve_with(&home, &[("CAIRN_CRASH_AT", at)]).unwrap();
        add(&http, &served.url, "once", "echo").await;
        aborted(&mut served, at).await;
        drop(served);
        // Offline, the doctor compares the records with the journal.
        if at == "queue-recorded" {
            let out = super::common::cairn_in(&home, &["doctor", "--json"]);
            let report: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert!(
                report["problems"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["kind"] == "ending_unwritten" && p["subject"] == "worker:once:r1"),
                "{report}"
            );
        }
        let served = super::common::serve(&home);
        until_state(&http, &served.url, "once", "done").await;
        let rows: Vec<Value> = ledger(&home)
            .into_iter()
            .filter(|r| r["card"] == "once")
            .collect();
        assert_eq!(rows.len(), 1, "{at}: {rows:?}");
        let session = rows[0]["session_id"].as_str().unwrap();
        assert_eq!(started_runs(&home, session), 1, "{at}: the card ran twice");
        drop(served);
        let out = super::common::cairn_in(&home, &["doctor", "--json"]);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["ok"], true, "{at}: {report}");
    }

    // An acknowledged answer, killed after its ending's ledger row: the
    // card ends done with the answer, its work not done again (before: a
    // new run asked again, and the card ended `failed`).
    for at in ["queue-ledgered", "queue-recorded"] {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let served = super::common::serve(&home);
        add(&http, &served.url, "ask", "approval").await;
        until_state(&http, &served.url, "ask", "awaiting").await;
        drop(served);
        let mut served = super::common::serve_with(&home, &[("CAIRN_CRASH_AT", at)]).unwrap();
        let r = http
            .post(format!("{}/v1/queue/ask/answer", served.url))
            .json(&json!({ "value": { "approved": true } }))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
        aborted(&mut served, at).await;
        drop(served);
        let served = super::common::serve(&home);
        let row = until_state(&http, &served.url, "ask", "done").await;
        assert!(row["last_reason"].is_null(), "{at}: {row}");
        let rows: Vec<Value> = ledger(&home)
            .into_iter()
            .filter(|r| r["card"] == "ask")
            .collect();
        let outcomes: Vec<&str> = rows
            .iter()
            .map(|r| r["outcome"].as_str().unwrap())
            .collect();
        assert_eq!(outcomes, ["awaiting", "done"], "{at}: {rows:?}");
        // The run that asked, and the one that resumed it with the answer.
        let session = rows[1]["session_id"].as_str().unwrap();
        assert_eq!(started_runs(&home, session), 2, "{at}: work done again");
        drop(served);
    }
}

/// A kill between making a card's worker and recording it: the doctor names
/// the orphan, and the next start adopts it — one worker for the key,
/// never two (before: recovery made a second worker for the same key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_made_before_its_record_is_adopted_not_made_again() {
    let http = reqwest::Client::new();
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let at = "queue-worker-made";
    let mut served = super::common::serve_with(&home, &[("CAIRN_CRASH_AT", at)]).unwrap();
    add(&http, &served.url, "lone", "echo").await;
    aborted(&mut served, at).await;
    drop(served);
    let out = super::common::cairn_in(&home, &["doctor", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["kind"] == "orphan_worker" && p["subject"] == "worker:lone:r1"),
        "{report}"
    );
    let served = super::common::serve(&home);
    until_state(&http, &served.url, "lone", "done").await;
    let sessions: Value =
        super::common::get_json(&http, &format!("{}/v1/sessions", served.url)).await;
    assert_eq!(sessions.as_array().unwrap().len(), 1, "{sessions}");
    // Its worker.json says what made it (seed 000's create request).
    let worker = sessions[0]["worker_id"].as_str().unwrap();
    let record: Value = serde_json::from_slice(
        &std::fs::read(home.join("workers").join(worker).join("worker.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(record["request"]["kind"], "create", "{record}");
    drop(served);
    let out = super::common::cairn_in(&home, &["doctor", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], true, "{report}");
}
