//! Multi-tenant isolation, round three: the attacks of the hostile-tenant
//! round, each kept as a test (the loan race, leaks of host paths, …).

use super::delegation::{grant, run_parent, step_results};
use cairn_runtime::RunStatus;
use cairn_runtime::runtime::{ComponentRef, Runtime, StartRun};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

async fn open(home: &Path, toml: Option<&str>) -> Runtime {
    super::common::runtime_with(home, toml).await
}

/// The escape of the hostile round: the parent guest swaps its lent scope
/// with a link to `/` by renames while each child starts. Before the fix a
/// child's `/loan` was now and then the host's `/`; now every child holds
/// the scope or no loan at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renames_racing_spawns_never_lend_anything_but_the_scope() {
    const SPAWNS: u64 = 400;
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rt = open(
        &home,
        Some(&format!(
            "[limits]\nchildren_per_run = {0}\ntree_workers = {0}\n",
            SPAWNS + 10
        )),
    )
    .await;
    let parent = grant(&rt, "parent").await;
    let hostile = grant(&rt, "hostile").await;
    let steps = json!([
        { "write": ["s/inside.txt", "inside"] },
        { "approve": "plant the link" },
        { "loan_race": { "component": hostile, "scope": "s", "link": "L", "spawns": SPAWNS, "swaps": 25 } },
    ]);
    let started = rt
        .start(StartRun::new(
            ComponentRef::Digest(parent.clone()),
            steps.to_string(),
        ))
        .await
        .unwrap();
    let t = Instant::now();
    let pending = loop {
        if let Some(p) = rt.pending_decisions(None).into_iter().next() {
            break p;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the parent never asked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // The link a guest can make (WASI lets it make one, not follow it).
    let worker = rt.home().lookup(&started.session_id).unwrap().unwrap();
    let artifacts = rt.home().path().join("workers").join(worker.to_string());
    let gen_dir = std::fs::read_dir(artifacts.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("artifacts/s").is_dir())
        .expect("the parent's generation");
    let artifacts = gen_dir.join("artifacts");
    std::os::unix::fs::symlink(
        "../../../../../../../../../../../../../..",
        artifacts.join("L"),
    )
    .unwrap();
    rt.decide(&pending.decision_id, json!({"approved": true}))
        .await
        .unwrap();
    let facts = tokio::time::timeout(Duration::from_secs(600), rt.wait(started.run_id))
        .await
        .expect("the race ended")
        .unwrap();
    let entries = super::common::entries_json(&rt, &started.session_id).await;
    assert_eq!(facts.status, RunStatus::Finished, "{:?}", entries.last());
    let counts = step_results(&entries)[2].clone();
    let counts = counts.as_object().expect("counts").clone();
    eprintln!(
        "loan race: {} spawns in {:?}: {counts:?}",
        SPAWNS,
        t.elapsed()
    );
    let escaped: Vec<_> = counts
        .iter()
        .filter(|(k, _)| {
            !(k.as_str() == "inside" || k.as_str() == "no-loan" || k.starts_with("refused"))
        })
        .collect();
    assert!(
        escaped.is_empty(),
        "children held something else: {escaped:?}"
    );
    let inside = counts.get("inside").and_then(Value::as_u64).unwrap_or(0);
    assert!(
        inside > 0,
        "no child ever held the scope: the race proves nothing ({counts:?})"
    );
    let total: u64 = counts.values().filter_map(Value::as_u64).sum();
    assert_eq!(total, SPAWNS, "{counts:?}");
    // Nothing written outside, the scope as it was.
    assert_eq!(
        std::fs::read_to_string(artifacts.join("s/inside.txt")).unwrap(),
        "inside"
    );
    assert!(
        std::fs::symlink_metadata(artifacts.join("L"))
            .unwrap()
            .is_symlink()
    );
}

/// A refused spawn tells the guest why in terms of its own `artifacts/`:
/// no host path (before, a link on the way printed the home's path, and
/// with it where `cairn.toml` lives).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_never_sees_a_host_path_in_a_refusal() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rt = open(&home, None).await;
    let parent = grant(&rt, "parent").await;
    let steps = json!([
        { "write": ["plain/file.txt", "a file, not a directory"] },
        { "spawn": { "component": "echo", "prompt": "x", "scope": "plain/file.txt" } },
        { "spawn": { "component": "echo", "prompt": "x", "scope": "plain/file.txt/below" } },
        { "spawn": { "component": "echo", "prompt": "x", "scope": "/etc" } },
        { "spawn": { "component": "echo", "prompt": "x", "scope": "../../.." } },
        { "status": "01a22e10-13e4-75e0-902e-3c3c6b20d5ea" },
        { "wait": "not-a-worker" },
    ]);
    let (_, facts, results) = run_parent(&rt, &parent, steps).await;
    assert_eq!(facts.status, RunStatus::Finished);
    let home_text = home.to_string_lossy().into_owned();
    let tmp_text = tmp.path().to_string_lossy().into_owned();
    for r in &results[1..] {
        let e = r["error"]
            .as_str()
            .unwrap_or_else(|| panic!("not refused: {r}"));
        assert!(
            !e.contains(&home_text) && !e.contains(&tmp_text) && !e.contains("/workers/"),
            "a host path reached the guest: {e}"
        );
    }
    assert!(
        results[1]["error"]
            .as_str()
            .unwrap()
            .contains("plain/file.txt is a link or a file"),
        "{}",
        results[1]
    );
}

