//! Bulk component updates: every session bound to a component is
//! shadow-replayed against a new one and exactly the compatible ones
//! switch; the report is kept; a crash in the middle leaves each session
//! on the old component or on the new one with its `component_updated`
//! entry, never half.

use crate::common::{cairn_in, fixture, run_to_end};
use cairn_runtime::runtime::RuntimeConfig;
use serde_json::Value;
use std::path::Path;

/// `n` sessions of the built-in `echo`, the first `shouting` of them with
/// prompts `echo-v2` answers differently.
async fn sessions(home: &Path, n: usize, shouting: usize) -> Vec<String> {
    std::fs::create_dir_all(home).unwrap();
    let rt = cairn_cli::open_runtime(RuntimeConfig::load(home, None).unwrap())
        .await
        .unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        let prompt = match i < shouting {
            true => format!("shout number {i}"),
            false => format!("calm number {i}"),
        };
        let (started, _, _) =
            run_to_end(&rt, crate::common::start_req("echo", &prompt), None).await;
        out.push(started.session_id.to_string());
    }
    rt.shutdown(std::time::Duration::from_secs(5)).await;
    out
}

/// Each worker's bound component (`worker.json`) and whether its journal
/// holds a `component_updated` entry, by session.
fn bindings(home: &Path) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for w in std::fs::read_dir(home.join("workers")).unwrap().flatten() {
        let doc: Value =
            serde_json::from_slice(&std::fs::read(w.path().join("worker.json")).unwrap()).unwrap();
        let session = doc["session_id"].as_str().unwrap().to_string();
        let export = cairn_in(home, &["export", &session]);
        let updated = String::from_utf8_lossy(&export.stdout).contains("\"component_updated\"");
        out.push((
            session,
            doc["component"].as_str().unwrap().to_string(),
            updated,
        ));
    }
    out
}

