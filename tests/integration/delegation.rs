//! Delegation (seed 000) with real components: a parent test guest driven by
//! its prompt's steps spawns `delegate`, `echo` and hostile children.

use cairn_runtime::runtime::{ComponentRef, Runtime, StartRun};
use cairn_runtime::{RunStatus, SessionId};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) async fn open(home: &Path, toml: Option<&str>) -> Runtime {
    super::common::runtime_with(home, toml).await
}

/// A fixture stored and granted to the default workspace; its digest.
pub(super) async fn grant(rt: &Runtime, fixture: &str) -> String {
    let bytes = std::fs::read(super::common::fixture(fixture)).unwrap();
    let (digest, _) = rt
        .add_component(&ComponentRef::Bytes(Arc::new(bytes)))
        .await
        .unwrap();
    rt.home()
        .grant_component(rt.default_workspace(), &digest)
        .unwrap();
    digest
}

pub(super) async fn run_parent(
    rt: &Runtime,
    parent: &str,
    steps: Value,
) -> (SessionId, cairn_runtime::RunFacts, Vec<Value>) {
    let started = rt
        .start(StartRun::new(
            ComponentRef::Digest(parent.into()),
            steps.to_string(),
        ))
        .await
        .unwrap();
    let facts = tokio::time::timeout(Duration::from_secs(90), rt.wait(started.run_id))
        .await
        .unwrap()
        .unwrap();
    let results = step_results(&entries(rt, &started.session_id).await);
    (started.session_id, facts, results)
}

/// What each step of the parent guest answered, in order.
pub(super) fn step_results(entries: &[Value]) -> Vec<Value> {
    entries
        .iter()
        .filter(|e| {
            e["payload"]["event"]["type"] == "custom" && e["payload"]["event"]["name"] == "step"
        })
        .map(|e| e["payload"]["event"]["data"]["result"].clone())
        .collect()
}

async fn entries(rt: &Runtime, s: &SessionId) -> Vec<Value> {
    super::common::entries_json(rt, s).await
}

pub(super) fn worker_dir(home: &Path, session: &SessionId, rt: &Runtime) -> PathBuf {
    let w = rt.home().lookup(session).unwrap().unwrap();
    home.join("workers").join(w.to_string())
}

