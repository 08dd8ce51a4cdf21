//! Hostile controllers: each attack ends its own run `Failed` (with the limit
//! it broke, when it broke one), fast, and the host and its neighbours go on.

use crate::common::*;
use cairn_runtime::journal::event::{LifecycleEvent, RunStatus};
use cairn_runtime::limits::LimitsOverride;
use cairn_runtime::runtime::{ComponentRef, Runtime, StartRun};
use cairn_runtime::{Payload, RunFacts, SessionEvent};
use std::time::{Duration, Instant};

pub fn tight() -> LimitsOverride {
    LimitsOverride {
        memory_bytes: Some(64 << 20),
        wall_ms: Some(2_000),
        cpu_ms: None,
        events_per_run: Some(2_000),
        event_bytes: Some(64 << 10),
        journal_bytes: Some(8 << 20),
        artifact_bytes: Some(8 << 20),
        artifact_files: Some(500),
        artifact_depth: Some(32),
        open_files: Some(256),
        log_bytes: Some(1 << 20),
        checkpoint_bytes: Some(1 << 20),
        model_calls: None,
        model_tokens: None,
        model_wall_ms: None,
        tool_calls: None,
        http_requests: None,
        http_body_bytes: None,
        http_timeout_ms: None,
    }
}

pub fn hostile(attack: &str) -> StartRun {
    let mut req = StartRun::new(ComponentRef::Path(fixture("hostile")), attack);
    req.limits = tight();
    req
}

/// Bytes of a tree as the limits count them: files by the larger of
/// length and blocks, directories by their blocks.
fn tree_bytes(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            total += meta.blocks() * 512 + tree_bytes(&entry.path());
        } else if meta.is_file() {
            total += meta.len().max(meta.blocks() * 512);
        }
    }
    total
}

fn failure(events: &[SessionEvent]) -> cairn_runtime::journal::event::ErrorInfo {
    match &events.last().unwrap().payload {
        Payload::Lifecycle(LifecycleEvent::Failed { error }) => error.clone(),
        other => panic!("expected a failure, got {other:?}"),
    }
}

