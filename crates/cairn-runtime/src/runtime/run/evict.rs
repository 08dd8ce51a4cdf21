//! Idle eviction: a run whose guest waits on a durable timer for longer
//! than `[runs] evict_idle_ms` gives its instance up (its linear memory,
//! stack and pool slot) and keeps only its task and context. Shortly
//! before the timer is due the run is restored by replay into a fresh
//! generation — `GenerationReserved` and `ResumedByReplay`, as a restore
//! after a crash — and goes on live from the timer. The journal already
//! holds everything the guest did: dropping the instance is a crash of
//! that one run, and its restore is the tested one.
//!
//! Only a run with nothing else under way is evicted: no decision wait,
//! host call, emit or outgoing request (see [`RunCtx::inflight`]), no
//! child it spawned (its loans live in this generation), not itself a
//! child, not cancelled, parked or failed.

use super::*;

/// How much before its timer is due an evicted run is restored: the
/// replay happens while the timer still runs, so the guest wakes on time.
const WAKE_EARLY_MS: u64 = 200;

/// How an execution ended.
pub(crate) enum Executed {
    /// The instance returned or trapped.
    Ended(Result<Outcome, ErrorOrCancel>),
    /// The instance was dropped while its guest waited on a timer due at
    /// this wall time (ms).
    Evicted(u64),
}

impl RunCtx {
    /// Let the run be evicted from now on after waits of `ms` or more (0:
    /// never).
    pub(crate) fn evict_after(&self, ms: u64) {
        self.evict_after_ms.store(ms, Ordering::Relaxed);
    }

    /// Timer `id` (due at `due_ms`) is not ready at this look.
    pub(super) fn timer_pending(&self, id: u64, due_ms: u64) {
        if self.evict_after_ms.load(Ordering::Relaxed) > 0 {
            self.waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id, due_ms);
        }
    }

    /// The guest waits on timer `id`, due at `due_ms` (now is `now_ms`):
    /// when the earliest timer it holds unfired is far enough away, the
    /// task is offered the instance (a `poll` of several wakes on the
    /// first to fire).
    pub(super) fn timer_waits(&self, id: u64, due_ms: u64, now_ms: u64) {
        let after = self.evict_after_ms.load(Ordering::Relaxed);
        if after == 0 {
            return;
        }
        self.timer_pending(id, due_ms);
        if self
            .earliest_wait()
            .is_some_and(|earliest| earliest.saturating_sub(now_ms) >= after)
        {
            self.idle.send_replace(Some(due_ms));
        }
    }

    /// Timer `id` fired, or the guest let it go.
    pub(super) fn timer_done(&self, id: u64) {
        if self.evict_after_ms.load(Ordering::Relaxed) > 0 {
            self.waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
        }
    }

    /// The earliest timer the guest holds unfired (a replayed one not yet
    /// ready is due in the past: the run is not idle while it replays).
    fn earliest_wait(&self) -> Option<u64> {
        let waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        waiting.values().copied().min()
    }

    /// Whether the instance may go now, for the wait it is in (until the
    /// earliest timer it waits on).
    fn may_evict(&self) -> Option<u64> {
        let after = self.evict_after_ms.load(Ordering::Relaxed);
        let due_ms = self.earliest_wait()?;
        // The offer was made a moment ago, for a wait of at least `after`.
        let slack = (after / 10).min(100);
        (after > 0
            && due_ms.saturating_sub(crate::fsutil::now_ms()) + slack >= after
            && self.inflight.load(Ordering::SeqCst) == 0
            && self.spawned.load(Ordering::Relaxed) == 0
            && self.cancel.borrow().is_none()
            && self.park.borrow().is_none()
            && self.failure().is_none()
            && !self.finishing.load(Ordering::SeqCst))
        .then_some(due_ms)
    }

    /// Back to where a restore starts: the counts a replay makes again from
    /// zero, and the journal's script of the run to feed back.
    fn rewind(&self, script: Script) {
        for count in [
            &self.events,
            &self.event_bytes,
            &self.spawned,
            &self.host_call_ids,
            &self.host_call_count,
            &self.model_calls,
            &self.input_tokens,
            &self.output_tokens,
            &self.model_wall_ms,
            &self.tool_calls,
            &self.http_requests,
        ] {
            count.store(0, Ordering::Relaxed);
        }
        self.idle.send_replace(None);
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.set_script(script);
        shift(&self.activity, Activity::Waiting, Activity::Running);
    }
}

