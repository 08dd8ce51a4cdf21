//! Legacy migration (seed 000) from outside: `cairn migrate` on generated
//! `process-global-v0` trees whose journals real runs wrote — clean copies,
//! every ambiguity, a crash at each step, a mixed home, two migrations at
//! once, startup migration — the sources hashed before and after.

use crate::common::{cairn_bin, cairn_in, run_to_end, runtime, start_req};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every file and directory under `root`, with its bytes' digest.
fn tree(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            if entry.file_type().unwrap().is_dir() {
                out.insert(rel, "dir".into());
                stack.push(path);
            } else {
                out.insert(
                    rel,
                    hex::encode(Sha256::digest(std::fs::read(&path).unwrap())),
                );
            }
        }
    }
    out
}

/// A native home with two real sessions: one echo run; and one echo run,
/// compacted, then a second run (two segments).
pub(super) async fn native_home(dir: &Path) -> PathBuf {
    let rt = runtime(dir).await;
    run_to_end(&rt, start_req("echo", "one"), None).await;
    let (started, _, _) = run_to_end(&rt, start_req("echo", "two"), None).await;
    rt.compact(&started.session_id).await.unwrap();
    let mut again = start_req("echo", "three");
    again.session = Some(started.session_id.clone());
    again.component = None;
    run_to_end(&rt, again, None).await;
    rt.shutdown(std::time::Duration::from_secs(5)).await;
    dir.join("home")
}

/// One legacy worker written by [`write_legacy`].
#[derive(Debug, Clone)]
pub(super) struct Legacy {
    pub(super) worker: String,
    pub(super) session: String,
    /// Its segment files (journal, in order), relative to the root.
    pub(super) journals: Vec<String>,
}

/// Write `copies` legacy workers per native session of `home` under
/// `root`: fresh worker and session ids, run ids renamed (so every copy is
/// its own history), the journal lines otherwise as the runs wrote them.
pub(super) fn write_legacy(home: &Path, root: &Path, copies: usize) -> Vec<Legacy> {
    std::fs::create_dir_all(root.join("metadata")).unwrap();
    let mut catalog = Vec::new();
    let mut out = Vec::new();
    let mut natives: Vec<_> = std::fs::read_dir(home.join("workers"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    natives.sort();
    for (i, native) in natives.iter().enumerate() {
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(native.join("worker.json")).unwrap()).unwrap();
        let meta: serde_json::Value =
            serde_json::from_slice(&std::fs::read(native.join("metadata.json")).unwrap()).unwrap();
        let old_session = record["session_id"].as_str().unwrap().to_string();
        let segments: Vec<String> = meta["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["segment_id"].as_str().unwrap().to_string())
            .collect();
        for k in 0..copies {
            let worker = uuid::Uuid::now_v7().to_string();
            let session = format!("legacy-{i}-{k}");
            let mut runs: BTreeMap<String, String> = BTreeMap::new();
            let dir = root.join("sessions").join(&session).join("segments");
            std::fs::create_dir_all(&dir).unwrap();
            let mut journals = Vec::new();
            for seg in &segments {
                for name in [format!("{seg}.jsonl"), format!("{seg}.trace.jsonl")] {
                    // A native segment's trace file is made by its first
                    // diagnostic; a legacy tree has one for every segment.
                    let path = native.join("session/segments").join(&name);
                    let text = match name.ends_with(".trace.jsonl") && !path.exists() {
                        true => String::new(),
                        false => std::fs::read_to_string(&path).unwrap(),
                    };
                    let mut lines = Vec::new();
                    for line in text.lines() {
                        let v: serde_json::Value = serde_json::from_str(line).unwrap();
                        if let Some(r) = v.get("run_id").and_then(|r| r.as_str()) {
                            runs.entry(r.to_string())
                                .or_insert_with(|| uuid::Uuid::now_v7().to_string());
                        }
                        // Legacy lines carry no checksum.
                        let mut line = crate::common::without_crc(line)
                            .replace(&format!("\"{old_session}\""), &format!("\"{session}\""));
                        for (old, new) in &runs {
                            line = line.replace(old.as_str(), new);
                        }
                        lines.push(line);
                    }
                    let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
                    std::fs::write(dir.join(&name), body).unwrap();
                }
                journals.push(format!("sessions/{session}/segments/{seg}.jsonl"));
            }
            let doc = serde_json::json!({
                "worker_id": worker, "session_id": session,
                "active_segment": segments.last().unwrap(),
                "segments": segments, "children": [], "peers": [],
            });
            std::fs::write(
                root.join("metadata").join(format!("{worker}.json")),
                doc.to_string(),
            )
            .unwrap();
            catalog.push(serde_json::json!({
                "worker_id": worker, "workspace": record["workspace"],
                "component": record["component"],
            }));
            out.push(Legacy {
                worker,
                session,
                journals,
            });
        }
    }
    write_catalog(root, &catalog);
    out
}

fn write_catalog(root: &Path, workers: &[serde_json::Value]) {
    let doc = serde_json::json!({ "format": "process-global-v0", "workers": workers });
    std::fs::write(root.join("catalog.json"), doc.to_string()).unwrap();
}

fn catalog(root: &Path) -> Vec<serde_json::Value> {
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("catalog.json")).unwrap()).unwrap();
    doc["workers"].as_array().unwrap().clone()
}

