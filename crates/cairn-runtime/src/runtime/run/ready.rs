//! A run's start: the generation reserved, its first entries written, its
//! directory laid out, the controller's sandbox made — in a future of its
//! own, freed before the controller starts (see `task.rs`).

use super::limit_watch::{Watched, watch_limits};
use super::task::{Held, rand_seed};
use super::*;
use crate::runtime::FirstCommit;

/// A generation laid out, its controller not yet instantiated.
pub(super) struct Ready {
    pub(super) sandbox: Sandbox,
    pub(super) start: RunStart,
    /// The sandbox's `artifacts/` and its meter, for the check at the end:
    /// handed apart so the run task never borrows the sandbox (a local it
    /// borrowed, rustc keeps in the task's future through the whole wait,
    /// 344 bytes a waiting run).
    pub(super) artifacts: std::path::PathBuf,
    pub(super) meter: Option<Arc<crate::worktree::ArtifactMeter>>,
}

/// Reserve the run's next generation, write its first entries and lay it
/// out: the controller's sandbox and start, ready to instantiate.
pub(super) async fn ready(
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
            component: plan.prepared.digest().into(),
            prompt: plan.prompt.as_str().into(),
            tools: plan.tools.as_deref().map(Into::into),
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
