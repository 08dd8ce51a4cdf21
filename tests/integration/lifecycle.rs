//! Session lifecycle: drafts, compaction and branch segments, fork to a new
//! worker at every position, and delete and fork killed at each step.

use crate::common::*;
use cairn_runtime::journal::event::{LifecycleEvent, RunStatus};
use cairn_runtime::runtime::Runtime;
use cairn_runtime::{Payload, Seq, SessionEvent, SessionId};

async fn events(rt: &Runtime, s: &SessionId) -> Vec<SessionEvent> {
    rt.read(s, Seq(0))
        .await
        .unwrap()
        .iter()
        .filter_map(|i| i.event().cloned())
        .collect()
}

fn started_seqs(events: &[SessionEvent]) -> Vec<(Seq, String)> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            Payload::Lifecycle(LifecycleEvent::Started { prompt, .. }) => {
                Some((e.seq, prompt.to_string()))
            }
            _ => None,
        })
        .collect()
}

fn texts(turns: &[cairn_runtime::component::Turn]) -> Vec<(bool, String)> {
    turns.iter().map(|t| (t.user(), t.text.clone())).collect()
}

/// A session with three echo runs.
async fn three_runs(rt: &Runtime) -> SessionId {
    let (first, _, _) = run_to_end(rt, start_req("echo", "one"), None).await;
    for prompt in ["two", "three"] {
        let mut req = start_req("echo", prompt);
        req.session = Some(first.session_id.clone());
        run_to_end(rt, req, None).await;
    }
    first.session_id
}

#[tokio::test]
async fn a_draft_writes_nothing_until_its_first_run() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let draft = rt.create_draft(None, "local").unwrap();
    assert!(
        std::fs::read_dir(tmp.path().join("home/workers"))
            .unwrap()
            .next()
            .is_none()
    );
    assert!(
        rt.summary(&draft).await.is_err(),
        "a draft is not persisted"
    );
    assert!(
        rt.create_draft(Some(draft.clone()), "local").is_err(),
        "its id is held"
    );
    let mut req = start_req("echo", "first");
    req.session = Some(draft.clone());
    let (started, facts, _) = run_to_end(&rt, req, None).await;
    assert_eq!(started.session_id, draft);
    assert_eq!(facts.status, RunStatus::Finished);
    // Listing and inspecting a persisted session never makes it active.
    let before = rt.last_seq(&draft).await.unwrap();
    for _ in 0..3 {
        rt.summary(&draft).await.unwrap();
        rt.list_sessions().await.unwrap();
        rt.replay_offline(&draft).await.unwrap();
    }
    assert_eq!(rt.last_seq(&draft).await.unwrap(), before);
    assert!(rt.live_runs().is_empty());
}

