//! A store that passes every call through to another and lets a test see
//! or refuse some on the way: count the reads a subscriber makes, refuse
//! an append or a run's end as a full disk would, hold a run's end or an
//! append in flight.

use crate::{Head, JournalItem, JournalStore, RunStore, Store, StoreError};
use cairn_types::event::{RunFacts, SessionEvent};
use cairn_types::ids::{RunId, SegmentId, Seq, SessionId};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// `inner`, with its reads counted and its next append or run's end
/// refused or held on demand.
pub struct Intercepted {
    inner: Arc<dyn Store>,
    reads: AtomicUsize,
    appends: AtomicUsize,
    refuse_next_append: AtomicBool,
    refuse_next_finish: AtomicBool,
    hold_next_finish: Hold,
    hold_next_append: Hold,
}

/// A call to hold in flight, once asked for.
type Hold = std::sync::Mutex<Option<Held>>;

/// A store call held in flight ([`Intercepted::hold_next_finish`],
/// [`Intercepted::hold_next_append`]): it tells the test it got there,
/// and waits to be let go on.
struct Held {
    reached: tokio::sync::oneshot::Sender<()>,
    go: tokio::sync::oneshot::Receiver<()>,
}

impl Held {
    /// Hold here when `hold` asks to.
    async fn here(hold: &Hold) {
        let held = hold.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(held) = held {
            let _ = held.reached.send(());
            let _ = held.go.await;
        }
    }

    /// Ask `hold` to hold the next call; the test's side of it.
    fn ask(hold: &Hold) -> Gate {
        let (reached_tx, reached) = tokio::sync::oneshot::channel();
        let (go, go_rx) = tokio::sync::oneshot::channel();
        *hold.lock().unwrap_or_else(|p| p.into_inner()) = Some(Held {
            reached: reached_tx,
            go: go_rx,
        });
        Gate { reached, go }
    }
}

/// The test's side of a held store call.
pub struct Gate {
    /// Resolves once the call reached the store (and waits there).
    pub reached: tokio::sync::oneshot::Receiver<()>,
    /// Send (or drop) to let it go on.
    pub go: tokio::sync::oneshot::Sender<()>,
}

impl Intercepted {
    /// Pass everything to `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Intercepted {
            inner,
            reads: AtomicUsize::new(0),
            appends: AtomicUsize::new(0),
            refuse_next_append: AtomicBool::new(false),
            refuse_next_finish: AtomicBool::new(false),
            hold_next_finish: Hold::default(),
            hold_next_append: Hold::default(),
        })
    }

    /// Journal reads asked of it so far (`read` and `read_bytes`).
    pub fn reads(&self) -> usize {
        self.reads.load(Ordering::SeqCst)
    }

    /// Appends asked of it so far (refused ones too).
    pub fn appends(&self) -> usize {
        self.appends.load(Ordering::SeqCst)
    }

    /// Refuse the next append (an `Io` error naming a refused write), as
    /// a disk that refuses one write does; later ones pass.
    pub fn refuse_next_append(&self) {
        self.refuse_next_append.store(true, Ordering::SeqCst);
    }

    /// Refuse the next run's end as [`Self::refuse_next_append`] does.
    pub fn refuse_next_finish(&self) {
        self.refuse_next_finish.store(true, Ordering::SeqCst);
    }

    /// Hold the next run's end once it reaches the store, until the test
    /// lets it go (then it is written, or refused if so asked).
    pub fn hold_next_finish(&self) -> Gate {
        Held::ask(&self.hold_next_finish)
    }

    /// Hold the next append once the store has written it, before it
    /// answers, until the test lets it go: a store whose write goes on
    /// without its caller (the file store's, on a thread of its own).
    pub fn hold_next_append(&self) -> Gate {
        Held::ask(&self.hold_next_append)
    }
}

/// The error of a write a test refused.
fn refused(session: &SessionId) -> StoreError {
    StoreError::Io {
        context: format!("session {session}: the disk refused the write (a test's fault)"),
        source: std::io::Error::other("refused"),
    }
}

#[async_trait::async_trait]
impl JournalStore for Intercepted {
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
        self.appends.fetch_add(1, Ordering::SeqCst);
        if self.refuse_next_append.swap(false, Ordering::SeqCst) {
            return Err(refused(session));
        }
        let written = self.inner.append(session, expected, events).await;
        Held::here(&self.hold_next_append).await;
        written
    }

    async fn read(
        &self,
        session: &SessionId,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<JournalItem>, StoreError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.read(session, after, limit).await
    }

    async fn read_bytes(
        &self,
        session: &SessionId,
        after: Seq,
        limit: usize,
        max_bytes: u64,
    ) -> Result<Vec<JournalItem>, StoreError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
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

    fn location(&self, session: &SessionId) -> Option<String> {
        self.inner.location(session)
    }
}

#[async_trait::async_trait]
impl RunStore for Intercepted {
    async fn finish(
        &self,
        before: &[Arc<SessionEvent>],
        terminal: &Arc<SessionEvent>,
        after: &[Arc<SessionEvent>],
        facts: &RunFacts,
    ) -> Result<(), StoreError> {
        Held::here(&self.hold_next_finish).await;
        if self.refuse_next_finish.swap(false, Ordering::SeqCst) {
            return Err(refused(&terminal.session_id));
        }
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
