//! A session journal's committer: the minted-but-pending batch, the
//! durable head, and the one write that moves it (see [`super::session`]
//! for group commit). Only [`super::session::SessionJournal`] drives it.

use super::detach::detached;
use super::event::{LifecycleEvent, LinePrefix, Payload, SegmentLineage, SessionEvent, emit_line};
use super::live::Live;
use cairn_store::now_ms;
use cairn_store::{Store, StoreError};
use cairn_types::ids::{Generation, RunId, SegmentId, Seq, SessionId};
use std::sync::Arc;

/// Pending emits that start a commit at once.
pub const BATCH: usize = 256;
/// The longest an emit waits before its commit starts (with the tokio
/// timer's millisecond grain, it starts within 2 ms).
pub const COMMIT_DELAY: std::time::Duration = std::time::Duration::from_millis(1);

/// What only the committer touches: the durable head.
pub(super) struct Durable {
    pub(super) last_seq: Seq,
    pub(super) last_generation: Generation,
}

/// What the minting lock guards.
pub(super) struct Minting {
    /// The last seq handed out (durable or pending).
    pub(super) last_seq: Seq,
    pub(super) segment: SegmentId,
    /// Minted, not yet committed, in seq order.
    pub(super) pending: Vec<Arc<SessionEvent>>,
    /// Bytes (as journaled) of the emits counted into `pending` since it
    /// was last empty.
    pub(super) pending_bytes: u64,
    /// A delayed commit is scheduled: a timer started while
    /// [`Core::batches`] was what it is now waits
    /// ([`Core::flush_when_due`]).
    pub(super) timer: bool,
    /// A commit is on its way to take the pending batch (it filled, or its
    /// timer ran out): nothing else starts one.
    pub(super) kicked: bool,
    /// A commit failed; runs get this until one ends.
    pub(super) failed: Option<Failure>,
    /// A run is writing its end: its pending entries wait for the terminal
    /// entry (one write for both), and every other writer waits for it.
    pub(super) sealed: bool,
    /// The last emit's line start (its segment and run, and the line up to
    /// its seq): every emit of a run in one segment starts the same.
    pub(super) prefix: KeptPrefix,
    /// A writer keeps minting still across its store call
    /// ([`MintLock::hold`]).
    pub(super) held: bool,
    /// How many of `pending` a commit waiting for the one in flight has
    /// taken to build their lines ahead
    /// ([`Core::commit_lock_building_ahead`]); a hint only (a
    /// line it did not build is built at the write).
    pub(super) ahead: usize,
}

impl Minting {
    /// The start of the lines of a run's entries in the active segment
    /// (see [`LinePrefix`]), kept for its next emit.
    fn prefix(&mut self, session: &SessionId, run_id: Option<RunId>) -> &LinePrefix {
        kept_prefix(&mut self.prefix, session, self.segment, run_id)
    }

    /// The line of an emit's entry in the active segment, built around
    /// its payload's JSON `payload` ([`cairn_types::event::emit_line`]).
    pub(super) fn emit_line(
        &mut self,
        session: &SessionId,
        run_id: Option<RunId>,
        seq: Seq,
        at_ms: u64,
        payload: &str,
    ) -> Box<str> {
        emit_line(self.prefix(session, run_id), seq, at_ms, payload)
    }

    /// About the length of the line of an emit's entry whose payload's JSON
    /// is `payload` bytes (its seq's and time's digits at their longest),
    /// for the pending batch's bytes.
    pub(super) fn emit_line_len(
        &mut self,
        session: &SessionId,
        run_id: Option<RunId>,
        payload: u64,
    ) -> u64 {
        const AROUND: u64 =
            (",\"seq\":,\"at_ms\":,\"payload\":,\"crc\":\"12345678\"}".len() + 2 * 20) as u64;
        self.prefix(session, run_id).as_str().len() as u64 + payload + AROUND
    }

