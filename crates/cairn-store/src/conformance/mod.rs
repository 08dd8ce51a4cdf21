//! The store conformance suite: what every implementation of every store
//! trait must do, as functions a test calls with its implementation
//! (`cargo test` runs them against the memory, file and PostgreSQL
//! stores). Each panics with the trait, the rule and what it saw.
//!
//! Behind the `testing` feature: a store written outside cairn runs the
//! same suite.

use super::{BlobStore, JournalItem, LeaseStore, Store, StoreError};
use cairn_types::event::{
    AgentEvent, FinishOutcome, LifecycleEvent, Payload, RunFacts, RunStatus, SessionEvent, Usage,
};
use cairn_types::ids::{Generation, RunId, SegmentId, Seq, SessionId, WorkerId};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

mod catalog;
pub use catalog::{catalog, run_index};
mod intercept;
pub use intercept::{Gate, Intercepted};

/// Makes a session's journal ready to create: returns the segment to
/// create it with (the file store lays out the worker first).
pub type Prepare<'a> =
    &'a (dyn Fn(SessionId) -> Pin<Box<dyn Future<Output = SegmentId> + Send>> + Sync);

/// A store under test: the store and how it prepares a new session.
pub struct Subject<'a> {
    /// What the report calls it.
    pub name: &'a str,
    /// The store.
    pub store: Arc<dyn Store>,
    /// Prepares a session before `create`.
    pub prepare: Prepare<'a>,
}

fn entry(session: &SessionId, segment: SegmentId, seq: u64, payload: Payload) -> Arc<SessionEvent> {
    Arc::new(SessionEvent {
        session_id: session.clone(),
        segment_id: segment,
        run_id: None,
        seq: Seq(seq),
        at_ms: seq,
        payload,
        facts: None,
        line: Default::default(),
    })
}

fn text(n: u64) -> Payload {
    Payload::Agent(AgentEvent::TextDelta {
        text: format!("t{n} ✓ \"quoted\" \\ \n"),
        by: None,
    })
}

/// A session id no other test uses, starting with `prefix`.
pub fn fresh(prefix: &str) -> SessionId {
    SessionId::parse(&format!("{prefix}-{}", uuid::Uuid::new_v4().simple())).expect("a valid id")
}

fn seqs(items: &[JournalItem]) -> Vec<u64> {
    items.iter().map(|i| i.seq().0).collect()
}

fn facts(run: RunId, session: &SessionId, last: Seq) -> RunFacts {
    RunFacts {
        run_id: run,
        session_id: session.clone(),
        component: "sha256:conformance".into(),
        status: RunStatus::Finished,
        outcome: Some(FinishOutcome::Answer),
        usage: Usage::default(),
        started_at_ms: 1,
        ended_at_ms: 2,
        first_seq: Seq(1),
        last_seq: last,
        generation: Generation(3),
        checkpoint: None,
        pending_decisions: vec![],
        continues: None,
        resumes: None,
    }
}

