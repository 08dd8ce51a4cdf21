//! Controllers written in JavaScript with the SDK (`guest-sdk-js/`), built
//! by its `build.mjs` (esbuild, then the pinned componentize-js; the
//! packages provisioned by the test from the SDK's lockfile), run, parked,
//! resumed and replayed by cairn.

use super::browser::{locked_node_modules, node_bin, run, with_node};
use crate::common::{cairn_in, session_of_output};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `guest-sdk-js/examples/NAME` built with the README's command, once per
/// content of the SDK, the example and the WIT (under `target/js-components/`).
fn build(name: &str) -> PathBuf {
    let bin = node_bin();
    let root = repo();
    let sdk = root.join("guest-sdk-js");
    let modules = locked_node_modules(&bin, "js-sdk-tools", &sdk);
    let example = sdk.join("examples").join(name);
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut inputs = vec![
        sdk.join("cairn.js"),
        sdk.join("build.mjs"),
        sdk.join("package-lock.json"),
        example.join("app.js"),
    ];
    let mut wit: Vec<_> = walk(&root.join("wit"));
    wit.sort();
    inputs.extend(wit);
    for f in &inputs {
        h.update(f.strip_prefix(&root).unwrap().to_string_lossy().as_bytes());
        h.update(std::fs::read(f).unwrap());
    }
    let key = hex::encode(h.finalize());
    let out_dir = crate::common::target_dir().join("js-components");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join(format!("{name}-{}.wasm", &key[..16]));
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

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn finished(entries: &[Value]) -> String {
    entries
        .iter()
        .find(|e| e["payload"]["event"]["type"] == "finished")
        .and_then(|e| e["payload"]["event"]["text"].as_str())
        .unwrap_or_else(|| panic!("no finished entry: {entries:?}"))
        .to_string()
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
    let approval = approval.to_str().unwrap();
    let out = cairn_in(
        &home,
        &[
            "run",
            approval,
            "--prompt",
            "deploy",
            "--json",
            "--answer",
            "approval=approve",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(finished(&lines(&out)), "done: deploy");
    let out = cairn_in(
        &home,
        &[
            "run",
            approval,
            "--prompt",
            "drop it",
            "--json",
            "--answer",
            r#"approval={"approved": false, "reason": "not today"}"#,
        ],
    );
    assert!(out.status.success());
    assert_eq!(finished(&lines(&out)), "not done: not today");
}

/// Park policy, nobody present: the JavaScript controller parks with its
/// checkpoint; resumed, it starts from it, asks again and finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_controller_parks_and_resumes_from_its_checkpoint() {
    use cairn_runtime::journal::event::{Liveness, LivenessPolicy, RunStatus};
    use cairn_runtime::runtime::{ComponentRef, StartRun};
    let wasm = tokio::task::spawn_blocking(|| build("approval"))
        .await
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let rt = crate::common::runtime(tmp.path()).await;
    let mut req = StartRun::new(ComponentRef::Path(wasm), "deploy");
    req.liveness = Liveness {
        policy: LivenessPolicy::Park,
        grace_ms: 0,
    };
    let started = rt.start(req).await.unwrap();
    assert_eq!(
        rt.wait(started.run_id).await.unwrap().status,
        RunStatus::Parked
    );
    let resumed = rt.resume(started.run_id, None).await.unwrap();
    let t = std::time::Instant::now();
    loop {
        if let Some(p) = rt.pending_decisions(Some(&resumed.session_id)).first() {
            rt.decide(&p.decision_id, serde_json::json!({"approved": true}))
                .await
                .unwrap();
            break;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(90),
            "the resumed run never asked"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        rt.wait(resumed.run_id).await.unwrap().status,
        RunStatus::Finished
    );
    let entries = crate::common::entries_json(&rt, &resumed.session_id).await;
    let texts: Vec<&str> = entries
        .iter()
        .filter(|e| {
            e["run_id"] == resumed.run_id.to_string()
                && e["payload"]["event"]["type"] == "text_delta"
        })
        .map(|e| e["payload"]["event"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["resuming after parking on: deploy", "done: deploy"]);
}
