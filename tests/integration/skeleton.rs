//! The walking skeleton: layout, generations, sandbox, component validation,
//! prompts, and the CLI.

use crate::common::*;
use cairn_runtime::journal::event::{AgentEvent, RunStatus};
use cairn_runtime::runtime::{ComponentRef, RuntimeError, StartRun};
use cairn_runtime::{LifecycleEvent, Payload};
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// A generation's `artifacts/` is made for a controller that imports
/// wasi:filesystem (its `/`), owner-only, and carried to the next
/// generation; echo's session, which imports none, gets one as soon as
/// its worktree holds something to carry.
#[tokio::test]
async fn a_controller_that_can_open_files_gets_its_artifacts() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let home = tmp.path().join("home");
    let counter = StartRun::new(ComponentRef::Path(fixture("counter")), "1");
    let (started, facts, _) = run_to_end(&rt, counter, None).await;
    assert_eq!(facts.status, RunStatus::Finished, "{facts:?}");
    let worker = home.join("workers").join(started.worker_id.to_string());
    assert!(names(&worker.join("runs/1")).contains("artifacts"));
    assert_eq!(mode(&worker.join("runs/1/artifacts")), 0o700);
    // What it wrote to its `/` is there.
    assert_eq!(
        std::fs::read_to_string(worker.join("runs/1/artifacts/stamp.txt")).unwrap(),
        "from 1"
    );

    let (started, facts, _) = run_to_end(&rt, start_req("echo", "hi"), None).await;
    assert_eq!(facts.status, RunStatus::Finished, "{facts:?}");
    let worker = home.join("workers").join(started.worker_id.to_string());
    assert!(!worker.join("runs/1/artifacts").exists());
    // A worktree put there (by hand, or a host write) is carried over.
    std::fs::create_dir(worker.join("runs/1/artifacts")).unwrap();
    std::fs::write(worker.join("runs/1/artifacts/kept.txt"), b"kept").unwrap();
    let mut req = start_req("echo", "again");
    req.worker = Some(started.worker_id);
    let (_, facts, _) = run_to_end(&rt, req, None).await;
    assert_eq!(facts.status, RunStatus::Finished, "{facts:?}");
    assert_eq!(facts.generation.0, 2);
    assert_eq!(
        std::fs::read(worker.join("runs/2/artifacts/kept.txt")).unwrap(),
        b"kept"
    );
}

#[tokio::test]
async fn echo_lays_out_the_aggregate_and_a_dense_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let prompt = "one two three four";
    let (started, facts, events) = run_to_end(&rt, start_req("echo", prompt), None).await;
    assert_eq!(facts.status, RunStatus::Finished);

    let home = tmp.path().join("home");
    assert_eq!(
        names(&home),
        set(&[
            "cache",
            "cairn.lock",
            "cairn.owner",
            "components",
            "index",
            "workers"
        ])
    );
    assert_eq!(
        names(&home.join("components")).len(),
        1,
        "the component is kept by digest"
    );
    let index = home.join("index/sessions");
    let key = format!("{}.json", started.session_id.storage_key());
    assert_eq!(names(&index), set(&[&key]));
    let worker = home.join("workers").join(started.worker_id.to_string());
    assert_eq!(
        names(&worker),
        set(&["worker.json", "metadata.json", "session", "runs"])
    );
    assert_eq!(
        names(&worker.join("session")),
        set(&["session.json", "segments"])
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(worker.join("metadata.json")).unwrap()).unwrap();
    let segment = meta["active_segment"].as_str().unwrap().to_string();
    // The trace file, `spawned/` and the logs are made by their first
    // write: echo writes none of them.
    assert_eq!(
        names(&worker.join("session/segments")),
        set(&[&format!("{segment}.jsonl")])
    );
    assert_eq!(names(&worker.join("runs")), set(&["1"]));
    // Echo imports no wasi:filesystem: it cannot see a `/`, and gets no
    // `artifacts/` (see `a_controller_that_can_open_files_gets_its_artifacts`).
    assert_eq!(names(&worker.join("runs/1")), set(&[]));
    // Owner-only everywhere.
    for dir in [&home.join("workers"), &worker, &worker.join("runs/1")] {
        assert_eq!(mode(dir), 0o700, "{}", dir.display());
    }
    for file in [
        worker.join("worker.json"),
        worker.join("metadata.json"),
        worker.join("session/session.json"),
        worker.join(format!("session/segments/{segment}.jsonl")),
        index.join(&key),
    ] {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(worker.join("worker.json")).unwrap()).unwrap();
    assert_eq!(record["last_generation"], 1);
    assert_eq!(record["component"], started.component);
    let session_doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(worker.join("session/session.json")).unwrap())
            .unwrap();
    assert_eq!(session_doc["format"], "worker-aggregate-v1");
    assert_eq!(session_doc["session_id"], started.session_id.as_str());

    // The journal on disk: dense from 1, one JSON line per event, ending in the facts.
    let lines = read_jsonl(&worker.join(format!("session/segments/{segment}.jsonl")));
    let seqs: Vec<u64> = lines.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=lines.len() as u64).collect::<Vec<_>>());
    assert_eq!(lines[0]["payload"]["event"]["type"], "segment_created");
    assert_eq!(
        lines.last().unwrap()["payload"]["event"]["type"],
        "finished"
    );
    assert_eq!(lines.last().unwrap()["facts"]["status"], "finished");
    let text: String = events
        .iter()
        .filter_map(|e| match &e.payload {
            Payload::Agent(AgentEvent::TextDelta { text, .. }) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, prompt);
    let deltas = events
        .iter()
        .filter(|e| matches!(e.payload, Payload::Agent(AgentEvent::TextDelta { .. })))
        .count();
    assert_eq!(deltas, 4, "several deltas, one per word");
}