/// Every `JournalStore` and `RunStore` rule: create, head, dense fenced
/// appends that write nothing when refused, reads by cursor and page, the
/// segment switch, the generation a journal names, the run's end with its
/// facts in one write, checkpoints.
pub async fn journal_and_runs(s: &Subject<'_>) {
    let name = s.name;
    let store = &s.store;
    let session = fresh("conf");
    match store.head(&session).await {
        Err(StoreError::UnknownSession(_)) => {}
        other => panic!("{name}: head of a session never created: {other:?}"),
    }
    let segment = (s.prepare)(session.clone()).await;

    // Create, once.
    store.create(&session, segment).await.expect("create");
    let head = store.head(&session).await.expect("head");
    assert_eq!(
        (head.last_seq, head.active_segment, head.last_generation),
        (Seq(0), segment, Generation(0)),
        "{name}: a new journal is empty"
    );
    assert!(
        store
            .read(&session, Seq(0), 10)
            .await
            .expect("read")
            .is_empty(),
        "{name}: a new journal reads empty"
    );

    // Dense appends, read back exactly.
    let batch: Vec<_> = (1..=5)
        .map(|n| entry(&session, segment, n, text(n)))
        .collect();
    store
        .append(&session, Seq(1), &batch)
        .await
        .expect("append 1..5");
    let reserved = entry(
        &session,
        segment,
        6,
        Payload::Lifecycle(LifecycleEvent::GenerationReserved {
            worker_id: WorkerId::new(),
            generation: Generation(7),
        }),
    );
    store
        .append(&session, Seq(6), std::slice::from_ref(&reserved))
        .await
        .expect("append 6");
    let all = store
        .read(&session, Seq(0), usize::MAX)
        .await
        .expect("read all");
    assert_eq!(
        seqs(&all),
        [1, 2, 3, 4, 5, 6],
        "{name}: what was appended reads back"
    );
    for (item, sent) in all.iter().zip(batch.iter().chain([&reserved])) {
        assert_eq!(
            item.event(),
            Some(&**sent),
            "{name}: seq {} reads back unchanged",
            sent.seq.0
        );
    }
    assert_eq!(
        seqs(&store.read(&session, Seq(2), 2).await.expect("page")),
        [3, 4],
        "{name}: a page"
    );
    assert!(
        store
            .read(&session, Seq(6), 10)
            .await
            .expect("tail")
            .is_empty(),
        "{name}: after the head"
    );
    // A page by bytes: the first entry always, then while the lines fit.
    let line = |i: usize| all[i].event().map_or(0, |e| e.line().len() as u64 + 1);
    let two = line(2) + line(3);
    assert_eq!(
        seqs(
            &store
                .read_bytes(&session, Seq(2), 10, two)
                .await
                .expect("bytes")
        ),
        [3, 4],
        "{name}: a page of {two} bytes holds entries 3 and 4 exactly"
    );
    assert_eq!(
        seqs(
            &store
                .read_bytes(&session, Seq(2), 10, two - 1)
                .await
                .expect("bytes")
        ),
        [3],
        "{name}: a byte short of two entries is one"
    );
    assert_eq!(
        seqs(
            &store
                .read_bytes(&session, Seq(0), 10, 1)
                .await
                .expect("bytes")
        ),
        [1],
        "{name}: an entry larger than the page still comes, alone"
    );
    assert_eq!(
        seqs(
            &store
                .read_bytes(&session, Seq(0), 2, u64::MAX - 1)
                .await
                .expect("bytes")
        ),
        [1, 2],
        "{name}: the entry limit holds beside the byte limit"
    );
    // A create never clobbers a journal.
    match store.create(&session, SegmentId::new()).await {
        Err(StoreError::SessionExists(_)) => {}
        other => {
            panic!("{name}: a create of a journal with entries must be SessionExists: {other:?}")
        }
    }
    let head = store.head(&session).await.expect("head");
    assert_eq!(head.last_seq, Seq(6), "{name}: the head moved");
    assert_eq!(
        head.active_segment, segment,
        "{name}: a refused create changes nothing"
    );
    assert_eq!(
        head.last_generation,
        Generation(7),
        "{name}: the generation the journal names"
    );
    let lines: u64 = all
        .iter()
        .map(|i| i.event().map_or(0, |e| e.line().len() as u64 + 1))
        .sum();
    assert!(
        store.bytes(&session).await.expect("bytes") >= lines,
        "{name}: bytes counts at least every line"
    );

    // The fence: behind, ahead, holes and repeats are refused whole.
    for (expected, seq) in [(6u64, 6u64), (8, 8), (7, 8), (7, 6)] {
        let stale = [
            entry(&session, segment, seq, text(seq)),
            entry(&session, segment, seq + 1, text(seq + 1)),
        ];
        match store.append(&session, Seq(expected), &stale).await {
            Err(StoreError::Conflict {
                expected: e, head, ..
            }) if expected != 7 => {
                assert_eq!(
                    (e, head),
                    (Seq(expected), Seq(6)),
                    "{name}: the conflict says where"
                );
            }
            Err(StoreError::OutOfOrder { .. }) if expected == 7 => {}
            other => panic!("{name}: append at {expected} of seq {seq} must be refused: {other:?}"),
        }
    }
    assert_eq!(
        store.head(&session).await.expect("head").last_seq,
        Seq(6),
        "{name}: a refused append writes nothing"
    );
    assert_eq!(
        store
            .read(&session, Seq(0), usize::MAX)
            .await
            .expect("read")
            .len(),
        6,
        "{name}: nothing was written"
    );

    // The segment switch: fenced, atomic, and appends follow it.
    let next_segment = SegmentId::new();
    let first = [entry(&session, next_segment, 9, text(9))];
    assert!(
        store
            .start_segment(&session, next_segment, segment, &first)
            .await
            .is_err(),
        "{name}: a segment switch that does not continue the head is refused"
    );
    assert_eq!(
        store.head(&session).await.expect("head").active_segment,
        segment,
        "{name}: ...and switches nothing"
    );
    let first = [entry(&session, next_segment, 7, text(7))];
    store
        .start_segment(&session, next_segment, segment, &first)
        .await
        .expect("segment switch");
    let head = store.head(&session).await.expect("head");
    assert_eq!(
        (head.active_segment, head.last_seq),
        (next_segment, Seq(7)),
        "{name}: the switch"
    );

    // A run's end: its last entries, the terminal entry and the facts.
    let run = RunId::new();
    let before = [entry(&session, next_segment, 8, text(8))];
    let f = facts(run, &session, Seq(9));
    let mut terminal = SessionEvent::clone(&entry(
        &session,
        next_segment,
        9,
        Payload::Lifecycle(LifecycleEvent::Finished {
            outcome: FinishOutcome::Answer,
            text: "done".into(),
            usage: Usage::default(),
        }),
    ));
    terminal.run_id = Some(run);
    terminal.facts = Some(Box::new(f.clone()));
    let terminal = Arc::new(terminal);
    let stale = [entry(&session, next_segment, 7, text(7))];
    assert!(
        store.finish(&stale, &terminal, &[], &f).await.is_err(),
        "{name}: an end that does not continue the head is refused"
    );
    assert_eq!(
        store.run_facts(&session, run).await.expect("facts"),
        None,
        "{name}: ...and records no facts"
    );
    // A claimant leaving with the run rides behind the terminal entry.
    let after = [entry(&session, next_segment, 10, text(10))];
    store
        .finish(&before, &terminal, &after, &f)
        .await
        .expect("finish");
    assert_eq!(
        store.run_facts(&session, run).await.expect("facts"),
        Some(f),
        "{name}: the facts"
    );
    assert_eq!(
        store
            .run_facts(&session, RunId::new())
            .await
            .expect("facts"),
        None,
        "{name}: an unknown run"
    );
    assert_eq!(
        seqs(&store.read(&session, Seq(7), 10).await.expect("read")),
        [8, 9, 10],
        "{name}: the end's entries, the one behind it included"
    );

    // Checkpoints.
    let key = store
        .put_checkpoint(&session, run, b"\x00state\xff")
        .await
        .expect("checkpoint");
    assert_eq!(
        store.checkpoint(&session, &key).await.expect("read it"),
        b"\x00state\xff",
        "{name}: a checkpoint"
    );
    match store.checkpoint(&session, "no-such-key").await {
        Err(StoreError::NoCheckpoint(_)) => {}
        other => panic!("{name}: an unknown checkpoint key: {other:?}"),
    }

    // Unknown sessions are named, never created by a read or an append.
    let ghost = fresh("ghost");
    match store.read(&ghost, Seq(0), 10).await {
        Err(StoreError::UnknownSession(s)) => assert_eq!(s, ghost, "{name}"),
        other => panic!("{name}: read of an unknown session: {other:?}"),
    }
    match store
        .append(&ghost, Seq(1), &[entry(&ghost, segment, 1, text(1))])
        .await
    {
        Err(StoreError::UnknownSession(_)) => {}
        other => panic!("{name}: append to an unknown session: {other:?}"),
    }
}

