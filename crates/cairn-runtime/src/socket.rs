//! `runs/<gen>/worker.sock`: a local control socket while a generation is
//! live. JSON lines in, JSON lines out:
//!
//! - `{"op": "follow", "after": N}` → the session's journal lines after `N`,
//!   until the run's terminal line;
//! - `{"op": "cancel"}` → `{"ok": true}`, and the run is cancelled (`external`);
//! - `{"op": "decide", "decision_id": ID, "value": JSON}` → `{"ok": true}`
//!   or `{"error": {"code", "message"}}`.
//!
//! The socket is removed when the generation stops. A socket left behind by
//! a killed host is evidence, never taken as live.
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

/// `worker.sock` for every live generation.
#[derive(Debug, Default)]
pub struct WorkerSocket;

impl GenerationSeam for WorkerSocket {
    fn live(&self, rt: &Runtime, generation: LiveGeneration<'_>) -> Option<Box<dyn SeamGuard>> {
        let run = Run {
            id: generation.run,
            session: generation.session.clone(),
        };
        match serve(rt, generation.dir, run) {
            Ok(handle) => Some(Box::new(handle)),
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

/// A served socket; stopping closes and removes it.
struct SocketHandle {
    task: tokio::task::JoinHandle<()>,
    /// `runs/<gen>/worker.sock` (a path, not a held directory: a waiting
    /// run holds no descriptor for it but its listener).
    path: std::path::PathBuf,
}

impl SeamGuard for SocketHandle {
    fn stop(self: Box<Self>) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Bind `worker.sock` in the generation directory: by its path when that
/// fits, else relative to the directory through `/proc/self/fd`.
fn bind(generation_dir: &GenerationDir) -> std::io::Result<UnixListener> {
    let path = generation_dir.path.join("worker.sock");
    if path.as_os_str().len() <= MAX_SOCKET_PATH {
        return UnixListener::bind(&path);
    }
    let via_fd = format!(
        "/proc/self/fd/{}/worker.sock",
        generation_dir.dir.as_raw_fd()
    );
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

fn serve(rt: &Runtime, generation_dir: &GenerationDir, run: Run) -> std::io::Result<SocketHandle> {
    let listener = bind(generation_dir)?;
    let rt = rt.clone();
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(connection(rt.clone(), run.clone(), stream));
        }
    });
    Ok(SocketHandle {
        task,
        path: generation_dir.path.join("worker.sock"),
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
