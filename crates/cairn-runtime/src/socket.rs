//! `runs/<gen>/worker.sock`: a local control socket while a generation is
//! live. JSON lines in, JSON lines out:
//!
//! - `{"op": "follow", "after": N}` → the session's journal lines after `N`,
//!   until the run's terminal line;
//! - `{"op": "cancel"}` → `{"ok": true}`, and the run is cancelled (`external`);
//! - `{"op": "decide", "decision_id": ID, "value": JSON}` → `{"ok": true}`
//!   or `{"error": {"code", "message"}}`.
//!
//! The socket is bound once the generation has lived [`BIND_AFTER`], or as
//! soon as its run waits on something outside it (a decision, a host call,
//! a child) — before the decision is journaled, so a run waiting on one
//! always has it. A run that ends sooner has none. The socket is removed
//! when the generation stops. A socket left behind by a killed host is
//! evidence, never taken as live.
//!
//! A seam like the HTTP API: it uses only the runtime's public calls
//! (`subscribe`, `decide`, `cancel`), and the runtime knows it only as a
//! [`GenerationSeam`] it tells when a generation goes live.

use crate::ErrorCode;
use crate::ids::{DecisionId, RunId, Seq, SessionId};
use crate::journal::Delivery;
use crate::journal::event::CancelReason;
use crate::runtime::{GenerationSeam, LiveGeneration, Runtime, SeamGuard};
use crate::worker::GenerationDir;
use std::os::fd::AsRawFd;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// The longest path a Unix socket can bind.
pub const MAX_SOCKET_PATH: usize = 107;

/// `worker.sock` for every live generation that lives past [`BIND_AFTER`]
/// or waits on something outside it.
#[derive(Debug, Default)]
pub struct WorkerSocket;

/// How long a generation lives before its socket is bound, unless it waits
/// first (a decision, a host call, a child): a run that ends sooner (most
/// one-turn runs end in a few milliseconds) never has one — nothing could
/// have followed or cancelled it in time, and a socket's bind, listener and
/// removal cost a tenth of such a run's CPU and an inode made and freed.
pub const BIND_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

impl GenerationSeam for WorkerSocket {
    fn live(&self, rt: &Runtime, generation: LiveGeneration<'_>) -> Option<Box<dyn SeamGuard>> {
        let run = Run {
            id: generation.run,
            session: generation.session.clone(),
        };
        match Lazy::new(rt, generation.dir, run) {
            Ok(lazy) => Some(Box::new(lazy)),
            Err(e) => {
                tracing::warn!("run {}: no worker.sock: {e}", generation.run);
                None
            }
        }
    }
}

/// The run a socket serves.
#[derive(Clone)]
struct Run {
    id: RunId,
    session: SessionId,
}

/// A generation's socket: bound after [`BIND_AFTER`] or at its run's
/// first wait, whichever comes first; stopping closes and removes it.
struct Lazy {
    shared: std::sync::Arc<Shared>,
    /// Binds after [`BIND_AFTER`] (aborted when the generation stops first).
    timer: tokio::task::JoinHandle<()>,
}

struct Shared {
    rt: Runtime,
    run: Run,
    /// `runs/<gen>/worker.sock` (a path, not a held directory: a waiting
    /// run holds no descriptor for it but its listener).
    path: std::path::PathBuf,
    /// The generation directory, held only when the path is too long to
    /// bind (then the socket is bound relative to it).
    dir: Option<std::os::fd::OwnedFd>,
    state: std::sync::Mutex<State>,
}

enum State {
    Unbound,
    /// Serving: the accept loop.
    Bound(tokio::task::JoinHandle<()>),
    Stopped,
}

impl Lazy {
    fn new(rt: &Runtime, generation_dir: &GenerationDir, run: Run) -> std::io::Result<Lazy> {
        let path = generation_dir.path.join("worker.sock");
        let dir = if path.as_os_str().len() <= MAX_SOCKET_PATH {
            None
        } else {
            Some(generation_dir.dir.try_clone()?.into_std_file().into())
        };
        let shared = std::sync::Arc::new(Shared {
            rt: rt.clone(),
            run,
            path,
            dir,
            state: std::sync::Mutex::new(State::Unbound),
        });
        let timer = tokio::spawn({
            let shared = shared.clone();
            async move {
                tokio::time::sleep(BIND_AFTER).await;
                shared.bind();
            }
        });
        Ok(Lazy { shared, timer })
    }
}

