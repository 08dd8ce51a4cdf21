//! A follower that begins behind the head (an SSE client from seq 0 while
//! a run emits, the bench's follower of a run it started) reads one page
//! of the store (where the store begins, a line changed on disk, are the
//! store's to say), then takes what the live window holds from the window:
//! the store only for what the window no longer holds. Before, it read the
//! store a page at a time until a page came back empty: behind a writer
//! faster than a page's read and parse, every entry of the run came from
//! the store.

mod support;

use cairn_journal::{DEFAULT_LIVE_WINDOW, Delivery, Journals, SessionJournal, Subscription};
use cairn_store::conformance::Intercepted;
use cairn_types::Seq;
use std::sync::Arc;
use std::time::Duration;
use support::{seqs, text};

/// A new session's journal over a store that keeps everything written
/// here and counts its reads, with a window of `window` entries.
async fn journal(name: &str, window: usize) -> (Arc<Intercepted>, Journals, Arc<SessionJournal>) {
    support::journal_with(name, 1 << 16, window).await
}

/// Entries `from..from + n`, appended in batches of 100.
async fn append(journal: &SessionJournal, from: usize, n: usize) {
    for chunk in (from..from + n).collect::<Vec<_>>().chunks(100) {
        let batch = chunk.iter().map(|i| text(&format!("entry {i}"))).collect();
        journal.append_batch(None, batch).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_the_head_reads_what_the_window_holds_from_it() {
    let (store, _journals, journal) = journal("catch-up-window", DEFAULT_LIVE_WINDOW).await;
    append(&journal, 0, 3000).await;
    // From the segment's creation (seq 1): 3,000 entries behind, all of
    // them in the window (16,384 entries, the default).
    let mut follower = journal.subscribe(Seq(1));
    let writer = {
        let journal = journal.clone();
        tokio::spawn(async move { append(&journal, 3000, 2000).await })
    };
    let got = seqs(&mut follower, 5000).await;
    writer.await.unwrap();
    assert_eq!(got, (2..5002).collect::<Vec<_>>());
    assert_eq!(
        store.reads(),
        1,
        "one page of the store, then the window, which held every entry the follower was behind by"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_reads_the_store_only_up_to_where_the_window_begins() {
    let (store, _journals, journal) = journal("catch-up-store", 1000).await;
    append(&journal, 0, 5000).await;
    // Seqs 2..=5001 are written; the window holds the last 1,000
    // (4002..=5001). The follower reads the store a page (1,024) at a
    // time: four pages take it to 4097, past where the window begins.
    let mut follower = journal.subscribe(Seq(1));
    let got = seqs(&mut follower, 5000).await;
    assert_eq!(got, (2..5002).collect::<Vec<_>>());
    assert_eq!(
        store.reads(),
        4,
        "four pages of the store reach the window; the rest is the window's"
    );
    // And it follows on from the window.
    append(&journal, 5000, 10).await;
    assert_eq!(
        seqs(&mut follower, 10).await,
        (5002..5012).collect::<Vec<_>>()
    );
    assert_eq!(store.reads(), 4);
}

/// Every delivery of a follower from `after`, until it has delivered
/// `last`: each an event, in seq order, dense from `after + 1` but across
/// a `Gap`, which must name the next seq delivered.
async fn follow_to(follower: &mut Subscription, after: u64, last: u64) -> (Vec<u64>, usize) {
    let (mut seen, mut gaps) = (Vec::new(), 0);
    let mut cursor = after;
    while cursor < last {
        let next = tokio::time::timeout(Duration::from_secs(5), follower.next())
            .await
            .unwrap_or_else(|_| panic!("from {after}: stuck after {cursor} of {last}"));
        match next {
            Some(Ok(Delivery::Event(e))) => {
                assert_eq!(e.seq.0, cursor + 1, "from {after}: after {cursor}");
                cursor = e.seq.0;
                seen.push(cursor);
            }
            Some(Ok(Delivery::Gap { resumed_at })) => {
                assert!(
                    resumed_at.0 > cursor + 1,
                    "from {after}: a gap at {resumed_at} after {cursor}"
                );
                gaps += 1;
                cursor = resumed_at.0 - 1;
            }
            other => panic!("from {after}: after {cursor}: {other:?}"),
        }
    }
    (seen, gaps)
}

/// Over a grid of windows, backlogs and starting points, with everything
/// in the store: the follower gets every entry after its start once, in
/// order, with no gap, then follows on live; it reads the store only for
/// what the window does not hold (a page at least when it starts behind
/// the head).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_anywhere_every_entry_comes_once_in_order() {
    for window in [1usize, 3, 16, 100, 2000] {
        for backlog in [0usize, 1, 5, 99, 1500] {
            // Seq 1 is the segment's creation.
            let head = 1 + backlog as u64;
            for after in [0, 1, head / 2, head.saturating_sub(1), head] {
                let case = format!("window {window}, backlog {backlog}, from {after}");
                let (store, _journals, journal) = journal("grid", window).await;
                append(&journal, 0, backlog).await;
                let mut follower = journal.subscribe(Seq(after));
                let (seen, gaps) = follow_to(&mut follower, after, head).await;
                assert_eq!((gaps, seen.len() as u64), (0, head - after), "{case}");
                // The window holds the last `window` entries; the store is
                // read a page (1,024) at a time up to where it begins.
                let front = head.saturating_sub(window as u64) + 1;
                let pages = match after < head {
                    true => front.saturating_sub(after + 1).div_ceil(1024).max(1),
                    false => 0,
                };
                let read = store.reads() as u64;
                assert!(
                    read <= pages,
                    "{case}: {read} store reads for {pages} pages"
                );
                // Then it follows on live.
                let more = journal.append(None, text("more")).await.unwrap().seq.0;
                assert_eq!(
                    follow_to(&mut follower, head, more).await.0,
                    vec![more],
                    "{case}"
                );
            }
        }
    }
}