#[tokio::test]
async fn a_second_run_on_the_worker_is_the_next_generation_of_the_same_session() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let (first, f1, _) = run_to_end(&rt, start_req("echo", "first"), None).await;
    let mut req = start_req("echo", "second");
    req.worker = Some(first.worker_id);
    let (second, f2, events) = run_to_end(&rt, req, None).await;
    assert_eq!(second.session_id, first.session_id);
    assert_eq!(second.worker_id, first.worker_id);
    assert_eq!(f1.generation.0, 1);
    assert_eq!(f2.generation.0, 2);
    assert_eq!(
        events.first().unwrap().seq,
        f1.last_seq.next(),
        "seq continues"
    );
    let worker = tmp
        .path()
        .join("home/workers")
        .join(first.worker_id.to_string());
    assert_eq!(names(&worker.join("runs")), set(&["1", "2"]));
}

/// A generation directory that exists already (a start whose first entries
/// a crash lost leaves one) is never reused: the reservation goes past it
/// and leaves it alone; past 64 in a row the run fails, the numbers consumed.
#[tokio::test]
async fn an_existing_generation_directory_is_skipped_and_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let (first, _, _) = run_to_end(&rt, start_req("echo", "first"), None).await;
    let runs = tmp
        .path()
        .join("home/workers")
        .join(first.worker_id.to_string())
        .join("runs");
    std::fs::create_dir(runs.join("2")).unwrap();
    std::fs::write(runs.join("2/evidence.txt"), b"keep me").unwrap();

    let again = |prompt: &str| {
        let mut req = start_req("echo", prompt);
        req.worker = Some(first.worker_id);
        req
    };
    let (_, facts, _) = run_to_end(&rt, again("second"), None).await;
    assert_eq!(facts.status, RunStatus::Finished);
    assert_eq!(facts.generation.0, 3, "runs/2 is gone past");
    assert_eq!(
        std::fs::read(runs.join("2/evidence.txt")).unwrap(),
        b"keep me"
    );
    assert_eq!(names(&runs.join("2")), set(&["evidence.txt"]));

    // 65 in a row: the run fails naming where it stopped looking.
    for g in 4..=68 {
        std::fs::create_dir(runs.join(g.to_string())).unwrap();
    }
    let (_, facts, events) = run_to_end(&rt, again("third"), None).await;
    assert_eq!(facts.status, RunStatus::Failed);
    let Payload::Lifecycle(LifecycleEvent::Failed { error }) = &events.last().unwrap().payload
    else {
        panic!("the run fails")
    };
    assert!(
        error.message.contains("up to runs/68 exist already"),
        "{}",
        error.message
    );
    for g in 4..=68 {
        assert!(
            names(&runs.join(g.to_string())).is_empty(),
            "runs/{g} left alone"
        );
    }
    // The numbers were consumed: the next run gets generation 69.
    let (_, facts, _) = run_to_end(&rt, again("fourth"), None).await;
    assert_eq!(facts.status, RunStatus::Finished);
    assert_eq!(facts.generation.0, 69);
}

