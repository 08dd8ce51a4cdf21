//! The run task: from the reservation to the one terminal write, with the
//! limit watcher beside it.

use super::limit_watch::Watched;
use super::ready::{Ready, ready};
use super::*;
use crate::runtime::FirstCommit;

/// A restore: the interrupted run's `Started` entry and its script.
pub(crate) struct ReplayPlan {
    pub started: SessionEvent,
    pub seed: u64,
    pub first_seq: Seq,
}

/// What a run task is given.
pub(crate) struct RunPlan {
    pub ctx: Arc<RunCtx>,
    pub worker_id: WorkerId,
    pub prepared: Arc<Prepared>,
    pub prompt: String,
    pub tools: Option<String>,
    pub liveness: Liveness,
    pub timeout_ms: Option<u64>,
    pub continues: Option<RunId>,
    pub resumes: Option<RunId>,
    /// Resume it at the host's next start should it park.
    pub resume_on_start: bool,
    pub checkpoint: Option<Vec<u8>>,
    pub previous_generation: Option<Generation>,
    /// The component to bind an unbound worker to, with the reservation.
    pub bind: Option<String>,
    /// The last generation the journal names (a restore reserves past it).
    pub generation_floor: Option<Generation>,
    pub replay: Option<ReplayPlan>,
    /// When its first batch is committed.
    pub first_commit: FirstCommit,
    /// Told once the run's first batch (reservation and start) is durable.
    pub durable: Option<tokio::sync::oneshot::Sender<()>>,
    /// Whether the worker may be a child (its record named a parent when
    /// the run was planned, or nobody looked): only a child has a loan.
    pub child: bool,
}

/// Run to the end and make the terminal write. Returns the run's facts.
pub(crate) async fn run_task(
    env: RunEnv,
    worker_dir: WorkerDir,
    mut plan: RunPlan,
) -> Result<RunFacts, String> {
    let ctx = plan.ctx.clone();

    // The worker's directory handles serve the start; the run holds none
    // while it lives (a waiting run costs no descriptors for them).
    let live_entry = worker_dir.live_entry();
    let mut worker_dir = Some(worker_dir);
    // A run that is not a child may leave memory while it waits on a far
    // timer or a slow decision (`evict.rs`); each restore is a pass of
    // this loop.
    if !plan.child {
        ctx.evict_after(env.evict_idle_ms);
    }
    let mut held = Held {
        generation: Generation(0),
        evictions: 0,
        superseded: None,
        watched: None,
        first_seq: plan.replay.as_ref().map(|r| r.first_seq),
        started: Instant::now(),
        started_at_ms: crate::fsutil::now_ms(),
        live_entry,
    };
    let result: Result<Outcome, ErrorOrCancel> = async { loop {
        let worker_dir = match worker_dir.take() {
            Some(w) => w,
            None => env.workers.open_worker_any(plan.worker_id).map_err(|e| {
                ErrorOrCancel::error(
                    FailureCode::Generation,
                    format!("cannot open the worker to restore its evicted run: {e}"),
                )
            })?,
        };
        // Laid out in a future of its own: what it holds is freed before
        // the controller starts, not kept in the run task while it waits.
        let Ready {
            sandbox,
            start,
            artifacts,
            meter,
        } = Box::pin(ready(&env, &ctx, &mut plan, worker_dir, &mut held)).await?;
        let generation = held.generation;
        let outcome = match evict::execute(&env.components, &ctx, &plan.prepared, sandbox, start).await {
            evict::Executed::Ended(outcome) => outcome,
            evict::Executed::Evicted(idle) => {
                ctx.serve_seams(Vec::new());
                tracing::debug!(run_id = %ctx.run_id, %generation, due_ms = idle.due_ms, "evicted while its controller waits");
                env.evicted.0.inc();
                env.evicted.1.inc();
                let slept = evict::sleep(&env, &ctx, &idle).await;
                env.evicted.0.dec();
                slept?;
                plan.replay = Some(evict::replan(&env, &ctx).await?);
                plan.generation_floor = Some(generation);
                held.superseded = Some(generation);
                plan.first_commit = FirstCommit::Now;
                plan.bind = None;
                plan.durable = None;
                held.evictions += 1;
                continue;
            }
        };
        if outcome.is_ok() && meter.is_none_or(|m| m.touched()) {
            // The worktree as the run leaves it: one over its limits ends
            // the run failed, never a next generation silently empty.
            let budget = crate::worktree::Budget::of(&ctx.limits);
            let breach = tokio::task::spawn_blocking(move || {
                let dir =
                    cap_std::fs::Dir::open_ambient_dir(&artifacts, cap_std::ambient_authority())
                        .ok()?;
                crate::worktree::usage(&dir, &budget).ok().and_then(|(_, b)| b)
            })
            .await
            .ok()
            .flatten();
            if let Some((limit, value, max)) = breach {
                ctx.break_limit(limit, value, max);
            }
        }
        break outcome;
    } }
    .await;
    // The end in a future of its own, as the start: what only it holds
    // is not kept in the run task while the controller runs.
    Box::pin(end(&env, &plan, held, result)).await
}

