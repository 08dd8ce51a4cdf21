//! cairn's store traits: where journals, run facts, the catalog, the run
//! index, leases and blobs are kept. The runtime holds stores as
//! `Arc<dyn …>`; [`memory`] (here), cairn-store-file (the embedded default)
//! and cairn-store-postgres (a [`SharedStore`] of several instances)
//! implement them, and one conformance suite (`conformance`, behind the
//! `testing` feature) runs against every implementation of every trait.
//! The journal's line format ([`parse_line`]) and the documents every
//! store keeps of a worker ([`records`]) are here too: every store reads
//! and writes them the same way.
//!
//! A store in twenty lines — the memory one, appended to and read back:
//!
//! ```
//! use cairn_store::{JournalStore, memory::MemoryStore};
//! use cairn_types::ids::{SegmentId, Seq, SessionId};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), cairn_store::StoreError> {
//! let store = MemoryStore::new(16);
//! let session = SessionId::parse("demo").expect("a valid id");
//! store.create(&session, SegmentId::new()).await?;
//! assert_eq!(store.head(&session).await?.last_seq, Seq(0));
//! assert!(store.read(&session, Seq(0), 10).await?.is_empty());
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

pub mod blob;
pub mod catalog;
#[cfg(feature = "testing")]
pub mod conformance;
pub mod faults;
pub mod lease;
mod line;
pub mod memory;
pub mod records;
pub mod run_index;
pub mod shared;

pub use blob::BlobStore;
pub use catalog::Catalog;
pub use faults::now_ms;
pub use lease::{Lease, LeaseStore};
pub use line::parse_line;
pub use memory::MemoryStore;
pub use run_index::{IndexedRun, MemoryRunIndex, RunIndex};
pub use shared::{
    Instance, InstanceRegistry, Relay, RelayFollower, SharedStore, SharedStoreConnector,
};

use async_trait::async_trait;
use cairn_types::event::{RunFacts, SessionEvent};
use cairn_types::ids::{Generation, RunId, SegmentId, Seq, SessionId};
use std::path::PathBuf;
use std::sync::Arc;

/// One stored entry, as read back.
#[derive(Debug, Clone, PartialEq)]
pub enum JournalItem {
    /// A well-formed event.
    Event(Box<SessionEvent>),
    /// An entry this cairn cannot interpret (a newer kind, say): kept, never a crash.
    Unknown {
        /// Its seq.
        seq: Seq,
        /// The line as stored.
        raw: String,
    },
}

impl JournalItem {
    /// The entry's seq.
    pub fn seq(&self) -> Seq {
        match self {
            JournalItem::Event(e) => e.seq,
            JournalItem::Unknown { seq, .. } => *seq,
        }
    }

    /// The event, when it is one, taken out.
    pub fn into_event(self) -> Option<SessionEvent> {
        match self {
            JournalItem::Event(e) => Some(*e),
            JournalItem::Unknown { .. } => None,
        }
    }

    /// The event, when it is one.
    pub fn event(&self) -> Option<&SessionEvent> {
        match self {
            JournalItem::Event(e) => Some(&**e),
            JournalItem::Unknown { .. } => None,
        }
    }
}

/// Where a session's journal stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// The last stored seq (0 when empty).
    pub last_seq: Seq,
    /// The segment appends go to.
    pub active_segment: SegmentId,
    /// The last generation a `GenerationReserved` entry names (0: none):
    /// a new run reserves past it, whatever `worker.json` says.
    pub last_generation: Generation,
}

