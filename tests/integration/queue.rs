//! The work queue (seed 001) with real runs: same-round answers and rework
//! resume the stored worker, rounds supersede, the replay fallback and its
//! failure, `max_concurrency` sampled from the store, and a `cairn serve`
//! killed with ten cards processing.

use cairn_orchestration::{AnswerValue, NewCard, Queue, RecordStatus, Row, RowState};
use cairn_runtime::runtime::Runtime;
use cairn_runtime::{SessionEvent, SessionId};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) async fn open(home: &Path, toml: Option<&str>) -> (Runtime, Arc<Queue>) {
    let rt = super::common::runtime_with(home, toml).await;
    let q = Queue::open(rt.clone()).unwrap();
    (rt, q)
}

pub(crate) fn dispatch(q: &Arc<Queue>) -> tokio::task::JoinHandle<()> {
    let q = q.clone();
    tokio::spawn(async move { q.work(false).await.unwrap() })
}

pub(crate) fn card(
    card: &str,
    component: &str,
    prompt: &str,
    round: Option<u32>,
    ws: &str,
) -> NewCard {
    NewCard {
        card: card.into(),
        component: component.into(),
        prompt: prompt.into(),
        round,
        workspace: ws.into(),
    }
}

pub(crate) fn row_of(q: &Queue, card: &str) -> Row {
    q.rows(None)
        .unwrap()
        .into_iter()
        .find(|r| r.card == card)
        .unwrap()
}

