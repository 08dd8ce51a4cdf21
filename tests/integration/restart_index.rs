//! Restarting fast after a crash (issue 42 item 2): the live index
//! (`index/live.jsonl`) names every worker a restart must restore, and the run
//! index's log (`index/runs.jsonl`) is loaded instead of being built from
//! every journal — both only when the previous owner's process died in
//! this boot of the kernel (its unsynced writes outlived it); after a
//! reboot the restart walks every worker and rebuilds the index, as before.

use crate::common::*;
use cairn_runtime::runtime::{Runtime, RuntimeConfig};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// Start `n` `approval` runs on a server of `home`, wait until each asks,
/// and kill the server (SIGKILL).
async fn crash_with_waiting_runs(home: &Path, n: usize) {
    let served = serve(home);
    let http = reqwest::Client::new();
    for i in 0..n {
        let r = http
            .post(format!("{}/v1/runs", served.url))
            .json(&json!({"component": "approval", "prompt": "ship?", "session": format!("w-{i}")}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    }
    let t = Instant::now();
    loop {
        let pending: Value = http
            .get(format!("{}/v1/decisions", served.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if pending.as_array().map_or(0, Vec::len) == n {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the runs never asked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(served);
}

/// The workers the live index lists: those its log marks and does not
/// clear after.
fn listed(home: &Path) -> Vec<String> {
    let log = std::fs::read_to_string(home.join("index/live.jsonl")).unwrap();
    let mut names = std::collections::BTreeSet::new();
    for line in log.lines() {
        let line: Value = serde_json::from_str(line).unwrap();
        if let Some(id) = line["mark"].as_str() {
            names.insert(id.to_string());
        } else if let Some(id) = line["clear"].as_str() {
            names.remove(id);
        } else {
            panic!("a line that neither marks nor clears: {line}");
        }
    }
    names.into_iter().collect()
}

/// Copy `home` (sockets included) to `to` and make its lock record say
/// its owner ran in another boot of the kernel.
fn as_after_a_reboot(home: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(home)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
    let lock = to.join("cairn.lock");
    let mut record: Value = serde_json::from_str(&std::fs::read_to_string(&lock).unwrap()).unwrap();
    assert!(
        record["boot"].is_string(),
        "the owner records its boot: {record}"
    );
    record["boot"] = json!("another-boot");
    std::fs::write(&lock, format!("{record}\n")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_the_same_boot_restores_the_workers_the_live_index_lists() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    crash_with_waiting_runs(&home, 2).await;
    let before = listed(&home);
    assert_eq!(
        before.len(),
        2,
        "each waiting run's worker is listed: {before:?}"
    );
    // One worker taken out of the index by hand: a restart in this boot
    // reads only the index, so it does not restore that one...
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(home.join("index/live.jsonl"))
        .unwrap();
    std::io::Write::write_all(
        &mut log,
        format!("{{\"clear\":\"{}\"}}\n", before[1]).as_bytes(),
    )
    .unwrap();
    let rebooted = tmp.path().join("rebooted");
    as_after_a_reboot(&home, &rebooted);

    let rt = Runtime::open(RuntimeConfig::new(&home)).await.unwrap();
    let live = rt.live_runs();
    assert_eq!(
        live.len(),
        1,
        "only the listed worker is restored: {live:?}"
    );
    // ... and a restored run that ends leaves the index.
    let run = live[0].1;
    let t = Instant::now();
    let decision = loop {
        if let Some(d) = rt.pending_decisions(None).first() {
            break d.decision_id.clone();
        }
        assert!(t.elapsed() < Duration::from_secs(60), "never asked again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    rt.decide(&decision, json!(true)).await.unwrap();
    let facts = rt.wait(run).await.unwrap();
    assert_eq!(facts.status, cairn_runtime::RunStatus::Finished);
    assert_eq!(
        listed(&home),
        Vec::<String>::new(),
        "an ended run leaves the index"
    );
    rt.shutdown(Duration::from_secs(5)).await;

    // After a reboot the unsynced index may be short: every worker is
    // walked, and both runs are restored.
    let rt = Runtime::open(RuntimeConfig::new(&rebooted)).await.unwrap();
    assert_eq!(rt.live_runs().len(), 2, "a reboot walks every worker");
    rt.shutdown(Duration::from_secs(5)).await;
}

/// The runs of `GET /v1/runs`, by id.
async fn listed_runs(url: &str) -> Vec<Value> {
    let page: Value = reqwest::get(format!("{url}/v1/runs"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    page.as_array().cloned().expect("a list of runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_index_is_loaded_after_a_crash_in_the_same_boot_and_rebuilt_after_a_reboot() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let served = serve(&home);
    let http = reqwest::Client::new();
    let mut runs = Vec::new();
    for i in 0..2 {
        let started: Value = http
            .post(format!("{}/v1/runs", served.url))
            .json(&json!({"component": "echo", "prompt": "hi", "session": format!("e-{i}")}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let run = started["run_id"].as_str().unwrap().to_string();
        let t = Instant::now();
        while listed_runs(&served.url)
            .await
            .iter()
            .all(|r| r["run_id"] != run.as_str() || r["facts"].is_null())
        {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "run {run} never ended"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        runs.push(run);
    }
    drop(served);
    // The log holds both runs, each started and ended.
    let log = std::fs::read_to_string(home.join("index/runs.jsonl")).unwrap();
    for run in &runs {
        assert!(
            log.lines()
                .any(|l| l.contains("\"started\"") && l.contains(run.as_str())),
            "{log}"
        );
        assert!(
            log.lines()
                .any(|l| l.contains("\"ended\"") && l.contains(run.as_str())),
            "{log}"
        );
    }
    // A value only the log says: what a restart shows if it loads the log
    // rather than reading the journals.
    let marked = log.replace("\"wall_ms\":", "\"wall_ms\":7777777");
    std::fs::write(home.join("index/runs.jsonl"), &marked).unwrap();
    let rebooted = tmp.path().join("rebooted");
    as_after_a_reboot(&home, &rebooted);

    let wall = |runs: &[Value]| -> Vec<u64> {
        runs.iter()
            .map(|r| r["facts"]["usage"]["wall_ms"].as_u64().unwrap_or(0))
            .collect()
    };
    let served = serve(&home);
    let same_boot = listed_runs(&served.url).await;
    assert_eq!(same_boot.len(), 2, "{same_boot:?}");
    assert!(
        wall(&same_boot).iter().all(|w| *w >= 7_777_777),
        "the index is loaded from its log: {:?}",
        wall(&same_boot)
    );
    drop(served);

    let served = serve(&rebooted);
    let after_reboot = listed_runs(&served.url).await;
    assert_eq!(after_reboot.len(), 2, "{after_reboot:?}");
    assert!(
        wall(&after_reboot).iter().all(|w| *w < 7_777_777),
        "after a reboot the index is built from the journals: {:?}",
        wall(&after_reboot)
    );
    // ... and written anew.
    let rewritten = std::fs::read_to_string(rebooted.join("index/runs.jsonl")).unwrap();
    assert!(!rewritten.contains("7777777"), "{rewritten}");
}

/// A clean stop keeps the workers each workspace holds
/// (`worker-counts.json`, vouched for by its marker) and the next owner
/// counts from it instead of opening every worker at its first creation;
/// after a crash the file is not trusted and the home is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_keeps_the_worker_counts_and_a_crash_does_not() {
    use cairn_runtime::runtime::RuntimeError;
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let toml = Some("[quota]\nworkers = 3\n");
    let counts = home.join("worker-counts.json");
    let rt = runtime_with(&home, toml).await;
    let local = rt.default_workspace().to_string();
    for _ in 0..2 {
        rt.create_session_in(None, &local).await.unwrap();
    }
    rt.shutdown(Duration::from_secs(10)).await;
    let kept: Value = serde_json::from_slice(&std::fs::read(&counts).unwrap()).unwrap();
    assert_eq!(kept["workers"][&local], 2, "{kept}");
    // The next owner takes the file and believes it: told 3, it refuses a
    // third worker (2 are there) — so it did not count them itself.
    let told = json!({"version": 1, "workers": {local.clone(): 3}});
    std::fs::write(&counts, told.to_string()).unwrap();
    let rt = runtime_with(&home, toml).await;
    assert!(!counts.exists(), "the counts are taken at open");
    match rt.create_session_in(None, &local).await {
        Err(RuntimeError::Capacity(m)) => assert!(m.contains("workers = 3"), "{m}"),
        other => panic!("a third worker past the kept count: {other:?}"),
    }
    // A crash (no marker): a file left behind is not believed; the home
    // is counted (2 workers) and a third fits.
    std::fs::write(&counts, told.to_string()).unwrap();
    rt.release_home();
    drop(rt);
    let rt = runtime_with(&home, toml).await;
    rt.create_session_in(None, &local)
        .await
        .expect("counted from the home after a crash: room for a third");
    assert!(matches!(
        rt.create_session_in(None, &local).await,
        Err(RuntimeError::Capacity(_))
    ));
    rt.shutdown(Duration::from_secs(10)).await;
}

/// How many workers of `home` hold a `creating` marker.
fn creating_markers(home: &Path) -> usize {
    std::fs::read_dir(home.join("workers"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().join("creating").exists())
        .count()
}

/// A new session's `creating` marker outlives its first commit (removed
/// then, it made the next `fdatasync` — a run start's — write the worker's
/// directory too) until the second commit after it. A session created and
/// left alone keeps it: a reader in another process sees the session all
/// the same; a SIGKILL leaves it to the next owner, which publishes it;
/// a clean stop removes it.
#[test]
fn a_new_sessions_deferred_marker_is_read_past_and_finished_by_the_next_owner() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let http = reqwest::blocking::Client::new();
    let create = |url: &str, id: &str| {
        let r = http
            .post(format!("{url}/v1/sessions"))
            .json(&json!({ "id": id }))
            .send()
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().unwrap());
    };
    let listed = |home: &Path| -> Vec<String> {
        let out = cairn_in(home, &["ls", "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        rows.iter()
            .filter_map(|r| r["session_id"].as_str().map(str::to_string))
            .collect()
    };

    let served = serve(&home);
    create(&served.url, "quiet");
    assert_eq!(creating_markers(&home), 1, "the marker goes later");
    // The CLI reads the served home itself: the session is there.
    assert_eq!(listed(&home), vec!["quiet".to_string()]);
    drop(served); // SIGKILL
    assert_eq!(creating_markers(&home), 1);

    let served = serve(&home);
    let got = http
        .get(format!("{}/v1/sessions/quiet", served.url))
        .send()
        .unwrap();
    assert_eq!(got.status(), 200, "the next owner lost the session");
    assert_eq!(creating_markers(&home), 0, "the next owner published it");
    let run = http
        .post(format!("{}/v1/runs", served.url))
        .json(&json!({ "session": "quiet", "component": "echo", "prompt": "still here" }))
        .send()
        .unwrap();
    assert!(run.status().is_success(), "{}", run.text().unwrap());

    // A clean stop leaves no marker for the next owner, which walks nothing.
    create(&served.url, "stopped");
    assert_eq!(creating_markers(&home), 1);
    let mut served = served;
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&served.child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert!(served.child.wait().unwrap().success());
    assert!(home.join(cairn_runtime::home_lock::CLEAN_FILE).exists());
    assert_eq!(creating_markers(&home), 0, "a clean stop left a marker");
    let mut names = listed(&home);
    names.sort();
    assert_eq!(names, vec!["quiet".to_string(), "stopped".to_string()]);
}