/// What the run task carries across its generations (a restore after an
/// eviction is a new generation of the same run) and into its end.
pub(super) struct Held {
    /// The generation it runs in now (0 before the reservation).
    pub(super) generation: Generation,
    /// Restores after an eviction so far.
    pub(super) evictions: u64,
    /// The generation an evicted run left: its worktree goes once the
    /// restore's is laid out (the restore lays out from the generation
    /// before the run, never from it).
    pub(super) superseded: Option<Generation>,
    /// Where the limit watcher walks.
    pub(super) watched: Option<Arc<Mutex<Watched>>>,
    /// The run's first entry.
    pub(super) first_seq: Option<Seq>,
    /// When the task began (its usage counts from here).
    pub(super) started: Instant,
    pub(super) started_at_ms: u64,
    /// The worker's line in the live index, cleared at the end.
    pub(super) live_entry: crate::worker::LiveEntry,
}

/// The run's end: the terminal entry (retried while the store refuses
/// it), the worker's bookkeeping, the parent told.
async fn end(
    env: &RunEnv,
    plan: &RunPlan,
    held: Held,
    result: Result<Outcome, ErrorOrCancel>,
) -> Result<RunFacts, String> {
    let ctx = &plan.ctx;
    let (generation, first_seq, started, started_at_ms) = (
        held.generation,
        held.first_seq,
        held.started,
        held.started_at_ms,
    );
    let live_entry = held.live_entry;
    ctx.activity.send_replace(Activity::Ended);
    ctx.serve_seams(Vec::new());
    // On a shared store the worktree outlives this instance: the next
    // generation, wherever it runs, starts from this snapshot.
    if generation.0 > 0 {
        env.supervisor
            .generation_stopped(
                plan.worker_id,
                generation,
                crate::worktree::Budget::of(&ctx.limits),
            )
            .await;
    }
    // Retention: older generations' worktrees go once this one has ended.
    let keep = env.keep_generations;
    if generation.0 > keep
        && keep > 0
        && let Ok(handle) = env.workers.open_worker_any(plan.worker_id)
    {
        tokio::task::spawn_blocking(move || {
            if let Err(e) = handle.prune_worktrees(generation, keep) {
                tracing::warn!("worker {}: cannot prune old worktrees: {e}", handle.id());
            }
        });
    }
    if ctx
        .failure()
        .is_some_and(|f| f.code == FailureCode::ReplayDiverged)
        && let Err(e) = env
            .workers
            .open_worker_any(plan.worker_id)
            .and_then(|w| w.mark_stale())
    {
        tracing::warn!("cannot mark worker {} stale: {e}", plan.worker_id);
    }

    // The run's end is next: its pending events wait to go with the
    // terminal entry (one write); a commit that failed since its last
    // append ends it failed.
    if let Err(e) = ctx.journal.seal().await {
        ctx.refused("its events", e);
    }
    let (terminal, status, outcome, checkpoint) = terminal_of(env, ctx, started, result).await;
    let usage = ctx.usage(started);
    let pending: Vec<DecisionId> = env
        .broker
        .pending(Some(&ctx.session))
        .into_iter()
        .filter(|p| p.run_id == ctx.run_id)
        .map(|p| p.decision_id)
        .collect();
    for id in &pending {
        env.broker.withdraw(id);
    }
    let component = plan.prepared.digest().to_string();
    let (run_id, session) = (ctx.run_id, ctx.session.clone());
    let (continues, resumes) = (plan.continues, plan.resumes);
    if let Some(lost) = ctx
        .failure()
        .filter(|f| f.code == FailureCode::LostAuthority)
    {
        // Another writer holds the session: write nothing more, and let
        // the next open of the session read what that writer wrote.
        ctx.journal.unseal().await;
        env.supervisor.lost_authority(&session);
        return Err(format!(
            "run {run_id} ended without a terminal entry: {}",
            lost.message
        ));
    }
    let facts = |seq: Seq, at_ms: u64| RunFacts {
        run_id,
        session_id: session.clone(),
        component: component.clone(),
        status,
        outcome,
        usage,
        started_at_ms,
        ended_at_ms: at_ms,
        first_seq: first_seq.unwrap_or(seq),
        last_seq: seq,
        generation,
        checkpoint: checkpoint.clone(),
        pending_decisions: pending.clone(),
        continues,
        resumes,
    };
    // A disk that refuses the terminal entry (full, failing) is retried
    // until it takes it, so no run stays `running` without a task; the
    // session's run slot stays held meanwhile.
    let mut backoff = Duration::from_millis(50);
    let behind = env.supervisor.leaving_with_run(&session);
    ctx.finishing.store(true, Ordering::SeqCst);
    // Once the end is durable nothing is left to restore, unless it parked
    // asking to be resumed at the next start: the worker leaves the live
    // index before the session takes its next run (which lists it again).
    let resumes_at_start =
        plan.resume_on_start && matches!(&terminal, LifecycleEvent::Parked { .. });
    loop {
        let stored = |facts: &RunFacts| {
            if !resumes_at_start && let Err(e) = live_entry.clear() {
                tracing::warn!(run_id = %run_id, "cannot take the worker out of the live index: {e}");
            }
            ctx.ended.store(true, Ordering::SeqCst);
            env.supervisor.run_counted(facts);
        };
        match ctx
            .journal
            .finish_then(run_id, terminal.clone(), &facts, behind.clone(), stored)
            .await
        {
            Ok(e) => {
                let facts = *e.facts.expect("a terminal event carries its facts");
                // Tests: the end readable in the journal a while before
                // the task publishes its facts.
                if crate::fsutil::fault_point("facts-late") {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }

                // A child's end reaches its parent (loan, metadata, a hint).
                let shutdown = matches!(
                    &terminal,
                    LifecycleEvent::Cancelled {
                        reason: CancelReason::Shutdown,
                        ..
                    }
                );
                // Before anyone waiting on the run hears of its end. A
                // worker that was no child when the run was planned is none
                // now (a parent is named only at a worker's creation).
                if plan.child {
                    env.supervisor
                        .run_ended(plan.worker_id, &session, run_id, facts.status, shutdown)
                        .await;
                } else if !shutdown && ctx.spawned.load(Ordering::Relaxed) > 0 {
                    env.supervisor.root_ended(plan.worker_id);
                }
                return Ok(facts);
            }
            // A disk that refused, a database that is away: the end is
            // retried until it is written (the run stays live meanwhile).
            Err(
                crate::store::StoreError::Io { .. }
                | crate::store::StoreError::Database { .. }
                | crate::store::StoreError::Unavailable { .. },
            ) if !env.supervisor.draining() => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            Err(e) => {
                ctx.journal.unseal().await;
                return Err(format!("cannot journal the end of run {run_id}: {e}"));
            }
        }
    }
}

