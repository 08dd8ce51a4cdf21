//! A commit the store refuses drops the entries minted past the durable
//! head, and their seqs are minted again: a subscriber told to start after
//! one of them must go back to the head, or it skips the entries that take
//! those seqs (a chat call following its run waited forever for the run's
//! end so).

mod support;

use cairn_journal::{Delivery, Subscription};
use cairn_types::{AgentEvent, Payload, Seq, SessionEvent};
use std::sync::Arc;
use std::time::Duration;
use support::{journal, text};

fn text_of(e: &SessionEvent) -> Option<&str> {
    match &e.payload {
        Payload::Agent(AgentEvent::TextDelta { text, .. }) => Some(text),
        _ => None,
    }
}

/// The follower's next delivery, which must be an event and come within
/// five seconds (`waited` says what was waited for).
async fn next_event(follower: &mut Subscription, waited: &str) -> Arc<SessionEvent> {
    match tokio::time::timeout(Duration::from_secs(5), follower.next())
        .await
        .unwrap_or_else(|_| panic!("the follower was left waiting for {waited}"))
    {
        Some(Ok(Delivery::Event(e))) => e,
        other => panic!("expected {waited}, got {other:?}"),
    }
}

#[tokio::test]
async fn a_subscriber_after_a_dropped_seq_gets_the_entry_that_takes_it() {
    let (store, _journals, journal) = journal("refused").await;
    // Seq 1 is the segment's creation; seq 2 a durable entry.
    let durable = journal.append(None, text("durable")).await.unwrap();
    assert_eq!(durable.seq, Seq(2));
    // Seq 3 minted, not yet committed; a follower starts after it (as a
    // chat call follows its run from the minted seq).
    let minted = journal.append_seq(None, text("dropped")).await.unwrap();
    assert_eq!(minted, Seq(3));
    assert_eq!(journal.minted_seq().await, Seq(3));
    let mut follower = journal.subscribe(minted);
    // The disk refuses the commit that holds it: it is dropped, and seq 3
    // is minted again for the next entry.
    store.refuse_next_append();
    let refused = journal.commit().await.unwrap_err();
    assert!(refused.to_string().contains("refused"), "{refused}");
    let again = journal.append(None, text("takes seq 3")).await.unwrap();
    assert_eq!(again.seq, Seq(3));
    let e = next_event(&mut follower, "the entry that took the dropped seq").await;
    assert_eq!(e.seq, Seq(3));
    assert_eq!(text_of(&e), Some("takes seq 3"));
    // Nothing it was given is given twice, and it goes on from there.
    let later = journal.append(None, text("after")).await.unwrap();
    let e = next_event(&mut follower, "the entry after it").await;
    assert_eq!(e.seq, later.seq);
}

/// A follower that had already been given entries before the drop is not
/// given them again: it rewinds only to the durable head.
#[tokio::test]
async fn a_follower_at_the_head_is_given_nothing_twice_after_a_drop() {
    let (store, _journals, journal) = journal("refused-head").await;
    let mut follower = journal.subscribe(Seq(0));
    journal.append(None, text("one")).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(next_event(&mut follower, "the first entries").await.seq);
    }
    assert_eq!(seen, [Seq(1), Seq(2)]);
    journal.append_seq(None, text("dropped")).await.unwrap();
    store.refuse_next_append();
    journal.commit().await.unwrap_err();
    journal.append(None, text("three")).await.unwrap();
    let e = next_event(&mut follower, "the entry that took seq 3").await;
    assert_eq!(e.seq, Seq(3));
    assert_eq!(text_of(&e), Some("three"));
}