#[tokio::test]
async fn a_fork_at_every_user_message_carries_exactly_the_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let source = three_runs(&rt).await;
    let source_events = events(&rt, &source).await;
    let messages = started_seqs(&source_events);
    assert_eq!(messages.len(), 3);
    for (seq, prompt) in &messages {
        let forked = rt.fork(&source, *seq, None).await.unwrap();
        assert_eq!(&forked.prompt, prompt);
        assert_eq!(forked.parent_session_id, source);
        let child_events = events(&rt, &forked.session_id).await;
        let seqs: Vec<u64> = child_events.iter().map(|e| e.seq.0).collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "dense");
        assert!(
            child_events
                .iter()
                .all(|e| e.session_id == forked.session_id),
            "identity rewritten"
        );
        // The child's history is the source's history before the message.
        let expected: Vec<(bool, String)> = texts(&rt.history(&source, 100).await.unwrap())
            .into_iter()
            .zip(rt.history(&source, 100).await.unwrap())
            .filter(|(_, t)| t.seq < seq.0)
            .map(|(x, _)| x)
            .collect();
        assert_eq!(
            texts(&rt.history(&forked.session_id, 100).await.unwrap()),
            expected,
            "fork before {seq}"
        );
        let summary = rt.summary(&forked.session_id).await.unwrap();
        assert_eq!(summary.forked_from, Some((source.clone(), *seq)));
        assert_eq!(
            summary.component,
            rt.summary(&source).await.unwrap().component
        );
        // Carried runs' facts name the child, and the child runs on.
        for e in &child_events {
            if let Some(f) = &e.facts {
                assert_eq!(f.session_id, forked.session_id);
                assert_eq!(f.last_seq, e.seq);
            }
        }
        let mut req = start_req("echo", &format!("{prompt}, edited"));
        req.session = Some(forked.session_id.clone());
        let (_, facts, _) = run_to_end(&rt, req, None).await;
        assert_eq!(facts.status, RunStatus::Finished);
    }
    // The worktree of the last run before the message goes along.
    let probe = run_to_end(&rt, start_req("sandbox-probe", ""), None)
        .await
        .0;
    let mut again = start_req("sandbox-probe", "");
    again.session = Some(probe.session_id.clone());
    run_to_end(&rt, again, None).await;
    let second = started_seqs(&events(&rt, &probe.session_id).await)[1].0;
    let forked = rt.fork(&probe.session_id, second, None).await.unwrap();
    let child_dir = tmp
        .path()
        .join("home/workers")
        .join(forked.worker_id.to_string());
    assert_eq!(
        std::fs::read_to_string(child_dir.join("runs/0/artifacts/probe.txt")).unwrap(),
        "written by sandbox-probe\n"
    );
    let mut child_run = start_req("sandbox-probe", "");
    child_run.session = Some(forked.session_id.clone());
    let (_, child_facts, _) = run_to_end(&rt, child_run, None).await;
    // The copied history names generation 1 (the source's first run); the
    // fork's own first run reserves past every generation it names.
    assert_eq!(child_facts.generation, cairn_runtime::Generation(2));
    let reserved: Vec<u64> = events(&rt, &forked.session_id)
        .await
        .iter()
        .filter_map(|e| match &e.payload {
            cairn_runtime::Payload::Lifecycle(
                cairn_runtime::LifecycleEvent::GenerationReserved { generation, .. },
            ) => Some(generation.0),
            _ => None,
        })
        .collect();
    assert_eq!(reserved, vec![2], "no generation is named twice");
    assert!(child_dir.join("runs/2/artifacts/probe.txt").exists());
    // Not a user message: refused, naming why.
    let err = rt.fork(&source, Seq(1), None).await.unwrap_err();
    assert!(err.to_string().contains("not a user message"), "{err}");
    assert_eq!(
        events(&rt, &source).await,
        source_events,
        "the source is untouched"
    );
}

#[tokio::test]
async fn compaction_keeps_one_stream_and_history_follows_the_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let s = three_runs(&rt).await;
    let before = rt.summary(&s).await.unwrap();
    let started = rt.compact(&s).await.unwrap();
    assert_eq!(started.session_id, s, "the session id never changes");
    assert_ne!(started.segment_id, before.active_segment);
    let after = rt.summary(&s).await.unwrap();
    assert_eq!(after.active_segment, started.segment_id);
    assert_eq!(after.segments.len(), 2);
    let mut req = start_req("echo", "four");
    req.session = Some(s.clone());
    run_to_end(&rt, req, None).await;
    // A subscriber from 0 sees the whole stream: the lineage, no hole.
    let mut sub = rt.subscribe(&s, Seq(0)).await.unwrap();
    let last = rt.last_seq(&s).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < last.0 as usize {
        match sub.next().await.unwrap().unwrap() {
            cairn_runtime::journal::Delivery::Event(e) => seen.push(e.seq.0),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(seen, (1..=last.0).collect::<Vec<_>>());
    // History: the summary stands for the prefix, then the new turns.
    let history = texts(&rt.history(&s, 100).await.unwrap());
    assert_eq!(history.len(), 3, "{history:?}");
    assert!(
        !history[0].0
            && history[0].1.contains("user: one")
            && history[0].1.contains("assistant: three")
    );
    assert_eq!(
        history[1..],
        [(true, "four".to_string()), (false, "four".to_string())]
    );
    // The raw prefix stays readable, on reopen too.
    drop(rt);
    let rt = runtime(tmp.path()).await;
    assert_eq!(started_seqs(&events(&rt, &s).await).len(), 4);
}

#[tokio::test]
async fn a_branch_carries_the_lineage_up_to_its_point() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let s = three_runs(&rt).await;
    let all = events(&rt, &s).await;
    let first_end = all.iter().find(|e| e.facts.is_some()).unwrap().seq;
    let started = rt.branch(&s, first_end).await.unwrap();
    assert_eq!(
        texts(&rt.history(&s, 100).await.unwrap()),
        [(true, "one".into()), (false, "one".into())]
    );
    let mut req = start_req("echo", "retry");
    req.session = Some(s.clone());
    let (_, _, run_events) = run_to_end(&rt, req, None).await;
    assert!(
        run_events
            .iter()
            .all(|e| e.segment_id == started.segment_id),
        "appends go to the active segment"
    );
    assert_eq!(
        texts(&rt.history(&s, 100).await.unwrap()),
        [
            (true, "one".into()),
            (false, "one".into()),
            (true, "retry".into()),
            (false, "retry".into())
        ]
    );
    let err = rt.branch(&s, Seq(9999)).await.unwrap_err();
    assert_eq!(err.code(), "invalid_request");
}