/// A store failure; every variant names what it concerns.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The session is not in this store.
    #[error("session {0} is not in this store")]
    UnknownSession(SessionId),
    /// The session exists already.
    #[error("session {0} exists already")]
    SessionExists(SessionId),
    /// The cursor is older than what the store still holds.
    #[error("events before seq {oldest} are no longer held")]
    Truncated {
        /// The oldest seq still held.
        oldest: Seq,
    },
    /// An append would break the dense sequence.
    #[error("session {session}: append of seq {got} out of order (expected {expected})")]
    OutOfOrder {
        /// The session.
        session: SessionId,
        /// The seq the store expected next.
        expected: Seq,
        /// The seq it got.
        got: Seq,
    },
    /// A fenced append found the journal's head elsewhere than the writer
    /// expected: another writer appended, so this one has lost authority
    /// over the session and must not write.
    #[error(
        "session {session}: the append expected to continue at seq {expected} but the journal's head is seq {head}; another writer holds this session"
    )]
    Conflict {
        /// The session.
        session: SessionId,
        /// The seq the writer expected to write next.
        expected: Seq,
        /// The seq the journal really ends at.
        head: Seq,
    },
    /// The store was opened to read only (a reader of a home another
    /// process owns).
    #[error("session {0}: this store is open read-only; only the home's owner writes")]
    ReadOnly(SessionId),
    /// A stored line is corrupt; the store fails closed.
    #[error("{path}:{line}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A checkpoint key that is not one this store issued.
    #[error("no checkpoint {0:?} in this store")]
    NoCheckpoint(String),
    /// An I/O failure, with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file layout of a store (a worker aggregate, a document) failed;
    /// the source names the file and what went wrong.
    #[error(transparent)]
    Layout(Box<dyn std::error::Error + Send + Sync>),
    /// This process no longer holds the home's lock (its file was removed
    /// or replaced): another owner may be writing, so it writes nothing.
    #[error(
        "session {session}: not written: this process lost the home's lock ({reason}); another owner may be writing"
    )]
    HomeLost {
        /// The session.
        session: SessionId,
        /// What happened to the lock file.
        reason: String,
    },
    /// Another instance holds the session's lease and it has not expired.
    #[error(
        "session {session} is held by instance {holder} (its lease expires in {expires_in_ms} ms)"
    )]
    LeaseHeld {
        /// The session.
        session: SessionId,
        /// The instance holding it.
        holder: String,
        /// How long until the lease expires unless renewed.
        expires_in_ms: u64,
    },
    /// A write or renewal carried a fencing token that is no longer the
    /// session's: the lease moved to another holder (or was never this
    /// writer's), so this writer has lost authority and must not write.
    #[error(
        "session {session}: lease token {token} is stale (the lease is now {now}); another instance holds this session"
    )]
    LeaseLost {
        /// The session.
        session: SessionId,
        /// The token the writer carried (0: it held none).
        token: u64,
        /// The lease as it stands, for people.
        now: String,
    },
    /// A database the store is built on failed, with what was being done.
    #[error("{context}: {message}")]
    Database {
        /// What was being done.
        context: String,
        /// The database's message.
        message: String,
    },
    /// The database the store is built on is unreachable for now (it is
    /// restarting, failing over, or the network to it is down) and stayed
    /// so through the store's outage budget: nothing was written; the same
    /// call can be made again once it is back.
    #[error("{context}: the store's database is unreachable ({message})")]
    Unavailable {
        /// What was being done.
        context: String,
        /// The database's or the connection's message.
        message: String,
    },
    /// The shared store's schema is not one this cairn can use.
    #[error("{0}")]
    Schema(String),
}

impl StoreError {
    /// Whether this refusal means another writer holds the session (a fence
    /// conflict or a stale lease token): the writer has lost authority and
    /// writes nothing more; retrying cannot help.
    pub fn is_lost_authority(&self) -> bool {
        matches!(
            self,
            StoreError::Conflict { .. }
                | StoreError::LeaseLost { .. }
                | StoreError::HomeLost { .. }
        )
    }
}

/// A session's events. Appends come from the journal's one serialized writer
/// per session, already sequenced.
#[async_trait]
pub trait JournalStore: Send + Sync + 'static {
    /// Make an empty journal for `session`, whose first segment is `segment`.
    async fn create(&self, session: &SessionId, segment: SegmentId) -> Result<(), StoreError>;

    /// Where the journal stands; `UnknownSession` when it does not exist.
    async fn head(&self, session: &SessionId) -> Result<Head, StoreError>;

    /// Append `events` (dense, the first numbered `expected`). Fenced: when
    /// the journal's head is not `expected - 1` — another writer moved it —
    /// nothing is written and the answer is `Conflict { expected, head }`.
    /// Durable when it returns `Ok`: the file store writes the batch once
    /// and syncs once.
    async fn append(
        &self,
        session: &SessionId,
        expected: Seq,
        events: &[Arc<SessionEvent>],
    ) -> Result<(), StoreError>;

    /// Entries with seq > `after`, oldest first, at most `limit`.
    /// `Truncated` when entries right after `after` are no longer held.
    async fn read(
        &self,
        session: &SessionId,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<JournalItem>, StoreError>;

    /// [`JournalStore::read`] bounded by bytes as well: the entries after `after`
    /// while their journal lines (with a newline each) together stay
    /// within `max_bytes` — the first is always returned — and at most
    /// `limit`. What answers one run, one task or a turn of history pages
    /// through a journal so, never holding all of it.
    async fn read_bytes(
        &self,
        session: &SessionId,
        after: Seq,
        limit: usize,
        max_bytes: u64,
    ) -> Result<Vec<JournalItem>, StoreError>;

    /// Make `segment` (a child of `parent`) the active segment, with `first`
    /// (its `SegmentCreated` entry and what goes with it, fenced like an
    /// append) as its first entries: appends go there from now on. The
    /// switch is atomic: a crash leaves the old segment active, or the new
    /// one active with every entry of `first`. Durable when it returns.
    async fn start_segment(
        &self,
        session: &SessionId,
        segment: SegmentId,
        parent: SegmentId,
        first: &[Arc<SessionEvent>],
    ) -> Result<(), StoreError>;

    /// Bytes the session's journal holds.
    async fn bytes(&self, session: &SessionId) -> Result<u64, StoreError>;

    /// Whether this store holds every event ever appended (replay, restore
    /// and history need that; a bounded memory window does not).
    fn is_complete(&self) -> bool;

    /// Where a person finds `session`'s journal (a file, a table), for
    /// messages; `None` when it is nowhere to look (memory).
    fn location(&self, _session: &SessionId) -> Option<String> {
        None
    }
}

