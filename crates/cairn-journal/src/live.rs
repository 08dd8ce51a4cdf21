//! The live tail of one session: a bounded ring of the newest entries that
//! every subscriber reads by seq, and the wake-ups that tell them to.
//!
//! The writer's cost does not grow with subscribers: it puts one shared
//! `Arc` into the ring and, at most once per burst, wakes whoever waits.
//! The ring is a run of chunks whose slots are written once: a subscriber
//! reads the chunk it holds, and moves to the next through the chunk's
//! weak link, without the ring's lock (which only the writer, eviction and
//! a reader whose next chunk already left the window take), so a thousand
//! readers never keep the writer waiting on it.
//! While entries come in faster than [`HOT`] apart, wake-ups are deferred
//! and coalesced — flushed when [`MAX_DELAY`] has passed since the first
//! deferred entry, when a quarter of the ring is pending (so nobody waiting
//! lags for it), or by the flusher thread within about [`MAX_DELAY`] when
//! the writer goes quiet. An entry that arrives after a pause wakes its
//! subscribers at once. A subscriber drains everything new per wake.

use super::event::SessionEvent;
use cairn_types::ids::Seq;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Entries closer together than this are a burst: their wake-ups coalesce.
pub const HOT: Duration = Duration::from_micros(50);
/// The longest a deferred wake-up waits.
pub const MAX_DELAY: Duration = Duration::from_millis(1);
/// The most entries one read of the ring takes (the most one chunk holds).
pub const READ_MAX: usize = CHUNK_MAX;
/// A session's first chunk holds this many entries; each next one twice
/// the last's, up to [`CHUNK_MAX`] (a waiting session's few entries take
/// a small one).
const CHUNK_FIRST: usize = 8;
/// The most entries a chunk holds.
const CHUNK_MAX: usize = 64;
/// A chunk takes no more entries once its lines pass this many bytes: the
/// ring frees whole chunks, and a reader holds the one it reads, so this
/// bounds what either keeps past the window's own bounds.
const CHUNK_BYTES: u64 = 64 << 10;

/// A run of consecutive entries, each slot written once by the writer and
/// read by any subscriber without a lock.
struct Chunk {
    /// The seq of its first slot.
    first: u64,
    slots: Box<[OnceLock<Arc<SessionEvent>>]>,
    /// The writer has moved on to the next chunk: an empty slot here will
    /// stay empty.
    sealed: AtomicBool,
    /// The chunk after it, while the window holds it (a reader moves on
    /// without the ring's lock; a reader that stopped holds one chunk, not
    /// every one after it).
    next: OnceLock<Weak<Chunk>>,
}

impl Chunk {
    fn new(first: u64, slots: usize) -> Arc<Chunk> {
        Arc::new(Chunk {
            first,
            slots: (0..slots).map(|_| OnceLock::new()).collect(),
            sealed: AtomicBool::new(false),
            next: OnceLock::new(),
        })
    }

    /// Whether `seq` falls in its slots' range.
    fn spans(&self, seq: u64) -> bool {
        seq >= self.first && seq - self.first < self.slots.len() as u64
    }
}

/// A subscriber's place in the ring: the chunk it reads (held, so reading
/// on in it takes no lock).
#[derive(Default)]
pub(crate) struct Cursor {
    chunk: Option<Arc<Chunk>>,
}

/// What a subscriber's read of the ring found.
pub(crate) enum Read {
    /// New entries were added to the reader's buffer, oldest first; the
    /// last one's seq.
    Entries(Seq),
    /// Entries after the reader's position left the ring; it goes on from
    /// `oldest`, the oldest one held.
    Lagged {
        /// The oldest seq the ring holds.
        oldest: Seq,
    },
    /// Nothing new yet.
    Empty,
    /// The journal is closed and everything was read.
    Closed,
}

struct State {
    /// The chunks holding the window, oldest first; the last one is the
    /// one written.
    chunks: VecDeque<Arc<Chunk>>,
    /// Entries written into the last chunk, and their bytes.
    filled: usize,
    filled_bytes: u64,
    /// The oldest entry the window holds (the last seq + 1 when it holds
    /// none); entries before it in the first chunk are out of the window.
    front: u64,
    /// Entries the window holds, and their lines' bytes.
    held: usize,
    bytes: u64,
    last_seq: Seq,
    closed: bool,
    last_publish: Option<Instant>,
    first_pending: Option<Instant>,
    pending: usize,
    /// The durable head the last drop of minted entries went back to
    /// (their seqs are minted again: see [`Live::dropped`]).
    drop_head: Seq,
}