/// Without tokens, a GET that claims, marks presence or takes over is a
/// write: from another origin (or another site with no Origin, as an
/// image or a link sends it) it is refused; a plain read is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claiming_get_from_another_origin_is_refused_in_local_mode() {
    let (_tmp, rt, base) = super::common::served_here(None).await;
    let http = reqwest::Client::new();
    let made: Value = http
        .post(format!("{base}/v1/sessions"))
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let session = made["session_id"].as_str().unwrap().to_string();
    let events = format!("{base}/v1/sessions/{session}/events");
    let status = |url: String, headers: Vec<(&'static str, String)>| {
        let mut r = http.get(url);
        for (k, v) in headers {
            r = r.header(k, v);
        }
        async move {
            let resp = r.send().await.unwrap();
            let s = resp.status().as_u16();
            let body = if s == 200 {
                String::new()
            } else {
                resp.text().await.unwrap()
            };
            (s, body)
        }
    };
    let claim = format!("{events}?claim=true&presence=true&takeover=true");
    let evil = || vec![("origin", "http://evil.example".to_string())];
    let (s, body) = status(claim.clone(), evil()).await;
    assert_eq!(s, 403, "{body}");
    assert!(body.contains("evil.example"), "{body}");
    // Encoded names decode to the same parameters.
    let (s, body) = status(format!("{events}?%63laim=true"), evil()).await;
    assert_eq!(s, 403, "{body}");
    let (s, body) = status(
        format!("{events}?presence=true"),
        vec![("sec-fetch-site", "cross-site".to_string())],
    )
    .await;
    assert_eq!(s, 403, "{body}");
    // A read from another origin, and the claim from the server's own, go on.
    let (s, body) = status(format!("{events}?presence=false"), evil()).await;
    assert_eq!(s, 200, "{body}");
    let own = vec![
        ("origin", base.clone()),
        ("sec-fetch-site", "same-origin".to_string()),
    ];
    let (s, body) = status(format!("{events}?claim=true"), own).await;
    assert_eq!(s, 200, "{body}");
    rt.begin_shutdown();
}

