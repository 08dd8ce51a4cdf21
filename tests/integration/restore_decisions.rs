//! A decision of a run being restored (issue 40 item 8): right after a
//! restart, before the replay has asked again, an answer was `404` (no
//! pending decision); now it is `409 restoring` (retry) until the replay
//! asks, then it is taken, and the run goes on with it.

use crate::common::*;
use cairn_runtime::runtime::{Runtime, RuntimeConfig, RuntimeError};
use serde_json::json;
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
    // Started headless (liveness `continue`: nobody's leaving decides
    // anything) at a server killed while the run waits.
    let served = serve(&home);
    let http = reqwest::Client::new();
    let uploaded: serde_json::Value = http
        .post(format!("{}/v1/components", served.url))
        .body(std::fs::read(fixture("parent")).unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let r = http
        .post(format!("{}/v1/runs", served.url))
        .json(&json!({"component": uploaded["digest"], "prompt": serde_json::to_string(&steps).unwrap()}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let t = Instant::now();
    let decision: cairn_runtime::DecisionId = loop {
        let pending: serde_json::Value = http
            .get(format!("{}/v1/decisions", served.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if let Some(id) = pending[0]["decision_id"].as_str() {
            break id.parse().unwrap();
        }
        assert!(t.elapsed() < Duration::from_secs(60), "the run never asked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    drop(served);

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
    assert_eq!(
        facts.status,
        cairn_runtime::RunStatus::Finished,
        "{facts:?}"
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

/// `resume_on_start` (issue 38 item 4): a parked run that asked for it is
/// resumed when the host next starts (after a clean stop too), and asks
/// again; one that did not stays parked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_run_asking_for_it_is_resumed_at_the_next_start() {
    use cairn_runtime::journal::event::{Liveness, LivenessPolicy};
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
        assert_eq!(facts.status, cairn_runtime::RunStatus::Parked, "{facts:?}");
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
    assert_eq!(facts.status, cairn_runtime::RunStatus::Finished);
    assert_eq!(facts.resumes, Some(resumed.run_id));
    // The other is still parked, untouched.
    let summary = rt.summary(&stays.session_id).await.unwrap();
    assert_eq!(summary.live_run, None);
    assert_eq!(
        summary.last_run.map(|f| f.status),
        Some(cairn_runtime::RunStatus::Parked)
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

/// The liveness policy decides after the claimant died with its host
/// (issue 38 item 1): a run whose claimant was connected when `serve` was
/// killed is restored by replay, its lost claimant journaled `expired`,
/// the claims exhausted and, its policy `cancel`, the run cancelled
/// (before: restored and left live and unclaimed, nothing decided).
#[test]
fn a_claimant_lost_with_its_host_lets_the_liveness_policy_decide() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    // A lost claimant's lease: half a second from the restart.
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("cairn.toml"), "[store]\nlease_ttl_ms = 500\n").unwrap();
    let first = serve(&home);
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let started: serde_json::Value = http
        .post(format!("{}/v1/runs", first.url))
        .json(&json!({"component": "approval", "prompt": "hold", "liveness": "cancel"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let session = started["session_id"].as_str().unwrap().to_string();
    let run = started["run_id"].as_str().unwrap().to_string();
    // The claimant: an event stream that claims the session, kept open.
    let url = format!(
        "{}/v1/sessions/{session}/events?after=0&claim=true",
        first.url
    );
    let claimant = std::thread::spawn(move || {
        let client = reqwest::blocking::Client::new();
        if let Ok(mut r) = client.get(url).send() {
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        }
    });
    let types = |base: &str| -> Vec<serde_json::Value> {
        let page: serde_json::Value = reqwest::blocking::get(format!(
            "{base}/v1/sessions/{session}/journal?after=0&limit=1000"
        ))
        .unwrap()
        .json()
        .unwrap();
        page["entries"].as_array().cloned().unwrap_or_default()
    };
    let kind = |e: &serde_json::Value| {
        e["payload"]["event"]["type"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let t = Instant::now();
    loop {
        let entries = types(&first.url);
        let claimed = entries.iter().any(|e| kind(e) == "observer_attached");
        let asked = entries.iter().any(|e| kind(e) == "decision_requested");
        if claimed && asked {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{entries:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // kill -9 of the server, the claimant's connection with it.
    drop(first);
    let _ = claimant.join();
    let second = serve(&home);
    let t = Instant::now();
    let entries = loop {
        let entries = types(&second.url);
        if entries.iter().any(|e| kind(e) == "cancelled") {
            break entries;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the restored run was never decided: {:?}",
            entries
                .iter()
                .map(|e| e["payload"]["event"].to_string())
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let kinds: Vec<String> = entries.iter().map(kind).collect();
    let at = |k: &str| {
        kinds
            .iter()
            .rposition(|x| x == k)
            .unwrap_or_else(|| panic!("no {k}: {kinds:?}"))
    };
    let expired = entries
        .iter()
        .rposition(|e| {
            kind(e) == "observer_detached" && e["payload"]["event"]["because"] == "expired"
        })
        .unwrap_or_else(|| panic!("no expired detach: {kinds:?}"));
    // Restored (the detach is the restart's: its observer died with the
    // first server), then decided.
    assert!(kinds.iter().any(|k| k == "resumed_by_replay"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| *k == "observer_attached").count(),
        1
    );
    assert!(expired < at("claims_exhausted"), "{kinds:?}");
    assert!(at("claims_exhausted") < at("liveness_decided"), "{kinds:?}");
    assert!(at("liveness_decided") < at("cancelled"), "{kinds:?}");
    let cancelled = &entries[at("cancelled")];
    assert_eq!(cancelled["run_id"], run.as_str());
}

/// A decision's timeout keeps its journaled deadline across a restore
/// (issue 35 item 4): a 3 s timeout whose host is killed 1 s in times out
/// 3 s after the request, not a whole timeout after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_timeout_keeps_its_deadline_across_a_kill() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let served = serve(&home);
    let http = reqwest::Client::new();
    let counter = crate::clients::upload(&served.url, fixture("counter")).await;
    // Emit 1, ask with a 3 s timeout (the default answer approves), emit 2.
    let started: serde_json::Value = http
        .post(format!("{}/v1/runs", served.url))
        .json(&json!({"component": counter, "prompt": "2 1 3000"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let t = Instant::now();
    while get_json(&http, &format!("{}/v1/decisions", served.url))
        .await
        .as_array()
        .is_none_or(|d| d.is_empty())
    {
        assert!(t.elapsed() < Duration::from_secs(30), "the run never asked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    drop(served); // kill -9, a second into the wait
    let served = serve(&home);
    let run = started["run_id"].as_str().unwrap();
    let t = Instant::now();
    loop {
        let r = get_json(&http, &format!("{}/v1/runs/{run}", served.url)).await;
        if r["state"] == "finished" {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(served);
    let session = started["session_id"].as_str().unwrap();
    let lines: Vec<serde_json::Value> =
        String::from_utf8_lossy(&cairn_in(&home, &["export", session]).stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    let at = |t: &str| {
        lines
            .iter()
            .find(|l| l["payload"]["event"]["type"] == t)
            .map(|l| l["at_ms"].as_u64().unwrap())
            .unwrap_or_else(|| panic!("no {t} in {lines:?}"))
    };
    // worker.json says what last restored the worker (seed 000's restore
    // request): this run, after the kill.
    let worker_json = std::fs::read_dir(home.join("workers"))
        .unwrap()
        .map(|w| w.unwrap().path().join("worker.json"))
        .find(|p| p.exists())
        .unwrap();
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&worker_json).unwrap()).unwrap();
    assert_eq!(record["request"]["kind"], "restore", "{record}");
    assert_eq!(record["request"]["run"], started["run_id"], "{record}");
    let waited = at("decision_recorded") - at("decision_requested");
    assert!(
        (2900..=3750).contains(&waited),
        "the timeout fired {waited} ms after the request (due at 3000)"
    );
}

/// A decision answered and journaled is always delivered (issue 40 item
/// 3): with the broker's wake-up lost (`CAIRN_FAULT=decision-undelivered`
/// drops it after the answer is journaled, as a lost broker would), the
/// waiting run reads its answer from the journal and goes on with it —
/// before, it ended `failed` "the decision broker went away".
#[test]
fn an_answer_whose_wake_up_is_lost_is_read_from_the_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let served = serve_with(&home, &[("CAIRN_FAULT", "decision-undelivered")]).unwrap();
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let started: serde_json::Value = http
        .post(format!("{}/v1/runs", served.url))
        .json(&json!({"component": "approval", "prompt": "ship it?"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let session = started["session_id"].as_str().unwrap().to_string();
    let t = Instant::now();
    let decision = loop {
        let pending: serde_json::Value = http
            .get(format!("{}/v1/decisions?session={session}", served.url))
            .send()
            .unwrap()
            .json()
            .unwrap();
        if let Some(id) = pending[0]["decision_id"].as_str() {
            break id.to_string();
        }
        assert!(t.elapsed() < Duration::from_secs(30), "the run never asked");
        std::thread::sleep(Duration::from_millis(50));
    };
    let answered = http
        .post(format!("{}/v1/decisions/{decision}", served.url))
        .json(&json!({"value": {"approved": true}}))
        .send()
        .unwrap();
    assert!(
        answered.status().is_success(),
        "{}",
        answered.text().unwrap()
    );
    let t = Instant::now();
    let entries = loop {
        let page: serde_json::Value = http
            .get(format!(
                "{}/v1/sessions/{session}/journal?after=0&limit=1000",
                served.url
            ))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let entries = page["entries"].as_array().cloned().unwrap_or_default();
        let ended = |e: &serde_json::Value| {
            ["finished", "failed", "cancelled"]
                .iter()
                .any(|t| e["payload"]["event"]["type"] == *t)
        };
        if entries.iter().any(ended) {
            break entries;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "the run never ended");
        std::thread::sleep(Duration::from_millis(50));
    };
    let kinds: Vec<&str> = entries
        .iter()
        .filter_map(|e| e["payload"]["event"]["type"].as_str())
        .collect();
    assert!(kinds.contains(&"decision_recorded"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"finished"), "{entries:?}");
}
