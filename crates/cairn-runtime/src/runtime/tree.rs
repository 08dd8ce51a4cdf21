//! A delegation tree: a root worker (one with no parent) and every worker
//! spawned beneath it. A tree is bounded as a whole (`[limits]
//! tree_workers`), so no run's children can fan out without end; a root's
//! run ending stops the unclaimed descendants that were not spawned
//! `continue`; `prune` stops everything below the worker it names. A
//! workspace is bounded too: it holds at most `[quota] workers` workers,
//! roots and children together, until it deletes some.

use super::{Runtime, RuntimeError};
use crate::ids::WorkerId;
use crate::journal::event::{CancelReason, LivenessPolicy};
use crate::worker::{ChildRef, ChildStatus};
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

/// Spawns into one tree, one at a time (keyed by its root).
static TREES: std::sync::Mutex<
    Option<std::collections::HashMap<WorkerId, Arc<tokio::sync::Mutex<()>>>>,
> = std::sync::Mutex::new(None);

/// Hold `root`'s tree while a spawn counts it and links a child into it.
pub(crate) async fn lock(root: WorkerId) -> tokio::sync::OwnedMutexGuard<()> {
    let tree = {
        let mut trees = TREES.lock().unwrap_or_else(|p| p.into_inner());
        let trees = trees.get_or_insert_with(Default::default);
        // Locks nobody holds are dropped as the map grows.
        if trees.len() > 4096 {
            trees.retain(|_, l| Arc::strong_count(l) > 1);
        }
        trees.entry(root).or_default().clone()
    };
    tree.lock_owned().await
}

/// Parent links followed at most (deeper than any `child_depth`).
const MAX_HOPS: usize = 64;

/// The root of `worker`'s tree (`worker` itself when it has no parent).
pub(crate) fn root_of(rt: &Runtime, worker: WorkerId) -> WorkerId {
    let home = rt.workers();
    let mut at = worker;
    for _ in 0..MAX_HOPS {
        let parent = home
            .open_worker(at)
            .and_then(|w| w.record())
            .ok()
            .and_then(|r| r.parent);
        match parent {
            Some(p) => at = p.worker_id,
            None => break,
        }
    }
    at
}

/// The workers below `top`, breadth first, at most `max` of them.
pub(crate) fn descendants(rt: &Runtime, top: WorkerId, max: usize) -> Vec<ChildRef> {
    let home = rt.workers();
    let mut out = Vec::new();
    let mut seen = HashSet::from([top]);
    let mut queue = VecDeque::from([top]);
    while let Some(at) = queue.pop_front() {
        let Ok(meta) = home.open_worker(at).and_then(|w| w.metadata()) else {
            continue;
        };
        for child in meta.children {
            if out.len() >= max {
                return out;
            }
            if seen.insert(child.worker_id) {
                queue.push_back(child.worker_id);
                out.push(child);
            }
        }
    }
    out
}

/// Workers below a tree's root counted at most (well past any cap).
const COUNT_AT_MOST: usize = 1 << 16;

impl Runtime {
    /// The run of `root` (a worker with no parent) ended: cancel each
    /// descendant's live run that nobody claims and that was not spawned
    /// `continue`. How many were cancelled.
    pub(crate) fn root_ended(&self, root: WorkerId) -> usize {
        let below = descendants(self, root, COUNT_AT_MOST);
        let sessions = self.inner.registry.sessions();
        let mut cancelled = 0;
        for child in below.iter().filter(|c| c.status == ChildStatus::Running) {
            let Some(live) = sessions.get(&child.session_id) else {
                continue;
            };
            if live.claimant.is_some() {
                continue;
            }
            if let Some(run) = live.live_run()
                && run.liveness.policy != LivenessPolicy::Continue
            {
                run.cancel(
                    CancelReason::Unclaimed,
                    "the root of its delegation tree ended",
                );
                cancelled += 1;
            }
        }
        cancelled
    }

    /// Stop everything below `top`: cancel each descendant's live run and
    /// mark it pruned in its parent. How many workers were below.
    pub(crate) async fn stop_below(&self, top: WorkerId) -> usize {
        let below = descendants(self, top, COUNT_AT_MOST);
        let mut runs = Vec::new();
        {
            let sessions = self.inner.registry.sessions();
            for child in &below {
                if let Some(run) = sessions.get(&child.session_id).and_then(|l| l.live_run()) {
                    run.cancel(CancelReason::External, "its delegation tree was pruned");
                    runs.push(run.run_id);
                }
            }
        }
        for run in runs {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(10), self.wait(run)).await;
        }
        let home = self.workers();
        for child in &below {
            if let Some(parent) = home
                .open_worker(child.worker_id)
                .and_then(|w| w.record())
                .ok()
                .and_then(|r| r.parent)
            {
                self.mark_pruned(&parent.worker_id, child.worker_id);
            }
        }
        below.len()
    }
}

impl Runtime {
    fn worker_counts(
        &self,
    ) -> Result<
        std::sync::MutexGuard<'_, Option<std::collections::HashMap<String, usize>>>,
        RuntimeError,
    > {
        let mut counts = self
            .inner
            .worker_counts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if counts.is_none() {
            let mut by_workspace = std::collections::HashMap::new();
            for id in self.inner.workers.list_workers()? {
                if let Some(ws) = self.inner.workers.worker_entry(id).workspace {
                    *by_workspace.entry(ws).or_insert(0) += 1;
                }
            }
            *counts = Some(by_workspace);
        }
        Ok(counts)
    }

    /// Room for one more worker of `workspace` under its `[quota] workers`,
    /// taken now: give it back with [`Self::worker_gone`] if the worker is
    /// not made after all.
    pub(crate) fn reserve_worker(&self, workspace: &str) -> Result<(), RuntimeError> {
        let quota = self.inner.config.host.quota_of(
            workspace,
            |q| q.workers,
            crate::config::DEFAULT_WORKERS,
        );
        let mut counts = self.worker_counts()?;
        let held = counts
            .get_or_insert_with(Default::default)
            .entry(workspace.to_string())
            .or_insert(0);
        if *held >= quota {
            return Err(workers_full(workspace, *held as u64, quota));
        }
        *held += 1;
        Ok(())
    }

    /// A worker of `workspace` is gone (deleted, or never made).
    pub(crate) fn worker_gone(&self, workspace: &str) {
        let mut counts = self
            .inner
            .worker_counts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(held) = counts.as_mut().and_then(|c| c.get_mut(workspace)) {
            *held = held.saturating_sub(1);
        }
    }
}

/// `workspace` holds `held` workers, its `[quota] workers`.
pub(crate) fn workers_full(workspace: &str, held: u64, quota: usize) -> RuntimeError {
    RuntimeError::Capacity(format!(
        "workspace {workspace:?} holds {held} workers, its quota (workers = {quota}); delete sessions it no longer needs first"
    ))
}