fn cairn_in(home: &std::path::Path, args: &[&str], crash: Option<&str>) -> std::process::Output {
    let mut cmd = cairn_bin();
    cmd.args(args).arg("--home").arg(home);
    if let Some(step) = crash {
        cmd.env("CAIRN_CRASH_AT", step);
    }
    cmd.output().unwrap()
}

#[test]
fn delete_killed_at_each_step_is_finished_and_never_served_half_done() {
    for step in [
        "delete-before-remove",
        "delete-after-marker",
        "delete-after-index",
        "delete-before-marker-removed",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let out = cairn_in(&home, &["run", "echo", "--prompt", "x", "--json"], None);
        let session = crate::common::session_of_output(&out.stdout);
        let out = cairn_in(&home, &["rm", &session], Some(step));
        assert!(!out.status.success(), "{step}: the process died");
        // Whatever the step, the next open serves it whole or not at all.
        let out = cairn_in(&home, &["ls", "--json"], None);
        let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let workers = std::fs::read_dir(home.join("workers")).unwrap().count();
        if step == "delete-before-remove" {
            assert_eq!(listed.as_array().unwrap().len(), 1, "{step}: still whole");
            let out = cairn_in(&home, &["rm", &session], None);
            assert!(out.status.success(), "{step}: the retry deletes");
        } else {
            assert_eq!(listed, serde_json::json!([]), "{step}: gone for readers");
            // A reader changed nothing; the next owner finishes the delete
            // (this `rm` then finds nothing left to delete).
            assert_eq!(
                std::fs::read_dir(home.join("workers")).unwrap().count(),
                workers,
                "{step}: a reader removes nothing"
            );
            let marked = std::fs::read_dir(home.join("workers"))
                .unwrap()
                .flatten()
                .all(|d| d.path().join("deleting").exists());
            assert!(marked, "{step}: what is left still carries its marker");
            cairn_in(&home, &["rm", &session], None);
        }
        let out = cairn_in(&home, &["ls", "--json"], None);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap(),
            serde_json::json!([])
        );
        assert_eq!(
            std::fs::read_dir(home.join("workers")).unwrap().count(),
            0,
            "{step}: the directory is gone"
        );
        assert_eq!(
            std::fs::read_dir(home.join("index/sessions"))
                .unwrap()
                .count(),
            0,
            "{step}: the index entry is gone"
        );
    }
}

