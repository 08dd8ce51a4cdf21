//! Writes charged to the run's worktree budget before they happen
//! ([`crate::worktree::ArtifactMeter`]): what [`super::stable_fs`] checks
//! for `write`, `set-size` and `create-directory-at`, and the output stream
//! `write-via-stream` and `append-via-stream` hand out, wrapped so each of
//! its writes is charged too. A write that would pass `artifact_bytes`
//! fails with `insufficient-space`, as a full disk would; the guest sees
//! an error value, the host's disk stays as it was.

use crate::worktree::ArtifactMeter;
use bytes::Bytes;
use std::sync::Arc;
use wasmtime_wasi::p2::{DynOutputStream, OutputStream, Pollable, StreamError, StreamResult};

/// The error a refused write carries: the guest's `filesystem-error-code`
/// reads it as `insufficient-space`.
pub(super) fn no_space() -> std::io::Error {
    std::io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error())
}

/// The bytes a write of `len` at `offset` adds to a file of `size`.
pub(super) fn growth(size: u64, offset: u64, len: u64) -> u64 {
    offset.saturating_add(len).saturating_sub(size)
}

/// Where a metered stream writes.
enum At {
    /// From this offset on (`write-via-stream`).
    Offset(u64),
    /// At the file's end, whatever it is (`append-via-stream`).
    End,
}

/// A file's output stream whose writes are charged first.
pub(super) struct Metered {
    inner: DynOutputStream,
    file: Arc<std::fs::File>,
    meter: Arc<ArtifactMeter>,
    at: At,
    /// The furthest this stream has written (its writes may not have
    /// reached the file yet when the next one is charged).
    end: u64,
    /// Bytes charged to writes not yet known to have reached the file.
    inflight: u64,
}

impl Drop for Metered {
    fn drop(&mut self) {
        self.meter.landed(self.inflight);
    }
}

impl Metered {
    pub(super) fn at(
        inner: DynOutputStream,
        file: Arc<std::fs::File>,
        meter: Arc<ArtifactMeter>,
        offset: Option<u64>,
    ) -> Self {
        Metered {
            inner,
            file,
            meter,
            at: offset.map_or(At::End, At::Offset),
            end: 0,
            inflight: 0,
        }
    }
}

#[async_trait::async_trait]
impl Pollable for Metered {
    async fn ready(&mut self) {
        self.inner.ready().await;
        // Ready again: the writes before have reached the file.
        self.meter.landed(std::mem::take(&mut self.inflight));
    }
}

#[async_trait::async_trait]
impl OutputStream for Metered {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        let len = bytes.len() as u64;
        let size = self
            .file
            .metadata()
            .map_err(|e| StreamError::LastOperationFailed(e.into()))?
            .len()
            .max(self.end);
        let offset = match self.at {
            At::Offset(o) => o,
            At::End => size,
        };
        let grows = growth(size, offset, len);
        if !self.meter.take_inflight(grows) {
            return Err(StreamError::LastOperationFailed(no_space().into()));
        }
        match self.inner.write(bytes) {
            Ok(()) => {
                self.inflight += grows;
                self.end = self.end.max(offset.saturating_add(len));
                if let At::Offset(o) = &mut self.at {
                    *o = o.saturating_add(len);
                }
                Ok(())
            }
            Err(e) => {
                self.meter.give(grows);
                self.meter.landed(grows);
                Err(e)
            }
        }
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.inner.check_write()
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await
    }
}