    /// The error of a commit that failed since the run's last append.
    pub(super) fn check(&self, session: &SessionId) -> Result<(), StoreError> {
        match &self.failed {
            Some(failed) => Err(failed.error(session)),
            None => Ok(()),
        }
    }
}

/// The minting lock: a std mutex, held only for moments and never across
/// an await — an emit takes and lets it go without tokio's lock, whose
/// release alone was a fifth of an emit's host time — with a gate for the
/// two writers that must keep minting still across their store call (a
/// segment switch, a run's end: [`MintLock::hold`]). While one holds it,
/// every other minter waits ([`MintLock::lock`]) or is turned away
/// ([`MintLock::try_lock`]).
pub(super) struct MintLock {
    state: std::sync::Mutex<Minting>,
    /// Told when a hold ends.
    opened: tokio::sync::Notify,
}

/// The minting state, locked for a moment.
pub(super) type MintGuard<'a> = std::sync::MutexGuard<'a, Minting>;

impl MintLock {
    pub(super) fn new(minting: Minting) -> Self {
        MintLock {
            state: std::sync::Mutex::new(minting),
            opened: tokio::sync::Notify::new(),
        }
    }

    /// The state now, whoever holds it: for the holder, and for a look.
    /// Taken spinning a moment before sleeping on it: an emitting guest
    /// holds it a fraction of a microsecond at a time, and a taker asleep
    /// on it (the committer, taking the batch) costs the guest's next
    /// release a wake-up, a system call on the guest's thread.
    fn state(&self) -> MintGuard<'_> {
        const SPINS: usize = 1 << 10;
        for _ in 0..SPINS {
            match self.state.try_lock() {
                Ok(minting) => return minting,
                Err(std::sync::TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => std::hint::spin_loop(),
            }
        }
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state, once nobody holds it.
    pub(super) async fn lock(&self) -> MintGuard<'_> {
        // The usual case first, without registering for a hold's end.
        {
            let minting = self.state();
            if !minting.held {
                return minting;
            }
        }
        loop {
            let opened = self.opened.notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            {
                let minting = self.state();
                if !minting.held {
                    return minting;
                }
            }
            opened.await;
        }
    }

    /// The state now, unless another minter has it this moment or a
    /// writer holds it.
    pub(super) fn try_lock(&self) -> Option<MintGuard<'_>> {
        let minting = match self.state.try_lock() {
            Ok(minting) => minting,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        (!minting.held).then_some(minting)
    }

    /// Keep minting still until the hold is dropped: the holder alone
    /// reads and changes the state ([`Held::get`]) meanwhile.
    pub(super) async fn hold(&self) -> Held<'_> {
        self.lock().await.held = true;
        Held { lock: self }
    }
}

/// Minting kept still by one writer ([`MintLock::hold`]).
pub(super) struct Held<'a> {
    lock: &'a MintLock,
}

impl Held<'_> {
    /// The state, for the holder (never across an await).
    pub(super) fn get(&self) -> MintGuard<'_> {
        self.lock.state()
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.lock.state().held = false;
        self.lock.opened.notify_waiters();
    }
}

/// A line start kept for a run's entries in one segment.
type KeptPrefix = Option<(SegmentId, Option<RunId>, LinePrefix)>;

/// The start of the lines of `run`'s entries in `segment` ([`LinePrefix`]):
/// the one `kept`, or built and kept in its place.
fn kept_prefix<'a>(
    kept: &'a mut KeptPrefix,
    session: &SessionId,
    segment: SegmentId,
    run: Option<RunId>,
) -> &'a LinePrefix {
    let fresh = || {
        (
            segment,
            run,
            LinePrefix::new(session, &segment, run.as_ref()),
        )
    };
    if !matches!(kept, Some((s, r, _)) if (*s, *r) == (segment, run)) {
        *kept = Some(fresh());
    }
    &kept.get_or_insert_with(fresh).2
}

