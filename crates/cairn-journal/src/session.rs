//! One session's writer: seqs are minted under one lock, so they are dense;
//! the store sees one writer, and subscribers see only what it has made
//! durable.
//!
//! **Group commit.** A guest's emit ([`SessionJournal::append_seq`]) gets
//! its seq at once and joins the session's pending batch; it does not wait
//! for the disk. The batch is committed — one store append: one write, one
//! sync on the file store — when it fills ([`BATCH`] entries start a commit
//! at once), within [`COMMIT_DELAY`] of its first entry, and always before
//! anything that depends on it: every other append (a decision request, a
//! recorded answer, a workers answer, an observer's entry, a segment
//! switch) carries the pending entries in front of its own, and a run's
//! last events go in the same write as its terminal entry (the run seals
//! the journal as it ends: [`SessionJournal::seal`]). Subscribers
//! and clients see only committed entries, so after a crash nobody has seen
//! an entry that the replay of the run must regenerate — and replay
//! regenerates an uncommitted tail deterministically.
//!
//! A commit that fails (a full disk, another writer) drops the pending
//! entries and marks the journal failed for runs: the run's next emit,
//! request or its seal gets the error, so the run ends with it instead of
//! going on past entries that were never kept.

use super::commit::{Core, Durable, MintGuard, MintLock, Minting};
use super::detach::detached;
use super::event::{LifecycleEvent, LineCache, Measured, Payload, RunFacts, SessionEvent};
use super::live::Live;
use super::subscription::Subscription;
use cairn_store::now_ms;
use cairn_store::{Store, StoreError};
use cairn_types::ids::{Generation, RunId, SegmentId, Seq, SessionId};
use std::sync::Arc;
use std::time::Duration;

pub use super::commit::{BATCH, COMMIT_DELAY};
/// The longest a deferred bookkeeping entry (an observer coming or going)
/// waits for the session's next write before it is committed alone: long
/// enough that a run started right after an attach carries it.
pub const DEFER_DELAY: Duration = Duration::from_millis(20);
/// Pending emits past which the emitting guest waits for the disk
/// (backpressure: memory stays bounded when the disk is slower than the
/// guest): until a commit takes them — the guest then goes on while they
/// are written, so at most twice this many are held, pending and in
/// flight. A quarter of the default live window, so one commit never
/// pushes a keeping-up subscriber out of it.
pub const MAX_PENDING: usize = 16 * BATCH;
/// Bytes (as journaled) of pending emits that start a commit at once.
pub const BATCH_BYTES: u64 = 1 << 20;
/// Bytes of pending emits past which the emitting guest waits for the
/// disk as past [`MAX_PENDING`]: a few thousand large emits cannot pile up
/// gigabytes in memory ahead of a slow store.
pub const MAX_PENDING_BYTES: u64 = 16 << 20;

/// Entries minted by [`SessionJournal::commit_soon`], not yet durable:
/// [`SessionJournal::durable`] waits for them.
#[derive(Debug, Clone, Copy)]
pub struct Minted {
    through: Seq,
    /// Drops before they were minted.
    dropped: usize,
}

/// One session's journal: the serialized writer and the live broadcast.
pub struct SessionJournal {
    core: Arc<Core>,
}

impl Drop for SessionJournal {
    fn drop(&mut self) {
        self.core.live.close();
    }
}

impl std::fmt::Debug for SessionJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionJournal")
            .field("session", &self.core.session)
            .finish()
    }
}

impl SessionJournal {
    /// A journal whose store head is `last_seq`.
    pub(super) fn new(
        session: SessionId,
        store: Arc<dyn Store>,
        head: cairn_store::Head,
        live: Arc<Live>,
        observer: Option<super::CommitObserver>,
    ) -> Self {
        SessionJournal {
            core: Arc::new(Core {
                session,
                store,
                observer,
                commit: Arc::new(tokio::sync::Mutex::new(Durable {
                    last_seq: head.last_seq,
                    last_generation: head.last_generation,
                })),
                minting: MintLock::new(Minting {
                    last_seq: head.last_seq,
                    segment: head.active_segment,
                    pending: Vec::new(),
                    pending_bytes: 0,
                    timer: false,
                    kicked: false,
                    failed: None,
                    sealed: false,
                    prefix: None,
                    held: false,
                    ahead: 0,
                }),
                unsealed: tokio::sync::Notify::new(),
                durable_seq: std::sync::atomic::AtomicU64::new(head.last_seq.0),
                drops: Default::default(),
                moved: tokio::sync::Notify::new(),
                taken: tokio::sync::Notify::new(),
                more: Arc::new(tokio::sync::Notify::new()),
                live,
                batches: Default::default(),
                waiting: Default::default(),
            }),
        }
    }

