//! One `syncfs` for every first commit waiting at once (a group commit of
//! new sessions' trees): a commit that arrives while a `syncfs` runs waits
//! for the next one — the running one may have begun before its writes —
//! and that next one serves every commit that arrived meanwhile. Under
//! load one `syncfs` makes many sessions durable, instead of one each.
//!
//! Under load the next one also waits a little for the commits it knows
//! are coming: a caller that begins a `syncfs` while at least
//! [`GATHER_SIBLINGS`] other new sessions await their first commit holds it
//! until they have arrived or [`GATHER_MAX`] has passed. With a few
//! sessions in flight nothing waits; with fifty clients a `syncfs` serves
//! about four first commits instead of under two, and every block of inode
//! table, bitmap and directory those sessions share is written once for
//! them all.
//!
//! An async caller ([`SharedSyncfs::sync_async`]) does not hold a thread
//! while it waits: it leaves its request with the home's one `syncfs`
//! thread, which begins the next `syncfs` for every request waiting (and
//! gathers as a blocking caller does), and wakes them when it ends. A new
//! session's first commit is written on the runtime's thread and waits
//! there, so under load no blocking thread per new session sleeps in a
//! `syncfs` wait — two thread switches a run fewer.
//!
//! And a drain: a first commit that found too much unwritten data to wait
//! for (`first_commit_sync = "auto"`) syncs its own tree, and starts one
//! `syncfs` in the background (one at a time), so a backlog of the host's
//! own unsynced writes is flushed and later commits go back to the shared
//! `syncfs` instead of syncing entry by entry for good.

use std::io;
use std::os::fd::AsFd;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long a `syncfs` waits, at most, for first commits it knows are
/// coming before it begins (see the module).
pub const GATHER_MAX: Duration = Duration::from_millis(2);
/// How many other first commits must be on their way before a `syncfs`
/// waits for them (fewer: it begins at once — a few clients' latency is
/// worth more than the writes a wait would share).
pub const GATHER_SIBLINGS: usize = 5;
/// How long the `syncfs` thread stays with nothing to do before it ends
/// (the next async caller starts another).
pub const RUNNER_IDLE: Duration = Duration::from_secs(2);

/// What the `syncfs` thread calls: one `syncfs` (of the filesystem it was
/// given) a call.
type Syncer = Box<dyn FnMut() -> io::Result<()> + Send>;

/// An async caller's request: covered by the first `syncfs` numbered
/// `needed` or later.
struct Ask {
    needed: u64,
    coming: usize,
    done: oneshot::Sender<io::Result<()>>,
}

#[derive(Default)]
struct State {
    /// `syncfs` calls begun (the number of the last one).
    started: u64,
    /// The number of the last one that ended.
    finished: u64,
    /// The number of the last one that failed (0: none).
    failed: u64,
    /// Why that one failed.
    failure: String,
    /// Whether one is running.
    running: bool,
    /// Whether a background drain is under way.
    draining: bool,
    /// Callers waiting for a `syncfs` another one runs (or gathers for).
    waiting: usize,
    /// Whether the caller to begin the next one waits for more to arrive.
    gathering: bool,
    /// Async callers' requests, for the `syncfs` thread (counted in
    /// `waiting` until answered).
    asks: Vec<Ask>,
    /// Whether the `syncfs` thread is there to answer them.
    runner: bool,
}

/// One `syncfs` of `on`'s filesystem, counted.
fn syncfs(on: impl AsFd) -> io::Result<()> {
    if refused_by_fault() {
        return Err(io::Error::other("the disk refused it (CAIRN_FAULT)"));
    }
    crate::fsutil::count_sync();
    rustix::fs::syncfs(on.as_fd()).map_err(io::Error::from)
}

/// Tests: `CAIRN_FAULT=syncfs-fails` refuses every shared `syncfs` (the
/// `syncfs` thread's and blocking callers'), `syncfs-fails-once` the first
/// in the process.
fn refused_by_fault() -> bool {
    static REFUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    crate::fsutil::fault_point("syncfs-fails")
        || (crate::fsutil::fault_point("syncfs-fails-once")
            && !REFUSED.swap(true, std::sync::atomic::Ordering::SeqCst))
}

impl State {
    /// The error a caller gets whose `syncfs` another one ran, and failed.
    fn failed_for_others(&self) -> io::Error {
        io::Error::other(format!(
            "syncfs of the home's filesystem failed (another commit's call): {}",
            self.failure
        ))
    }
}

