//! Controllers written in Python with the SDK (`guest-sdk-py/`), built by
//! the pinned componentize-py (provisioned by the test) exactly as the
//! README says, run and replayed by the `cairn` binary.

use super::sdk::{
    content_key, files_under, finished, hears_either_answer, lines, parks_and_resumes,
};
use crate::common::{cairn_in, session_of_output};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `guest-sdk-py/examples/NAME` built into a component with the README's
/// command, once per content of the SDK, the example and the WIT (kept
/// under `target/py-components/`).
pub fn build(name: &str) -> PathBuf {
    let python = crate::common::py_tools();
    let componentize = python.with_file_name("componentize-py");
    let root = repo();
    let example = root.join("guest-sdk-py/examples").join(name);
    let mut inputs = Vec::new();
    for dir in ["guest-sdk-py/cairn_sdk", "wit"] {
        inputs.extend(files_under(&root.join(dir)));
    }
    inputs.extend(files_under(&example));
    let key = content_key(&root, &inputs);
    let out_dir = crate::common::target_dir().join("py-components");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join(format!("{name}-{key}.wasm"));
    let lock = std::fs::File::create(out_dir.join(format!("{name}.lock"))).unwrap();
    lock.lock().unwrap();
    if !out.exists() {
        let tmp = out.with_extension("tmp");
        let built = std::process::Command::new(&componentize)
            .args(["-d"])
            .arg(root.join("wit"))
            .args(["-w", "agent", "componentize", "app", "-p"])
            .arg(&example)
            .arg("-p")
            .arg(root.join("guest-sdk-py"))
            .arg("-o")
            .arg(&tmp)
            .output()
            .unwrap();
        assert!(
            built.status.success(),
            "componentize-py failed: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        std::fs::rename(&tmp, &out).unwrap();
    }
    out
}

#[test]
fn a_python_controller_runs_reads_its_history_and_replays() {
    let wasm = build("echo");
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let wasm = wasm.to_str().unwrap();
    let out = cairn_in(
        &home,
        &["run", wasm, "--prompt", "hello from python", "--json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The first run compiles the 19 MB component, and says so meanwhile.
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("cairn: compiling echo-"), "{said}");
    assert!(
        said.contains("MB)") && said.contains("cairn: compiled"),
        "{said}"
    );
    let first = lines(&out);
    assert_eq!(finished(&first), "hello from python");
    let text: String = first
        .iter()
        .filter(|e| e["payload"]["event"]["type"] == "text_delta")
        .map(|e| e["payload"]["event"]["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(text, "hello from python");
    let session = session_of_output(&out.stdout);
    let worker = first[0]["payload"]["event"]["worker_id"]
        .as_str()
        .map(str::to_string)
        .or_else(|| {
            first.iter().find_map(|e| {
                e["payload"]["event"]["worker_id"]
                    .as_str()
                    .map(str::to_string)
            })
        })
        .expect("a worker id");
    // The next run of the session sees the first run's turns.
    let out = cairn_in(
        &home,
        &[
            "run", wasm, "--prompt", "again", "--json", "--worker", &worker,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let second = lines(&out);
    let seen = second
        .iter()
        .find(|e| e["payload"]["event"]["name"] == "history")
        .expect("a history event");
    assert_eq!(seen["payload"]["event"]["data"]["turns"], 2, "{seen}");
    // Both runs replay offline, from the home's compiled code.
    let replay = cairn_in(&home, &["replay", &session, "--json"]);
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stdout)
    );
    let report: Value = serde_json::from_slice(&replay.stdout).unwrap();
    assert_eq!(report["compiled_cache"], "used", "{report}");
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r["result"] == "matched"), "{report}");
}

#[test]
fn a_python_controller_asks_for_approval_and_hears_either_answer() {
    let wasm = build("approval");
    let tmp = tempfile::tempdir().unwrap();
    hears_either_answer(&tmp.path().join("home"), &wasm);
}

/// Park policy, nobody present: the Python controller parks with its
/// checkpoint; resumed, it starts from it, asks again and finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_controller_parks_and_resumes_from_its_checkpoint() {
    let wasm = tokio::task::spawn_blocking(|| build("approval"))
        .await
        .unwrap();
    parks_and_resumes(wasm).await;
}
