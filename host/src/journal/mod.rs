//! The session journal: one ordered stream per session.
//!
//! Every append of a session goes through one serialized path — lock → mint
//! seq → store → broadcast — so `seq` is dense and the store sees one writer.
//! A [`Subscription`] joins the live broadcast first, reads the store up to
//! what it has seen live, and dedupes by seq; one that falls behind gets one
//! [`Delivery::Gap`] and goes on. The writer never waits for an observer.

pub mod event;
mod live;
pub mod schema;

use crate::fsutil::now_ms;
use crate::ids::{Generation, RunId, SegmentId, Seq, SessionId};
use crate::store::{JournalItem, Store, StoreError};
use event::{LifecycleEvent, Payload, RunFacts, SessionEvent};
use live::{Live, Read};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

static APPENDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Entries appended by this process, across sessions.
pub fn appended_total() -> u64 {
    APPENDED.load(std::sync::atomic::Ordering::Relaxed)
}

/// The default number of live events buffered per session for subscribers.
pub const DEFAULT_LIVE_WINDOW: usize = 4096;
/// The bytes (as journaled) a session's live window holds at most, beside
/// its entry count: a few huge entries cannot pin gigabytes of memory. The
/// newest entry is always held.
pub const DEFAULT_LIVE_WINDOW_BYTES: u64 = 8 << 20;
/// How many entries a subscriber reads from the store at once.
const READ_BATCH: usize = 1024;

/// What a subscriber receives.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    /// The next event.
    Event(Arc<SessionEvent>),
    /// An entry this cairn cannot interpret, in its place in the order.
    Unknown {
        /// Its seq.
        seq: Seq,
        /// The stored line.
        raw: String,
    },
    /// Events were missed; `resumed_at` is the first the subscriber will see.
    Gap {
        /// The next seq delivered.
        resumed_at: Seq,
    },
}

/// The journals of every open session.
pub struct Journals {
    store: Arc<dyn Store>,
    live_window: usize,
    live_window_bytes: u64,
    open: Mutex<HashMap<SessionId, Arc<SessionJournal>>>,
}

impl Journals {
    /// Journals over `store`, buffering `live_window` events per session.
    pub fn new(store: Arc<dyn Store>, live_window: usize) -> Self {
        Journals {
            store,
            live_window: live_window.max(1),
            live_window_bytes: DEFAULT_LIVE_WINDOW_BYTES,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// Bound each session's live window to `bytes` as well.
    pub fn with_window_bytes(mut self, bytes: u64) -> Self {
        self.live_window_bytes = bytes.max(1);
        self
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
        self.store.create(session, segment).await?;
        let journal = self.open(session).await?;
        journal
            .append(
                None,
                Payload::Lifecycle(LifecycleEvent::SegmentCreated {
                    segment_id: segment,
                    compacted_from: None,
                    forked_from: None,
                }),
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
            let live =
                Live::new(self.live_window, head.last_seq).with_max_bytes(self.live_window_bytes);
            Arc::new(SessionJournal {
                session: session.clone(),
                store: self.store.clone(),
                state: tokio::sync::Mutex::new(AppendState {
                    last_seq: head.last_seq,
                    segment: head.active_segment,
                    last_generation: head.last_generation,
                }),
                live,
            })
        });
        Ok(journal.clone())
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
        let idle = open
            .get(session)
            .is_some_and(|j| Arc::strong_count(j) == 1 && j.subscriber_count() == 0);
        if idle {
            open.remove(session);
        }
        idle
    }

    /// How many sessions' journals are open in memory.
    pub fn open_count(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Drop the in-memory handle of a session (its subscribers end).
    pub fn close(&self, session: &SessionId) {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session);
    }
}

struct AppendState {
    last_seq: Seq,
    segment: SegmentId,
    last_generation: Generation,
}

/// One session's journal: the serialized writer and the live broadcast.
pub struct SessionJournal {
    session: SessionId,
    store: Arc<dyn Store>,
    state: tokio::sync::Mutex<AppendState>,
    live: Arc<Live>,
}

impl Drop for SessionJournal {
    fn drop(&mut self) {
        self.live.close();
    }
}

impl std::fmt::Debug for SessionJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionJournal")
            .field("session", &self.session)
            .finish()
    }
}

impl SessionJournal {
    /// The session.
    pub fn session(&self) -> &SessionId {
        &self.session
    }

    /// Append one entry; returns it, with its seq, once it is durable.
    pub async fn append(
        &self,
        run_id: Option<RunId>,
        payload: Payload,
    ) -> Result<SessionEvent, StoreError> {
        let mut events = self.append_batch(run_id, vec![payload]).await?;
        Ok(events.pop().expect("one event in, one out"))
    }

