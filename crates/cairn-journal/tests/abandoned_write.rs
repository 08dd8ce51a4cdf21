//! A journal write whose caller goes away while the store call is in
//! flight (an HTTP request's client that left, dropping its handler) still
//! runs to its end: the pending entries it took are written and
//! published, and the journal goes on. Abandoned halfway, those entries
//! were lost while the store already held them, and every later commit
//! was refused for the store's head.

mod support;

use cairn_types::Seq;
use support::{abandon, entries, journal, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_abandoned_in_flight_is_written_and_the_journal_goes_on() {
    let (store, _journals, journal) = journal("abandoned-append").await;
    let mut follower = journal.subscribe(Seq(0));
    // A guest's emit, pending: the append below carries it.
    assert_eq!(
        journal.append_seq(None, text("emitted")).await.unwrap(),
        Seq(2)
    );
    let gate = store.hold_next_append();
    let answering = {
        let journal = journal.clone();
        tokio::spawn(async move { journal.append(None, text("answer")).await })
    };
    abandon(gate, answering).await;
    let after = journal
        .append(None, text("after"))
        .await
        .expect("the journal goes on after an abandoned append");
    assert_eq!(after.seq, Seq(4));
    assert_eq!(
        entries(&mut follower, 4).await,
        [
            (1, "segment".into()),
            (2, "emitted".into()),
            (3, "answer".into()),
            (4, "after".into())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_switch_abandoned_in_flight_is_made_and_the_journal_goes_on() {
    let (store, _journals, journal) = journal("abandoned-switch").await;
    let mut follower = journal.subscribe(Seq(0));
    journal.append_seq(None, text("emitted")).await.unwrap();
    // The switch commits the pending entry first: that append is held.
    let gate = store.hold_next_append();
    let switching = {
        let journal = journal.clone();
        tokio::spawn(async move { journal.start_segment(None, Some(Seq(2))).await })
    };
    abandon(gate, switching).await;
    let after = journal
        .append(None, text("after"))
        .await
        .expect("the journal goes on after an abandoned switch");
    assert_eq!(after.seq, Seq(4));
    assert_eq!(
        entries(&mut follower, 4).await,
        [
            (1, "segment".into()),
            (2, "emitted".into()),
            (3, "segment".into()),
            (4, "after".into())
        ]
    );
}
