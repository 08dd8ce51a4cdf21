//! Component updates: a session moves to another version of its controller,
//! checked by a shadow replay of every ended run (`replay`), or unchecked
//! (`next_run`); each run keeps replaying with the component it started
//! with.

use crate::common::{cairn_in, fixture, run_to_end, session_of_output};
use cairn_runtime::runtime::{ComponentRef, RuntimeConfig, StartRun};
use cairn_runtime::{RunStatus, SessionId};
use serde_json::{Value, json};
use std::path::Path;

fn segment_bytes(home: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for w in std::fs::read_dir(home.join("workers")).unwrap().flatten() {
        for f in std::fs::read_dir(w.path().join("session/segments"))
            .unwrap()
            .flatten()
        {
            out.push((f.path(), std::fs::read(f.path()).unwrap()));
        }
        out.push((
            w.path().join("worker.json"),
            std::fs::read(w.path().join("worker.json")).unwrap(),
        ));
    }
    out.sort();
    out
}

fn run_echo(home: &Path, prompt: &str) -> String {
    let out = cairn_in(home, &["run", "echo", "--prompt", prompt, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    session_of_output(&out.stdout)
}

fn export(home: &Path, session: &str) -> Vec<Value> {
    let out = cairn_in(home, &["export", session]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn a_compatible_version_is_checked_by_shadow_replay_and_switched() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let session = run_echo(&home, "hello world");
    let v2 = fixture("echo-v2");
    let v2 = v2.to_str().unwrap();
    // A dry run checks and switches nothing.
    let before = segment_bytes(&home);
    let out = cairn_in(&home, &["update", &session, "--component", v2, "--dry-run"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("1 of 1 runs replay against sha256:"),
        "{text}"
    );
    assert!(text.contains("dry run"), "{text}");
    assert_eq!(segment_bytes(&home), before, "a dry run writes nothing");
    let out = cairn_in(&home, &["update", &session, "--component", v2]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("moved from sha256:"), "{text}");
    let entries = export(&home, &session);
    let update = entries
        .iter()
        .find(|e| e["payload"]["event"]["type"] == "component_updated")
        .expect("a component_updated entry");
    let to = update["payload"]["event"]["to"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(update["payload"]["event"]["mode"], "replay");
    assert_eq!(update["payload"]["event"]["checked_runs"], 1);
    // The next run (naming no component) runs v2; every run replays, each
    // with the component it started with.
    let rt = cairn_cli::open_runtime(RuntimeConfig::load(&home, None).unwrap())
        .await
        .unwrap();
    let mut next = StartRun::new(ComponentRef::BuiltIn("echo".into()), "v2 hi");
    next.component = None;
    next.session = Some(SessionId::parse(&session).unwrap());
    let (started, facts, events) = run_to_end(&rt, next, None).await;
    assert_eq!(facts.status, RunStatus::Finished);
    assert_eq!(started.component, to);
    assert!(
        events.iter().any(
            |e| serde_json::to_value(&e.payload).unwrap()["event"]["type"] == "reasoning_delta"
        )
    );
    rt.shutdown(std::time::Duration::from_secs(5)).await;
    drop(rt);
    let out = cairn_in(&home, &["replay", &session]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("2 of 2"), "{text}");
}

#[tokio::test]
async fn an_incompatible_version_is_refused_and_the_session_untouched_unless_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let session = run_echo(&home, "shout this please");
    let v2 = fixture("echo-v2");
    let v2 = v2.to_str().unwrap();
    let before = segment_bytes(&home);
    let out = cairn_in(&home, &["update", &session, "--component", v2]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("stays on its component") && err.contains("replay diverged at seq"),
        "{err}"
    );
    assert!(err.contains("SHOUT"), "what v2 did is named: {err}");
    assert_eq!(
        segment_bytes(&home),
        before,
        "the session is byte-identical"
    );
    // next-run switches unchecked; the old run still replays with its own.
    let out = cairn_in(
        &home,
        &[
            "update",
            &session,
            "--component",
            v2,
            "--mode",
            "next-run",
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["switched"], true, "{report}");
    assert_eq!(report["mode"], "next_run");
    let out = cairn_in(&home, &["replay", &session]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("1 of 1"), "{text}");
}

#[tokio::test]
async fn the_update_route_is_workspace_scoped_and_waits_for_a_live_run() {
    let (_tmp, rt, base) = crate::common::served_here(None).await;
    let http = reqwest::Client::new();
    let v2 = std::fs::read(fixture("echo-v2")).unwrap();
    let uploaded: Value = http
        .post(format!("{base}/v1/components"))
        .header("content-type", "application/wasm")
        .body(v2)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let digest = uploaded["digest"].as_str().unwrap().to_string();
    let (started, _, _) = run_to_end(&rt, crate::common::start_req("echo", "a b"), None).await;
    let session = started.session_id.to_string();
    let r: Value = http
        .post(format!("{base}/v1/sessions/{session}/update"))
        .json(&json!({"component": digest, "dry_run": true}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["switched"], false, "{r}");
    assert_eq!(r["runs"][0]["result"], "matched", "{r}");
    let r = http
        .post(format!("{base}/v1/sessions/{session}/update"))
        .json(&json!({"component": "no-such-thing"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "a component the workspace cannot name");
    // A session with a live run is never switched mid-run: 202, the
    // update pending on the session until its next run starts.
    let live = rt
        .start(crate::common::start_req("approval", "wait"))
        .await
        .unwrap();
    let r = http
        .post(format!("{base}/v1/sessions/{}/update", live.session_id))
        .json(&json!({"component": digest, "mode": "next_run"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["pending"], true, "{body}");
    assert_eq!(body["switched"], false, "{body}");
    let summary: Value = http
        .get(format!("{base}/v1/sessions/{}", live.session_id))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(summary["pending_update"]["to"], digest, "{summary}");
    assert_ne!(summary["component"], digest, "switched mid-run: {summary}");
    // The run ends (its approval answered); the next run takes the update.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let decision = loop {
        if let Some(p) = rt.pending_decisions(Some(&live.session_id)).first() {
            break p.decision_id.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the approval was never asked"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    rt.decide(&decision, json!({"approved": true}))
        .await
        .unwrap();
    while rt.live_runs().iter().any(|(s, _)| *s == live.session_id) {
        assert!(std::time::Instant::now() < deadline, "the run never ended");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let mut next = crate::common::start_req("echo", "after the update");
    next.session = Some(live.session_id.clone());
    next.component = None;
    let (started, _, _) = run_to_end(&rt, next, None).await;
    assert_eq!(
        started.component, digest,
        "the next run did not take the update"
    );
    let r = http
        .post(format!("{base}/v1/sessions/{session}/update"))
        .json(&json!({"component": digest}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let report: Value = r.json().await.unwrap();
    assert_eq!(report["switched"], true, "{report}");
    assert_eq!(report["mode"], "replay", "{report}");
}

/// kill at the one point between the update's two writes (the journal's
/// `component_updated`, then `worker.json`): the next owner's open binds
/// the worker as the journal says, so the next run runs the new component.
#[tokio::test]
async fn an_update_cut_short_after_its_journal_entry_is_finished_by_the_next_open() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let session = run_echo(&home, "hello again");
    let v2 = fixture("echo-v2");
    let out = crate::common::cairn_bin()
        .args([
            "update",
            &session,
            "--component",
            v2.to_str().unwrap(),
            "--home",
        ])
        .arg(&home)
        .env("CAIRN_CRASH_AT", "update-journaled")
        .output()
        .unwrap();
    assert!(!out.status.success(), "the crash point aborts the update");
    let entries = export(&home, &session);
    let to = entries
        .iter()
        .find(|e| e["payload"]["event"]["type"] == "component_updated")
        .expect("the entry was written before the crash")["payload"]["event"]["to"]
        .as_str()
        .unwrap()
        .to_string();
    let bound = |home: &Path| -> String {
        let w = std::fs::read_dir(home.join("workers"))
            .unwrap()
            .flatten()
            .next()
            .unwrap();
        let doc: Value =
            serde_json::from_slice(&std::fs::read(w.path().join("worker.json")).unwrap()).unwrap();
        doc["component"].as_str().unwrap().to_string()
    };
    assert_ne!(bound(&home), to, "worker.json missed it");
    let rt = cairn_cli::open_runtime(RuntimeConfig::load(&home, None).unwrap())
        .await
        .unwrap();
    assert_eq!(bound(&home), to, "the open bound it as the journal says");
    let mut next = StartRun::new(ComponentRef::BuiltIn("echo".into()), "v2 after the crash");
    next.component = None;
    next.session = Some(SessionId::parse(&session).unwrap());
    let (started, facts, _) = run_to_end(&rt, next, None).await;
    assert_eq!(facts.status, RunStatus::Finished);
    assert_eq!(started.component, to);
}

/// `POST /v1/runs` naming another component on an existing session is an
/// update in `replay` mode: switched when every run replays (the run goes
/// on with it), refused naming the divergence when not (no run starts).
#[tokio::test]
async fn a_run_naming_another_component_updates_its_session_by_shadow_replay() {
    let (_tmp, rt, base) = crate::common::served_here(None).await;
    let http = reqwest::Client::new();
    let uploaded: Value = http
        .post(format!("{base}/v1/components"))
        .header("content-type", "application/wasm")
        .body(std::fs::read(fixture("echo-v2")).unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let digest = uploaded["digest"].as_str().unwrap().to_string();
    let (calm, _, _) = run_to_end(&rt, crate::common::start_req("echo", "calm words"), None).await;
    let (loud, _, _) = run_to_end(&rt, crate::common::start_req("echo", "shout words"), None).await;
    let r = http
        .post(format!("{base}/v1/runs"))
        .json(&json!({"session": calm.session_id.to_string(), "component": digest, "prompt": "v2 now"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let body: Value = r.json().await.unwrap();
    let run: cairn_runtime::RunId = body["run_id"].as_str().unwrap().parse().unwrap();
    let facts = rt.wait(run).await.unwrap();
    assert_eq!(facts.status, RunStatus::Finished);
    assert_eq!(facts.component, digest);
    let entries = crate::common::entries_json(&rt, &calm.session_id).await;
    let kinds: Vec<&str> = entries
        .iter()
        .map(|e| e["payload"]["event"]["type"].as_str().unwrap())
        .collect();
    let updated = kinds
        .iter()
        .position(|k| *k == "component_updated")
        .unwrap();
    let started = kinds.iter().rposition(|k| *k == "started").unwrap();
    assert!(
        updated < started,
        "the update comes before the run: {kinds:?}"
    );
    let r = http
        .post(format!("{base}/v1/runs"))
        .json(&json!({"session": loud.session_id.to_string(), "component": digest, "prompt": "v2 now"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "conflict", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stays on its component"),
        "{body}"
    );
    let entries = crate::common::entries_json(&rt, &loud.session_id).await;
    assert!(
        !entries
            .iter()
            .any(|e| e["payload"]["event"]["type"] == "component_updated"),
        "no update of the loud session"
    );
}