/// The bytes every session's live window holds together, against a
/// host-wide cap. Past it, the windows nobody follows are emptied, least
/// recently written first (an ended session's is written no more):
/// that costs a later reader only store reads, since a subscriber reads
/// the store for whatever the window does not hold.
pub(crate) struct Windows {
    total: AtomicU64,
    cap: u64,
    evicting: AtomicBool,
    lives: Mutex<Vec<Weak<Live>>>,
    evicted: AtomicU64,
}

impl Windows {
    pub(crate) fn new(cap: u64) -> Arc<Self> {
        Arc::new(Windows {
            total: AtomicU64::new(0),
            cap: cap.max(1),
            evicting: AtomicBool::new(false),
            lives: Mutex::new(Vec::new()),
            evicted: AtomicU64::new(0),
        })
    }

    /// Bytes held in every window now.
    pub(crate) fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Windows emptied to keep under the cap, since start.
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    fn lives(&self) -> std::sync::MutexGuard<'_, Vec<Weak<Live>>> {
        self.lives.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(&self, live: &Arc<Live>) {
        let mut lives = self.lives();
        // Forget the dropped ones now and then, so the list stays as long
        // as the open sessions.
        if lives.len() >= 64 && lives.len().is_power_of_two() {
            lives.retain(|l| l.strong_count() > 0);
        }
        lives.push(Arc::downgrade(live));
    }

