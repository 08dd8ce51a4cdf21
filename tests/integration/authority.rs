//! One authority per home and per session, tried with real processes: a
//! second writer is refused naming the holder (or sent to the server), the
//! owner's death hands the home over with one restore, readers change
//! nothing, and shutdown ends every stream and frees the home.

use crate::common::{cairn_bin, cairn_in, serve, serve_with};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Start a run over HTTP; (run id, session id).
fn start(url: &str, body: Value) -> (String, String) {
    let resp = http()
        .post(format!("{url}/v1/runs"))
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(resp.status(), 202, "{}", resp.text().unwrap());
    let v: Value = resp.json().unwrap();
    (
        v["run_id"].as_str().unwrap().to_string(),
        v["session_id"].as_str().unwrap().to_string(),
    )
}

/// GET `url` until `done` finds what it waits for (30 s at most).
fn poll<T>(url: &str, what: &str, done: impl Fn(&Value) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v: Value = http().get(url).send().unwrap().json().unwrap();
        if let Some(found) = done(&v) {
            return found;
        }
        assert!(Instant::now() < deadline, "{what} did not come: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait for a pending decision of `session`; its id.
fn pending_decision(url: &str, session: &str) -> String {
    poll(
        &format!("{url}/v1/decisions?session={session}"),
        "a decision",
        |v| {
            v.as_array()
                .and_then(|a| a.first())
                .and_then(|d| d["decision_id"].as_str())
                .map(str::to_string)
        },
    )
}

/// Wait for a run to end; its summary.
fn ended(url: &str, run: &str) -> Value {
    poll(&format!("{url}/v1/runs/{run}"), "the run's end", |v| {
        v["facts"].is_object().then(|| v.clone())
    })
}

/// `cairn run` of a controller that goes on until it is killed (a busy loop
/// under a 60 s deadline; `cairn run` refuses a decision it cannot ask about,
/// so a waiting controller would end at once), its JSON lines on stdout.
fn busy_run(home: &Path) -> std::process::Child {
    cairn_bin()
        .arg("run")
        .arg(crate::common::fixture("hostile"))
        .args([
            "--prompt",
            "loop",
            "--timeout-ms",
            "60000",
            "--json",
            "--home",
        ])
        .arg(home)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn export(home: &Path, session: &str) -> Vec<Value> {
    let out = cairn_in(home, &["export", session]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn assert_dense(lines: &[Value]) {
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["seq"].as_u64(), Some(i as u64 + 1), "dense at {i}: {l}");
    }
}

#[test]
fn a_second_writer_is_refused_or_sent_to_the_server_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let served = serve(&home);
    let url = served.url.clone();
    let (run, session) = start(&url, json!({ "component": "approval", "prompt": "hold" }));
    pending_decision(&url, &session);
    let before = export(&home, &session);

    // The lock file names the server.
    let lock: Value =
        serde_json::from_slice(&std::fs::read(home.join("cairn.lock")).unwrap()).unwrap();
    assert_eq!(lock["pid"], served.pid());
    assert_eq!(lock["command"], "serve");
    assert_eq!(lock["url"], url.as_str());

    // A second `cairn run` on the home: exit 2, one line naming the holder.
    let out = cairn_in(&home, &["run", "echo", "--prompt", "x"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("is served by pid {} at {url}", served.pid())),
        "{err}"
    );
    // The same for `--worker` of the live session's worker, and a second server.
    let worker = http()
        .get(format!("{url}/v1/sessions/{session}"))
        .send()
        .unwrap()
        .json::<Value>()
        .unwrap()["worker_id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = cairn_in(
        &home,
        &["run", "approval", "--prompt", "x", "--worker", &worker],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let second = serve_with(&home, &[]);
    let err = second.err().expect("a second server is refused");
    assert!(err.contains("is served by pid"), "{err}");

    // Readers read, and change nothing.
    let out = cairn_in(&home, &["ls", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(export(&home, &session), before, "nothing was written");

    // A management command goes through the server, saying so.
    let started_seq = before
        .iter()
        .find(|l| l["payload"]["event"]["type"] == "started")
        .unwrap()["seq"]
        .to_string();
    let out = cairn_in(
        &home,
        &["fork", &session, "--before", &started_seq, "--json"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("sending the request there"),
        "{}",
        text(&out.stderr)
    );
    let forked: Value = serde_json::from_slice(&out.stdout).unwrap();
    let child = forked["session_id"].as_str().unwrap();
    assert_eq!(
        http()
            .get(format!("{url}/v1/sessions/{child}"))
            .send()
            .unwrap()
            .status(),
        200,
        "the server made the fork"
    );

    // The live run goes on, and its journal stays dense and single-written.
    let decision = pending_decision(&url, &session);
    let out = cairn_in(&home, &["decide", &decision, "approve"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let facts = ended(&url, &run);
    assert_eq!(facts["facts"]["status"], "finished", "{facts}");
    let after = export(&home, &session);
    assert_dense(&after);
    assert_eq!(&after[..before.len()], &before[..]);
}

#[test]
fn a_busy_home_held_by_cairn_run_names_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let mut child = busy_run(&home);
    let deadline = Instant::now() + Duration::from_secs(30);
    let holder = loop {
        if let Ok(bytes) = std::fs::read(home.join("cairn.lock"))
            && let Ok(v) = serde_json::from_slice::<Value>(&bytes)
        {
            break v;
        }
        assert!(Instant::now() < deadline, "cairn run took no lock");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(holder["command"], "run");
    let out = cairn_in(&home, &["rm", "anything"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("in use by pid {} (cairn run)", child.id())),
        "{err}"
    );
    let _ = child.kill();
    let _ = child.wait();
    // The kernel released the lock with the process: the next writer takes
    // the stale file over silently.
    let out = cairn_in(&home, &["run", "echo", "--prompt", "after"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn the_owner_killed_hands_the_home_over_with_exactly_one_restore() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let mut served = serve(&home);
    let (run, session) = start(
        &served.url,
        json!({ "component": "approval", "prompt": "crash" }),
    );
    pending_decision(&served.url, &session);
    // kill -9: no shutdown, the lock file still names the dead process.
    served.child.kill().unwrap();
    served.child.wait().unwrap();
    drop(served);
    let served = serve(&home);
    let decision = pending_decision(&served.url, &session);
    let resp = http()
        .post(format!("{}/v1/decisions/{decision}", served.url))
        .json(&json!({ "value": { "approved": true } }))
        .send()
        .unwrap();
    assert!(resp.status().is_success());
    assert_eq!(ended(&served.url, &run)["facts"]["status"], "finished");
    drop(served);
    // A third owner finds nothing to restore.
    let served = serve(&home);
    assert_eq!(ended(&served.url, &run)["facts"]["status"], "finished");
    drop(served);
    let lines = export(&home, &session);
    assert_dense(&lines);
    let resumed = lines
        .iter()
        .filter(|l| l["payload"]["event"]["type"] == "resumed_by_replay")
        .count();
    assert_eq!(resumed, 1, "restored exactly once");
    let terminals = lines.iter().filter(|l| l["facts"].is_object()).count();
    assert_eq!(terminals, 1);
}

#[test]
fn an_accepted_run_is_durable_before_its_202() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    for round in 0..5 {
        let mut served = serve(&home);
        let (run, _) = start(
            &served.url,
            json!({ "component": "approval", "prompt": "x" }),
        );
        // Killed the instant the 202 arrived.
        served.child.kill().unwrap();
        served.child.wait().unwrap();
        drop(served);
        let out = cairn_in(&home, &["ls", "--json"]);
        assert!(out.status.success());
        let served = serve(&home);
        let resp = http()
            .get(format!("{}/v1/runs/{run}", served.url))
            .send()
            .unwrap();
        assert_eq!(resp.status(), 200, "round {round}: run {run} is known");
    }
}

#[test]
fn a_reader_during_a_fork_in_progress_removes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let served = serve(&home);
    let (run, _) = start(&served.url, json!({ "component": "echo", "prompt": "x" }));
    ended(&served.url, &run);
    // A fork as the server writes it: a worker staged behind its marker.
    let workers = home.join("workers");
    let source = std::fs::read_dir(&workers)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let staged = workers.join("01900000-0000-7000-8000-000000000001");
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(&source)
        .arg(&staged)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::write(staged.join("forking"), b"{\"version\": 1}\n").unwrap();
    for args in [&["ls"][..], &["ls", "--json"][..]] {
        let out = cairn_in(&home, args);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    assert!(
        staged.join("forking").exists(),
        "the reader left the fork alone"
    );
    drop(served);
    // The next owner rolls the (never published) fork back.
    let out = cairn_in(&home, &["rm", "never-created"]);
    assert!(!staged.exists(), "{}", text(&out.stderr));
}

#[test]
fn sigint_and_sigterm_end_followers_and_free_the_home() {
    for signal in ["-INT", "-TERM"] {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let mut served = serve(&home);
        let (run, session) = start(
            &served.url,
            json!({ "component": "approval", "prompt": "x" }),
        );
        pending_decision(&served.url, &session);
        // A follower, reading the stream on a thread.
        let resp = reqwest::blocking::Client::new()
            .get(format!("{}/v1/sessions/{session}/events", served.url))
            .send()
            .unwrap();
        assert_eq!(resp.status(), 200);
        let follower = std::thread::spawn(move || {
            use std::io::Read;
            let mut body = String::new();
            let mut resp = resp;
            let _ = resp.read_to_string(&mut body);
            body
        });
        std::thread::sleep(Duration::from_millis(200));
        let t0 = Instant::now();
        let status = std::process::Command::new("kill")
            .args([signal, &served.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = loop {
            if let Some(s) = served.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{signal}: the server did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(exit.success(), "{signal}: {exit:?}");
        let body = follower.join().unwrap();
        assert!(body.contains("event: shutdown"), "{signal}: {body}");
        drop(served);
        // The run was drained (cancelled by its policy) and the home is free.
        let out = cairn_in(&home, &["inspect", &session, "--json"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let runs = v["runs"].as_array().unwrap();
        let mine = runs.iter().find(|r| r["run_id"] == run.as_str()).unwrap();
        assert_eq!(mine["facts"]["status"], "cancelled", "{signal}: {mine}");
        let out = cairn_in(&home, &["run", "echo", "--prompt", "free"]);
        assert!(out.status.success(), "{signal}: {}", text(&out.stderr));
    }
}

/// A small tmpfs, unmounted when dropped; `None` where this machine does
/// not let the test mount one.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Fill the file system under `dir` with `name` until it refuses a byte.
fn fill(dir: &Path, name: &str) {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join(name)).unwrap();
    let chunk = vec![0u8; 64 << 10];
    while f.write_all(&chunk).is_ok() {}
    let small = [0u8; 512];
    while f.write_all(&small).is_ok() {}
    let _ = f.sync_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_ends_the_run_failed_storage_once_space_returns() {
    use cairn_runtime::runtime::{Runtime, RuntimeConfig};
    let tmp = tempfile::tempdir().unwrap();
    let Some(mnt) = Tmpfs::mount(&tmp.path().join("mnt"), "24m") else {
        eprintln!("skipped: this machine does not let the test mount a tmpfs (needs root)");
        return;
    };
    let home = mnt.0.join("home");
    let rt = Runtime::open(RuntimeConfig::new(&home)).await.unwrap();
    let hostile = crate::common::fixture("hostile");
    // A first run binds the worker (its component is stored in the home).
    let first = cairn_runtime::runtime::StartRun::new(
        cairn_runtime::runtime::ComponentRef::Path(hostile.clone()),
        "trap",
    );
    let (started, _, _) = crate::common::run_to_end(&rt, first, None).await;
    let session = started.session_id.clone();
    // Leave about 256 KiB free: a reserve file, the rest filled.
    std::fs::write(mnt.0.join("reserve"), vec![0u8; 256 << 10]).unwrap();
    fill(&mnt.0, "filler");
    std::fs::remove_file(mnt.0.join("reserve")).unwrap();
    // A controller that emits until it is refused: the disk refuses first.
    let mut req = cairn_runtime::runtime::StartRun::new(
        cairn_runtime::runtime::ComponentRef::Path(hostile),
        "flood",
    );
    req.session = Some(session.clone());
    let flood = rt.start(req).await.expect("the start fits in the reserve");
    // The disk refuses a batch of the flood's emits: the run ends, failed
    // with `storage`. A refused batch is cut back, and its end (one line)
    // may fit in the page that frees; when it does not, the run holds its
    // session and stays live (a task, not a ghost), retrying its end.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut len = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = rt
            .read(&session, cairn_runtime::Seq(0))
            .await
            .unwrap()
            .len();
        // Grown past the start, and then no longer growing: the disk refuses.
        if now == len && now > 3 {
            break;
        }
        len = now;
        assert!(Instant::now() < deadline, "the journal kept growing");
    }
    if rt.find_run(flood.run_id).await.is_err() {
        // Its end did not fit: still live, holding its session.
        assert_eq!(
            rt.summary(&session).await.unwrap().live_run,
            Some(flood.run_id)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            rt.find_run(flood.run_id).await.is_err(),
            "no end while full"
        );
    }
    // Space returns: the terminal is written, `failed` with `storage`.
    std::fs::remove_file(mnt.0.join("filler")).unwrap();
    let facts = tokio::time::timeout(Duration::from_secs(10), rt.wait(flood.run_id))
        .await
        .expect("the end is written once space returns")
        .unwrap();
    assert_eq!(facts.status, cairn_runtime::RunStatus::Failed);
    let items = rt.read(&session, cairn_runtime::Seq(0)).await.unwrap();
    let last = items.last().unwrap().event().unwrap().clone();
    match &last.payload {
        cairn_runtime::Payload::Lifecycle(cairn_runtime::LifecycleEvent::Failed { error }) => {
            assert_eq!(error.code, "storage", "{error:?}");
        }
        other => panic!("{other:?}"),
    }
    // Every line on disk is whole and dense: a fresh reader agrees.
    rt.shutdown(Duration::from_secs(5)).await;
    drop(rt);
    let mut config = RuntimeConfig::new(&home);
    config.read_only = true;
    let reader = Runtime::open(config).await.unwrap();
    let again = reader.read(&session, cairn_runtime::Seq(0)).await.unwrap();
    assert_eq!(again.len(), items.len());
    for (i, item) in again.iter().enumerate() {
        assert_eq!(item.seq().0, i as u64 + 1);
    }
}

#[tokio::test]
async fn a_new_run_reserves_past_the_journal_when_worker_json_rolled_back() {
    use crate::common::{run_to_end, runtime, start_req};
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let (first, _, _) = run_to_end(&rt, start_req("echo", "one"), None).await;
    let mut again = start_req("echo", "two");
    again.session = Some(first.session_id.clone());
    run_to_end(&rt, again, None).await;
    rt.shutdown(Duration::from_secs(5)).await;
    drop(rt);
    // A power loss rolled worker.json back (its write is not synced) and
    // took the generation directories with it.
    let worker = tmp
        .path()
        .join("home/workers")
        .join(first.worker_id.to_string());
    let path = worker.join("worker.json");
    let mut record: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    record["last_generation"] = json!(0);
    std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
    std::fs::remove_dir_all(worker.join("runs/1")).unwrap();
    std::fs::remove_dir_all(worker.join("runs/2")).unwrap();
    let rt = runtime(tmp.path()).await;
    let mut third = start_req("echo", "three");
    third.session = Some(first.session_id.clone());
    let (_, facts, _) = run_to_end(&rt, third, None).await;
    assert_eq!(
        facts.generation,
        cairn_runtime::Generation(3),
        "never generation 1 again"
    );
}

#[test]
fn a_restore_that_cannot_begin_is_journaled_and_the_worker_marked_stale() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    // A run of an uploaded component, busy until it is killed.
    let mut child = busy_run(&home);
    let mut session = String::new();
    {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(child.stdout.as_mut().unwrap()).lines();
        while let Some(Ok(line)) = lines.next() {
            let v: Value = serde_json::from_str(&line).unwrap();
            session = v["session_id"].as_str().unwrap().to_string();
            if v["payload"]["event"]["type"] == "text_delta" {
                break;
            }
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // The component's bytes are gone: the run cannot be replayed.
    for e in std::fs::read_dir(home.join("components")).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "wasm") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let served = serve(&home);
    let summary = poll(
        &format!("{}/v1/sessions/{session}", served.url),
        "the restore's end",
        |v| v["last_run"].is_object().then(|| v.clone()),
    );
    assert_eq!(summary["last_run"]["status"], "failed", "{summary}");
    assert_eq!(summary["stale"], true, "{summary}");
    drop(served);
    let lines = export(&home, &session);
    let failed = lines.last().unwrap();
    assert_eq!(
        failed["payload"]["event"]["error"]["code"], "restore_failed",
        "{failed}"
    );
    assert!(
        failed["payload"]["event"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("component"),
        "{failed}"
    );
}

#[test]
fn listings_page_with_a_cursor() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let served = serve(&home);
    let mut runs = Vec::new();
    for i in 0..5 {
        let (run, _) = start(
            &served.url,
            json!({ "component": "echo", "prompt": format!("p{i}") }),
        );
        ended(&served.url, &run);
        runs.push(run);
    }
    for (path, key) in [("/v1/sessions", "session_id"), ("/v1/runs", "run_id")] {
        let mut seen = Vec::new();
        let mut url = format!("{}{path}?limit=2", served.url);
        let mut pages = 0;
        loop {
            let resp = http().get(&url).send().unwrap();
            assert_eq!(resp.status(), 200);
            let next = resp
                .headers()
                .get("x-next-cursor")
                .map(|v| v.to_str().unwrap().to_string());
            let rows: Value = resp.json().unwrap();
            assert!(rows.as_array().unwrap().len() <= 2);
            seen.extend(rows.as_array().unwrap().iter().map(|r| r[key].clone()));
            pages += 1;
            match next {
                Some(c) => url = format!("{}{path}?limit=2&cursor={c}", served.url),
                None => break,
            }
        }
        assert_eq!(pages, 3, "{path}");
        assert_eq!(seen.len(), 5, "{path}: {seen:?}");
        let unique: std::collections::HashSet<String> =
            seen.iter().map(|v| v.to_string()).collect();
        assert_eq!(unique.len(), 5, "{path}: no row twice");
    }
    // Runs come newest first.
    let all: Value = http()
        .get(format!("{}/v1/runs", served.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let order: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    let mut newest_first: Vec<&str> = runs.iter().map(String::as_str).collect();
    newest_first.reverse();
    assert_eq!(order, newest_first);
    let bad = http()
        .get(format!("{}/v1/sessions?cursor=nonsense", served.url))
        .send()
        .unwrap();
    assert_eq!(bad.status(), 400);
}

/// On a full disk a session creation, a compaction and a fork answer
/// `503 storage` with `Retry-After` (before: `500 internal`), and work
/// again once space returns (issue 40 item 9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_answers_storage_to_creates_compacts_and_forks() {
    use cairn_runtime::runtime::{Runtime, RuntimeConfig};
    let tmp = tempfile::tempdir().unwrap();
    let Some(mnt) = Tmpfs::mount(&tmp.path().join("mnt"), "24m") else {
        eprintln!("skipped: this machine does not let the test mount a tmpfs (needs root)");
        return;
    };
    let home = mnt.0.join("home");
    let rt = Runtime::open(RuntimeConfig::new(&home)).await.unwrap();
    let (started, _, _) =
        crate::common::run_to_end(&rt, crate::common::start_req("echo", "one"), None).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let serving = rt.clone();
    tokio::spawn(async move { cairn_api::serve(listener, serving, std::future::pending()).await });
    let http = reqwest::Client::new();
    let session = started.session_id.to_string();
    let user_message = crate::common::entries_json(&rt, &started.session_id)
        .await
        .iter()
        .find(|e| e["payload"]["event"]["type"] == "started")
        .and_then(|e| e["seq"].as_u64())
        .unwrap();
    let calls = [
        ("/v1/sessions".to_string(), serde_json::json!({})),
        (
            format!("/v1/sessions/{session}/fork"),
            serde_json::json!({"before_seq": user_message}),
        ),
        (
            format!("/v1/sessions/{session}/compact"),
            serde_json::json!({}),
        ),
    ];
    fill(&mnt.0, "filler");
    for (path, body) in &calls {
        let r = http
            .post(format!("{base}{path}"))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let retry = r.headers().get("retry-after").cloned();
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(
            (status.as_u16(), v["error"]["code"].as_str()),
            (503, Some("storage")),
            "{path}: {v}"
        );
        assert!(retry.is_some(), "{path}: no Retry-After");
        let host = mnt.0.display().to_string();
        assert!(!v.to_string().contains(&host), "{path}: a host path: {v}");
    }
    std::fs::remove_file(mnt.0.join("filler")).unwrap();
    for (path, body) in &calls {
        let r = http
            .post(format!("{base}{path}"))
            .json(body)
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success(),
            "{path}: {}",
            r.text().await.unwrap()
        );
    }
    rt.shutdown(Duration::from_secs(5)).await;
}