fn json_file(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_writes_through_its_loan_and_loses_it_when_its_run_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rt = open(&home, None).await;
    let parent = grant(&rt, "parent").await;
    let steps = json!([
        { "spawn": { "component": "delegate", "prompt": "write: through the loan", "scope": "lent/deep" } },
        { "wait": 0, "timeout_ms": 60000 },
        { "read": "lent/deep/out.txt" },
        { "status": 0 },
    ]);
    let (session, facts, results) = run_parent(&rt, &parent, steps).await;
    assert_eq!(facts.status, RunStatus::Finished, "{results:?}");
    assert_eq!(results[1]["state"], "finished");
    assert_eq!(results[1]["text"], "wrote \"through the loan\"");
    assert_eq!(
        results[2], "through the loan",
        "the child's write landed in the parent's scope"
    );
    let child_worker = results[0]["worker_id"].as_str().unwrap().to_string();
    let child_session = SessionId::parse(results[0]["session_id"].as_str().unwrap()).unwrap();

    // Linked both ways, and one record under runs/<gen>/spawned/.
    let pdir = worker_dir(&home, &session, &rt);
    let meta = json_file(&pdir.join("metadata.json"));
    let child = &meta["children"][0];
    assert_eq!(
        (child["worker_id"].as_str(), child["scope"].as_str()),
        (Some(child_worker.as_str()), Some("lent/deep"))
    );
    assert_eq!(
        (child["status"].as_str(), child["loan_reclaimed"].as_bool()),
        (Some("finished"), Some(true))
    );
    assert_eq!(child["generation"], 1);
    let spawned = json_file(&pdir.join(format!("runs/1/spawned/{child_worker}.json")));
    assert_eq!(spawned["session_id"], json!(child_session));
    let cdir = worker_dir(&home, &child_session, &rt);
    let record = json_file(&cdir.join("worker.json"));
    assert_eq!(
        record["parent"]["worker_id"],
        json!(rt.home().lookup(&session).unwrap().unwrap())
    );
    assert_eq!(
        (
            record["parent"]["scope"].as_str(),
            record["parent"]["loan_reclaimed"].as_bool()
        ),
        (Some("lent/deep"), Some(true))
    );
    assert_eq!(record["parent"]["depth"], 1);
    // The parent's journal has the hint; status came from the child's journal.
    let pe = entries(&rt, &session).await;
    assert!(
        pe.iter()
            .any(|e| e["payload"]["event"]["type"] == "child_notification"
                && e["payload"]["event"]["status"] == "finished")
    );

    // A later run of the child has no /loan: it cannot write there.
    let again = rt
        .start(StartRun {
            session: Some(child_session.clone()),
            ..StartRun::new(
                ComponentRef::BuiltIn("delegate".into()),
                "write: after the loan",
            )
        })
        .await
        .unwrap();
    let f = rt.wait(again.run_id).await.unwrap();
    assert_eq!(f.status, RunStatus::Failed);
    let body = std::fs::read_to_string(pdir.join("runs/1/artifacts/lent/deep/out.txt")).unwrap();
    assert_eq!(body, "through the loan", "the reclaimed scope is untouched");

    // Replayed offline, a parent's run gets every answer from its journal
    // and spawns nothing. (What a child wrote through a loan is not in an
    // offline replay's scratch worktree, so this parent reads nothing.)
    let (replayed, facts, _) = run_parent(
        &rt,
        &parent,
        json!([{ "spawn": { "component": "echo", "prompt": "again" } }, { "wait": 0, "timeout_ms": u64::MAX }, { "status": 0 }, "peers"]),
    )
    .await;
    assert_eq!(facts.status, RunStatus::Finished);
    let before = rt.home().list_workers().unwrap().len();
    let out = super::common::cairn_in(&home, &["replay", replayed.as_str(), "--json"]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(rt.home().list_workers().unwrap().len(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_child_reaches_nothing_above_its_loan() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rt = open(&home, None).await;
    let parent = grant(&rt, "parent").await;
    let hostile = grant(&rt, "hostile").await;
    let steps = json!([
        { "write": ["parent-secret.txt", "the parent's secret"] },
        { "spawn": { "component": hostile, "prompt": "loan-escape", "scope": "lent" } },
        { "wait": 0, "timeout_ms": 60000 },
    ]);
    let started = rt
        .start(StartRun::new(
            ComponentRef::Digest(parent.clone()),
            steps.to_string(),
        ))
        .await
        .unwrap();
    // The child waits for its links: plant `up -> ..` in the loaned scope.
    let t = Instant::now();
    let pending = loop {
        let p = rt.pending_decisions(None);
        if let Some(p) = p.into_iter().find(|p| p.session_id != started.session_id) {
            break p;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the child never asked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let lent = worker_dir(&home, &started.session_id, &rt).join("runs/1/artifacts/lent");
    std::os::unix::fs::symlink("..", lent.join("up")).unwrap();
    rt.decide(&pending.decision_id, json!({"approved": true}))
        .await
        .unwrap();
    let facts = rt.wait(started.run_id).await.unwrap();
    assert_eq!(facts.status, RunStatus::Finished);
    let child = entries(&rt, &pending.session_id).await;
    let loan = child
        .iter()
        .find(|e| {
            e["payload"]["event"]["type"] == "custom" && e["payload"]["event"]["name"] == "loan"
        })
        .expect("the child reported");
    assert_eq!(
        loan["payload"]["event"]["data"]["reached"],
        json!([]),
        "{loan}"
    );
    assert_eq!(loan["payload"]["event"]["data"]["wrote_inside"], true);
    assert_eq!(
        std::fs::read_to_string(lent.join("inside.txt")).unwrap(),
        "written through the loan"
    );
    assert!(!lent.parent().unwrap().join("pwned.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_scopes_and_bad_components_are_refused_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rt = open(&home, None).await;
    let parent = grant(&rt, "parent").await;
    let hostile = grant(&rt, "hostile").await;
    let steps = json!([
        { "spawn": { "component": hostile, "prompt": "wait", "scope": "a" } },
        { "spawn": { "component": "echo", "prompt": "x", "scope": "a/b" } },
        { "spawn": { "component": "echo", "prompt": "x", "scope": "../outside" } },
        { "spawn": { "component": "sha256:0000000000000000000000000000000000000000000000000000000000000000", "prompt": "x" } },
        { "spawn": { "component": "echo", "prompt": "fine", "scope": "c" } },
        { "status": "01a22e10-13e4-75e0-902e-3c3c6b20d5ea" },
        { "cancel": 0 },
        { "status": 0 },
    ]);
    let (_, facts, r) = run_parent(&rt, &parent, steps).await;
    assert_eq!(facts.status, RunStatus::Finished, "{r:?}");
    assert!(
        r[1]["error"].as_str().unwrap().contains("overlaps"),
        "{}",
        r[1]
    );
    assert!(
        r[2]["error"]
            .as_str()
            .unwrap()
            .contains("relative directory"),
        "{}",
        r[2]
    );
    assert!(
        r[3]["error"].as_str().unwrap().contains("may use"),
        "{}",
        r[3]
    );
    assert!(r[4]["worker_id"].is_string(), "{}", r[4]);
    assert!(
        r[5]["error"]
            .as_str()
            .unwrap()
            .contains("neither a child nor a peer"),
        "{}",
        r[5]
    );
    assert_eq!(r[7]["state"], "cancelled", "{}", r[7]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_and_depth_limits_end_the_offending_run() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = open(
        &tmp.path().join("home"),
        Some("[limits]\nchildren_per_run = 2\nchild_depth = 1\n"),
    )
    .await;
    let parent = grant(&rt, "parent").await;
    let spawn = |c: &str| json!({ "spawn": { "component": c, "prompt": "[]" } });
    let (session, facts, _) = run_parent(
        &rt,
        &parent,
        json!([spawn("echo"), spawn("echo"), spawn("echo")]),
    )
    .await;
    assert_eq!(facts.status, RunStatus::Failed);
    let e = entries(&rt, &session).await;
    let failed = e
        .iter()
        .find(|e| e["payload"]["event"]["type"] == "failed")
        .unwrap();
    assert_eq!(
        failed["payload"]["event"]["error"]["code"], "limit_exceeded",
        "{failed}"
    );
    assert!(failed.to_string().contains("children_per_run"), "{failed}");
    // Spawns answered with a child: the third was refused.
    let spawns: Vec<&Value> = e
        .iter()
        .filter(|e| {
            e["payload"]["event"]["type"] == "host_call_started"
                && e["payload"]["event"]["capability"] == "workers"
                && e["payload"]["event"]["op"] == "spawn"
        })
        .map(|e| &e["payload"]["event"]["call_id"])
        .collect();
    let spawned = e
        .iter()
        .filter(|e| {
            e["payload"]["event"]["type"] == "host_call_finished"
                && spawns.contains(&&e["payload"]["event"]["call_id"])
                && e["payload"]["event"]["response"]["worker_id"].is_string()
        })
        .count();
    assert_eq!(spawned, 2, "the third spawn made no child");
    // Depth: the child (depth 1) may not spawn a grandchild (depth 2).
    let nested = json!([{ "spawn": { "component": parent, "prompt": json!([spawn("echo")]).to_string() } }, { "wait": 0 }]);
    let (_, facts, r) = run_parent(&rt, &parent, nested).await;
    assert_eq!(facts.status, RunStatus::Finished);
    assert_eq!(r[1]["state"], "failed", "{r:?}");
    assert!(
        r[1]["error"].as_str().unwrap().contains("child_depth"),
        "{r:?}"
    );
}

/// kill -9 of the host mid-`wait` and mid-`spawn`: one child each time, the
/// parent's metadata right, and the parent's replay spawns nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_host_restores_the_parent_without_a_second_child() {
    for crash in [
        None,
        Some("spawn-child-made"),
        Some("spawn-linked"),
        Some("spawn-recorded"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        {
            let rt = open(&home, None).await;
            grant(&rt, "parent").await;
            grant(&rt, "hostile").await;
            rt.shutdown(Duration::from_secs(5)).await;
        }
        let rt = open(&home, None).await;
        let parent = grant(&rt, "parent").await;
        let hostile = grant(&rt, "hostile").await;
        rt.shutdown(Duration::from_secs(5)).await;
        drop(rt);
        let env: Vec<(&str, &str)> = crash
            .map(|c| vec![("CAIRN_CRASH_AT", c)])
            .unwrap_or_default();
        let served = super::common::serve_with(&home, &env).unwrap();
        let http = reqwest::Client::new();
        let steps = json!([
            { "spawn": { "component": hostile, "prompt": "wait", "scope": "lent" } },
            { "wait": 0, "timeout_ms": 600000 },
        ]);
        let started: Value = http
            .post(format!("{}/v1/runs", served.url))
            .json(&json!({ "component": parent, "prompt": steps.to_string() }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = started["session_id"].as_str().unwrap().to_string();
        // Mid-wait: the spawn is journaled and the child waits on its decision.
        let t = Instant::now();
        let mut served = Some(served);
        loop {
            if crash.is_some() {
                if served.as_mut().unwrap().child.try_wait().unwrap().is_some() {
                    break;
                }
            } else {
                let d: Value = http
                    .get(format!("{}/v1/decisions", served.as_ref().unwrap().url))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                if !d.as_array().unwrap().is_empty() {
                    break;
                }
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{crash:?}: never got there"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(served.take()); // kill -9 (or it aborted at the crash point)
        if crash == Some("spawn-linked") {
            // Linked to its parent, not yet among its children: doctor says so.
            let out = super::common::cairn_in(&home, &["doctor", "--json"]);
            let report: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert!(
                report["problems"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["kind"] == "unrecorded_child"),
                "{report}"
            );
        }
        let served = super::common::serve(&home);
        // The restored child asks again; approve it, and the parent finishes.
        let t = Instant::now();
        let decision = loop {
            let d: Value = http
                .get(format!("{}/v1/decisions", served.url))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if let Some(first) = d.as_array().unwrap().first() {
                break first["decision_id"].as_str().unwrap().to_string();
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{crash:?}: the child never asked after the restart"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let r = http
            .post(format!("{}/v1/decisions/{decision}", served.url))
            .json(&json!({ "value": {"approved": true} }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let t = Instant::now();
        loop {
            let s: Value = http
                .get(format!("{}/v1/sessions/{session}", served.url))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if s["live_run"].is_null() && s["last_run"]["status"] == "finished" {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{crash:?}: the parent never finished: {s}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(served);
        let workers = std::fs::read_dir(home.join("workers")).unwrap().count();
        assert_eq!(workers, 2, "{crash:?}: one parent, one child");
        let rt = open(&home, None).await;
        let sid = SessionId::parse(&session).unwrap();
        let meta = json_file(&worker_dir(&home, &sid, &rt).join("metadata.json"));
        assert_eq!(
            meta["children"].as_array().unwrap().len(),
            1,
            "{crash:?}: {meta}"
        );
        let journal = entries(&rt, &sid).await;
        let spawns: Vec<&Value> = journal
            .iter()
            .filter(|e| {
                e["payload"]["event"]["type"] == "host_call_started"
                    && e["payload"]["event"]["op"] == "spawn"
            })
            .map(|e| &e["payload"]["event"]["call_id"])
            .collect();
        assert_eq!(
            spawns.len(),
            1,
            "{crash:?}: one spawn in the parent's journal"
        );
        let answers = journal
            .iter()
            .filter(|e| {
                e["payload"]["event"]["type"] == "host_call_finished"
                    && e["payload"]["event"]["call_id"] == *spawns[0]
            })
            .count();
        assert_eq!(
            answers, 1,
            "{crash:?}: one spawn answer in the parent's journal"
        );
        rt.shutdown(Duration::from_secs(5)).await;
    }
}

#[tokio::test]
async fn a_child_of_one_workspace_is_invisible_to_another() {
    const A: &str = "delegation-token-of-workspace-a-012345";
    const B: &str = "delegation-token-of-workspace-b-987654";
    let (base, _tmp) = super::workspaces::served_with(&format!(
        "[workspaces.a]\ntokens = [\"{A}\"]\n[workspaces.b]\ntokens = [\"{B}\"]\n"
    ))
    .await;
    let http = reqwest::Client::new();
    let started: Value = http
        .post(format!("{base}/v1/runs"))
        .bearer_auth(A)
        .json(&json!({ "component": "delegate", "prompt": "one | two" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let session = started["session_id"].as_str().unwrap();
    let t = Instant::now();
    let children = loop {
        let s: Value = http
            .get(format!("{base}/v1/sessions/{session}"))
            .bearer_auth(A)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if let Some(c) = s["children"].as_array().filter(|c| c.len() == 2) {
            break c.clone();
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for c in &children {
        let sid = c["session_id"].as_str().unwrap();
        let mine = http
            .get(format!("{base}/v1/sessions/{sid}"))
            .bearer_auth(A)
            .send()
            .await
            .unwrap();
        assert_eq!(mine.status(), 200);
        let theirs = http
            .get(format!("{base}/v1/sessions/{sid}"))
            .bearer_auth(B)
            .send()
            .await
            .unwrap();
        assert_eq!(theirs.status(), 404);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_or_deleting_a_live_child_reclaims_its_loan() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rt = open(&home, None).await;
    let parent = grant(&rt, "parent").await;
    let hostile = grant(&rt, "hostile").await;
    let steps = json!([
        { "spawn": { "component": hostile, "prompt": "wait", "scope": "one" } },
        { "spawn": { "component": hostile, "prompt": "wait", "scope": "two" } },
        { "wait": 0, "timeout_ms": 60000 },
        { "wait": 1, "timeout_ms": 60000 },
    ]);
    let started = rt
        .start(StartRun::new(
            ComponentRef::Digest(parent.clone()),
            steps.to_string(),
        ))
        .await
        .unwrap();
    let t = Instant::now();
    let children = loop {
        let s = serde_json::to_value(rt.summary(&started.session_id).await.unwrap()).unwrap();
        let c = s["children"].as_array().cloned().unwrap_or_default();
        if c.len() == 2 && rt.pending_decisions(None).len() == 2 {
            break c;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{s}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let one = SessionId::parse(children[0]["session_id"].as_str().unwrap()).unwrap();
    let two = SessionId::parse(children[1]["session_id"].as_str().unwrap()).unwrap();
    rt.prune(&one).await.unwrap();
    let base_served = rt.clone();
    base_served.delete_session(&two).await.unwrap();
    let facts = tokio::time::timeout(Duration::from_secs(30), rt.wait(started.run_id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(facts.status, RunStatus::Finished);
    let s = serde_json::to_value(rt.summary(&started.session_id).await.unwrap()).unwrap();
    for c in s["children"].as_array().unwrap() {
        assert_eq!(
            (c["status"].as_str(), c["loan_reclaimed"].as_bool()),
            (Some("pruned"), Some(true)),
            "{s}"
        );
    }
    // The pruned child, run again, gets no /loan.
    let record = json_file(&worker_dir(&home, &one, &rt).join("worker.json"));
    assert_eq!(record["parent"]["loan_reclaimed"], true);
    let again = rt
        .start(StartRun {
            session: Some(one.clone()),
            component: None,
            ..StartRun::new(ComponentRef::BuiltIn("echo".into()), "loan-escape")
        })
        .await
        .unwrap();
    let t = Instant::now();
    let asked = loop {
        if let Some(p) = rt.pending_decisions(Some(&one)).pop() {
            break p;
        }
        assert!(t.elapsed() < Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    rt.decide(&asked.decision_id, json!({"approved": true}))
        .await
        .unwrap();
    assert_eq!(
        rt.wait(again.run_id).await.unwrap().status,
        RunStatus::Failed
    );
    let e = entries(&rt, &one).await;
    let failed = e
        .iter()
        .rev()
        .find(|e| e["payload"]["event"]["type"] == "failed")
        .unwrap();
    assert_eq!(
        failed["payload"]["event"]["error"]["details"]["controller_code"], "no_loan",
        "{failed}"
    );
    // `cairn prune` of a session that is no child and has none says so;
    // of the root, it stops its tree.
    let (lone, _) = rt
        .create_session_in(None, rt.default_workspace())
        .await
        .unwrap();
    rt.shutdown(Duration::from_secs(5)).await;
    drop(rt);
    let out = super::common::cairn_in(&home, &["prune", lone.as_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a child"));
    let out = super::common::cairn_in(&home, &["prune", started.session_id.as_str()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A parent with three children in three states, killed with -9 while it
/// waits on one: the restore keeps each child as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restoring_a_parent_keeps_three_children_in_their_states() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (parent, hostile) = {
        let rt = open(&home, None).await;
        let d = (grant(&rt, "parent").await, grant(&rt, "hostile").await);
        rt.shutdown(Duration::from_secs(5)).await;
        d
    };
    let served = super::common::serve(&home);
    let http = reqwest::Client::new();
    let steps = json!([
        { "spawn": { "component": "echo", "prompt": "done early" } },
        { "wait": 0, "timeout_ms": 60000 },
        { "spawn": { "component": hostile, "prompt": "wait", "scope": "b" } },
        { "spawn": { "component": hostile, "prompt": "wait", "scope": "c" } },
        { "cancel": 2 },
        { "wait": 1, "timeout_ms": 600000 },
    ]);
    let started: Value = http
        .post(format!("{}/v1/runs", served.url))
        .json(&json!({ "component": parent, "prompt": steps.to_string() }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let session = SessionId::parse(started["session_id"].as_str().unwrap()).unwrap();
    let states = |meta: &Value| -> Vec<(String, bool)> {
        meta["children"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["status"].as_str().unwrap().to_string(),
                    c["loan_reclaimed"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    let t = Instant::now();
    let meta_path = loop {
        let s: Value = http
            .get(format!("{}/v1/sessions/{session}", served.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let c = s["children"].as_array().cloned().unwrap_or_default();
        if c.len() == 3 && c[2]["status"] == "cancelled" {
            let w = s["worker_id"].as_str().unwrap().to_string();
            break home.join("workers").join(w).join("metadata.json");
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{s}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(served); // kill -9 while the parent waits on child b
    let before = states(&json_file(&meta_path));
    assert_eq!(
        before,
        [
            ("finished".into(), false),
            ("running".into(), false),
            ("cancelled".into(), true)
        ]
    );
    let served = super::common::serve(&home);
    // b's run is restored and asks again; the parent waits on it again.
    let t = Instant::now();
    let decision = loop {
        let d: Value = http
            .get(format!("{}/v1/decisions", served.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if let Some(first) = d.as_array().unwrap().first() {
            break first["decision_id"].as_str().unwrap().to_string();
        }
        assert!(t.elapsed() < Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        states(&json_file(&meta_path)),
        before,
        "the restore changed no child"
    );
    http.post(format!("{}/v1/decisions/{decision}", served.url))
        .json(&json!({ "value": {"approved": true} }))
        .send()
        .await
        .unwrap();
    let t = Instant::now();
    loop {
        let s: Value = http
            .get(format!("{}/v1/sessions/{session}", served.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if s["live_run"].is_null() && s["last_run"]["status"] == "finished" {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(served);
    let after = json_file(&meta_path);
    assert_eq!(
        states(&after),
        [
            ("finished".into(), false),
            ("finished".into(), true),
            ("cancelled".into(), true)
        ],
        "{after}"
    );
    assert_eq!(
        std::fs::read_dir(home.join("workers")).unwrap().count(),
        4,
        "a parent and three children"
    );
}
