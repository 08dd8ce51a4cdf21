//! Outgoing HTTP through `wasi:http`: a Rust controller using `wstd`'s
//! ordinary client (and, in `js_sdk.rs`, a JavaScript one using `fetch`)
//! reaches an origin server the test runs on loopback, as the workspace's
//! `allowed_outbound_hosts` allow; every request and response is journaled,
//! a secret reaches the origin only from a header template, `cairn replay`
//! sends nothing, and `kill -9` of `serve` during a request re-sends it on
//! restore only when its method is idempotent.

use crate::common::{cairn_in, fixture, serve};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TOKEN: &str = "http-token-8f3a2c1d-never-in-a-journal";

/// One request the origin received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// An HTTP/1.1 origin on loopback that records every request before it
/// answers: `/echo` (the request back as JSON), `/slow?ms=N`, `/bytes`
/// (not UTF-8), `/big` (8 KiB), `/redirect` (302 to `/echo`).
pub struct Origin {
    pub port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Origin {
    pub fn start() -> Origin {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || {
                    let _ = answer(conn, port, &log);
                });
            }
        });
        Origin { port, seen }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The requests to `path` (query included) by `method`.
    pub fn count(&self, method: &str, path: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.method == method && s.path == path)
            .count()
    }

    pub fn wait_for(&self, method: &str, path: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.count(method, path) == 0 {
            assert!(
                Instant::now() < deadline,
                "{method} {path} never arrived: {:?}",
                self.seen()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn answer(conn: std::net::TcpStream, port: u16, log: &Mutex<Vec<Seen>>) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body)?;
    let seen = Seen {
        method,
        path,
        headers,
        body,
    };
    log.lock().unwrap().push(seen.clone());
    let (status, content_type, extra, bytes): (&str, &str, String, Vec<u8>) =
        match seen.path.split('?').next().unwrap_or_default() {
            "/echo" => (
                "200 OK",
                "application/json",
                String::new(),
                json!({
                    "method": seen.method,
                    "authorization": seen.header("authorization"),
                    "from": seen.header("x-from"),
                    "body": String::from_utf8_lossy(&seen.body),
                })
                .to_string()
                .into_bytes(),
            ),
            "/slow" => {
                let ms: u64 = seen
                    .path
                    .split("ms=")
                    .nth(1)
                    .and_then(|v| v.split('&').next())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1000);
                std::thread::sleep(Duration::from_millis(ms));
                ("200 OK", "text/plain", String::new(), b"slow done".to_vec())
            }
            "/bytes" => (
                "200 OK",
                "application/octet-stream",
                String::new(),
                vec![0, 159, 146, 150, 255],
            ),
            "/big" => ("200 OK", "text/plain", String::new(), vec![b'x'; 8192]),
            "/redirect" => (
                "302 Found",
                "text/plain",
                format!("location: http://127.0.0.1:{port}/echo\r\n"),
                Vec::new(),
            ),
            _ => ("404 Not Found", "text/plain", String::new(), b"no".to_vec()),
        };
    let mut out = conn;
    write!(
        out,
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n{extra}connection: close\r\n\r\n",
        bytes.len()
    )?;
    out.write_all(&bytes)?;
    out.flush()
}

/// A home whose `cairn.toml` allows the origin, with the secret `api`.
fn home_for(tmp: &Path, origin: &Origin, extra: &str) -> std::path::PathBuf {
    let home = tmp.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let key = tmp.join("api.key");
    std::fs::write(&key, format!("{TOKEN}\n")).unwrap();
    std::fs::write(
        home.join("cairn.toml"),
        format!(
            "[secrets]\napi = {{ file = \"{}\" }}\n\n[http]\nallowed_outbound_hosts = [\"http://127.0.0.1:{}\"]\n{extra}",
            key.display(),
            origin.port
        ),
    )
    .unwrap();
    home
}

/// The session's journal as `cairn export` writes it, checked free of the
/// secret.
pub fn exported(home: &Path, session: &str) -> Vec<Value> {
    crate::common::export_without(home, session, TOKEN)
}

fn events<'a>(entries: &'a [Value], ty: &str) -> Vec<&'a Value> {
    entries
        .iter()
        .filter(|e| e["payload"]["event"]["type"] == ty)
        .collect()
}

/// `cairn replay SESSION --json`: every run matched.
pub fn replays(home: &Path, session: &str) {
    let out = cairn_in(home, &["replay", session, "--json"]);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("\"matched\""), "{report}");
    assert!(!report.contains("\"diverged\""), "{report}");
}