/// The unauthenticated default agent card names where the server is, not
/// what a request's `Host` says (a reflected Host let anyone put their
/// address into the card).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_card_never_reflects_the_host_header() {
    let (_tmp, rt, base) = super::common::served_here(Some(
        "[workspaces.a]\ntokens = [\"token-for-workspace-a-0123456789\"]\n",
    ))
    .await;
    let card: Value = reqwest::Client::new()
        .get(format!("{base}/.well-known/agent-card.json"))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let text = card.to_string();
    assert!(!text.contains("evil.example"), "{text}");
    assert_eq!(
        card["supportedInterfaces"][0]["url"].as_str().unwrap(),
        format!("{base}/v1/a2a/{}", rt.host_config().a2a.default_agent)
    );
    rt.begin_shutdown();
}

/// `cairn migrate --from root --home home --json`, killed after 60 s:
/// (exit code, stdout, stderr), or `None` when it hung.
fn migrate_within(root: &Path, home: &Path) -> Option<(i32, String, String)> {
    use std::io::Read;
    let mut child = super::common::cairn_bin()
        .args(["migrate", "--json", "--from"])
        .arg(root)
        .arg("--home")
        .arg(home)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let (mut out, mut err) = (String::new(), String::new());
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return Some((status.code().unwrap_or(-1), out, err));
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(ok.success(), "mkfifo {}", path.display());
}

/// A hostile legacy tree: a FIFO named like `catalog.json` (before, the
/// migration blocked on it forever holding the home's lock), a FIFO, a
/// link to a device and a 1 GiB sparse file as segments. Each is refused
/// by name before anything is read; the other workers migrate.
#[tokio::test(flavor = "multi_thread")]
async fn hostile_legacy_trees_are_refused_by_name_and_never_hang() {
    use super::migrate::{native_home, write_legacy};
    let tmp = tempfile::tempdir().unwrap();
    let native = native_home(tmp.path()).await;
    // The catalog itself a FIFO: nothing can be migrated, said at once.
    let root = tmp.path().join("legacy-fifo-catalog");
    write_legacy(&native, &root, 1);
    mkfifo(&root.join("catalog.json"));
    let (code, out, err) =
        migrate_within(&root, &tmp.path().join("home-a")).expect("migrate hung on a FIFO catalog");
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("catalog.json is not a regular file (a FIFO)"),
        "{out}{err}"
    );
    // Segments: a FIFO, a link to /dev/zero, a sparse 1 GiB file; one
    // worker left as it was.
    let root = tmp.path().join("legacy-segments");
    let w = write_legacy(&native, &root, 2);
    assert!(w.len() >= 4, "{}", w.len());
    mkfifo(&root.join(&w[0].journals[0]));
    let link = root.join(&w[1].journals[0]);
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    let sparse = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(root.join(&w[2].journals[0]))
        .unwrap();
    sparse.set_len(1 << 30).unwrap();
    drop(sparse);
    let home = tmp.path().join("home-b");
    let (code, out, err) = migrate_within(&root, &home).expect("migrate hung on a hostile segment");
    assert_eq!(code, 1, "{out}{err}");
    let text = format!("{out}{err}");
    for needle in [
        "is not a regular file (a FIFO)",
        "is a symbolic link: refused",
        "a line longer than 67108864 bytes: refused",
    ] {
        assert!(text.contains(needle), "{needle:?} not in {text}");
    }
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(home.join("migration/manifest.json")).unwrap())
            .unwrap();
    let migrated = manifest.to_string();
    assert!(
        migrated.contains(&w[3].session),
        "the good worker: {migrated}"
    );
}

