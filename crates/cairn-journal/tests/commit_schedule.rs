//! How a guest's emits are scheduled for commit: a batch's timer that
//! finds a commit already on its way leaves the batch to it (one commit
//! at a time waits for the one in flight), that commit takes every
//! pending entry in one write, and the batch after it gets a timer of
//! its own.

mod support;

use cairn_journal::{BATCH, SessionJournal};
use cairn_types::Seq;
use std::time::Duration;
use support::{journal, seqs, text};

async fn emit(journal: &SessionJournal, n: usize) {
    for _ in 0..n {
        journal.append_seq(None, text("d")).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_that_finds_a_commit_on_its_way_leaves_the_batch_to_it() {
    let (store, _journals, journal) = journal("commit-schedule").await;
    let mut follower = journal.subscribe(Seq(1));
    let before = store.appends();
    // One entry: its timer commits it, and the store holds that write.
    let gate = store.hold_next_append();
    emit(&journal, 1).await;
    tokio::time::timeout(Duration::from_secs(5), gate.reached)
        .await
        .expect("the first entry's timer committed it")
        .unwrap();
    // A few more while it is held: their timer runs out and its commit
    // waits for the one in flight.
    emit(&journal, 3).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // A whole batch more: it fills while that commit waits, and starts
    // none of its own.
    emit(&journal, BATCH).await;
    drop(gate.go);
    let all = 1 + 3 + BATCH;
    let got = seqs(&mut follower, all).await;
    assert_eq!(got, (2..2 + all as u64).collect::<Vec<_>>());
    // The held write, then one for everything pending behind it.
    assert_eq!(
        store.appends() - before,
        2,
        "one write for the waiting entries"
    );
    // The next entries have a timer of their own.
    emit(&journal, 2).await;
    let got = seqs(&mut follower, 2).await;
    assert_eq!(got, vec![2 + all as u64, 3 + all as u64]);
    assert_eq!(store.appends() - before, 3);
}
