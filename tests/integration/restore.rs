//! Crash restore by deterministic replay, divergence, and offline replay.

use crate::common::*;
use cairn_runtime::journal::event::{LifecycleEvent, RunStatus};
use cairn_runtime::runtime::{Runtime, RuntimeConfig};
use cairn_runtime::{AgentEvent, Payload, RunId, Seq, SessionEvent, SessionId};
use std::io::BufRead;
use std::path::Path;
use std::time::Duration;

/// Start `cairn run counter` as a child, kill it with SIGKILL after `after`
/// once it has printed `first_kind`; the journal lines it printed (each one
/// acknowledged: durable before it is broadcast).
fn run_and_kill(
    home: &Path,
    prompt: &str,
    first_kind: &str,
    after: Duration,
) -> Vec<serde_json::Value> {
    run_and_kill_when(home, prompt, first_kind, || {
        std::thread::sleep(after);
        true
    })
}

/// [`run_and_kill`], killing once `ready` holds (asked every 5 ms, for at
/// most 30 s) after the first `first_kind` event.
fn run_and_kill_when(
    home: &Path,
    prompt: &str,
    first_kind: &str,
    ready: impl Fn() -> bool,
) -> Vec<serde_json::Value> {
    let mut child = cairn_bin()
        .args([
            "run", "--json", "--decide", "approve", "--prompt", prompt, "--home",
        ])
        .arg(home)
        .arg(fixture("counter"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<serde_json::Value>();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str(&line) {
                let _ = tx.send(v);
            }
        }
    });
    let mut printed = Vec::new();
    loop {
        let v = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the child runs");
        let hit = v["payload"]["event"]["type"] == first_kind;
        printed.push(v);
        if hit {
            break;
        }
    }
    let since = std::time::Instant::now();
    while !ready() {
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "never ready to kill"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    child.wait().unwrap();
    reader.join().unwrap();
    printed.extend(rx.try_iter());
    printed
}

/// Claim `session` as the killed `cairn run` did (a claiming, present
/// observer), held until the returned observation drops. The CLI's
/// claim died with it; its lease runs out `lease_ttl_ms` (10 s) after the
/// restart and then its `cancel` policy would end the restored run — a
/// run still replaying under a loaded machine's full test suite was
/// cancelled so once. A client that comes back claims the run again, as
/// this does; `a_claimant_lost_with_its_host_lets_the_liveness_policy_decide`
/// covers the lease running out.
async fn reclaim(rt: &Runtime, session: &SessionId) -> cairn_runtime::runtime::Observation {
    rt.attach(
        session,
        cairn_runtime::runtime::AttachSpec::claiming_present(Seq(0)),
    )
    .await
    .expect("the restored session can be claimed")
}

fn events(items: Vec<cairn_runtime::store::JournalItem>) -> Vec<SessionEvent> {
    items
        .into_iter()
        .filter_map(|i| i.event().cloned())
        .collect()
}

fn texts_of(events: &[SessionEvent], run: RunId) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.run_id == Some(run))
        .filter_map(|e| match &e.payload {
            Payload::Agent(AgentEvent::TextDelta { text, .. }) => Some(text.clone()),
            _ => None,
        })
        .collect()
}