    /// Append a batch whose entries are built from the first one's seq (for
    /// ids derived from it). `build` runs under the append lock, before the
    /// store write, so nothing built there is observable before it is durable.
    pub async fn append_with(
        &self,
        run_id: Option<RunId>,
        build: impl FnOnce(Seq) -> Vec<Payload>,
    ) -> Result<Vec<SessionEvent>, StoreError> {
        let mut state = self.state.lock().await;
        let first = state.last_seq.next();
        let events = self.write_locked(&mut state, run_id, build(first)).await?;
        Ok(owned(events))
    }

    async fn write_locked(
        &self,
        state: &mut AppendState,
        run_id: Option<RunId>,
        payloads: Vec<Payload>,
    ) -> Result<Vec<Arc<SessionEvent>>, StoreError> {
        let at_ms = now_ms();
        let mut seq = state.last_seq;
        let events: Vec<Arc<SessionEvent>> = payloads
            .into_iter()
            .map(|payload| {
                seq = seq.next();
                Arc::new(SessionEvent {
                    session_id: self.session.clone(),
                    segment_id: state.segment,
                    run_id,
                    seq,
                    at_ms,
                    payload,
                    facts: None,
                })
            })
            .collect();
        self.publish_locked(state, &events).await?;
        Ok(events)
    }

    /// Store, then broadcast: the store and every subscriber share each
    /// entry (one allocation an entry, no copies).
    async fn publish_locked(
        &self,
        state: &mut AppendState,
        events: &[Arc<SessionEvent>],
    ) -> Result<(), StoreError> {
        let Some(last) = events.last() else {
            return Ok(());
        };
        self.store
            .append(&self.session, state.last_seq.next(), events)
            .await?;
        self.published(state, events, last.seq);
        Ok(())
    }

    /// After the store took `events` (through `last`): count, advance, and
    /// hand them to the live tail.
    fn published(&self, state: &mut AppendState, events: &[Arc<SessionEvent>], last: Seq) {
        APPENDED.fetch_add(events.len() as u64, std::sync::atomic::Ordering::Relaxed);
        state.last_seq = last;
        for g in events
            .iter()
            .filter_map(|e| crate::store::reserved_generation(e))
        {
            state.last_generation = state.last_generation.max(g);
        }
        self.live.publish(events);
    }

    /// Append one entry and return only its seq, once it is durable: the
    /// emit path, which needs nothing else back.
    pub async fn append_seq(
        &self,
        run_id: Option<RunId>,
        payload: Payload,
    ) -> Result<Seq, StoreError> {
        let mut state = self.state.lock().await;
        let events = self.write_locked(&mut state, run_id, vec![payload]).await?;
        Ok(events[0].seq)
    }

    /// Append several entries of one run (or none) as one batch: one store
    /// write, one sync.
    pub async fn append_batch(
        &self,
        run_id: Option<RunId>,
        payloads: Vec<Payload>,
    ) -> Result<Vec<SessionEvent>, StoreError> {
        let mut state = self.state.lock().await;
        let events = self.write_locked(&mut state, run_id, payloads).await?;
        Ok(owned(events))
    }

    /// Start a new segment after the active one (compaction or branch):
    /// its first entries — `SegmentCreated { lineage }` and, for a
    /// compaction, its summary — go to the store with the switch, so a
    /// crash leaves either the old segment active or the new one complete.
    /// Returns them.
    pub async fn start_segment(
        &self,
        compacted: Option<(String, Seq)>,
        branched_at: Option<Seq>,
    ) -> Result<Vec<SessionEvent>, StoreError> {
        let mut state = self.state.lock().await;
        let parent = state.segment;
        let segment = SegmentId::new();
        let mut entries = vec![Payload::Lifecycle(LifecycleEvent::SegmentCreated {
            segment_id: segment,
            compacted_from: compacted
                .as_ref()
                .map(|(_, through)| event::SegmentLineage {
                    segment: parent,
                    through_seq: *through,
                }),
            forked_from: branched_at.map(|at| event::SegmentLineage {
                segment: parent,
                through_seq: at,
            }),
        })];
        if let Some((text, through_seq)) = compacted {
            entries.push(Payload::Lifecycle(LifecycleEvent::CompactionSummary {
                text,
                through_seq,
            }));
        }
        let at_ms = now_ms();
        let mut seq = state.last_seq;
        let events: Vec<Arc<SessionEvent>> = entries
            .into_iter()
            .map(|payload| {
                seq = seq.next();
                Arc::new(SessionEvent {
                    session_id: self.session.clone(),
                    segment_id: segment,
                    run_id: None,
                    seq,
                    at_ms,
                    payload,
                    facts: None,
                })
            })
            .collect();
        self.store
            .start_segment(&self.session, segment, parent, &events)
            .await?;
        state.segment = segment;
        self.published(&mut state, &events, seq);
        Ok(owned(events))
    }