/// Ended runs' facts and park checkpoints.
#[async_trait]
pub trait RunStore: Send + Sync + 'static {
    /// The terminal write, in one call: `before` (entries minted ahead of
    /// it — a run's last emits — dense and continuing the journal) and
    /// `terminal` (which carries `facts`) are appended and the facts
    /// recorded together, so no crash leaves one without the other; `after`
    /// (entries minted right behind it — a claimant that leaves with the
    /// run) goes in the same write. Fenced like an append; one write and
    /// one sync on the file store.
    async fn finish(
        &self,
        before: &[Arc<SessionEvent>],
        terminal: &Arc<SessionEvent>,
        after: &[Arc<SessionEvent>],
        facts: &RunFacts,
    ) -> Result<(), StoreError>;

    /// The facts of an ended run.
    async fn run_facts(
        &self,
        session: &SessionId,
        run: RunId,
    ) -> Result<Option<RunFacts>, StoreError>;

    /// Keep a park checkpoint, owner-only; returns its key (never a path).
    async fn put_checkpoint(
        &self,
        session: &SessionId,
        run: RunId,
        bytes: &[u8],
    ) -> Result<String, StoreError>;

    /// Read a checkpoint by key.
    async fn checkpoint(&self, session: &SessionId, key: &str) -> Result<Vec<u8>, StoreError>;
}

/// A store that is both.
pub trait Store: JournalStore + RunStore {}
impl<T: JournalStore + RunStore> Store for T {}

/// The fence every store applies before it writes: `events` must be dense
/// from `expected`, and `expected` must continue `head`.
pub fn check_fence(
    session: &SessionId,
    head: Seq,
    expected: Seq,
    events: &[Arc<SessionEvent>],
) -> Result<(), StoreError> {
    if expected != head.next() {
        return Err(StoreError::Conflict {
            session: session.clone(),
            expected,
            head,
        });
    }
    let mut next = expected;
    for event in events {
        if event.seq != next {
            return Err(StoreError::OutOfOrder {
                session: session.clone(),
                expected: next,
                got: event.seq,
            });
        }
        next = next.next();
    }
    Ok(())
}

/// Give entries read for `session` its id as the store keys it: a journal
/// line names its session by name (what exports show), so a scoped session's
/// entries are read with its workspace put back.
pub fn restamp(session: &SessionId, items: &mut [JournalItem]) {
    if !session.is_scoped() {
        return;
    }
    for item in items {
        if let JournalItem::Event(e) = item
            && e.session_id.same_name(session)
        {
            e.session_id = session.clone();
            if let Some(f) = e.facts.as_mut()
                && f.session_id.same_name(session)
            {
                f.session_id = session.clone();
            }
        }
    }
}

/// The generation an entry names (`GenerationReserved`, `Started`,
/// `ResumedByReplay`): a new run reserves past every one its journal names,
/// a fork's copied history included.
pub fn reserved_generation(event: &SessionEvent) -> Option<Generation> {
    use cairn_types::event::{LifecycleEvent as L, Payload};
    match &event.payload {
        Payload::Lifecycle(
            L::GenerationReserved { generation, .. }
            | L::Started { generation, .. }
            | L::ResumedByReplay { generation, .. },
        ) => Some(*generation),
        _ => None,
    }
}