async fn finish_answering(
    rt: &Runtime,
    session: &SessionId,
    run: RunId,
) -> cairn_runtime::RunFacts {
    let wait = rt.wait(run);
    tokio::pin!(wait);
    loop {
        tokio::select! {
            facts = &mut wait => return facts.expect("the restored run ends"),
            _ = tokio::time::sleep(Duration::from_millis(10)) => {
                for p in rt.pending_decisions(Some(session)) {
                    let _ = rt.decide(&p.decision_id, serde_json::json!({"approved": true})).await;
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_at_random_moments_completes_by_replay() {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut restored_rounds = 0;
    for round in 0..20 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let printed = run_and_kill(&home, "1000 8", "started", Duration::from_millis(rng % 80));
        let rt = Runtime::open(RuntimeConfig::new(&home)).await.unwrap();
        let sessions = rt.list_sessions().await.unwrap();
        assert_eq!(sessions.len(), 1);
        let session = &sessions[0];
        let _claim = reclaim(&rt, session).await;
        let before = events(rt.read(session, Seq(0)).await.unwrap());
        let run = before
            .iter()
            .find(|e| {
                matches!(
                    e.payload,
                    Payload::Lifecycle(LifecycleEvent::Started { .. })
                )
            })
            .and_then(|e| e.run_id)
            .expect("the run started");
        let restored = rt.restored();
        let facts = if restored.is_empty() {
            // It finished before the kill.
            before
                .iter()
                .rev()
                .find_map(|e| e.facts.as_deref().cloned())
                .expect("a finished run has facts")
        } else {
            assert_eq!(restored, vec![run], "round {round}");
            restored_rounds += 1;
            finish_answering(&rt, session, run).await
        };
        assert_eq!(
            facts.status,
            RunStatus::Finished,
            "round {round}: {facts:?}"
        );
        let after = events(rt.read(session, Seq(0)).await.unwrap());
        // Every acknowledged line the child printed is in the journal, unchanged.
        for line in &printed {
            let seq = line["seq"].as_u64().unwrap();
            let stored: serde_json::Value =
                serde_json::from_str(after[(seq - 1) as usize].line()).unwrap();
            assert_eq!(&stored, line, "round {round}: seq {seq}");
        }
        // No duplicated and no lost event: the run counted once, in order.
        let expected: Vec<String> = (1..=1000).map(|i| i.to_string()).collect();
        assert_eq!(texts_of(&after, run), expected, "round {round}");
        let seqs: Vec<u64> = after.iter().map(|e| e.seq.0).collect();
        assert_eq!(seqs, (1..=after.len() as u64).collect::<Vec<_>>());
        if !restored.is_empty() {
            let resumed = after
                .iter()
                .filter(|e| {
                    matches!(
                        e.payload,
                        Payload::Lifecycle(LifecycleEvent::ResumedByReplay { .. })
                    )
                })
                .count();
            assert_eq!(resumed, 1, "round {round}");
            // The dead generation is evidence; the restore ran in a new one.
            let worker = rt.summary(session).await.unwrap().worker_id;
            let runs = home.join("workers").join(worker.to_string()).join("runs");
            // (Reserved before its first entry; a kill may land before its
            // layout, so the directory is the evidence that always exists.)
            assert!(runs.join("1").is_dir(), "round {round}");
            assert!(runs.join("2").is_dir(), "round {round}");
            assert_eq!(facts.generation.0, 2);
            assert!(
                !runs.join("2/worker.sock").exists(),
                "the live socket went with its generation"
            );
            // The clock and randomness replayed: one environment event, as journaled.
            let envs = after
                .iter()
                .filter(|e| matches!(&e.payload, Payload::Agent(AgentEvent::Custom { name, .. }) if name == "environment"))
                .count();
            assert_eq!(envs, 1, "round {round}");
        }
    }
    eprintln!("{restored_rounds} of 20 rounds were restored by replay");
    assert!(
        restored_rounds >= 10,
        "most rounds must kill the run mid-way"
    );
}

/// A run that only emits (its events go to the disk in group commits, off
/// the guest's path), killed at random moments: every entry its follower
/// saw is in the journal once and unchanged, and the restored run replays
/// what was committed and regenerates the rest — each number once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emitting_run_killed_at_random_moments_keeps_every_entry_seen_once() {
    const N: usize = 20_000;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut restored_rounds = 0;
    for round in 0..8 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let after = Duration::from_millis(rng % 150);
        let printed = run_and_kill(&home, &format!("{N} 0"), "text_delta", after);
        let rt = Runtime::open(RuntimeConfig::new(&home)).await.unwrap();
        let session = rt.list_sessions().await.unwrap().remove(0);
        let _claim = reclaim(&rt, &session).await;
        let restored = rt.restored();
        let facts = match restored.first() {
            Some(&run) => {
                restored_rounds += 1;
                rt.wait(run).await.unwrap()
            }
            None => {
                let all = events(rt.read(&session, Seq(0)).await.unwrap());
                all.iter()
                    .rev()
                    .find_map(|e| e.facts.as_deref().cloned())
                    .unwrap()
            }
        };
        assert_eq!(facts.status, RunStatus::Finished, "round {round}");
        let all = events(rt.read(&session, Seq(0)).await.unwrap());
        for line in &printed {
            let seq = line["seq"].as_u64().unwrap();
            let stored: serde_json::Value =
                serde_json::from_str(all[(seq - 1) as usize].line()).unwrap();
            assert_eq!(&stored, line, "round {round}: seq {seq}");
        }
        let expected: Vec<String> = (1..=N).map(|i| i.to_string()).collect();
        assert_eq!(texts_of(&all, facts.run_id), expected, "round {round}");
        let seqs: Vec<u64> = all.iter().map(|e| e.seq.0).collect();
        assert_eq!(seqs, (1..=all.len() as u64).collect::<Vec<_>>());
        rt.shutdown(Duration::from_secs(5)).await;
    }
    eprintln!("{restored_rounds} of 8 rounds were restored by replay");
    assert!(
        restored_rounds >= 4,
        "most rounds must kill the run mid-way"
    );
}

#[tokio::test]
async fn a_replay_with_another_component_diverges_and_marks_the_worker_stale() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    // Killed once its generation serves a socket (bound after
    // `BIND_AFTER` of life), so the kill leaves one behind.
    let socket_bound = || {
        std::fs::read_dir(home.join("workers"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|w| w.path().join("runs/1/worker.sock").exists())
    };
    run_and_kill_when(&home, "1000000 0", "text_delta", socket_bound);
    // Swap the worker's binding for another component.
    let workers: Vec<_> = std::fs::read_dir(home.join("workers"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let record_path = workers[0].join("worker.json");
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record_path).unwrap()).unwrap();
    let echo = cairn_runtime::component::digest_of(cairn_examples::built_in("echo").unwrap());
    record["component"] = serde_json::Value::String(echo);
    std::fs::write(&record_path, serde_json::to_vec_pretty(&record).unwrap()).unwrap();
    // The killed generation's socket is left behind, and never taken as live.
    assert!(workers[0].join("runs/1/worker.sock").exists());

    let rt = Runtime::open(RuntimeConfig::new(&home)).await.unwrap();
    let run = rt.restored()[0];
    let facts = rt.wait(run).await.unwrap();
    assert_eq!(facts.status, RunStatus::Failed);
    let session = &rt.list_sessions().await.unwrap()[0];
    let all = events(rt.read(session, Seq(0)).await.unwrap());
    let Payload::Lifecycle(LifecycleEvent::Failed { error }) = &all.last().unwrap().payload else {
        panic!()
    };
    assert_eq!(error.code, "replay_diverged");
    let details = error.details.clone().unwrap();
    assert!(details["seq"].as_u64().unwrap() > 0, "{details}");
    assert_eq!(details["expected"]["event"]["type"], "custom", "{details}");
    assert_eq!(details["got"]["event"]["type"], "progress", "{details}");
    let summary = rt.summary(session).await.unwrap();
    assert!(summary.stale);
    // Never continued, never silently restarted.
    let mut req = start_req("echo", "again");
    req.session = Some(session.clone());
    let err = rt.start(req).await.unwrap_err();
    assert!(err.to_string().contains("stale"), "{err}");
    drop(rt);
    let rt = Runtime::open(RuntimeConfig::new(&home)).await.unwrap();
    assert!(rt.restored().is_empty());
    assert!(
        workers[0].join("runs/1/worker.sock").exists(),
        "evidence is kept"
    );
}

/// A power loss can take `worker.json`'s unsynced reservation (and the
/// generation directory) with it; the journal's `GenerationReserved` is the
/// durable record, so the restore reserves past it and re-binds the worker.
#[tokio::test]
async fn a_rolled_back_worker_json_never_hands_a_generation_out_twice() {
    const N: usize = 5_000;
    let tmp = tempfile::tempdir().unwrap();
    // On a loaded machine the run can finish before the kill lands: then
    // nothing is interrupted, and the kill is tried again in a new home.
    let (home, worker) = (0..5)
        .find_map(|attempt| {
            let home = tmp.path().join(format!("home-{attempt}"));
            run_and_kill(&home, &format!("{N} 0"), "text_delta", Duration::ZERO);
            let worker = only_worker(&home);
            (!journal_holds(&worker, r#""type":"finished""#)).then_some((home, worker))
        })
        .expect("one of five runs is killed before it finishes");
    let record_path = worker.join("worker.json");
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record_path).unwrap()).unwrap();
    assert_eq!(record["last_generation"], 1);
    let bound = record["component"].clone();
    assert!(bound.is_string(), "{record}");
    record["last_generation"] = 0.into();
    record["component"] = serde_json::Value::Null;
    std::fs::write(&record_path, serde_json::to_vec_pretty(&record).unwrap()).unwrap();
    std::fs::remove_dir_all(worker.join("runs/1")).unwrap();

    let rt = Runtime::open(RuntimeConfig::new(&home)).await.unwrap();
    let session = rt.list_sessions().await.unwrap().remove(0);
    let _claim = reclaim(&rt, &session).await;
    let restored = rt.restored();
    assert_eq!(restored.len(), 1, "the interrupted run is restored");
    let facts = rt.wait(restored[0]).await.unwrap();
    assert_eq!(facts.status, RunStatus::Finished, "{facts:?}");
    assert_eq!(
        facts.generation.0, 2,
        "generation 1 is never handed out again"
    );
    assert!(worker.join("runs/2/artifacts").is_dir());
    assert!(!worker.join("runs/1").exists());
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record_path).unwrap()).unwrap();
    assert_eq!(record["last_generation"], 2);
    assert_eq!(record["component"], bound, "re-bound from the journal");
    let all = events(rt.read(&session, Seq(0)).await.unwrap());
    let expected: Vec<String> = (1..=N).map(|i| i.to_string()).collect();
    assert_eq!(texts_of(&all, restored[0]), expected);
}

