//! Idle eviction (issue 42, memory per waiting execution): a run whose
//! controller waits on a timer at least `[runs] evict_idle_ms` long gives
//! its instance up and is restored by replay into a new generation shortly
//! before the timer is due — on time, with its worktree, offline-replayable;
//! a cancel reaches it at once; a `kill -9` meanwhile restores it like any
//! interrupted run.

use crate::common::{Served, cairn_in, fixture, serve};
use crate::scale_out::{
    client, entry_kind as kind, journal_entries as journal, run_state, wait_finished, wait_for,
};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A server on a new home whose runs are evicted after `ms` of waiting
/// (the temp dir holding the home, the home, the server).
fn serve_evicting(ms: u64) -> (tempfile::TempDir, PathBuf, Served) {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("cairn.toml"),
        format!("[runs]\nevict_idle_ms = {ms}\n"),
    )
    .unwrap();
    let served = serve(&home);
    (tmp, home, served)
}

/// Wait until `n` runs are out of memory at `base`.
fn wait_evicted(base: &str, n: f64) {
    wait_for("the run to be evicted", Duration::from_secs(20), || {
        metric(base, "cairn_runs_evicted") == Some(n)
    });
}

/// One sample of the server's metrics (`name value` lines).
fn metric(base: &str, name: &str) -> Option<f64> {
    let text = client()
        .get(format!("{base}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    text.lines().find_map(|l| {
        let (n, v) = l.split_once(' ')?;
        (n == name).then(|| v.trim().parse().ok()).flatten()
    })
}

fn start(base: &str, session: &str, prompt: Value) -> String {
    let uploaded: Value = client()
        .post(format!("{base}/v1/components"))
        .body(std::fs::read(fixture("parent")).unwrap())
        .send()
        .unwrap()
        .json()
        .unwrap();
    let started: Value = client()
        .post(format!("{base}/v1/runs"))
        .json(&json!({
            "component": uploaded["digest"],
            "session": session,
            "prompt": prompt.to_string(),
        }))
        .send()
        .unwrap()
        .json()
        .unwrap();
    started["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no run: {started}"))
        .to_string()
}

/// The `step` results of the session's custom events, in order.
fn steps(entries: &[Value]) -> Vec<Value> {
    entries
        .iter()
        .filter(|v| v["payload"]["event"]["name"] == "step")
        .map(|v| v["payload"]["event"]["data"]["result"].clone())
        .collect()
}