pub(crate) async fn until(q: &Queue, card: &str, what: &str, done: impl Fn(&Row) -> bool) -> Row {
    let t = Instant::now();
    loop {
        let row = row_of(q, card);
        if done(&row) {
            return row;
        }
        assert!(
            t.elapsed() < Duration::from_secs(90),
            "card {card} never got {what}: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn record(q: &Queue, key: &str) -> cairn_orchestration::Record {
    q.records()
        .unwrap()
        .remove(key)
        .unwrap_or_else(|| panic!("no record {key}"))
}

async fn events(rt: &Runtime, s: &SessionId) -> Vec<SessionEvent> {
    rt.read(s, cairn_runtime::Seq(0))
        .await
        .unwrap()
        .iter()
        .filter_map(|i| i.event().cloned())
        .collect()
}

fn kind(e: &SessionEvent) -> String {
    serde_json::to_value(&e.payload).unwrap()["event"]["type"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_round_answer_and_rework_resume_the_stored_worker() {
    let tmp = tempfile::tempdir().unwrap();
    let (rt, q) = open(&tmp.path().join("home"), None).await;
    let ws = rt.default_workspace().to_string();
    let _d = dispatch(&q);
    q.add(card("deploy", "approval", "may I deploy?", None, &ws))
        .await
        .unwrap();
    let r = until(&q, "deploy", "awaiting", |r| r.state == RowState::Awaiting).await;
    assert_eq!(r.worker_key, "worker:deploy:r1");
    let first = record(&q, "worker:deploy:r1");
    assert!(first.pending_decision.is_some(), "{first:?}");

    q.answer(&ws, "deploy", AnswerValue::Value(json!({"approved": true})))
        .await
        .unwrap();
    let r = until(&q, "deploy", "done", |r| r.state == RowState::Done).await;
    assert_eq!((r.round, r.attempts), (1, 2));
    let answered = record(&q, "worker:deploy:r1");
    assert_eq!(
        (answered.worker_id, &answered.session_id),
        (first.worker_id, &first.session_id)
    );

    q.rework(&ws, "deploy", "check the canary first")
        .await
        .unwrap();
    until(&q, "deploy", "awaiting again", |r| {
        r.state == RowState::Awaiting && r.attempts == 3
    })
    .await;
    q.answer(
        &ws,
        "deploy",
        AnswerValue::Text("{\"approved\": false}".into()),
    )
    .await
    .unwrap();
    let r = until(&q, "deploy", "done again", |r| {
        r.state == RowState::Done && r.attempts == 4
    })
    .await;
    assert_eq!(r.round, 1, "the round does not move");
    let reworked = record(&q, "worker:deploy:r1");
    assert_eq!(
        (reworked.worker_id, &reworked.session_id),
        (first.worker_id, &first.session_id)
    );
    assert!(!reworked.resumed_by_replay);
    assert_eq!(reworked.transcript.len(), 2, "{reworked:?}");

    // One session, a dense journal. A waiting run parks (its liveness is
    // `park`, nobody is present) and the answer resumes it from its
    // checkpoint; the rework is a run that continues the finished one.
    let e = events(&rt, &first.session_id).await;
    let seqs: Vec<u64> = e.iter().map(|e| e.seq.0).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let started: Vec<&SessionEvent> = e.iter().filter(|e| kind(e) == "started").collect();
    assert_eq!(
        started.len(),
        4,
        "{:?}",
        e.iter().map(kind).collect::<Vec<_>>()
    );
    let v = |e: &SessionEvent| serde_json::to_value(&e.payload).unwrap()["event"].clone();
    assert_eq!(v(started[1])["resumes"], json!(started[0].run_id));
    assert_eq!(
        v(started[2])["prompt"],
        "Rework requested: check the canary first"
    );
    assert_eq!(v(started[2])["continues"], json!(started[1].run_id));
    assert_eq!(v(started[3])["resumes"], json!(started[2].run_id));
    let finished: Vec<Value> = e
        .iter()
        .filter(|e| kind(e) == "finished")
        .map(|e| serde_json::to_value(&e.payload).unwrap()["event"]["text"].clone())
        .collect();
    assert_eq!(finished, [json!("approved"), json!("denied")]);
    // Every dispatch that ended left one ledger row; none is live.
    let ledger = q.ledger().unwrap();
    let outcomes: Vec<&str> = ledger
        .iter()
        .map(|l| l["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["awaiting", "done", "awaiting", "done"]);
    assert!(
        ledger
            .iter()
            .all(|l| l["type"] == "worker-session" && l["session_id"] == json!(first.session_id))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounds_supersede_pending_rows_in_place_and_processing_ones_only_when_they_end() {
    let tmp = tempfile::tempdir().unwrap();
    let (rt, q) = open(&tmp.path().join("home"), None).await;
    let ws = rt.default_workspace().to_string();
    // Pending: superseded in place, no worker made for round 1.
    q.add(card("p", "echo", "round one", None, &ws))
        .await
        .unwrap();
    let r = q
        .add(card("p", "echo", "round two", Some(2), &ws))
        .await
        .unwrap();
    assert_eq!(
        (r.round, r.state, r.attempts, r.worker_key.as_str()),
        (2, RowState::Pending, 0, "worker:p:r2")
    );
    assert!(
        q.add(card("p", "echo", "older", Some(2), &ws))
            .await
            .is_err(),
        "a round must grow"
    );
    let _d = dispatch(&q);
    until(&q, "p", "done", |r| r.state == RowState::Done).await;
    assert!(
        q.records()
            .unwrap()
            .keys()
            .all(|k| !k.starts_with("worker:p:r1"))
    );

    // Done, then a round bump: a new worker, the old record retired.
    let old = record(&q, "worker:p:r2");
    q.add(card("p", "echo", "round three", Some(3), &ws))
        .await
        .unwrap();
    until(&q, "p", "round 3 done", |r| {
        r.round == 3 && r.state == RowState::Done
    })
    .await;
    let new = record(&q, "worker:p:r3");
    assert_ne!(new.worker_id, old.worker_id);
    assert_ne!(new.session_id, old.session_id);
    let retired = record(&q, "worker:p:r2#retired-1");
    assert_eq!(
        (retired.status, retired.worker_id),
        (RecordStatus::Retired, old.worker_id)
    );

    // Processing: never replaced; the new round waits until it ends.
    let digest = upload_counter(&rt).await;
    q.add(card("slow", &digest, "3000 0", None, &ws))
        .await
        .unwrap();
    until(&q, "slow", "processing", |r| {
        r.state == RowState::Processing
    })
    .await;
    let mid = q
        .add(card("slow", "echo", "next round", Some(2), &ws))
        .await
        .unwrap();
    assert_eq!((mid.round, mid.state), (1, RowState::Processing), "{mid:?}");
    assert_eq!(mid.next.as_ref().map(|n| n.round), Some(2));
    let r = until(&q, "slow", "round 2 done", |r| {
        r.round == 2 && r.state == RowState::Done
    })
    .await;
    assert_eq!(r.attempts, 1);
    let first = record(&q, "worker:slow:r1#retired-1");
    let e = events(&rt, &first.session_id).await;
    assert_eq!(
        e.iter().filter(|e| kind(e) == "finished").count(),
        1,
        "round 1 ran to its end"
    );
}

async fn upload_counter(rt: &Runtime) -> String {
    let bytes = std::fs::read(super::common::fixture("counter")).unwrap();
    let (digest, _) = rt
        .add_component(&cairn_runtime::runtime::ComponentRef::Bytes(Arc::new(
            bytes,
        )))
        .await
        .unwrap();
    digest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_worker_is_replayed_and_a_failed_replay_blocks_the_record() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (rt, q) = open(&home, None).await;
    let ws = rt.default_workspace().to_string();
    let d = dispatch(&q);
    q.add(card("lost", "echo", "first answer", None, &ws))
        .await
        .unwrap();
    until(&q, "lost", "done", |r| r.state == RowState::Done).await;
    let before = record(&q, "worker:lost:r1");
    rt.delete_session(&before.session_id).await.unwrap();
    q.rework(&ws, "lost", "do it again").await.unwrap();
    let r = until(&q, "lost", "done after replay", |r| {
        r.state == RowState::Done && r.attempts == 2
    })
    .await;
    assert_eq!(r.round, 1);
    let after = record(&q, "worker:lost:r1");
    assert!(after.resumed_by_replay, "{after:?}");
    assert_ne!(after.session_id, before.session_id);
    let e = events(&rt, &after.session_id).await;
    let imported = e
        .iter()
        .find(|e| kind(e) == "history_imported")
        .expect("the transcript is replayed");
    let v = serde_json::to_value(&imported.payload).unwrap();
    assert_eq!(v["event"]["because"], "resumed_by_replay");
    assert_eq!(v["event"]["turns"][0]["text"], "first answer");
    assert_eq!(
        record(&q, "worker:lost:r1#retired-1").status,
        RecordStatus::Retired
    );
    let ledger = q.ledger().unwrap();
    assert_eq!(ledger.last().unwrap()["resumed_by_replay"], true);

    // Now the fallback fails too: the card's component is gone as well.
    let digest = upload_counter(&rt).await;
    q.add(card("doomed", &digest, "2 0", None, &ws))
        .await
        .unwrap();
    until(&q, "doomed", "done", |r| r.state == RowState::Done).await;
    let doomed = record(&q, "worker:doomed:r1");
    rt.delete_session(&doomed.session_id).await.unwrap();
    d.abort();
    rt.shutdown(Duration::from_secs(5)).await;
    drop((q, rt));
    let hex = digest.strip_prefix("sha256:").unwrap();
    std::fs::remove_file(home.join("components").join(format!("sha256-{hex}.wasm"))).unwrap();
    let (rt, q) = open(&home, None).await;
    let _d = dispatch(&q);
    q.rework(&ws, "doomed", "once more").await.unwrap();
    let r = until(&q, "doomed", "failed", |r| r.state == RowState::Failed).await;
    assert!(
        r.last_reason.as_deref().unwrap_or("").contains("blocked"),
        "{r:?}"
    );
    let blocked = record(&q, "worker:doomed:r1");
    assert_eq!(blocked.status, RecordStatus::Blocked);
    rt.shutdown(Duration::from_secs(5)).await;
    drop((q, rt));
    let out = super::common::cairn_in(&home, &["doctor", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let named: Vec<&Value> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "blocked_record" && p["subject"] == "worker:doomed:r1")
        .collect();
    assert_eq!(named.len(), 1, "{report}");
    assert!(
        report["queue"]["resumed_by_replay"]
            .as_array()
            .unwrap()
            .contains(&json!("worker:lost:r1"))
    );
    let human = super::common::cairn_in(&home, &["doctor"]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("problem blocked_record: worker:doomed:r1"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_cards_never_exceed_max_concurrency_in_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (rt, q) = open(&home, Some("[queue]\nmax_concurrency = 3\n")).await;
    let ws = rt.default_workspace().to_string();
    for i in 0..50 {
        q.add(card(
            &format!("c{i}"),
            "echo",
            &format!("card {i}"),
            None,
            &ws,
        ))
        .await
        .unwrap();
    }
    let _d = dispatch(&q);
    let store = home.join("queue").join("cards");
    let (mut samples, mut most) = (0, 0);
    let t = Instant::now();
    loop {
        // Read what the store holds, as another process would.
        let rows = crate::queue_files::rows_on_disk(&store);
        if rows.len() < 50 {
            continue;
        }
        let processing = rows.iter().filter(|r| r["state"] == "processing").count();
        most = most.max(processing);
        samples += 1;
        assert!(processing <= 3, "{processing} rows processing at once");
        if rows.iter().all(|r| r["state"] == "done") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the queue never drained"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(
        samples > 20 && most >= 2,
        "sampled {samples} times, at most {most} processing"
    );
    assert_eq!(q.ledger().unwrap().len(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_ledger_row_writes_it_once_and_a_torn_row_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let http = reqwest::Client::new();
    let add = |url: String, card: &'static str| {
        let http = http.clone();
        async move {
            let r = http
                .post(format!("{url}/v1/queue"))
                .json(&json!({ "card": card, "component": "echo", "prompt": card }))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 201);
        }
    };
    let rows = |url: String| {
        let http = http.clone();
        async move {
            let v: Value = http
                .get(format!("{url}/v1/queue"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v.as_array().unwrap().clone()
        }
    };
    // The server aborts right after the ledger row of the first ending.
    let mut served = super::common::serve_with(&home, &[("CAIRN_CRASH_AT", "queue-ledgered")])
        .expect("the server starts");
    add(served.url.clone(), "first").await;
    let t = Instant::now();
    while served.child.try_wait().unwrap().is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the crash point was never reached"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ledger_path = home.join("queue/ledger.jsonl");
    let before = std::fs::read_to_string(&ledger_path).unwrap();
    assert_eq!(before.lines().count(), 1, "{before}");
    // And a second crash cut an append short.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&ledger_path)
        .unwrap();
    std::io::Write::write_all(&mut f, br#"{"type":"worker-session","key":"wor"#).unwrap();
    drop(f);
    drop(served);

    let served = super::common::serve(&home);
    let t = Instant::now();
    while !rows(served.url.clone())
        .await
        .iter()
        .all(|r| r["state"] == "done")
    {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the recovered row never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    add(served.url.clone(), "second").await;
    let t = Instant::now();
    loop {
        let rows = rows(served.url.clone()).await;
        if rows.len() == 2 && rows.iter().all(|r| r["state"] == "done") {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{rows:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(served);
    // One row per ending, every line whole JSON: the recovered ending was
    // not written again, the torn tail was cut before the next row.
    let ledger = std::fs::read_to_string(&ledger_path).unwrap();
    let rows: Vec<Value> = ledger
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let cards: Vec<&str> = rows.iter().map(|r| r["card"].as_str().unwrap()).collect();
    assert_eq!(cards, ["first", "second"], "{ledger}");
    assert!(ledger.ends_with('\n'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_recovers_every_processing_row_without_counting_an_attempt() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("cairn.toml"), "[queue]\nmax_concurrency = 10\n").unwrap();
    let served = super::common::serve(&home);
    let http = reqwest::Client::new();
    let get = |url: String| {
        let http = http.clone();
        async move {
            http.get(url)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let bytes = std::fs::read(super::common::fixture("counter")).unwrap();
    let up: Value = http
        .post(format!("{}/v1/components", served.url))
        .body(bytes)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let digest = up["digest"].as_str().unwrap().to_string();
    for i in 0..10 {
        let resp = http
            .post(format!("{}/v1/queue", served.url))
            .json(&json!({ "card": format!("k{i}"), "component": digest, "prompt": "20000 0" }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
    }
    // Every row processing, each run well under way: then kill -9.
    let t = Instant::now();
    loop {
        let rows = get(format!("{}/v1/queue", served.url)).await;
        if rows
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["state"] == "processing")
        {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{rows}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(served);
    let served = super::common::serve(&home);
    let t = Instant::now();
    let rows = loop {
        let rows = get(format!("{}/v1/queue", served.url)).await;
        if rows
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["state"] == "done")
        {
            break rows;
        }
        assert!(t.elapsed() < Duration::from_secs(120), "{rows}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    drop(served);
    for r in rows.as_array().unwrap() {
        assert_eq!(r["attempts"], 1, "a recovery counts no attempt: {r}");
    }
    // One worker per key, one run per session (restored, not restarted).
    let records: Value =
        serde_json::from_slice(&std::fs::read(home.join("queue/sessions.state.json")).unwrap())
            .unwrap();
    let records = records["sessions"].as_object().unwrap();
    assert_eq!(
        records.len(),
        10,
        "no retired or second worker: {records:?}"
    );
    let workers: std::collections::HashSet<&str> = records
        .values()
        .map(|r| r["worker_id"].as_str().unwrap())
        .collect();
    assert_eq!(workers.len(), 10);
    let mut restored = 0;
    for r in records.values() {
        let out = super::common::cairn_in(&home, &["export", r["session_id"].as_str().unwrap()]);
        let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let of = |t: &str| {
            lines
                .iter()
                .filter(|l| l["payload"]["event"]["type"] == t)
                .count()
        };
        assert_eq!(of("started"), 1, "one run per key");
        assert_eq!(of("finished"), 1);
        restored += of("resumed_by_replay");
    }
    assert!(
        restored >= 1,
        "the kill interrupted runs that were restored by replay"
    );
    let ledger = std::fs::read_to_string(home.join("queue/ledger.jsonl")).unwrap();
    assert_eq!(ledger.lines().count(), 10);
}

#[tokio::test]
async fn queue_routes_are_workspace_scoped() {
    const A: &str = "queue-token-of-workspace-a-0123456789";
    const B: &str = "queue-token-of-workspace-b-9876543210";
    let (base, _tmp) = super::workspaces::served_with(&format!(
        "[workspaces.a]\ntokens = [\"{A}\"]\n[workspaces.b]\ntokens = [\"{B}\"]\n"
    ))
    .await;
    let http = reqwest::Client::new();
    let add = http
        .post(format!("{base}/v1/queue"))
        .bearer_auth(A)
        .json(&json!({ "card": "mine", "component": "approval", "prompt": "ok?" }))
        .send()
        .await
        .unwrap();
    assert_eq!(add.status(), 201);
    let row: Value = add.json().await.unwrap();
    assert_eq!(row["worker_key"], "worker:a/mine:r1");
    let theirs: Value = http
        .get(format!("{base}/v1/queue"))
        .bearer_auth(B)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(theirs, json!([]));
    let answer = http
        .post(format!("{base}/v1/queue/mine/answer"))
        .bearer_auth(B)
        .json(&json!({ "text": "yes" }))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 404);
    let bad = http
        .post(format!("{base}/v1/queue"))
        .bearer_auth(A)
        .json(&json!({ "card": "../etc", "component": "echo", "prompt": "x" }))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let doctor = http
        .get(format!("{base}/v1/doctor"))
        .bearer_auth(A)
        .send()
        .await
        .unwrap();
    assert_eq!(doctor.status(), 200);
}

/// The file store, counting the reads of its rows.
struct CountingReads(
    cairn_orchestration::FileQueue,
    Arc<std::sync::atomic::AtomicUsize>,
);

impl cairn_orchestration::QueueStore for CountingReads {
    fn cards(
        &self,
    ) -> Result<cairn_orchestration::model::Cards, cairn_orchestration::model::StoreFailure> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0.cards()
    }
    fn put_cards(
        &self,
        cards: &cairn_orchestration::model::Cards,
    ) -> Result<(), cairn_orchestration::model::StoreFailure> {
        self.0.put_cards(cards)
    }
    fn records(
        &self,
    ) -> Result<cairn_orchestration::model::Records, cairn_orchestration::model::StoreFailure> {
        self.0.records()
    }
    fn put_records(
        &self,
        records: &cairn_orchestration::model::Records,
    ) -> Result<(), cairn_orchestration::model::StoreFailure> {
        self.0.put_records(records)
    }
    fn append_ledger(&self, row: &Value) -> Result<(), cairn_orchestration::model::StoreFailure> {
        self.0.append_ledger(row)
    }
    fn ledger(&self) -> Result<Vec<Value>, cairn_orchestration::model::StoreFailure> {
        self.0.ledger()
    }
    fn cards_stamp(&self) -> Option<[i64; 6]> {
        self.0.cards_stamp()
    }
}

/// An idle dispatcher reads its rows again only when they change: with
/// large cards done, a tick costs a `stat`, not a parse of the whole file
/// (before, every 250 ms tick read and parsed `cards.queue.json`: 60 cards
/// of 1 MB prompts took 2.1 s of CPU per idle 20 s); a card added after
/// changes them and is dispatched at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_queue_reads_its_rows_only_when_they_change() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = super::common::runtime_with(&tmp.path().join("home"), None).await;
    let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let store = cairn_orchestration::FileQueue::open(rt.home().root(), true).unwrap();
    let q = Queue::with_store(rt.clone(), Box::new(CountingReads(store, reads.clone())));
    let ws = rt.default_workspace().to_string();
    let _worker = dispatch(&q);
    q.add(card("big", "echo", &"p".repeat(512 << 10), None, &ws))
        .await
        .unwrap();
    until(&q, "big", "done", |r| r.state == RowState::Done).await;
    // The end's writes settle; then a second of ticks (four or more).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = reads.load(std::sync::atomic::Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let idle = reads.load(std::sync::atomic::Ordering::Relaxed) - before;
    assert!(
        idle <= 1,
        "an idle queue read its rows {idle} times in 1.2 s"
    );
    q.add(card("next", "echo", "after the quiet", None, &ws))
        .await
        .unwrap();
    until(&q, "next", "done", |r| r.state == RowState::Done).await;
}

/// An older `sessions.state.json` (version 2, before the `worker:`
/// namespace) is read as before: the queue works on it, `cairn doctor`
/// finds nothing unreadable, and the next write upgrades it to version 3
/// keeping what it held (before: refused, `queue_unreadable`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_state_file_is_read_and_upgraded_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(home.join("queue")).unwrap();
    let old =
        json!({ "version": 2, "sessions": { "card-7": { "sessionId": "abc", "attempts": 1 } } });
    std::fs::write(home.join("queue/sessions.state.json"), old.to_string()).unwrap();
    let out = super::common::cairn_in(&home, &["doctor", "--json"]);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(!report.contains("queue_unreadable"), "{report}");
    let (rt, q) = open(&home, None).await;
    assert!(q.records().unwrap().is_empty());
    let ws = rt.default_workspace().to_string();
    let _worker = dispatch(&q);
    q.add(card("fresh", "echo", "on an old file", None, &ws))
        .await
        .unwrap();
    until(&q, "fresh", "done", |r| r.state == RowState::Done).await;
    let now: Value =
        serde_json::from_slice(&std::fs::read(home.join("queue/sessions.state.json")).unwrap())
            .unwrap();
    assert_eq!(now["version"], 3, "{now}");
    assert_eq!(
        now["legacy"]["sessions.card-7"]["sessionId"], "abc",
        "{now}"
    );
    assert!(
        now["sessions"]
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.starts_with("worker:fresh")),
        "{now}"
    );
}
