//! What the engine enforces per store: memory, tables and instance counts
//! (a `ResourceLimiter`), and capped guest stdout/stderr. A violation is
//! reported to the run, which ends `Failed { limit_exceeded }`.

use super::RunHost;
use bytes::Bytes;
use cairn_types::limits::Limits;
use std::io::Write;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};

/// The store's resource limiter.
pub struct Limiter {
    limits: Limits,
    host: Option<Arc<dyn RunHost>>,
}

impl Limiter {
    /// Limits reported to `host` (none during `describe`).
    pub fn new(limits: Limits, host: Option<Arc<dyn RunHost>>) -> Self {
        Limiter { limits, host }
    }

    fn broken(&self, limit: &str, value: u64, max: u64) -> wasmtime::Result<bool> {
        if let Some(host) = &self.host {
            host.limit_broken(limit, value, max);
        }
        Err(wasmtime::Error::msg(format!(
            "limit exceeded: {limit} {value} (at most {max})"
        )))
    }
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired as u64 > self.limits.memory_bytes {
            return self.broken("memory_bytes", desired as u64, self.limits.memory_bytes);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired as u64 > self.limits.table_elements {
            return self.broken("table_elements", desired as u64, self.limits.table_elements);
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.limits.instances as usize
    }

    fn tables(&self) -> usize {
        self.limits.instances as usize
    }

    fn memories(&self) -> usize {
        self.limits.instances as usize
    }
}

/// A log file with a byte budget; writes past it fail and break `log_bytes`.
#[derive(Clone)]
pub struct CappedLog {
    file: Arc<Mutex<LazyLog>>,
    written: Arc<AtomicU64>,
    max: u64,
    host: Arc<dyn RunHost>,
}

/// A log file opened (to append) on its first write.
struct LazyLog {
    path: std::path::PathBuf,
    file: Option<std::fs::File>,
}

impl CappedLog {
    /// The log at `path`, at most `max` bytes.
    pub fn new(path: std::path::PathBuf, max: u64, host: Arc<dyn RunHost>) -> Self {
        CappedLog {
            file: Arc::new(Mutex::new(LazyLog { path, file: None })),
            written: Arc::new(AtomicU64::new(0)),
            max,
            host,
        }
    }

    fn write_bytes(&self, bytes: &[u8]) -> std::io::Result<()> {
        let total = self
            .written
            .fetch_add(bytes.len() as u64, Ordering::Relaxed)
            + bytes.len() as u64;
        if total > self.max {
            self.host.limit_broken("log_bytes", total, self.max);
            return Err(std::io::Error::other(format!(
                "log_bytes: {total} (at most {})",
                self.max
            )));
        }
        let mut log = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let log = &mut *log;
        let file = match &mut log.file {
            Some(f) => f,
            None => log.file.insert({
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o600)
                    .open(&log.path)?
            }),
        };
        file.write_all(bytes)
    }
}

impl IsTerminal for CappedLog {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedLog {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CappedLog {
    async fn ready(&mut self) {}
}

impl OutputStream for CappedLog {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes)
            .map_err(|e| StreamError::LastOperationFailed(wasmtime::Error::msg(e.to_string())))
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for CappedLog {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(self.write_bytes(buf).map(|()| buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
