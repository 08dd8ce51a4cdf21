//! Shutdown: refuse new starts, end followers' streams, cancel (or park)
//! live runs, wait for them, and give the home up — cleanly marked when
//! nothing is left to recover ([`CrashWindow`] says when something is).

use super::Runtime;
use super::run::{self, RunCtx};
use crate::journal::event::{CancelReason, LivenessPolicy};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::watch;

impl Runtime {
    /// Set once shutdown begins (followers end their streams on it).
    pub fn closing(&self) -> watch::Receiver<bool> {
        self.inner.closing.subscribe()
    }

    /// Begin a shutdown without waiting: refuse new starts, end followers'
    /// streams, and cancel live runs (or park those whose policy is `park`).
    pub fn begin_shutdown(&self) {
        self.cancel_for_shutdown();
    }

    fn cancel_for_shutdown(&self) -> Vec<Arc<RunCtx>> {
        self.inner.draining.store(true, Ordering::SeqCst);
        // On a shared store the sessions are handed over first: their runs
        // write nothing more here and go on elsewhere by replay.
        self.hand_over();
        self.inner.closing.send_replace(true);
        let live: Vec<Arc<RunCtx>> = {
            let runs = self.inner.registry.runs();
            runs.values().map(|r| r.ctx.clone()).collect()
        };
        for ctx in &live {
            if ctx.liveness.policy == LivenessPolicy::Park {
                ctx.request_park("the host is shutting down");
            } else {
                ctx.cancel(CancelReason::Shutdown, "the host is shutting down");
            }
        }
        live
    }

    /// Drain: [`Runtime::begin_shutdown`], then wait (at most `wait`) for
    /// every controller, remove their sockets, and give the home lock up.
    pub async fn shutdown(&self, wait: Duration) {
        let live = self.cancel_for_shutdown();
        if tokio::time::timeout(wait, self.wait_all(&live))
            .await
            .is_err()
        {
            for ctx in &live {
                ctx.cancel(CancelReason::Shutdown, "the host is shutting down");
            }
            // Give controllers that ignore the cancel their grace to trap.
            let _ = tokio::time::timeout(run::CANCEL_GRACE * 6, self.wait_all(&live)).await;
        }
        // Drained: other instances may take this one's sessions now.
        self.leave_cluster().await;
        // Every run ended and every entry durable: the next owner needs
        // no recovery walk.
        let ended = self
            .inner
            .registry
            .runs()
            .values()
            .all(|r| r.done.borrow().is_some());
        let clean = ended
            && self.inner.may_mark_clean.load(Ordering::SeqCst)
            && !self.inner.resume_pending.load(Ordering::SeqCst)
            && self.inner.journals.commit_all().await;
        let lock = self
            .inner
            .lock
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        // This runtime no longer owns the home; the workspaces' worker
        // counts go first, the marker that vouches for them after.
        let counts = self
            .inner
            .worker_counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if clean {
            // Creations whose markers' removal was deferred: none is left
            // for the next owner, which walks nothing.
            self.home().unmark_all();
        }
        if let (true, Some(lock)) = (clean, lock)
            && let Err(e) = self
                .home()
                .save_worker_counts(counts.as_ref())
                .and_then(|()| self.home().vouched())
                .and_then(|vouched| lock.release_clean(vouched))
        {
            tracing::warn!(
                "note: cannot mark the home as stopped cleanly (the next start walks it): {e}"
            );
        }
    }

    /// An operation that leaves remains for recovery if it is abandoned
    /// half-way (a creation, fork or delete whose request was dropped):
    /// unless it is [`CrashWindow::closed`], this stop is not clean.
    pub(crate) fn crash_window(&self) -> CrashWindow<'_> {
        CrashWindow {
            rt: self,
            open: true,
        }
    }

    /// A restore left a run as it was: the next start must look again.
    pub(crate) fn restore_incomplete(&self) {
        self.inner.may_mark_clean.store(false, Ordering::SeqCst);
    }

    /// Wait for each of `live` to end, in turn.
    async fn wait_all(&self, live: &[Arc<RunCtx>]) {
        for ctx in live {
            let _ = self.wait(ctx.run_id).await;
        }
    }
}

/// See [`Runtime::crash_window`].
pub(crate) struct CrashWindow<'a> {
    rt: &'a Runtime,
    open: bool,
}

impl CrashWindow<'_> {
    /// The operation finished: it left nothing to recover.
    pub(crate) fn closed(mut self) {
        self.open = false;
    }
}

impl Drop for CrashWindow<'_> {
    fn drop(&mut self) {
        if self.open {
            self.rt.restore_incomplete();
        }
    }
}