    /// The session.
    pub fn session(&self) -> &SessionId {
        &self.core.session
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
    /// store write, so nothing built there is observable before it is
    /// durable. Durable when it returns, with every emit before it.
    pub async fn append_with(
        &self,
        run_id: Option<RunId>,
        build: impl FnOnce(Seq) -> Vec<Payload>,
    ) -> Result<Vec<SessionEvent>, StoreError> {
        let durable = self.core.writable().await;
        let events = self.core.append_now(durable, run_id, build).await?;
        Ok(owned(events))
    }

    /// Append several entries of one run (or none) as one batch: one store
    /// write, one sync (with whatever emits are pending).
    pub async fn append_batch(
        &self,
        run_id: Option<RunId>,
        payloads: Vec<Payload>,
    ) -> Result<Vec<SessionEvent>, StoreError> {
        self.append_with(run_id, |_| payloads).await
    }

    /// A guest's emit: the entry gets its seq now and is committed with its
    /// batch (see the module's notes); returns the seq without waiting for
    /// the disk, unless [`MAX_PENDING`] entries already wait for it.
    pub async fn append_seq(
        &self,
        run_id: Option<RunId>,
        payload: Payload,
    ) -> Result<Seq, StoreError> {
        let full = {
            let mut minting = self.core.minting.lock().await;
            minting.check(&self.core.session)?;
            self.mint_now(&mut minting, run_id, payload, None, false)
        };
        self.minted(full).await
    }

    /// [`Self::append_seq`] of a payload whose JSON the caller measured
    /// (an emit does, for its run's limits): its journal line is built
    /// around it — a counted delta's by the committer (see [`Measured`]).
    pub async fn append_emit(
        &self,
        run_id: Option<RunId>,
        payload: Payload,
        json: &Measured,
    ) -> Result<Seq, StoreError> {
        let full = {
            let mut minting = self.core.minting.lock().await;
            minting.check(&self.core.session)?;
            self.mint_now(&mut minting, run_id, payload, Some(json), false)
        };
        self.minted(full).await
    }

    /// Entries that need not be durable before the caller goes on, only
    /// before anyone is told of them (a run's reservation and `Started`:
    /// the controller may start beside their commit): they get their seqs
    /// now and are committed with the session's next write, or `delay`
    /// from now. [`Self::durable`] waits for them.
    pub async fn commit_soon(
        &self,
        run_id: Option<RunId>,
        payloads: Vec<Payload>,
        delay: Duration,
    ) -> Result<(Vec<Arc<SessionEvent>>, Minted), StoreError> {
        let mut minting = self.core.minting.lock().await;
        let core = &self.core;
        if run_id.is_some() {
            minting.check(&core.session)?;
        }
        let dropped = core.drop_count();
        let at_ms = now_ms();
        let segment = minting.segment;
        let mut seq = minting.last_seq;
        let mut minted = Vec::with_capacity(payloads.len());
        for payload in payloads {
            seq = seq.next();
            let event = core.event(seq, segment, run_id, at_ms, payload);
            minting.pending.push(event.clone());
            minted.push(event);
        }
        minting.last_seq = seq;
        let batches = core.batches();
        drop(minting);
        let core = core.clone();
        tokio::spawn(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            core.flush_when_due(batches).await;
        });
        Ok((
            minted,
            Minted {
                through: seq,
                dropped,
            },
        ))
    }

