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
use std::sync::atomic::{AtomicBool, Ordering};

/// The most entries a batch written on its caller's worker holds (a run
/// start's reservation and `Started`, a run's end, a host call's record).
pub(super) const INLINE_BATCH: usize = 4;

/// Taken by the one small write and sync written on its caller's worker.
static INLINE_BUSY: AtomicBool = AtomicBool::new(false);

/// The one small write and sync at a time that runs on its caller's
/// worker instead of a blocking thread. Handed to a blocking thread, a
/// run start's first batch waited for that thread to wake (16 µs) and
/// then for it to wake the parked worker back (31 µs), around a 210 µs
/// `fdatasync` (`docs/bench/round23-start-timeline.json`); on its
/// caller's worker it waits for neither, and whoever waits for it (the
/// start's caller) is woken on the same worker. (`block_in_place` does
/// not do this: it hands the worker's queue to another thread, and the
/// caller is woken there.)
///
/// One at a time, and only on a runtime with more than one worker: the
/// others go on serving while it blocks, and every other write goes to
/// the blocking pool as before. Only a plain `fdatasync` of a small
/// batch: a new session's first commit (which may wait for a shared
/// `syncfs` gathering other creations) stays on the blocking pool, and so
/// does a batch over [`INLINE_BATCH`] (an emit's group commit under load;
/// a slow emitter's commit of a few entries is small and may come here).
pub(super) struct InlineSync(());

impl InlineSync {
    /// The slot, when a batch of `entries` for `files` may be written here.
    pub(super) fn take(files: &SessionFiles, entries: usize) -> Option<InlineSync> {
        if entries > INLINE_BATCH || files.fresh.load(Ordering::Acquire) {
            return None;
        }
        let many_workers = tokio::runtime::Handle::try_current().is_ok_and(|h| {
            h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
                && h.metrics().num_workers() > 1
        });
        let free = || {
            INLINE_BUSY
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        };
        (many_workers && free()).then(|| {
            #[cfg(test)]
            tests::began();
            InlineSync(())
        })
    }
}

impl Drop for InlineSync {
    fn drop(&mut self) {
        #[cfg(test)]
        tests::ended();
        INLINE_BUSY.store(false, Ordering::Release);
    }
}

/// A new session's `creating` marker goes with the second durable commit
/// after its first (`crate::worker`'s `marker.rs`): the one right after is
/// usually a run's start, whose `fdatasync` — the journal's first — would
/// also write the worker's directory, dirty from the removal.
const MARKER_COMMITS: u8 = 2;

impl SessionFiles {
    /// A commit after the first is durable: the marker goes when its count
    /// is down (commits of one session are serialized by its writer).
    fn count_down_marker(&self) {
        if self.marked.load(Ordering::Relaxed) == 0 {
            return;
        }
        let before = self
            .marked
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if before == Ok(1) {
            self.worker.home().unmark_worker(&self.worker);
        }
    }

    /// Make what was written to `file` durable: its data (`fdatasync`),
    /// or — the first commit of a new session laid out unsynced — the
    /// worker's tree, its index entry and this batch at once
    /// ([`Home::commit_creation`](crate::worker::Home::commit_creation)),
    /// after which the creation is published.
    pub(super) fn sync(&self, file: &std::fs::File) -> std::io::Result<()> {
        use std::sync::atomic::Ordering;
        if !self.fresh.load(Ordering::Acquire) {
            fsutil::count_sync();
            file.sync_data()?;
            self.count_down_marker();
            return Ok(());
        }
        self.worker.home().commit_creation(&self.worker, file)?;
        self.marked.store(MARKER_COMMITS, Ordering::Release);
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
        files.marked.store(MARKER_COMMITS, Ordering::Release);
        files.fresh.store(false, Ordering::Release);
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
    // Sized once: a guess grown at the end copied the whole batch again
    // (half the cost of an emitted batch's encoding, in a profile of
    // `cairn bench runtime --only emit`).
    let bytes = events.iter().map(|e| e.line().len() + 1).sum();
    let mut buf = Vec::with_capacity(bytes);
    let mut spans = Vec::with_capacity(events.len());
    for event in events {
        let start = buf.len();
        buf.extend_from_slice(event.line().as_bytes());
        spans.push((start as u64, (buf.len() - start) as u32));
        buf.push(b'\n');
    }
    (buf, spans)
}

#[cfg(test)]
mod tests {
    use super::super::FileStore;
    use super::INLINE_BATCH;
    use crate::worker::Home;
    use cairn_store::JournalStore;
    use cairn_types::event::{AgentEvent, Payload, SessionEvent};
    use cairn_types::ids::{Seq, SessionId};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Batches written on their caller's worker, in this process.
    static INLINE_WRITES: AtomicU64 = AtomicU64::new(0);
    /// Those being written now, and the most at once.
    static INLINE_NOW: AtomicU64 = AtomicU64::new(0);
    static INLINE_MOST: AtomicU64 = AtomicU64::new(0);

    pub(super) fn began() {
        INLINE_WRITES.fetch_add(1, Ordering::Relaxed);
        let now = INLINE_NOW.fetch_add(1, Ordering::SeqCst) + 1;
        INLINE_MOST.fetch_max(now, Ordering::SeqCst);
    }

    pub(super) fn ended() {
        INLINE_NOW.fetch_sub(1, Ordering::SeqCst);
    }

