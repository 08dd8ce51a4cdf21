//! Controllers written in JavaScript with the SDK (`guest-sdk-js/`), built
//! by its `build.mjs` (esbuild, then the pinned componentize-js; the
//! packages provisioned by the test from the SDK's lockfile), run, parked,
//! resumed and replayed by cairn.

use super::browser::{locked_node_modules, node_bin, run, with_node};
use super::sdk::{
    content_key, files_under, finished, hears_either_answer, lines, parks_and_resumes,
};
use crate::common::{cairn_in, session_of_output};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `guest-sdk-js/examples/NAME` built with the README's command, once per
/// content of the SDK, the example and the WIT (under `target/js-components/`).
pub(crate) fn build(name: &str) -> PathBuf {
    let bin = node_bin();
    let root = repo();
    let sdk = root.join("guest-sdk-js");
    let modules = locked_node_modules(&bin, "js-sdk-tools", &sdk);
    let example = sdk.join("examples").join(name);
    let mut inputs = vec![
        sdk.join("cairn.js"),
        sdk.join("build.mjs"),
        sdk.join("package-lock.json"),
        example.join("app.js"),
    ];
    inputs.extend(files_under(&root.join("wit")));
    let key = content_key(&root, &inputs);
    let out_dir = crate::common::target_dir().join("js-components");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join(format!("{name}-{key}.wasm"));
    let lock = std::fs::File::create(out_dir.join(format!("{name}.lock"))).unwrap();
    lock.lock().unwrap();
    if !out.exists() {
        // The SDK beside its packages (build.mjs resolves them from its own
        // directory), as a user's checkout has them after `npm ci`.
        let ws = tempfile::tempdir().unwrap();
        for f in ["cairn.js", "build.mjs", "package.json"] {
            std::fs::copy(sdk.join(f), ws.path().join(f)).unwrap();
        }
        std::os::unix::fs::symlink(&modules, ws.path().join("node_modules")).unwrap();
        let tmp = out.with_extension("tmp");
        run(
            with_node(&mut std::process::Command::new(bin.join("node")), &bin)
                .arg(ws.path().join("build.mjs"))
                .arg(example.join("app.js"))
                .arg(&tmp)
                .arg("--wit")
                .arg(root.join("wit")),
            &format!("building the {name} JavaScript example"),
        );
        std::fs::rename(&tmp, &out).unwrap();
    }
    out
}

