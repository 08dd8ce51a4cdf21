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

/// `resume_on_start` (issue 38 item 4): a parked run that asked for it is
/// resumed when the host next starts (after a clean stop too), and asks
/// again; one that did not stays parked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_run_asking_for_it_is_resumed_at_the_next_start() {
    use cairn::journal::event::{Liveness, LivenessPolicy};
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rt = runtime_with(&home, None).await;
    let park = |prompt: &str, resume: Option<bool>| {
        let mut req = start_req("approval", prompt);
        req.liveness = Liveness {
            policy: LivenessPolicy::Park,
            grace_ms: 0,
        };
        req.resume_on_start = resume;
        req
    };
    let resumed = rt.start(park("resume me", Some(true))).await.unwrap();
    let stays = rt.start(park("leave me", None)).await.unwrap();
    for run in [resumed.run_id, stays.run_id] {
        let facts = rt.wait(run).await.unwrap();
        assert_eq!(facts.status, cairn::RunStatus::Parked, "{facts:?}");
    }
    rt.shutdown(Duration::from_secs(5)).await;
    drop(rt);

    let rt = Runtime::open(RuntimeConfig::new(&home)).await.unwrap();
    let live = rt.live_runs();
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0].0, resumed.session_id);
    let t = Instant::now();
    let asked = loop {
        if let Some(p) = rt.pending_decisions(Some(&resumed.session_id)).first() {
            break p.decision_id.clone();
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the resumed run never asked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    rt.decide(&asked, json!({"approved": true})).await.unwrap();
    let facts = rt.wait(live[0].1).await.unwrap();
    assert_eq!(facts.status, cairn::RunStatus::Finished);
    assert_eq!(facts.resumes, Some(resumed.run_id));
    // The other is still parked, untouched.
    let summary = rt.summary(&stays.session_id).await.unwrap();
    assert_eq!(summary.live_run, None);
    assert_eq!(
        summary.last_run.map(|f| f.status),
        Some(cairn::RunStatus::Parked)
    );
    rt.shutdown(Duration::from_secs(5)).await;
}