fn update_json(home: &Path, extra: &[&str]) -> (std::process::Output, Value) {
    let v2 = fixture("echo-v2");
    let mut args = vec![
        "update",
        "--from",
        "echo",
        "--to",
        v2.to_str().unwrap(),
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = cairn_in(home, &args);
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_update_switches_exactly_the_compatible_sessions_and_keeps_its_report() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let all = sessions(&home, 50, 10).await;
    // A dry run reports and switches nothing.
    let (out, dry) = update_json(&home, &["--dry-run"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        (
            dry["total"].as_u64(),
            dry["compatible"].as_u64(),
            dry["diverges"].as_u64()
        ),
        (Some(50), Some(40), Some(10)),
        "{dry}"
    );
    assert_eq!(dry["switched"], 0);
    assert!(bindings(&home).iter().all(|(_, _, updated)| !updated));

    let (out, report) = update_json(&home, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["total"], 50, "{report}");
    assert_eq!(report["compatible"], 40);
    assert_eq!(report["diverges"], 10);
    assert_eq!(report["failed"], 0);
    assert_eq!(report["switched"], 40);
    assert_eq!(report["done"], true);
    let to = report["to"].as_str().unwrap().to_string();
    let from = report["from"].as_str().unwrap().to_string();
    // The diverging ones are exactly the shouting sessions, each with the
    // first divergence named.
    let diverged: Vec<&Value> = report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["outcome"] == "diverges")
        .collect();
    for s in &diverged {
        assert!(
            all[..10].contains(&s["session_id"].as_str().unwrap().to_string()),
            "{s}"
        );
        assert!(
            s["message"].as_str().unwrap().contains("diverged at seq"),
            "{s}"
        );
    }
    for (session, bound, updated) in bindings(&home) {
        let shouting = all[..10].contains(&session);
        assert_eq!(&bound, if shouting { &from } else { &to }, "{session}");
        assert_eq!(updated, !shouting, "{session}");
    }
    // The report is kept, and served to the workspace that owns it.
    let id = report["update_id"].as_str().unwrap().to_string();
    let served = crate::common::serve(&home);
    let http = reqwest::Client::new();
    let kept: Value = http
        .get(format!("{}/v1/updates/{id}", served.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(kept["switched"], 40, "{kept}");
    let r = http
        .get(format!("{}/v1/updates/../../cairn.toml", served.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // Over HTTP (the workspace uploads v2 first): nothing left on echo
    // that is compatible; the ten stay.
    let uploaded = http
        .post(format!("{}/v1/components", served.url))
        .header("content-type", "application/wasm")
        .body(std::fs::read(fixture("echo-v2")).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(uploaded.status(), 201);
    let r: Value = http
        .post(format!("{}/v1/components/echo/update", served.url))
        .json(&serde_json::json!({"to": to, "dry_run": true}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (r["total"].as_u64(), r["diverges"].as_u64()),
        (Some(10), Some(10)),
        "{r}"
    );
    drop(served);
    // Every later replay matches, each run with its own component.
    for session in &all[10..13] {
        let out = cairn_in(&home, &["replay", session]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// kill -9 (an abort at the crash point after a session's journal entry)
/// in the middle of a bulk update: every session is on the old component,
/// or on the new one with its entry; the next open finishes what the
/// journal holds, and running the update again switches the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_update_cut_short_leaves_no_session_half_switched() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let all = sessions(&home, 12, 3).await;
    let v2 = fixture("echo-v2");
    let out = crate::common::cairn_bin()
        .args([
            "update",
            "--from",
            "echo",
            "--to",
            v2.to_str().unwrap(),
            "--home",
        ])
        .arg(&home)
        .env("CAIRN_CRASH_AT", "update-journaled")
        .output()
        .unwrap();
    assert!(!out.status.success(), "the crash point aborts the update");
    // The next open (a writer's) follows the journal.
    let rt = cairn_cli::open_runtime(RuntimeConfig::load(&home, None).unwrap())
        .await
        .unwrap();
    rt.shutdown(std::time::Duration::from_secs(5)).await;
    drop(rt);
    let after = bindings(&home);
    let switched: Vec<&(String, String, bool)> = after.iter().filter(|(_, _, u)| *u).collect();
    assert!(!switched.is_empty(), "the crash came after a journal entry");
    let echo_digest = after
        .iter()
        .find(|(s, _, _)| *s == all[0])
        .map(|(_, b, _)| b.clone())
        .unwrap();
    for (session, bound, updated) in &after {
        // Never half: an entry means the new binding, none the old.
        assert_eq!(*updated, *bound != echo_digest, "{session}: {bound}");
    }
    let (out, report) = update_json(&home, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        report["total"].as_u64().unwrap() as usize,
        12 - switched.len(),
        "{report}"
    );
    assert_eq!(report["diverges"], 3);
    let done = bindings(&home);
    assert_eq!(done.iter().filter(|(_, _, u)| *u).count(), 9);
}

/// A fork may name a component: the runs it carries are shadow-replayed
/// against it first (a divergence refuses the fork and makes nothing),
/// unless `next-run` says otherwise; the fork's journal records the switch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_onto_another_component_is_checked_by_the_runs_it_carries() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let rt = cairn_cli::open_runtime(RuntimeConfig::load(&home, None).unwrap())
        .await
        .unwrap();
    // Two sessions of two runs: one shouted first, one calm first.
    let mut made = Vec::new();
    for (first, second) in [("shout a", "calm b"), ("calm a", "shout b")] {
        let (one, _, _) = run_to_end(&rt, crate::common::start_req("echo", first), None).await;
        let mut next = crate::common::start_req("echo", second);
        next.session = Some(one.session_id.clone());
        next.component = None;
        let (two, _, events) = run_to_end(&rt, next, None).await;
        let second_started = events
            .iter()
            .find(|e| {
                e.run_id == Some(two.run_id)
                    && serde_json::to_value(&e.payload).unwrap()["event"]["type"] == "started"
            })
            .map(|e| e.seq.0)
            .unwrap();
        made.push((one.session_id.to_string(), second_started));
    }
    rt.shutdown(std::time::Duration::from_secs(5)).await;
    drop(rt);
    let workers = || std::fs::read_dir(home.join("workers")).unwrap().count();
    let v2 = fixture("echo-v2");
    let v2 = v2.to_str().unwrap();
    let fork = |session: &str, before: u64, extra: &[&str]| {
        let before = before.to_string();
        let mut args = vec![
            "fork",
            session,
            "--before",
            &before,
            "--component",
            v2,
            "--json",
        ];
        args.extend_from_slice(extra);
        cairn_in(&home, &args)
    };
    // The shouting run it would carry does not replay against v2.
    let before = workers();
    let out = fork(&made[0].0, made[0].1, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not forked") && err.contains("diverged at seq"),
        "{err}"
    );
    assert_eq!(workers(), before, "a refused fork made a worker");
    // Unchecked, it is made.
    let out = fork(&made[0].0, made[0].1, &["--mode", "next-run"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The calm run replays: the fork is made, bound to v2, and says so.
    let out = fork(&made[1].0, made[1].1, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let forked: Value = serde_json::from_slice(&out.stdout).unwrap();
    let session = forked["session_id"].as_str().unwrap();
    let export = cairn_in(&home, &["export", session]);
    let text = String::from_utf8_lossy(&export.stdout);
    let entry: Value = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["payload"]["event"]["type"] == "component_updated")
        .expect("the fork records its component");
    assert_eq!(entry["payload"]["event"]["mode"], "replay");
    assert_eq!(entry["payload"]["event"]["checked_runs"], 1);
    // Its worker is bound to v2: a run naming v2 needs no update, and
    // shouts.
    let worker = forked["worker_id"].as_str().unwrap();
    let doc: Value = serde_json::from_slice(
        &std::fs::read(home.join("workers").join(worker).join("worker.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(doc["component"], entry["payload"]["event"]["to"]);
    let out = cairn_in(
        &home,
        &[
            "run", v2, "--worker", worker, "--prompt", "shout c", "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("SHOUT"),
        "v2 did not run"
    );
    let export = cairn_in(&home, &["export", session]);
    assert_eq!(
        String::from_utf8_lossy(&export.stdout)
            .matches("\"component_updated\"")
            .count(),
        1
    );
}

/// `snapshot` mode: a parked `counter` session, and one whose run waits
/// live on an approval (asked to park first), move to `counter-v2`, which
/// resumes each from version 1's checkpoint; `cairn replay` then matches
/// every run, each with its own component.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_update_resumes_the_checkpoint_on_the_new_component() {
    use cairn_runtime::journal::event::{Liveness, LivenessPolicy};
    use cairn_runtime::runtime::ComponentRef;
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let rt = cairn_cli::open_runtime(RuntimeConfig::load(&home, None).unwrap())
        .await
        .unwrap();
    let counter = || ComponentRef::Path(fixture("counter"));
    let v2 = ComponentRef::Path(fixture("counter-v2"));
    let mut parks = cairn_runtime::runtime::StartRun::new(counter(), "5 2");
    parks.liveness = Liveness {
        policy: LivenessPolicy::Park,
        grace_ms: 0,
    };
    let (parked, facts, _) = run_to_end(&rt, parks, None).await;
    assert_eq!(facts.status, cairn_runtime::RunStatus::Parked);
    let live = rt
        .start(cairn_runtime::runtime::StartRun::new(counter(), "5 2"))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while rt.pending_decisions(Some(&live.session_id)).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the live run never asked"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for session in [&parked.session_id, &live.session_id] {
        let report = rt
            .update(
                session,
                &v2,
                cairn_runtime::journal::event::UpdateMode::Snapshot,
                false,
            )
            .await
            .unwrap();
        assert!(report.switched, "{report:?}");
        let resumed = report.resumed.expect("the parked run resumed on v2");
        let end = loop {
            if let Ok((_, f)) = rt.find_run(resumed).await {
                break f;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the resumed run never ended"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        assert_eq!(end.status, cairn_runtime::RunStatus::Finished, "{end:?}");
    }
    rt.shutdown(std::time::Duration::from_secs(5)).await;
    drop(rt);
    for session in [&parked.session_id, &live.session_id] {
        let out = cairn_in(&home, &["export", &session.to_string()]);
        let entries: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let update = entries
            .iter()
            .find(|e| e["payload"]["event"]["type"] == "component_updated")
            .expect("the switch is journaled");
        assert_eq!(update["payload"]["event"]["mode"], "snapshot");
        let finished = entries
            .iter()
            .rev()
            .find(|e| e["payload"]["event"]["type"] == "finished")
            .unwrap();
        assert_eq!(
            finished["payload"]["event"]["text"], "v2 counted 3..5 from a v1 checkpoint",
            "{finished}"
        );
        let out = cairn_in(&home, &["replay", &session.to_string()]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("2 of 2"), "{text}");
    }
}
