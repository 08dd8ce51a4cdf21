//! Seed 002's `Preparing` lasts until the controller's instance is made
//! (issue 38, item 7): a controller whose set-up code runs long at
//! instantiation reads `preparing` all the while — before, a run read
//! `running` as soon as its worktree was laid out.

use crate::common::{fixture, serve};
use crate::scale_out::{client, wait_finished, wait_for};
use serde_json::{Value, json};
use std::time::Duration;

#[test]
fn a_session_reads_preparing_while_its_controller_is_instantiated() {
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
    let digest = uploaded["digest"].as_str().unwrap();
    // The first run leaves a `slow-start` in the worktree: the next
    // instance of `parent` looks for a `go` file (up to 10⁹ times) while it
    // is made, before its controller can start.
    let first: Value = http
        .post(format!("{}/v1/runs", served.url))
        .json(&json!({
            "component": digest,
            "session": "slow",
            "prompt": json!([{"write": ["slow-start", "1000000000"]}]).to_string(),
        }))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let run = first["run_id"].as_str().unwrap();
    wait_finished(&served.url, run, "the first run", Duration::from_secs(60));
    let second: Value = http
        .post(format!("{}/v1/runs", served.url))
        .json(&json!({"session": "slow", "prompt": json!([{"read": "slow-start"}]).to_string()}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let second_run = second["run_id"].as_str().unwrap().to_string();
    let state = || -> (String, Value) {
        let v: Value = http
            .get(format!("{}/v1/sessions/slow", served.url))
            .send()
            .unwrap()
            .json()
            .unwrap();
        (v["state"]["state"].as_str().unwrap_or("").to_string(), v)
    };
    // Held in its constructor: `preparing`, read after read, and the run
    // says so too.
    wait_for("the run to prepare", Duration::from_secs(30), || {
        state().0 == "preparing"
    });
    for _ in 0..20 {
        let (now, v) = state();
        assert_eq!(now, "preparing", "while it is instantiated: {v}");
        std::thread::sleep(Duration::from_millis(25));
    }
    let r: Value = http
        .get(format!("{}/v1/runs/{second_run}", served.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(r["state"], "preparing", "{r}");
    // Let it go: the controller starts, and the run finishes.
    let (_, v) = state();
    let worker = v["worker_id"].as_str().unwrap();
    std::fs::write(
        home.join("workers")
            .join(worker)
            .join("runs/2/artifacts/go"),
        "",
    )
    .unwrap();
    wait_finished(
        &served.url,
        &second_run,
        "the second run",
        Duration::from_secs(60),
    );
}
