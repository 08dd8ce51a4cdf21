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
//! wakes an idle worker at once. A wake-up is the same: a task woken from
//! a worker goes to that worker's LIFO slot, so a commit the guest wakes
//! ([`wake`]) is woken from here.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use tokio::runtime::Handle;
use tokio::sync::Notify;

/// What the thread does next: spawn a task, or wake one.
enum Job {
    Spawn(Handle, Pin<Box<dyn Future<Output = ()> + Send>>),
    Wake(Arc<Notify>),
}

struct Away {
    queue: Mutex<Vec<Job>>,
    thread: std::thread::Thread,
}

/// Spawn `task` on the current runtime, from a thread that is none of its
/// workers (see the module's notes); at once, where there is no runtime.
pub(crate) fn spawn(task: impl Future<Output = ()> + Send + 'static) {
    let Ok(handle) = Handle::try_current() else {
        return;
    };
    away(Job::Spawn(handle, Box::pin(task)));
}

/// Wake one task waiting on `notify` ([`Notify::notify_one`]), from a
/// thread that is none of the runtime's workers: woken from the worker a
/// guest keeps, it would wait in that worker's LIFO slot for the guest's
/// next yield — even once what it waits for is there. At once, where
/// there is no runtime.
pub(crate) fn wake(notify: &Arc<Notify>) {
    if Handle::try_current().is_err() {
        notify.notify_one();
        return;
    }
    away(Job::Wake(notify.clone()));
}

fn away(job: Job) {
    let away = thread();
    away.queue
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(job);
    away.thread.unpark();
}

fn thread() -> &'static Away {
    static AWAY: OnceLock<Away> = OnceLock::new();
    AWAY.get_or_init(|| {
        let handle = std::thread::Builder::new()
            .name("cairn-commit".into())
            .spawn(|| {
                loop {
                    let due = std::mem::take(
                        &mut *thread().queue.lock().unwrap_or_else(|p| p.into_inner()),
                    );
                    if due.is_empty() {
                        std::thread::park();
                        continue;
                    }
                    for job in due {
                        match job {
                            // A runtime shut down meanwhile drops the task.
                            Job::Spawn(handle, task) => drop(handle.spawn(task)),
                            Job::Wake(notify) => notify.notify_one(),
                        }
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

    fn two_workers() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// Keep this worker, spinning until `ran` is set or `wait` passed:
    /// whether it was set.
    fn spin_until(ran: &AtomicBool, wait: Duration) -> bool {
        let began = Instant::now();
        while !ran.load(Ordering::Acquire) && began.elapsed() < wait {
            std::hint::spin_loop();
        }
        ran.load(Ordering::Acquire)
    }

    /// Spawn a task from a worker that then never gives its worker back,
    /// and spin until it ran (or `wait` passed): whether it ran elsewhere.
    fn ran_beside_a_busy_worker(away: bool, wait: Duration) -> bool {
        two_workers().block_on(async move {
            tokio::spawn(async move {
                let ran = Arc::new(AtomicBool::new(false));
                let flag = ran.clone();
                let task = async move { flag.store(true, Ordering::Release) };
                match away {
                    true => super::spawn(task),
                    false => drop(tokio::spawn(task)),
                }
                spin_until(&ran, wait)
            })
            .await
            .unwrap()
        })
    }

    /// Wake a task waiting on a `Notify` from a worker that then never
    /// gives its worker back, and spin until it ran (or `wait` passed):
    /// whether it ran elsewhere.
    fn woken_beside_a_busy_worker(away: bool, wait: Duration) -> bool {
        two_workers().block_on(async move {
            let notify = Arc::new(tokio::sync::Notify::new());
            let (ran, waiting) = (
                Arc::new(AtomicBool::new(false)),
                Arc::new(AtomicBool::new(false)),
            );
            let waiter = {
                let (notify, ran, waiting) = (notify.clone(), ran.clone(), waiting.clone());
                tokio::spawn(async move {
                    let notified = notify.notified();
                    tokio::pin!(notified);
                    notified.as_mut().enable();
                    waiting.store(true, Ordering::Release);
                    notified.await;
                    ran.store(true, Ordering::Release);
                })
            };
            while !waiting.load(Ordering::Acquire) {
                tokio::task::yield_now().await;
            }
            let ran = tokio::spawn(async move {
                match away {
                    true => super::wake(&notify),
                    false => notify.notify_one(),
                }
                spin_until(&ran, wait)
            })
            .await
            .unwrap();
            waiter.await.unwrap();
            ran
        })
    }

    #[test]
    fn a_wake_from_away_runs_its_task_while_the_waker_keeps_its_worker() {
        assert!(woken_beside_a_busy_worker(true, Duration::from_secs(10)));
    }

    /// Why: woken from the worker itself, it waits for the worker.
    #[test]
    fn a_task_woken_on_a_busy_worker_waits_for_it() {
        assert!(!woken_beside_a_busy_worker(false, Duration::from_secs(1)));
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
