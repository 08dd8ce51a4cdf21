//! Durable time (issue 35, item 4): a timer's readiness is decided by the
//! journal. A sleep's clock moves to its due time (`elapsed()` across a
//! sleep is the sleep); a controller that counts its looks at a timer
//! until it fires replays with the same count, offline and after a
//! `kill -9` (before: it diverged, and the restore left the worker stale);
//! a restore waits only until a timer's journaled due time.

use crate::common::{cairn_in, fixture, serve, session_of_output};
use crate::scale_out::{client, wait_for};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The `step` results of a run's custom events, in order.
fn steps(home: &Path, session: &str) -> Vec<Value> {
    let out = cairn_in(home, &["events", session, "--json"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["payload"]["event"]["name"] == "step")
        .map(|v| v["payload"]["event"]["data"]["result"].clone())
        .collect()
}

#[test]
fn a_sleep_moves_the_clock_and_a_polled_timer_replays_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let parent = fixture("parent");
    // A timer due past any clock's range is looked at like any other: not
    // ready.
    let out = cairn_in(
        &home,
        &[
            "run",
            parent.to_str().unwrap(),
            "--prompt",
            &json!([{"sleep": 300}, {"poll_timer": 5}, {"poll_timer": 0}, {"peek_timer": u64::MAX}])
                .to_string(),
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let session = session_of_output(&out.stdout);
    let results = steps(&home, &session);
    // Across a 300 ms sleep, the guest's monotonic clock moved at least
    // 300 ms (before: 0).
    let slept = results[0].as_u64().unwrap();
    assert!((300..2_000).contains(&slept), "{results:?}");
    // A 5 ms timer is looked at many times before it fires; a zero one is
    // ready at the second look.
    assert!(results[1].as_u64().unwrap() > 0, "{results:?}");
    assert_eq!(results[2], 1, "{results:?}");
    assert_eq!(results[3], false, "{results:?}");
    let replay = cairn_in(&home, &["replay", &session, "--json"]);
    let report: Value = serde_json::from_slice(&replay.stdout).unwrap();
    assert_eq!(report["runs"][0]["result"], "matched", "{report}");
}

#[test]
fn a_timer_across_a_kill_fires_at_its_due_time_and_the_worker_stays_usable() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let served = serve(&home);
    let http = client();
    let uploaded: Value = http
        .post(format!("{}/v1/components", served.url))
        .body(std::fs::read(fixture("parent")).unwrap())
        .send()
        .unwrap()
        .json()
        .unwrap();
    let digest = uploaded["digest"].as_str().unwrap().to_string();
    // Looks at a short timer, then sleeps 3 s.
    let started: Value = http
        .post(format!("{}/v1/runs", served.url))
        .json(&json!({
            "component": digest,
            "session": "timed",
            "prompt": json!([{"poll_timer": 3}, {"sleep": 3000}]).to_string(),
        }))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let run = started["run_id"].as_str().unwrap().to_string();
    let journal = |base: &str| -> Vec<Value> {
        let page: Value = client()
            .get(format!(
                "{base}/v1/sessions/timed/journal?after=0&limit=1000"
            ))
            .send()
            .unwrap()
            .json()
            .unwrap();
        page["entries"].as_array().cloned().unwrap_or_default()
    };
    let kind = |e: &Value| {
        e["payload"]["event"]["type"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    // The sleep's timer is set (and committed) before the kill.
    let mut due_ms = 0;
    wait_for(
        "the sleep's timer to be journaled",
        Duration::from_secs(30),
        || {
            let entries = journal(&served.url);
            let set: Vec<&Value> = entries.iter().filter(|e| kind(e) == "timer_set").collect();
            if set.len() == 2 {
                due_ms = set[1]["payload"]["event"]["due_ms"].as_u64().unwrap();
                return true;
            }
            false
        },
    );
    std::thread::sleep(Duration::from_millis(500));
    drop(served);
    let restarted = Instant::now();
    let served = serve(&home);
    let finished_at = loop {
        let r: Value = client()
            .get(format!("{}/v1/runs/{run}", served.url))
            .send()
            .unwrap()
            .json()
            .unwrap();
        if r["state"] != "running" && r["state"] != "preparing" {
            assert_eq!(r["state"], "finished", "{r}");
            break now_ms();
        }
        assert!(restarted.elapsed() < Duration::from_secs(30), "{r}");
        std::thread::sleep(Duration::from_millis(20));
    };
    // Fired at its journaled due time (the restore did not wait 3 s anew).
    let late = finished_at.saturating_sub(due_ms);
    assert!(
        finished_at + 250 >= due_ms && late < 1_500,
        "due at {due_ms}, finished at {finished_at}"
    );
    let entries = journal(&served.url);
    let kinds: Vec<String> = entries.iter().map(kind).collect();
    assert!(
        kinds.contains(&"resumed_by_replay".to_string()),
        "{kinds:?}"
    );
    // The worker is usable: another run of the session finishes.
    let again: Value = http
        .post(format!("{}/v1/runs", served.url))
        .json(&json!({"session": "timed", "prompt": json!([{"poll_timer": 1}]).to_string()}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    crate::scale_out::wait_finished(
        &served.url,
        again["run_id"].as_str().unwrap(),
        "a run after the restore",
        Duration::from_secs(30),
    );
}
