//! A commit the store refuses drops the entries minted past the durable
//! head, and their seqs are minted again: a subscriber told to start after
//! one of them must go back to the head, or it skips the entries that take
//! those seqs (a chat call following its run waited forever for the run's
//! end so).

use async_trait::async_trait;
use cairn_journal::{DEFAULT_LIVE_WINDOW, Delivery, Journals};
use cairn_store::{Head, JournalItem, JournalStore, MemoryStore, RunStore, StoreError};
use cairn_types::{AgentEvent, Payload, RunFacts, RunId, SegmentId, Seq, SessionEvent, SessionId};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A memory store whose next append fails once when told to, as a disk
/// that refuses a write does.
struct Refusing {
    inner: MemoryStore,
    refuse_next: AtomicBool,
}

#[async_trait]
impl JournalStore for Refusing {
    async fn create(&self, session: &SessionId, segment: SegmentId) -> Result<(), StoreError> {
        self.inner.create(session, segment).await
    }
    async fn head(&self, session: &SessionId) -> Result<Head, StoreError> {
        self.inner.head(session).await
    }
    async fn append(
        &self,
        session: &SessionId,
        expected: Seq,
        events: &[Arc<SessionEvent>],
    ) -> Result<(), StoreError> {
        if self.refuse_next.swap(false, Ordering::AcqRel) {
            return Err(StoreError::Io {
                context: format!("session {session}: the test's disk refused the write"),
                source: std::io::Error::other("refused"),
            });
        }
        self.inner.append(session, expected, events).await
    }
    async fn read(
        &self,
        session: &SessionId,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<JournalItem>, StoreError> {
        self.inner.read(session, after, limit).await
    }
    async fn read_bytes(
        &self,
        session: &SessionId,
        after: Seq,
        limit: usize,
        max_bytes: u64,
    ) -> Result<Vec<JournalItem>, StoreError> {
        self.inner
            .read_bytes(session, after, limit, max_bytes)
            .await
    }
    async fn start_segment(
        &self,
        session: &SessionId,
        segment: SegmentId,
        parent: SegmentId,
        first: &[Arc<SessionEvent>],
    ) -> Result<(), StoreError> {
        self.inner
            .start_segment(session, segment, parent, first)
            .await
    }
    async fn bytes(&self, session: &SessionId) -> Result<u64, StoreError> {
        self.inner.bytes(session).await
    }
    fn is_complete(&self) -> bool {
        self.inner.is_complete()
    }
}

#[async_trait]
impl RunStore for Refusing {
    async fn finish(
        &self,
        before: &[Arc<SessionEvent>],
        terminal: &Arc<SessionEvent>,
        after: &[Arc<SessionEvent>],
        facts: &RunFacts,
    ) -> Result<(), StoreError> {
        self.inner.finish(before, terminal, after, facts).await
    }
    async fn run_facts(
        &self,
        session: &SessionId,
        run: RunId,
    ) -> Result<Option<RunFacts>, StoreError> {
        self.inner.run_facts(session, run).await
    }
    async fn put_checkpoint(
        &self,
        session: &SessionId,
        run: RunId,
        bytes: &[u8],
    ) -> Result<String, StoreError> {
        self.inner.put_checkpoint(session, run, bytes).await
    }
    async fn checkpoint(&self, session: &SessionId, key: &str) -> Result<Vec<u8>, StoreError> {
        self.inner.checkpoint(session, key).await
    }
}

fn text(t: &str) -> Payload {
    Payload::Agent(AgentEvent::TextDelta {
        text: t.into(),
        by: None,
    })
}

fn text_of(e: &SessionEvent) -> Option<&str> {
    match &e.payload {
        Payload::Agent(AgentEvent::TextDelta { text, .. }) => Some(text),
        _ => None,
    }
}

#[tokio::test]
async fn a_subscriber_after_a_dropped_seq_gets_the_entry_that_takes_it() {
    let store = Arc::new(Refusing {
        inner: MemoryStore::new(1024),
        refuse_next: AtomicBool::new(false),
    });
    let journals = Journals::new(store.clone(), DEFAULT_LIVE_WINDOW);
    let session = SessionId::parse("refused").unwrap();
    let journal = journals.create(&session, SegmentId::new()).await.unwrap();
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
    store.refuse_next.store(true, Ordering::Release);
    let refused = journal.commit().await.unwrap_err();
    assert!(refused.to_string().contains("refused"), "{refused}");
    let again = journal.append(None, text("takes seq 3")).await.unwrap();
    assert_eq!(again.seq, Seq(3));
    let next = tokio::time::timeout(Duration::from_secs(5), follower.next())
        .await
        .expect("the follower is given the entry that took the dropped seq, not left waiting");
    match next {
        Some(Ok(Delivery::Event(e))) => {
            assert_eq!(e.seq, Seq(3));
            assert_eq!(text_of(&e), Some("takes seq 3"));
        }
        other => panic!("expected seq 3, got {other:?}"),
    }
    // Nothing it was given is given twice, and it goes on from there.
    let later = journal.append(None, text("after")).await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), follower.next())
        .await
        .unwrap();
    match next {
        Some(Ok(Delivery::Event(e))) => assert_eq!(e.seq, later.seq),
        other => panic!("expected seq {}, got {other:?}", later.seq.0),
    }
}

/// A follower that had already been given entries before the drop is not
/// given them again: it rewinds only to the durable head.
#[tokio::test]
async fn a_follower_at_the_head_is_given_nothing_twice_after_a_drop() {
    let store = Arc::new(Refusing {
        inner: MemoryStore::new(1024),
        refuse_next: AtomicBool::new(false),
    });
    let journals = Journals::new(store.clone(), DEFAULT_LIVE_WINDOW);
    let session = SessionId::parse("refused-head").unwrap();
    let journal = journals.create(&session, SegmentId::new()).await.unwrap();
    let mut follower = journal.subscribe(Seq(0));
    journal.append(None, text("one")).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        match tokio::time::timeout(Duration::from_secs(5), follower.next())
            .await
            .unwrap()
        {
            Some(Ok(Delivery::Event(e))) => seen.push(e.seq),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(seen, [Seq(1), Seq(2)]);
    journal.append_seq(None, text("dropped")).await.unwrap();
    store.refuse_next.store(true, Ordering::Release);
    journal.commit().await.unwrap_err();
    journal.append(None, text("three")).await.unwrap();
    match tokio::time::timeout(Duration::from_secs(5), follower.next())
        .await
        .unwrap()
    {
        Some(Ok(Delivery::Event(e))) => {
            assert_eq!(e.seq, Seq(3));
            assert_eq!(text_of(&e), Some("three"));
        }
        other => panic!("{other:?}"),
    }
}
