//! Subscribers and the store: a follower from the start reads the store
//! and then the live tail, each entry once; one from the head needs no
//! store read at all.

use crate::store::{KINDS, Kind, fixture, next, text};
use cairn_runtime::Seq;
use cairn_runtime::journal::{Delivery, Journals};
use std::time::Duration;

/// The seqs of the next `n` deliveries, each an event.
async fn seqs(sub: &mut cairn_runtime::journal::Subscription, n: usize, kind: Kind) -> Vec<u64> {
    let mut seen = Vec::with_capacity(n);
    while seen.len() < n {
        match next(sub).await {
            Delivery::Event(e) => seen.push(e.seq.0),
            other => panic!("{kind:?}: unexpected {other:?}"),
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subscriber_from_zero_sees_every_event_once_across_the_switch_to_live() {
    for kind in KINDS {
        let f = fixture(kind, 4096);
        let journal = f.session("switch").await;
        for i in 0..150 {
            journal.append(None, text(i)).await.unwrap();
        }
        let writer = {
            let j = journal.clone();
            tokio::spawn(async move {
                for i in 0..150 {
                    j.append(None, text(1000 + i)).await.unwrap();
                }
            })
        };
        let mut sub = journal.subscribe(Seq(0));
        let seen = seqs(&mut sub, 301, kind).await;
        writer.await.unwrap();
        assert_eq!(seen, (1..=301).collect::<Vec<_>>(), "{kind:?}");
        // Nothing more is pending.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), sub.next())
                .await
                .is_err()
        );
    }
}

/// A subscriber from the head (a chat call or a CLI run following the run
/// it starts) gets every later entry once, in order, from the live tail
/// alone: the store is never read for it. One from before the head reads
/// one page of the store, then the window while it holds what the
/// follower is behind by; one from before what the window holds catches
/// up from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_from_the_head_follows_live_without_reading_the_store() {
    for kind in KINDS {
        let f = fixture(kind, 4096);
        // Every read asked of the store counted.
        let counting = cairn_runtime::store::conformance::Intercepted::new(f.store.clone());
        let journals = Journals::new(counting.clone(), 4096);
        let journal = f.session_in(&journals, "from-head").await;
        let mut head = Seq(0);
        for i in 0..3 {
            head = journal.append(None, text(i)).await.unwrap().seq;
        }
        let before = counting.reads();
        let mut sub = journal.subscribe(head);
        let writer = {
            let j = journal.clone();
            tokio::spawn(async move {
                for i in 0..100 {
                    j.append(None, text(100 + i)).await.unwrap();
                }
            })
        };
        let seen = seqs(&mut sub, 100, kind).await;
        writer.await.unwrap();
        let h = head.0;
        assert_eq!(seen, (h + 1..=h + 100).collect::<Vec<_>>(), "{kind:?}");
        assert_eq!(counting.reads(), before, "{kind:?}: the store was read");
        // From before the head, all of it in the live window: one page of
        // the store, then the window.
        let mut old = journal.subscribe(Seq(0));
        let seen = seqs(&mut old, (h + 100) as usize, kind).await;
        assert_eq!(seen, (1..=h + 100).collect::<Vec<_>>(), "{kind:?}");
        assert_eq!(
            counting.reads(),
            before + 1,
            "{kind:?}: the window held it all"
        );
        // From before what the window holds (the session opened by a new
        // registry, whose window holds nothing yet): from the store.
        let reopened = Journals::new(counting.clone(), 4096);
        let session = cairn_runtime::SessionId::parse("from-head").unwrap();
        let mut cold = reopened.open(&session).await.unwrap().subscribe(Seq(0));
        let seen = seqs(&mut cold, (h + 100) as usize, kind).await;
        assert_eq!(seen, (1..=h + 100).collect::<Vec<_>>(), "{kind:?}");
        assert!(counting.reads() > before + 1, "{kind:?}");
    }
}
