//! The live tail of one session: a bounded ring of the newest entries that
//! every subscriber reads by seq, and the wake-ups that tell them to.
//!
//! The writer's cost does not grow with subscribers: it pushes one shared
//! `Arc` into the ring and, at most once per burst, wakes whoever waits.
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
/// The most entries one read of the ring takes: a reader holds the ring's
/// lock, which the writer needs to publish, for a short copy — not for a
/// whole window's (a thousand subscribers each copying a thousand entries
/// kept the writer waiting on the lock).
pub const READ_MAX: usize = 16;

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
    ring: VecDeque<(Arc<SessionEvent>, u64)>,
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
}

impl Live {
    pub(crate) fn new(capacity: usize, last_seq: Seq) -> Arc<Self> {
        Arc::new(Live {
            capacity: capacity.max(1),
            max_bytes: u64::MAX,
            windows: None,
            state: Mutex::new(State {
                ring: VecDeque::new(),
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
        if self.receivers() != 0 || st.ring.is_empty() {
            return false;
        }
        let freed = st.bytes;
        st.ring.clear();
        st.ring.shrink_to_fit();
        st.bytes = 0;
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
                st.bytes += size;
                st.ring.push_back((event.clone(), size));
            }
            while st.ring.len() > self.capacity || (st.bytes > self.max_bytes && st.ring.len() > 1)
            {
                if let Some((_, size)) = st.ring.pop_front() {
                    st.bytes -= size;
                }
            }
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

    /// Entries after `after`, at most [`READ_MAX`] of them, added to `out`
    /// (the reader's own buffer: no allocation a read).
    pub(crate) fn read_after(&self, after: Seq, out: &mut VecDeque<Arc<SessionEvent>>) -> Read {
        let st = self.lock();
        let Some(front) = st.ring.front().map(|(e, _)| e.seq) else {
            return if st.closed { Read::Closed } else { Read::Empty };
        };
        if after.0 + 1 < front.0 {
            return Read::Lagged { oldest: front };
        }
        let skip = (after.0 + 1 - front.0) as usize;
        if skip >= st.ring.len() {
            return if st.closed { Read::Closed } else { Read::Empty };
        }
        let taken = st.ring.range(skip..).take(READ_MAX);
        out.extend(taken.map(|(e, _)| e.clone()));
        Read::Entries(out.back().map_or(after, |e| e.seq))
    }

    /// Wait until something may have changed after `after`: returns at once
    /// when entries after it are already there.
    pub(crate) async fn changed(&self, after: Seq) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let st = self.lock();
            if st.closed || st.last_seq > after {
                return;
            }
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
