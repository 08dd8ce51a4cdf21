//! One `syncfs` for every first commit waiting at once (a group commit of
//! new sessions' trees): a commit that arrives while a `syncfs` runs waits
//! for the next one — the running one may have begun before its writes —
//! and that next one serves every commit that arrived meanwhile. Under
//! load one `syncfs` makes many sessions durable, instead of one each.
//!
//! And a drain: a first commit that found too much unwritten data to wait
//! for (`first_commit_sync = "auto"`) syncs its own tree, and starts one
//! `syncfs` in the background (one at a time), so a backlog of the host's
//! own unsynced writes is flushed and later commits go back to the shared
//! `syncfs` instead of syncing entry by entry for good.

use std::io;
use std::os::fd::AsFd;
use std::sync::{Arc, Condvar, Mutex};

#[derive(Default)]
struct State {
    /// `syncfs` calls begun (the number of the last one).
    started: u64,
    /// The number of the last one that ended.
    finished: u64,
    /// The number of the last one that failed (0: none).
    failed: u64,
    /// Whether one is running.
    running: bool,
    /// Whether a background drain is under way.
    draining: bool,
    /// Callers waiting for a `syncfs` another one runs.
    waiting: usize,
}

/// The shared `syncfs` of one home (see the module).
#[derive(Default)]
pub struct SharedSyncfs {
    state: Mutex<State>,
    ended: Condvar,
}

impl std::fmt::Debug for SharedSyncfs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSyncfs").finish_non_exhaustive()
    }
}

impl SharedSyncfs {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make durable everything written on `on`'s filesystem before this
    /// call: by a `syncfs` that begins after it, this caller's or another's.
    pub fn sync(&self, on: impl AsFd) -> io::Result<()> {
        self.sync_with(|| {
            crate::fsutil::count_sync();
            rustix::fs::syncfs(on.as_fd()).map_err(io::Error::from)
        })
    }

    /// [`SharedSyncfs::sync`] with `syncfs` given (`run` is called only
    /// when this caller is the one to begin the call).
    fn sync_with(&self, run: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let mut run = Some(run);
        let mut state = self.state();
        // The first `syncfs` to begin from now on covers this caller.
        let needed = state.started + 1;
        loop {
            if state.finished >= needed {
                return match state.failed >= needed {
                    true => Err(io::Error::other(
                        "syncfs of the home's filesystem failed (another commit's call)",
                    )),
                    false => Ok(()),
                };
            }
            if !state.running {
                state.running = true;
                state.started += 1;
                let mine = state.started;
                drop(state);
                let result = run.take().map_or(Ok(()), |run| run());
                state = self.state();
                state.running = false;
                state.finished = mine;
                if result.is_err() {
                    state.failed = mine;
                }
                self.ended.notify_all();
                if mine >= needed {
                    return result;
                }
                continue;
            }
            state.waiting += 1;
            state = self.ended.wait(state).unwrap_or_else(|p| p.into_inner());
            state.waiting -= 1;
        }
    }

    /// Start one [`SharedSyncfs::sync`] on a thread of its own unless a
    /// drain is under way already; never waits.
    pub fn drain_in_background(self: &Arc<Self>, on: &std::fs::File) {
        {
            let mut state = self.state();
            if state.draining {
                return;
            }
            state.draining = true;
        }
        let Ok(file) = on.try_clone() else {
            self.state().draining = false;
            return;
        };
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("cairn-syncfs-drain".into())
            .spawn(move || {
                if let Err(e) = me.sync(&file) {
                    tracing::warn!("the background syncfs failed: {e}");
                }
                me.state().draining = false;
            });
        if spawned.is_err() {
            self.state().draining = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn callers_arriving_during_a_syncfs_share_the_next_one() {
        let shared = SharedSyncfs::default();
        let calls = AtomicUsize::new(0);
        let (release, hold) = std::sync::mpsc::channel::<()>();
        let (shared, calls) = (&shared, &calls);
        std::thread::scope(|s| {
            // The first caller's `syncfs` is held until three more wait.
            s.spawn(move || {
                shared
                    .sync_with(|| {
                        calls.fetch_add(1, Ordering::SeqCst);
                        hold.recv().map_err(io::Error::other)
                    })
                    .unwrap()
            });
            while !shared.state().running {
                std::thread::yield_now();
            }
            for _ in 0..3 {
                s.spawn(|| {
                    shared
                        .sync_with(|| {
                            calls.fetch_add(1, Ordering::SeqCst);
                            Ok(())
                        })
                        .unwrap()
                });
            }
            while shared.state().waiting < 3 {
                std::thread::yield_now();
            }
            release.send(()).unwrap();
        });
        // The held one, then one that began after the three arrived.
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(shared.state().finished, 2);
    }

    #[test]
    fn a_failed_syncfs_fails_every_caller_it_was_to_cover() {
        let shared = SharedSyncfs::default();
        let (release, hold) = std::sync::mpsc::channel::<()>();
        let results = Mutex::new(Vec::new());
        let (shared_ref, results_ref) = (&shared, &results);
        std::thread::scope(|s| {
            s.spawn(move || {
                let (shared, results) = (shared_ref, results_ref);
                let r = shared.sync_with(|| hold.recv().map_err(io::Error::other));
                results.lock().unwrap().push(r.is_ok());
            });
            while !shared.state().running {
                std::thread::yield_now();
            }
            for _ in 0..2 {
                s.spawn(|| {
                    let r = shared.sync_with(|| Err(io::Error::other("disk gone")));
                    results.lock().unwrap().push(r.is_ok());
                });
            }
            while shared.state().waiting < 2 {
                std::thread::yield_now();
            }
            release.send(()).unwrap();
        });
        let mut results = results.into_inner().unwrap();
        results.sort();
        // The first succeeded; the one that ran for the other two failed,
        // and so both of them did.
        assert_eq!(results, vec![false, false, true]);
    }
}