/// The shared `syncfs` of one home (see the module).
#[derive(Default)]
pub struct SharedSyncfs {
    state: Mutex<State>,
    ended: Condvar,
    /// Told when a caller arrives while one gathers.
    arrived: Condvar,
    /// Told when an async caller leaves a request (the `syncfs` thread).
    asked: Condvar,
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
    /// `coming`: how many other callers are known to be on their way (a
    /// `syncfs` this caller begins waits for them, at most [`GATHER_MAX`]).
    pub fn sync(&self, on: impl AsFd, coming: usize) -> io::Result<()> {
        self.sync_with(coming, GATHER_MAX, || syncfs(on))
    }

    /// [`SharedSyncfs::sync`] with `syncfs` and the longest gather given
    /// (`run` is called only when this caller is the one to begin the call).
    fn sync_with(
        &self,
        coming: usize,
        gather_max: Duration,
        run: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        self.sync_for(coming, 0, gather_max, run)
    }

    /// [`SharedSyncfs::sync_with`] on behalf of `own` callers already
    /// counted as waiting (the `syncfs` thread's requests): a gather waits
    /// for `coming` more besides them.
    fn sync_for(
        &self,
        coming: usize,
        own: usize,
        gather_max: Duration,
        run: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        let mut run = Some(run);
        let mut state = self.state();
        // The first `syncfs` to begin from now on covers this caller.
        let needed = state.started + 1;
        loop {
            if state.finished >= needed {
                return match state.failed >= needed {
                    true => Err(state.failed_for_others()),
                    false => Ok(()),
                };
            }
            if !state.running && !state.gathering {
                if coming >= GATHER_SIBLINGS {
                    state = self.gather(state, coming + own, gather_max);
                }
                state.running = true;
                state.started += 1;
                let mine = state.started;
                drop(state);
                let result = run.take().map_or(Ok(()), |run| run());
                state = self.state();
                state.running = false;
                state.finished = mine;
                if let Err(e) = &result {
                    state.failed = mine;
                    state.failure = e.to_string();
                }
                self.ended.notify_all();
                if mine >= needed {
                    return result;
                }
                continue;
            }
            state.waiting += 1;
            if state.gathering {
                self.arrived.notify_one();
            }
            state = self.ended.wait(state).unwrap_or_else(|p| p.into_inner());
            state.waiting -= 1;
        }
    }

    /// Make durable everything written on the filesystem of `on` (a
    /// directory) before this call, as [`SharedSyncfs::sync`] does, without
    /// holding a thread while it waits: the request is left now (what is
    /// written after this call returns is not covered), the future answers
    /// once a `syncfs` begun after it has ended.
    pub fn sync_async(
        self: &Arc<Self>,
        on: &cap_std::fs::Dir,
        coming: usize,
    ) -> impl Future<Output = io::Result<()>> + Send + use<> {
        // A handle of its own for a thread that must start (not one a
        // call), on the directory — never a session's file, which a delete
        // could not free while the thread holds it.
        let syncer = || -> io::Result<Syncer> {
            let file = crate::fsutil::dir_handle(on)?;
            Ok(Box::new(move || syncfs(&file)))
        };
        let answer = self.ask(coming, syncer);
        async move {
            answer.await.unwrap_or_else(|_| {
                Err(io::Error::other(
                    "the syncfs thread ended without answering",
                ))
            })
        }
    }

    /// [`SharedSyncfs::sync_async`] with the `syncfs` a new thread would
    /// call made by `syncer` (asked only when one must start).
    fn ask(
        self: &Arc<Self>,
        coming: usize,
        syncer: impl FnOnce() -> io::Result<Syncer>,
    ) -> oneshot::Receiver<io::Result<()>> {
        let (done, answer) = oneshot::channel();
        let mut state = self.state();
        let needed = state.started + 1;
        state.asks.push(Ask {
            needed,
            coming,
            done,
        });
        state.waiting += 1;
        if state.gathering {
            self.arrived.notify_one();
        }
        let start = !state.runner;
        state.runner = true;
        drop(state);
        self.asked.notify_one();
        if start && let Err(e) = self.start_runner(syncer) {
            let mut state = self.state();
            state.runner = false;
            let failed = format!("cannot start the syncfs thread: {e}");
            for ask in std::mem::take(&mut state.asks) {
                state.waiting -= 1;
                let _ = ask.done.send(Err(io::Error::other(failed.clone())));
            }
        }
        answer
    }