/// Many writers racing on one session through the fence: every seq is
/// written once, the losers are refused, the journal stays dense.
pub async fn racing_writers_write_each_seq_once(s: &Subject<'_>) {
    let name = s.name;
    let session = fresh("race");
    let segment = (s.prepare)(session.clone()).await;
    s.store.create(&session, segment).await.expect("create");
    let mut written = 0u64;
    for round in 0..20u64 {
        let head = s.store.head(&session).await.expect("head").last_seq;
        let tasks: Vec<_> = (0..4)
            .map(|w| {
                let store = s.store.clone();
                let session = session.clone();
                let batch = vec![entry(&session, segment, head.0 + 1, text(round * 10 + w))];
                tokio::spawn(async move { store.append(&session, head.next(), &batch).await })
            })
            .collect();
        let mut won = 0;
        for t in tasks {
            match t.await.expect("task") {
                Ok(()) => won += 1,
                Err(e) if e.is_lost_authority() => {}
                Err(e) => panic!("{name}: a losing writer must get a conflict: {e}"),
            }
        }
        assert_eq!(
            won,
            1,
            "{name}: exactly one of four writers of seq {} wins",
            head.0 + 1
        );
        written += 1;
    }
    let all = s
        .store
        .read(&session, Seq(0), usize::MAX)
        .await
        .expect("read");
    assert_eq!(
        seqs(&all),
        (1..=written).collect::<Vec<_>>(),
        "{name}: dense, each seq once"
    );
}

