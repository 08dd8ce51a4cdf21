//! How pending entries are scheduled for commit: one commit at a time
//! waits for the one in flight. A timer that finds a commit already on
//! its way leaves the pending entries to it; a batch that fills while a
//! timer's commit waits starts none of its own; that commit takes every
//! pending entry in one write, and the entries after it get a timer of
//! their own. The commit a filled batch starts is the next batch's timer
//! too: its first emit starts nothing.

mod support;

use cairn_journal::{BATCH, SessionJournal};
use cairn_store::conformance::Intercepted;
use cairn_types::{Payload, Seq};
use std::time::Duration;
use support::{journal, seqs, text};

async fn emit(journal: &SessionJournal, n: usize) {
    for _ in 0..n {
        journal.append_seq(None, text("d")).await.unwrap();
    }
}

/// Emit one entry and wait until its timer's commit reaches the store,
/// which holds it there: the gate to let it go.
async fn one_held(
    store: &Intercepted,
    journal: &SessionJournal,
) -> tokio::sync::oneshot::Sender<()> {
    let gate = store.hold_next_append();
    emit(journal, 1).await;
    tokio::time::timeout(Duration::from_secs(5), gate.reached)
        .await
        .expect("the entry's timer committed it")
        .unwrap();
    gate.go
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_commit_at_a_time_waits_for_the_one_in_flight() {
    let (store, _journals, journal) = journal("commit-schedule").await;
    let mut follower = journal.subscribe(Seq(1));
    let before = store.appends();
    let mut next = 2;

    // While a commit is held: a deferred entry (its own timer, 20 ms),
    // then a batch behind it that fills — their commit waits, and the
    // deferred entry's timer, run out meanwhile, leaves them to it.
    let go = one_held(&store, &journal).await;
    journal.defer(None, vec![text("deferred")]).await.unwrap();
    emit(&journal, BATCH).await;
    tokio::time::sleep(cairn_journal::DEFER_DELAY + Duration::from_millis(50)).await;
    assert_eq!(
        journal.commits_waiting(),
        1,
        "one commit waits for the held one"
    );
    drop(go);
    let got = seqs(&mut follower, 2 + BATCH).await;
    assert_eq!(got, (next..next + 2 + BATCH as u64).collect::<Vec<_>>());
    next += 2 + BATCH as u64;
    assert_eq!(store.appends() - before, 2, "the held write, then the rest");

    // A few entries whose timer runs out while a commit is held: its
    // commit waits, and a batch filling behind it starts none of its own.
    let go = one_held(&store, &journal).await;
    emit(&journal, 3).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(journal.commits_waiting(), 1, "the timer's commit waits");
    emit(&journal, BATCH).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        journal.commits_waiting(),
        1,
        "the filled batch starts no second one"
    );
    drop(go);
    let got = seqs(&mut follower, 1 + 3 + BATCH).await;
    assert_eq!(got, (next..next + 4 + BATCH as u64).collect::<Vec<_>>());
    next += 4 + BATCH as u64;
    assert_eq!(
        store.appends() - before,
        4,
        "one write for everything that waited"
    );

    // The entries after it have a timer of their own.
    emit(&journal, 2).await;
    assert_eq!(seqs(&mut follower, 2).await, vec![next, next + 1]);
    assert_eq!(store.appends() - before, 5);
    assert_eq!(journal.commits_waiting(), 0);
}

/// A guest's emit without a wait (the minting lock is free).
fn emit_now(journal: &SessionJournal) -> Seq {
    let payload = text("d");
    let json = payload.measure(u64::MAX).unwrap();
    journal
        .try_emitter()
        .expect("nobody else mints")
        .append(None, payload, &json)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filled_batchs_commit_schedules_the_next_batchs() {
    let (store, _journals, journal) = journal("commit-schedule-next").await;
    let mut follower = journal.subscribe(Seq(1));
    let before = store.appends();
    // A batch one short of full, with no timer of an emit's (entries
    // committed with the session's next write, or in a minute), then the
    // emit that fills it: its commit starts at once, and is held.
    let gate = store.hold_next_append();
    let payloads: Vec<Payload> = (0..BATCH - 1).map(|_| text("d")).collect();
    journal
        .commit_soon(None, payloads, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(!journal.commit_scheduled().await);
    let filled = emit_now(&journal);
    tokio::time::timeout(Duration::from_secs(5), gate.reached)
        .await
        .expect("the filled batch's commit reached the store")
        .unwrap();
    // Taken, it scheduled the next batch's commit before any emit of it.
    assert_eq!(journal.pending_lines().await.1, 0);
    assert!(
        journal.commit_scheduled().await,
        "the filled batch's commit schedules the next batch's"
    );
    let after: Vec<u64> = (0..3).map(|_| emit_now(&journal).0).collect();
    assert_eq!(after, vec![filled.0 + 1, filled.0 + 2, filled.0 + 3]);
    drop(gate.go);
    // Once written, that commit waits out the delay and takes them.
    let got = seqs(&mut follower, BATCH + 3).await;
    assert_eq!(got, (2..2 + BATCH as u64 + 3).collect::<Vec<_>>());
    assert_eq!(
        store.appends() - before,
        2,
        "the filled batch, then the three after it"
    );
    assert!(!journal.commit_scheduled().await);
}