/// `cairn migrate --from root --home home --json [extra]`: (exit code,
/// report or null, stderr).
fn migrate(root: &Path, home: &Path, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let out = cairn_bin()
        .args(["migrate", "--json", "--from"])
        .arg(root)
        .arg("--home")
        .arg(home)
        .args(extra)
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (
        out.status.code().unwrap_or(-1),
        report,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn manifest(home: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(home.join("migration/manifest.json")).unwrap()).unwrap()
}

/// The latest manifest entry of `worker`.
fn worker_report<'a>(manifest: &'a serde_json::Value, worker: &str) -> &'a serde_json::Value {
    manifest["workers"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|w| w["worker_id"] == worker)
        .unwrap_or_else(|| panic!("no manifest entry for {worker}: {manifest:#}"))
}

fn sessions(home: &Path) -> Vec<String> {
    let out = cairn_in(home, &["ls", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut ids: Vec<String> = rows
        .iter()
        .map(|r| r["session_id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

/// The journal a migrated session exports equals the source lines.
fn assert_exports_source(home: &Path, root: &Path, w: &Legacy) {
    let out = cairn_in(home, &["export", &w.session]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let source: Vec<u8> = w
        .journals
        .iter()
        .flat_map(|j| std::fs::read(root.join(j)).unwrap())
        .collect();
    // An export carries each line's checksum (a legacy line, which has
    // none, is exported with one); the content is the source's.
    let exported: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            cairn_runtime::journal::event::check_line(l.as_bytes()).unwrap();
            serde_json::from_str(&crate::common::without_crc(l)).unwrap()
        })
        .collect();
    let expected: Vec<serde_json::Value> = String::from_utf8_lossy(&source)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(exported, expected, "session {}", w.session);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_legacy_tree_migrates_whole_and_then_serves_like_a_native_home() {
    let tmp = tempfile::tempdir().unwrap();
    let native = native_home(tmp.path()).await;
    let root = tmp.path().join("legacy");
    let workers = write_legacy(&native, &root, 10);
    // A crash-truncated final line in one active segment is tolerated.
    let torn = &workers[1];
    let active = root.join(torn.journals.last().unwrap());
    let mut bytes = std::fs::read(&active).unwrap();
    let good = bytes.clone();
    bytes.extend_from_slice(b"{\"seq\": 99, \"payl");
    std::fs::write(&active, &bytes).unwrap();
    let before = tree(&root);
    let home = tmp.path().join("home2");

    // A dry run writes nothing and says what it would do.
    let (code, report, _) = migrate(&root, &home, &["--dry-run"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["migrated"], 20);
    assert!(!home.join("migration").exists());

    let (code, report, err) = migrate(&root, &home, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(report["migrated"], 20, "{report:#}");
    assert_eq!(report["failed"], 0);
    assert_eq!(tree(&root), before, "the sources are never modified");
    let m = manifest(&home);
    for w in &workers {
        let entry = worker_report(&m, &w.worker);
        assert_eq!(entry["state"], "migrated");
        assert_eq!(entry["checkpoint"], "done");
        assert_eq!(entry["session_id"], w.session.as_str());
    }
    let note = worker_report(&m, &torn.worker)["diagnostics"].to_string();
    assert!(note.contains("crash-truncated final line"), "{note}");
    assert!(
        std::fs::read(home.join("migration/checkpoints.jsonl"))
            .unwrap()
            .is_empty(),
        "the manifest absorbed the checkpoint log"
    );

    // Every migrated session opens, lists, exports and replays; ids unchanged.
    let mut expected: Vec<String> = workers.iter().map(|w| w.session.clone()).collect();
    expected.sort();
    assert_eq!(sessions(&home), expected);
    std::fs::write(&active, &good).unwrap();
    for w in [&workers[0], &workers[1], &workers[15]] {
        assert_exports_source(&home, &root, w);
        let out = cairn_in(&home, &["replay", &w.session]);
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::write(&active, &bytes).unwrap();
    // It accepts new runs exactly as a native one (the two-segment one too).
    let w = &workers[15];
    let out = cairn_in(
        &home,
        &[
            "run", "echo", "--worker", &w.worker, "--prompt", "after", "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(crate::common::session_of_output(&out.stdout), w.session);
    let out = cairn_in(&home, &["replay", &w.session, "--json"]);
    let replay: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(replay["runs"].as_array().unwrap().len(), 3, "{replay:#}");
    assert!(out.status.success());

    // A rerun after success is a no-op: nothing in the home changes (but
    // the lock's own files: the lock, the owner's heartbeat, and the clean-stop marker the owner
    // consumes as it takes it).
    let mut home_before = tree(&home);
    home_before.remove("cairn.lock");
    home_before.remove("cairn.clean");
    home_before.remove("cairn.owner");
    let (code, report, _) = migrate(&root, &home, &[]);
    assert_eq!(code, 0);
    assert_eq!(report["already_migrated"], 20);
    assert_eq!(report["migrated"], 0);
    let mut home_after = tree(&home);
    home_after.remove("cairn.lock");
    home_after.remove("cairn.clean");
    home_after.remove("cairn.owner");
    assert_eq!(home_after, home_before);
    assert_eq!(tree(&root), before);
}

/// Write `rel` under `root` (making its directory).
fn put(root: &Path, rel: &str, bytes: &[u8]) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn every_ambiguity_stops_only_its_worker_and_touches_nothing_of_it() {
    let tmp = tempfile::tempdir().unwrap();
    let native = native_home(tmp.path()).await;
    let root = tmp.path().join("legacy");
    let w = write_legacy(&native, &root, 6);
    // w[0], w[1]: one segment; w[6..]: two segments.
    let mut cat = catalog(&root);
    let meta = |w: &Legacy| -> serde_json::Value {
        serde_json::from_slice(
            &std::fs::read(root.join(format!("metadata/{}.json", w.worker))).unwrap(),
        )
        .unwrap()
    };
    // 1. A corrupt complete record (line 2) in w[1].
    let j = root.join(&w[1].journals[0]);
    let text = std::fs::read_to_string(&j).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[1] = "{\"seq\": 2, not json";
    std::fs::write(&j, lines.join("\n") + "\n").unwrap();
    // 2. A torn line in w[6]'s first (not active) segment.
    let j = root.join(&w[6].journals[0]);
    let mut bytes = std::fs::read(&j).unwrap();
    bytes.truncate(bytes.len() - 10);
    std::fs::write(&j, bytes).unwrap();
    // 3. w[2]'s metadata names another worker.
    let mut m = meta(&w[2]);
    m["worker_id"] = serde_json::json!(w[3].worker);
    put(
        &root,
        &format!("metadata/{}.json", w[2].worker),
        m.to_string().as_bytes(),
    );
    // 4. w[3] and w[4] both name w[3]'s session.
    let mut m = meta(&w[4]);
    m["session_id"] = serde_json::json!(w[3].session);
    put(
        &root,
        &format!("metadata/{}.json", w[4].worker),
        m.to_string().as_bytes(),
    );
    // 5. Metadata of no catalog worker names w[5]'s session; another
    //    names a session directory of its own.
    let stray = uuid::Uuid::now_v7().to_string();
    let mut m = meta(&w[5]);
    m["worker_id"] = serde_json::json!(stray);
    put(
        &root,
        &format!("metadata/{stray}.json"),
        m.to_string().as_bytes(),
    );
    let lone = uuid::Uuid::now_v7().to_string();
    let mut m = meta(&w[7]);
    m["worker_id"] = serde_json::json!(lone);
    m["session_id"] = serde_json::json!("lone-session");
    put(
        &root,
        &format!("metadata/{lone}.json"),
        m.to_string().as_bytes(),
    );
    put(&root, "sessions/lone-session/segments/x.jsonl", b"");
    // 6. A session directory nothing names.
    put(&root, "sessions/nobody/segments/y.jsonl", b"");
    // 7. A catalog worker listed twice (w[8]).
    cat.push(cat[8].clone());
    // 8. A catalog worker without metadata.
    let ghost = uuid::Uuid::now_v7().to_string();
    cat.push(serde_json::json!({"worker_id": ghost, "workspace": "local"}));
    // 9. A target collision: the home already holds w[9]'s aggregate with
    //    other bytes; 10. w[10]'s session is held by another worker there.
    write_catalog(&root, &cat);
    let home = tmp.path().join("target");
    // Migrate w[9] and w[10] alone into the target first, then change the
    // source of w[9] (so the held aggregate differs) and move w[10]'s
    // session to a new worker id (so another worker holds it).
    {
        let only: Vec<_> = cat
            .iter()
            .filter(|c| c["worker_id"] == w[9].worker || c["worker_id"] == w[10].worker)
            .cloned()
            .collect();
        let sub = tmp.path().join("sub");
        for x in [&w[9], &w[10]] {
            let rel = format!("metadata/{}.json", x.worker);
            put(&sub, &rel, &std::fs::read(root.join(&rel)).unwrap());
            copy_dir(
                &root.join("sessions").join(&x.session),
                &sub.join("sessions").join(&x.session),
            );
        }
        write_catalog(&sub, &only);
        let (code, report, err) = migrate(&sub, &home, &[]);
        assert_eq!(code, 0, "{err}{report:#}");
    }
    let j = root.join(w[9].journals.last().unwrap());
    let changed = std::fs::read_to_string(&j)
        .unwrap()
        .replace("three", "THREE");
    std::fs::write(&j, changed).unwrap();
    let moved = uuid::Uuid::now_v7().to_string();
    let mut cat = catalog(&root);
    for c in cat.iter_mut() {
        if c["worker_id"] == w[10].worker {
            c["worker_id"] = serde_json::json!(moved);
        }
    }
    write_catalog(&root, &cat);
    let mut m = meta(&w[10]);
    m["worker_id"] = serde_json::json!(moved);
    put(
        &root,
        &format!("metadata/{moved}.json"),
        m.to_string().as_bytes(),
    );
    std::fs::remove_file(root.join(format!("metadata/{}.json", w[10].worker))).unwrap();

    let source_before = tree(&root);
    let held_before = tree(&home.join("workers").join(&w[9].worker));
    let (code, report, err) = migrate(&root, &home, &[]);
    assert_eq!(
        code, 1,
        "a stopped worker fails the command: {err}{report:#}"
    );
    assert_eq!(tree(&root), source_before, "the sources are never modified");
    assert_eq!(
        tree(&home.join("workers").join(&w[9].worker)),
        held_before,
        "a collision touches nothing of the target"
    );
    let m = manifest(&home);
    eprintln!("the ambiguity-case manifest:\n{m:#}");
    let why = |worker: &str| -> String {
        let e = worker_report(&m, worker);
        assert_eq!(e["state"], "failed", "{worker}: {e:#}");
        e["diagnostics"].to_string()
    };
    let line2 = format!("{}:2: not JSON", w[1].journals[0]);
    assert!(why(&w[1].worker).contains(&line2), "{}", why(&w[1].worker));
    assert!(
        why(&w[6].worker).contains("truncated line in a segment that is not the active one"),
        "{}",
        why(&w[6].worker)
    );
    assert!(why(&w[2].worker).contains("identity does not match"));
    for x in [&w[3], &w[4], &w[5]] {
        assert!(
            why(&x.worker).contains("shared, so assigned to no worker"),
            "{}",
            why(&x.worker)
        );
    }
    assert!(why(&w[8].worker).contains("2 times"));
    assert!(why(&ghost).contains("is missing"));
    assert!(
        why(&w[9].worker).contains("target collision"),
        "{}",
        why(&w[9].worker)
    );
    assert!(
        why(&moved).contains("already held by worker"),
        "{}",
        why(&moved)
    );
    let source = &m["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["path"].as_str().unwrap().ends_with("/legacy"))
        .unwrap();
    let shared: Vec<&str> = source["shared_references"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert!(shared.contains(&w[3].session.as_str()) && shared.contains(&w[5].session.as_str()));
    let orphans: Vec<&str> = source["orphans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["path"].as_str().unwrap())
        .collect();
    for o in [
        format!("metadata/{stray}.json"),
        format!("metadata/{lone}.json"),
        "sessions/lone-session".into(),
        "sessions/nobody".into(),
    ] {
        assert!(orphans.contains(&o.as_str()), "{o} not in {orphans:?}");
    }
    assert!(!orphans.contains(&format!("metadata/{}.json", w[8].worker).as_str()));
    assert!(!orphans.contains(&format!("sessions/{}", w[2].session).as_str()));
    // w[9]'s first migration (from the other tree) stays on record.
    assert!(
        m["workers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["worker_id"] == w[9].worker
                && e["state"] == "migrated"
                && e["source"].as_str().unwrap().ends_with("/sub"))
    );
    // The unambiguous ones made it; none of the stopped ones is served.
    let listed = sessions(&home);
    for x in [&w[0], &w[7], &w[11]] {
        assert_eq!(worker_report(&m, &x.worker)["state"], "migrated");
        assert!(listed.contains(&x.session));
    }
    for x in [&w[1], &w[2], &w[4], &w[5], &w[6], &w[8]] {
        assert!(!listed.contains(&x.session), "{} is served", x.session);
    }
    // Fixing a source lets a rerun take it; the others still stop.
    std::fs::write(root.join(&w[1].journals[0]), text).unwrap();
    let (code, report, _) = migrate(&root, &home, &[]);
    assert_eq!(code, 1);
    assert_eq!(report["migrated"], 1, "{report:#}");
    assert!(sessions(&home).contains(&w[1].session));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_migration_killed_at_each_step_converges_on_rerun() {
    let tmp = tempfile::tempdir().unwrap();
    let native = native_home(tmp.path()).await;
    let root = tmp.path().join("legacy");
    let workers = write_legacy(&native, &root, 2);
    let before = tree(&root);
    let clean = tmp.path().join("clean");
    assert_eq!(migrate(&root, &clean, &[]).0, 0);
    for step in [
        "migrate-staged",
        "migrate-renamed",
        "migrate-metadata-written",
        "migrate-published",
    ] {
        let home = tmp.path().join(step);
        let out = cairn_bin()
            .args(["migrate", "--from"])
            .arg(&root)
            .arg("--home")
            .arg(&home)
            .env("CAIRN_CRASH_AT", step)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{step}: the crash point was reached");
        // A reader sees no half-migrated worker: whatever it lists is
        // whole (workers are copied a few at once, so others may be at
        // any step when one is killed).
        let listed = sessions(&home);
        for w in workers.iter().filter(|w| listed.contains(&w.session)) {
            assert_exports_source(&home, &root, w);
        }
        let unfinished = |home: &Path| -> Vec<String> {
            let mut found: Vec<String> = std::fs::read_dir(home.join("workers"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.join("migrating").exists())
                .map(|p| p.display().to_string())
                .collect();
            found.sort();
            found
        };
        let marked = unfinished(&home);
        if step == "migrate-published" {
            assert!(
                !listed.is_empty(),
                "{step}: the killed worker was published"
            );
        } else {
            assert!(
                !marked.is_empty(),
                "{step}: the killed worker is still marked"
            );
            assert!(listed.len() < workers.len(), "{step}: {listed:?}");
        }
        // The next owner (a writing command) leaves them alone: recovery
        // does not roll a migration back; the rerun finishes it.
        let out = cairn_in(&home, &["rm", "no-such-session"]);
        assert!(!out.status.success());
        assert_eq!(unfinished(&home), marked, "{step}: left for the rerun");
        let (code, report, err) = migrate(&root, &home, &[]);
        assert_eq!(code, 0, "{step}: {err}{report:#}");
        assert_eq!(sessions(&home), sessions(&clean), "{step}");
        let m = manifest(&home);
        for w in &workers {
            assert_eq!(worker_report(&m, &w.worker)["checkpoint"], "done", "{step}");
            assert_exports_source(&home, &root, w);
        }
        assert!(
            !home
                .join("workers")
                .join(format!(".migrating-{}", workers[0].worker))
                .exists()
        );
        assert_eq!(tree(&root), before);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mixed_home_accepts_what_was_migrated_by_hand_after_checking_its_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let native = native_home(tmp.path()).await;
    let root = tmp.path().join("legacy");
    let workers = write_legacy(&native, &root, 3);
    // Migrate everything into a scratch home, then carry half the
    // aggregates (and their index entries) into the real home by hand.
    let scratch = tmp.path().join("scratch");
    assert_eq!(migrate(&root, &scratch, &[]).0, 0);
    let home = tmp.path().join("home2");
    std::fs::create_dir_all(home.join("workers")).unwrap();
    copy_dir(&scratch.join("index"), &home.join("index"));
    for w in &workers[..3] {
        copy_dir(
            &scratch.join("workers").join(&w.worker),
            &home.join("workers").join(&w.worker),
        );
    }
    // One by-hand copy differs in a byte: it is refused, untouched.
    let bad = &workers[2];
    let seg = home
        .join("workers")
        .join(&bad.worker)
        .join("session/segments")
        .join(Path::new(bad.journals.last().unwrap()).file_name().unwrap());
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes.len() / 2;
    bytes[at] = if bytes[at] == b' ' { b'_' } else { b' ' };
    std::fs::write(&seg, &bytes).unwrap();
    let held = tree(&home.join("workers").join(&bad.worker));
    let (code, report, _) = migrate(&root, &home, &[]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(report["adopted"], 2, "{report:#}");
    assert_eq!(report["migrated"], 3);
    assert_eq!(report["failed"], 1);
    let m = manifest(&home);
    assert!(
        worker_report(&m, &bad.worker)["diagnostics"]
            .to_string()
            .contains("differs from the source")
    );
    assert_eq!(tree(&home.join("workers").join(&bad.worker)), held);
    for w in workers.iter().filter(|w| w.worker != bad.worker) {
        assert_exports_source(&home, &root, w);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_migrations_at_once_never_interleave() {
    let tmp = tempfile::tempdir().unwrap();
    let native = native_home(tmp.path()).await;
    let root = tmp.path().join("legacy");
    write_legacy(&native, &root, 40);
    let home = tmp.path().join("home2");
    let spawn = || {
        cairn_bin()
            .args(["migrate", "--json", "--from"])
            .arg(&root)
            .arg("--home")
            .arg(&home)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let mut migrated = 0;
    let mut refused = 0;
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        match out.status.code() {
            Some(0) => {
                let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                migrated += r["migrated"].as_u64().unwrap();
            }
            Some(2) => {
                refused += 1;
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(err.contains("in use by pid"), "{err}");
            }
            other => panic!("{other:?}: {}", String::from_utf8_lossy(&out.stderr)),
        }
    }
    assert_eq!(
        migrated, 80,
        "each worker copied exactly once ({refused} refused)"
    );
    assert_eq!(sessions(&home).len(), 80);
    // A served home refuses a migration outright.
    let served = crate::common::serve(&home);
    let (code, _, err) = migrate(&root, &home, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("served by pid {}", served.pid())),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_home_holding_legacy_roots_is_migrated_when_it_is_served() {
    let tmp = tempfile::tempdir().unwrap();
    let native = native_home(tmp.path()).await;
    // A home with no legacy roots: nothing is done, nothing written.
    let out = cairn_in(&native, &["rm", "no-such-session"]);
    assert!(!out.status.success());
    assert!(!native.join("migration").exists());
    // Legacy roots inside a home: the first writer migrates them first.
    let home = tmp.path().join("old");
    let workers = write_legacy(&native, &home, 2);
    let before = tree(&home);
    // A reader migrates nothing, and says what waits.
    let out = cairn_in(&home, &["ls"]);
    assert!(out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("legacy roots") && said.contains("not migrated yet"),
        "{said}"
    );
    assert_eq!(tree(&home), before);
    let served = crate::common::serve(&home);
    let body: serde_json::Value = reqwest::get(format!("{}/v1/sessions", served.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut listed: Vec<String> = body
        .as_array()
        .or_else(|| body["sessions"].as_array())
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .collect();
    listed.sort();
    let mut expected: Vec<String> = workers.iter().map(|w| w.session.clone()).collect();
    expected.sort();
    assert_eq!(listed, expected);
    drop(served);
    for (path, digest) in &before {
        if ["catalog.json", "metadata", "sessions"]
            .iter()
            .any(|r| path.starts_with(r))
        {
            assert_eq!(tree(&home).get(path), Some(digest), "{path} was changed");
        }
    }
    assert_eq!(manifest(&home)["workers"].as_array().unwrap().len(), 4);
    // Served again: nothing more to do, nothing said.
    let out = cairn_in(&home, &["rm", "no-such-session"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("migrated"));
}