/// Whether a worker's journal segments hold `text` (on disk, without
/// opening a runtime: that would restore what it finds).
fn journal_holds(worker: &Path, text: &str) -> bool {
    std::fs::read_dir(worker.join("session/segments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.to_string_lossy().ends_with(".trace.jsonl"))
        .any(|p| std::fs::read_to_string(p).unwrap().contains(text))
}

#[test]
fn cairn_replay_reports_matches_and_divergence() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let out = cairn_bin()
        .args([
            "run", "--json", "--decide", "approve", "--prompt", "6 2", "--home",
        ])
        .arg(&home)
        .arg(fixture("counter"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let session = crate::common::session_of_output(&out.stdout);
    // A second run in the same session, continuing the worker.
    let replay = |json: bool| {
        let mut cmd = cairn_bin();
        cmd.args(["replay", &session, "--home"]).arg(&home);
        if json {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    };
    let out = replay(false);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 of 1 runs matched"), "{text}");
    // Tamper with one journaled text: the replay must notice.
    let worker = only_worker(&home);
    let segments = worker.join("session/segments");
    let seg = std::fs::read_dir(&segments)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| !p.to_string_lossy().ends_with(".trace.jsonl"))
        .unwrap();
    let body = std::fs::read_to_string(&seg).unwrap();
    assert!(body.contains(r#""text":"4""#));
    // Edited as a journal without checksums could be (a checksummed line
    // changed by hand is corrupt, not a divergence).
    let edited: String = body
        .lines()
        .map(|l| match l.contains(r#""text":"4""#) {
            true => crate::common::without_crc(l).replace(r#""text":"4""#, r#""text":"four""#),
            false => l.to_string(),
        })
        .map(|l| l + "\n")
        .collect();
    std::fs::write(&seg, edited).unwrap();
    let out = replay(true);
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = &report["runs"][0];
    assert_eq!(run["result"], "diverged", "{report}");
    assert_eq!(
        run["error"]["details"]["expected"]["event"]["text"], "four",
        "{report}"
    );
    assert_eq!(
        run["error"]["details"]["got"]["event"]["text"], "4",
        "{report}"
    );
}

/// Stop a served home with SIGTERM and wait for the process to end.
fn stop(mut served: Served) -> std::process::ExitStatus {
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&served.child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    served.child.wait().unwrap()
}

#[test]
fn a_clean_stop_marks_the_home_and_a_crash_after_the_next_start_is_still_restored() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let marker = home.join(cairn_runtime::home_lock::CLEAN_FILE);
    let http = reqwest::blocking::Client::new();
    let wait_for = |what: &str, mut ok: Box<dyn FnMut() -> bool + '_>| {
        let until = std::time::Instant::now() + Duration::from_secs(30);
        while !ok() {
            assert!(
                std::time::Instant::now() < until,
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // A run that ends, then a clean stop: the home is marked.
    let served = serve(&home);
    let r: serde_json::Value = http
        .post(format!("{}/v1/runs", served.url))
        .json(&serde_json::json!({"component": "echo", "prompt": "hi", "session": "done"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let run = r["run_id"].as_str().expect("accepted").to_string();
    let url = served.url.clone();
    wait_for(
        "the run to end",
        Box::new(|| {
            http.get(format!("{url}/v1/runs/{run}"))
                .send()
                .ok()
                .and_then(|r| r.json::<serde_json::Value>().ok())
                .is_some_and(|v| v["state"] == "finished")
        }),
    );
    assert!(stop(served).success());
    assert!(marker.exists(), "a clean stop leaves {}", marker.display());

    // The next owner consumes the marker as it starts; killed with a run
    // waiting on a decision, it leaves none.
    let served = serve(&home);
    assert!(
        !marker.exists(),
        "the marker is gone once the home is owned"
    );
    let r: serde_json::Value = http
        .post(format!("{}/v1/runs", served.url))
        .json(
            &serde_json::json!({"component": "approval", "prompt": "deploy", "session": "waiting"}),
        )
        .send()
        .unwrap()
        .json()
        .unwrap();
    let waiting = r["run_id"].as_str().expect("accepted").to_string();
    let url = served.url.clone();
    wait_for(
        "the run to ask",
        Box::new(|| {
            http.get(format!("{url}/v1/decisions?session=waiting"))
                .send()
                .ok()
                .and_then(|r| r.json::<Vec<serde_json::Value>>().ok())
                .is_some_and(|d| !d.is_empty())
        }),
    );
    let mut served = served;
    served.child.kill().unwrap();
    served.child.wait().unwrap();
    assert!(!marker.exists(), "a crash leaves no marker");

    // So the start after the crash walks the home: the run is restored by
    // replay, asks again, and finishes when answered.
    let served = serve(&home);
    let url = served.url.clone();
    let mut pending = Vec::new();
    wait_for(
        "the restored run to ask",
        Box::new(|| {
            pending = http
                .get(format!("{url}/v1/decisions?session=waiting"))
                .send()
                .ok()
                .and_then(|r| r.json::<Vec<serde_json::Value>>().ok())
                .unwrap_or_default();
            !pending.is_empty()
        }),
    );
    let id = pending[0]["decision_id"].as_str().unwrap().to_string();
    let decided = http
        .post(format!("{url}/v1/decisions/{id}"))
        .json(&serde_json::json!({"value": {"approved": true}}))
        .send()
        .unwrap();
    assert_eq!(decided.status(), 200);
    wait_for(
        "the restored run to finish",
        Box::new(|| {
            http.get(format!("{url}/v1/runs/{waiting}"))
                .send()
                .ok()
                .and_then(|r| r.json::<serde_json::Value>().ok())
                .is_some_and(|v| v["state"] == "finished")
        }),
    );
    let journal: serde_json::Value = http
        .get(format!("{url}/v1/sessions/waiting/journal"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert!(
        journal["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["payload"]["event"]["type"] == "resumed_by_replay"),
        "the run went on by replay: {journal}"
    );
    // A clean stop with nothing live marks it again.
    assert!(stop(served).success());
    assert!(marker.exists());
}

/// A start whose first entries a crash lost leaves its generation behind
/// (its directory, a worktree its controller wrote, `worker.json` naming
/// it): the next run goes past that number and starts from the worktree of
/// the last generation the journal holds, not the vanished one's.
#[tokio::test]
async fn a_generation_the_journal_never_held_is_passed_and_its_worktree_not_carried() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let count = |worker: Option<cairn_runtime::WorkerId>| {
        let mut req = cairn_runtime::StartRun::new(
            cairn_runtime::runtime::ComponentRef::Path(fixture("hostile")),
            "count",
        );
        req.worker = worker;
        req
    };
    let (first, facts, _) = run_to_end(&rt, count(None), None).await;
    assert_eq!(facts.status, RunStatus::Finished);
    assert_eq!(facts.generation.0, 1);
    let worker = tmp
        .path()
        .join("home/workers")
        .join(first.worker_id.to_string());
    for name in ["a", "b"] {
        std::fs::write(worker.join("runs/1/artifacts").join(name), b"kept").unwrap();
    }
    // What a start cut short before its first commit leaves.
    std::fs::create_dir_all(worker.join("runs/2/artifacts")).unwrap();
    for name in ["v1", "v2", "v3", "v4", "v5"] {
        std::fs::write(worker.join("runs/2/artifacts").join(name), b"vanished").unwrap();
    }
    let path = worker.join("worker.json");
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    record["last_generation"] = serde_json::json!(2);
    std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();

    let (_, facts, events) = run_to_end(&rt, count(Some(first.worker_id)), None).await;
    assert_eq!(facts.status, RunStatus::Finished);
    assert_eq!(facts.generation.0, 3, "generation 2 is never reused");
    let Payload::Lifecycle(LifecycleEvent::Finished { text, .. }) = &events.last().unwrap().payload
    else {
        panic!("the run finishes: {events:?}")
    };
    assert_eq!(text, "2 entries", "generation 1's worktree carried over");
    assert_eq!(
        std::fs::read_dir(worker.join("runs/2/artifacts"))
            .unwrap()
            .count(),
        5,
        "the vanished generation is left as it was"
    );
}
