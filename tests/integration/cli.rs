//! The management CLI, in-process (`--home`) and against a server (`--server`).

use crate::common::{cairn_bin, serve};
use serde_json::Value;

fn cairn(args: &[&str]) -> (bool, String, String) {
    let out = cairn_bin().args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn serve_refuses_without_insecure_local_or_off_loopback() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().to_str().unwrap();
    let (ok, _, err) = cairn(&["serve", "--home", home, "--listen", "127.0.0.1:0"]);
    assert!(!ok && err.contains("--insecure-local"), "{err}");
    let (ok, _, err) = cairn(&[
        "serve",
        "--home",
        home,
        "--insecure-local",
        "--listen",
        "0.0.0.0:0",
    ]);
    assert!(!ok && err.contains("loopback"), "{err}");
}

#[test]
fn the_management_commands_work_against_a_server() {
    let tmp = tempfile::tempdir().unwrap();
    let server = serve(&tmp.path().join("home"));
    let url = server.url.as_str();
    let http = reqwest::blocking::Client::new();
    let started: Value = http
        .post(format!("{url}/v1/runs"))
        .json(
            &serde_json::json!({"component": "approval", "prompt": "ship", "liveness": "continue"}),
        )
        .send()
        .unwrap()
        .json()
        .unwrap();
    let session = started["session_id"].as_str().unwrap().to_string();
    // Wait for the decision request.
    let id = loop {
        let pending: Value = http
            .get(format!("{url}/v1/decisions?session={session}"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        if let Some(id) = pending[0]["decision_id"].as_str() {
            break id.to_string();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (ok, out, err) = cairn(&["ls", "--server", url]);
    assert!(ok, "{err}");
    assert!(
        out.contains(&session) && out.contains("blocked (approval)"),
        "{out}"
    );
    let (ok, out, _) = cairn(&["inspect", &session, "--server", url, "--json"]);
    assert!(ok);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["session"]["state"]["state"], "blocked");
    let (ok, out, err) = cairn(&[
        "decide", &id, "approve", "--reason", "fine", "--server", url,
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("recorded"), "{out}");
    let run = started["run_id"].as_str().unwrap();
    loop {
        let r: Value = http
            .get(format!("{url}/v1/runs/{run}"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        if r["state"] == "finished" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (ok, out, _) = cairn(&["events", &session, "--server", url]);
    assert!(ok);
    assert!(
        out.contains("decided") && out.contains("finished: approved: fine"),
        "{out}"
    );
    let (ok, out, _) = cairn(&["export", &session, "--server", url]);
    assert!(ok);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seqs: Vec<u64> = lines.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=lines.len() as u64).collect::<Vec<_>>());
    let (ok, _, err) = cairn(&["decide", &id, "deny", "--server", url]);
    assert!(!ok && err.contains("conflict"), "{err}");
    let (ok, _, err) = cairn(&["cancel", run, "--server", url]);
    assert!(
        !ok && err.contains("only a live run can be cancelled"),
        "{err}"
    );
    let (ok, out, _) = cairn(&["rm", &session, "--server", url]);
    assert!(ok, "{out}");
    let (ok, _, err) = cairn(&["inspect", &session, "--server", url]);
    assert!(!ok && err.contains("not_found"), "{err}");
}

#[test]
fn the_management_commands_work_in_process() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().to_str().unwrap();
    let (ok, out, _) = cairn(&[
        "run",
        "echo",
        "--prompt",
        "in process",
        "--json",
        "--home",
        home,
    ]);
    assert!(ok);
    let first: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let session = first["session_id"].as_str().unwrap().to_string();
    let (ok, out, _) = cairn(&["ls", "--home", home, "--json"]);
    assert!(ok);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["session_id"], session.as_str());
    assert_eq!(v[0]["state"]["state"], "done");
    let (ok, out, _) = cairn(&["inspect", &session, "--home", home]);
    assert!(
        ok && out.contains("state      done") && out.contains("finished"),
        "{out}"
    );
    let (ok, out, _) = cairn(&["events", &session, "--after", "3", "--home", home]);
    assert!(ok);
    assert!(out.lines().next().unwrap().starts_with("#4"), "{out}");
    let (ok, out, _) = cairn(&["export", &session, "--home", home]);
    assert!(ok);
    assert!(
        out.lines()
            .all(|l| serde_json::from_str::<cairn_runtime::SessionEvent>(l).is_ok())
    );
    let (ok, _, _) = cairn(&["rm", &session, "--home", home]);
    assert!(ok);
    let (ok, out, _) = cairn(&["ls", "--home", home]);
    assert!(ok && out.contains("no sessions"), "{out}");
    let (ok, _, err) = cairn(&["inspect", "../../etc", "--home", home]);
    assert!(!ok && err.contains("invalid session id"), "{err}");
    let (ok, _, err) = cairn(&["inspect", "nothing-here", "--home", home]);
    assert!(!ok && err.contains("no session"), "{err}");
}

#[test]
fn a_run_of_a_component_that_cannot_be_read_leaves_no_session() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let missing = tmp.path().join("missing.wasm");
    let out = super::common::cairn_in(&home, &["run", missing.to_str().unwrap(), "--prompt", "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read component"));
    let ls = super::common::cairn_in(&home, &["ls", "--json"]);
    let sessions: serde_json::Value =
        serde_json::from_slice(&ls.stdout).unwrap_or(serde_json::json!([]));
    assert_eq!(
        sessions,
        serde_json::json!([]),
        "{}",
        String::from_utf8_lossy(&ls.stdout)
    );
}

/// A reader that goes away (`cairn run … | head -1`) stops the run and its
/// children cleanly: one line naming the broken pipe, no panic.
#[test]
fn a_closed_stdout_ends_a_delegating_run_without_a_panic() {
    use std::io::{BufRead, Read};
    let tmp = tempfile::tempdir().unwrap();
    let mut child = super::common::cairn_bin()
        .args(["run", "delegate", "--prompt", "one | two", "--home"])
        .arg(tmp.path().join("home"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("run "), "{first}");
    // The reader is dropped here: the next write fails.
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success());
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("Broken pipe"), "{err}");
}

/// Output for people, read by a pipe that closes early (`cairn ls | head
/// -1`): the command ends quietly with the status of a tool killed by
/// SIGPIPE (before, it panicked with a backtrace); a relative home is made
/// absolute (before, the compiled-code cache refused it: "Cache directory
/// path has to be absolute"); an error's cause is said once; `cairn run
/// --help` names every built-in.
#[test]
fn a_closed_pipe_a_relative_home_and_the_help_read_well() {
    let tmp = tempfile::tempdir().unwrap();
    let (ok, out, err) = cairn(&[
        "run",
        "echo",
        "--prompt",
        "hi",
        "--home",
        tmp.path().join("home").to_str().unwrap(),
    ]);
    assert!(ok, "{out}{err}");
    let mut child = cairn_bin()
        .args(["ls", "--home", tmp.path().join("home").to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(141), "{err}");

    let out = cairn_bin()
        .current_dir(tmp.path())
        .env_remove("CAIRN_HOME")
        .args(["run", "echo", "--prompt", "hi"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("absolute"), "{err}");
    assert!(tmp.path().join(".cairn").is_dir());

    // A missing component says why once (before: its cause twice).
    let missing = tmp.path().join("missing.wasm");
    let (ok, _, err) = cairn(&[
        "run",
        missing.to_str().unwrap(),
        "--home",
        tmp.path().join("home").to_str().unwrap(),
    ]);
    assert!(!ok);
    assert_eq!(err.matches("No such file").count(), 1, "{err}");

    let (_, help, _) = cairn(&["run", "--help"]);
    for name in cairn_examples::names() {
        assert!(
            help.contains(name),
            "`cairn run --help` names {name}: {help}"
        );
    }
}

/// `cairn serve --log-format json` with `RUST_LOG`: one JSON object a line
/// on stderr, and what a run reports carries its session, run, generation
/// and workspace.
#[test]
fn serve_logs_json_lines_with_the_run_in_their_span() {
    use std::io::{BufRead, BufReader};
    let tmp = tempfile::tempdir().unwrap();
    let mut child = cairn_bin()
        .args(["serve", "--insecure-local", "--listen", "127.0.0.1:0"])
        .args(["--log-format", "json", "--home"])
        .arg(tmp.path())
        .env("RUST_LOG", "cairn_runtime=debug")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("{line}"))
        .to_string();
    let http = reqwest::blocking::Client::new();
    let started: Value = http
        .post(format!("{url}/v1/runs"))
        .json(&serde_json::json!({"component": "echo", "prompt": "hi"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let run = started["run_id"].as_str().unwrap().to_string();
    let session = started["session_id"].as_str().unwrap().to_string();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut ended = None;
    for line in stderr.lines() {
        let line = line.unwrap();
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["level"].is_string(), "{v}");
        if v["fields"]["message"] == "run ended" && v["span"]["run_id"] == run.as_str() {
            ended = Some(v);
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let v = ended.expect("a run-ended line");
    assert_eq!(v["span"]["session_id"], session.as_str(), "{v}");
    assert_eq!(v["span"]["workspace"], "local", "{v}");
    assert!(
        v["span"]["generation"].as_u64().is_some_and(|g| g >= 1),
        "{v}"
    );
    assert_eq!(v["fields"]["status"], "finished", "{v}");
}

/// `cairn replay --component`: a session re-run by another component (a
/// shadow replay): the same code matches; other code diverges, naming the
/// first entry it did differently, exit 1; `--json` says which component.
#[test]
fn replay_against_another_component_reports_where_it_diverges() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let out = crate::common::cairn_in(
        &home,
        &["run", "echo", "--prompt", "shadow replay", "--json"],
    );
    assert!(out.status.success());
    let session = crate::common::session_of_output(&out.stdout);
    let same = crate::common::cairn_in(&home, &["replay", &session, "--component", "echo"]);
    let text = String::from_utf8_lossy(&same.stdout);
    assert!(same.status.success(), "{text}");
    assert!(
        text.contains("1 of 1 runs matched the journal when re-run by echo"),
        "{text}"
    );
    let other = crate::common::cairn_in(
        &home,
        &["replay", &session, "--component", "bench-emit", "--json"],
    );
    assert_eq!(other.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&other.stdout).unwrap();
    assert_eq!(report["component"], "bench-emit");
    let run = &report["runs"][0];
    assert_eq!(run["result"], "diverged", "{report}");
    assert_eq!(run["error"]["code"], "replay_diverged", "{report}");
    assert!(
        run["error"]["details"]["seq"].as_u64().unwrap() > 0,
        "{report}"
    );
    // A component that cannot be had is an error, not a divergence.
    let missing = crate::common::cairn_in(
        &home,
        &["replay", &session, "--component", "/nope/missing.wasm"],
    );
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("/nope/missing.wasm"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
}

/// `cairn replay` reads the home's compiled-code cache (what `cairn run`,
/// the owner, compiled) and writes nothing into it; with no cache it
/// compiles for itself and still adds nothing to the home.
#[test]
fn replay_uses_the_homes_compiled_cache_and_never_fills_it() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let out = crate::common::cairn_in(&home, &["run", "echo", "--prompt", "cached", "--json"]);
    assert!(out.status.success());
    let session = crate::common::session_of_output(&out.stdout);
    let cache = home.join("cache/compiled");
    let listing = |dir: &std::path::Path| -> Vec<(String, u64)> {
        fn walk(dir: &std::path::Path, out: &mut Vec<(String, u64)>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else {
                    out.push((p.display().to_string(), e.metadata().unwrap().len()));
                }
            }
        }
        let mut out = Vec::new();
        walk(dir, &mut out);
        out.sort();
        out
    };
    let before = listing(&cache);
    assert!(!before.is_empty(), "cairn run filled no compiled cache");
    let replay = crate::common::cairn_in(&home, &["replay", &session, "--json"]);
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let report: Value = serde_json::from_slice(&replay.stdout).unwrap();
    assert_eq!(report["compiled_cache"], "used", "{report}");
    assert_eq!(report["runs"][0]["result"], "matched", "{report}");
    assert_eq!(
        listing(&cache),
        before,
        "a replay wrote into the home's cache"
    );
    // A component the cache does not hold is compiled for the replay only.
    let other = crate::common::cairn_in(
        &home,
        &["replay", &session, "--component", "bench-emit", "--json"],
    );
    let report: Value = serde_json::from_slice(&other.stdout).unwrap();
    assert_eq!(report["compiled_cache"], "missed", "{report}");
    assert_eq!(
        listing(&cache),
        before,
        "a replay wrote into the home's cache"
    );
    // With the cache gone, a replay compiles for itself and leaves none.
    std::fs::remove_dir_all(&cache).unwrap();
    let replay = crate::common::cairn_in(&home, &["replay", &session, "--json"]);
    assert!(replay.status.success());
    let report: Value = serde_json::from_slice(&replay.stdout).unwrap();
    assert_eq!(report["compiled_cache"], "absent", "{report}");
    assert!(
        !cache.exists(),
        "a replay made a compiled cache in the home"
    );
}

/// `cairn run --answer KIND=JSON` and `--answers FILE` answer each decision
/// kind with what it asks for (not `{"approved": true}` for everything);
/// a file out of step with the run stops it naming both kinds.
#[test]
fn run_answers_every_decision_kind_from_flags_or_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let asker = crate::common::fixture("asker");
    let asker = asker.to_str().unwrap();
    let finished = |out: &std::process::Output| -> Value {
        let text = String::from_utf8_lossy(&out.stdout);
        let end = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|e| e["payload"]["event"]["type"] == "finished")
            .unwrap_or_else(|| {
                panic!(
                    "no finished entry: {text}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        serde_json::from_str(end["payload"]["event"]["text"].as_str().unwrap()).unwrap()
    };
    let out = crate::common::cairn_in(
        &home,
        &[
            "run",
            asker,
            "--json",
            "--prompt",
            "approval tool_result answer answer",
            "--answer",
            "approval=approve",
            "--answer",
            "tool_result={\"rows\": 3}",
            "--answer",
            "answer=\"blue\"",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        finished(&out),
        serde_json::json!([{"approved": true}, {"rows": 3}, "blue", "blue"])
    );
    // --decide answers approvals only; a tool result nobody gave stops the run.
    let out = crate::common::cairn_in(
        &home,
        &[
            "run",
            asker,
            "--prompt",
            "approval tool_result",
            "--decide",
            "approve",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("a decision (tool_result) was requested"),
        "{err}"
    );
    // A file, in order, each checked against the kind asked.
    let file = tmp.path().join("answers.json");
    std::fs::write(
        &file,
        r#"[{"kind": "answer", "value": "first"}, {"kind": "approval", "value": {"approved": false, "reason": "no"}}, {"kind": "answer", "value": 2}]"#,
    )
    .unwrap();
    let out = crate::common::cairn_in(
        &home,
        &[
            "run",
            asker,
            "--json",
            "--prompt",
            "answer approval answer",
            "--answers",
            file.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        finished(&out),
        serde_json::json!(["first", {"approved": false, "reason": "no"}, 2])
    );
    let out = crate::common::cairn_in(
        &home,
        &[
            "run",
            asker,
            "--prompt",
            "approval",
            "--answers",
            file.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("asked for a decision of kind approval") && err.contains("is for answer"),
        "{err}"
    );
    // A malformed flag is refused before anything runs, naming it.
    for (flag, says) in [
        ("tool_result={not json", "the value is not JSON"),
        ("colour=1", "\"colour\" is not a decision kind"),
        ("approval", "write KIND=JSON"),
    ] {
        let out = crate::common::cairn_in(
            &home,
            &["run", asker, "--prompt", "approval", "--answer", flag],
        );
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{flag}: {err}");
    }
}

/// `cairn decide ID --value …` on a home `cairn run` holds reaches that
/// run through its generation's control socket, while the run's own
/// terminal (a pty here) still asks.
#[test]
fn decide_reaches_a_run_that_cairn_run_holds_through_its_socket() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    // `cairn run` with its stdin on a pseudo-terminal, so it asks there.
    let under_pty = r#"
import os, pty, subprocess, sys
m, s = pty.openpty()
p = subprocess.Popen(sys.argv[1:], stdin=s, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
os.close(s)
out, err = p.communicate(timeout=120)
sys.stdout.buffer.write(out)
sys.stderr.buffer.write(err)
sys.exit(p.returncode)
"#;
    let child = std::process::Command::new("python3")
        .args(["-c", under_pty])
        .arg(env!("CARGO_BIN_EXE_cairn"))
        .args([
            "run",
            crate::common::fixture("asker").to_str().unwrap(),
            "--prompt",
            "answer",
            "--home",
        ])
        .arg(&home)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The decision, once journaled.
    let journal_lines = |home: &std::path::Path| -> Vec<Value> {
        let mut out = Vec::new();
        for w in std::fs::read_dir(home.join("workers"))
            .into_iter()
            .flatten()
            .flatten()
        {
            for seg in std::fs::read_dir(w.path().join("session/segments"))
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = seg.file_name().to_string_lossy().to_string();
                if name.ends_with(".jsonl") && !name.ends_with(".trace.jsonl") {
                    let text = std::fs::read_to_string(seg.path()).unwrap_or_default();
                    out.extend(text.lines().filter_map(|l| serde_json::from_str(l).ok()));
                }
            }
        }
        out
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let id = loop {
        if let Some(e) = journal_lines(&home)
            .into_iter()
            .find(|e| e["payload"]["event"]["type"] == "decision_requested")
        {
            break e["payload"]["event"]["decision_id"]
                .as_str()
                .unwrap()
                .to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no decision was asked"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let out = crate::common::cairn_in(
        &home,
        &["decide", &id, "--value", "\"from another terminal\""],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ran = child.wait_with_output().unwrap();
    assert!(
        ran.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
    let end = journal_lines(&home)
        .into_iter()
        .find(|e| e["payload"]["event"]["type"] == "finished")
        .expect("the run finished");
    assert_eq!(
        end["payload"]["event"]["text"], "[\"from another terminal\"]",
        "{end}"
    );
    // Nothing waits on a decision now: the next is refused, naming why.
    let again = crate::common::cairn_in(&home, &["decide", &id, "--value", "1"]);
    assert!(!again.status.success());
}

/// A directory lists its entries sorted by name on every filesystem: the
/// run sees them so, and `cairn replay` with its scratch worktree on
/// another filesystem (tmpfs, where the order differs) matches.
#[test]
fn a_directory_listing_is_sorted_and_replays_on_another_filesystem() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let lister = super::common::fixture("lister");
    let names = "zeta alpha mid beta omega gamma";
    let out = super::common::cairn_in(
        &home,
        &["run", lister.to_str().unwrap(), "--prompt", names, "--json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let session = super::common::session_of_output(&out.stdout);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(r#""text":"alpha beta gamma mid omega zeta""#),
        "{text}"
    );
    // The replay's scratch worktree on tmpfs when the machine has one.
    let shm = std::path::Path::new("/dev/shm");
    let scratch = match tempfile::tempdir_in(shm) {
        Ok(_) => shm.to_path_buf(),
        Err(_) => std::env::temp_dir(),
    };
    let out = super::common::cairn_bin()
        .args(["replay", &session, "--json", "--home"])
        .arg(&home)
        .env("TMPDIR", &scratch)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("\"matched\""), "{report}");
}