    /// Over the cap: empty unfollowed windows, oldest write first, until
    /// the total is back under seven eighths of it. One evictor at a time;
    /// the others go on (the next publish tries again).
    fn evict(&self) {
        if self.total() <= self.cap || self.evicting.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut candidates: Vec<(Option<Instant>, Arc<Live>)> = {
            let mut lives = self.lives();
            lives.retain(|l| l.strong_count() > 0);
            lives
                .iter()
                .filter_map(Weak::upgrade)
                .filter(|l| l.receivers() == 0)
                .map(|l| {
                    let at = l.lock().last_publish;
                    (at, l)
                })
                .collect()
        };
        candidates.sort_by_key(|(at, _)| *at);
        let target = self.cap - self.cap / 8;
        for (_, live) in candidates {
            if self.total() <= target {
                break;
            }
            if live.empty_unfollowed() {
                self.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.evicting.store(false, Ordering::Release);
    }
}

/// A value on a cache line of its own: one every subscriber reads for each
/// entry, kept off the line the writer's publish writes (its wake-up flag
/// beside it cost each of a thousand subscribers a cache miss an entry).
#[repr(align(128))]
struct OwnLine<T>(T);

/// One session's live tail.
pub(crate) struct Live {
    capacity: usize,
    max_bytes: u64,
    windows: Option<Arc<Windows>>,
    state: Mutex<State>,
    notify: Notify,
    receivers: AtomicUsize,
    deferred: AtomicBool,
    /// How many drops so far: read by every subscriber before each entry
    /// it takes, so without the ring's lock (the head is read under it
    /// only when this moved).
    drops: OwnLine<AtomicU64>,
    /// What a lock-free read needs to know, written by the writer after
    /// the slots it covers.
    tail: OwnLine<Tail>,
}

/// The window's bounds, as readers see them without the ring's lock.
struct Tail {
    /// The last published seq.
    published: AtomicU64,
    /// The oldest seq the window holds (past `published` when it holds none).
    front: AtomicU64,
    closed: AtomicBool,
}

impl Live {
    pub(crate) fn new(capacity: usize, last_seq: Seq) -> Arc<Self> {
        Arc::new(Live {
            capacity: capacity.max(1),
            max_bytes: u64::MAX,
            windows: None,
            state: Mutex::new(State {
                chunks: VecDeque::new(),
                filled: 0,
                filled_bytes: 0,
                front: last_seq.0 + 1,
                held: 0,
                bytes: 0,
                last_seq,
                closed: false,
                last_publish: None,
                first_pending: None,
                pending: 0,
                drop_head: Seq(0),
            }),
            notify: Notify::new(),
            receivers: AtomicUsize::new(0),
            deferred: AtomicBool::new(false),
            drops: OwnLine(AtomicU64::new(0)),
            tail: OwnLine(Tail {
                published: AtomicU64::new(last_seq.0),
                front: AtomicU64::new(last_seq.0 + 1),
                closed: AtomicBool::new(false),
            }),
        })
    }

    /// Bound the ring to `bytes` too, and count it in `windows` (before
    /// anything is published).
    pub(crate) fn with_max_bytes(
        self: Arc<Self>,
        bytes: u64,
        windows: Option<&Arc<Windows>>,
    ) -> Arc<Self> {
        match Arc::try_unwrap(self) {
            Ok(mut live) => {
                live.max_bytes = bytes.max(1);
                live.windows = windows.cloned();
                let live = Arc::new(live);
                if let Some(w) = windows {
                    w.register(&live);
                }
                live
            }
            Err(shared) => shared,
        }
    }

    /// Empty the ring if nobody follows it (checked under the ring's lock,
    /// which a joining subscriber's first read of the head waits for, so
    /// no subscriber can miss what was dropped). Whether it was emptied.
    fn empty_unfollowed(&self) -> bool {
        let mut st = self.lock();
        if self.receivers() != 0 || st.held == 0 {
            return false;
        }
        let freed = st.bytes;
        st.chunks.clear();
        st.chunks.shrink_to_fit();
        st.filled = 0;
        st.filled_bytes = 0;
        st.held = 0;
        st.bytes = 0;
        st.front = st.last_seq.0 + 1;
        self.tail.0.front.store(st.front, Ordering::Release);
        drop(st);
        if let Some(w) = &self.windows {
            w.total.fetch_sub(freed, Ordering::Relaxed);
        }
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publish entries (already durable), in seq order.
    pub(crate) fn publish(self: &Arc<Self>, events: &[Arc<SessionEvent>]) {
        let Some(last) = events.last() else { return };
        let now = Instant::now();
        let wake = {
            let mut st = self.lock();
            let before = st.bytes;
            for event in events {
                // Its journal line with the newline (an entry always serializes).
                let size = event.line().len() as u64 + 1;
                self.put(&mut st, event, size);
            }
            while st.held > self.capacity || (st.bytes > self.max_bytes && st.held > 1) {
                self.pop_front(&mut st);
            }
            self.tail.0.front.store(st.front, Ordering::Release);
            self.tail.0.published.store(last.seq.0, Ordering::Release);
            st.last_seq = last.seq;
            if let Some(w) = &self.windows {
                if st.bytes >= before {
                    w.total.fetch_add(st.bytes - before, Ordering::Relaxed);
                } else {
                    w.total.fetch_sub(before - st.bytes, Ordering::Relaxed);
                }
            }
            if self.receivers.load(Ordering::Relaxed) == 0 {
                st.last_publish = Some(now);
                drop(st);
                if let Some(w) = &self.windows {
                    w.evict();
                }
                return;
            }
            let hot = st.last_publish.is_some_and(|t| now.duration_since(t) < HOT);
            st.last_publish = Some(now);
            st.pending += events.len();
            let first = *st.first_pending.get_or_insert(now);
            let wake = !hot
                || st.pending >= (self.capacity / 4).max(1)
                || now.duration_since(first) >= MAX_DELAY;
            if wake {
                st.pending = 0;
                st.first_pending = None;
            }
            wake
        };
        if wake {
            self.deferred.store(false, Ordering::Relaxed);
            self.notify.notify_waiters();
        } else if !self.deferred.swap(true, Ordering::AcqRel) {
            flusher().defer(Arc::downgrade(self));
        }
        if let Some(w) = &self.windows {
            w.evict();
        }
    }

    /// Wake everyone waiting now (deferred wake-ups, and close).
    fn flush(&self) {
        if self.deferred.swap(false, Ordering::AcqRel) {
            {
                let mut st = self.lock();
                st.pending = 0;
                st.first_pending = None;
            }
            self.notify.notify_waiters();
        }
    }

    /// No more entries: subscribers end once they have read the ring.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.tail.0.closed.store(true, Ordering::Release);
        self.deferred.store(false, Ordering::Relaxed);
        self.notify.notify_waiters();
    }

    /// Bytes the ring holds.
    pub(crate) fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// Minted entries past `head` were dropped uncommitted (a failed
    /// commit): their seqs will be minted again for other entries. A
    /// subscriber that was told to start after one of them goes back to
    /// `head` ([`Live::drops`]), or it would skip the entries that take
    /// those seqs.
    pub(crate) fn dropped(&self, head: Seq) {
        self.lock().drop_head = head;
        self.drops.0.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    /// How many drops so far.
    pub(crate) fn drop_count(&self) -> u64 {
        self.drops.0.load(Ordering::Acquire)
    }

    /// The head the last drop went back to.
    pub(crate) fn drop_head(&self) -> Seq {
        self.lock().drop_head
    }

    /// The last published seq (a new reader starts after it).
    pub(crate) fn last_seq(&self) -> Seq {
        self.lock().last_seq
    }

    /// Write `event` into the ring's last chunk (a new one when it is full,
    /// past its bytes, or the seq does not follow on).
    fn put(&self, st: &mut State, event: &Arc<SessionEvent>, size: u64) {
        let seq = event.seq.0;
        let room = st.chunks.back().is_some_and(|c| {
            st.filled < c.slots.len()
                && st.filled_bytes < CHUNK_BYTES
                && c.first + st.filled as u64 == seq
        });
        if !room {
            let slots = st
                .chunks
                .back()
                .map_or(CHUNK_FIRST, |last| (last.slots.len() * 2).min(CHUNK_MAX));
            let chunk = Chunk::new(seq, slots);
            if let Some(last) = st.chunks.back() {
                let _ = last.next.set(Arc::downgrade(&chunk));
                last.sealed.store(true, Ordering::Release);
            }
            st.chunks.push_back(chunk);
            st.filled = 0;
            st.filled_bytes = 0;
        }
        if let Some(chunk) = st.chunks.back() {
            let _ = chunk.slots[st.filled].set(event.clone());
        }
        if st.held == 0 {
            st.front = seq;
        }
        st.filled += 1;
        st.filled_bytes += size;
        st.held += 1;
        st.bytes += size;
    }

    /// Take the oldest entry out of the window; its chunk goes once none
    /// of its entries is held.
    fn pop_front(&self, st: &mut State) {
        while let Some(first) = st.chunks.front() {
            let size_at = |seq: u64| {
                first
                    .slots
                    .get(seq.saturating_sub(first.first) as usize)
                    .and_then(OnceLock::get)
                    .map(|e| e.line().len() as u64 + 1)
            };
            let size = size_at(st.front);
            let more = st.chunks.len() > 1;
            if let Some(size) = size {
                st.front += 1;
                st.held -= 1;
                st.bytes -= size.min(st.bytes);
                // Its last held entry went: the front is the next chunk's.
                if more && size_at(st.front).is_none() {
                    st.chunks.pop_front();
                    st.front = st.chunks.front().map_or(st.front, |c| c.first);
                }
                return;
            }
            if !more {
                break;
            }
            // Nothing of it held (the seq did not follow on past it).
            st.chunks.pop_front();
            st.front = st.chunks.front().map_or(st.front, |c| c.first);
        }
        st.held = 0;
        st.bytes = 0;
        st.front = st.last_seq.0 + 1;
    }

    /// Entries after `after`, at most [`READ_MAX`] of them, added to `out`
    /// (the reader's own buffer: no allocation a read). Without the ring's
    /// lock while the entries are in the chunk `cursor` holds.
    pub(crate) fn read_after(
        &self,
        after: Seq,
        cursor: &mut Cursor,
        out: &mut VecDeque<Arc<SessionEvent>>,
    ) -> Read {
        let tail = &self.tail.0;
        // Closed is read first: entries published before the close are
        // seen below whenever it is.
        let closed = tail.closed.load(Ordering::Acquire);
        let published = tail.published.load(Ordering::Acquire);
        let front = tail.front.load(Ordering::Acquire);
        let nothing = if closed { Read::Closed } else { Read::Empty };
        let want = after.0 + 1;
        if front > published || want > published {
            return nothing;
        }
        if want < front {
            return Read::Lagged { oldest: Seq(front) };
        }
        for _ in 0..3 {
            // Moving on to the chunk after the one held, without the lock.
            if let Some(held) = cursor
                .chunk
                .as_ref()
                .filter(|c| !c.spans(want) && want >= c.first)
                && held.sealed.load(Ordering::Acquire)
            {
                cursor.chunk = held.next.get().and_then(Weak::upgrade);
            }
            let chunk = match &cursor.chunk {
                Some(c) if c.spans(want) => c,
                _ => {
                    let found = self.chunk_of(want);
                    match found {
                        Some(c) => &*cursor.chunk.insert(c),
                        None => return nothing,
                    }
                }
            };
            // A chunk after `want` (the seq did not follow on) is read
            // from its start: the follower sees the jump and reads the store.
            let start = want.saturating_sub(chunk.first) as usize;
            let before = out.len();
            out.extend(
                chunk.slots[start..]
                    .iter()
                    .map_while(OnceLock::get)
                    .take(READ_MAX)
                    .cloned(),
            );
            if let Some(last) = out.back().filter(|_| out.len() > before) {
                return Read::Entries(last.seq);
            }
            // The writer left this chunk before `want` (full by bytes, or
            // the seq did not follow on): it is in a later one.
            if !chunk.sealed.load(Ordering::Acquire) {
                return nothing;
            }
            cursor.chunk = None;
        }
        nothing
    }

    /// The chunk holding `want`, or the first after it (under the ring's
    /// lock: a reader moving on from the chunk it held).
    fn chunk_of(&self, want: u64) -> Option<Arc<Chunk>> {
        let st = self.lock();
        let after = st.chunks.partition_point(|c| c.first <= want);
        let at = after.checked_sub(1)?;
        let chunk = &st.chunks[at];
        let written = match at + 1 == st.chunks.len() {
            true => st.filled as u64,
            false => chunk.slots.len() as u64,
        };
        if want - chunk.first < written && chunk.spans(want) {
            Some(chunk.clone())
        } else {
            st.chunks.get(after).cloned()
        }
    }

    /// Wait until something may have changed after `after`: returns at once
    /// when entries after it are already there (looked at before the
    /// wake-up list is joined: a follower of a busy writer usually finds
    /// the next entry there, and the list's lock, which the writer's
    /// wake-up takes, is not taken twice for nothing).
    pub(crate) async fn changed(&self, after: Seq) {
        let tail = &self.tail.0;
        let ready = || {
            tail.closed.load(Ordering::Acquire) || tail.published.load(Ordering::Acquire) > after.0
        };
        if ready() {
            return;
        }
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if ready() {
            return;
        }
        notified.await;
    }

    pub(crate) fn join(&self) {
        self.receivers.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn leave(&self) {
        self.receivers.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn receivers(&self) -> usize {
        self.receivers.load(Ordering::Relaxed)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(w) = &self.windows {
            let bytes = self
                .state
                .get_mut()
                .map_or_else(|p| p.into_inner().bytes, |st| st.bytes);
            w.total.fetch_sub(bytes, Ordering::Relaxed);
        }
    }
}

/// The one thread that flushes deferred wake-ups of quiet writers.
struct Flusher {
    queue: Mutex<Vec<Weak<Live>>>,
    thread: std::thread::Thread,
}

impl Flusher {
    fn defer(&self, live: Weak<Live>) {
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(live);
        self.thread.unpark();
    }
}

fn flusher() -> &'static Flusher {
    static FLUSHER: OnceLock<Flusher> = OnceLock::new();
    FLUSHER.get_or_init(|| {
        let handle = std::thread::Builder::new()
            .name("cairn-wake".into())
            .spawn(|| {
                loop {
                    let queue = &flusher().queue;
                    if queue.lock().unwrap_or_else(|p| p.into_inner()).is_empty() {
                        std::thread::park();
                        continue;
                    }
                    std::thread::sleep(MAX_DELAY);
                    let due = std::mem::take(&mut *queue.lock().unwrap_or_else(|p| p.into_inner()));
                    for live in due {
                        if let Some(live) = live.upgrade() {
                            live.flush();
                        }
                    }
                }
            })
            .expect("the wake-up flusher thread starts");
        Flusher {
            queue: Mutex::new(Vec::new()),
            thread: handle.thread().clone(),
        }
    })
}