#[test]
fn fork_killed_at_each_step_leaves_no_half_fork() {
    for step in [
        "fork-before-create",
        "fork-after-create",
        "fork-mid-copy",
        "fork-before-publish",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let out = cairn_in(&home, &["run", "echo", "--prompt", "x", "--json"], None);
        let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let session = lines[0]["session_id"].as_str().unwrap().to_string();
        let started = lines
            .iter()
            .find(|l| l["payload"]["event"]["type"] == "started")
            .unwrap()["seq"]
            .as_u64()
            .unwrap();
        let before = std::fs::read(cairn_export(&home, &session)).ok();
        let out = cairn_in(
            &home,
            &["fork", &session, "--before", &started.to_string()],
            Some(step),
        );
        assert!(!out.status.success(), "{step}: the process died");
        let out = cairn_in(&home, &["ls", "--json"], None);
        let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            listed.as_array().unwrap().len(),
            1,
            "{step}: only the source is served"
        );
        // The next owner rolls the staged fork back (this `rm` of a
        // session that was never there only opens the home as its owner).
        cairn_in(&home, &["rm", "never-created"], None);
        assert_eq!(
            std::fs::read_dir(home.join("workers")).unwrap().count(),
            1,
            "{step}: the staged fork is removed"
        );
        assert_eq!(
            std::fs::read(cairn_export(&home, &session)).ok(),
            before,
            "{step}: the source is untouched"
        );
        // A retry completes.
        let out = cairn_in(
            &home,
            &["fork", &session, "--before", &started.to_string(), "--json"],
            None,
        );
        assert!(
            out.status.success(),
            "{step}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = cairn_in(&home, &["ls", "--json"], None);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .unwrap()
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }
}

fn cairn_export(home: &std::path::Path, session: &str) -> std::path::PathBuf {
    let out = cairn_in(home, &["export", session], None);
    let path = home.with_extension(format!("export-{}", out.stdout.len()));
    std::fs::write(&path, &out.stdout).unwrap();
    path
}

#[tokio::test]
async fn opening_a_session_says_which_check_failed() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let (started, _, _) = run_to_end(&rt, start_req("echo", "x"), None).await;
    let doc = tmp
        .path()
        .join("home/workers")
        .join(started.worker_id.to_string())
        .join("session/session.json");
    let original = std::fs::read_to_string(&doc).unwrap();
    std::fs::write(&doc, original.replace("\"version\": 1", "\"version\": 7")).unwrap();
    let err = rt
        .summary(&started.session_id)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("format version 7") && err.contains("session.json"),
        "{err}"
    );
    let other = SessionId::parse("someone-else").unwrap();
    std::fs::write(
        &doc,
        original.replace(started.session_id.as_str(), other.as_str()),
    )
    .unwrap();
    let err = rt
        .summary(&started.session_id)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("names different sessions") || err.contains("session.json"),
        "{err}"
    );
    std::fs::write(&doc, &original).unwrap();
    assert!(rt.summary(&started.session_id).await.is_ok());
}

/// `cairn rm` of a worker whose worktree nests far deeper than the process
/// may open descriptors (here 256) removes it whole.
#[test]
fn rm_removes_a_worktree_deeper_than_the_descriptor_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let out = cairn_in(&home, &["run", "echo", "--prompt", "x", "--json"], None);
    let session = crate::common::session_of_output(&out.stdout);
    let worker = only_worker(&home);
    // 5,000 levels, made one descriptor at a time (echo, which opens no
    // file, got no `artifacts/`: the tree is put there as a user would).
    std::fs::create_dir(worker.join("runs/1/artifacts")).unwrap();
    let mut dir = cap_std::fs::Dir::open_ambient_dir(
        worker.join("runs/1/artifacts"),
        cap_std::ambient_authority(),
    )
    .unwrap();
    std::fs::write(worker.join("runs/1/artifacts/top.txt"), b"x").unwrap();
    for _ in 0..5_000 {
        dir.create_dir("d").unwrap();
        dir = dir.open_dir("d").unwrap();
    }
    dir.write("deepest.txt", b"bottom").unwrap();
    drop(dir);
    let out = match std::process::Command::new("prlimit")
        .arg("--nofile=256:256")
        .arg(env!("CARGO_BIN_EXE_cairn"))
        .args(["rm", &session, "--home"])
        .arg(&home)
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipped: no prlimit (util-linux) on this machine to lower the limit");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_dir(home.join("workers")).unwrap().count(), 0);
}