/// Run the instance until it returns or traps; a cancel is noticed by its
/// next host call, and by the epoch callback after the grace. (A plain
/// function returning the future: the sandbox and the start go straight
/// into the instance's future, not also into this one's arguments, which
/// a waiting run would keep.)
pub(crate) fn execute<'a>(
    components: &'a crate::component::Components,
    ctx: &'a Arc<RunCtx>,
    prepared: &'a Prepared,
    sandbox: Sandbox,
    start: RunStart,
) -> impl Future<Output = Result<Outcome, ErrorOrCancel>> + 'a {
    // Boxed: moved into the `select!` below, it would be held twice.
    let run = Box::pin(components.run(prepared, sandbox, start));
    async move {
        let mut cancel_rx = ctx.cancel.subscribe();
        let outcome = tokio::select! {
            outcome = run => outcome,
            _ = async {
                let _ = cancel_rx.wait_for(|c| c.is_some()).await;
                tokio::time::sleep(CANCEL_GRACE * 4).await;
            } => Err(RunTrap::Trap("the controller did not stop after cancel".into())),
        };
        match outcome {
            Ok(o) => Ok(o),
            Err(RunTrap::Setup(m)) => Err(ErrorOrCancel::error(FailureCode::Setup, m)),
            Err(RunTrap::Trap(m)) => Err(ErrorOrCancel::error(FailureCode::Trap, m)),
            Err(RunTrap::TableFull(m)) => {
                // The WASI table refused a handle: the open-file cap, by name.
                let max = ctx.limits.open_files;
                ctx.break_limit("open_files", max.saturating_add(1), max);
                Err(ErrorOrCancel::error(FailureCode::Trap, m))
            }
        }
    }
}

