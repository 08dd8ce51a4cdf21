//! Idle eviction: a run whose guest waits — on a durable timer, or on a
//! decision — for at least `[runs] evict_idle_ms` gives its instance up
//! (its linear memory, stack and pool slot) and keeps only its task and
//! context. When the decision is answered (or the run asked to park), or
//! shortly before the timer or the decision's timeout is due, the run is
//! restored by replay into a fresh generation — `GenerationReserved` and
//! `ResumedByReplay`, as a restore after a crash — and goes on live from
//! there. The journal already holds everything the guest did: dropping
//! the instance is a crash of that one run, and its restore is the tested
//! one. The decision stays pending meanwhile (listed, answerable from any
//! seam; its webhook delivery goes on); its answer is journaled first, as
//! always, and the replay reads it there.
//!
//! Only a run with nothing else under way is evicted: no host call, emit
//! or outgoing request (see [`RunCtx::inflight`]), no child it spawned
//! (its loans live in this generation), not itself a child, not
//! cancelled, parked or failed.

use super::*;

/// How much before its timer is due an evicted run is restored: the
/// replay happens while the timer still runs, so the guest wakes on time.
const WAKE_EARLY_MS: u64 = 200;

/// How an execution ended.
pub(crate) enum Executed {
    /// The instance returned or trapped.
    Ended(Result<Outcome, ErrorOrCancel>),
    /// The instance was dropped while its guest waited.
    Evicted(Idle),
}

/// What an evicted run waits for.
pub(crate) struct Idle {
    /// The wall time (ms) it is due: the earliest timer, or the decision's
    /// timeout (`u64::MAX`: none).
    pub due_ms: u64,
    /// The decision it waits on, if it does.
    pub decision: Option<DecisionId>,
}

/// The decision a guest waits on.
pub(crate) struct Deciding {
    id: DecisionId,
    /// When its timeout is due (wall ms), if it has one.
    due_ms: Option<u64>,
    /// When the wait began: a decision is waited out in memory for
    /// `evict_idle_ms` first (most are answered sooner).
    since: tokio::time::Instant,
}

/// Whether an instance may go.
enum Verdict {
    Now(Idle),
    /// Not yet: ask again then.
    At(tokio::time::Instant),
    No,
}

/// Clears [`RunCtx::deciding`] when the wait ends.
pub(super) struct DecidingGuard<'a>(&'a RunCtx);

impl Drop for DecidingGuard<'_> {
    fn drop(&mut self) {
        *self.0.deciding.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
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
            self.idle.notify_one();
        }
    }

    /// The guest is blocked in a timer's wait (`true`), or that wait
    /// ended — the timer is due, or the poll it was part of returned.
    pub(super) fn timer_blocked(&self, blocked: bool) {
        match blocked {
            true => self.timer_blocks.fetch_add(1, Ordering::SeqCst),
            false => self.timer_blocks.fetch_sub(1, Ordering::SeqCst),
        };
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

    /// The guest waits on decision `id` (its timeout `timeout` from now):
    /// offered to the task until the guard drops.
    pub(super) fn deciding_on(
        &self,
        id: &DecisionId,
        timeout: Option<Duration>,
    ) -> DecidingGuard<'_> {
        let after = self.evict_after_ms.load(Ordering::Relaxed);
        if after > 0 {
            let due_ms =
                timeout.map(|t| crate::fsutil::now_ms().saturating_add(t.as_millis() as u64));
            *self.deciding.lock().unwrap_or_else(|p| p.into_inner()) = Some(Deciding {
                id: id.clone(),
                due_ms,
                since: tokio::time::Instant::now(),
            });
            if timeout.is_none_or(|t| t.as_millis() as u64 >= 2 * after) {
                self.idle.notify_one();
            }
        }
        DecidingGuard(self)
    }

    /// Whether the instance may go now, and what it then waits for (the
    /// decision it has waited on for `evict_idle_ms`, or the earliest
    /// timer it holds when that is at least as far away).
    /// `waited_out`: asked again once a decision's wait in memory is over
    /// (only a decision wait then counts: the guest may be running).
    fn may_evict(&self, waited_out: bool) -> Verdict {
        let after = self.evict_after_ms.load(Ordering::Relaxed);
        let now = crate::fsutil::now_ms();
        // The offer was made a moment ago, for a wait of at least `after`.
        let slack = (after / 10).min(100);
        let idle = {
            let deciding = self.deciding.lock().unwrap_or_else(|p| p.into_inner());
            match (&*deciding, self.earliest_wait()) {
                (Some(d), _) => {
                    let wake = d.since + Duration::from_millis(after);
                    if tokio::time::Instant::now() < wake {
                        return Verdict::At(wake);
                    }
                    Idle {
                        due_ms: d.due_ms.unwrap_or(u64::MAX),
                        decision: Some(d.id.clone()),
                    }
                }
                // Only while the guest is blocked in a timer's wait: a
                // look's offer outlives a poll another timer answered.
                (None, Some(timer))
                    if !waited_out && self.timer_blocks.load(Ordering::SeqCst) > 0 =>
                {
                    Idle {
                        due_ms: timer,
                        decision: None,
                    }
                }
                (None, _) => return Verdict::No,
            }
        };
        let quiet = after > 0
            && idle.due_ms.saturating_sub(now) + slack >= after
            && self.inflight.load(Ordering::SeqCst) == 0
            && self.spawned.load(Ordering::Relaxed) == 0
            && self.cancel.borrow().is_none()
            && self.park.borrow().is_none()
            && self.failure().is_none()
            && !self.finishing.load(Ordering::SeqCst);
        match quiet {
            true => Verdict::Now(idle),
            false => Verdict::No,
        }
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
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.set_script(script);
        shift(&self.activity, Activity::Waiting, Activity::Running);
    }
}