    /// The last generation the journal names as reserved (0: none).
    pub async fn last_generation(&self) -> Generation {
        self.state.lock().await.last_generation
    }

    /// Append prebuilt entries (an import, such as a fork's copied
    /// history): `build` gets the first seq and the active segment and must
    /// return entries numbered densely from it.
    pub async fn import(
        &self,
        build: impl FnOnce(Seq, SegmentId) -> Vec<SessionEvent>,
    ) -> Result<Vec<SessionEvent>, StoreError> {
        let mut state = self.state.lock().await;
        let first = state.last_seq.next();
        let events = build(first, state.segment);
        let shared: Vec<Arc<SessionEvent>> = events.iter().cloned().map(Arc::new).collect();
        self.publish_locked(&mut state, &shared).await?;
        Ok(events)
    }

    /// The active segment.
    pub async fn active_segment(&self) -> SegmentId {
        self.state.lock().await.segment
    }

    /// The terminal write of a run: `payload` and the facts `facts(seq)`
    /// builds for it go to the store in one call.
    pub async fn finish(
        &self,
        run_id: RunId,
        payload: LifecycleEvent,
        facts: impl FnOnce(Seq, u64) -> RunFacts,
    ) -> Result<SessionEvent, StoreError> {
        self.finish_then(run_id, payload, facts, || {}).await
    }

    /// [`SessionJournal::finish`], calling `stored` once the terminal entry
    /// is durable and before anyone can see it (so whoever sees the end of
    /// a run finds the run already let go of).
    pub async fn finish_then(
        &self,
        run_id: RunId,
        payload: LifecycleEvent,
        facts: impl FnOnce(Seq, u64) -> RunFacts,
        stored: impl FnOnce(),
    ) -> Result<SessionEvent, StoreError> {
        debug_assert!(payload.is_terminal());
        let mut state = self.state.lock().await;
        let seq = state.last_seq.next();
        let at_ms = now_ms();
        let facts = facts(seq, at_ms);
        crate::fsutil::crash_point("before-terminal");
        let event = Arc::new(SessionEvent {
            session_id: self.session.clone(),
            segment_id: state.segment,
            run_id: Some(run_id),
            seq,
            at_ms,
            payload: Payload::Lifecycle(payload),
            facts: Some(facts.clone()),
        });
        self.store.finish(&event, &facts).await?;
        stored();
        self.published(&mut state, std::slice::from_ref(&event), seq);
        Ok(SessionEvent::clone(&event))
    }

    /// The last appended seq.
    pub async fn last_seq(&self) -> Seq {
        self.state.lock().await.last_seq
    }

    /// Follow the session from after `after` (0: from the start).
    pub fn subscribe(&self, after: Seq) -> Subscription {
        // Join the live tail before reading anything from the store.
        self.live.join();
        let live_seen = self.live.last_seq();
        Subscription {
            session: self.session.clone(),
            store: self.store.clone(),
            live: self.live.clone(),
            live_seen,
            live_buf: VecDeque::new(),
            cursor: after,
            backlog: VecDeque::new(),
            catching_up: true,
            lagged: false,
            stash: None,
        }
    }

    /// Bytes (as journaled) the live window holds now.
    pub fn window_bytes(&self) -> u64 {
        self.live.bytes()
    }

    /// How many subscribers follow this session now.
    pub fn subscriber_count(&self) -> usize {
        self.live.receivers()
    }
}

fn owned(events: Vec<Arc<SessionEvent>>) -> Vec<SessionEvent> {
    events
        .into_iter()
        .map(|e| Arc::try_unwrap(e).unwrap_or_else(|e| SessionEvent::clone(&e)))
        .collect()
}

/// The length of a value's JSON (an entry's journal line without its
/// newline, a payload), counted without building it; `u64::MAX` when it does
/// not serialize.
pub fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> u64 {
    let mut counter = ByteCounter(0);
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.0,
        Err(_) => u64::MAX,
    }
}

/// How deep a JSON value that enters the host may nest (a guest's emit, a
/// decision's value and details, an HTTP body). A journal line wraps a
/// value in a few levels of its own, and every reader parses with a
/// recursion limit of 128: bounded here, every line written stays readable.
pub const MAX_JSON_DEPTH: usize = 64;

