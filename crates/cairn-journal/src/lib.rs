//! cairn's journal writer.
//!
//! The session journal: one ordered stream per session.
//!
//! Every append of a session goes through one serialized path — mint seq
//! under one lock → store (emits in group commits: see [`SessionJournal`]'s
//! module) → broadcast — so `seq` is dense, the store sees one writer, and
//! nobody sees an entry before it is durable.
//! A [`Subscription`] joins the live broadcast first, reads the store up to
//! what the live window holds (a page of it at least, then the window from
//! its next entry on), and dedupes by seq; one that falls behind gets one
//! [`Delivery::Gap`] and goes on. The writer never waits for an observer.
//!
//! ```
//! use cairn_journal::{DEFAULT_LIVE_WINDOW, Delivery, Journals};
//! use cairn_store::MemoryStore;
//! use cairn_types::{AgentEvent, Payload, SegmentId, Seq, SessionId};
//! use std::sync::Arc;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! tokio.block_on(async {
//!     let journals = Journals::new(Arc::new(MemoryStore::new(1024)), DEFAULT_LIVE_WINDOW);
//!     let session = SessionId::parse("demo")?;
//!     let journal = journals.create(&session, SegmentId::new()).await?;
//!     let mut follower = journal.subscribe(Seq(0));
//!     let text = AgentEvent::TextDelta { text: "hello".into(), by: None };
//!     // Returned once durable, with its seq (1 is the segment's creation).
//!     let entry = journal.append(None, Payload::Agent(text)).await?;
//!     assert_eq!(entry.seq, Seq(2));
//!     for seq in [Seq(1), Seq(2)] {
//!         match follower.next().await {
//!             Some(Ok(Delivery::Event(e))) => assert_eq!(e.seq, seq),
//!             other => panic!("expected seq {}, got {other:?}", seq.0),
//!         }
//!     }
//!     Ok::<(), Box<dyn std::error::Error>>(())
//! })
//! # }
//! ```

#![deny(missing_docs)]

mod away;
mod commit;
mod detach;
pub use cairn_types::event;
mod live;
pub use cairn_types::schema;
mod session;
mod subscription;

pub use cairn_types::json::{MAX_JSON_DEPTH, check_json_depth, json_depth, json_len, json_within};
pub use live::READ_MAX;
pub use session::{BATCH, COMMIT_DELAY, DEFER_DELAY, Emitter, MAX_PENDING, Minted, SessionJournal};
pub use subscription::{Delivery, Subscription};

use cairn_store::{Store, StoreError};
use cairn_types::ids::{SegmentId, SessionId};
use event::{LifecycleEvent, Payload};
use live::{Live, Windows};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The default number of live events buffered per session for subscribers.
pub const DEFAULT_LIVE_WINDOW: usize = 16384;
pub use cairn_types::limits::{DEFAULT_LIVE_TOTAL_BYTES, DEFAULT_LIVE_WINDOW_BYTES};

/// Told of every batch made durable: how long its store append took and
/// how many entries it held (a runtime's metrics).
pub type CommitObserver = Arc<dyn Fn(std::time::Duration, usize) + Send + Sync>;

/// The journals of every open session.
pub struct Journals {
    store: Arc<dyn Store>,
    observer: Option<CommitObserver>,
    live_window: usize,
    live_window_bytes: u64,
    windows: Arc<Windows>,
    open: Mutex<HashMap<SessionId, Arc<SessionJournal>>>,
}

impl Journals {
    /// Journals over `store`, buffering `live_window` events per session.
    pub fn new(store: Arc<dyn Store>, live_window: usize) -> Self {
        Journals {
            store,
            observer: None,
            live_window: live_window.max(1),
            live_window_bytes: DEFAULT_LIVE_WINDOW_BYTES,
            windows: Windows::new(DEFAULT_LIVE_TOTAL_BYTES),
            open: Mutex::new(HashMap::new()),
        }
    }

    /// Tell `observer` of every batch made durable.
    pub fn with_commit_observer(mut self, observer: CommitObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Bound each session's live window to `bytes` as well.
    pub fn with_window_bytes(mut self, bytes: u64) -> Self {
        self.live_window_bytes = bytes.max(1);
        self
    }

    /// Bound every window together to `bytes` (host-wide).
    pub fn with_total_bytes(mut self, bytes: u64) -> Self {
        self.windows = Windows::new(bytes);
        self
    }

    /// Bytes (as journaled) every open session's live window holds now.
    pub fn window_total(&self) -> u64 {
        self.windows.total()
    }

    /// Windows emptied to stay under the host-wide cap, since start.
    pub fn windows_evicted(&self) -> u64 {
        self.windows.evicted()
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Create a session's journal: its first entry is `SegmentCreated`.
    pub async fn create(
        &self,
        session: &SessionId,
        segment: SegmentId,
    ) -> Result<Arc<SessionJournal>, StoreError> {
        let journal = self.create_pending(session, segment).await?;
        journal.commit().await?;
        Ok(journal)
    }

    /// [`Journals::create`] whose first entry is pending: committed with
    /// the session's next write, or within the defer delay.
    pub async fn create_pending(
        &self,
        session: &SessionId,
        segment: SegmentId,
    ) -> Result<Arc<SessionJournal>, StoreError> {
        self.store.create(session, segment).await?;
        let journal = self.open(session).await?;
        journal
            .defer(
                None,
                vec![Payload::Lifecycle(LifecycleEvent::SegmentCreated {
                    segment_id: segment,
                    compacted_from: None,
                    forked_from: None,
                })],
            )
            .await?;
        Ok(journal)
    }

    /// Open an existing session's journal (shared by every caller).
    pub async fn open(&self, session: &SessionId) -> Result<Arc<SessionJournal>, StoreError> {
        if let Some(j) = self
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
        {
            return Ok(j.clone());
        }
        let head = self.store.head(session).await?;
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let journal = open.entry(session.clone()).or_insert_with(|| {
            let live = Live::new(self.live_window, head.last_seq)
                .with_max_bytes(self.live_window_bytes, Some(&self.windows));
            Arc::new(SessionJournal::new(
                session.clone(),
                self.store.clone(),
                head,
                live,
                self.observer.clone(),
            ))
        });
        Ok(journal.clone())
    }

    /// The session's journal, when it is open in this process (never
    /// opened for the asking).
    pub fn opened(&self, session: &SessionId) -> Option<Arc<SessionJournal>> {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
            .cloned()
    }

    /// Subscribers of every open session.
    pub fn subscriber_total(&self) -> usize {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.values().map(|j| j.subscriber_count()).sum()
    }

    /// Drop the in-memory handle of a session that nobody uses (no run,
    /// no subscriber holds it), freeing its live window; the next use opens
    /// it again from the store. Returns whether it was dropped.
    pub fn close_if_idle(&self, session: &SessionId) -> bool {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let idle = open.get(session).is_some_and(|j| {
            Arc::strong_count(j) == 1 && j.subscriber_count() == 0 && !j.has_pending()
        });
        if idle {
            open.remove(session);
        }
        idle
    }

    /// How many sessions' journals are open in memory.
    pub fn open_count(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Make every open journal's pending entries durable (a clean stop).
    /// `false` when one could not be.
    pub async fn commit_all(&self) -> bool {
        let open: Vec<Arc<SessionJournal>> = self
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        let mut all = true;
        for j in open {
            all &= j.commit().await.is_ok();
        }
        all
    }

    /// Drop the in-memory handle of a session (its subscribers end).
    pub fn close(&self, session: &SessionId) {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session);
    }
}
