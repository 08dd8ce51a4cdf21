//! A subscriber takes the live ring a few entries at a time
//! (`live::READ_MAX`), so the writer never waits on a long copy: whatever
//! the ring holds still reaches it whole, in order, without a gap — a
//! batch published at once, read while the writer goes on appending.

mod support;

use cairn_journal::{Journals, READ_MAX};
use cairn_store::MemoryStore;
use cairn_types::{AgentEvent, Payload, SegmentId, Seq, SessionId};
use std::sync::Arc;
use support::seqs;

fn text(i: usize) -> Payload {
    Payload::Agent(AgentEvent::TextDelta {
        text: format!("entry {i}"),
        by: None,
    })
}

#[tokio::test]
async fn a_window_read_a_few_entries_at_a_time_arrives_whole_and_in_order() {
    let store = Arc::new(MemoryStore::new(1 << 16));
    // A window that holds everything written here: any gap is the reader's.
    let journals = Journals::new(store, 4096);
    let session = SessionId::parse("live-reads").unwrap();
    let journal = journals.create(&session, SegmentId::new()).await.unwrap();
    // Followed from the head (seq 1 is the segment's creation), as a run's
    // follower is: everything after comes through the live ring.
    let mut follower = journal.subscribe(Seq(1));

    // One batch many reads long, published at once.
    let batch = 10 * READ_MAX + 3;
    journal
        .append_batch(None, (0..batch).map(text).collect())
        .await
        .unwrap();
    let first = seqs(&mut follower, batch).await;
    assert_eq!(first, (2..2 + batch as u64).collect::<Vec<_>>());

    // Then the writer goes on while the follower reads.
    let writer = {
        let journal = journal.clone();
        tokio::spawn(async move {
            for i in 0..500 {
                journal.append(None, text(i)).await.unwrap();
            }
        })
    };
    let next = seqs(&mut follower, 500).await;
    writer.await.unwrap();
    let from = 2 + batch as u64;
    assert_eq!(next, (from..from + 500).collect::<Vec<_>>());
}