/// The nesting depth of a value (a scalar is 0, `[]` is 1, `[[1]]` is 2).
pub fn json_depth(value: &serde_json::Value) -> usize {
    // Iterative, so no value can exhaust the stack measuring it.
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        match v {
            serde_json::Value::Array(items) => {
                deepest = deepest.max(depth + 1);
                stack.extend(items.iter().map(|i| (i, depth + 1)));
            }
            serde_json::Value::Object(map) => {
                deepest = deepest.max(depth + 1);
                stack.extend(map.values().map(|i| (i, depth + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// Refuse a value nested deeper than [`MAX_JSON_DEPTH`], naming `what`.
pub fn check_json_depth(what: &str, value: &serde_json::Value) -> Result<(), String> {
    match json_depth(value) {
        d if d > MAX_JSON_DEPTH => Err(format!(
            "{what} nests {d} levels deep; at most {MAX_JSON_DEPTH} are accepted"
        )),
        _ => Ok(()),
    }
}

struct ByteCounter(u64);

impl std::io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A subscriber's view of one session. Call [`Subscription::next`].
pub struct Subscription {
    session: SessionId,
    store: Arc<dyn Store>,
    live: Arc<Live>,
    /// The last seq taken from the live tail.
    live_seen: Seq,
    live_buf: VecDeque<Arc<SessionEvent>>,
    cursor: Seq,
    backlog: VecDeque<JournalItem>,
    catching_up: bool,
    lagged: bool,
    stash: Option<Arc<SessionEvent>>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("session", &self.session)
            .field("cursor", &self.cursor)
            .finish()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.live.leave();
    }
}

impl Subscription {
    /// The last seq delivered.
    pub fn cursor(&self) -> Seq {
        self.cursor
    }

    /// The next delivery; `None` when the journal is closed. A store error
    /// while catching up is returned as `Err`.
    pub async fn next(&mut self) -> Option<Result<Delivery, StoreError>> {
        loop {
            if let Some(item) = self.backlog.pop_front() {
                if item.seq() <= self.cursor {
                    continue;
                }
                self.cursor = item.seq();
                return Some(Ok(match item {
                    JournalItem::Event(e) => Delivery::Event(Arc::from(e)),
                    JournalItem::Unknown { seq, raw } => Delivery::Unknown { seq, raw },
                }));
            }
            if self.catching_up {
                match self
                    .store
                    .read(&self.session, self.cursor, READ_BATCH)
                    .await
                {
                    Ok(items) => {
                        // Only what the writer has published: an entry is
                        // in the store a moment before the writer has
                        // finished with it (a run's terminal entry before
                        // the run is marked ended), and a subscriber must
                        // not act on it before the runtime can. The rest
                        // comes through the live window.
                        let published = self.live.last_seq();
                        let mut items = items;
                        items.retain(|i| i.seq() <= published);
                        if items.is_empty() {
                            self.catching_up = false;
                        } else {
                            self.backlog.extend(items);
                        }
                    }
                    Err(StoreError::Truncated { oldest }) => {
                        self.cursor = Seq(oldest.0 - 1);
                        return Some(Ok(Delivery::Gap { resumed_at: oldest }));
                    }
                    Err(e) => return Some(Err(e)),
                }
                continue;
            }
            let event = match self.stash.take() {
                Some(e) => e,
                None => match self.live_buf.pop_front() {
                    Some(e) => e,
                    None => {
                        match self.live.read_after(self.live_seen) {
                            Read::Entries(entries) => {
                                if let Some(last) = entries.last() {
                                    self.live_seen = last.seq;
                                }
                                self.live_buf.extend(entries);
                            }
                            Read::Lagged { oldest } => {
                                self.lagged = true;
                                self.live_seen = Seq(oldest.0 - 1);
                            }
                            Read::Empty => self.live.changed(self.live_seen).await,
                            Read::Closed => return None,
                        }
                        continue;
                    }
                },
            };
            if event.seq <= self.cursor {
                continue;
            }
            if self.lagged {
                self.lagged = false;
                self.cursor = Seq(event.seq.0 - 1);
                let resumed_at = event.seq;
                self.stash = Some(event);
                return Some(Ok(Delivery::Gap { resumed_at }));
            }
            if event.seq != self.cursor.next() {
                // Something between the store read and the live stream: read it.
                self.catching_up = true;
                self.stash = Some(event);
                continue;
            }
            self.cursor = event.seq;
            return Some(Ok(Delivery::Event(event)));
        }
    }
}