#[test]
fn a_run_waiting_on_a_long_timer_leaves_memory_and_wakes_on_time_by_replay() {
    let (_tmp, home, served) = serve_evicting(1_000);
    let base = served.url.clone();
    let run = start(
        &base,
        "napping",
        json!([
            {"write": ["notes.txt", "before"]},
            {"sleep": 3000},
            {"read": "notes.txt"},
            {"write": ["after.txt", "x"]}
        ]),
    );
    // Out of memory while it waits, and still running to everyone else.
    wait_evicted(&base, 1.0);
    assert_eq!(run_state(&base, &run)["state"], "running");
    wait_finished(&base, &run, "the evicted run", Duration::from_secs(30));
    let finished_at = now_ms();
    let entries = journal(&base, "napping");
    let kinds: Vec<String> = entries.iter().map(kind).collect();
    // Restored by replay into a second generation, once.
    assert_eq!(
        kinds.iter().filter(|k| *k == "resumed_by_replay").count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| *k == "generation_reserved").count(),
        2,
        "{kinds:?}"
    );
    // The timer fired at its journaled due time, not a whole wait late.
    let due_ms = entries
        .iter()
        .find(|e| kind(e) == "timer_set")
        .and_then(|e| e["payload"]["event"]["due_ms"].as_u64())
        .expect("a timer_set entry");
    let fired_at = entries
        .iter()
        .find(|e| kind(e) == "timer_fired")
        .and_then(|e| e["at_ms"].as_u64())
        .expect("a timer_fired entry");
    assert!(
        fired_at + 50 >= due_ms && fired_at < due_ms + 1_500 && finished_at >= due_ms,
        "due at {due_ms}, fired at {fired_at}"
    );
    // Each step once in the journal (the replay re-emitted nothing), the
    // sleep a whole sleep on the guest's clock, the worktree the guest wrote
    // before it was evicted there after.
    let results = steps(&entries);
    assert_eq!(results.len(), 4, "{results:?}");
    assert!(
        (3_000..6_000).contains(&results[1].as_u64().unwrap_or(0)),
        "{results:?}"
    );
    assert_eq!(results[2], "before", "{results:?}");
    // The generation it left keeps its logs, not its worktree; the one it
    // was restored into holds what the guest wrote.
    let worker = entries
        .iter()
        .find_map(|e| e["payload"]["event"]["worker_id"].as_str())
        .expect("a generation_reserved entry names the worker");
    let runs = home.join("workers").join(worker).join("runs");
    assert!(runs.join("1").is_dir());
    assert!(!runs.join("1/artifacts").exists());
    assert!(runs.join("2/artifacts/notes.txt").is_file());
    assert_eq!(metric(&base, "cairn_runs_evicted"), Some(0.0));
    assert_eq!(metric(&base, "cairn_run_evictions_total"), Some(1.0));
    // The next run starts from the restored generation's worktree.
    let next = start(&base, "napping", json!([{"read": "after.txt"}]));
    wait_finished(&base, &next, "the next run", Duration::from_secs(30));
    let results = steps(&journal(&base, "napping"));
    assert_eq!(results.last(), Some(&json!("x")), "{results:?}");
    drop(served);
    // Offline, the evicted run replays like any other.
    let replay = cairn_in(&home, &["replay", "napping", "--json"]);
    let report: Value = serde_json::from_slice(&replay.stdout).unwrap_or_else(|_| {
        panic!("{}", String::from_utf8_lossy(&replay.stderr));
    });
    let runs = report["runs"].as_array().expect("runs");
    assert!(runs.iter().all(|r| r["result"] == "matched"), "{report}");
}

#[test]
fn a_cancel_reaches_an_evicted_run_at_once_and_the_session_goes_on() {
    let (_tmp, _home, served) = serve_evicting(500);
    let base = served.url.clone();
    let run = start(&base, "long-nap", json!([{"sleep": 120000}]));
    wait_evicted(&base, 1.0);
    let asked = std::time::Instant::now();
    let r = client()
        .post(format!("{base}/v1/runs/{run}/cancel"))
        .json(&json!({}))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    wait_for("the cancel to end the run", Duration::from_secs(10), || {
        run_state(&base, &run)["state"] == "cancelled"
    });
    assert!(asked.elapsed() < Duration::from_secs(5));
    assert_eq!(metric(&base, "cairn_runs_evicted"), Some(0.0));
    // Nothing was restored to be cancelled: one generation, no replay.
    let kinds: Vec<String> = journal(&base, "long-nap").iter().map(kind).collect();
    assert!(
        !kinds.contains(&"resumed_by_replay".to_string()),
        "{kinds:?}"
    );
    let next = start(&base, "long-nap", json!([{"sleep": 10}]));
    wait_finished(
        &base,
        &next,
        "a run after the cancel",
        Duration::from_secs(30),
    );
}

#[test]
fn an_evicted_run_killed_with_its_host_is_restored_at_the_next_start() {
    let (_tmp, home, served) = serve_evicting(500);
    let run = start(
        &served.url,
        "killed-nap",
        json!([{"sleep": 4000}, {"sleep": 10}]),
    );
    wait_evicted(&served.url, 1.0);
    // `kill -9` (Served's drop) while it is out of memory.
    drop(served);
    let served = serve(&home);
    wait_finished(
        &served.url,
        &run,
        "the restored run",
        Duration::from_secs(30),
    );
    let results = steps(&journal(&served.url, "killed-nap"));
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].as_u64().unwrap_or(0) >= 4_000, "{results:?}");
}

