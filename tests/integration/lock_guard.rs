//! A lock file removed or replaced under a live server (a tmp cleaner, an
//! operator clearing "stale" locks) lets a second owner in: the first one
//! notices within a moment and writes nothing more — its answer is
//! `503 lost_authority` — while the second restores the run by replay and
//! takes the answer. The journal holds the second owner's answer only.

use crate::common::*;
use crate::scale_out::{entry_kind as kind, journal_entries};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn pending(http: &reqwest::blocking::Client, base: &str) -> String {
    let t = Instant::now();
    loop {
        let list: Value = http
            .get(format!("{base}/v1/decisions"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        if let Some(id) = list
            .as_array()
            .and_then(|l| l.first())
            .and_then(|d| d["decision_id"].as_str())
        {
            return id.to_string();
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no pending decision at {base}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn lost_lock_case(replace: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let first = serve(&home);
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let started: Value = http
        .post(format!("{}/v1/runs", first.url))
        .json(&json!({"component": "approval", "prompt": "hold"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let session = started["session_id"].as_str().unwrap().to_string();
    let decision = pending(&http, &first.url);
    // The lock file goes (or is swapped for another) under the live server.
    let lock = home.join("cairn.lock");
    if replace {
        let fresh = home.join("cairn.lock.new");
        std::fs::write(&fresh, b"{}").unwrap();
        std::fs::rename(&fresh, &lock).unwrap();
    } else {
        std::fs::remove_file(&lock).unwrap();
    }
    // The owner notices (its health says so) before anything is answered.
    let t = Instant::now();
    loop {
        let health = http.get(format!("{}/healthz", first.url)).send().unwrap();
        if health.status().as_u16() == 503 {
            let body: Value = health.json().unwrap();
            assert_eq!(body["error"]["code"], "lost_authority", "{body}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the owner never noticed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let refused = http
        .post(format!("{}/v1/decisions/{decision}", first.url))
        .json(&json!({"value": {"approved": true, "reason": "from the first"}}))
        .send()
        .unwrap();
    let status = refused.status().as_u16();
    let body: Value = refused.json().unwrap();
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("lost_authority")),
        "{body}"
    );
    // A second owner gets in once the first one's heartbeat is stale (it
    // stopped beating when it noticed), restores the run and takes the answer.
    let t = Instant::now();
    let second = loop {
        match serve_with(&home, &[]) {
            Ok(s) => break s,
            Err(err) => {
                assert!(
                    err.contains("served by pid") || err.contains("pid"),
                    "{err}"
                );
                assert!(t.elapsed() < Duration::from_secs(15), "{err}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    let decision = pending(&http, &second.url);
    let ok = http
        .post(format!("{}/v1/decisions/{decision}", second.url))
        .json(&json!({"value": {"approved": true, "reason": "from the second"}}))
        .send()
        .unwrap();
    assert!(ok.status().is_success(), "{}", ok.text().unwrap());
    let t = Instant::now();
    let entries = loop {
        let entries = journal_entries(&second.url, &session);
        if entries.iter().any(|e| kind(e) == "finished") {
            break entries;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "{entries:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = serde_json::to_string(&entries).unwrap();
    assert!(text.contains("from the second"), "{text}");
    assert!(
        !text.contains("from the first"),
        "the first owner wrote after losing the lock: {text}"
    );
    let recorded = entries
        .iter()
        .filter(|e| kind(e) == "decision_recorded")
        .count();
    assert_eq!(recorded, 1, "{text}");
    // The first server keeps refusing writes.
    let again = http
        .post(format!("{}/v1/runs", first.url))
        .json(&json!({"component": "echo", "prompt": "x"}))
        .send()
        .unwrap();
    assert_eq!(again.status().as_u16(), 503, "{}", again.text().unwrap());
}

#[test]
fn a_removed_lock_file_stops_the_owner_writing() {
    lost_lock_case(false);
}

#[test]
fn a_replaced_lock_file_stops_the_owner_writing() {
    lost_lock_case(true);
}

/// A next owner that takes a lock file made anew still refuses the home
/// while the heartbeat names another live process and is fresh, and takes
/// it once the heartbeat is stale or its process gone.
#[test]
fn a_fresh_heartbeat_of_a_live_process_keeps_the_home_busy() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    // Another live process, as the heartbeat names it.
    let mut other = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let holder = json!({"version": 1, "pid": other.id(), "command": "serve", "started_at_ms": 1});
    std::fs::write(home.join("cairn.owner"), format!("{holder}\n")).unwrap();
    let out = cairn_in(&home, &["rm", "no-such-session"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&other.id().to_string()),
        "the refusal names the owner: {err}"
    );
    // Its process gone: the heartbeat keeps nobody out.
    other.kill().unwrap();
    other.wait().unwrap();
    let out = cairn_in(&home, &["rm", "no-such-session"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(2), "{err}");
    // A live process again, but a stale heartbeat: taken too.
    let mut other = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let holder = json!({"version": 1, "pid": other.id(), "command": "serve", "started_at_ms": 1});
    let owner = home.join("cairn.owner");
    std::fs::write(&owner, format!("{holder}\n")).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&owner)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(10))
        .unwrap();
    let out = cairn_in(&home, &["rm", "no-such-session"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(2), "{err}");
    let _ = other.kill();
    let _ = other.wait();
}
