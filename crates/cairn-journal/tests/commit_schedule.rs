//! How pending entries are scheduled for commit: one commit at a time
//! waits for the one in flight. A timer that finds a commit already on
//! its way leaves the pending entries to it; a batch that fills while a
//! timer's commit waits starts none of its own; that commit takes every
//! pending entry in one write, and the entries after it get a timer of
//! their own.

mod support;

use cairn_journal::{BATCH, SessionJournal};
use cairn_store::conformance::Intercepted;
use cairn_types::Seq;
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