/// Run the instance until it ends, or until its guest waits on a timer
/// long enough to evict it for (then the instance is dropped, unwinding
/// the guest's stack, and the due time returned).
pub(crate) async fn execute(
    components: &crate::component::Components,
    ctx: &Arc<RunCtx>,
    prepared: &Prepared,
    sandbox: Sandbox,
    start: RunStart,
) -> Executed {
    let run = super::task::execute(components, ctx, prepared, sandbox, start);
    tokio::pin!(run);
    let mut idle = ctx.idle.subscribe();
    idle.borrow_and_update();
    loop {
        tokio::select! {
            outcome = &mut run => return Executed::Ended(outcome),
            changed = idle.changed() => {
                if changed.is_err() {
                    return Executed::Ended(run.await);
                }
                let offered = idle.borrow_and_update().is_some();
                if offered && let Some(due) = ctx.may_evict() {
                    // Suspended, not running: the limit watcher does not
                    // walk the worktree meanwhile.
                    shift(&ctx.activity, Activity::Running, Activity::Waiting);
                    return Executed::Evicted(due);
                }
            }
        }
    }
}

/// Wait, evicted, until shortly before `due_ms`; a cancel (a deadline, a
/// broken limit, the host's shutdown) ends the run where it is instead.
pub(crate) async fn sleep(ctx: &RunCtx, due_ms: u64) -> Result<(), ErrorOrCancel> {
    let left = due_ms
        .saturating_sub(WAKE_EARLY_MS)
        .saturating_sub(crate::fsutil::now_ms());
    let mut cancel = ctx.cancel.subscribe();
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(left)) => Ok(()),
        _ = cancel.wait_for(|c| c.is_some()) => Err(ErrorOrCancel::error(
            FailureCode::Interrupted,
            "the run ended while evicted",
        )),
    }
}

/// The evicted run's restore: its `Started` entry, seed and first seq
/// from the journal, with the context rewound to replay the journal's
/// script.
pub(crate) async fn replan(env: &RunEnv, ctx: &RunCtx) -> Result<ReplayPlan, ErrorOrCancel> {
    let storage = |e: String| ErrorOrCancel::error(FailureCode::Storage, e);
    // Everything the guest did is durable before it is read back.
    ctx.journal.commit().await.map_err(|e| {
        storage(format!(
            "cannot commit the run's entries before its restore: {e}"
        ))
    })?;
    let items = env
        .store
        .read(&ctx.session, Seq(0), usize::MAX)
        .await
        .map_err(|e| storage(format!("cannot read the journal to restore the run: {e}")))?;
    let events: Vec<SessionEvent> = items
        .into_iter()
        .filter_map(|i| match i {
            crate::store::JournalItem::Event(e) => Some(*e),
            crate::store::JournalItem::Unknown { .. } => None,
        })
        .collect();
    let run = ctx.run_id;
    let started = events
        .iter()
        .find(|e| {
            e.run_id == Some(run)
                && matches!(
                    e.payload,
                    Payload::Lifecycle(LifecycleEvent::Started { .. })
                )
        })
        .cloned()
        .ok_or_else(|| storage(format!("the journal holds no start of run {run}")))?;
    let Payload::Lifecycle(LifecycleEvent::Started { seed, .. }) = &started.payload else {
        unreachable!("found as a Started entry")
    };
    let seed = *seed;
    let first_seq = events
        .iter()
        .find(|e| e.run_id == Some(run))
        .map_or(started.seq, |e| e.seq);
    ctx.rewind(Script::of_run(&events, run, false));
    Ok(ReplayPlan {
        seed,
        first_seq,
        started,
    })
}
