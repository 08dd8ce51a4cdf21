//! The worker aggregate's documents as seed 000 draws them (issue 38, item
//! 9): `worker.json` keeps the limits its last run ran under beside its
//! create/restore request; `metadata.json` keeps the resolved manifest of
//! the bound controller; a fork's metadata is derived from its source's
//! with the identity rewritten (seed 003).

use crate::common::cairn_in;
use serde_json::Value;
use std::path::Path;

/// `cairn ARGS` in `home`, which must succeed: its stdout.
fn ok(home: &Path, args: &[&str]) -> String {
    let out = cairn_in(home, args);
    assert!(
        out.status.success(),
        "cairn {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn doc(home: &Path, worker: &str, name: &str) -> Value {
    let path = home.join("workers").join(worker).join(name);
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// The seq of the `started` entry among `--json` journal lines.
fn started_seq(lines: &str) -> u64 {
    lines
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["payload"]["event"]["type"] == "started")
        .and_then(|v| v["seq"].as_u64())
        .expect("a started entry")
}

#[test]
fn worker_and_metadata_documents_hold_limits_manifest_and_a_derived_fork() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("cairn.toml"), "[limits]\nevents_per_run = 777\n").unwrap();
    let first = ok(&home, &["run", "echo", "--prompt", "one", "--json"]);
    let listed: Value = serde_json::from_str(&ok(&home, &["ls", "--json"])).unwrap();
    let worker = listed[0]["worker_id"].as_str().unwrap().to_string();
    let session = listed[0]["session_id"].as_str().unwrap().to_string();
    assert!(started_seq(&first) > 1, "{first}");
    let second = ok(
        &home,
        &[
            "run", "echo", "--prompt", "two", "--json", "--worker", &worker,
        ],
    );
    let before = started_seq(&second);

    let record = doc(&home, &worker, "worker.json");
    assert_eq!(record["version"], 2, "{record}");
    assert_eq!(record["limits"]["events_per_run"], 777, "{record}");
    assert_eq!(record["request"]["kind"], "create", "{record}");
    let meta = doc(&home, &worker, "metadata.json");
    assert_eq!(meta["version"], 2, "{meta}");
    let manifest = &meta["manifest"];
    assert_eq!(manifest["component"], record["component"], "{meta}");
    assert_eq!(manifest["name"], "echo", "{meta}");
    assert!(
        manifest["version"].as_str().is_some_and(|v| !v.is_empty()),
        "{meta}"
    );
    assert_eq!(manifest["can_park"], false, "{meta}");
    assert!(
        manifest["imports"].as_array().is_some_and(|i| i
            .iter()
            .any(|i| i.as_str().is_some_and(|i| i.starts_with("cairn:")))),
        "{meta}"
    );

    // The fork: its own segments and origin; the source's manifest carried.
    let forked: Value = serde_json::from_str(&ok(
        &home,
        &["fork", &session, "--before", &before.to_string(), "--json"],
    ))
    .unwrap();
    let fork_session = forked["session_id"].as_str().unwrap().to_string();
    let listed: Value = serde_json::from_str(&ok(&home, &["ls", "--json"])).unwrap();
    let fork_worker = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["session_id"] == fork_session.as_str())
        .and_then(|r| r["worker_id"].as_str())
        .expect("the fork is listed")
        .to_string();
    let fork_meta = doc(&home, &fork_worker, "metadata.json");
    assert_eq!(fork_meta["manifest"], meta["manifest"], "{fork_meta}");
    assert_eq!(
        fork_meta["forked_from"]["session_id"],
        session.as_str(),
        "{fork_meta}"
    );
    assert_eq!(
        fork_meta["forked_from"]["before_seq"], before,
        "{fork_meta}"
    );
    assert_ne!(
        fork_meta["active_segment"], meta["active_segment"],
        "{fork_meta}"
    );

    // An export is the lines as journaled: every one carries its checksum,
    // and it holds.
    let export = ok(&home, &["export", &session]);
    assert!(export.lines().count() > 4, "{export}");
    for line in export.lines() {
        assert!(line.contains(",\"crc\":\""), "{line}");
        cairn_runtime::journal::event::check_line(line.as_bytes()).unwrap();
    }
}

/// Version 1 documents (before `limits` and `manifest`) are read as before,
/// and written back as version 2 when they next change.
#[test]
fn version_1_worker_documents_are_read_and_upgraded() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    ok(&home, &["run", "echo", "--prompt", "one"]);
    let listed: Value = serde_json::from_str(&ok(&home, &["ls", "--json"])).unwrap();
    let worker = listed[0]["worker_id"].as_str().unwrap().to_string();
    // As an older cairn wrote them.
    for (name, field) in [("worker.json", "limits"), ("metadata.json", "manifest")] {
        let mut v = doc(&home, &worker, name);
        v["version"] = 1.into();
        v.as_object_mut().unwrap().remove(field);
        let path = home.join("workers").join(&worker).join(name);
        std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    }
    let shown = ok(
        &home,
        &["inspect", listed[0]["session_id"].as_str().unwrap()],
    );
    assert!(shown.contains(&worker), "{shown}");
    ok(
        &home,
        &["run", "echo", "--prompt", "two", "--worker", &worker],
    );
    let record = doc(&home, &worker, "worker.json");
    assert_eq!(record["version"], 2, "{record}");
    assert!(record["limits"].is_object(), "{record}");
    let meta = doc(&home, &worker, "metadata.json");
    assert_eq!(meta["version"], 2, "{meta}");
    assert_eq!(meta["manifest"]["name"], "echo", "{meta}");
    // A version this cairn does not know is refused, naming it.
    let mut v = doc(&home, &worker, "metadata.json");
    v["version"] = 3.into();
    std::fs::write(
        home.join("workers").join(&worker).join("metadata.json"),
        serde_json::to_vec(&v).unwrap(),
    )
    .unwrap();
    let out = crate::common::cairn_in(
        &home,
        &["run", "echo", "--prompt", "three", "--worker", &worker],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("metadata.json has format version 3"), "{err}");
}
