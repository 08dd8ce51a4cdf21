//! Faults stay in their session: each kind of damage, done to one session
//! beside healthy sessions of two workspaces; the server starts, both
//! workspaces keep listing and running, the damaged session is `corrupt`
//! (409 with its reason, never a 500), and a lost index entry is recovered
//! rather than given a second worker.

use crate::common::{cairn_bin, serve};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const A: &str = "token-of-workspace-a-0123456789";
const B: &str = "token-of-workspace-b-0123456789";

struct Api {
    url: String,
    http: reqwest::blocking::Client,
}

impl Api {
    fn call(&self, method: &str, token: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = match method {
            "GET" => self.http.get(format!("{}{path}", self.url)),
            _ => self.http.post(format!("{}{path}", self.url)),
        }
        .bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().unwrap_or(Value::Null))
    }

    /// Run `echo` in `session` (a new one when `None`) to its end; the session.
    fn echo(&self, token: &str, session: Option<&str>) -> String {
        let mut body = json!({ "component": "echo", "prompt": "hello there" });
        if let Some(s) = session {
            body["session"] = json!(s);
        }
        let (status, v) = self.call("POST", token, "/v1/runs", Some(body));
        assert_eq!(status, 202, "{v}");
        let run = v["run_id"].as_str().unwrap().to_string();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, r) = self.call("GET", token, &format!("/v1/runs/{run}"), None);
            if r["facts"]["status"] == "finished" {
                break;
            }
            assert!(Instant::now() < deadline, "{r}");
            std::thread::sleep(Duration::from_millis(20));
        }
        v["session_id"].as_str().unwrap().to_string()
    }
}

fn api(url: &str) -> Api {
    Api {
        url: url.to_string(),
        http: reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
    }
}

/// The damage, each done to its own session.
const CASES: [&str; 9] = [
    "torn line in a segment that is not the active one",
    "a flipped byte in the journal",
    "a digit flipped inside a string value",
    "a line naming another session",
    "metadata.json deleted",
    "the active segment deleted",
    "the index entry deleted",
    "worker.json emptied",
    "session.json garbage",
];

fn damage(case: &str, worker: &Path, summary: &Value) {
    let segments = worker.join("session/segments");
    let active = segments.join(format!(
        "{}.jsonl",
        summary["active_segment"].as_str().unwrap()
    ));
    match case {
        "torn line in a segment that is not the active one" => {
            let first = summary["segments"][0].as_str().unwrap();
            let path = segments.join(format!("{first}.jsonl"));
            let bytes = std::fs::read(&path).unwrap();
            std::fs::write(&path, &bytes[..bytes.len() - 7]).unwrap();
        }
        "a flipped byte in the journal" => {
            let mut bytes = std::fs::read(&active).unwrap();
            let second_line = bytes.iter().position(|&b| b == b'\n').unwrap() + 1;
            bytes[second_line] = b'#';
            std::fs::write(&active, bytes).unwrap();
        }
        "a digit flipped inside a string value" => {
            // The line stays valid JSON with the same seq: only its checksum
            // can tell.
            let text = std::fs::read_to_string(&active).unwrap();
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            let (n, at) = lines
                .iter()
                .enumerate()
                .find_map(|(n, l)| {
                    let value = l.find("\"run_id\":\"")? + 10;
                    let digit = l[value..].find(|c: char| c.is_ascii_digit())?;
                    Some((n, value + digit))
                })
                .expect("a line with a run id holding a digit");
            let mut bytes = lines[n].clone().into_bytes();
            bytes[at] = if bytes[at] == b'7' { b'8' } else { b'7' };
            lines[n] = String::from_utf8(bytes).unwrap();
            serde_json::from_str::<Value>(&lines[n]).expect("still JSON");
            std::fs::write(&active, lines.join("\n") + "\n").unwrap();
        }
        "a line naming another session" => {
            // Well-formed, dense, and another session's: copied in by hand.
            let text = std::fs::read_to_string(&active).unwrap();
            let mine = summary["session_id"].as_str().unwrap();
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            lines[1] = lines[1].replace(
                &format!("\"session_id\":\"{mine}\""),
                "\"session_id\":\"another-session\"",
            );
            assert!(lines[1].contains("another-session"));
            // A line copied whole carries its own good checksum; this one
            // carries none, as lines written before checksums.
            lines[1] = crate::common::without_crc(&lines[1]);
            std::fs::write(&active, lines.join("\n") + "\n").unwrap();
        }
        "metadata.json deleted" => std::fs::remove_file(worker.join("metadata.json")).unwrap(),
        "the active segment deleted" => std::fs::remove_file(&active).unwrap(),
        "the index entry deleted" => {
            let home = worker.parent().unwrap().parent().unwrap();
            for e in std::fs::read_dir(home.join("index/sessions")).unwrap() {
                let e = e.unwrap();
                let doc: Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
                if doc["worker_id"] == summary["worker_id"] {
                    std::fs::remove_file(e.path()).unwrap();
                }
            }
        }
        "worker.json emptied" => std::fs::write(worker.join("worker.json"), b"").unwrap(),
        "session.json garbage" => {
            std::fs::write(worker.join("session/session.json"), b"garbage{").unwrap()
        }
        other => unreachable!("{other}"),
    }
}