/// [`super::task::execute`], or until its guest waits — on a timer far
/// enough away, or long enough on a decision — and may be evicted: then
/// the instance is dropped (the guest's stack unwound) and what the run
/// waits for is returned.
pub(crate) fn execute<'a>(
    components: &'a crate::component::Components,
    ctx: &'a Arc<RunCtx>,
    prepared: &'a Prepared,
    sandbox: Sandbox,
    start: RunStart,
) -> impl Future<Output = Executed> + 'a {
    // Made here, not in the future below: the sandbox and the start are
    // not kept as its arguments while the run waits (and boxed: pinned in
    // the future below, it would be held there twice).
    let mut run = Box::pin(super::task::execute(
        components, ctx, prepared, sandbox, start,
    ));
    async move {
        let mut recheck: Option<tokio::time::Instant> = None;
        loop {
            let waited_out = tokio::select! {
                outcome = &mut run => return Executed::Ended(outcome),
                _ = ctx.idle.notified() => false,
                _ = async { tokio::time::sleep_until(recheck.unwrap_or_else(tokio::time::Instant::now)).await }, if recheck.is_some() => true,
            };
            recheck = None;
            match ctx.may_evict(waited_out) {
                Verdict::Now(idle) => {
                    // Suspended, not running: the limit watcher does not walk
                    // the worktree meanwhile.
                    shift(&ctx.activity, Activity::Running, Activity::Waiting);
                    ctx.evicted.store(true, Ordering::Relaxed);
                    return Executed::Evicted(idle);
                }
                Verdict::At(at) => recheck = Some(at),
                Verdict::No => {}
            }
        }
    }
}

/// Wait, evicted, until the decision is answered (or the run asked to
/// park), or until shortly before it is due; a cancel (a deadline, a
/// broken limit, the host's shutdown) ends the run where it is instead.
pub(crate) async fn sleep(env: &RunEnv, ctx: &RunCtx, idle: &Idle) -> Result<(), ErrorOrCancel> {
    let due = async {
        match idle.due_ms {
            u64::MAX => std::future::pending().await,
            due_ms => {
                let left = due_ms
                    .saturating_sub(WAKE_EARLY_MS)
                    .saturating_sub(crate::fsutil::now_ms());
                tokio::time::sleep(Duration::from_millis(left)).await
            }
        }
    };
    // The decision stays pending (listed, its webhook delivery going
    // on); its answer, journaled first, wakes the run here. Gone already:
    // it is being answered, and the restore reads the answer.
    let answered = async {
        let Some(id) = &idle.decision else {
            return std::future::pending().await;
        };
        if let Some(rx) = env.broker.rewait(id) {
            let _ = rx.await;
        }
    };
    let mut park = ctx.park.subscribe();
    let parks = async {
        match idle.decision {
            Some(_) => {
                let _ = park.wait_for(|p| p.is_some()).await;
            }
            None => std::future::pending().await,
        }
    };
    let mut cancel = ctx.cancel.subscribe();
    tokio::select! {
        _ = due => Ok(()),
        _ = answered => Ok(()),
        _ = parks => Ok(()),
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
        .filter_map(crate::store::JournalItem::into_event)
        .collect();
    let run = ctx.run_id;
    let (first_seq, started) = match crate::runtime::state::runs_of(&events)
        .into_iter()
        .find(|(r, _, _)| *r == run)
    {
        Some((_, Some(started), _)) => (
            events
                .iter()
                .find(|e| e.run_id == Some(run))
                .map_or(started.seq, |e| e.seq),
            started,
        ),
        _ => return Err(storage(format!("the journal holds no start of run {run}"))),
    };
    let Payload::Lifecycle(LifecycleEvent::Started { seed, .. }) = &started.payload else {
        unreachable!("runs_of keeps Started entries only")
    };
    let seed = *seed;
    ctx.rewind(Script::of_run(&events, run, false));
    Ok(ReplayPlan {
        seed,
        first_seq,
        started,
    })
}
