//! Commits an emitting guest starts, run on another worker.
//!
//! A task spawned from a tokio worker goes to that worker's LIFO slot,
//! which no other worker can steal: it runs when the task being polled
//! gives the worker back. A guest emitting without a wait
//! ([`super::session::Emitter`]) gives it back only at its next yield, so
//! the commit it started — and every subscriber behind it — waited for
//! the guest while the other worker idled (an emit loop's yields cost
//! 200 µs each, the flushes they let run in front of it). Spawned from
//! this thread instead, a commit lands in the runtime's shared queue and
//! wakes an idle worker at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, OnceLock};
use tokio::runtime::Handle;

type Task = (Handle, Pin<Box<dyn Future<Output = ()> + Send>>);

struct Away {
    queue: Mutex<Vec<Task>>,
    thread: std::thread::Thread,
}

/// Spawn `task` on the current runtime, from a thread that is none of its
/// workers (see the module's notes); at once, where there is no runtime.
pub(crate) fn spawn(task: impl Future<Output = ()> + Send + 'static) {
    let Ok(handle) = Handle::try_current() else {
        return;
    };
    let away = away();
    away.queue
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((handle, Box::pin(task)));
    away.thread.unpark();
}

fn away() -> &'static Away {
    static AWAY: OnceLock<Away> = OnceLock::new();
    AWAY.get_or_init(|| {
        let handle = std::thread::Builder::new()
            .name("cairn-commit".into())
            .spawn(|| {
                loop {
                    let due = std::mem::take(
                        &mut *away().queue.lock().unwrap_or_else(|p| p.into_inner()),
                    );
                    if due.is_empty() {
                        std::thread::park();
                        continue;
                    }
                    for (handle, task) in due {
                        // A runtime shut down meanwhile drops the task.
                        drop(handle.spawn(task));
                    }
                }
            })
            .expect("the commit spawner thread starts");
        Away {
            queue: Mutex::new(Vec::new()),
            thread: handle.thread().clone(),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    /// Spawn a task from a worker that then never gives its worker back,
    /// and spin until it ran (or `wait` passed): whether it ran elsewhere.
    fn ran_beside_a_busy_worker(away: bool, wait: Duration) -> bool {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            tokio::spawn(async move {
                let ran = Arc::new(AtomicBool::new(false));
                let flag = ran.clone();
                let task = async move { flag.store(true, Ordering::Release) };
                match away {
                    true => super::spawn(task),
                    false => drop(tokio::spawn(task)),
                }
                let began = Instant::now();
                while !ran.load(Ordering::Acquire) && began.elapsed() < wait {
                    std::hint::spin_loop();
                }
                ran.load(Ordering::Acquire)
            })
            .await
            .unwrap()
        })
    }

    #[test]
    fn a_commit_spawned_away_runs_while_its_spawner_keeps_its_worker() {
        assert!(ran_beside_a_busy_worker(true, Duration::from_secs(10)));
    }

    /// Why: spawned from the worker itself, it waits for the worker.
    #[test]
    fn a_task_spawned_on_a_busy_worker_waits_for_it() {
        assert!(!ran_beside_a_busy_worker(false, Duration::from_secs(1)));
    }
}