async fn attack(rt: &Runtime, name: &str) -> (RunFacts, Vec<SessionEvent>, Duration) {
    let t = Instant::now();
    let mut req = hostile(name);
    if name == "flood" {
        // Each entry is a sync: a lower ceiling reaches the count, not the
        // wall clock, even on a loaded machine.
        req.limits.events_per_run = Some(200);
    }
    if name == "dirs" {
        // Room for entries: what ends it is the blocks the directories take.
        req.limits.artifact_files = Some(100_000);
        req.limits.artifact_depth = None;
    }
    let (_, facts, events) =
        tokio::time::timeout(Duration::from_secs(60), run_to_end(rt, req, None))
            .await
            .unwrap_or_else(|_| panic!("the {name} attack was not stopped"));
    (facts, events, t.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attack_ends_its_own_run_and_names_the_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let cases = [
        ("loop", "limit_exceeded", Some("wall_ms")),
        ("memory", "limit_exceeded", Some("memory_bytes")),
        ("flood", "limit_exceeded", Some("events_per_run")),
        ("giant", "limit_exceeded", Some("event_bytes")),
        // Refused at the write, as a full disk would refuse it: the guest
        // sees insufficient-space and gives up with its own error.
        ("disk", "controller_error", None),
        ("nest", "limit_exceeded", Some("artifact_depth")),
        ("sparse", "controller_error", None),
        ("dirs", "controller_error", None),
        // Hard links the writes never paid for: the walk at the run's end
        // counts each, and the run is ended for the tree it leaves.
        ("links", "limit_exceeded", Some("artifact_bytes")),
        ("inodes", "limit_exceeded", Some("artifact_files")),
        ("files", "limit_exceeded", Some("open_files")),
        ("logs", "limit_exceeded", Some("log_bytes")),
        ("wait", "limit_exceeded", Some("wall_ms")),
        ("stack", "trap", None),
        ("trap", "trap", None),
        ("panic", "trap", None),
    ];
    let mut figures = Vec::new();
    for (name, code, limit) in cases {
        let (facts, events, took) = attack(&rt, name).await;
        assert_eq!(facts.status, RunStatus::Failed, "{name}");
        let error = failure(&events);
        assert_eq!(error.code, code, "{name}: {error:?}");
        if code == "controller_error" {
            // Refused at the write: the guest gave up with its own error,
            // and the worktree it leaves is within the run's 8 MiB.
            assert!(error.message.starts_with("io: "), "{name}: {error:?}");
            let worker = rt.home().lookup(&facts.session_id).unwrap().unwrap();
            let tree = rt.home().path().join(format!(
                "workers/{worker}/runs/{}/artifacts",
                facts.generation.0
            ));
            let used = tree_bytes(&tree);
            assert!(
                used <= 8 << 20,
                "{name}: {used} bytes left in {}",
                tree.display()
            );
            figures.push(format!("{name}: refused at the write: {}", error.message));
        }
        if let Some(limit) = limit {
            let details = error.details.clone().unwrap();
            assert_eq!(details["limit"], limit, "{name}: {details}");
            assert!(
                details["value"].as_u64().unwrap() > details["max"].as_u64().unwrap(),
                "{name}: {details}"
            );
        }
        if name == "logs" {
            // The log is made by the guest's first write, owner-only, and
            // holds no more than `log_bytes`.
            let worker = rt.home().lookup(&facts.session_id).unwrap().unwrap();
            let log = rt
                .home()
                .path()
                .join("workers")
                .join(worker.to_string())
                .join("runs")
                .join(facts.generation.0.to_string())
                .join("worker.out.log");
            let meta = std::fs::metadata(&log).unwrap();
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                meta.permissions().mode() & 0o777,
                0o600,
                "{}",
                log.display()
            );
            assert!(
                meta.len() > 0 && meta.len() <= 1 << 20,
                "{} bytes",
                meta.len()
            );
        }
        figures.push(format!(
            "{name}: stopped in {} ms ({})",
            took.as_millis(),
            error.message
        ));
        // The journal stays dense and readable after each attack.
        let seqs: Vec<u64> = rt
            .read(&events[0].session_id, cairn_runtime::Seq(0))
            .await
            .unwrap()
            .iter()
            .map(|i| i.seq().0)
            .collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "{name}");
    }
    for f in &figures {
        eprintln!("{f}");
    }
    // The host goes on.
    let (_, facts, _) = run_to_end(&rt, start_req("echo", "still fine"), None).await;
    assert_eq!(facts.status, RunStatus::Finished);
}

#[tokio::test]
async fn limits_above_the_ceiling_are_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let mut req = hostile("loop");
    req.limits.memory_bytes = Some(u64::MAX);
    let err = rt.start(req).await.unwrap_err();
    assert_eq!(err.code(), "limit_exceeded");
    assert!(err.to_string().contains("memory_bytes"), "{err}");
}