/// Seed 002's retention window: an ended run stays as it ended for
/// `[retention] ended_runs_ms`, then retires — its state reads `retired`
/// (`facts.status` still says how it ended), a `run_retired` entry says
/// when, and its journal stays readable and replays.
#[test]
fn an_ended_run_retires_after_the_retention_window() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("cairn.toml"),
        "[retention]\nended_runs_ms = 1500\n",
    )
    .unwrap();
    let served = serve(&home);
    let http = reqwest::blocking::Client::new();
    let started: serde_json::Value = http
        .post(format!("{}/v1/runs", served.url))
        .json(&serde_json::json!({"component": "echo", "prompt": "then retire"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let run = started["run_id"].as_str().unwrap().to_string();
    let session = started["session_id"].as_str().unwrap().to_string();
    let state = || -> serde_json::Value {
        http.get(format!("{}/v1/runs/{run}", served.url))
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    let t = std::time::Instant::now();
    let mut seen = Vec::new();
    loop {
        let v = state();
        let s = v["state"].as_str().unwrap_or_default().to_string();
        if seen.last() != Some(&s) {
            seen.push(s.clone());
        }
        if s == "retired" {
            assert_eq!(v["facts"]["status"], "finished", "{v}");
            break;
        }
        assert!(t.elapsed() < std::time::Duration::from_secs(20), "{seen:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(seen.contains(&"finished".to_string()), "{seen:?}");
    // The entry is written once the window passed.
    let t = std::time::Instant::now();
    let entries = loop {
        let text = http
            .get(format!("{}/v1/sessions/{session}/journal", served.url))
            .send()
            .unwrap()
            .text()
            .unwrap();
        if text.contains("\"run_retired\"") {
            break text;
        }
        assert!(t.elapsed() < std::time::Duration::from_secs(20), "{text}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let finished = entries.find("\"finished\"").unwrap();
    assert!(entries.find("\"run_retired\"").unwrap() > finished);
    drop(served);
    let out = crate::common::cairn_in(&home, &["replay", &session]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("1 of 1"), "{text}");
}

/// Each run of a session reserves the next generation, its directory made
/// create-new; one that is there already (left by a start whose first
/// entries a crash lost, here made by hand) is gone past, never named in
/// the journal, and the run goes on in the next one.
#[tokio::test]
async fn a_generation_directory_already_there_is_gone_past() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let worker_dir = |w: cairn_runtime::WorkerId| {
        tmp.path()
            .join("home/workers")
            .join(w.to_string())
            .join("runs")
    };
    let reserved = |events: &[SessionEvent]| -> Vec<u64> {
        events
            .iter()
            .filter_map(|e| match &e.payload {
                Payload::Lifecycle(LifecycleEvent::GenerationReserved { generation, .. }) => {
                    Some(generation.0)
                }
                _ => None,
            })
            .collect()
    };
    // A session's runs, each in the next generation, made as it starts.
    let (first, facts, _) = run_to_end(&rt, start_req("echo", "one"), None).await;
    assert_eq!(facts.status, RunStatus::Finished);
    let mut req = start_req("echo", "two");
    req.session = Some(first.session_id.clone());
    let (_, facts, _) = run_to_end(&rt, req, None).await;
    assert_eq!(facts.generation, cairn_runtime::Generation(2));
    let runs = worker_dir(first.worker_id);
    assert!(runs.join("1").is_dir() && runs.join("2").is_dir());
    assert_eq!(reserved(&events(&rt, &first.session_id).await), vec![1, 2]);
    // `runs/3` there before the third start: the run reserves 4.
    std::fs::create_dir(runs.join("3")).unwrap();
    let mut req = start_req("echo", "three");
    req.session = Some(first.session_id.clone());
    let (_, facts, _) = run_to_end(&rt, req, None).await;
    assert_eq!(facts.status, RunStatus::Finished, "{facts:?}");
    assert_eq!(facts.generation, cairn_runtime::Generation(4));
    assert_eq!(
        reserved(&events(&rt, &first.session_id).await),
        vec![1, 2, 4],
        "the number of a directory already there is never named"
    );
    // A new session whose `runs/1` is there before its first start.
    let (session, worker) = rt.create_session(None).await.unwrap();
    std::fs::create_dir(worker_dir(worker).join("1")).unwrap();
    let mut req = start_req("echo", "four");
    req.session = Some(session.clone());
    let (_, facts, _) = run_to_end(&rt, req, None).await;
    assert_eq!(facts.status, RunStatus::Finished, "{facts:?}");
    assert_eq!(reserved(&events(&rt, &session).await), vec![2]);
}