/// A guest that never calls the host ends at `cpu_ms`, not at `wall_ms`
/// (before, only the wall clock, an hour by default, stopped it); a guest
/// waiting on a decision is not charged for the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spinner_ends_at_its_cpu_budget_and_a_wait_costs_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = open(&tmp.path().join("home"), Some("[limits]\ncpu_ms = 300\n")).await;
    let t = Instant::now();
    let (_, facts, events) = tokio::time::timeout(
        Duration::from_secs(60),
        super::common::run_to_end(
            &rt,
            StartRun::new(
                ComponentRef::Path(super::common::fixture("spinner")),
                "spin",
            ),
            None,
        ),
    )
    .await
    .expect("the spinner was stopped");
    assert_eq!(facts.status, RunStatus::Failed);
    let last = serde_json::to_value(events.last().unwrap()).unwrap();
    assert_eq!(
        last["payload"]["event"]["error"]["details"]["limit"], "cpu_ms",
        "{last}"
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    // The approval example waits on its decision for longer than its
    // whole CPU budget, and finishes.
    let started = rt
        .start(StartRun::new(
            ComponentRef::BuiltIn("approval".into()),
            "wait a while",
        ))
        .await
        .unwrap();
    let pending = loop {
        if let Some(p) = rt.pending_decisions(None).into_iter().next() {
            break p;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    rt.decide(&pending.decision_id, json!({"approved": true}))
        .await
        .unwrap();
    let facts = rt.wait(started.run_id).await.unwrap();
    assert_eq!(facts.status, RunStatus::Finished);
}

/// The terminal `failed(code, message)` counts like any entry: a 4 MiB
/// message under `event_bytes = 64 KiB` ends the run `limit_exceeded
/// event_bytes` and the message is never journaled (before, it was).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_failure_message_is_refused_like_any_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = open(
        &tmp.path().join("home"),
        Some("[limits]\nevent_bytes = 65536\n"),
    )
    .await;
    let (started, facts, events) = super::common::run_to_end(
        &rt,
        StartRun::new(
            ComponentRef::Path(super::common::fixture("hostile")),
            "huge-failed",
        ),
        None,
    )
    .await;
    assert_eq!(facts.status, RunStatus::Failed);
    let last = serde_json::to_value(events.last().unwrap()).unwrap();
    assert_eq!(
        last["payload"]["event"]["error"]["code"], "limit_exceeded",
        "{last}"
    );
    assert_eq!(
        last["payload"]["event"]["error"]["details"]["limit"],
        "event_bytes"
    );
    let exported: usize = super::common::entries_json(&rt, &started.session_id)
        .await
        .iter()
        .map(|e| e.to_string().len())
        .sum();
    assert!(exported < 65536, "{exported} bytes journaled");
}

/// `GET /v1/doctor` answers a workspace token about that workspace only:
/// no home path, no other workspace's counts (before, any token got the
/// home's path and every workspace's numbers). An operator token gets the
/// whole home and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doctor_tells_a_tenant_only_about_its_own_workspace() {
    const A: &str = "token-for-workspace-a-0123456789";
    const B: &str = "token-for-workspace-b-9876543210";
    const OP: &str = "operator-token-0123456789abcdef";
    let (tmp, rt, base) = super::common::served_here(Some(&format!(
        "[server]\noperator_tokens = [\"{OP}\"]\n[workspaces.a]\ntokens = [\"{A}\"]\n[workspaces.b]\ntokens = [\"{B}\"]\n"
    )))
    .await;
    let http = reqwest::Client::new();
    for (token, n) in [(A, 1), (B, 2)] {
        for _ in 0..n {
            let r = http
                .post(format!("{base}/v1/sessions"))
                .bearer_auth(token)
                .json(&json!({}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 201);
        }
    }
    let doctor = |token: &'static str| {
        let r = http
            .get(format!("{base}/v1/doctor"))
            .bearer_auth(token)
            .send();
        async move {
            let r = r.await.unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        }
    };
    let a = doctor(A).await;
    assert_eq!(a["workers"]["total"], 1, "{a}");
    assert_eq!(a["workspace"], "a");
    assert!(a.get("home").is_none(), "{a}");
    assert!(
        !a.to_string().contains(&*tmp.path().to_string_lossy()),
        "{a}"
    );
    assert_eq!(doctor(B).await["workers"]["total"], 2);
    let all = doctor(OP).await;
    assert_eq!(all["workers"]["total"], 3, "{all}");
    assert!(all["home"].is_string());
    // The operator acts for no workspace.
    let r = http
        .get(format!("{base}/v1/sessions"))
        .bearer_auth(OP)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    rt.begin_shutdown();
}

