//! The shared store rides out its database restarting: runs writing while
//! PostgreSQL goes away and comes back go on and finish, decisions answered
//! during the outage are recorded and delivered once it is back, and no
//! acknowledged run ends `failed {storage}` (issue 40, item 3). Before, a
//! `pg_ctl restart -m fast` under load failed every run that was writing,
//! and answers got `500 internal`.

use crate::scale_out::{Instance, client, rows, run_state, shared_store, types, wait_for};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Start `component` with `prompt` in session `session` at `base`: its run.
fn start(base: &str, component: &str, prompt: &str, session: &str) -> String {
    let r = client()
        .post(format!("{base}/v1/runs"))
        .json(&json!({"component": component, "prompt": prompt, "session": session}))
        .send()
        .unwrap();
    let status = r.status();
    let v: Value = r.json().unwrap();
    assert!(status.is_success(), "{status} {v}");
    v["run_id"].as_str().unwrap().to_string()
}

#[test]
fn runs_and_answers_ride_out_a_database_restart() {
    let (tokio, pg, store, dir) = shared_store();
    let node = Instance::start(dir.path(), "solo", &store);
    let base = node.url.clone();
    // Two runs waiting on their approvals.
    let asked: Vec<(String, String)> = (0..2)
        .map(|i| {
            let session = format!("ask-{i}");
            let run = start(&base, "approval", "ship it", &session);
            let mut decision = None;
            wait_for("the approval to be asked", Duration::from_secs(20), || {
                let v: Value = client()
                    .get(format!("{base}/v1/decisions?session={session}"))
                    .send()
                    .unwrap()
                    .json()
                    .unwrap();
                decision = v[0]["decision_id"].as_str().map(str::to_string);
                decision.is_some()
            });
            (run, decision.unwrap())
        })
        .collect();
    // Three runs emitting as fast as they can (the component compiled
    // first, so they start together).
    start(&base, "bench-emit", "1", "warm-up");
    let emitting: Vec<String> = (0..3)
        .map(|i| start(&base, "bench-emit", "90000", &format!("emit-{i}")))
        .collect();
    wait_for(
        "the emitters to be writing",
        Duration::from_secs(30),
        || {
            let v: Value = client()
                .get(format!("{base}/v1/sessions/emit-2"))
                .send()
                .unwrap()
                .json()
                .unwrap();
            v["last_seq"].as_u64() > Some(100)
        },
    );
    let live_at_stop = emitting
        .iter()
        .filter(|run| run_state(&base, run)["facts"]["status"].is_null())
        .count();
    pg.stop_server();
    let stopped = Instant::now();
    // Answers sent while the database is away: each waits for it.
    let answers: Vec<_> = asked
        .iter()
        .map(|(_, decision)| {
            let url = format!("{base}/v1/decisions/{decision}");
            std::thread::spawn(move || {
                let r = client()
                    .post(url)
                    .json(&json!({"value": {"approved": true}}))
                    .send()
                    .unwrap();
                (r.status().as_u16(), r.text().unwrap_or_default())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    pg.start_server();
    eprintln!(
        "database away {} ms, {live_at_stop} of {} emitters live at the stop",
        stopped.elapsed().as_millis(),
        emitting.len()
    );
    assert!(
        live_at_stop > 0,
        "no emitter was writing when the database went away: {:?}",
        emitting
            .iter()
            .map(|r| run_state(&base, r))
            .collect::<Vec<_>>()
    );
    for answer in answers {
        let (status, body) = answer.join().unwrap();
        assert!(
            (200..300).contains(&status),
            "an answer during the outage: {status} {body}"
        );
    }
    for run in asked.iter().map(|(r, _)| r).chain(&emitting) {
        let mut last = Value::Null;
        wait_for("every run to end", Duration::from_secs(90), || {
            last = run_state(&base, run);
            last["facts"]["status"].is_string()
        });
        if last["facts"]["status"] != "finished" {
            let session = last["session_id"].as_str().unwrap_or_default().to_string();
            let ending = rows(&tokio, &store)
                .remove(&session)
                .and_then(|r| r.into_values().last());
            panic!("run {run} did not finish: {last}\nits last entry: {ending:?}");
        }
    }
    // Every journal dense, each run ended once.
    for (session, rows) in rows(&tokio, &store) {
        assert_eq!(
            rows.keys().copied().collect::<Vec<_>>(),
            (1..=rows.len() as u64).collect::<Vec<_>>(),
            "{session}: seqs dense"
        );
        let t = types(&rows);
        assert_eq!(
            t.iter().filter(|t| *t == "finished").count(),
            1,
            "{session}"
        );
        assert!(!t.iter().any(|t| t == "failed"), "{session}: {t:?}");
    }
    let log = node.log();
    assert!(log.contains("the database is away"), "{log}");
}