#[test]
fn a_poll_of_a_long_and_a_short_timer_is_not_evicted_past_the_short_one() {
    let (_tmp, _home, served) = serve_evicting(1_000);
    let base = served.url.clone();
    // One poll over a 60 s timer and one shorter than the eviction's wait,
    // then a long sleep alone.
    let run = start(
        &base,
        "racing",
        json!([{"race": [60000, 600]}, {"sleep": 2500}]),
    );
    wait_finished(&base, &run, "the run", Duration::from_secs(30));
    let results = steps(&journal(&base, "racing"));
    // The short timer won, on time (an eviction until the long one's due
    // time would have kept the run a minute).
    assert_eq!(results[0][0], 1, "{results:?}");
    let raced = results[0][1].as_u64().unwrap_or(0);
    assert!((600..3_000).contains(&raced), "{results:?}");
    // Only the sleep that waited alone was evicted.
    assert_eq!(metric(&base, "cairn_run_evictions_total"), Some(1.0));
}

/// A restore replays the poll the short timer won: the long timer's look
/// says "wait" before the short one's journaled fire answers the poll.
/// The guest then works a while still holding both timers (epoch ticks
/// yield meanwhile): it is running, not waiting, and is not evicted until
/// the long timer's due time (before: evicted then, at a yield, so the
/// run stood still for a minute — a full-suite failure of the test above).
#[test]
fn a_replayed_poll_is_not_evicted_on_the_timer_it_did_not_wait_for() {
    let (_tmp, _home, served) = serve_evicting(1_000);
    let base = served.url.clone();
    let run = start(
        &base,
        "replayed-race",
        json!([{"race": [60000, 300], "spin": 300_000_000u64}, {"sleep": 2500}]),
    );
    wait_finished(&base, &run, "the run", Duration::from_secs(30));
    let results = steps(&journal(&base, "replayed-race"));
    assert_eq!(results[0][0], 1, "{results:?}");
    // The sleep's eviction alone, and one restore.
    assert_eq!(metric(&base, "cairn_run_evictions_total"), Some(1.0));
}

