//! What the Python and JavaScript SDK tests share: a build's content key,
//! `cairn run --json` output read back, and the park-and-resume check.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// Every file under `dir`, sorted (caches skipped).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name()
                .is_some_and(|n| n != "__pycache__" && n != "node_modules")
            {
                out.extend(files_under(&p));
            }
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// A key for a build's inputs: their paths (under `root`) and bytes.
pub fn content_key(root: &Path, inputs: &[PathBuf]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for f in inputs {
        h.update(
            f.strip_prefix(root)
                .unwrap_or(f)
                .to_string_lossy()
                .as_bytes(),
        );
        h.update(std::fs::read(f).unwrap());
    }
    hex::encode(h.finalize())[..16].to_string()
}

/// The journal lines `cairn run --json` printed.
pub fn lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The `finished` entry's text.
pub fn finished(entries: &[Value]) -> String {
    entries
        .iter()
        .find(|e| e["payload"]["event"]["type"] == "finished")
        .and_then(|e| e["payload"]["event"]["text"].as_str())
        .unwrap_or_else(|| panic!("no finished entry: {entries:?}"))
        .to_string()
}

/// Park policy, nobody present: the `approval` example at `wasm` parks
/// with its checkpoint; resumed, it starts from it, asks again and
/// finishes (its texts say so).
pub async fn parks_and_resumes(wasm: PathBuf) {
    use cairn_runtime::journal::event::{Liveness, LivenessPolicy, RunStatus};
    use cairn_runtime::runtime::{ComponentRef, StartRun};
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

/// The `approval` example at `wasm`, in `home`: approved it acts (having
/// asked `may I deploy?` with the action in the details); denied with a
/// reason, it says so.
pub fn hears_either_answer(home: &Path, wasm: &Path) {
    let wasm = wasm.to_str().unwrap();
    let run = |prompt: &str, answer: &str| {
        let out = crate::common::cairn_in(
            home,
            &[
                "run", wasm, "--prompt", prompt, "--json", "--answer", answer,
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        lines(&out)
    };
    let entries = run("deploy", "approval=approve");
    assert_eq!(finished(&entries), "done: deploy");
    let asked = entries
        .iter()
        .find(|e| e["payload"]["event"]["type"] == "decision_requested")
        .expect("a decision was asked");
    assert_eq!(asked["payload"]["event"]["prompt"], "may I deploy?");
    assert_eq!(asked["payload"]["event"]["details"]["action"], "deploy");
    let denied = run(
        "drop the database",
        r#"approval={"approved": false, "reason": "not today"}"#,
    );
    assert_eq!(finished(&denied), "not done: not today");
}
