//! Delegation journals written before `workers` took the host-call seam
//! (one `worker_call { call, result }` entry a call) still replay.

use super::delegation::{grant, open, run_parent, worker_dir};
use cairn_runtime::RunStatus;
use serde_json::{Value, json};
use std::time::Duration;

/// A journal written before delegation took the host-call seam (one
/// `worker_call { call, result }` entry a call) still replays: the same
/// session with each `host_call_started`/`host_call_finished` pair of a
/// `workers` call rewritten in the old form replays offline and matches.
#[tokio::test]
async fn a_journal_of_worker_call_entries_still_replays() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rt = open(&home, None).await;
    let parent = grant(&rt, "parent").await;
    let steps = json!([
        { "spawn": { "component": "echo", "prompt": "old times" } },
        { "wait": 0, "timeout_ms": 30000 },
        { "status": 0 },
        { "spawn": { "component": "no-such-example", "prompt": "x" } },
        "peers",
    ]);
    let (session, facts, results) = run_parent(&rt, &parent, steps).await;
    assert_eq!(facts.status, RunStatus::Finished);
    assert!(results[3]["error"].is_string(), "{results:?}");
    let segment = worker_dir(&home, &session, &rt)
        .join("session/segments")
        .read_dir()
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.to_string_lossy().ends_with(".jsonl")
                && !p.to_string_lossy().ends_with(".trace.jsonl")
        })
        .unwrap();
    rt.shutdown(Duration::from_secs(5)).await;
    drop(rt);
    // Rewrite: started → a hint (kept for the seq), finished → worker_call.
    let text = std::fs::read_to_string(&segment).unwrap();
    let mut calls = std::collections::HashMap::new();
    let mut rewritten = 0;
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            let event = v["payload"]["event"].clone();
            match event["type"].as_str() {
                Some("host_call_started") if event["capability"] == "workers" => {
                    calls.insert(event["call_id"].clone(), event["request"].clone());
                    v["payload"]["event"] = json!({
                        "type": "child_notification",
                        "worker_id": "01a23b42-d97c-7741-a2b6-5105d774294b",
                        "session_id": "hint",
                        "child_run_id": "01a23b42-d97c-7741-a2b6-5105d774294b",
                        "status": "finished",
                    });
                    v.as_object_mut().unwrap().remove("run_id");
                }
                Some("host_call_finished") if calls.contains_key(&event["call_id"]) => {
                    let result = match event.get("error") {
                        Some(e) => json!({ "error": e["message"] }),
                        None => json!({ "ok": event["response"] }),
                    };
                    v["payload"]["event"] = json!({
                        "type": "worker_call",
                        "call": calls[&event["call_id"]],
                        "result": result,
                    });
                    rewritten += 1;
                }
                _ => {}
            }
            serde_json::to_string(&v).unwrap()
        })
        .collect();
    assert_eq!(rewritten, 5, "every workers call rewritten");
    std::fs::write(&segment, lines.join("\n") + "\n").unwrap();
    let out = super::common::cairn_in(&home, &["replay", &session.to_string()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 of 1"), "{stdout}");
}