/// The pending decision of `session`, once asked.
fn pending_decision(base: &str, session: &str) -> String {
    let mut id = String::new();
    wait_for("the run to ask", Duration::from_secs(30), || {
        let pending: Value = client()
            .get(format!("{base}/v1/decisions?session={session}"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        match pending[0]["decision_id"].as_str() {
            Some(d) => {
                id = d.to_string();
                true
            }
            None => false,
        }
    });
    id
}

#[test]
fn a_run_waiting_on_a_decision_leaves_memory_and_its_answer_restores_it() {
    let (_tmp, home, served) = serve_evicting(500);
    let base = served.url.clone();
    let run = start(
        &base,
        "asking",
        json!([{"write": ["draft.txt", "v1"]}, {"approve": "ship it?"}, {"read": "draft.txt"}]),
    );
    let decision = pending_decision(&base, "asking");
    wait_evicted(&base, 1.0);
    // Still pending and still running to everyone else.
    assert_eq!(pending_decision(&base, "asking"), decision);
    assert_eq!(run_state(&base, &run)["state"], "running");
    let answered = client()
        .post(format!("{base}/v1/decisions/{decision}"))
        .json(&json!({"value": {"approved": true}}))
        .send()
        .unwrap();
    assert!(
        answered.status().is_success(),
        "{}",
        answered.text().unwrap()
    );
    wait_finished(&base, &run, "the answered run", Duration::from_secs(30));
    let entries = journal(&base, "asking");
    let kinds: Vec<String> = entries.iter().map(kind).collect();
    let count = |k: &str| kinds.iter().filter(|x| *x == k).count();
    // Asked once, answered once, restored once by replay.
    assert_eq!(count("decision_requested"), 1, "{kinds:?}");
    assert_eq!(count("decision_recorded"), 1, "{kinds:?}");
    assert_eq!(count("resumed_by_replay"), 1, "{kinds:?}");
    let results = steps(&entries);
    assert_eq!(results.len(), 3, "{results:?}");
    // The guest got the answer given while it was out of memory.
    assert!(
        results[1].as_str().unwrap_or("").starts_with("Approved"),
        "{results:?}"
    );
    assert_eq!(results[2], "v1", "{results:?}");
    assert_eq!(metric(&base, "cairn_runs_evicted"), Some(0.0));
    drop(served);
    let replay = cairn_in(&home, &["replay", "asking", "--json"]);
    let report: Value = serde_json::from_slice(&replay.stdout).unwrap_or_else(|_| {
        panic!("{}", String::from_utf8_lossy(&replay.stderr));
    });
    assert_eq!(report["runs"][0]["result"], "matched", "{report}");
}

/// A run evicted while it waits on a decision whose last claimant then
/// leaves under the `park` policy: the park wakes it, its restore replays
/// to the request and parks there with its checkpoint (asked once, never
/// answered), and a resume counts on from that checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_decision_wait_parks_when_its_claimant_leaves() {
    use cairn_runtime::journal::event::{
        ApprovalRoute, LifecycleEvent, Liveness, LivenessPolicy, RunStatus,
    };
    use cairn_runtime::runtime::{AttachSpec, ComponentRef, StartRun};
    use cairn_runtime::{Payload, Seq};
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rt = crate::common::runtime_with(&home, Some("[runs]\nevict_idle_ms = 300\n")).await;
    let session = rt.create_session(None).await.unwrap().0;
    let claim = rt
        .attach(&session, AttachSpec::claiming_present(Seq(0)))
        .await
        .unwrap();
    let mut req = StartRun::new(ComponentRef::Path(fixture("counter")), "4 2");
    req.session = Some(session.clone());
    req.liveness = Liveness {
        policy: LivenessPolicy::Park,
        grace_ms: 0,
    };
    let run = rt.start(req).await.unwrap().run_id;
    let evicted = |n: &str| {
        rt.render_metrics()
            .lines()
            .any(|l| l == format!("cairn_runs_evicted {n}"))
    };
    let t = std::time::Instant::now();
    while !evicted("1") {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the run waiting on its decision was not evicted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(claim);
    let facts = tokio::time::timeout(Duration::from_secs(30), rt.wait(run))
        .await
        .expect("the evicted run ends once its claimant leaves")
        .unwrap();
    assert_eq!(facts.status, RunStatus::Parked, "{facts:?}");
    assert!(evicted("0"), "the parked run is no longer counted evicted");
    let entries = rt.read(&session, Seq(0)).await.unwrap();
    let kinds: Vec<String> = entries
        .iter()
        .filter_map(|i| i.event())
        .map(crate::runtime::kind)
        .collect();
    let count = |k: &str| kinds.iter().filter(|x| *x == k).count();
    assert_eq!(count("decision_requested"), 1, "{kinds:?}");
    assert_eq!(count("decision_recorded"), 0, "{kinds:?}");
    assert_eq!(count("resumed_by_replay"), 1, "{kinds:?}");
    assert_eq!(count("liveness_decided"), 1, "{kinds:?}");
    assert!(
        entries.iter().filter_map(|i| i.event()).any(|e| matches!(
            &e.payload,
            Payload::Lifecycle(LifecycleEvent::ApprovalRouted {
                route: ApprovalRoute::Parked,
                ..
            })
        )),
        "{kinds:?}"
    );
    let key = facts
        .checkpoint
        .clone()
        .expect("a parked run has a checkpoint");
    let worker = rt.summary(&session).await.unwrap().worker_id;
    let checkpoint = home
        .join("workers")
        .join(worker.to_string())
        .join(format!("session/checkpoints/{key}.bin"));
    assert_eq!(std::fs::read(&checkpoint).unwrap(), b"3 4 2");
    // Resumed, it counts on from the checkpoint (no decision left to ask).
    let resumed = rt.resume(run, None).await.unwrap().run_id;
    let facts = tokio::time::timeout(Duration::from_secs(30), rt.wait(resumed))
        .await
        .expect("the resumed run ends")
        .unwrap();
    assert_eq!(
        (facts.status, facts.resumes),
        (RunStatus::Finished, Some(run))
    );
    rt.shutdown(Duration::from_secs(5)).await;
}