#[tokio::test]
async fn symlinks_planted_in_artifacts_lead_nowhere_for_guest_or_host() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let secret_dir = tmp.path().join("outside");
    std::fs::create_dir(&secret_dir).unwrap();
    std::fs::write(secret_dir.join("secret.txt"), b"top secret").unwrap();
    // The guest waits for approval; meanwhile its artifacts/ gets links out.
    let mut req = StartRun::new(ComponentRef::Path(fixture("hostile")), "escape");
    req.limits = tight();
    let started = rt.start(req).await.unwrap();
    let worker = tmp
        .path()
        .join("home/workers")
        .join(started.worker_id.to_string());
    let plant = |artifacts: &std::path::Path| {
        std::os::unix::fs::symlink(
            secret_dir.join("secret.txt"),
            artifacts.join("planted-link"),
        )
        .unwrap();
        std::os::unix::fs::symlink(&secret_dir, artifacts.join("planted-dir-link")).unwrap();
        std::os::unix::fs::symlink(
            "../../../../outside/secret.txt",
            artifacts.join("relative-link"),
        )
        .unwrap();
    };
    let answer_after_planting = |generation: u64| {
        let rt = rt.clone();
        let session = started.session_id.clone();
        let artifacts = worker.join(format!("runs/{generation}/artifacts"));
        async move {
            loop {
                if let Some(p) = rt.pending_decisions(Some(&session)).first() {
                    plant(&artifacts);
                    rt.decide(&p.decision_id, serde_json::json!({"approved": true}))
                        .await
                        .unwrap();
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    answer_after_planting(1).await;
    let facts = rt.wait(started.run_id).await.unwrap();
    assert_eq!(
        facts.status,
        RunStatus::Finished,
        "the guest reached nothing through the links"
    );
    let events: Vec<SessionEvent> = rt
        .read(&started.session_id, cairn_runtime::Seq(0))
        .await
        .unwrap()
        .iter()
        .filter_map(|i| i.event().cloned())
        .collect();
    let reached = events.iter().find_map(|e| match &e.payload {
        Payload::Agent(cairn_runtime::AgentEvent::Custom { name, data }) if name == "escape" => {
            Some(data["reached"].clone())
        }
        _ => None,
    });
    assert_eq!(reached, Some(serde_json::json!([])));
    std::fs::write(worker.join("runs/1/artifacts/kept.txt"), b"mine").unwrap();
    // Next run of the worker: its artifacts/ carry over without the links.
    let mut req = StartRun::new(ComponentRef::Path(fixture("hostile")), "escape");
    req.worker = Some(started.worker_id);
    req.limits = tight();
    let next_run = rt.start(req).await.unwrap();
    let next = worker.join("runs/2/artifacts");
    loop {
        if !rt.pending_decisions(Some(&started.session_id)).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(std::fs::read(next.join("kept.txt")).unwrap(), b"mine");
    assert!(
        std::fs::symlink_metadata(next.join("planted-link")).is_err(),
        "links are not carried over"
    );
    assert!(std::fs::symlink_metadata(next.join("planted-dir-link")).is_err());
    answer_after_planting(2).await;
    assert_eq!(
        rt.wait(next_run.run_id).await.unwrap().status,
        RunStatus::Finished
    );
    let home = cairn_runtime::worker::Home::open(&tmp.path().join("home")).unwrap();
    let w = home.open_worker(started.worker_id).unwrap();
    let gen_dir = w.generation_dir(cairn_runtime::Generation(2)).unwrap();
    let arts = gen_dir.open_dir("artifacts").unwrap();
    // Host side: cap-std refuses to follow the links out of the aggregate.
    for link in [
        "planted-link",
        "planted-dir-link/secret.txt",
        "relative-link",
    ] {
        assert!(
            arts.read(link).is_err(),
            "the host must not read through {link}"
        );
        assert!(
            arts.write(link, b"overwrite").is_err(),
            "the host must not write through {link}"
        );
    }
    assert_eq!(
        std::fs::read(secret_dir.join("secret.txt")).unwrap(),
        b"top secret"
    );
}

/// JSON nested past the host's depth is refused at every ingress — a
/// guest's emit gets an error value, an HTTP body a 400 — and nothing
/// unreadable reaches a journal.
#[tokio::test]
async fn deep_json_is_refused_at_every_ingress() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = crate::common::runtime(tmp.path()).await;
    let req = StartRun::new(ComponentRef::Path(fixture("hostile")), "deep");
    let (started, facts, events) = crate::common::run_to_end(&rt, req, None).await;
    assert_eq!(
        facts.status,
        cairn_runtime::RunStatus::Finished,
        "{events:?}"
    );
    let refused = events.iter().any(|e| {
        matches!(&e.payload, cairn_runtime::Payload::Agent(cairn_runtime::AgentEvent::TextDelta { text, .. })
            if text.contains("refused") && text.contains("at most 64"))
    });
    assert!(refused, "{events:?}");
    // The session reads back whole.
    rt.summary(&started.session_id).await.unwrap();
    // A decision value of the same depth is refused before it is journaled.
    let mut v = serde_json::json!(1);
    for _ in 0..126 {
        v = serde_json::json!([v]);
    }
    let id = cairn_runtime::DecisionId::derive(&started.session_id, cairn_runtime::Seq(1));
    let err = rt.decide(&id, v.clone()).await.unwrap_err();
    assert_eq!(err.code(), "invalid_request", "{err}");
    let app = cairn_api::router(rt.clone());
    use tower::ServiceExt;
    let resp = app
        .oneshot(
            axum::http::Request::post(format!("/v1/decisions/{id}"))
                .header("content-type", "application/json")
                .body(axum::body::Body::from(
                    serde_json::json!({ "value": v }).to_string(),
                ))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
}

/// Decisions, the final text and checkpoints are journaled bytes too: a
/// controller cannot write past its limits through them.
#[tokio::test]
async fn decisions_final_texts_and_checkpoints_count_against_the_limits() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = crate::common::runtime(tmp.path()).await;
    for (attack, limit) in [
        ("decisions", "events_per_run"),
        ("huge-answer", "event_bytes"),
        ("huge-checkpoint", "checkpoint_bytes"),
    ] {
        let mut req = hostile(attack);
        // Each wait is two syncs: a lower ceiling ends it well within the wall.
        req.limits.events_per_run = Some(100);
        let (_, facts, events) = crate::common::run_to_end(&rt, req, None).await;
        assert_eq!(facts.status, RunStatus::Failed, "{attack}");
        let last = events.last().unwrap();
        let Payload::Lifecycle(LifecycleEvent::Failed { error }) = &last.payload else {
            panic!("{attack}: {last:?}")
        };
        assert_eq!(error.code, "limit_exceeded", "{attack}: {error:?}");
        assert_eq!(error.details.as_ref().unwrap()["limit"], limit, "{attack}");
        assert!(
            events.len() < 110,
            "{attack}: {} entries for a limit of 100",
            events.len()
        );
    }
}

/// Host memory is bounded by settings, not by luck: the compiled-component
/// cache keeps to its byte budget (least recently used out), and an ended
/// run's session gives its live window back after the retention.
#[tokio::test]
async fn the_component_cache_and_live_windows_are_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = cairn_runtime::runtime::RuntimeConfig::new(tmp.path().join("home"));
    config.retention = Duration::from_millis(100);
    config.host.limits.component_cache_bytes = 1;
    let rt = Runtime::open(config).await.unwrap();
    for example in ["echo", "approval", "echo"] {
        let mut req = crate::common::start_req(example, "x");
        if example == "approval" {
            req.liveness.policy = cairn_runtime::journal::event::LivenessPolicy::Continue;
        }
        let answer = Some(serde_json::json!({ "approved": true }));
        crate::common::run_to_end(&rt, req, answer).await;
        let (held, _) = rt.metrics().compiled_components;
        assert_eq!(held, 1, "the budget keeps one component (the one in use)");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while rt.metrics().open_journals > 0 {
        assert!(
            Instant::now() < deadline,
            "{} live windows still held after the retention",
            rt.metrics().open_journals
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_worktree_is_not_carried_and_old_worktrees_are_pruned() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    // A worktree of 2 MiB, within its run's limits.
    let (_, facts, events) = run_to_end(&rt, hostile("fill 2048"), None).await;
    assert_eq!(facts.status, RunStatus::Finished, "{events:?}");
    let session = events[0].session_id.clone();
    let again = |prompt: &str| {
        let mut req = hostile(prompt);
        req.session = Some(session.clone());
        req
    };
    // The next run's limits are lower: it is not stuck behind a tree over
    // them — it starts with an empty worktree, and its stderr log says why.
    let mut lower = again("count");
    lower.limits.artifact_bytes = Some(1 << 20);
    let (_, next, events) = run_to_end(&rt, lower, None).await;
    assert_eq!(next.status, RunStatus::Finished, "{events:?}");
    let text = format!("{:?}", events.last().unwrap().payload);
    assert!(text.contains("0 entries"), "{text}");
    let worker = rt.home().lookup(&session).unwrap().unwrap();
    let runs = rt
        .home()
        .path()
        .join("workers")
        .join(worker.to_string())
        .join("runs");
    let log = std::fs::read_to_string(
        runs.join(next.generation.0.to_string())
            .join("worker.err.log"),
    )
    .unwrap();
    assert!(
        log.contains(&format!(
            "the worktree of generation {} was not carried over: it is over artifact_bytes",
            facts.generation.0
        )),
        "{log}"
    );
    // Retention: of ten generations, the newest eight keep their worktree.
    let mut last = next.generation.0;
    while last < 10 {
        let (_, f, _) = run_to_end(&rt, again("count"), None).await;
        last = f.generation.0;
    }
    // Pruning runs off the async threads once a run has ended.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let kept: Vec<u64> = (1..=last)
            .filter(|g| runs.join(g.to_string()).join("artifacts").exists())
            .collect();
        if kept == (last - 7..=last).collect::<Vec<_>>() {
            break;
        }
        assert!(Instant::now() < deadline, "kept {kept:?} of 1..={last}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Generation `next` is past retention: its worktree went, its log
    // (with the note above) stays as evidence.
    assert!(
        next.generation.0 < last - 7,
        "generation {} is kept",
        next.generation.0
    );
    assert!(
        !runs
            .join(next.generation.0.to_string())
            .join("artifacts")
            .exists()
            && runs
                .join(next.generation.0.to_string())
                .join("worker.err.log")
                .exists(),
        "logs stay as evidence"
    );
}

fn leb(mut n: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn section(id: u8, body: &[u8], out: &mut Vec<u8>) {
    out.push(id);
    leb(body.len() as u64, out);
    out.extend_from_slice(body);
}

/// A component whose one core module has one function declaring `locals`
/// i32 locals: what makes Cranelift take minutes.
fn many_locals_component(locals: u64) -> Vec<u8> {
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    section(1, &[1, 0x60, 0, 0], &mut module); // one type: [] -> []
    section(3, &[1, 0], &mut module); // one function of type 0
    let mut body = vec![1]; // one locals entry
    leb(locals, &mut body);
    body.extend_from_slice(&[0x7f, 0x0b]); // i32; end
    let mut code = vec![1];
    leb(body.len() as u64, &mut code);
    code.extend_from_slice(&body);
    section(10, &code, &mut module);
    let mut component = b"\0asm\x0d\0\x01\0".to_vec();
    section(1, &module, &mut component); // a core module section
    component
}

#[test]
fn a_component_past_the_compile_budget_is_refused_before_it_compiles() {
    let tmp = tempfile::tempdir().unwrap();
    let served = crate::common::serve(&tmp.path().join("home"));
    let http = reqwest::blocking::Client::new();
    let started = Instant::now();
    let resp = http
        .post(format!("{}/v1/components", served.url))
        .header("content-type", "application/wasm")
        .body(many_locals_component(43_000))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: serde_json::Value = resp.json().unwrap();
    assert_eq!(body["error"]["code"], "invalid_component");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("declares 43000 locals") && message.contains("too complex"),
        "{message}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused before compiling"
    );
    // Every real controller is far inside the budget.
    let fixtures = cairn_test_programs::FIXTURES
        .iter()
        .map(|(n, p)| (*n, std::fs::read(p).unwrap()));
    let examples = cairn_examples::names()
        .into_iter()
        .map(|n| (n, cairn_examples::built_in(n).unwrap().to_vec()));
    for (name, bytes) in fixtures.chain(examples) {
        let c = cairn_runtime::component::complexity::check(&bytes).unwrap();
        eprintln!("{name}: {c:?}");
        assert!(
            c.max_locals * 2 < cairn_runtime::component::complexity::MAX_LOCALS,
            "{name}: {c:?}"
        );
    }
}

/// Instances reuse pooled slots, and a slot given back is reset in place
/// (its dirty pages written back to the image, not unmapped): no instance
/// finds a byte an earlier one left in its linear memory — `.bss` zero,
/// `.data` as built, fresh heap pages zero — run after run, one at a time
/// (the same slot again) and two at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_instance_finds_what_an_earlier_one_left_in_its_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let finished_text = |events: &[SessionEvent]| match &events.last().unwrap().payload {
        Payload::Lifecycle(LifecycleEvent::Finished { text, .. }) => text.clone(),
        other => panic!("expected the run to finish, got {other:?}"),
    };
    for round in 0..4 {
        let (_, facts, events) = run_to_end(&rt, hostile("residue"), None).await;
        assert_eq!(facts.status, RunStatus::Finished, "round {round}");
        assert_eq!(
            finished_text(&events),
            "bss 0 data 0 heap 0",
            "round {round}"
        );
    }
    let (a, b) = tokio::join!(
        run_to_end(&rt, hostile("residue"), None),
        run_to_end(&rt, hostile("residue"), None)
    );
    for (_, _, events) in [a, b] {
        assert_eq!(finished_text(&events), "bss 0 data 0 heap 0");
    }
}