#[test]
fn each_damaged_session_stays_alone_and_both_workspaces_keep_working() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("cairn.toml"),
        format!("[workspaces.a]\ntokens = [\"{A}\"]\n[workspaces.b]\ntokens = [\"{B}\"]\n"),
    )
    .unwrap();
    let served = serve(&home);
    let api1 = api(&served.url);
    let healthy_a = api1.echo(A, None);
    let healthy_b = api1.echo(B, None);
    let mut victims: Vec<(&str, String, Value)> = Vec::new();
    for case in CASES {
        let session = api1.echo(A, None);
        if case.starts_with("torn line") {
            let (status, v) = api1.call(
                "POST",
                A,
                &format!("/v1/sessions/{session}/compact"),
                Some(json!({})),
            );
            assert_eq!(status, 201, "{v}");
        }
        let (_, summary) = api1.call("GET", A, &format!("/v1/sessions/{session}"), None);
        victims.push((case, session, summary));
    }
    drop(served);
    for (case, _, summary) in &victims {
        let worker = home
            .join("workers")
            .join(summary["worker_id"].as_str().unwrap());
        damage(case, &worker, summary);
    }

    // The server starts with all of it present.
    let served = serve(&home);
    let api2 = api(&served.url);
    let mut usable = 0;
    for (case, session, summary) in &victims {
        let (status, v) = api2.call("GET", A, &format!("/v1/sessions/{session}"), None);
        if *case == "the index entry deleted" {
            // Written again by the new owner: the same worker, whole.
            assert_eq!(status, 200, "{case}: {v}");
            assert_eq!(v["worker_id"], summary["worker_id"], "{case}");
            let again = api2.echo(A, Some(session));
            assert_eq!(&again, session);
            let workers = std::fs::read_dir(home.join("workers")).unwrap().count();
            assert_eq!(workers, 2 + CASES.len(), "{case}: no second worker");
        } else {
            assert_eq!(status, 409, "{case}: {v}");
            assert_eq!(v["error"]["code"], "corrupt", "{case}: {v}");
            if case.contains("digit flipped") {
                let message = v["error"]["message"].as_str().unwrap();
                assert!(message.contains("checksum mismatch"), "{case}: {message}");
            }
            if case.contains("another session") {
                let message = v["error"]["message"].as_str().unwrap();
                assert!(
                    message.contains("names session \"another-session\"") && message.contains(":2"),
                    "{case}: {message}"
                );
            }
            let message = v["error"]["message"].as_str().unwrap();
            assert!(message.contains(session.as_str()), "{case}: {message}");
            assert!(
                !message.contains(tmp.path().to_str().unwrap()),
                "{case}: no host path: {message}"
            );
        }
        // Another workspace sees nothing of it.
        let (status, _) = api2.call("GET", B, &format!("/v1/sessions/{session}"), None);
        assert_eq!(status, 404, "{case}");
        usable += 1;
    }
    // Both workspaces list and run.
    let (status, list_a) = api2.call("GET", A, "/v1/sessions", None);
    assert_eq!(status, 200, "{list_a}");
    let rows = list_a.as_array().unwrap();
    assert_eq!(rows.len(), 1 + CASES.len(), "{list_a}");
    let corrupt: Vec<&Value> = rows
        .iter()
        .filter(|r| r["state"]["state"] == "corrupt")
        .collect();
    assert_eq!(corrupt.len(), CASES.len() - 1, "{list_a}");
    for row in &corrupt {
        assert!(
            row["corrupt"].as_str().is_some_and(|r| !r.is_empty()),
            "{row}"
        );
    }
    let (status, list_b) = api2.call("GET", B, "/v1/sessions", None);
    assert_eq!(status, 200);
    assert_eq!(list_b.as_array().unwrap().len(), 1, "{list_b}");
    assert_eq!(list_b[0]["session_id"], healthy_b.as_str());
    for (token, session) in [(A, &healthy_a), (B, &healthy_b)] {
        api2.echo(token, Some(session));
        api2.echo(token, None);
    }
    let (status, runs) = api2.call("GET", A, "/v1/runs", None);
    assert_eq!(status, 200, "{runs}");
    assert!(runs.as_array().unwrap().len() >= 3);

    // The local listing shows every session, the damaged ones with reasons.
    let out = cairn_bin()
        .args(["ls", "--json", "--home"])
        .arg(&home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all: Value = serde_json::from_slice(&out.stdout).unwrap();
    let corrupt = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["state"]["state"] == "corrupt")
        .count();
    assert_eq!(corrupt, CASES.len() - 1, "{all}");
    let out = cairn_bin()
        .args(["ls", "--home"])
        .arg(&home)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(table.contains("corrupt: session"), "{table}");
    eprintln!(
        "{usable} of {} kinds of damage left the rest of the home fully usable",
        CASES.len()
    );
    assert_eq!(usable, CASES.len());
}

