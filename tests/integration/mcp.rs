//! `cairn:tools`: a real MCP server (the official Python SDK, provisioned
//! by the test in the pinned environment) run host-side by `cairn serve`
//! for a session: discovery, calls, a tool's error, a secret that reaches
//! the server and never the journal, approval before a marked tool, the
//! connection kept across a session's runs (server starts counted from
//! outside), replay that reaches no server, and `kill -9` of `serve` with a
//! call answered and one under way.

use crate::common::{cairn_in, fixture, serve};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const TOKEN: &str = "mcp-token-5c1d9e7a-never-in-a-journal";

/// A home whose `cairn.toml` runs `tests/clients/mcp_server.py` as the
/// `notes` server, with the files it counts starts, calls and notes in.
struct Setup {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    starts: PathBuf,
    calls: PathBuf,
    notes: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let python = crate::common::py_tools();
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients/mcp_server.py");
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let (starts, calls, notes) = (
            tmp.path().join("starts"),
            tmp.path().join("calls"),
            tmp.path().join("notes"),
        );
        let key = tmp.path().join("mcp.key");
        std::fs::write(&key, format!("{TOKEN}\n")).unwrap();
        let toml = format!(
            r#"[secrets]
mcp-token = {{ file = "{key}" }}

[mcp]
idle_ms = 600000

[mcp.servers.notes]
command = ["{python}", "{script}"]
approve = ["delete_*"]
env = {{ STARTS = "{starts}", CALLS = "{calls}", NOTES = "{notes}", TOKEN = "{{{{secret:mcp-token}}}}" }}
"#,
            key = key.display(),
            python = python.display(),
            script = script.display(),
            starts = starts.display(),
            calls = calls.display(),
            notes = notes.display(),
        );
        std::fs::write(home.join("cairn.toml"), toml).unwrap();
        Setup {
            _tmp: tmp,
            home,
            starts,
            calls,
            notes,
        }
    }

    fn lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn starts(&self) -> usize {
        Self::lines(&self.starts).len()
    }

    fn calls(&self) -> Vec<String> {
        Self::lines(&self.calls)
    }
}

fn upload(http: &reqwest::blocking::Client, base: &str) -> String {
    let uploaded: Value = http
        .post(format!("{base}/v1/components"))
        .header("content-type", "application/wasm")
        .body(std::fs::read(fixture("mcp-user")).unwrap())
        .send()
        .unwrap()
        .json()
        .unwrap();
    uploaded["digest"].as_str().expect("uploaded").to_string()
}