#[tokio::test]
async fn the_sandbox_probe_reaches_nothing_outside_its_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let host_home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let (started, facts, events) =
        run_to_end(&rt, start_req("sandbox-probe", &host_home), None).await;
    let probes: Vec<&serde_json::Value> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Payload::Agent(AgentEvent::Custom { name, data }) if name == "probe" => Some(data),
            _ => None,
        })
        .collect();
    assert!(probes.len() >= 8, "one event per attempt: {probes:?}");
    for p in &probes {
        let allowed = p["allowed"].as_bool().unwrap();
        let inside = p["target"] == "probe.txt";
        assert_eq!(allowed, inside, "{p}");
    }
    assert_eq!(facts.status, RunStatus::Finished, "{events:?}");
    let generation = tmp
        .path()
        .join("home/workers")
        .join(started.worker_id.to_string())
        .join("runs/1");
    assert_eq!(
        std::fs::read_to_string(generation.join("artifacts/probe.txt")).unwrap(),
        "written by sandbox-probe\n"
    );
    assert!(!generation.join("escaped.txt").exists());
}

#[tokio::test]
async fn components_that_do_not_fit_are_refused_naming_what_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let refuse = |bytes: Vec<u8>| {
        let rt = rt.clone();
        async move {
            let req = StartRun::new(ComponentRef::Bytes(std::sync::Arc::new(bytes)), "x");
            rt.start(req).await.expect_err("refused").to_string()
        }
    };
    let junk = refuse(b"definitely not wasm".to_vec()).await;
    assert!(
        junk.contains("not a WebAssembly component") && junk.contains("magic"),
        "{junk}"
    );
    // A core module (the smallest valid one) is not a component either.
    let core = refuse(b"\0asm\x01\0\0\0".to_vec()).await;
    assert!(core.contains("core WebAssembly module"), "{core}");
    let other = std::fs::read(fixture("wrong-world")).unwrap();
    let wrong = refuse(other).await;
    assert!(wrong.contains("cairn:controller"), "{wrong}");
    assert!(
        wrong.contains("missing export `describe`") && wrong.contains("`hello`"),
        "{wrong}"
    );
    // Nothing was laid out for refused components.
    assert!(names(&tmp.path().join("home/workers")).is_empty());
    let missing = rt
        .start(StartRun::new(
            ComponentRef::Path("/nonexistent/x.wasm".into()),
            "",
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(missing.contains("/nonexistent/x.wasm"), "{missing}");
}

#[tokio::test]
async fn empty_and_huge_prompts_are_handled() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let (_, facts, _) = run_to_end(&rt, start_req("echo", ""), None).await;
    assert_eq!(facts.status, RunStatus::Finished);
    let huge = "x".repeat(10 << 20);
    let err = rt.start(start_req("echo", &huge)).await.unwrap_err();
    assert!(matches!(err, RuntimeError::TooLarge { .. }), "{err}");
    assert!(err.to_string().contains("10485760 bytes"), "{err}");
}

#[tokio::test]
async fn a_trapping_controller_fails_its_run_and_the_host_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let path = fixture("panicker");
    let (_, facts, events) = run_to_end(
        &rt,
        StartRun::new(ComponentRef::Path(path.clone()), "x"),
        None,
    )
    .await;
    assert_eq!(facts.status, RunStatus::Failed);
    let Payload::Lifecycle(LifecycleEvent::Failed { error }) = &events.last().unwrap().payload
    else {
        panic!()
    };
    assert_eq!(error.code, "trap");
    let (_, facts, events) =
        run_to_end(&rt, StartRun::new(ComponentRef::Path(path), "fail"), None).await;
    assert_eq!(facts.status, RunStatus::Failed);
    let Payload::Lifecycle(LifecycleEvent::Failed { error }) = &events.last().unwrap().payload
    else {
        panic!()
    };
    assert_eq!(error.code, "controller_error");
    assert!(error.message.contains("gave_up"), "{}", error.message);
    let (_, facts, _) = run_to_end(&rt, start_req("echo", "still here"), None).await;
    assert_eq!(facts.status, RunStatus::Finished);
}