/// A failed commit, kept to tell the run (a `StoreError` is not `Clone`).
#[derive(Clone)]
pub(super) enum Failure {
    Conflict { expected: Seq, head: Seq },
    LeaseLost { token: u64, now: String },
    Other(String),
}

impl Failure {
    fn of(e: &StoreError) -> Self {
        match e {
            StoreError::Conflict { expected, head, .. } => Failure::Conflict {
                expected: *expected,
                head: *head,
            },
            StoreError::LeaseLost { token, now, .. } => Failure::LeaseLost {
                token: *token,
                now: now.clone(),
            },
            other => Failure::Other(other.to_string()),
        }
    }

    fn error(&self, session: &SessionId) -> StoreError {
        match self {
            Failure::Conflict { expected, head } => StoreError::Conflict {
                session: session.clone(),
                expected: *expected,
                head: *head,
            },
            Failure::LeaseLost { token, now } => StoreError::LeaseLost {
                session: session.clone(),
                token: *token,
                now: now.clone(),
            },
            Failure::Other(why) => StoreError::Io {
                context: format!("session {session}: events of this run could not be written"),
                source: std::io::Error::other(why.clone()),
            },
        }
    }
}

pub(super) struct Core {
    pub(super) session: SessionId,
    pub(super) store: Arc<dyn Store>,
    /// Told of each batch made durable.
    pub(super) observer: Option<super::CommitObserver>,
    /// Held across a store write: writes go out one at a time, in order.
    /// Lock order: `commit`, then `minting`.
    pub(super) commit: Arc<tokio::sync::Mutex<Durable>>,
    pub(super) minting: MintLock,
    /// Told when a sealed journal opens again.
    pub(super) unsealed: tokio::sync::Notify,
    /// The durable head, readable without waiting for a write in flight.
    pub(super) durable_seq: std::sync::atomic::AtomicU64,
    /// The durable head at each time minted entries were dropped
    /// uncommitted (a failed commit, an unsealed end): every entry minted
    /// past it then was dropped. Rare; a wait on minted entries reads it.
    pub(super) drops: std::sync::Mutex<Vec<Seq>>,
    /// Told when the durable head moves or minted entries are dropped.
    pub(super) moved: tokio::sync::Notify,
    /// Told when a writer took the pending batch (or let it be): a guest
    /// waiting for room in a full batch goes on.
    pub(super) taken: tokio::sync::Notify,
    /// Told when another [`BATCH`] of emits joined a batch whose commit is
    /// started already: that commit, waiting for the one in flight, builds
    /// their lines ([`Core::commit_lock_building_ahead`]).
    pub(super) more: Arc<tokio::sync::Notify>,
    pub(super) live: Arc<Live>,
    /// How many times the pending batch was taken with its schedule
    /// ([`Core::taken`]; changed under the minting lock, read without
    /// it): a timer started for an earlier batch has nothing left to do.
    pub(super) batches: std::sync::atomic::AtomicU64,
    /// Commits waiting for the one in flight
    /// ([`Core::commit_lock_building_ahead`]).
    pub(super) waiting: std::sync::atomic::AtomicUsize,
}