fn start(
    http: &reqwest::blocking::Client,
    base: &str,
    component: &str,
    session: &str,
    steps: Value,
) -> String {
    let r: Value = http
        .post(format!("{base}/v1/runs"))
        .json(&json!({"component": component, "session": session, "prompt": steps.to_string()}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    r["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string()
}

fn until_ended(http: &reqwest::blocking::Client, base: &str, run: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let v: Value = http
            .get(format!("{base}/v1/runs/{run}"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        if ["finished", "failed", "cancelled", "parked"]
            .iter()
            .any(|s| v["state"] == *s)
        {
            return v;
        }
        assert!(Instant::now() < deadline, "the run never ended: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The session's journal, as `cairn export` writes it (checked free of the
/// secret).
fn journal(home: &Path, session: &str) -> Vec<Value> {
    crate::common::export_without(home, session, TOKEN)
}

fn of_type<'a>(entries: &'a [Value], ty: &str) -> Vec<&'a Value> {
    entries
        .iter()
        .filter(|e| e["payload"]["event"]["type"] == ty)
        .collect()
}

/// Each run's step answers (its `finished` text), in order.
fn answers(entries: &[Value]) -> Vec<Vec<Value>> {
    of_type(entries, "finished")
        .iter()
        .map(|e| serde_json::from_str(e["payload"]["event"]["text"].as_str().unwrap()).unwrap())
        .collect()
}

/// The wall time from each run's `started` to the end of its first
/// `tools` call (a list, or a call that lists first): the servers' start
/// (in `Preparing`) and discovery, or the reuse of what is open.
fn first_call_ms(entries: &[Value]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut seen_runs = Vec::new();
    for s in of_type(entries, "host_call_started") {
        let ev = &s["payload"]["event"];
        if ev["capability"] != "tools" || seen_runs.contains(&s["run_id"]) {
            continue;
        }
        seen_runs.push(s["run_id"].clone());
        let end = entries
            .iter()
            .find(|e| {
                e["run_id"] == s["run_id"]
                    && e["payload"]["event"]["type"] == "host_call_finished"
                    && e["payload"]["event"]["call_id"] == ev["call_id"]
            })
            .unwrap();
        let started = entries
            .iter()
            .find(|e| e["run_id"] == s["run_id"] && e["payload"]["event"]["type"] == "started")
            .unwrap();
        out.push(end["at_ms"].as_u64().unwrap() - started["at_ms"].as_u64().unwrap());
    }
    out
}

#[test]
fn mcp_tools_are_listed_called_kept_warm_and_replayed_without_the_server() {
    let setup = Setup::new();
    let http = reqwest::blocking::Client::new();
    let served = serve(&setup.home);
    let digest = upload(&http, &served.url);
    let run = start(
        &http,
        &served.url,
        &digest,
        "tools",
        json!([
            "list",
            {"call": "add", "args": {"a": 2, "b": 3}},
            {"call": "fail", "args": {"message": "no luck today"}},
            {"call": "whoami", "args": {}},
            {"call": "nope", "args": {}},
            {"call": "add", "args": {"a": "two"}}
        ]),
    );
    // The server opens in seed 002's `Preparing`, before the controller
    // starts: the session says so while it lasts.
    let mut states = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v: Value = http
            .get(format!("{}/v1/sessions/tools", served.url))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let state = v["state"]["state"].as_str().unwrap_or_default().to_string();
        if states.last() != Some(&state) {
            states.push(state.clone());
        }
        if state == "done" || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(states.contains(&"preparing".to_string()), "{states:?}");
    let end = until_ended(&http, &served.url, &run);
    assert_eq!(end["state"], "finished", "{end}");
    // A second run of the session finds the server still open.
    let run2 = start(
        &http,
        &served.url,
        &digest,
        "tools",
        json!([{"call": "add", "args": {"a": 40, "b": 2}}]),
    );
    assert_eq!(until_ended(&http, &served.url, &run2)["state"], "finished");
    assert_eq!(
        setup.starts(),
        1,
        "the server was started once for both runs"
    );

    let entries = journal(&setup.home, "tools");
    let runs = answers(&entries);
    let first = &runs[0];
    let list = first[0]["ok"].as_array().unwrap();
    let tool = |name: &str| list.iter().find(|t| t["name"] == name).unwrap().clone();
    assert_eq!(list.len(), 6, "{list:?}");
    assert_eq!(tool("add")["server"], "notes");
    assert_eq!(tool("add")["read_only"], true, "the server's readOnlyHint");
    assert_eq!(tool("add")["schema_type"], "object");
    assert_eq!(tool("write_note")["read_only"], false);
    assert_eq!(
        tool("delete_notes")["approve"],
        true,
        "approve = [\"delete_*\"]"
    );
    assert_eq!(tool("add")["approve"], false);
    assert_eq!(first[1]["ok"]["text"], "5");
    assert_eq!(first[1]["ok"]["is_error"], false);
    assert_eq!(first[2]["ok"]["is_error"], true, "{}", first[2]);
    assert!(
        first[2]["ok"]["text"]
            .as_str()
            .unwrap()
            .contains("no luck today"),
        "{}",
        first[2]
    );
    // The server got the secret; the journal (and so the guest) only its name.
    assert_eq!(first[3]["ok"]["text"], "token=[secret mcp-token]");
    let refused = first[4]["error"].as_str().unwrap();
    assert!(
        refused.contains("refused") && refused.contains("\"nope\""),
        "{refused}"
    );
    // Arguments the tool's schema refuses: the server says so, as a tool error.
    assert_eq!(first[5]["ok"]["is_error"], true, "{}", first[5]);
    assert_eq!(runs[1][0]["ok"]["text"], "42");
    let started = of_type(&entries, "host_call_started");
    assert!(
        started
            .iter()
            .all(|e| e["payload"]["event"]["capability"] == "tools")
    );
    assert_eq!(
        started
            .iter()
            .filter(|e| e["payload"]["event"]["op"] == "list")
            .count(),
        2,
        "each run listed once (the second run's call listed first)"
    );
    let calls_before = setup.calls();
    assert_eq!(
        calls_before,
        ["add", "fail", "whoami", "add"],
        "the unknown tool never reached the server; the ill-typed add failed in its validation"
    );
    let ms = first_call_ms(&entries);
    assert_eq!(ms.len(), 2);
    println!(
        "a run's start to its first tool answer (journaled): run 1 (starts the server) {} ms; run 2 (warm) {} ms",
        ms[0], ms[1]
    );

    // Every file of the home is free of the secret.
    for entry in super::sdk::files_under(&setup.home) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(TOKEN),
            "the secret is in {}",
            entry.display()
        );
    }
    // The server's stderr went to the generation's log.
    assert!(
        super::sdk::files_under(&setup.home)
            .iter()
            .any(|p| p.file_name().is_some_and(|n| n == "mcp.notes.err.log")
                && std::fs::read_to_string(p).unwrap().contains("notes server")),
        "no mcp.notes.err.log with the server's stderr"
    );

    // Deleting the session closes its server.
    let pid: i32 = Setup::lines(&setup.starts)[0].parse().unwrap();
    let r = http
        .delete(format!("{}/v1/sessions/tools", served.url))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
    {
        assert!(Instant::now() < deadline, "the server outlived its session");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(served);
}

#[test]
fn an_offline_replay_of_a_tool_session_reaches_no_server() {
    let setup = Setup::new();
    let http = reqwest::blocking::Client::new();
    let served = serve(&setup.home);
    let digest = upload(&http, &served.url);
    let run = start(
        &http,
        &served.url,
        &digest,
        "offline",
        json!([{"call": "write_note", "args": {"text": "once"}}, {"call": "add", "args": {"a": 1, "b": 1}}]),
    );
    assert_eq!(until_ended(&http, &served.url, &run)["state"], "finished");
    drop(served);
    let (starts, calls) = (setup.starts(), setup.calls());
    let out = cairn_in(&setup.home, &["replay", "offline", "--json"]);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("\"matched\""), "{report}");
    assert_eq!(setup.starts(), starts, "a replay started the server");
    assert_eq!(setup.calls(), calls, "a replay called a tool");
    assert_eq!(Setup::lines(&setup.notes), ["once"]);
}

#[test]
fn a_tool_marked_approve_is_called_only_once_a_person_approves() {
    let setup = Setup::new();
    let http = reqwest::blocking::Client::new();
    let served = serve(&setup.home);
    let digest = upload(&http, &served.url);
    std::fs::write(&setup.notes, "keep me\n").unwrap();
    let decide = |value: Value| {
        let deadline = Instant::now() + Duration::from_secs(60);
        let pending = loop {
            let d: Value = http
                .get(format!("{}/v1/decisions", served.url))
                .send()
                .unwrap()
                .json()
                .unwrap();
            if let Some(p) = d.as_array().unwrap().first() {
                break p.clone();
            }
            assert!(Instant::now() < deadline, "no decision was asked");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(pending["request_kind"], "approval", "{pending}");
        assert!(
            pending["prompt"].as_str().unwrap().contains("delete_notes"),
            "{pending}"
        );
        assert!(
            !setup.calls().contains(&"delete_notes".to_string()),
            "the tool was called before its approval"
        );
        let id = pending["decision_id"].as_str().unwrap();
        let r = http
            .post(format!("{}/v1/decisions/{id}", served.url))
            .json(&json!({ "value": value }))
            .send()
            .unwrap();
        assert_eq!(r.status(), 200);
    };
    let steps = json!([{"call": "delete_notes", "args": {}}]);
    let run = start(&http, &served.url, &digest, "careful", steps.clone());
    decide(json!({"approved": false, "reason": "keep them"}));
    assert_eq!(until_ended(&http, &served.url, &run)["state"], "finished");
    assert!(!setup.calls().contains(&"delete_notes".to_string()));
    assert!(setup.notes.exists());
    let run = start(&http, &served.url, &digest, "careful", steps);
    decide(json!({"approved": true}));
    assert_eq!(until_ended(&http, &served.url, &run)["state"], "finished");
    assert_eq!(setup.calls(), ["delete_notes"]);
    assert!(!setup.notes.exists());
    drop(served);
    let runs = answers(&journal(&setup.home, "careful"));
    assert_eq!(
        runs[0][0]["error"], "a person denied the call: keep them",
        "{:?}",
        runs[0]
    );
    assert_eq!(runs[1][0]["ok"]["text"], "deleted");
}

/// kill -9 of `serve` with one call answered and one under way: on restore
/// the answered call comes from the journal (not sent again) and the one
/// under way, which changes things, is answered `interrupted`.
#[test]
fn a_killed_server_never_sends_a_tool_call_twice() {
    let setup = Setup::new();
    let http = reqwest::blocking::Client::new();
    let served = serve(&setup.home);
    let digest = upload(&http, &served.url);
    let run = start(
        &http,
        &served.url,
        &digest,
        "crashy",
        json!([
            {"call": "write_note", "args": {"text": "before the crash"}},
            {"call": "slow_write", "args": {"text": "during the crash", "ms": 2000}},
            {"call": "add", "args": {"a": 1, "b": 2}}
        ]),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !setup.calls().contains(&"slow_write".to_string()) {
        assert!(Instant::now() < deadline, "slow_write never went out");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(served);
    let served = serve(&setup.home);
    let end = until_ended(&http, &served.url, &run);
    assert_eq!(end["state"], "finished", "{end}");
    drop(served);
    assert_eq!(
        setup.calls(),
        ["write_note", "slow_write", "add"],
        "a call was sent twice"
    );
    let entries = journal(&setup.home, "crashy");
    assert_eq!(of_type(&entries, "resumed_by_replay").len(), 1);
    let steps = &answers(&entries)[0];
    assert_eq!(steps[0]["ok"]["text"], "noted (1 notes)");
    let interrupted = steps[1]["error"].as_str().unwrap();
    assert!(interrupted.starts_with("interrupted"), "{interrupted}");
    assert_eq!(steps[2]["ok"]["text"], "3");
}

/// The same server over streamable HTTP (`url = …`), started by the test
/// on loopback: discovery and a call, with a header from a secret.
#[test]
fn a_server_over_streamable_http_is_reached_by_its_url() {
    let setup = Setup::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients/mcp_server.py");
    let mut server = std::process::Command::new(crate::common::py_tools())
        .arg(&script)
        .args(["--http", &port.to_string()])
        .env("STARTS", &setup.starts)
        .env("CALLS", &setup.calls)
        .env("NOTES", &setup.notes)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut std::process::Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _kill = Kill(&mut server);
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "the HTTP MCP server never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let toml = std::fs::read_to_string(setup.home.join("cairn.toml")).unwrap();
    let toml = toml.replace("[mcp.servers.notes]", "[mcp.servers.stdio-notes]")
        + &format!(
            "\n[mcp.servers.remote]\nurl = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ Authorization = \"Bearer {{{{secret:mcp-token}}}}\", x-client = \"cairn-test\" }}\n"
        );
    std::fs::write(setup.home.join("cairn.toml"), toml).unwrap();
    let http = reqwest::blocking::Client::new();
    let served = serve(&setup.home);
    let digest = upload(&http, &served.url);
    let run = start(
        &http,
        &served.url,
        &digest,
        "remote",
        json!(["list", {"call": "remote__add", "args": {"a": 20, "b": 1}}]),
    );
    assert_eq!(until_ended(&http, &served.url, &run)["state"], "finished");
    drop(served);
    let entries = journal(&setup.home, "remote");
    let steps = &answers(&entries)[0];
    let list = steps[0]["ok"].as_array().unwrap();
    // Both servers offer the same tools: each name is qualified by its server.
    assert_eq!(list.len(), 12, "{list:?}");
    assert!(
        list.iter()
            .any(|t| t["name"] == "remote__add" && t["server"] == "remote")
    );
    assert!(list.iter().any(|t| t["name"] == "stdio-notes__add"));
    assert_eq!(steps[1]["ok"]["text"], "21", "{}", steps[1]);
    // One start is the HTTP server's own (by the test); the stdio one was
    // started by cairn for the list.
    assert_eq!(setup.calls(), ["add"]);
}

/// A wrong `[mcp]` table is refused when the config loads, naming what is
/// wrong, before anything runs.
#[test]
fn a_wrong_mcp_config_is_refused_by_name() {
    let cases = [
        (
            "[mcp.servers.both]\ncommand = [\"x\"]\nurl = \"http://127.0.0.1:1/mcp\"\n",
            "mcp server \"both\" needs exactly one of command",
        ),
        (
            "[mcp.servers.none]\napprove = [\"*\"]\n",
            "mcp server \"none\" needs exactly one of command",
        ),
        (
            "[mcp.servers.ftp]\nurl = \"ftp://example.com\"\n",
            "url must start with http:// or https://",
        ),
        (
            "[mcp.servers.s]\ncommand = [\"x\"]\nenv = { T = \"{{secret:missing}}\" }\n",
            "names the secret \"missing\", which [secrets] does not define",
        ),
        (
            "[workspaces.w]\nmcp = [\"ghost\"]\n",
            "is granted the mcp server \"ghost\", which [mcp.servers] does not define",
        ),
        (
            "[mcp.servers.s]\ncommand = [\"x\"]\nflavour = \"mint\"\n",
            "unknown field `flavour`",
        ),
    ];
    for (toml, says) in cases {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("cairn.toml"), toml).unwrap();
        let out = cairn_in(tmp.path(), &["run", "echo", "--prompt", "hi"]);
        assert!(!out.status.success(), "{toml} was taken");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{toml}: {err}");
        assert!(
            err.contains("cairn.toml"),
            "the message names the file: {err}"
        );
    }
}

/// A session's server closes after `[mcp] idle_ms` with no call (the next
/// run starts it again), and one that died is started again on the next
/// call instead of failing it.
#[test]
fn an_idle_server_is_closed_and_a_dead_one_started_again() {
    let setup = Setup::new();
    let toml = std::fs::read_to_string(setup.home.join("cairn.toml")).unwrap();
    std::fs::write(
        setup.home.join("cairn.toml"),
        toml.replace("idle_ms = 600000", "idle_ms = 400"),
    )
    .unwrap();
    let http = reqwest::blocking::Client::new();
    let served = serve(&setup.home);
    let digest = upload(&http, &served.url);
    let add = json!([{"call": "add", "args": {"a": 1, "b": 1}}]);
    let run = start(&http, &served.url, &digest, "idle", add.clone());
    assert_eq!(until_ended(&http, &served.url, &run)["state"], "finished");
    assert_eq!(setup.starts(), 1);
    let first: i32 = Setup::lines(&setup.starts)[0].parse().unwrap();
    // Idle past 400 ms: closed (the process ends), started again by the next run.
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(first) {
        assert!(
            Instant::now() < deadline,
            "the idle server was never closed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let run = start(&http, &served.url, &digest, "idle", add.clone());
    assert_eq!(until_ended(&http, &served.url, &run)["state"], "finished");
    assert_eq!(setup.starts(), 2);
    // Killed under the host: the next call starts it again and is answered.
    let second: i32 = Setup::lines(&setup.starts)[1].parse().unwrap();
    let run = start(
        &http,
        &served.url,
        &digest,
        "idle",
        json!([{"call": "add", "args": {"a": 1, "b": 1}}, {"call": "add", "args": {"a": 2, "b": 2}}]),
    );
    std::process::Command::new("kill")
        .args(["-9", &second.to_string()])
        .status()
        .unwrap();
    assert_eq!(until_ended(&http, &served.url, &run)["state"], "finished");
    drop(served);
    let runs = answers(&journal(&setup.home, "idle"));
    for step in &runs[2] {
        assert!(step["ok"]["text"].is_string(), "{step}");
    }
    assert!(setup.starts() >= 2, "{}", setup.starts());
}

/// Whether process `pid` is running (a zombie is not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}
