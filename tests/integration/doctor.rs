//! `cairn doctor`: every planted problem named, exit 1.

use serde_json::{Value, json};
use std::time::Duration;

/// Every problem `doctor` knows, planted in one home through the CLI and a
/// killed server; each is named, and the human output says what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_each_planted_problem_and_exits_1() {
    use super::common::cairn_in;
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ok = |out: std::process::Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    ok(cairn_in(
        &home,
        &[
            "queue",
            "add",
            "tidy",
            "--component",
            "echo",
            "--prompt",
            "tidy up",
        ],
    ));
    ok(cairn_in(&home, &["queue", "work", "--until-idle"]));
    let clean = cairn_in(&home, &["doctor", "--json"]);
    assert_eq!(
        clean.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&clean.stdout)
    );

    // A run of an uploaded component whose file then goes missing.
    let counter = super::common::fixture("counter");
    let out = ok(cairn_in(
        &home,
        &[
            "run",
            counter.to_str().unwrap(),
            "--prompt",
            "2 0",
            "--json",
        ],
    ));
    let counted = super::common::session_of_output(&out.stdout);
    for f in std::fs::read_dir(home.join("components")).unwrap() {
        let f = f.unwrap();
        let digest = format!(
            "sha256:{}",
            f.file_name()
                .to_string_lossy()
                .trim_start_matches("sha256-")
                .trim_end_matches(".wasm")
        );
        if cairn_examples::names()
            .iter()
            .all(|n| cairn_examples::built_in_digest(n) != Some(digest.as_str()))
        {
            std::fs::remove_file(f.path()).unwrap();
        }
    }
    // A session whose journal is damaged.
    let out = ok(cairn_in(
        &home,
        &["run", "echo", "--prompt", "to be damaged", "--json"],
    ));
    let damaged = super::common::session_of_output(&out.stdout);
    let segment = std::fs::read_dir(home.join("workers"))
        .unwrap()
        .flat_map(|w| std::fs::read_dir(w.unwrap().path().join("session/segments")).unwrap())
        .map(|f| f.unwrap().path())
        .find(|p| {
            p.extension().is_some_and(|e| e == "jsonl")
                && !p.to_string_lossy().ends_with(".trace.jsonl")
                && std::fs::read_to_string(p).unwrap().contains(&damaged)
        })
        .unwrap();
    let mut text = std::fs::read_to_string(&segment).unwrap();
    text.insert_str(text.find('\n').unwrap() + 1, "{\"not\": \"an entry\"}\n");
    std::fs::write(&segment, text).unwrap();
    // The queue worker's worktree identity removed.
    let records: Value =
        serde_json::from_slice(&std::fs::read(home.join("queue/sessions.state.json")).unwrap())
            .unwrap();
    let tidy = records["sessions"]["worker:tidy:r1"]["worker_id"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::remove_file(home.join("workers").join(&tidy).join("worktree.json")).unwrap();
    // The ledger says the card ended done twice, by two runs (work done
    // twice, as a crash in the queue's end once caused).
    let ledger = home.join("queue/ledger.jsonl");
    let first = std::fs::read_to_string(&ledger).unwrap();
    let mut again: Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    again["run_id"] = json!("01a23d00-0000-7000-8000-000000000001");
    std::fs::write(&ledger, format!("{first}{again}\n")).unwrap();
    // A run interrupted by kill -9 (its server's lock record left behind).
    let served = super::common::serve(&home);
    let http = reqwest::Client::new();
    let started: Value = http
        .post(format!("{}/v1/runs", served.url))
        .json(&json!({ "component": "approval", "prompt": "left waiting" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run = started["run_id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(served);

    let out = cairn_in(&home, &["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let has = |kind: &str, subject: &str| {
        report["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["kind"] == kind && p["subject"].as_str().unwrap().contains(subject))
    };
    assert!(has("missing_component", "sha256:"), "{report}");
    assert!(has("corrupt_session", &damaged), "{report}");
    assert!(has("missing_worktree", "worker:tidy:r1"), "{report}");
    assert!(has("interrupted_run", &run), "{report}");
    assert!(has("double_run", "worker:tidy:r1"), "{report}");
    assert!(
        !has("corrupt_session", &counted),
        "only the damaged session is corrupt: {report}"
    );
    assert_eq!(report["notes"][0]["kind"], "stale_lock", "{report}");
    assert_eq!(report["queue"]["rows"]["done"], 1);
    let human = cairn_in(&home, &["doctor"]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("attention: the problems above need a human"),
        "{text}"
    );
    let status = ok(cairn_in(&home, &["status"]));
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("workers") && status.contains("problem(s): run `cairn doctor`"),
        "{status}"
    );
}