impl Core {
    /// The pending batch was taken (or dropped) with its schedule, under
    /// the minting lock: the next emit schedules a commit of its own.
    pub(super) fn taken(&self, minting: &mut Minting) {
        minting.timer = false;
        minting.kicked = false;
        self.batches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Commits waiting for the one in flight now
    /// ([`Core::commit_lock_building_ahead`]). A
    /// commit counts itself before it takes the minting lock to build
    /// ahead, so a minter that holds the lock and reads none here has
    /// its entries seen by the commit's first look.
    pub(super) fn waiting(&self) -> usize {
        self.waiting.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The count of batches taken ([`Core::batches`]).
    pub(super) fn batches(&self) -> u64 {
        self.batches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Tell the observer a store append of `entries` begun at `began` is
    /// durable.
    pub(super) fn observed(&self, began: std::time::Instant, entries: usize) {
        if let Some(observe) = &self.observer {
            observe(began.elapsed(), entries);
        }
    }

    pub(super) fn event(
        &self,
        seq: Seq,
        segment: SegmentId,
        run_id: Option<RunId>,
        at_ms: u64,
        payload: Payload,
    ) -> Arc<SessionEvent> {
        Arc::new(self.entry(seq, segment, run_id, at_ms, payload))
    }

    pub(super) fn entry(
        &self,
        seq: Seq,
        segment: SegmentId,
        run_id: Option<RunId>,
        at_ms: u64,
        payload: Payload,
    ) -> SessionEvent {
        SessionEvent {
            session_id: self.session.clone(),
            segment_id: segment,
            run_id,
            seq,
            at_ms,
            payload,
            facts: None,
            line: Default::default(),
        }
    }

    /// Write `batch` (dense, continuing the durable head) with the commit
    /// lock held, then hand it to the live tail. On failure the pending
    /// entries minted past it are dropped with it and runs are told.
    pub(super) async fn write(
        &self,
        durable: &mut Durable,
        batch: &[Arc<SessionEvent>],
    ) -> Result<(), StoreError> {
        let Some(last) = batch.last() else {
            return Ok(());
        };
        self.build_lines(batch);
        let began = std::time::Instant::now();
        match self
            .store
            .append(&self.session, durable.last_seq.next(), batch)
            .await
        {
            Ok(()) => {
                self.observed(began, batch.len());
                self.published(durable, batch, last.seq);
                Ok(())
            }
            Err(e) => {
                let mut minting = self.minting.lock().await;
                minting.pending.clear();
                minting.last_seq = durable.last_seq;
                minting.failed = Some(Failure::of(&e));
                drop(minting);
                self.dropped_pending(durable.last_seq);
                self.taken.notify_waiters();
                Err(e)
            }
        }
    }

    /// Build the lines of entries minted without one (an emitted delta's:
    /// see [`cairn_types::event::Measured`]) here, off the emitting
    /// guest's thread, each line's start built once for a run's entries.
    pub(super) fn build_lines(&self, batch: &[Arc<SessionEvent>]) {
        let mut kept = None;
        for event in batch.iter().filter(|e| !e.has_line()) {
            let start = kept_prefix(&mut kept, &event.session_id, event.segment_id, event.run_id);
            event.line_from_prefix(start);
        }
    }

    /// After the store took `events` (through `last`): count, advance, and
    /// hand them to the live tail.
    pub(super) fn published(&self, durable: &mut Durable, events: &[Arc<SessionEvent>], last: Seq) {
        durable.last_seq = last;
        self.durable_seq
            .store(last.0, std::sync::atomic::Ordering::Release);
        self.moved.notify_waiters();
        for g in events
            .iter()
            .filter_map(|e| cairn_store::reserved_generation(e))
        {
            durable.last_generation = durable.last_generation.max(g);
        }
        self.live.publish(events);
    }

    /// Entries minted past `durable` were dropped uncommitted: whoever
    /// waits on them hears.
    pub(super) fn dropped_pending(&self, durable: Seq) {
        self.drops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(durable);
        self.live.dropped(durable);
        self.moved.notify_waiters();
    }

    /// How many times minted entries were dropped so far.
    pub(super) fn drop_count(&self) -> usize {
        self.drops.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Commit whatever is pending.
    pub(super) async fn flush(&self) -> Result<(), StoreError> {
        self.commit_pending(false).await.0
    }

    /// The commit a filled batch started ([`super::session`]'s `kick`):
    /// it also stands in for the next batch's delayed commit, which that
    /// batch's first emit would start otherwise — a task spawned, and a
    /// thread woken, from the emitting guest's thread once a batch. Taken
    /// with a full batch, the next one's schedule is this task's: once its
    /// write ends (the next commit could not start before), it waits out
    /// [`COMMIT_DELAY`] from the take — no later than from the next
    /// batch's first entry — and commits that batch unless it was taken
    /// meanwhile ([`Core::flush_when_due`]).
    pub(super) async fn flush_kicked(&self) {
        // Whether the write failed or not: the next batch's emits found its
        // timer set, and get no other.
        if let (_, Some((batches, due))) = self.commit_pending(true).await {
            tokio::time::sleep_until(due).await;
            self.flush_when_due(batches).await;
        }
    }

    /// Take the pending batch and write it; with `schedule_next` and a
    /// full batch taken, the next batch's delayed commit is the caller's:
    /// its count of batches and when it is due.
    async fn commit_pending(
        &self,
        schedule_next: bool,
    ) -> (Result<(), StoreError>, Option<(u64, tokio::time::Instant)>) {
        let mut durable = self.commit_lock_building_ahead().await;
        let (batch, next) = {
            let mut minting = self.minting.lock().await;
            if minting.sealed {
                // Kept for the run's terminal write.
                drop(minting);
                self.taken.notify_waiters();
                return (Ok(()), None);
            }
            self.taken(&mut minting);
            let next = (schedule_next && minting.pending.len() >= BATCH).then(|| {
                minting.timer = true;
                (self.batches(), tokio::time::Instant::now() + COMMIT_DELAY)
            });
            // The next batch likely fills as this one did: room for it
            // now, not grown an entry at a time by the emitting guest.
            let room = minting.pending.len().min(BATCH);
            minting.ahead = 0;
            let batch = std::mem::replace(&mut minting.pending, Vec::with_capacity(room));
            (batch, next)
        };
        // The guest that filled the batch goes on while it is written.
        self.taken.notify_waiters();
        (self.write(&mut durable, &batch).await, next)
    }

    /// A timer's commit of the batch it was started for (`batches` then:
    /// an emit's [`COMMIT_DELAY`] after the batch's first entry, a
    /// deferred entry's or a run's first entries' delay after them):
    /// unless that batch was taken meanwhile (the next one has a timer of
    /// its own) or a commit is on its way for it. One commit at a time
    /// waits for the one in flight, so it alone builds the lines ahead:
    /// two would build the same entries' lines at once, and one would
    /// wait for the other's on a lock (a thread's sleep and wake-up an
    /// entry).
    pub(super) async fn flush_when_due(&self, batches: u64) {
        // The usual case, while a guest emits: its batch filled and was
        // taken already, seen without the guest's lock.
        if self.batches() != batches {
            return;
        }
        {
            let mut minting = self.minting.lock().await;
            if self.batches() != batches || minting.kicked {
                return;
            }
            minting.kicked = true;
        }
        let _ = self.flush().await;
    }

    /// The commit lock for a commit of the pending batch. While a commit
    /// ahead of it is written (a file store's write and sync run on a
    /// blocking thread), this one builds the lines of the entries minted
    /// meanwhile, a [`BATCH`] at a time as they come: the next write
    /// starts with its lines built, and the emitting guest, waiting for
    /// room in a full batch, waits for the disk alone.
    async fn commit_lock_building_ahead(&self) -> tokio::sync::MutexGuard<'_, Durable> {
        let _waiting = Waiting::count(&self.waiting);
        loop {
            if let Ok(durable) = self.commit.try_lock() {
                return durable;
            }
            let more = self.more.notified();
            tokio::pin!(more);
            more.as_mut().enable();
            let ahead: Vec<Arc<SessionEvent>> = {
                let mut minting = self.minting.state();
                if minting.held {
                    // A writer holding minting (a run's end, a segment
                    // switch) reads and changes it alone, and builds the
                    // lines of what it writes itself.
                    Vec::new()
                } else {
                    let from = minting.ahead.min(minting.pending.len());
                    minting.ahead = minting.pending.len();
                    minting.pending[from..]
                        .iter()
                        .filter(|e| !e.has_line())
                        .cloned()
                        .collect()
                }
            };
            self.build_lines(&ahead);
            tokio::select! {
                durable = self.commit.lock() => return durable,
                () = more => {}
            }
        }
    }

    /// The commit lock, once the journal is not sealed (a run writing its
    /// end): every writer but the ending run waits for it. Owned, so the
    /// write it guards can go on without its caller ([`detached`]).
    pub(super) async fn writable(&self) -> DurableGuard {
        loop {
            let opened = self.unsealed.notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            let durable = self.commit.clone().lock_owned().await;
            if !self.minting.lock().await.sealed {
                return durable;
            }
            drop(durable);
            opened.await;
        }
    }

    /// A segment switch ([`super::session::SessionJournal::start_segment`])
    /// with the commit lock held, run to its end ([`detached`]).
    pub(super) async fn switch_segment(
        &self,
        mut durable: DurableGuard,
        compacted: Option<(String, Seq)>,
        branched_at: Option<Seq>,
    ) -> Result<Vec<Arc<SessionEvent>>, StoreError> {
        let pending = std::mem::take(&mut self.minting.lock().await.pending);
        self.write(&mut durable, &pending).await?;
        let held = self.minting.hold().await;
        let (parent, mut seq) = {
            let minting = held.get();
            (minting.segment, minting.last_seq)
        };
        let segment = SegmentId::new();
        let mut entries = vec![Payload::Lifecycle(LifecycleEvent::SegmentCreated {
            segment_id: segment,
            compacted_from: compacted.as_ref().map(|(_, through)| SegmentLineage {
                segment: parent,
                through_seq: *through,
            }),
            forked_from: branched_at.map(|at| SegmentLineage {
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
        let events: Vec<Arc<SessionEvent>> = entries
            .into_iter()
            .map(|payload| {
                seq = seq.next();
                self.event(seq, segment, None, at_ms, payload)
            })
            .collect();
        let began = std::time::Instant::now();
        self.store
            .start_segment(&self.session, segment, parent, &events)
            .await?;
        self.observed(began, events.len());
        {
            let mut minting = held.get();
            minting.segment = segment;
            minting.last_seq = seq;
        }
        drop(held);
        self.published(&mut durable, &events, seq);
        Ok(events)
    }

    /// Mint `payloads` after whatever is pending and commit them all as one
    /// batch (the commit lock held by the caller). `build` runs under the
    /// minting lock with the first new seq; a run's append is refused while
    /// the journal is failed.
    pub(super) async fn append_now(
        self: &Arc<Self>,
        mut durable: DurableGuard,
        run_id: Option<RunId>,
        build: impl FnOnce(Seq) -> Vec<Payload>,
    ) -> Result<Vec<Arc<SessionEvent>>, StoreError> {
        let (batch, new) = {
            let mut minting = self.minting.lock().await;
            if run_id.is_some() {
                minting.check(&self.session)?;
            }
            let at_ms = now_ms();
            let mut seq = minting.last_seq;
            let segment = minting.segment;
            let payloads = build(seq.next());
            let new = payloads.len();
            let mut batch = std::mem::take(&mut minting.pending);
            minting.ahead = 0;
            self.taken(&mut minting);
            batch.extend(payloads.into_iter().map(|payload| {
                seq = seq.next();
                self.event(seq, segment, run_id, at_ms, payload)
            }));
            minting.last_seq = seq;
            (batch, new)
        };
        let core = self.clone();
        let batch =
            detached(async move { core.write(&mut durable, &batch).await.map(|()| batch) }).await?;
        Ok(batch[batch.len() - new..].to_vec())
    }
}

/// One commit counted as waiting ([`Core::waiting`]) while it lives.
struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Waiting<'a> {
    fn count(waiting: &'a std::sync::atomic::AtomicUsize) -> Self {
        waiting.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Waiting(waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The commit lock held, owned ([`Core::writable`]).
pub(super) type DurableGuard = tokio::sync::OwnedMutexGuard<Durable>;