    /// Entry `seq` of `session`: a text delta saying `text`.
    fn text_entry(
        session: &SessionId,
        segment: cairn_types::ids::SegmentId,
        seq: u64,
        text: String,
    ) -> Arc<SessionEvent> {
        Arc::new(SessionEvent {
            session_id: session.clone(),
            segment_id: segment,
            run_id: None,
            seq: Seq(seq),
            at_ms: 1,
            payload: Payload::Agent(AgentEvent::TextDelta { text, by: None }),
            facts: None,
            line: Default::default(),
        })
    }

    fn runtime(workers: usize) -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .unwrap()
    }

    /// Small batches of several sessions appended at once from a runtime's
    /// workers: some are written on the caller's worker, one at a time, the
    /// rest on the blocking pool, and every session reads back whole and in
    /// order. A runtime of one worker, or a batch over `INLINE_BATCH`,
    /// never blocks its worker.
    #[test]
    fn small_batches_written_on_their_callers_worker_read_back_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::open(tmp.path()).unwrap();
        let sessions: Vec<(SessionId, cairn_types::ids::SegmentId)> = (0..6)
            .map(|i| {
                let session = SessionId::parse(&format!("inline-{i}")).unwrap();
                let worker = home
                    .create_published_worker(&session, None, "default")
                    .unwrap();
                (session, worker.metadata().unwrap().active_segment)
            })
            .collect();
        let store = Arc::new(FileStore::new(home));
        let event = |session: &SessionId, segment, seq: u64| {
            text_entry(session, segment, seq, format!("{session} {seq}"))
        };
        // Batch sizes 1..=5: the fives are over the bound.
        let sizes = |round: u64| (round % (INLINE_BATCH as u64 + 1)) + 1;
        let write = |workers: usize| {
            let before = INLINE_WRITES.load(Ordering::Relaxed);
            runtime(workers).block_on(async {
                let mut tasks = Vec::new();
                for (session, segment) in sessions.clone() {
                    let store = store.clone();
                    tasks.push(tokio::spawn(async move {
                        let mut last = store.head(&session).await.unwrap().last_seq.0;
                        for round in 0..40 {
                            let batch: Vec<_> = (1..=sizes(round))
                                .map(|k| event(&session, segment, last + k))
                                .collect();
                            store.append(&session, Seq(last + 1), &batch).await.unwrap();
                            last += batch.len() as u64;
                        }
                    }));
                }
                for task in tasks {
                    task.await.unwrap();
                }
            });
            INLINE_WRITES.load(Ordering::Relaxed) - before
        };
        assert_eq!(write(1), 0, "a one-worker runtime blocked its worker");
        let inline = write(2);
        let total = 6 * 40;
        assert!(inline > 0, "no batch was written on its caller's worker");
        assert_eq!(
            INLINE_MOST.load(Ordering::SeqCst),
            1,
            "more than one worker blocked at once"
        );
        // The fives (8 of every 40 rounds) never are.
        assert!(
            inline <= 6 * 32,
            "{inline} of {total} batches written inline"
        );
        runtime(2).block_on(async {
            for (session, _) in &sessions {
                let items = store.read(session, Seq(0), usize::MAX).await.unwrap();
                let texts: Vec<String> = items
                    .iter()
                    .filter_map(|i| match &i.event()?.payload {
                        Payload::Agent(AgentEvent::TextDelta { text, .. }) => Some(text.clone()),
                        _ => None,
                    })
                    .collect();
                let per_pass: u64 = (0..40).map(sizes).sum();
                let wanted: Vec<String> = (1..=2 * per_pass)
                    .map(|seq| format!("{session} {seq}"))
                    .collect();
                assert_eq!(texts, wanted, "session {session} read back otherwise");
            }
        });
    }

    /// A new session's `creating` marker stays through the commit after
    /// its first (a run's start, whose `fdatasync` would write the dirty
    /// worker directory with it) and goes with the next; the session is
    /// served meanwhile, here and to a reader elsewhere.
    #[test]
    fn a_new_sessions_marker_goes_with_the_second_commit_after_its_first() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::open(tmp.path()).unwrap();
        let session = SessionId::parse("marker-commits").unwrap();
        let worker = home.create_worker_unsynced(&session, None, "t").unwrap();
        let segment = worker.metadata().unwrap().active_segment;
        let marker = tmp.path().join(format!("workers/{}/creating", worker.id()));
        let store = FileStore::new(home.clone());
        let entry = |seq: u64| text_entry(&session, segment, seq, format!("entry {seq}"));
        let rt = runtime(2);
        let commit = |seq: u64| {
            rt.block_on(store.append(&session, Seq(seq), &[entry(seq)]))
                .unwrap()
        };
        let reader = || Home::open_existing(tmp.path()).unwrap();
        commit(1);
        assert!(!home.awaits_first_commit(worker.id()));
        assert!(marker.exists(), "the first commit removed the marker");
        assert_eq!(home.lookup(&session).unwrap(), Some(worker.id()));
        assert_eq!(
            reader().lookup(&session).unwrap(),
            Some(worker.id()),
            "a reader elsewhere does not see the committed session"
        );
        commit(2);
        assert!(
            marker.exists(),
            "the marker went with the commit right after the first"
        );
        commit(3);
        assert!(
            !marker.exists(),
            "the marker outlived the second commit after the first"
        );
        assert_eq!(reader().lookup(&session).unwrap(), Some(worker.id()));
        let items = rt
            .block_on(store.read(&session, Seq(0), usize::MAX))
            .unwrap();
        assert_eq!(items.len(), 3);
    }
}