#[test]
fn a_javascript_controller_runs_reads_its_history_answers_and_replays() {
    let echo = build("echo");
    let approval = build("approval");
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let echo = echo.to_str().unwrap();
    let out = cairn_in(&home, &["run", echo, "--prompt", "hello from js", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = lines(&out);
    assert_eq!(finished(&first), "hello from js");
    let text: String = first
        .iter()
        .filter(|e| e["payload"]["event"]["type"] == "text_delta")
        .map(|e| e["payload"]["event"]["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(text, "hello from js");
    let session = session_of_output(&out.stdout);
    let worker = first
        .iter()
        .find_map(|e| {
            e["payload"]["event"]["worker_id"]
                .as_str()
                .map(str::to_string)
        })
        .expect("a worker id");
    let out = cairn_in(
        &home,
        &[
            "run", echo, "--prompt", "again", "--json", "--worker", &worker,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = lines(&out)
        .into_iter()
        .find(|e| e["payload"]["event"]["name"] == "history")
        .expect("a history event");
    assert_eq!(seen["payload"]["event"]["data"]["turns"], 2, "{seen}");
    let replay = cairn_in(&home, &["replay", &session, "--json"]);
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stdout)
    );
    let report: Value = serde_json::from_slice(&replay.stdout).unwrap();
    assert!(
        report["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["result"] == "matched"),
        "{report}"
    );
    // Decisions: approved, then denied with a reason.
    hears_either_answer(&home, &approval);
}

/// Park policy, nobody present: the JavaScript controller parks with its
/// checkpoint; resumed, it starts from it, asks again and finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_controller_parks_and_resumes_from_its_checkpoint() {
    let wasm = tokio::task::spawn_blocking(|| build("approval"))
        .await
        .unwrap();
    parks_and_resumes(wasm).await;
}

/// A JavaScript controller built with componentize-js's defaults uses the
/// ordinary `fetch` (over `wasi:http`): an allowed origin answers, a host
/// the allowlist does not name is refused unsent, and `cairn replay` sends
/// nothing.
#[test]
fn a_javascript_controller_fetches_what_the_allowlist_allows() {
    let fetcher = build("fetch");
    let origin = super::http::Origin::start();
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("cairn.toml"),
        format!(
            "[http]\nallowed_outbound_hosts = [\"http://127.0.0.1:{}\"]\n",
            origin.port
        ),
    )
    .unwrap();
    let prompt = format!(
        "{}\nhttp://localhost:{}/echo\n",
        origin.url("/echo"),
        origin.port
    );
    let out = cairn_in(
        &home,
        &[
            "run",
            fetcher.to_str().unwrap(),
            "--prompt",
            &prompt,
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Value = serde_json::from_str(&finished(&lines(&out))).unwrap();
    assert_eq!(answers[0]["status"], 200, "{answers}");
    let echoed: Value = serde_json::from_str(answers[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(echoed["from"], "js", "{echoed}");
    assert!(answers[1]["error"].is_string(), "{answers}");
    let seen = origin.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let session = crate::common::session_of_output(&out.stdout);
    super::http::replays(&home, &session);
    assert_eq!(origin.seen().len(), 1, "a replay sent a request");
}

/// An upload of a big component answers once its bytes are stored and
/// checked (`202`, `state: compiling`), before its compile ends; a run
/// naming it meanwhile waits for that one compile; `GET /v1/components`
/// shows it `compiling`, then `ready` with its `describe()`; uploading it
/// again is `201` at once.
#[test]
fn a_big_upload_answers_before_its_compile_ends() {
    use serde_json::json;
    use std::time::{Duration, Instant};
    let bytes = std::fs::read(build("echo")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let served = crate::common::serve(&home);
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap();
    let t = Instant::now();
    let r = http
        .post(format!("{}/v1/components", served.url))
        .header("content-type", "application/wasm")
        .body(bytes.clone())
        .send()
        .unwrap();
    let answered = t.elapsed();
    assert_eq!(r.status(), 202, "{:?}", r.text());
    let accepted: Value = r.json().unwrap();
    assert_eq!(accepted["state"], "compiling", "{accepted}");
    // The wait for the compile (2 s) and the checks, not the compile (10 s
    // and more for this component in a debug build).
    assert!(answered < Duration::from_secs(8), "{answered:?}");
    let digest = accepted["digest"].as_str().unwrap().to_string();
    let listed = |http: &reqwest::blocking::Client| -> Value {
        let all: Vec<Value> = http
            .get(format!("{}/v1/components", served.url))
            .send()
            .unwrap()
            .json()
            .unwrap();
        all.into_iter()
            .find(|c| c["digest"] == digest.as_str())
            .expect("the upload is listed")
    };
    assert_eq!(listed(&http)["state"], "compiling");
    // A run naming it now waits for the compile under way.
    let run: Value = http
        .post(format!("{}/v1/runs", served.url))
        .json(&json!({"component": digest, "prompt": "hello early"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let run_id = run["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{run}"))
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let v: Value = http
            .get(format!("{}/v1/runs/{run_id}", served.url))
            .send()
            .unwrap()
            .json()
            .unwrap();
        if v["state"] == "finished" {
            break;
        }
        assert!(
            v["state"] == "running" || v["state"] == "starting" || v["state"] == "preparing",
            "{v}"
        );
        assert!(Instant::now() < deadline, "the run never ended: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let ready = listed(&http);
    assert_eq!(ready["state"], "ready", "{ready}");
    assert_eq!(ready["name"], "js-echo", "{ready}");
    let r = http
        .post(format!("{}/v1/components", served.url))
        .header("content-type", "application/wasm")
        .body(bytes)
        .send()
        .unwrap();
    assert_eq!(r.status(), 201);
    drop(served);
}