    /// Once entries from [`Self::commit_soon`] are durable; the error when
    /// they were dropped uncommitted (their commit failed, or the run that
    /// held them lost the session).
    pub async fn durable(&self, minted: Minted) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering;
        let core = &self.core;
        loop {
            let moved = core.moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            // The first drop since they were minted decides: they were
            // durable by then, or dropped with everything past its head.
            let first_drop = core
                .drops
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(minted.dropped)
                .copied();
            match first_drop {
                Some(head) if minted.through <= head => return Ok(()),
                Some(_) => {
                    return Err(StoreError::Io {
                        context: format!(
                            "session {}: entries through seq {} were not committed",
                            core.session, minted.through
                        ),
                        source: std::io::Error::other("their commit failed"),
                    });
                }
                None if core.durable_seq.load(Ordering::Acquire) >= minted.through.0 => {
                    return Ok(());
                }
                None => {}
            }
            moved.await;
        }
    }

    /// Entries nobody waits on (an observer coming or going): they get
    /// their seqs now and are committed with the session's next write, or
    /// within the commit delay — off the caller's path. Subscribers see
    /// them once committed, like every entry.
    pub async fn defer(
        &self,
        run_id: Option<RunId>,
        payloads: Vec<Payload>,
    ) -> Result<Seq, StoreError> {
        let minting = self.core.minting.lock().await;
        Ok(self.mint_deferred(minting, run_id, payloads))
    }

    /// [`SessionJournal::defer`] without waiting: `None` when another
    /// writer is minting right now (try again). What a host call that
    /// cannot wait (a guest's look at a timer) journals with.
    pub fn try_defer(&self, run_id: Option<RunId>, payloads: Vec<Payload>) -> Option<Seq> {
        let minting = self.core.minting.try_lock()?;
        Some(self.mint_deferred(minting, run_id, payloads))
    }

    /// Mint deferred entries and schedule their commit.
    fn mint_deferred(
        &self,
        mut minting: MintGuard<'_>,
        run_id: Option<RunId>,
        payloads: Vec<Payload>,
    ) -> Seq {
        let core = &self.core;
        let at_ms = now_ms();
        let mut seq = minting.last_seq;
        for payload in payloads {
            seq = seq.next();
            let event = core.event(seq, minting.segment, run_id, at_ms, payload);
            minting.pending.push(event);
        }
        minting.last_seq = seq;
        let batches = core.batches();
        drop(minting);
        // Its own timer: an emit's shorter one is not pushed back.
        let core = core.clone();
        tokio::spawn(async move {
            tokio::time::sleep(DEFER_DELAY).await;
            core.flush_when_due(batches).await;
        });
        seq
    }

    /// An emit minted ([`Self::mint_now`]): past [`MAX_PENDING`] the
    /// caller waits for a commit to take the batch.
    async fn minted(&self, (seq, full): (Seq, bool)) -> Result<Seq, StoreError> {
        if full {
            // Boxed: the rare wait keeps its state out of every emit's future.
            Box::pin(self.room()).await?;
        }
        Ok(seq)
    }

    /// Wait until the pending batch has room again: until a commit took it
    /// (the guest goes on minting while that commit is written — the
    /// commit ahead of it ends first), a failed commit dropped it, or the
    /// journal is sealed (its run's end takes it). A commit is started if
    /// none is.
    async fn room(&self) -> Result<(), StoreError> {
        let core = &self.core;
        loop {
            let taken = core.taken.notified();
            tokio::pin!(taken);
            taken.as_mut().enable();
            {
                let mut minting = core.minting.lock().await;
                minting.check(&core.session)?;
                let room = minting.pending.len() < MAX_PENDING
                    && minting.pending_bytes < MAX_PENDING_BYTES;
                if minting.sealed || room || minting.pending.is_empty() {
                    return Ok(());
                }
                kick(core, &mut minting, false);
            }
            taken.await;
        }
    }

    /// Mint an emit into the pending batch and schedule its commit; `true`
    /// when the batch is full (its writer should wait for the disk). `away`:
    /// the writer goes on without giving its worker back, so the commit is
    /// spawned from elsewhere (see `away.rs`).
    fn mint_now(
        &self,
        minting: &mut Minting,
        run_id: Option<RunId>,
        payload: Payload,
        json: Option<&Measured>,
        away: bool,
    ) -> (Seq, bool) {
        let core = &self.core;
        let seq = minting.last_seq.next();
        let (event, bytes) = match json {
            None => {
                let event = core.event(seq, minting.segment, run_id, now_ms(), payload);
                let bytes = event.line().len() as u64;
                (event, bytes)
            }
            Some(json) => {
                let at_ms = now_ms();
                // The line first, the entry made once, in its place; a
                // counted delta's line is the committer's to build.
                let (line, bytes) = match json.written() {
                    Some(json) => {
                        let line = minting.emit_line(&core.session, run_id, seq, at_ms, json);
                        let bytes = line.len() as u64;
                        (LineCache::built(line), bytes)
                    }
                    None => (
                        LineCache::default(),
                        minting.emit_line_len(&core.session, run_id, json.len()),
                    ),
                };
                let event = Arc::new(SessionEvent {
                    session_id: core.session.clone(),
                    segment_id: minting.segment,
                    run_id,
                    seq,
                    at_ms,
                    payload,
                    facts: None,
                    line,
                });
                (event, bytes)
            }
        };
        minting.last_seq = seq;
        if minting.pending.is_empty() {
            minting.pending_bytes = 0;
        }
        minting.pending_bytes += bytes + 1;
        minting.pending.push(event);
        let pending = minting.pending.len();
        if pending >= MAX_PENDING || minting.pending_bytes >= MAX_PENDING_BYTES {
            return (seq, true);
        }
        if pending >= BATCH || minting.pending_bytes >= BATCH_BYTES {
            if minting.kicked && pending.is_multiple_of(BATCH) && core.waiting() > 0 {
                // A commit waits for the one in flight: it builds these
                // lines meanwhile (`Core::commit_lock_building_ahead`; one
                // that begins to wait later builds them as it begins).
                // Woken from the worker a guest keeps, it would start only
                // at the guest's next yield, however soon the one in flight
                // ends (see `away.rs`).
                match away {
                    true => super::away::wake(&core.more),
                    false => core.more.notify_one(),
                }
            }
            kick(core, minting, away);
        } else if !minting.timer {
            minting.timer = true;
            let core = core.clone();
            let batches = core.batches();
            spawn(away, async move {
                tokio::time::sleep(COMMIT_DELAY).await;
                core.flush_when_due(batches).await;
            });
        }
        (seq, false)
    }

    /// The minting lock for one emit, when it needs no wait: the lock is
    /// free now, no commit has failed, and the pending batch has room. A
    /// guest's emit goes this way without a future of its own (see
    /// [`Emitter`]); `None` sends it the waiting way
    /// ([`Self::append_emit`]).
    pub fn try_emitter(&self) -> Option<Emitter<'_>> {
        // A commit holds the lock only to take the batch: a moment's spin
        // is cheaper than the waiting way, whose wake-up comes from the
        // committer's worker after its whole commit (25 µs an emit so).
        const SPINS: usize = 64;
        let minting = (0..SPINS).find_map(|_| {
            let minting = self.core.minting.try_lock();
            if minting.is_none() {
                std::hint::spin_loop();
            }
            minting
        })?;
        let room = minting.failed.is_none()
            && minting.pending.len() + 1 < MAX_PENDING
            && (minting.pending.is_empty() || minting.pending_bytes < MAX_PENDING_BYTES);
        room.then_some(Emitter {
            journal: self,
            minting,
        })
    }

    /// Make every pending entry durable now (a tool that emits without a
    /// run's end, such as the bench); the error of a commit that failed
    /// since the last append comes back here.
    pub async fn commit(&self) -> Result<(), StoreError> {
        self.core.flush().await?;
        self.core.minting.lock().await.check(&self.core.session)
    }

    /// A run's end is next: its pending entries stay for the terminal
    /// entry (so they and the end are one write, one sync), and every
    /// other writer waits until the end is written ([`Self::finish_then`])
    /// or [`Self::unseal`]. Returns the error of a commit that failed since
    /// the run's last append (commits in flight are waited for).
    pub async fn seal(&self) -> Result<(), StoreError> {
        let _durable = self.core.commit.lock().await;
        let mut minting = self.core.minting.lock().await;
        minting.sealed = true;
        minting.check(&self.core.session)
    }

    /// Open a sealed journal without writing the end (a run that lost
    /// authority writes nothing more): its pending entries are dropped.
    pub async fn unseal(&self) {
        let durable = self.core.commit.lock().await;
        let mut minting = self.core.minting.lock().await;
        if minting.sealed {
            minting.sealed = false;
            self.core.taken(&mut minting);
            if !minting.pending.is_empty() {
                minting.pending.clear();
                minting.last_seq = durable.last_seq;
                self.core.dropped_pending(durable.last_seq);
            }
            self.core.unsealed.notify_waiters();
        }
    }

    /// Whether entries are minted and not yet durable.
    pub fn has_pending(&self) -> bool {
        self.core
            .minting
            .try_lock()
            .is_none_or(|m| !m.pending.is_empty())
    }

    /// Start a new segment after the active one (compaction or branch):
    /// its first entries — `SegmentCreated { lineage }` and, for a
    /// compaction, its summary — go to the store with the switch, so a
    /// crash leaves either the old segment active or the new one complete.
    /// Pending entries are committed to the old segment first. Returns them.
    pub async fn start_segment(
        &self,
        compacted: Option<(String, Seq)>,
        branched_at: Option<Seq>,
    ) -> Result<Vec<SessionEvent>, StoreError> {
        let durable = self.core.writable().await;
        let core = self.core.clone();
        let events =
            detached(async move { core.switch_segment(durable, compacted, branched_at).await })
                .await?;
        Ok(owned(events))
    }

    /// The last generation the journal names as reserved (0: none).
    pub async fn last_generation(&self) -> Generation {
        self.core.commit.lock().await.last_generation
    }

    /// Append prebuilt entries (an import, such as a fork's copied
    /// history): `build` gets the first seq and the active segment and must
    /// return entries numbered densely from it.
    pub async fn import(
        &self,
        build: impl FnOnce(Seq, SegmentId) -> Vec<SessionEvent>,
    ) -> Result<Vec<SessionEvent>, StoreError> {
        let core = &self.core;
        let mut durable = core.writable().await;
        let (mut batch, events) = {
            let mut minting = core.minting.lock().await;
            let batch = std::mem::take(&mut minting.pending);
            let events = build(minting.last_seq.next(), minting.segment);
            if let Some(last) = events.last() {
                minting.last_seq = last.seq;
            }
            (batch, events)
        };
        batch.extend(events.iter().cloned().map(Arc::new));
        let core = core.clone();
        detached(async move { core.write(&mut durable, &batch).await }).await?;
        Ok(events)
    }

    /// The active segment.
    pub async fn active_segment(&self) -> SegmentId {
        self.core.minting.lock().await.segment
    }

    /// The terminal write of a run: `payload` and the facts `facts(seq)`
    /// builds for it go to the store in one call.
    pub async fn finish(
        &self,
        run_id: RunId,
        payload: LifecycleEvent,
        facts: impl FnOnce(Seq, u64) -> RunFacts,
    ) -> Result<SessionEvent, StoreError> {
        self.finish_then(run_id, payload, facts, Vec::new(), |_| {})
            .await
    }

    /// [`SessionJournal::finish`], calling `stored` with the run's facts
    /// once the terminal entry is durable and before its followers hear of
    /// it (so whoever sees the end of a run finds the run already let go of
    /// and counted). Pending entries go to the
    /// store in the same write, ahead of it, and `behind` (a claimant that
    /// leaves with the run) right after it.
    pub async fn finish_then(
        &self,
        run_id: RunId,
        payload: LifecycleEvent,
        facts: impl FnOnce(Seq, u64) -> RunFacts,
        behind: Vec<Payload>,
        stored: impl FnOnce(&RunFacts),
    ) -> Result<SessionEvent, StoreError> {
        debug_assert!(payload.is_terminal());
        let core = &self.core;
        let mut durable = core.commit.lock().await;
        let held = core.minting.hold().await;
        // The pending entries stay in place (and the journal sealed) until
        // the end is durable: a failed or abandoned end leaves them for the
        // retried one.
        let (seq, segment, mut all) = {
            let minting = held.get();
            let pending = minting.pending.clone();
            (minting.last_seq.next(), minting.segment, pending)
        };
        let at_ms = now_ms();
        let facts = facts(seq, at_ms);
        cairn_store::faults::crash_point("before-terminal");
        let event = Arc::new(SessionEvent {
            session_id: core.session.clone(),
            segment_id: segment,
            run_id: Some(run_id),
            seq,
            at_ms,
            payload: Payload::Lifecycle(payload),
            facts: Some(Box::new(facts.clone())),
            line: Default::default(),
        });
        let mut last = seq;
        let behind: Vec<Arc<SessionEvent>> = behind
            .into_iter()
            .map(|payload| {
                last = last.next();
                core.event(last, event.segment_id, None, at_ms, payload)
            })
            .collect();
        // The pending entries and the end: one store call.
        core.build_lines(&all);
        let began = std::time::Instant::now();
        core.store.finish(&all, &event, &behind, &facts).await?;
        // Tests: the end in the store a while before it is published.
        if cairn_store::faults::fault_point("end-published-late") {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        all.push(event.clone());
        all.extend(behind);
        core.observed(began, all.len());
        let was_sealed = {
            let mut minting = held.get();
            minting.pending.clear();
            minting.last_seq = last;
            core.taken(&mut minting);
            // The run that saw a failed commit has ended: later runs start
            // clean.
            minting.failed = None;
            std::mem::replace(&mut minting.sealed, false)
        };
        drop(held);
        stored(&facts);
        core.published(&mut durable, &all, last);
        drop(durable);
        if was_sealed {
            core.unsealed.notify_waiters();
        }
        Ok(SessionEvent::clone(&event))
    }

    /// The durable head now, without waiting for a commit in flight.
    pub fn durable_seq(&self) -> Seq {
        Seq(self
            .core
            .durable_seq
            .load(std::sync::atomic::Ordering::Acquire))
    }

    /// Of the entries pending now, how many have their line built, and
    /// how many there are (tests: a commit waiting for the one in flight
    /// builds them ahead).
    #[doc(hidden)]
    pub async fn pending_lines(&self) -> (usize, usize) {
        let minting = self.core.minting.lock().await;
        let built = minting.pending.iter().filter(|e| e.has_line()).count();
        (built, minting.pending.len())
    }

    /// Whether the pending batch's delayed commit is scheduled now (tests:
    /// the commit of a filled batch schedules the next one's,
    /// [`Core::flush_kicked`](super::commit::Core::flush_kicked)).
    #[doc(hidden)]
    pub async fn commit_scheduled(&self) -> bool {
        self.core.minting.lock().await.timer
    }

    /// How many commits wait for the one in flight now (tests: one at a
    /// time, [`Core::flush_when_due`](super::commit::Core::flush_when_due)).
    #[doc(hidden)]
    pub fn commits_waiting(&self) -> usize {
        self.core.waiting()
    }

    /// How far a reader of the store should take this session's entries
    /// as there, asked after it read them: while a write is in flight its
    /// entries may be in the store already, but they are not published
    /// (a run's end not yet counted, its followers not yet told) until
    /// the durable head moves past them. `None` when no write is in
    /// flight: the store holds what was published here (or what another
    /// instance wrote, on a shared store).
    pub fn published_head(&self) -> Option<Seq> {
        match self.core.commit.try_lock() {
            Ok(_) => None,
            Err(_) => Some(self.durable_seq()),
        }
    }

    /// The last seq minted, durable or not (a subscriber from there sees
    /// what comes after, once committed).
    pub async fn minted_seq(&self) -> Seq {
        self.core.minting.lock().await.last_seq
    }

    /// The last seq, once every pending entry is durable.
    pub async fn last_seq(&self) -> Seq {
        let _ = self.core.flush().await;
        self.core.commit.lock().await.last_seq
    }

    /// Follow the session from after `after` (0: from the start).
    pub fn subscribe(&self, after: Seq) -> Subscription {
        // Join the live tail before reading anything from the store.
        self.core.live.join();
        Subscription::new(
            self.core.session.clone(),
            self.core.store.clone(),
            self.core.live.clone(),
            after,
        )
    }

    /// Bytes (as journaled) the live window holds now.
    pub fn window_bytes(&self) -> u64 {
        self.core.live.bytes()
    }

    /// How many subscribers follow this session now.
    pub fn subscriber_count(&self) -> usize {
        self.core.live.receivers()
    }
}