/// Every `LeaseStore` rule, with two holders on one table: one holder at a
/// time, the token grows on every change of hands and only then, a stale
/// token renews nothing, expiry frees the lease and the sweep finds it.
pub async fn leases(a: &dyn LeaseStore, b: &dyn LeaseStore) {
    let name = format!("leases ({} and {})", a.holder_id(), b.holder_id());
    assert_ne!(a.holder_id(), b.holder_id(), "{name}: two holders");
    let ttl = Duration::from_secs(30);
    let s = fresh("lease");
    assert_eq!(
        a.lease(&s).await.expect("lease"),
        None,
        "{name}: never leased"
    );

    let first = a.acquire(&s, ttl).await.expect("a takes it");
    assert_eq!(
        (first.holder.as_str(), first.token > 0),
        (a.holder_id(), true),
        "{name}: {first}"
    );
    assert!(
        first.expires_in_ms > 20_000,
        "{name}: the ttl holds: {first}"
    );
    match b.acquire(&s, ttl).await {
        Err(StoreError::LeaseHeld { holder, .. }) => assert_eq!(holder, a.holder_id(), "{name}"),
        other => panic!("{name}: a held lease is refused to another holder: {other:?}"),
    }
    let again = a.acquire(&s, ttl).await.expect("a again");
    assert_eq!(
        again.token, first.token,
        "{name}: the holder re-taking its lease keeps the token"
    );
    let renewed = a.renew(&s, first.token, ttl).await.expect("renew");
    assert_eq!(
        renewed.token, first.token,
        "{name}: a renewal keeps the token"
    );

    a.release(&s, first.token).await.expect("release");
    let moved = b
        .acquire(&s, ttl)
        .await
        .expect("b takes the released lease");
    assert_eq!(
        moved.token,
        first.token + 1,
        "{name}: the next holder gets the next token"
    );
    match a.renew(&s, first.token, ttl).await {
        Err(StoreError::LeaseLost { token, .. }) => assert_eq!(token, first.token, "{name}"),
        other => panic!("{name}: a stale token renews nothing: {other:?}"),
    }
    // A release with a stale token leaves the lease alone.
    a.release(&s, first.token).await.expect("stale release");
    let now = b.lease(&s).await.expect("lease").expect("leased");
    assert_eq!(
        (now.holder.as_str(), now.token),
        (b.holder_id(), moved.token),
        "{name}: {now}"
    );
    assert!(
        now.expires_in_ms > 0,
        "{name}: a stale release expires nothing"
    );

    // Expiry: the sweep finds it and anyone takes it with the next token.
    let short = fresh("expiring");
    let held = a
        .acquire(&short, Duration::from_millis(100))
        .await
        .expect("short lease");
    assert!(
        !b.expired(10_000)
            .await
            .expect("sweep")
            .iter()
            .any(|l| l.session == short),
        "{name}: an unexpired lease is not swept"
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    let swept = b.expired(10_000).await.expect("sweep");
    assert!(
        swept
            .iter()
            .any(|l| l.session == short && l.token == held.token),
        "{name}: the sweep finds the expired lease"
    );
    let taken = b
        .acquire(&short, ttl)
        .await
        .expect("take the expired lease");
    assert_eq!(
        taken.token,
        held.token + 1,
        "{name}: an expired lease moves with the next token"
    );
    match a.renew(&short, held.token, ttl).await {
        Err(StoreError::LeaseLost { .. }) => {}
        other => panic!("{name}: the old holder of a lease that moved cannot renew: {other:?}"),
    }
}

/// A shared store fences appends by lease: a writer whose lease moved
/// (it paused past its expiry, another instance took the session) is
/// refused `LeaseLost` and writes nothing; the new holder goes on.
pub async fn appends_are_fenced_by_the_lease(
    a: (&dyn LeaseStore, Arc<dyn Store>),
    b: (&dyn LeaseStore, Arc<dyn Store>),
    prepare: Prepare<'_>,
) {
    let session = fresh("fenced");
    let segment = prepare(session.clone()).await;
    a.1.create(&session, segment).await.expect("create");
    a.0.acquire(&session, Duration::from_millis(150))
        .await
        .expect("a holds it");
    a.1.append(&session, Seq(1), &[entry(&session, segment, 1, text(1))])
        .await
        .expect("the holder appends");
    match b
        .1
        .append(&session, Seq(2), &[entry(&session, segment, 2, text(2))])
        .await
    {
        Err(StoreError::LeaseLost { token: 0, .. }) => {}
        other => panic!("an instance without the lease must not append: {other:?}"),
    }
    // a pauses past its expiry; b takes the session.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lease =
        b.0.acquire(&session, Duration::from_secs(30))
            .await
            .expect("b takes it");
    b.1.append(&session, Seq(2), &[entry(&session, segment, 2, text(2))])
        .await
        .expect("the new holder appends");
    // a wakes and writes with its old token: refused, even at the right seq.
    match a
        .1
        .append(&session, Seq(3), &[entry(&session, segment, 3, text(3))])
        .await
    {
        Err(e @ StoreError::LeaseLost { .. }) => assert!(e.is_lost_authority()),
        other => panic!("a stale token's append must be refused: {other:?}"),
    }
    assert!(
        a.1.put_checkpoint(&session, RunId::new(), b"x")
            .await
            .is_err(),
        "a stale token writes no checkpoint"
    );
    let all = b.1.read(&session, Seq(0), usize::MAX).await.expect("read");
    assert_eq!(seqs(&all), [1, 2], "the stale writer wrote nothing");
    b.1.append(&session, Seq(3), &[entry(&session, segment, 3, text(3))])
        .await
        .expect("b goes on");
    b.0.release(&session, lease.token).await.expect("release");

    // Creation is fenced too: a creator that took a new session's lease,
    // paused past it while another took the name, creates no journal.
    let late = fresh("fenced-create");
    let segment = prepare(late.clone()).await;
    a.0.acquire(&late, Duration::from_millis(150))
        .await
        .expect("a leases a new session");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lease =
        b.0.acquire(&late, Duration::from_secs(30))
            .await
            .expect("b takes the name");
    match a.1.create(&late, segment).await {
        Err(e @ StoreError::LeaseLost { .. }) => assert!(e.is_lost_authority()),
        other => panic!("a stale creator must not create the journal: {other:?}"),
    }
    b.1.create(&late, segment).await.expect("b creates it");
    b.0.release(&late, lease.token).await.expect("release");
}

/// Every `BlobStore` rule: put, replace, get, delete, list a namespace,
/// and keys that would address anything outside the store are refused.
pub async fn blobs(name: &str, store: &dyn BlobStore) {
    let ns = format!("conf-{}", uuid::Uuid::new_v4().simple());
    let key = format!("{ns}/a.bin");
    assert_eq!(
        store.get(&key).await.expect("get"),
        None,
        "{name}: nothing yet"
    );
    store.put(&key, b"one").await.expect("put");
    store.put(&key, b"\x00two\xff").await.expect("replace");
    assert_eq!(
        store.get(&key).await.expect("get").as_deref(),
        Some(&b"\x00two\xff"[..]),
        "{name}: replaced"
    );
    store
        .put(&format!("{ns}/b_c-1"), &[])
        .await
        .expect("put an empty blob");
    store
        .put(&format!("{ns}x/other"), b"x")
        .await
        .expect("another namespace");
    assert_eq!(
        store.keys(&ns).await.expect("keys"),
        [format!("{ns}/a.bin"), format!("{ns}/b_c-1")],
        "{name}: a namespace's keys, sorted, nothing of a namespace it prefixes"
    );
    assert_eq!(
        store
            .get(&format!("{ns}/b_c-1"))
            .await
            .expect("get")
            .as_deref(),
        Some(&[][..]),
        "{name}: empty"
    );
    store.delete(&key).await.expect("delete");
    store
        .delete(&key)
        .await
        .expect("deleting nothing is not an error");
    assert_eq!(store.get(&key).await.expect("get"), None, "{name}: deleted");
    for hostile in [
        "../x",
        "a/../b",
        "/etc/passwd",
        "a",
        "a/b/c",
        ".hidden/x",
        "a/.x",
        "a/",
        "a\\b/c",
        "a/b\0",
    ] {
        match store.put(hostile, b"x").await {
            Err(StoreError::Io { context, .. }) => {
                assert!(context.contains("blob key"), "{name}: {context}")
            }
            other => panic!("{name}: hostile key {hostile:?} must be refused: {other:?}"),
        }
        assert!(store.get(hostile).await.is_err(), "{name}: get {hostile:?}");
    }
}