fn run_steps(home: &Path, steps: &Value) -> (String, Vec<Value>, std::process::Output) {
    let out = cairn_in(
        home,
        &[
            "run",
            fixture("http-user").to_str().unwrap(),
            "--prompt",
            &steps.to_string(),
            "--json",
        ],
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let session = crate::common::session_of_output(&out.stdout);
    (session, lines, out)
}

fn finished_steps(lines: &[Value]) -> Vec<Value> {
    let end = events(lines, "finished");
    assert_eq!(end.len(), 1, "{lines:?}");
    serde_json::from_str(end[0]["payload"]["event"]["text"].as_str().unwrap()).unwrap()
}

#[test]
fn a_rust_controller_reaches_an_allowed_host_and_replays_without_it() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let home = home_for(tmp.path(), &origin, "");
    let steps = json!([
        {"url": origin.url("/echo"), "headers": {"authorization": "Bearer {{secret:api}}"}},
        {"method": "POST", "url": origin.url("/echo"), "body": "hello"},
        {"url": origin.url("/bytes")},
        {"url": format!("http://localhost:{}/echo", origin.port)},
        {"url": origin.url("/redirect")},
    ]);
    let (session, lines, out) = run_steps(&home, &steps);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers = finished_steps(&lines);
    // The secret reached the origin from the template, and came back
    // redacted where the origin echoed it.
    let seen = origin.seen();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_eq!(
        seen[0].header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert_eq!(answers[0]["status"], 200, "{answers:?}");
    let echoed: Value = serde_json::from_str(answers[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(echoed["authorization"], "Bearer [secret api]");
    assert_eq!(seen[1].method, "POST");
    assert_eq!(seen[1].body, b"hello");
    let echoed: Value = serde_json::from_str(answers[1]["body"].as_str().unwrap()).unwrap();
    assert_eq!(echoed["body"], "hello");
    assert_eq!(answers[2]["status"], 200);
    assert_eq!(answers[2]["bytes"], 5, "{answers:?}");
    // A host the allowlist does not name: refused, never sent.
    let denied = answers[3]["error"].as_str().unwrap_or_default();
    assert!(denied.contains("Denied"), "{answers:?}");
    assert!(
        seen.iter()
            .all(|s| s.header("host") != Some(&format!("localhost:{}", origin.port)))
    );
    // A redirect is the controller's to follow (each hop checked).
    assert_eq!(answers[4]["status"], 302);
    assert_eq!(answers[4]["headers"]["location"], origin.url("/echo"));

    let entries = exported(&home, &session);
    let started = events(&entries, "host_call_started");
    let http: Vec<&&Value> = started
        .iter()
        .filter(|e| e["payload"]["event"]["capability"] == "http")
        .collect();
    assert_eq!(http.len(), 5);
    let first = &http[0]["payload"]["event"]["request"];
    assert_eq!(first["method"], "GET");
    assert!(
        first["headers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h[1] == "Bearer {{secret:api}}"),
        "the journal keeps the template: {first}"
    );
    let finished = events(&entries, "host_call_finished");
    assert!(
        finished
            .iter()
            .any(|e| e["payload"]["event"]["response"]["body_base64"] == "AJ+Slv8="),
        "a body that is not text is journaled in base64"
    );
    assert!(
        finished
            .iter()
            .any(|e| e["payload"]["event"]["error"]["code"] == "refused")
    );

    let before = origin.seen().len();
    replays(&home, &session);
    assert_eq!(origin.seen().len(), before, "a replay sent a request");
}

/// Limits: a request body past `http_body_bytes` is refused before it is
/// sent, a response body past it is an error, and past `http_requests` the
/// run ends `limit_exceeded`.
#[test]
fn http_limits_bound_bodies_and_requests() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let home = home_for(
        tmp.path(),
        &origin,
        "\n[limits]\nhttp_requests = 2\nhttp_body_bytes = 4096\n",
    );
    let steps = json!([
        {"method": "POST", "url": origin.url("/echo"), "body": "y".repeat(5000)},
        {"url": origin.url("/big")},
        {"url": origin.url("/echo")},
        {"url": origin.url("/echo")},
    ]);
    let (_session, lines, _out) = run_steps(&home, &steps);
    let responses: Vec<&Value> = lines
        .iter()
        .filter(|e| e["payload"]["event"]["name"] == "response")
        .map(|e| &e["payload"]["event"]["data"])
        .collect();
    let body_error = responses[0]["error"].as_str().unwrap_or_default();
    assert!(body_error.contains("BodySize"), "{responses:?}");
    let big = responses[1]["error"].as_str().unwrap_or_default();
    assert!(big.contains("BodySize"), "{responses:?}");
    assert_eq!(responses[2]["status"], 200, "{responses:?}");
    assert_eq!(
        origin.count("POST", "/echo"),
        0,
        "an oversized body was sent"
    );
    assert_eq!(origin.count("GET", "/big"), 1);
    assert_eq!(
        origin.count("GET", "/echo"),
        1,
        "the request past the limit was sent"
    );
    let failed = events(&lines, "failed");
    assert_eq!(failed.len(), 1, "{lines:?}");
    let error = &failed[0]["payload"]["event"]["error"];
    assert_eq!(error["code"], "limit_exceeded", "{error}");
    assert_eq!(error["details"]["limit"], "http_requests", "{error}");
}

/// kill -9 of `serve` while two requests are under way: on restore the GET
/// is sent again (idempotent) and the POST is answered `interrupted`; the
/// request answered before the crash comes from the journal.
#[test]
fn a_killed_server_sends_again_only_what_is_idempotent() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let home = home_for(tmp.path(), &origin, "");
    let client = reqwest::blocking::Client::new();
    let served = serve(&home);
    let digest: Value = client
        .post(format!("{}/v1/components", served.url))
        .header("content-type", "application/wasm")
        .body(std::fs::read(fixture("http-user")).unwrap())
        .send()
        .unwrap()
        .json()
        .unwrap();
    let digest = digest["digest"].as_str().unwrap().to_string();
    let start = |session: &str, steps: Value| -> String {
        let r: Value = client
            .post(format!("{}/v1/runs", served.url))
            .json(&json!({"component": digest, "session": session, "prompt": steps.to_string()}))
            .send()
            .unwrap()
            .json()
            .unwrap();
        r["run_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}"))
            .to_string()
    };
    let get = start(
        "getter",
        json!([{"url": origin.url("/echo")}, {"url": origin.url("/slow?ms=3000&id=get")}]),
    );
    let post = start(
        "poster",
        json!([{"method": "POST", "url": origin.url("/slow?ms=3000&id=post"), "body": "once"}]),
    );
    origin.wait_for("GET", "/slow?ms=3000&id=get");
    origin.wait_for("POST", "/slow?ms=3000&id=post");
    drop(served);
    let served = serve(&home);
    let ended = |run: &str| -> Value {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let v: Value = client
                .get(format!("{}/v1/runs/{run}", served.url))
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
    };
    assert_eq!(ended(&get)["state"], "finished");
    assert_eq!(ended(&post)["state"], "finished");
    drop(served);
    assert_eq!(
        origin.count("GET", "/echo"),
        1,
        "an answered request was sent again"
    );
    assert_eq!(
        origin.count("GET", "/slow?ms=3000&id=get"),
        2,
        "the GET was not sent again"
    );
    assert_eq!(
        origin.count("POST", "/slow?ms=3000&id=post"),
        1,
        "the POST was sent twice"
    );
    let getter = exported(&home, "getter");
    let steps = finished_steps(&getter);
    assert_eq!(steps[1]["body"], "slow done", "{steps:?}");
    let poster = exported(&home, "poster");
    let steps = finished_steps(&poster);
    let error = steps[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("interrupted"), "{steps:?}");
    let before = origin.seen().len();
    replays(&home, "getter");
    replays(&home, "poster");
    assert_eq!(origin.seen().len(), before, "a replay sent a request");
}

#[test]
fn a_wrong_allowlist_entry_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    for (toml, named) in [
        (
            "[http]\nallowed_outbound_hosts = [\"api.example.com\"]\n",
            "\"api.example.com\"",
        ),
        (
            "[workspaces.acme]\ntokens = [\"acme-token-0123456789\"]\nallowed_outbound_hosts = [\"ftp://x\"]\n",
            "workspace \"acme\"",
        ),
    ] {
        std::fs::write(home.join("cairn.toml"), toml).unwrap();
        let out = cairn_in(&home, &["ls"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains("allowed_outbound_hosts"), "{stderr}");
        assert!(stderr.contains(named), "{stderr}");
    }
}

/// One chat call, one run: the official openai SDK with a timeout shorter
/// than the run (a controller waiting 1.5 s on an HTTP origin) retries, and
/// each retry joins the first attempt's run — the origin sees the request
/// once, the session holds one run, and the SDK's last attempt gets the
/// answer.
#[test]
fn a_retried_chat_call_joins_its_first_run() {
    let origin = Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let home = home_for(tmp.path(), &origin, "");
    let served = serve(&home);
    let http = reqwest::blocking::Client::new();
    let uploaded: Value = http
        .post(format!("{}/v1/components", served.url))
        .header("content-type", "application/wasm")
        .body(std::fs::read(fixture("http-user")).unwrap())
        .send()
        .unwrap()
        .json()
        .unwrap();
    let digest = uploaded["digest"].as_str().unwrap();
    let steps = json!([{"url": origin.url("/slow?ms=1500&id=chat")}]).to_string();
    let python = crate::common::py_tools();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients/chat_retry.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .args([served.url.as_str(), digest, steps.as_str()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(result["ok"], true, "{result}");
    assert!(
        result["retries"].as_u64().unwrap() >= 1,
        "the SDK never retried: {result}"
    );
    assert!(
        result["text"].as_str().unwrap().contains("slow done"),
        "{result}"
    );
    assert_eq!(
        origin.count("GET", "/slow?ms=1500&id=chat"),
        1,
        "a retry ran the call again"
    );
    let sessions: Vec<Value> = http
        .get(format!("{}/v1/sessions", served.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(sessions.len(), 1, "each retry made a session: {sessions:?}");
    drop(served);
    let entries = exported(&home, result["session"].as_str().unwrap());
    assert_eq!(events(&entries, "started").len(), 1, "one call, one run");
    assert_eq!(events(&entries, "finished").len(), 1);
}