#[tokio::test]
async fn approval_finishes_with_what_was_decided() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    for (value, expect) in [
        (serde_json::json!({"approved": true}), "approved"),
        (
            serde_json::json!({"approved": false, "reason": "not today"}),
            "denied: not today",
        ),
    ] {
        let (_, facts, events) =
            run_to_end(&rt, start_req("approval", "ship it"), Some(value.clone())).await;
        assert_eq!(facts.status, RunStatus::Finished);
        let kinds: Vec<String> = events
            .iter()
            .map(|e| {
                serde_json::to_value(&e.payload).unwrap()["event"]["type"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        let at = kinds
            .iter()
            .position(|k| k == "decision_requested")
            .unwrap();
        assert_eq!(kinds[at + 1], "approval_routed");
        assert_eq!(kinds[at + 2], "decision_recorded");
        let Payload::Lifecycle(LifecycleEvent::Finished { text, .. }) =
            &events.last().unwrap().payload
        else {
            panic!()
        };
        assert_eq!(text, expect);
    }
}

#[test]
fn cli_run_prints_json_lines_and_exits_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let out = cairn_bin()
        .args(["run", "echo", "--prompt", "hi there", "--json", "--home"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.last().unwrap()["payload"]["event"]["type"],
        "finished"
    );
    assert_eq!(
        lines.last().unwrap()["payload"]["event"]["text"],
        "hi there"
    );

    // --worker continues it; readable output names the journal.
    assert_eq!(lines[0]["payload"]["event"]["type"], "observer_attached");
    assert_eq!(lines[0]["payload"]["event"]["observer"]["role"], "claiming");
    let reserved = lines
        .iter()
        .find(|l| l["payload"]["event"]["type"] == "generation_reserved")
        .unwrap();
    let worker = reserved["payload"]["event"]["worker_id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = cairn_bin()
        .args([
            "run", "echo", "--prompt", "again", "--worker", &worker, "--home",
        ])
        .arg(tmp.path())
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("generation 2 reserved"), "{text}");
    assert!(
        text.contains("journal: ") && text.contains(".jsonl"),
        "{text}"
    );
}

#[test]
fn cli_run_without_an_answer_exits_nonzero_with_a_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let out = cairn_bin()
        .args(["run", "approval", "--prompt", "may I?", "--home"])
        .arg(tmp.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no --decide"), "{err}");

    let out = cairn_bin()
        .args([
            "run", "approval", "--prompt", "may I?", "--decide", "deny", "--home",
        ])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .contains("finished: denied")
    );

    let out = cairn_bin()
        .args(["run", "/nope/missing.wasm", "--home"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("cannot read component /nope/missing.wasm"),
        "{err}"
    );
}

#[test]
fn cli_demo_runs_both_examples() {
    let tmp = tempfile::tempdir().unwrap();
    let out = cairn_bin()
        .arg("demo")
        .env("CAIRN_HOME", tmp.path())
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("== echo finished"), "{text}");
    assert!(text.contains("== approval finished: approved"), "{text}");
    // Without a model, one line says how to turn the agent on.
    assert!(
        text.contains("agent: skipped, no model configured: set OPENAI_API_KEY"),
        "{text}"
    );
    assert_eq!(text.matches("journal: ").count(), 2);
    assert_eq!(names(&tmp.path().join("workers")).len(), 2);
}

#[test]
fn bench_journal_prints_ratios_and_writes_json() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("bench.json");
    let out = cairn_bin()
        .args(["bench", "journal", "--quick", "--dir"])
        .arg(tmp.path())
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        table.contains("raw write+fdatasync") && table.contains("SQLite WAL"),
        "{table}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(doc["version"], 1);
    let rows = doc["rows"].as_array().unwrap();
    // Three rows a batch size, the group-commit emit row at batch 1, and
    // the two rows of what a line's checksum costs.
    assert_eq!(rows.len(), 12);
    for r in rows {
        let (v, b, ratio) = (
            r["value"].as_f64().unwrap(),
            r["baseline_value"].as_f64().unwrap(),
            r["ratio"].as_f64().unwrap(),
        );
        assert!(v > 0.0 && b > 0.0 && (ratio - v / b).abs() < 1e-9, "{r}");
    }
    // The scratch files are gone.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
}

#[test]
fn bench_runtime_measures_every_figure_beside_its_baseline() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("bench.json");
    let out = cairn_bin()
        .args(["bench", "runtime", "--quick", "--dir"])
        .arg(tmp.path())
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    let figures: Vec<&str> = rows.iter().map(|r| r["figure"].as_str().unwrap()).collect();
    for needle in [
        "emit",
        "run start",
        "fsyncs",
        "waiting session",
        "parked session",
        "restore",
        "after a clean stop",
        "subscribers",
        "replay read",
    ] {
        assert!(
            figures.iter().any(|f| f.contains(needle)),
            "no {needle} row in {figures:?}"
        );
    }
    for r in rows {
        let (v, b) = (
            r["value"].as_f64().unwrap(),
            r["baseline_value"].as_f64().unwrap(),
        );
        assert!(v >= 0.0 && b > 0.0, "{r}");
    }
}