/// All workers of the home, by their records.
fn worker_count(home: &Path) -> usize {
    std::fs::read_dir(home.join("workers"))
        .map(|d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().join("worker.json").exists())
            })
            .count()
        })
        .unwrap_or(0)
}

/// Wait until nothing runs; panics past 120 s.
async fn settle(rt: &Runtime) {
    let t = Instant::now();
    while !rt.live_runs().is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "runs never ended: {:?}",
            rt.live_runs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The fork bomb of the hostile round: every child spawns itself until
/// refused. Before, nothing bounded a tree (4,807 workers in 60 s); now the
/// tree stops at `tree_workers`, exactly, and the spawns past it end their
/// runs `limit_exceeded tree_workers`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_stops_at_the_tree_cap() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rt = open(&home, Some("[limits]\ntree_workers = 40\n")).await;
    let hostile = grant(&rt, "hostile").await;
    let before = worker_count(&home);
    let started = rt
        .start(StartRun::new(
            ComponentRef::Digest(hostile.clone()),
            format!("fork-bomb {hostile} continue"),
        ))
        .await
        .unwrap();
    let facts = rt.wait(started.run_id).await.unwrap();
    settle(&rt).await;
    assert_eq!(facts.status, RunStatus::Failed);
    let made = worker_count(&home) - before;
    assert_eq!(made, 40, "the tree holds {made} workers");
    let entries = super::common::entries_json(&rt, &started.session_id).await;
    let failed = entries
        .iter()
        .find(|e| e["payload"]["event"]["type"] == "failed")
        .expect("the root failed");
    let limit = &failed["payload"]["event"]["error"]["details"]["limit"];
    assert!(
        limit == "tree_workers" || limit == "children_per_run",
        "{failed}"
    );
}

/// A root's end stops its unclaimed descendants that were spawned
/// `cancel` (before, they outlived it); `prune` of a root stops its whole
/// tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roots_end_and_a_prune_stop_the_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rt = open(&home, Some("[limits]\ntree_workers = 6\n")).await;
    let hostile = grant(&rt, "hostile").await;
    // Children spawned `cancel` wait on a decision; the root's spawn past
    // the cap ends it, and its end cancels them.
    let started = rt
        .start(StartRun::new(
            ComponentRef::Digest(hostile.clone()),
            format!("fork-bomb {hostile} cancel"),
        ))
        .await
        .unwrap();
    rt.wait(started.run_id).await.unwrap();
    settle(&rt).await;
    assert_eq!(worker_count(&home), 6);
    assert!(
        rt.pending_decisions(None).is_empty(),
        "children outlived their root"
    );
    // Children spawned `continue` outlive the root; prune of the root stops them.
    let home2 = tmp.path().join("home2");
    let rt2 = open(&home2, Some("[limits]\ntree_workers = 4\n")).await;
    let hostile = grant(&rt2, "hostile").await;
    let parent = grant(&rt2, "parent").await;
    let steps = json!([
        { "spawn": { "component": hostile, "prompt": "wait" } },
        { "spawn": { "component": hostile, "prompt": "wait" } },
    ]);
    let root = rt2
        .start(StartRun::new(
            ComponentRef::Digest(parent),
            steps.to_string(),
        ))
        .await
        .unwrap();
    assert_eq!(
        rt2.wait(root.run_id).await.unwrap().status,
        RunStatus::Finished
    );
    let t = Instant::now();
    while rt2.live_runs().len() < 2 {
        assert!(t.elapsed() < Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rt2.prune(&root.session_id).await.unwrap();
    settle(&rt2).await;
}

/// The work queue bounds each workspace: a prompt over `prompt_bytes` is
/// refused at `queue add` (before, only at dispatch, after it sat in the
/// queue's files), and past `[quota] cards` a workspace gets `429` while
/// another still adds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_checks_prompts_at_add_and_bounds_cards_per_workspace() {
    const A: &str = "token-for-workspace-a-0123456789";
    const B: &str = "token-for-workspace-b-9876543210";
    let (_tmp, rt, base) = super::common::served_here(Some(&format!(
        "[limits]\nprompt_bytes = 1024\n[quota]\ncards = 2\n[workspaces.a]\ntokens = [\"{A}\"]\n[workspaces.b]\ntokens = [\"{B}\"]\n"
    )))
    .await;
    let http = reqwest::Client::new();
    let add = |token: &'static str, card: &str, prompt: String| {
        http.post(format!("{base}/v1/queue"))
            .bearer_auth(token)
            .json(&json!({ "card": card, "component": "approval", "prompt": prompt }))
            .send()
    };
    let big = add(A, "big", "x".repeat(2048)).await.unwrap();
    assert_eq!(big.status(), 413, "{:?}", big.text().await);
    for card in ["one", "two"] {
        let r = add(A, card, "wait for me".into()).await.unwrap();
        assert_eq!(r.status(), 201, "{:?}", r.text().await);
    }
    let third = add(A, "three", "one too many".into()).await.unwrap();
    assert_eq!(third.status(), 429);
    let body: Value = third.json().await.unwrap();
    assert_eq!(body["error"]["code"], "capacity", "{body}");
    let other = add(B, "theirs", "b still adds".into()).await.unwrap();
    assert_eq!(other.status(), 201, "{:?}", other.text().await);
    rt.begin_shutdown();
}