    fn start_runner(
        self: &Arc<Self>,
        syncer: impl FnOnce() -> io::Result<Syncer>,
    ) -> io::Result<()> {
        let mut syncer = syncer()?;
        let me = self.clone();
        std::thread::Builder::new()
            .name("cairn-syncfs".into())
            .spawn(move || me.serve_asks(&mut syncer))
            .map(|_| ())
    }

    /// The `syncfs` thread: a `syncfs` (shared with blocking callers) for
    /// every batch of requests, each answered once one that covers it has
    /// ended; gone after [`RUNNER_IDLE`] without one.
    fn serve_asks(&self, syncer: &mut Syncer) {
        let mut state = self.state();
        loop {
            while state.asks.is_empty() {
                let (next, idle) = self
                    .asked
                    .wait_timeout(state, RUNNER_IDLE)
                    .unwrap_or_else(|p| p.into_inner());
                state = next;
                if idle.timed_out() && state.asks.is_empty() {
                    state.runner = false;
                    return;
                }
            }
            // Gathered as a blocking caller would for the first request:
            // the others counted as coming include those that asked since.
            let coming = state.asks.iter().map(|a| a.coming).max().unwrap_or(0);
            drop(state);
            let _ = self.sync_for(coming, 1, GATHER_MAX, &mut *syncer);
            state = self.state();
            let (finished, failed) = (state.finished, state.failed);
            let mut left = Vec::new();
            for ask in std::mem::take(&mut state.asks) {
                if ask.needed > finished {
                    left.push(ask);
                    continue;
                }
                state.waiting -= 1;
                let _ = ask.done.send(match failed >= ask.needed {
                    true => Err(state.failed_for_others()),
                    false => Ok(()),
                });
            }
            state.asks = left;
        }
    }

