//! A delete stops owned work (seed 003: stop restarts, then the active
//! execution and owned tasks, then files and index; issue 38 item 3): a
//! deleted parent's children stop and are pruned with their loans ended,
//! and a deleted queue card's session ends the card instead of an answer
//! making its key a second worker.

use super::delegation::grant;
use cairn_runtime::runtime::{ComponentRef, StartRun};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_parent_stops_and_prunes_its_children() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rt = super::common::runtime_with(&home, None).await;
    let hostile = grant(&rt, "hostile").await;
    let parent = grant(&rt, "parent").await;
    // Two children spawned `continue`, each waiting on a decision: they
    // outlive their parent's run.
    let steps = json!([
        { "spawn": { "component": hostile, "prompt": "wait" } },
        { "spawn": { "component": hostile, "prompt": "wait" } },
    ]);
    let root = rt
        .start(StartRun::new(
            ComponentRef::Digest(parent),
            steps.to_string(),
        ))
        .await
        .unwrap();
    rt.wait(root.run_id).await.unwrap();
    let t = Instant::now();
    while rt.live_runs().len() < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the children never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let children: Vec<_> = rt.live_runs().into_iter().map(|(s, _)| s).collect();
    rt.delete_session(&root.session_id).await.unwrap();
    // Before, both children went on running, naming a parent that was gone.
    assert!(rt.live_runs().is_empty(), "{:?}", rt.live_runs());
    for child in &children {
        let summary = rt.summary(child).await.unwrap();
        let record: Value = serde_json::from_slice(
            &std::fs::read(
                home.join("workers")
                    .join(summary.worker_id.to_string())
                    .join("worker.json"),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(record["parent"]["loan_reclaimed"], true, "{record}");
        let facts = summary.last_run.expect("the child's run ended");
        assert_eq!(
            facts.status,
            cairn_runtime::RunStatus::Cancelled,
            "{facts:?}"
        );
    }
    rt.begin_shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_awaiting_cards_session_ends_the_card() {
    let (_tmp, rt, base) = super::common::served_here(None).await;
    let http = reqwest::Client::new();
    let get = |path: &str| {
        let (http, url) = (http.clone(), format!("{base}{path}"));
        async move {
            http.get(url)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let r = http
        .post(format!("{base}/v1/queue"))
        .json(&json!({"card": "deploy", "component": "approval", "prompt": "may I deploy?"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let state = |rows: &Value| rows[0]["state"].as_str().unwrap_or_default().to_string();
    let t = Instant::now();
    while state(&get("/v1/queue").await) != "awaiting" {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{}",
            get("/v1/queue").await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sessions = get("/v1/sessions").await;
    assert_eq!(sessions.as_array().map(Vec::len), Some(1), "{sessions}");
    let session = sessions[0]["session_id"].as_str().unwrap().to_string();
    let r = http
        .delete(format!(
            "{base}/v1/sessions/{}",
            super::common::enc(&session)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let t = Instant::now();
    let rows = loop {
        let rows = get("/v1/queue").await;
        if state(&rows) == "failed" {
            break rows;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{rows}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        rows[0]["last_reason"]
            .as_str()
            .unwrap_or_default()
            .contains("deleted"),
        "{rows}"
    );
    // An answer now is refused, and makes no second worker for the key.
    let r = http
        .post(format!("{base}/v1/queue/deploy/answer"))
        .json(&json!({"value": {"approved": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409, "{}", r.text().await.unwrap());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(get("/v1/sessions").await, json!([]));
    rt.begin_shutdown();
}

/// The phantom an interrupted delete left (issue 40 item 5): an empty
/// `workers/<id>/` (an older cairn removed the marker before the
/// directory) was listed as corrupt forever and nothing removed it; the
/// next owner removes it, and a delete now leaves the aggregate in one
/// rename, so no crash point leaves such a directory.
#[test]
fn an_empty_aggregate_left_by_a_killed_delete_is_removed_by_the_next_owner() {
    use super::common::cairn_in;
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let out = cairn_in(&home, &["run", "echo", "--prompt", "x", "--json"]);
    assert!(out.status.success());
    // What the killed delete left: the directory, and no clean-stop
    // marker (the process that died wrote none).
    let phantom = home.join("workers").join(uuid::Uuid::now_v7().to_string());
    std::fs::create_dir(&phantom).unwrap();
    let _ = std::fs::remove_file(home.join("cairn.clean"));
    let listed = |home: &std::path::Path| -> Vec<Value> {
        let out = cairn_in(home, &["ls", "--json"]);
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    };
    // A reader changes nothing (and shows what is there).
    assert_eq!(listed(&home).len(), 2);
    assert!(phantom.exists());
    // The next owner (any writing command) removes it.
    let out = cairn_in(&home, &["run", "echo", "--prompt", "y", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!phantom.exists());
    let rows = listed(&home);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows.iter().all(|r| r["state"]["state"] != "corrupt"),
        "{rows:?}"
    );
}

/// A lost index entry on a cleanly stopped home (issue 40 item 6): the
/// next owner trusted the clean marker, skipped the walk that writes lost
/// entries again, and a run naming the session made it a second worker.
/// The marker now vouches for the index's and the workers' counts; other
/// counts mean a walk, which finds the session's worker.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_index_entry_on_a_clean_home_never_makes_a_second_worker() {
    use super::common::{run_to_end, runtime_with, start_req};
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rt = runtime_with(&home, None).await;
    let name = cairn_runtime::SessionId::parse("keep-1").unwrap();
    let (session, worker) = rt.create_session(Some(name.clone())).await.unwrap();
    let mut req = start_req("echo", "one");
    req.session = Some(session);
    run_to_end(&rt, req, None).await;
    rt.shutdown(Duration::from_secs(5)).await;
    drop(rt);
    let marker = std::fs::read_to_string(home.join("cairn.clean")).unwrap();
    assert!(marker.contains("\"index\":1"), "{marker}");
    for entry in std::fs::read_dir(home.join("index/sessions")).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let rt = runtime_with(&home, None).await;
    let mut req = start_req("echo", "two");
    req.session = Some(name);
    let (started, _, _) = run_to_end(&rt, req, None).await;
    let summary = rt.summary(&started.session_id).await.unwrap();
    assert_eq!(summary.worker_id, worker, "the session's own worker");
    assert_eq!(std::fs::read_dir(home.join("workers")).unwrap().count(), 1);
    rt.shutdown(Duration::from_secs(5)).await;
}

/// A session made for a start that follows (as a chat call makes it) and
/// deleted before that start: the start finds it gone — it does not run in
/// the deleted worker with the handles its creation kept for it.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_deleted_between_its_creation_and_its_start_is_not_started() {
    use super::common::{runtime_with, start_req};
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rt = runtime_with(&home, None).await;
    let (session, worker) = rt
        .create_session_first(None, rt.default_workspace())
        .await
        .unwrap();
    rt.delete_session(&session).await.unwrap();
    let mut req = start_req("echo", "too late");
    req.session = Some(session.clone());
    req.worker = Some(worker);
    let err = rt
        .start(req)
        .await
        .expect_err("a start of a deleted session");
    assert!(
        err.to_string().contains(&format!("no worker {worker}")),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(home.join("workers"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // The next session made that way starts as usual.
    let (session, worker) = rt
        .create_session_first(None, rt.default_workspace())
        .await
        .unwrap();
    let mut req = start_req("echo", "in time");
    req.session = Some(session);
    req.worker = Some(worker);
    let started = rt.start(req).await.unwrap();
    assert_eq!(started.worker_id, worker);
    rt.shutdown(Duration::from_secs(5)).await;
}
