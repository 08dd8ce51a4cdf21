//! The write path: a batch appended to the active segment and made
//! durable — by `fdatasync`, or, for a new session's first commit, with
//! its whole tree
//! ([`Home::commit_creation`](crate::worker::Home::commit_creation), or
//! without holding a thread:
//! [`Home::first_commit_wait`](crate::worker::Home::first_commit_wait)) —
//! then recorded in the line index.

use super::{FileStore, LineRef, SessionFiles, Spans, Writer, io};
use crate::fsutil;
use cairn_store::{StoreError, check_fence};
use cairn_types::event::SessionEvent;
use cairn_types::ids::{Seq, SessionId};
use std::io::Write;
use std::sync::Arc;

impl SessionFiles {
    /// Make what was written to `file` durable: its data (`fdatasync`),
    /// or — the first commit of a new session laid out unsynced — the
    /// worker's tree, its index entry and this batch at once
    /// ([`Home::commit_creation`](crate::worker::Home::commit_creation)),
    /// after which the creation is published.
    pub(super) fn sync(&self, file: &std::fs::File) -> std::io::Result<()> {
        use std::sync::atomic::Ordering;
        if !self.fresh.load(Ordering::Acquire) {
            fsutil::count_sync();
            return file.sync_data();
        }
        self.worker.home().commit_creation(&self.worker, file)?;
        self.fresh.store(false, Ordering::Release);
        Ok(())
    }
}

impl FileStore {
    pub(super) fn write_batch(
        files: &SessionFiles,
        session: &SessionId,
        expected: Seq,
        events: &[Arc<SessionEvent>],
    ) -> Result<(), StoreError> {
        let mut writer = files.writer.lock().unwrap_or_else(|p| p.into_inner());
        let (buf, spans, path) = Self::write_unsynced(files, &writer, session, expected, events)?;
        if let Err(e) = files.sync(&writer.file) {
            return Err(Self::cut_back(&writer, &path, e));
        }
        Self::advance(&mut writer, events, &buf, spans);
        Ok(())
    }

    /// The batch written after the segment's end, unsynced: fenced
    /// ([`FileStore::fence`]), and for a new session after its tree's last
    /// in-place write. The written bytes, their spans and the segment's
    /// path; a write that fails is cut back.
    fn write_unsynced(
        files: &SessionFiles,
        writer: &Writer,
        session: &SessionId,
        expected: Seq,
        events: &[Arc<SessionEvent>],
    ) -> Result<(Vec<u8>, Spans, std::path::PathBuf), StoreError> {
        let path = files
            .segments_path
            .join(format!("{}.jsonl", writer.segment));
        Self::fence(writer, &path, session, expected, events)?;
        let (buf, spans) = encode(events);
        if files.fresh.load(std::sync::atomic::Ordering::Acquire) {
            // The first entry is written after the tree's last in-place write.
            files.worker.home().close_tree(files.worker.id());
        }
        if let Err(e) = (&writer.file).write_all(&buf) {
            return Err(Self::cut_back(writer, &path, e));
        }
        Ok((buf, spans, path))
    }

    /// A write or its sync failed: the segment is cut back to where this
    /// store last wrote, so it stays well-formed.
    fn cut_back(writer: &Writer, path: &std::path::Path, e: std::io::Error) -> StoreError {
        let _ = writer.file.set_len(writer.len);
        io(format!("cannot append to {}", path.display()))(e)
    }

    /// The first commit of a new session that shares the `syncfs`
    /// ([`Home::first_commit_wait`](crate::worker::Home::first_commit_wait)):
    /// its batch — a few KiB to the page cache — is written on this thread,
    /// as its tree was laid out, and the wait for the `syncfs` holds no
    /// thread. Like [`FileStore::write_batch`] otherwise: cut back when it
    /// fails, advanced only once durable.
    pub(super) async fn append_first(
        files: Arc<SessionFiles>,
        session: SessionId,
        expected: Seq,
        events: Vec<Arc<SessionEvent>>,
    ) -> Result<(), StoreError> {
        let home = files.worker.home();
        let (buf, spans, path, durable) = {
            let writer = files.writer.lock().unwrap_or_else(|p| p.into_inner());
            let (buf, spans, path) =
                Self::write_unsynced(&files, &writer, &session, expected, &events)?;
            let durable = home.first_commit_wait(files.worker.id());
            (buf, spans, path, durable)
        };
        if let Err(e) = durable.await {
            let writer = files.writer.lock().unwrap_or_else(|p| p.into_inner());
            return Err(Self::cut_back(&writer, &path, e));
        }
        home.creation_durable(&files.worker);
        files
            .fresh
            .store(false, std::sync::atomic::Ordering::Release);
        let mut writer = files.writer.lock().unwrap_or_else(|p| p.into_inner());
        Self::advance(&mut writer, &events, &buf, spans);
        Ok(())
    }

    /// The fence: the batch must continue this store's head, and the
    /// active segment must still end where this store last wrote — bytes
    /// past it are another process's appends.
    pub(super) fn fence(
        writer: &Writer,
        path: &std::path::Path,
        session: &SessionId,
        expected: Seq,
        events: &[Arc<SessionEvent>],
    ) -> Result<(), StoreError> {
        check_fence(session, writer.last_seq, expected, events)?;
        let on_disk = writer
            .file
            .metadata()
            .map_err(io(format!("cannot stat {}", path.display())))?
            .len();
        if on_disk != writer.len {
            let mut tail = Vec::new();
            if on_disk > writer.len {
                use std::os::unix::fs::FileExt;
                tail = vec![0u8; (on_disk - writer.len).min(64 << 20) as usize];
                let _ = writer.file.read_exact_at(&mut tail, writer.len);
            }
            let more = tail.iter().filter(|&&b| b == b'\n').count() as u64;
            return Err(StoreError::Conflict {
                session: session.clone(),
                expected,
                head: Seq(writer.last_seq.0 + more),
            });
        }
        Ok(())
    }

    /// Record a written batch: its lines, the length, the head.
    pub(super) fn advance(
        writer: &mut Writer,
        events: &[Arc<SessionEvent>],
        buf: &[u8],
        spans: Spans,
    ) {
        let (base, segment) = (writer.len, (writer.order.len() - 1) as u32);
        writer
            .lines
            .extend(spans.into_iter().map(|(offset, len)| LineRef {
                segment,
                offset: base + offset,
                len,
            }));
        writer.len += buf.len() as u64;
        if let Some(last) = events.last() {
            writer.last_seq = last.seq;
        }
        for g in events
            .iter()
            .filter_map(|e| cairn_store::reserved_generation(e))
        {
            writer.last_generation = writer.last_generation.max(g);
        }
    }
}

/// The batch's lines (each ending in a newline) and each one's span.
pub(super) fn encode(events: &[Arc<SessionEvent>]) -> (Vec<u8>, Spans) {
    let mut buf = Vec::with_capacity(events.len() * 256);
    let mut spans = Vec::with_capacity(events.len());
    for event in events {
        let start = buf.len();
        buf.extend_from_slice(event.line().as_bytes());
        spans.push((start as u64, (buf.len() - start) as u32));
        buf.push(b'\n');
    }
    (buf, spans)
}
