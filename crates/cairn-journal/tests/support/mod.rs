//! What the journal's tests over an intercepting store share.

use cairn_journal::{DEFAULT_LIVE_WINDOW, Journals, SessionJournal};
use cairn_store::MemoryStore;
use cairn_store::conformance::Intercepted;
use cairn_types::{AgentEvent, Payload, SegmentId, SessionId};
use std::sync::Arc;

/// A text delta.
pub fn text(t: &str) -> Payload {
    Payload::Agent(AgentEvent::TextDelta {
        text: t.into(),
        by: None,
    })
}

/// A new session's journal over a memory store that refuses or holds a
/// write on demand (the journal's registry kept alive beside it).
pub async fn journal(name: &str) -> (Arc<Intercepted>, Journals, Arc<SessionJournal>) {
    let store = Intercepted::new(Arc::new(MemoryStore::new(1024)));
    let journals = Journals::new(store.clone(), DEFAULT_LIVE_WINDOW);
    let session = SessionId::parse(name).unwrap();
    let journal = journals.create(&session, SegmentId::new()).await.unwrap();
    (store, journals, journal)
}