fn owned(events: Vec<Arc<SessionEvent>>) -> Vec<SessionEvent> {
    events
        .into_iter()
        .map(|e| Arc::try_unwrap(e).unwrap_or_else(|e| SessionEvent::clone(&e)))
        .collect()
}

/// One emit's hold on the minting lock, taken without waiting
/// ([`SessionJournal::try_emitter`]): whatever the emitter checks while
/// holding it, its entry's seq follows the last one minted.
pub struct Emitter<'a> {
    journal: &'a SessionJournal,
    minting: MintGuard<'a>,
}

impl Emitter<'_> {
    /// [`SessionJournal::append_emit`] now: the entry joins the pending
    /// batch, built around its payload's JSON `json`. A batch it fills is
    /// committed at once, without this emit waiting for it (the emitter
    /// took the lock only with room for one more: the next emit waits).
    pub fn append(mut self, run_id: Option<RunId>, payload: Payload, json: &Measured) -> Seq {
        let (seq, full) =
            self.journal
                .mint_now(&mut self.minting, run_id, payload, Some(json), true);
        if full {
            kick(&self.journal.core, &mut self.minting, true);
        }
        seq
    }
}

/// Start a commit of the pending batch now, unless one is started.
fn kick(core: &Arc<Core>, minting: &mut Minting, away: bool) {
    if !minting.kicked {
        minting.kicked = true;
        let core = core.clone();
        spawn(away, async move { core.flush_kicked().await });
    }
}

/// Spawn a commit's task: from the away thread when its writer keeps its
/// worker (see `away.rs`), else from here.
fn spawn(away: bool, task: impl Future<Output = ()> + Send + 'static) {
    match away {
        true => super::away::spawn(task),
        false => drop(tokio::spawn(task)),
    }
}