    /// Hold the next `syncfs` until `coming` more callers wait for it or
    /// `max` has passed. Whoever arrives meanwhile is covered by it: it has
    /// not begun.
    fn gather<'a>(
        &'a self,
        mut state: std::sync::MutexGuard<'a, State>,
        coming: usize,
        max: Duration,
    ) -> std::sync::MutexGuard<'a, State> {
        state.gathering = true;
        let deadline = Instant::now() + max;
        while state.waiting < coming {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = self
                .arrived
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        state.gathering = false;
        state
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
                if let Err(e) = me.sync(&file, 0) {
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
                    .sync_with(0, GATHER_MAX, || {
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
                        .sync_with(0, GATHER_MAX, || {
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

    /// A caller that knows `GATHER_SIBLINGS` more are coming holds its
    /// `syncfs` until they wait for it: one call serves them all (without
    /// the gather, the first call begins at once and the rest need a
    /// second).
    #[test]
    fn a_syncfs_gathers_the_first_commits_it_knows_are_coming() {
        let shared = SharedSyncfs::default();
        let calls = AtomicUsize::new(0);
        let (shared, calls) = (&shared, &calls);
        let count = || {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(())
        };
        std::thread::scope(|s| {
            s.spawn(move || {
                shared
                    .sync_with(GATHER_SIBLINGS, Duration::from_secs(60), count)
                    .unwrap()
            });
            while !shared.state().gathering {
                std::thread::yield_now();
            }
            for _ in 0..GATHER_SIBLINGS {
                s.spawn(move || shared.sync_with(0, GATHER_MAX, count).unwrap());
            }
        });
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(shared.state().finished, 1);
    }

    /// Fewer than `GATHER_SIBLINGS` on their way: the `syncfs` begins at
    /// once (a gather would hold it for the minute given).
    #[test]
    fn a_syncfs_with_few_commits_coming_begins_at_once() {
        let shared = SharedSyncfs::default();
        let (release, hold) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let shared = &shared;
            s.spawn(move || {
                shared
                    .sync_with(GATHER_SIBLINGS - 1, Duration::from_secs(60), || {
                        hold.recv().map_err(io::Error::other)
                    })
                    .unwrap()
            });
            let since = Instant::now();
            while !shared.state().running {
                assert!(!shared.state().gathering, "it gathered");
                assert!(since.elapsed() < Duration::from_secs(30), "it never began");
                std::thread::yield_now();
            }
            release.send(()).unwrap();
        });
        assert_eq!(shared.state().finished, 1);
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
                let r = shared.sync_with(0, GATHER_MAX, || hold.recv().map_err(io::Error::other));
                results.lock().unwrap().push(r.is_ok());
            });
            while !shared.state().running {
                std::thread::yield_now();
            }
            for _ in 0..2 {
                s.spawn(|| {
                    let r = shared.sync_with(0, GATHER_MAX, || Err(io::Error::other("disk gone")));
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

    /// A syncer for the `syncfs` thread that counts its calls and answers
    /// `result`.
    fn counting(calls: &Arc<AtomicUsize>, fail: bool) -> impl FnOnce() -> io::Result<Syncer> {
        let calls = calls.clone();
        move || {
            Ok(Box::new(move || {
                calls.fetch_add(1, Ordering::SeqCst);
                match fail {
                    true => Err(io::Error::other("disk gone")),
                    false => Ok(()),
                }
            }) as Syncer)
        }
    }

    /// Async callers that arrive while a `syncfs` runs leave requests; the
    /// `syncfs` thread begins one more for them all once it ends, and
    /// answers each (no thread of theirs waits).
    #[test]
    fn async_callers_share_the_syncfs_threads_next_call() {
        let shared = Arc::new(SharedSyncfs::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let (release, hold) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let held = &shared;
            s.spawn(move || {
                held.sync_with(0, GATHER_MAX, || hold.recv().map_err(io::Error::other))
                    .unwrap()
            });
            while !shared.state().running {
                std::thread::yield_now();
            }
            let answers: Vec<_> = (0..4)
                .map(|_| shared.ask(0, counting(&calls, false)))
                .collect();
            assert!(shared.state().waiting >= 4);
            assert_eq!(
                calls.load(Ordering::SeqCst),
                0,
                "began under the running one"
            );
            release.send(()).unwrap();
            for answer in answers {
                answer.blocking_recv().unwrap().unwrap();
            }
        });
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        let state = shared.state();
        assert_eq!((state.finished, state.waiting), (2, 0));
        assert!(state.asks.is_empty());
    }

    #[test]
    fn a_failed_syncfs_fails_the_async_callers_it_covered() {
        let shared = Arc::new(SharedSyncfs::default());
        let calls = Arc::new(AtomicUsize::new(0));
        let answers: Vec<_> = (0..3)
            .map(|_| shared.ask(0, counting(&calls, true)))
            .collect();
        for answer in answers {
            let e = answer.blocking_recv().unwrap().unwrap_err();
            assert!(e.to_string().contains("syncfs"), "{e}");
            assert!(
                e.to_string().contains("disk gone"),
                "the cause is kept: {e}"
            );
        }
        assert!(calls.load(Ordering::SeqCst) >= 1);
        assert_eq!(shared.state().waiting, 0);
    }

    /// The `syncfs` thread ends once idle for `RUNNER_IDLE`; the next
    /// async caller starts another.
    #[test]
    fn the_syncfs_thread_ends_when_idle_and_starts_again() {
        let shared = Arc::new(SharedSyncfs::default());
        let calls = Arc::new(AtomicUsize::new(0));
        shared
            .ask(0, counting(&calls, false))
            .blocking_recv()
            .unwrap()
            .unwrap();
        let since = Instant::now();
        while shared.state().runner {
            assert!(since.elapsed() < RUNNER_IDLE * 5, "the thread never ended");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(since.elapsed() >= RUNNER_IDLE / 2);
        shared
            .ask(0, counting(&calls, false))
            .blocking_recv()
            .unwrap()
            .unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    /// A real `syncfs` through [`SharedSyncfs::sync_async`], awaited.
    #[test]
    fn sync_async_makes_a_write_durable_through_a_real_syncfs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let mut file = std::fs::File::create(&path).unwrap();
        std::io::Write::write_all(&mut file, b"{}\n").unwrap();
        let on =
            cap_std::fs::Dir::open_ambient_dir(dir.path(), cap_std::ambient_authority()).unwrap();
        let shared = Arc::new(SharedSyncfs::default());
        let before = crate::fsutil::syncs();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(shared.sync_async(&on, 0)).unwrap();
        assert!(crate::fsutil::syncs() > before);
        assert_eq!(shared.state().finished, 1);
    }
}