type Terminal = (
    LifecycleEvent,
    RunStatus,
    Option<FinishOutcome>,
    Option<String>,
);

async fn terminal_of(
    env: &RunEnv,
    ctx: &RunCtx,
    started: Instant,
    result: Result<Outcome, ErrorOrCancel>,
) -> Terminal {
    let failed = |error: ErrorInfo| {
        (
            LifecycleEvent::Failed { error },
            RunStatus::Failed,
            None,
            None,
        )
    };
    if let Some(error) = ctx.failure() {
        return failed(error);
    }
    if let Some(c) = ctx.cancelled() {
        return (
            LifecycleEvent::Cancelled {
                reason: c.reason,
                message: c.message,
            },
            RunStatus::Cancelled,
            None,
            None,
        );
    }
    let finished = |outcome, text| {
        (
            LifecycleEvent::Finished {
                usage: ctx.usage(started),
                outcome,
                text,
            },
            RunStatus::Finished,
            Some(outcome),
            None,
        )
    };
    // The end of a run counts like any entry: its text against the
    // event and journal limits, a checkpoint against `checkpoint_bytes`.
    let over = match &result {
        Ok(Outcome::Finished(text) | Outcome::Question(text)) => {
            ctx.admit(&[text.len() as u64 + 256]).err()
        }
        // The code is journaled twice (in the message and the details).
        Ok(Outcome::Failed { code, message }) => ctx
            .admit(&[2 * code.len() as u64 + message.len() as u64 + 256])
            .err(),
        Ok(Outcome::Parked(bytes)) if bytes.len() as u64 > ctx.limits.checkpoint_bytes => {
            Some(ctx.break_limit(
                "checkpoint_bytes",
                bytes.len() as u64,
                ctx.limits.checkpoint_bytes,
            ))
        }
        _ => None,
    };
    if over.is_some()
        && let Some(error) = ctx.failure()
    {
        return failed(error);
    }
    match result {
        Ok(Outcome::Finished(text)) => finished(FinishOutcome::Answer, text),
        Ok(Outcome::Question(text)) => finished(FinishOutcome::Question, text),
        Ok(Outcome::Parked(bytes)) => match env
            .store
            .put_checkpoint(&ctx.session, ctx.run_id, &bytes)
            .await
        {
            Ok(key) => (
                LifecycleEvent::Parked {
                    checkpoint: key.clone(),
                },
                RunStatus::Parked,
                None,
                Some(key),
            ),
            Err(e) => failed(ErrorInfo {
                code: FailureCode::Checkpoint,
                message: format!("cannot store the park checkpoint: {e}"),
                details: None,
            }),
        },
        Ok(Outcome::Failed { code, message }) => failed(ErrorInfo {
            code: FailureCode::ControllerError,
            message: format!("{code}: {message}"),
            details: Some(serde_json::json!({ "controller_code": code })),
        }),
        Err(ErrorOrCancel { code, message }) => failed(ErrorInfo {
            code,
            message,
            details: None,
        }),
    }
}

pub(crate) struct ErrorOrCancel {
    pub code: FailureCode,
    pub message: String,
}

impl ErrorOrCancel {
    pub(crate) fn error(code: FailureCode, message: impl Into<String>) -> Self {
        ErrorOrCancel {
            code,
            message: message.into(),
        }
    }
}

pub(super) fn rand_seed() -> u64 {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"))
}
