//! A decision of a run being restored (issue 40 item 8): right after a
//! restart, before the replay has asked again, an answer was `404` (no
//! pending decision); now it is `409 restoring` (retry) until the replay
//! asks, then it is taken, and the run goes on with it.

use crate::common::*;
use cairn::runtime::{Runtime, RuntimeConfig, RuntimeError};
use serde_json::json;
use std::io::BufRead;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_to_a_run_being_restored_is_retryable_then_taken() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    // Many journaled steps before the question: its replay takes a while.
    let mut steps: Vec<serde_json::Value> = (0..3000)
        .map(|i| json!({ "write": [format!("f{}", i % 8), "x"] }))
        .collect();
    steps.push(json!({ "approve": "may I?" }));
    let mut child = cairn_bin()
        .args(["run", "--json", "--prompt"])
        .arg(serde_json::to_string(&steps).unwrap())
        .arg("--home")
        .arg(&home)
        .arg(fixture("parent"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut decision = None;
    for line in stdout.lines() {
        let Ok(line) = line else { break };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if v["payload"]["event"]["type"] == "decision_requested" {
            decision = v["payload"]["event"]["decision_id"]
                .as_str()
                .map(str::to_string);
            break;
        }
    }
    let decision: cairn::DecisionId = decision.expect("the run asked").parse().unwrap();
    let _ = child.kill();
    child.wait().unwrap();

    // The next owner restores the run by replay; answer at once.
    let rt = Runtime::open(RuntimeConfig::new(&home)).await.unwrap();
    let t = Instant::now();
    let mut refused = 0;
    loop {
        match rt.decide(&decision, json!({"approved": true})).await {
            Ok(()) => break,
            Err(RuntimeError::Restoring { .. }) => refused += 1,
            Err(e) => panic!("answered {} after {refused} retries: {e}", e.code()),
        }
        assert!(t.elapsed() < Duration::from_secs(60), "never taken");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("answered after {refused} `restoring` refusals");
    let run = rt
        .live_runs()
        .first()
        .map(|(_, r)| *r)
        .expect("the restored run");
    let facts = rt.wait(run).await.unwrap();
    assert_eq!(facts.status, cairn::RunStatus::Finished, "{facts:?}");
    rt.shutdown(Duration::from_secs(5)).await;
}