impl Shared {
    /// Bind and serve, unless it is bound already or the generation stopped.
    fn bind(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(*state, State::Unbound) {
            return;
        }
        match bind(&self.path, self.dir.as_ref()) {
            Ok(listener) => {
                let (rt, run) = (self.rt.clone(), self.run.clone());
                *state = State::Bound(tokio::spawn(async move {
                    while let Ok((stream, _)) = listener.accept().await {
                        tokio::spawn(connection(rt.clone(), run.clone(), stream));
                    }
                }));
            }
            Err(e) => {
                tracing::warn!("run {}: no worker.sock: {e}", self.run.id);
                *state = State::Stopped;
            }
        }
    }
}

impl SeamGuard for Lazy {
    fn waiting(&self) {
        self.shared.bind();
    }

    fn stop(self: Box<Self>) {
        drop(self);
    }
}

/// Stopped with its generation — or dropped unstopped (a run task aborted
/// at shutdown): either way nothing binds later, and a bound socket goes.
impl Drop for Lazy {
    fn drop(&mut self) {
        self.timer.abort();
        let mut state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        if let State::Bound(task) = std::mem::replace(&mut *state, State::Stopped) {
            task.abort();
            let _ = std::fs::remove_file(&self.shared.path);
        }
    }
}

/// Bind `worker.sock`: by its path when that fits, else relative to its
/// directory (`dir`) through `/proc/self/fd`.
fn bind(
    path: &std::path::Path,
    dir: Option<&std::os::fd::OwnedFd>,
) -> std::io::Result<UnixListener> {
    let Some(dir) = dir else {
        return UnixListener::bind(path);
    };
    let via_fd = format!("/proc/self/fd/{}/worker.sock", dir.as_raw_fd());
    UnixListener::bind(&via_fd).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "{} is {} bytes, over the {MAX_SOCKET_PATH}-byte socket limit, and binding relative to its directory failed: {e}",
                path.display(),
                path.as_os_str().len()
            ),
        )
    })
}

fn error_line(code: ErrorCode, message: impl std::fmt::Display) -> String {
    serde_json::json!({ "error": { "code": code, "message": message.to_string() } }).to_string()
}

async fn connection(rt: Runtime, run: Run, stream: UnixStream) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let reply = match serde_json::from_str::<serde_json::Value>(&line) {
            Err(e) => error_line(
                ErrorCode::InvalidJson,
                format!("the request is not JSON: {e}"),
            ),
            Ok(req) => match req.get("op").and_then(|o| o.as_str()) {
                Some("cancel") => {
                    match rt.cancel(
                        run.id,
                        CancelReason::External,
                        "cancelled through worker.sock",
                    ) {
                        Ok(()) => serde_json::json!({ "ok": true }).to_string(),
                        Err(e) => error_line(e.code(), e),
                    }
                }
                Some("decide") => {
                    let id = req
                        .get("decision_id")
                        .and_then(|d| d.as_str())
                        .map(str::parse::<DecisionId>);
                    match (id, req.get("value")) {
                        (Some(Ok(id)), Some(value)) => match rt.decide(&id, value.clone()).await {
                            Ok(()) => serde_json::json!({ "ok": true }).to_string(),
                            Err(e) => error_line(e.code(), e),
                        },
                        (Some(Err(e)), _) => error_line(ErrorCode::InvalidRequest, e),
                        _ => error_line(
                            ErrorCode::InvalidRequest,
                            "decide needs \"decision_id\" and \"value\"",
                        ),
                    }
                }
                Some("follow") => {
                    let after = Seq(req.get("after").and_then(|a| a.as_u64()).unwrap_or(0));
                    follow(&rt, &run, after, &mut write).await;
                    return;
                }
                Some(other) => error_line(
                    ErrorCode::InvalidRequest,
                    format!("unknown op {other:?}; use follow, cancel or decide"),
                ),
                None => error_line(ErrorCode::InvalidRequest, "the request has no \"op\""),
            },
        };
        if write
            .write_all(format!("{reply}\n").as_bytes())
            .await
            .is_err()
        {
            return;
        }
    }
}

async fn follow(rt: &Runtime, run: &Run, after: Seq, write: &mut tokio::net::unix::OwnedWriteHalf) {
    let Ok(mut sub) = rt.subscribe(&run.session, after).await else {
        return;
    };
    while let Some(Ok(delivery)) = sub.next().await {
        let (line, end) = match &delivery {
            Delivery::Event(e) => (
                e.line().to_string(),
                e.run_id == Some(run.id) && e.facts.is_some(),
            ),
            Delivery::Unknown { raw, .. } => (raw.clone(), false),
            Delivery::Gap { resumed_at } => (
                serde_json::json!({ "gap": { "resumed_at": resumed_at } }).to_string(),
                false,
            ),
        };
        if write
            .write_all(format!("{line}\n").as_bytes())
            .await
            .is_err()
            || end
        {
            return;
        }
    }
}
