//! The run task: from the reservation to the one terminal write, with the
//! limit watcher beside it.

use super::limit_watch::{Watched, watch_limits};
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

/// What the run task carries from one generation to the next (a restore
/// after an eviction is a new generation of the same run).
struct Held {
    /// The generation it runs in now (0 before the reservation).
    generation: Generation,
    /// Restores after an eviction so far.
    evictions: u64,
    /// The generation an evicted run left: its worktree goes once the
    /// restore's is laid out (the restore lays out from the generation
    /// before the run, never from it).
    superseded: Option<Generation>,
    /// Where the limit watcher walks.
    watched: Option<Arc<Mutex<Watched>>>,
    /// The run's first entry.
    first_seq: Option<Seq>,
    /// When the task began (its usage counts from here).
    started: Instant,
    started_at_ms: u64,
    /// The worker's line in the live index, cleared at the end.
    live_entry: crate::worker::LiveEntry,
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

/// A generation laid out, its controller not yet instantiated.
struct Ready {
    sandbox: Sandbox,
    start: RunStart,
    /// The sandbox's `artifacts/` and its meter, for the check at the end.
    artifacts: std::path::PathBuf,
    meter: Option<Arc<crate::worktree::ArtifactMeter>>,
}

/// Reserve the run's next generation, write its first entries and lay it
/// out: the controller's sandbox and start, ready to instantiate.
async fn ready(
    env: &RunEnv,
    ctx: &Arc<RunCtx>,
    plan: &mut RunPlan,
    worker_dir: crate::worker::WorkerDir,
    held: &mut Held,
) -> Result<Ready, ErrorOrCancel> {
    let worker = &worker_dir;
    // Listed before its first entry is written: a restart after a
    // crash finds it there (the end takes it out).
    if held.evictions == 0 {
        worker.mark_live().map_err(|e| {
            ErrorOrCancel::error(
                FailureCode::Generation,
                format!("cannot list the worker in the live index: {e}"),
            )
        })?;
    }
    // The directory is made after the first entries' sync when they
    // are durable before the controller starts; now when it starts
    // beside their commit (a crash before it leaves the number used).
    let reserved = match plan.first_commit {
        FirstCommit::Now => worker.reserve_generation_unmade(plan.generation_floor),
        FirstCommit::WithRun => worker.reserve_generation(plan.generation_floor),
    }
    .map_err(|e| ErrorOrCancel::error(FailureCode::Generation, e.to_string()))?;
    held.generation = reserved.generation;
    let generation = held.generation;
    // The reservation and the start (or the replay marker) are one batch:
    // the one write and the one sync on the start path.
    let reserved_entry = LifecycleEvent::GenerationReserved {
        worker_id: plan.worker_id,
        generation,
    };
    let seed = match &plan.replay {
        Some(replay) => replay.seed,
        None => rand_seed(),
    };
    let second = match &plan.replay {
        Some(_) => LifecycleEvent::ResumedByReplay {
            generation,
            through_seq: ctx.journal.last_seq().await,
        },
        None => LifecycleEvent::Started {
            component: plan.prepared.digest().to_string(),
            prompt: plan.prompt.clone(),
            tools: plan.tools.clone(),
            timeout_ms: plan.timeout_ms,
            liveness: plan.liveness,
            generation,
            continues: plan.continues,
            resumes: plan.resumes,
            resume_on_start: plan.resume_on_start,
            seed,
        },
    };
    let batch = vec![
        Payload::Lifecycle(reserved_entry),
        Payload::Lifecycle(second),
    ];
    let mut told = false;
    let written = match plan.first_commit {
        // Durable before the layout and the controller's start.
        FirstCommit::Now => {
            ctx.journal
                .append_batch(Some(ctx.run_id), batch)
                .await
                .map(|written| {
                    if let Some(durable) = plan.durable.take() {
                        told = durable.send(()).is_ok();
                    }
                    written.into_iter().map(Arc::new).collect::<Vec<_>>()
                })
        }
        // Minted now, committed with the run's next commit (its first
        // input, its end) or within the commit delay, while the
        // controller starts: everything after them is committed after
        // them, and whoever waits for the start hears once they are
        // durable.
        FirstCommit::WithRun => ctx
            .journal
            .commit_soon(Some(ctx.run_id), batch, crate::journal::COMMIT_DELAY)
            .await
            .map(|(written, minted)| {
                crate::fsutil::crash_point("start-minted");
                if let Some(durable) = plan.durable.take() {
                    let journal = ctx.journal.clone();
                    tokio::spawn(async move {
                        if journal.durable(minted).await.is_ok() {
                            let _ = durable.send(());
                        }
                    });
                }
                written
            }),
    };
    // Whoever waits for the start (an HTTP handler) goes first: woken
    // on this worker, it would wait behind the layout and the instance.
    if told {
        tokio::task::yield_now().await;
        crate::fsutil::crash_point("start-durable");
    }
    let written = match written {
        Ok(written) => written,
        Err(e) => {
            // The number is consumed all the same (the store may hold
            // the entries that name it, or its directory exists): the
            // next start goes past it.
            let _ = worker.record_generation(generation, None);
            // Whoever waits for the start hears now, not when the
            // end is written (retried while the store is away).
            drop(plan.durable.take());
            let failure = ctx.refused("the run's first entries", e);
            return Err(ErrorOrCancel::error(FailureCode::Storage, failure.0));
        }
    };
    // worker.json and the rest of the layout, before anything is instantiated.
    worker
        .record_run(generation, plan.bind.as_deref(), Some(&ctx.limits))
        .map_err(|e| ErrorOrCancel::error(FailureCode::Generation, e.to_string()))?;
    let info = plan.prepared.info();
    let manifest = crate::worker::ResolvedManifest {
        component: plan.prepared.digest().to_string(),
        name: info.name.clone(),
        version: info.version.clone(),
        can_park: info.can_park,
        imports: plan.prepared.imports().to_vec(),
        resolved_at_ms: crate::fsutil::now_ms(),
    };
    if plan.replay.is_some()
        && let Err(e) = worker.record_restore(ctx.run_id)
    {
        tracing::warn!(run_id = %ctx.run_id, "worker.json does not say it was restored: {e}");
    }
    // Laying out copies the worktree (and, for a parent restored by
    // replay, moves the scopes it loaned from the generation its run
    // began in): blocking work, off the async threads.
    let budget = crate::worktree::Budget::of(&ctx.limits);
    let previous = plan.previous_generation;
    let loaned_from = plan.replay.as_ref().and_then(|r| match &r.started.payload {
        Payload::Lifecycle(LifecycleEvent::Started { generation, .. }) => Some(*generation),
        _ => None,
    });
    let (supervisor, parent, run_id) = (env.supervisor.clone(), plan.worker_id, ctx.run_id);
    // A live run's starting worktree is a replay input: recorded before
    // its controller can change it (a restore's was recorded by the run).
    let record = plan.replay.is_none();
    // A generation with nothing to copy into it and no loans to move
    // (a fresh worker's first, or a restore with no generation before
    // its run: `previous` is `None` only then) is one directory and a
    // document written unsynced, neither synced here: laid out here,
    // as worker.json just was, not handed to the blocking pool and
    // back (two thread switches a run on the busiest path).
    let inline = previous.is_none() && loaned_from.is_none();
    // `artifacts/` is made for a controller that can open files (or
    // hand its path to an MCP server, `{artifacts}`), or when loans
    // move into it; a worktree carried over makes it anyway.
    let worktree = loaned_from.is_some()
        || plan.prepared.opens_files()
        || plan.prepared.imports_package("cairn:tools");
    let lay_out = move |handle: &crate::worker::WorkerDir| {
        if let Err(e) = handle.record_manifest(manifest) {
            tracing::warn!(run_id = %run_id, "metadata.json does not hold the resolved manifest: {e}");
        }
        let gen_dir = handle.lay_out_generation(reserved, previous, &budget, worktree)?;
        if let Some(from) = loaned_from {
            supervisor.loans_follow(parent, from, &gen_dir);
        }
        let worktree = (record && gen_dir.carried_bytes > 0)
            .then(|| {
                let tree = gen_dir.dir.open_dir("artifacts")?;
                handle.record_worktree(&tree, budget.depth)
            })
            .transpose()
            .unwrap_or_else(|e| {
                tracing::warn!(run_id = %run_id, "the worktree the run starts from is not recorded (an offline replay will not have it): {e}");
                None
            })
            .flatten();
        Ok::<_, crate::worker::WorkerError>((gen_dir, worktree))
    };
    let laid_out = match inline {
        true => lay_out(worker),
        false => {
            let handle = worker
                .try_clone()
                .map_err(|e| ErrorOrCancel::error(FailureCode::Generation, e.to_string()))?;
            tokio::task::spawn_blocking(move || lay_out(&handle))
                .await
                .map_err(|e| ErrorOrCancel::error(FailureCode::Generation, e.to_string()))?
        }
    };
    let (gen_dir, worktree) =
        laid_out.map_err(|e| ErrorOrCancel::error(FailureCode::Generation, e.to_string()))?;
    if let Some(old) = held.superseded.take()
        && let Ok(handle) = worker.try_clone()
    {
        tokio::task::spawn_blocking(move || {
            if let Err(e) = handle.drop_worktree(old) {
                tracing::warn!(
                    "worker {}: cannot remove the worktree of generation {old}, left by its evicted run: {e}",
                    handle.id()
                );
            }
        });
    }
    if let Some(w) = worktree {
        env.supervisor
            .snapshot_recorded(plan.worker_id, &w.digest)
            .await;
        let recorded = Payload::Lifecycle(LifecycleEvent::WorktreeRecorded {
            digest: w.digest,
            files: w.files,
            bytes: w.bytes,
        });
        if let Err(e) = ctx.journal.defer(Some(ctx.run_id), vec![recorded]).await {
            let failure = ctx.refused("the run's worktree snapshot", e);
            return Err(ErrorOrCancel::error(FailureCode::Storage, failure.0));
        }
    }
    ctx.serve_seams(Vec::new());
    ctx.serve_seams(
        env.supervisor
            .generation_live(ctx.run_id, &ctx.session, &gen_dir),
    );
    let stdout = gen_dir.path.join("worker.out.log");
    let stderr = gen_dir.path.join("worker.err.log");
    held.first_seq.get_or_insert(written[0].seq);
    let clock_start = match &plan.replay {
        Some(replay) => replay.started.at_ms,
        None => written[1].at_ms,
    };
    // Seed 002's `Preparing`: what the controller imports is opened
    // (MCP servers and their tool lists) before it starts, while the
    // session reads `preparing` (until its instance is made). A restore's replay needs none of it.
    if plan.replay.is_none() {
        env.capabilities
            .prepare(ctx, &plan.prepared, &gen_dir.path)
            .await;
    }
    let clock = JournalClock::new(clock_start);
    *ctx.clock.lock().unwrap_or_else(|p| p.into_inner()) = Some(clock.clone());
    if let Some(ms) = plan.timeout_ms
        && held.evictions == 0
    {
        let deadline_ctx = ctx.clone();
        tokio::spawn(async move {
            let mut rx = deadline_ctx.cancel.subscribe();
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(ms)) => {
                    deadline_ctx.cancel(CancelReason::Deadline, format!("the run's timeout of {ms} ms ran out"));
                }
                _ = async { let _ = rx.wait_for(|c| c.is_some()).await; } => {}
            }
        });
    }
    if let Ok(bytes) = env.store.bytes(&ctx.session).await {
        ctx.journal_bytes.store(bytes, Ordering::Relaxed);
    }
    let meter =
        crate::worktree::ArtifactMeter::new(ctx.limits.artifact_bytes, gen_dir.carried_bytes);
    let now_watched = Watched {
        artifacts: gen_dir.artifacts_path.clone(),
        meter: meter.clone(),
    };
    match &held.watched {
        // A restored run's limits are watched where it lives now.
        Some(slot) => *slot.lock().unwrap_or_else(|p| p.into_inner()) = now_watched,
        None => {
            let slot = Arc::new(Mutex::new(now_watched));
            watch_limits(ctx.clone(), slot.clone());
            held.watched = Some(slot);
        }
    }
    let _ = ctx.supervisor.set(Arc::downgrade(&env.supervisor));
    let _ = ctx.capabilities.set(env.capabilities.clone());
    tracing::Span::current().record("generation", generation.0);
    ctx.set_place(super::Place {
        worker_id: plan.worker_id,
        generation,
        artifacts: gen_dir.artifacts_path.clone(),
    });
    let loan = plan
        .child
        .then(|| env.supervisor.loan(plan.worker_id, ctx.run_id))
        .flatten();
    let sandbox = Sandbox {
        loan,
        artifacts: gen_dir.artifacts_path.clone(),
        stdout,
        stderr,
        clock,
        limits: ctx.limits,
        host: ctx.clone(),
        meter: Some(meter),
    };
    let start = RunStart {
        run_id: ctx.run_id,
        session_id: ctx.session.clone(),
        worker_id: plan.worker_id,
        generation,
        prompt: plan.prompt.clone(),
        continues: plan.continues,
        checkpoint: plan.checkpoint.clone(),
        seed,
        tools: plan.tools.clone(),
    };
    // Hold no more descriptors than the run needs while it lives.
    drop(gen_dir);
    drop(worker_dir);
    Ok(Ready {
        artifacts: sandbox.artifacts.clone(),
        meter: sandbox.meter.clone(),
        sandbox,
        start,
    })
}

/// Run the instance until it returns or traps; a cancel is noticed by its
/// next host call, and by the epoch callback after the grace.
pub(crate) async fn execute(
    components: &crate::component::Components,
    ctx: &Arc<RunCtx>,
    prepared: &Prepared,
    sandbox: Sandbox,
    start: RunStart,
) -> Result<Outcome, ErrorOrCancel> {
    let run = components.run(prepared, sandbox, start);
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

fn rand_seed() -> u64 {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"))
}