fn cairn_crash(home: &Path, args: &[&str], crash: Option<&str>) -> std::process::Output {
    let mut cmd = cairn_bin();
    cmd.args(args).arg("--home").arg(home);
    if let Some(step) = crash {
        cmd.env("CAIRN_CRASH_AT", step);
    }
    cmd.output().unwrap()
}

fn entries(dir: PathBuf) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

#[test]
fn a_session_creation_killed_at_each_step_is_rolled_back() {
    for step in [
        "create-laid-out",
        "create-before-index",
        "create-after-index",
        "create-before-publish",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let out = cairn_crash(&home, &["run", "echo", "--prompt", "x"], Some(step));
        assert!(!out.status.success(), "{step}: the process died");
        // Readers see no session, and no damage either.
        let out = cairn_crash(&home, &["ls", "--json"], None);
        assert!(out.status.success(), "{step}");
        assert_eq!(
            serde_json::from_slice::<Value>(&out.stdout).unwrap(),
            json!([]),
            "{step}"
        );
        // The next owner rolls it back, then works.
        let out = cairn_crash(&home, &["run", "echo", "--prompt", "y"], None);
        assert!(
            out.status.success(),
            "{step}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(entries(home.join("workers")), 1, "{step}: one worker");
        assert_eq!(
            entries(home.join("index/sessions")),
            1,
            "{step}: one index entry"
        );
    }
}

#[test]
fn a_named_session_whose_creation_was_killed_can_be_created_again() {
    for step in ["create-after-index", "create-before-publish"] {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let served = crate::common::serve_with(&home, &[("CAIRN_CRASH_AT", step)]).unwrap();
        let http = reqwest::blocking::Client::new();
        let died = http
            .post(format!("{}/v1/sessions", served.url))
            .json(&json!({ "id": "named" }))
            .send();
        assert!(died.is_err(), "{step}: the server died mid-creation");
        drop(served);
        let served = serve(&home);
        let get = http
            .get(format!("{}/v1/sessions/named", served.url))
            .send()
            .unwrap();
        assert_eq!(get.status(), 404, "{step}: never half there");
        let created = http
            .post(format!("{}/v1/sessions", served.url))
            .json(&json!({ "id": "named" }))
            .send()
            .unwrap();
        assert_eq!(created.status(), 201, "{step}");
        let get = http
            .get(format!("{}/v1/sessions/named", served.url))
            .send()
            .unwrap();
        assert_eq!(get.status(), 200, "{step}");
        assert_eq!(entries(home.join("workers")), 1, "{step}");
    }
}

#[test]
fn a_segment_switch_killed_before_it_lands_leaves_the_old_segment_whole() {
    for op in [&["compact"][..], &["branch", "--at", "3"][..]] {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let out = cairn_crash(
            &home,
            &["run", "echo", "--prompt", "one two", "--json"],
            None,
        );
        let session = crate::common::session_of_output(&out.stdout);
        let export = |home: &Path| cairn_crash(home, &["export", &session], None).stdout;
        let inspect = |home: &Path| -> Value {
            let out = cairn_crash(home, &["inspect", &session, "--json"], None);
            serde_json::from_slice(&out.stdout).unwrap()
        };
        let before = export(&home);
        let active = inspect(&home)["session"]["active_segment"].clone();
        let mut args = vec![op[0], session.as_str()];
        args.extend_from_slice(&op[1..]);
        let out = cairn_crash(&home, &args, Some("segment-before-switch"));
        assert!(!out.status.success(), "{op:?}: the process died");
        // metadata.json names the cut-short switch's segment pending (seed
        // 000's pending segment pointer), its file beside the others.
        let meta_path = std::fs::read_dir(home.join("workers"))
            .unwrap()
            .map(|w| w.unwrap().path().join("metadata.json"))
            .find(|m| std::fs::read_to_string(m).is_ok_and(|t| t.contains("pending_segment")))
            .unwrap_or_else(|| panic!("{op:?}: no metadata.json names a pending segment"));
        let meta: Value = serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
        let pending = meta["pending_segment"].as_str().unwrap().to_string();
        let orphan = meta_path
            .parent()
            .unwrap()
            .join(format!("session/segments/{pending}.jsonl"));
        assert!(orphan.exists(), "{op:?}");
        assert_eq!(export(&home), before, "{op:?}: the journal is as it was");
        assert_eq!(
            inspect(&home)["session"]["active_segment"],
            active,
            "{op:?}"
        );
        // The next run still sees every turn, and the switch can be done.
        let out = cairn_crash(&home, &args, None);
        assert!(
            out.status.success(),
            "{op:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let after = inspect(&home);
        assert_ne!(after["session"]["active_segment"], active);
        // The next owner rolled the cut-short switch back: its file gone,
        // the pointer cleared.
        assert!(!orphan.exists(), "{op:?}: the orphan segment stayed");
        let meta: Value = serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
        assert!(meta["pending_segment"].is_null(), "{op:?}: {meta}");
        let lines: Vec<Value> = String::from_utf8_lossy(&export(&home))
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let created = lines
            .iter()
            .filter(|l| l["payload"]["event"]["type"] == "segment_created")
            .count();
        assert_eq!(created, 2, "{op:?}: the first segment and the new one");
        for (i, l) in lines.iter().enumerate() {
            assert_eq!(l["seq"].as_u64(), Some(i as u64 + 1));
        }
    }
}

#[test]
fn a_session_creation_killed_after_its_first_commit_is_published_and_its_run_finished() {
    // The first commit of a new session syncs its worker's tree and its
    // first entries at once (one `syncfs`, or every entry: both ways, and
    // the default's choice); the crash comes before the `creating` marker
    // is removed. The run's start was durable, so the next owner keeps the
    // session and finishes the run by replay.
    for mode in ["syncfs", "each", "auto"] {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir(&home).unwrap();
        std::fs::write(
            home.join("cairn.toml"),
            format!("[store]\nfirst_commit_sync = \"{mode}\"\n"),
        )
        .unwrap();
        let served =
            crate::common::serve_with(&home, &[("CAIRN_CRASH_AT", "create-committed")]).unwrap();
        let http = reqwest::blocking::Client::new();
        let died = http
            .post(format!("{}/v1/runs", served.url))
            .json(&json!({ "session": "named", "component": "echo", "prompt": "kept" }))
            .send();
        assert!(
            died.is_err(),
            "{mode}: the server died after the first commit"
        );
        drop(served);
        let markers: Vec<PathBuf> = std::fs::read_dir(home.join("workers"))
            .unwrap()
            .map(|e| e.unwrap().path().join("creating"))
            .filter(|p| p.exists())
            .collect();
        assert_eq!(
            markers.len(),
            1,
            "{mode}: the crash came before the marker went"
        );
        let served = serve(&home);
        let get = http
            .get(format!("{}/v1/sessions/named", served.url))
            .send()
            .unwrap();
        assert_eq!(
            get.status(),
            200,
            "{mode}: the committed creation is published"
        );
        assert!(
            !markers[0].exists(),
            "{mode}: the next owner removed the marker"
        );
        finished_runs(&http, &served.url, "named", 1, mode);
        assert_eq!(entries(home.join("workers")), 1, "{mode}");
        assert_eq!(entries(home.join("index/sessions")), 1, "{mode}");
    }
}

/// A chat run's first entries ride its next commit: a crash before it
/// (crash point `start-minted`: the generation reserved, nothing of the run
/// committed) was never acknowledged — the client got no answer — and
/// leaves no run: a new session is rolled back, an existing one keeps its
/// history, and its next run goes past the lost generation.
#[test]
fn a_chat_run_killed_before_its_first_commit_leaves_nothing_acknowledged() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let http = reqwest::blocking::Client::new();
    let chat = |url: &str, session: Option<&str>| {
        let mut req = http
            .post(format!("{url}/v1/chat/completions"))
            .json(&json!({ "model": "echo", "messages": [{"role": "user", "content": "hi"}] }));
        if let Some(s) = session {
            req = req.header("x-cairn-session", s);
        }
        req.send()
    };
    // One finished run on "kept".
    let served = serve(&home);
    let done = chat(&served.url, Some("kept")).unwrap();
    assert_eq!(done.status(), 200);
    drop(served);

    for session in [Some("kept"), Some("fresh"), None] {
        let served =
            crate::common::serve_with(&home, &[("CAIRN_CRASH_AT", "start-minted")]).unwrap();
        assert!(
            chat(&served.url, session).is_err(),
            "{session:?}: the server died before answering"
        );
        drop(served);
    }
    let served = serve(&home);
    let sessions: Vec<Value> = http
        .get(format!("{}/v1/sessions", served.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let ids: Vec<&str> = sessions
        .iter()
        .filter_map(|s| s["session_id"].as_str())
        .collect();
    assert_eq!(
        ids,
        ["kept"],
        "the new sessions were rolled back: {sessions:?}"
    );
    let runs: Vec<Value> = http
        .get(format!("{}/v1/runs?session=kept", served.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(runs.len(), 1, "no run of the lost start: {runs:?}");
    assert_eq!(runs[0]["facts"]["status"], "finished");
    let next = chat(&served.url, Some("kept")).unwrap();
    assert_eq!(next.status(), 200);
    let run = next.headers()["x-cairn-run"].to_str().unwrap().to_string();
    let facts: Value = http
        .get(format!("{}/v1/runs/{run}", served.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(facts["facts"]["status"], "finished", "{facts}");
    assert_eq!(
        facts["facts"]["generation"], 3,
        "generation 2 was reserved by the lost start and is never reused: {facts}"
    );
    assert_eq!(entries(home.join("workers")), 1);
    assert_eq!(entries(home.join("index/sessions")), 1);
}

/// A new session's first commit whose `syncfs` the disk refuses once
/// (`CAIRN_FAULT=syncfs-fails-once`: the process's first shared `syncfs`
/// fails) is answered — its call is not left waiting — and leaves the home
/// consistent: the refused batch is cut back, the journal holds one run
/// with one end and no seq twice, and runs go on. (Under load the refusal
/// often hits entries committed before the run's: the call then followed
/// the session from a seq that was dropped and minted again, and before
/// subscribers went back on a drop it waited forever.)
#[test]
fn a_first_commit_the_disk_refuses_once_is_answered_and_leaves_the_home_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(
        home.join("cairn.toml"),
        "[store]\nfirst_commit_sync = \"syncfs\"\n",
    )
    .unwrap();
    let served = crate::common::serve_with(&home, &[("CAIRN_FAULT", "syncfs-fails-once")]).unwrap();
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let resp = http
        .post(format!("{}/v1/chat/completions", served.url))
        .json(&json!({ "model": "echo", "messages": [{ "role": "user", "content": "hi" }] }))
        .send()
        .expect("answered, not left waiting");
    let status = resp.status();
    let body = resp.text().unwrap();
    // Which commit the refusal hits depends on timing: the run's whole
    // batch (cut back, the run's end retried as any refused end: the call
    // gets its answer) or entries committed before the run's (the run ends
    // failed, and the call says why). Either way it is answered — also
    // when the call followed the session from a seq that was dropped and
    // minted again — and says what happened.
    match status.as_u16() {
        200 => assert!(body.contains(r#""content":"hi""#), "{body}"),
        _ => {
            assert!(
                status.is_client_error() || status.is_server_error(),
                "{status}: {body}"
            );
            assert!(body.contains("the disk refused it"), "{status}: {body}");
        }
    }
    drop(served);
    let out = cairn_crash(&home, &["ls", "--json"], None);
    assert!(out.status.success());
    let listed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let session = listed[0]["session_id"].as_str().unwrap().to_string();
    let out = cairn_crash(&home, &["export", &session], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Nothing of the refused write is left beside the retried one.
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["seq"].as_u64(), Some(i as u64 + 1), "{lines:?}");
    }
    let ends = lines
        .iter()
        .filter(|l| {
            matches!(
                l["payload"]["event"]["type"].as_str(),
                Some("finished" | "failed")
            )
        })
        .count();
    assert_eq!(ends, 1, "one end of the one run: {lines:?}");
    let markers = std::fs::read_dir(home.join("workers"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().join("creating").exists())
        .count();
    assert_eq!(markers, 0, "the creation was published");
    let out = cairn_crash(&home, &["run", "echo", "--prompt", "y"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(entries(home.join("workers")), 2);
}

/// A headless run's first entries are durable before its generation's
/// directory is made (the directory's inode is not in their sync). A crash
/// in between (crash point `start-durable`: the client was answered `202`,
/// no `runs/<gen>/` made yet) leaves a number the journal names and no
/// directory: the restart restores the run into the next generation, the
/// lost one is never named again, and a later run goes past both.
#[test]
fn a_run_killed_between_its_durable_start_and_its_directory_is_restored_past_it() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let served = crate::common::serve_with(&home, &[("CAIRN_CRASH_AT", "start-durable")]).unwrap();
    let started = http
        .post(format!("{}/v1/runs", served.url))
        .json(&json!({ "component": "echo", "prompt": "hi", "session": "cut" }))
        .send();
    // Told once durable, then the crash: the answer may or may not have
    // left before the process died.
    if let Ok(resp) = &started {
        assert_eq!(resp.status(), 202, "the start was accepted");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut served = served;
    while served.child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the server did not reach start-durable"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let worker = std::fs::read_dir(home.join("workers"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .expect("the session's worker");
    let runs = worker.join("runs");
    assert!(
        !runs.join("1").exists(),
        "the directory is made after the sync, and the crash came first"
    );
    let reserved = |worker: &Path| -> Vec<u64> {
        let mut out = Vec::new();
        for seg in std::fs::read_dir(worker.join("session/segments")).unwrap() {
            for line in std::fs::read_to_string(seg.unwrap().path())
                .unwrap()
                .lines()
            {
                let v: Value = serde_json::from_str(line).unwrap();
                if v["payload"]["event"]["type"] == "generation_reserved" {
                    out.push(v["payload"]["event"]["generation"].as_u64().unwrap());
                }
            }
        }
        out
    };
    assert_eq!(
        reserved(&worker),
        vec![1],
        "the start's entries are durable"
    );

    // The restart restores the run into generation 2.
    let served = serve(&home);
    let runs_now = finished_runs(&http, &served.url, "cut", 1, "restored");
    assert_eq!(runs_now[0]["facts"]["generation"], 2, "{runs_now:?}");
    assert_eq!(reserved(&worker), vec![1, 2], "1 is never named again");
    assert!(!runs.join("1").exists() && runs.join("2").is_dir());

    // A later run of the session goes past both.
    let resp = http
        .post(format!("{}/v1/runs", served.url))
        .json(&json!({ "component": "echo", "prompt": "again", "session": "cut" }))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 202);
    let id = resp.json::<Value>().unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let runs_now = finished_runs(&http, &served.url, "cut", 2, "later");
    let later = runs_now
        .iter()
        .find(|r| r["run_id"] == id.as_str())
        .unwrap();
    assert_eq!(later["facts"]["generation"], 3, "{later}");
    assert_eq!(reserved(&worker), vec![1, 2, 3]);
}

/// The session's runs once there are `count` of them, every one finished
/// (within 20 s).
fn finished_runs(
    http: &reqwest::blocking::Client,
    url: &str,
    session: &str,
    count: usize,
    what: &str,
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let runs: Vec<Value> = http
            .get(format!("{url}/v1/runs?session={session}"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert!(runs.len() <= count, "{what}: {runs:?}");
        if runs.len() == count && runs.iter().all(|r| r["facts"]["status"] == "finished") {
            return runs;
        }
        assert!(Instant::now() < deadline, "{what}: {runs:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
