//! What the journal's tests over an intercepting store share.

use cairn_journal::{DEFAULT_LIVE_WINDOW, Delivery, Journals, SessionJournal, Subscription};
use cairn_store::MemoryStore;
use cairn_store::conformance::{Gate, Intercepted};
use cairn_types::{AgentEvent, LifecycleEvent, Payload, SegmentId, SessionId};
use std::sync::Arc;
use std::time::Duration;

/// A text delta.
#[allow(dead_code)]
pub fn text(t: &str) -> Payload {
    Payload::Agent(AgentEvent::TextDelta {
        text: t.into(),
        by: None,
    })
}

/// A new session's journal over a memory store that refuses or holds a
/// write on demand (the journal's registry kept alive beside it).
#[allow(dead_code)]
pub async fn journal(name: &str) -> (Arc<Intercepted>, Journals, Arc<SessionJournal>) {
    journal_with(name, 1024, DEFAULT_LIVE_WINDOW).await
}

/// [`journal`] over a store keeping the last `keep` entries, with a live
/// window of `window` entries.
#[allow(dead_code)]
pub async fn journal_with(
    name: &str,
    keep: usize,
    window: usize,
) -> (Arc<Intercepted>, Journals, Arc<SessionJournal>) {
    let store = Intercepted::new(Arc::new(MemoryStore::new(keep)));
    let journals = Journals::new(store.clone(), window);
    let session = SessionId::parse(name).unwrap();
    let journal = journals.create(&session, SegmentId::new()).await.unwrap();
    (store, journals, journal)
}

/// The next `n` deliveries' seqs (each must be an event, within 5 s).
#[allow(dead_code)]
pub async fn seqs(follower: &mut Subscription, n: usize) -> Vec<u64> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        match tokio::time::timeout(Duration::from_secs(5), follower.next()).await {
            Ok(Some(Ok(Delivery::Event(e)))) => out.push(e.seq.0),
            other => panic!(
                "after seq {:?}: expected an event, got {other:?}",
                out.last()
            ),
        }
    }
    out
}

/// The next `n` entries the follower is given: seq and a short name (a
/// delta's text, `segment`, `finished`).
#[allow(dead_code)]
pub async fn entries(follower: &mut Subscription, n: usize) -> Vec<(u64, String)> {
    let mut got = Vec::new();
    while got.len() < n {
        let next = tokio::time::timeout(Duration::from_secs(5), follower.next())
            .await
            .expect("the follower was left waiting");
        let Some(Ok(Delivery::Event(e))) = next else {
            panic!("expected an entry, got {next:?}");
        };
        let name = match &e.payload {
            Payload::Agent(AgentEvent::TextDelta { text, .. }) => text.clone(),
            Payload::Lifecycle(LifecycleEvent::Finished { .. }) => "finished".into(),
            Payload::Lifecycle(LifecycleEvent::SegmentCreated { .. }) => "segment".into(),
            other => format!("{other:?}"),
        };
        got.push((e.seq.0, name));
    }
    got
}

/// Drop `task` (a journal call) while its store call waits at `gate`, as
/// a server drops the handler of a client that left, then let the store
/// call go on.
#[allow(dead_code)]
pub async fn abandon<T: std::fmt::Debug>(gate: Gate, task: tokio::task::JoinHandle<T>) {
    gate.reached.await.expect("the call reached the store");
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    drop(gate.go);
}