/// `[quota] workers`: a workspace holds at most so many workers, its
/// roots and their delegated children together, until it deletes some
/// (before, nothing bounded them: a fork bomb made 8,746 in two minutes).
/// A spawn, a new session and a start past it are refused, naming the
/// quota; another workspace is not affected; a delete makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_holds_at_most_its_quota_of_workers() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rt = open(
        &home,
        Some(
            "[quota]\nworkers = 3\n[workspaces.other]\ntokens = [\"token-of-other-0123456789\"]\n",
        ),
    )
    .await;
    let parent = grant(&rt, "parent").await;
    let steps = json!([
        { "spawn": { "component": "echo", "prompt": "one" } },
        { "spawn": { "component": "echo", "prompt": "two" } },
        { "spawn": { "component": "echo", "prompt": "three" } },
    ]);
    let (_, _, results) = run_parent(&rt, &parent, steps).await;
    assert!(
        results[0]["error"].is_null() && results[1]["error"].is_null(),
        "{results:?}"
    );
    let refused = results[2]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{results:?}"));
    assert!(refused.contains("workers = 3"), "{refused}");
    let local = rt.default_workspace().to_string();
    match rt.create_session_in(None, &local).await {
        Err(cairn_runtime::runtime::RuntimeError::Capacity(m)) => {
            assert!(m.contains("workers = 3"), "{m}")
        }
        other => panic!("a fourth worker: {other:?}"),
    }
    let start = rt
        .start(StartRun::new(ComponentRef::BuiltIn("echo".into()), "hi"))
        .await;
    assert!(
        matches!(
            start,
            Err(cairn_runtime::runtime::RuntimeError::Capacity(_))
        ),
        "{start:?}"
    );
    rt.create_session_in(None, "other")
        .await
        .expect("another workspace has its own quota");
    let child = rt
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .find(|s| {
            rt.home()
                .lookup(s)
                .ok()
                .flatten()
                .and_then(|w| rt.home().open_worker(w).ok())
                .and_then(|w| w.record().ok())
                .is_some_and(|r| r.parent.is_some())
        })
        .expect("a child");
    rt.delete_session(&child).await.unwrap();
    rt.create_session_in(None, &local)
        .await
        .expect("a delete makes room");
}
