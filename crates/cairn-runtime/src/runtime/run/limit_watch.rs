//! The limit watcher: the wall clock and the worktree under a run's
//! `artifacts/`, which no host call sees.

use super::*;

/// Where the limit watcher walks: the run's `artifacts/` and its meter
/// (a restore after an eviction moves them to a new generation).
pub(super) struct Watched {
    pub(super) artifacts: std::path::PathBuf,
    pub(super) meter: Arc<crate::worktree::ArtifactMeter>,
}

/// Enforce the limits nothing else sees: the wall clock, and the worktree
/// under `artifacts/` (bytes, entries, depth: see `crate::worktree`;
/// measured every few ticks, a breach traps the guest at its next epoch
/// tick). Ends when the run does.
pub(super) fn watch_limits(ctx: Arc<RunCtx>, watched: Arc<Mutex<Watched>>) {
    let started = tokio::time::Instant::now();
    // Broken once more than `wall_ms` has passed.
    let deadline = started + Duration::from_millis(ctx.limits.wall_ms.saturating_add(1));
    let mut done = ctx.cancel.subscribe();
    let mut activity = ctx.activity.subscribe();
    tokio::spawn(async move {
        // The first tick one period in, not at once: the tree it starts
        // from was measured as it was laid out (a run that ends sooner is
        // measured at its end, when its guest wrote), and a walk at the
        // start is a trip to the blocking pool for every run.
        let period = Duration::from_millis(25);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        let mut next_walk = tokio::time::Instant::now();
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let now = *activity.borrow_and_update();
            if now == Activity::Ended || ctx.failure().is_some() {
                return;
            }
            tokio::select! {
                _ = tick.tick(), if now == Activity::Running => {}
                _ = activity.changed() => continue,
                _ = tokio::time::sleep_until(deadline) => {
                    let elapsed = started.elapsed().as_millis() as u64;
                    ctx.break_limit("wall_ms", elapsed, ctx.limits.wall_ms);
                    return;
                }
                _ = async { let _ = done.wait_for(|c| c.is_some()).await; } => return,
            }
            {
                // Not walked again until four times the last walk's time has
                // passed: a tree of many entries costs the host at most a
                // fifth of a core, however often the clock ticks.
                if tokio::time::Instant::now() < next_walk {
                    continue;
                }
                // Opened for each walk: a run that waits holds no
                // descriptor for it.
                let (path, meter) = {
                    let w = watched.lock().unwrap_or_else(|p| p.into_inner());
                    (w.artifacts.clone(), w.meter.clone())
                };
                let budget = crate::worktree::Budget::of(&ctx.limits);
                let walked = tokio::time::Instant::now();
                let mark = meter.mark();
                let breach = tokio::task::spawn_blocking(move || {
                    let dir =
                        cap_std::fs::Dir::open_ambient_dir(&path, cap_std::ambient_authority())
                            .ok()?;
                    let (used, breach) = crate::worktree::usage(&dir, &budget).ok()?;
                    // What is there now (deletions give room back).
                    if breach.is_none() {
                        meter.measured(mark, used.bytes);
                    }
                    breach
                })
                .await
                .ok()
                .flatten();
                next_walk = tokio::time::Instant::now() + walked.elapsed() * 4;
                if let Some((limit, value, max)) = breach {
                    ctx.break_limit(limit, value, max);
                    return;
                }
            }
        }
    });
}
