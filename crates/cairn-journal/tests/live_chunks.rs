//! The live ring is a run of chunks read without its lock: a follower
//! that falls out of the window hears of it once (a gap) and goes on in
//! order; one that stops reading holds the chunk it was in, never the
//! entries written after it (the chunks link to the next one weakly).

mod support;

use cairn_journal::{Delivery, Subscription};
use cairn_types::Seq;
use std::sync::{Arc, Weak};
use std::time::Duration;
use support::{journal_with, text};

/// The next delivery, within 5 s.
async fn next(follower: &mut Subscription) -> Delivery {
    match tokio::time::timeout(Duration::from_secs(5), follower.next()).await {
        Ok(Some(Ok(d))) => d,
        other => panic!("expected a delivery, got {other:?}"),
    }
}

#[tokio::test]
async fn a_follower_out_of_the_window_gets_one_gap_then_everything_in_order() {
    // A window of 8 entries over a store that keeps 8 too: nothing older
    // can be read back, so the follower must be told what it missed.
    let (_store, _journals, journal) = journal_with("live-chunks-gap", 8, 8).await;
    let head = journal.last_seq().await;
    let mut follower = journal.subscribe(head);
    for i in 0..200 {
        journal
            .append(None, text(&format!("entry {i}")))
            .await
            .unwrap();
    }
    let last = journal.last_seq().await.0;
    match next(&mut follower).await {
        Delivery::Gap { resumed_at } => assert_eq!(resumed_at, Seq(last - 7)),
        other => panic!("expected a gap first, got {other:?}"),
    }
    for want in last - 7..=last {
        match next(&mut follower).await {
            Delivery::Event(e) => assert_eq!(e.seq.0, want),
            other => panic!("expected seq {want}, got {other:?}"),
        }
    }

    // Then a writer three chunks' worth ahead of a follower reading beside
    // it: every event in order, and every jump announced by a gap.
    let writer = {
        let journal = journal.clone();
        tokio::spawn(async move {
            for i in 0..300 {
                journal
                    .append(None, text(&format!("more {i}")))
                    .await
                    .unwrap();
                if i % 50 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    let end = last + 300;
    let mut at = last;
    let mut gap_at = None;
    while at < end {
        match next(&mut follower).await {
            Delivery::Gap { resumed_at } => {
                assert!(resumed_at.0 > at + 1, "a gap to {resumed_at:?} after {at}");
                gap_at = Some(resumed_at.0);
            }
            Delivery::Event(e) => {
                let want = gap_at.take().unwrap_or(at + 1);
                assert_eq!(e.seq.0, want, "after seq {at}");
                at = e.seq.0;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    writer.await.unwrap();
    assert_eq!(at, end);
}

#[tokio::test]
async fn a_follower_that_stops_reading_holds_one_chunk_not_what_follows_it() {
    const WINDOW: usize = 100;
    let (_store, _journals, journal) = journal_with("live-chunks-stalled", 16, WINDOW).await;
    let head = journal.last_seq().await;
    // One that reads an entry and then stops, kept alive throughout.
    let mut stalled = journal.subscribe(head);
    journal.append(None, text("first")).await.unwrap();
    assert!(matches!(next(&mut stalled).await, Delivery::Event(_)));
    // One that reads everything as it comes, keeping only weak handles.
    let mut reader = journal.subscribe(journal.last_seq().await);
    let mut written: Vec<Weak<_>> = Vec::new();
    for batch in 0..20 {
        for i in 0..50 {
            journal
                .append(None, text(&format!("entry {batch}.{i}")))
                .await
                .unwrap();
        }
        for _ in 0..50 {
            match next(&mut reader).await {
                Delivery::Event(e) => written.push(Arc::downgrade(&e)),
                other => panic!("the reader keeps up: got {other:?}"),
            }
        }
    }
    let alive = written.iter().filter(|w| w.upgrade().is_some()).count();
    // The window's entries, and at most a chunk more for each follower's
    // place (64 entries): not the 1,000 written since the stalled one stopped.
    assert!(alive >= WINDOW, "the window holds {WINDOW}: {alive} alive");
    assert!(
        alive <= WINDOW + 2 * cairn_journal::READ_MAX,
        "{alive} of 1,000 entries still held"
    );
    // The stalled follower goes on from the window, told of what it missed.
    match next(&mut stalled).await {
        Delivery::Gap { resumed_at } => {
            assert_eq!(resumed_at.0, journal.last_seq().await.0 - WINDOW as u64 + 1);
        }
        other => panic!("expected a gap, got {other:?}"),
    }
}
