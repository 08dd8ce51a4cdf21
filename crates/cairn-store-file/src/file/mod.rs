//! The file store: each session's journal is the JSONL segment files of its
//! worker aggregate (`session/segments/<segment_id>.jsonl`). A batch is one
//! `write` and one `fdatasync`, acknowledged only after the sync. Opening a
//! segment tolerates exactly one crash-truncated final line (dropped and
//! reported); any other corrupt line, a duplicate seq or a hole fails closed
//! with the path and line number.

use crate::fsutil;
use crate::worker::{Home, WorkerDir};
use async_trait::async_trait;
use cairn_store::{Head, JournalItem, JournalStore, StoreError};
use cairn_types::event::SessionEvent;
use cairn_types::ids::{Generation, SegmentId, Seq, SessionId};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

mod runs;
pub mod segment;
mod write;
use segment::parse_lines;
pub use segment::{Scan, Walked, cores, index_segment, parse_line, scan_segment};
use write::{InlineSync, encode};

/// Journals and run facts in worker aggregates under a [`Home`].
pub struct FileStore {
    home: Home,
    /// A reader of a home another process owns: it repairs nothing (a torn
    /// tail may be a line the owner is still writing) and writes nothing.
    read_only: bool,
    sessions: Arc<Mutex<HashMap<SessionId, Arc<SessionFiles>>>>,
    notes: Arc<Mutex<Vec<String>>>,
}

/// How many sessions keep their files open; past it the least recently
/// used idle ones are closed (and re-validated when next used), so a home
/// of many parked sessions does not run out of descriptors.
pub const MAX_OPEN_SESSIONS: usize = 1024;

struct SessionFiles {
    last_used: std::sync::atomic::AtomicU64,
    /// A new session whose worker was laid out unsynced: the first commit
    /// syncs the filesystem (see `crate::worker`'s creation notes).
    fresh: std::sync::atomic::AtomicBool,
    /// Its first commit was made here and its worker's `creating` marker
    /// is still there: how many more durable commits until it is removed
    /// (`crate::worker`'s `marker.rs`).
    marked: std::sync::atomic::AtomicU8,
    worker: WorkerDir,
    segments_path: PathBuf,
    writer: Mutex<Writer>,
}

struct Writer {
    /// Segment ids in creation order; the last is active.
    order: Vec<SegmentId>,
    /// One read handle per segment, in `order`.
    readers: Vec<Arc<std::fs::File>>,
    file: std::fs::File,
    len: u64,
    last_seq: Seq,
    last_generation: Generation,
    segment: SegmentId,
    /// Where each entry is: `lines[seq - 1]`. Seq is dense from 1, so a read
    /// from any cursor is a slice of this and one positioned read per line.
    lines: Vec<LineRef>,
}

#[derive(Clone, Copy)]
pub(crate) struct LineRef {
    segment: u32,
    offset: u64,
    len: u32,
}

/// A process-wide use counter (an order, not a time).
fn use_tick() -> u64 {
    static TICK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    TICK.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> StoreError {
    let context = context.into();
    move |source| StoreError::Io { context, source }
}

impl FileStore {
    /// Whether this store may write `session` now: not as a reader, and
    /// not once the process lost the home's lock.
    fn writable(&self, session: &SessionId) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly(session.clone()));
        }
        if let Some(reason) = self.home.lost() {
            return Err(StoreError::HomeLost {
                session: session.clone(),
                reason: reason.to_string(),
            });
        }
        Ok(())
    }

    /// A store over the worker aggregates of `home`.
    pub fn new(home: Home) -> Self {
        FileStore {
            home,
            read_only: false,
            sessions: Arc::new(Mutex::new(HashMap::new())),
            notes: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// A store that only reads the home (whose owner is another process):
    /// it repairs nothing and refuses every write.
    pub fn read_only(home: Home) -> Self {
        FileStore {
            read_only: true,
            ..FileStore::new(home)
        }
    }

    /// Another handle on the same store (shared caches), for a blocking task.
    fn clone_handle(&self) -> FileStore {
        FileStore {
            home: self.home.clone(),
            read_only: self.read_only,
            sessions: self.sessions.clone(),
            notes: self.notes.clone(),
        }
    }

    /// The home.
    pub fn home(&self) -> &Home {
        &self.home
    }

    /// What recovery did on open (a dropped truncated line, say), for people.
    pub fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Forget cached handles (so the next access reopens and re-validates).
    pub fn forget(&self, session: &SessionId) {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session);
    }

    fn open(&self, session: &SessionId) -> Result<Arc<SessionFiles>, StoreError> {
        self.open_scanning(session, false).map(|(files, _)| files)
    }

    /// Open a session's files; with `scan`, a session not open yet is
    /// parsed whole while it is indexed (one pass, for a read from seq 0)
    /// and its entries come back too.
    fn open_scanning(
        &self,
        session: &SessionId,
        scan: bool,
    ) -> Result<(Arc<SessionFiles>, Option<Vec<JournalItem>>), StoreError> {
        if let Some(files) = self
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
        {
            files
                .last_used
                .store(use_tick(), std::sync::atomic::Ordering::Relaxed);
            return Ok((files.clone(), None));
        }
        let worker_id = self
            .home
            .lookup_any(session)?
            .ok_or_else(|| StoreError::UnknownSession(session.clone()))?;
        let worker = self.home.open_worker_any(worker_id)?;
        let mut meta = worker.metadata()?;
        let segments_path = worker.path().join("session").join("segments");
        let segments = worker
            .session_dir()
            .open_dir("segments")
            .map_err(io(format!("cannot open {}", segments_path.display())))?;
        // A segment switch a crash cut short: rolled back.
        if !self.read_only
            && let Some(note) =
                segment::roll_back_switch(&worker, &mut meta, &segments, &segments_path)?
        {
            self.notes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(note);
        }
        let order: Vec<SegmentId> = meta.segments.iter().map(|s| s.segment_id).collect();
        // Validate every segment; repair only the active one's torn tail.
        let mut prev = Some(Seq(0));
        let mut lines = Vec::new();
        let mut readers = Vec::new();
        let mut last_generation = Generation(0);
        let mut scanned = scan.then(Vec::new);
        for (index, segment) in order.iter().enumerate() {
            let name = format!("{segment}.jsonl");
            let path = segments_path.join(&name);
            let bytes = read_whole(&segments, &name)
                .map_err(io(format!("cannot read {}", path.display())))?;
            let (spans, good_len, truncated_line) = match &mut scanned {
                None => index_segment(&bytes, &path, prev, &mut last_generation, session.name())?,
                Some(items) => {
                    let scan = scan_segment(&bytes, &path, prev, session.name())?;
                    for item in &scan.items {
                        if let Some(g) = item.event().and_then(cairn_store::reserved_generation) {
                            last_generation = last_generation.max(g);
                        }
                    }
                    items.extend(scan.items);
                    (scan.spans, scan.good_len, scan.truncated_line)
                }
            };
            if let Some(line) = truncated_line
                && *segment != meta.active_segment
            {
                return Err(StoreError::Corrupt {
                    path,
                    line,
                    reason: "truncated line in a segment that is not the active one".into(),
                });
            }
            if let Some(line) = truncated_line
                && !self.read_only
            {
                let file = fsutil::open_append(&segments, &name)
                    .map_err(io(format!("cannot open {}", path.display())))?
                    .into_std();
                fsutil::count_sync();
                file.set_len(good_len)
                    .and_then(|()| file.sync_all())
                    .map_err(io(format!("cannot repair {}", path.display())))?;
                self.notes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(format!(
                        "{}:{line}: dropped a crash-truncated final line",
                        path.display()
                    ));
            }
            if !spans.is_empty() {
                // Dense from the first: the last seq is the first's plus the count.
                let first = prev.map(|p| p.next()).unwrap_or(Seq(1));
                prev = Some(Seq(first.0 + spans.len() as u64 - 1));
            }
            lines.extend(spans.iter().map(|&(offset, len)| LineRef {
                segment: index as u32,
                offset,
                len,
            }));
            readers.push(Arc::new(
                segments
                    .open(&name)
                    .map_err(io(format!("cannot open {}", path.display())))?
                    .into_std(),
            ));
        }
        let active = format!("{}.jsonl", meta.active_segment);
        let active_path = segments_path.join(&active);
        let file = if self.read_only {
            segments.open(&active)
        } else {
            fsutil::open_append(&segments, &active)
        }
        .map_err(io(format!("cannot open {}", active_path.display())))?
        .into_std();
        // What this store indexed (a reader leaves a torn tail alone).
        let len = lines
            .last()
            .filter(|l| l.segment as usize == order.len() - 1)
            .map_or(0, |l| l.offset + u64::from(l.len) + 1);
        let files = Arc::new(SessionFiles {
            last_used: std::sync::atomic::AtomicU64::new(use_tick()),
            fresh: self.home.awaits_first_commit(worker_id).into(),
            marked: 0.into(),
            worker,
            segments_path,
            writer: Mutex::new(Writer {
                order,
                readers,
                file,
                len,
                last_seq: prev.unwrap_or(Seq(0)),
                last_generation,
                segment: meta.active_segment,
                lines,
            }),
        });
        Ok((self.keep_open(session, files), scanned))
    }

    /// A worker just made here for `session`, its only segment empty:
    /// opened as such, without reading back what was just written.
    pub fn adopt_created(&self, worker: &WorkerDir) -> Result<(), StoreError> {
        let session = worker.session_id().clone();
        let meta = worker.metadata()?;
        let segments_path = worker.path().join("session").join("segments");
        let active = format!("{}.jsonl", meta.active_segment);
        let active_path = segments_path.join(&active);
        if meta.segments.len() != 1 {
            return Err(StoreError::SessionExists(session));
        }
        // The journal the creation made and kept open (new and empty), or
        // opened here and checked to be empty.
        let (file, reader) = match self.home.take_created_journal(worker.id()) {
            Some(file) => {
                let reader = file
                    .try_clone()
                    .map_err(io(format!("cannot open {}", active_path.display())))?;
                (file, reader)
            }
            None => {
                let segments = worker
                    .session_dir()
                    .open_dir("segments")
                    .map_err(io(format!("cannot open {}", segments_path.display())))?;
                let file = fsutil::open_append(&segments, &active)
                    .map_err(io(format!("cannot open {}", active_path.display())))?
                    .into_std();
                let len = file
                    .metadata()
                    .map_err(io(format!("cannot read {}", active_path.display())))?
                    .len();
                if len != 0 {
                    return Err(StoreError::SessionExists(session));
                }
                let reader = segments
                    .open(&active)
                    .map_err(io(format!("cannot open {}", active_path.display())))?
                    .into_std();
                (file, reader)
            }
        };
        let reader = Arc::new(reader);
        let files = Arc::new(SessionFiles {
            last_used: std::sync::atomic::AtomicU64::new(use_tick()),
            fresh: self.home.awaits_first_commit(worker.id()).into(),
            marked: 0.into(),
            worker: worker
                .try_clone()
                .map_err(io(format!("cannot open worker {}", worker.id())))?,
            segments_path,
            writer: Mutex::new(Writer {
                order: vec![meta.active_segment],
                readers: vec![reader],
                file,
                len: 0,
                last_seq: Seq(0),
                last_generation: Generation(0),
                segment: meta.active_segment,
                lines: Vec::new(),
            }),
        });
        self.keep_open(&session, files);
        Ok(())
    }

    /// `files` kept as `session`'s open files (or the ones another caller
    /// kept first), closing idle sessions past the bound.
    fn keep_open(&self, session: &SessionId, files: Arc<SessionFiles>) -> Arc<SessionFiles> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sessions.len() >= MAX_OPEN_SESSIONS {
            // Close the least recently used idle quarter (nobody holds them).
            let mut idle: Vec<(u64, SessionId)> = sessions
                .iter()
                .filter(|(_, f)| Arc::strong_count(f) == 1)
                .map(|(id, f)| {
                    (
                        f.last_used.load(std::sync::atomic::Ordering::Relaxed),
                        id.clone(),
                    )
                })
                .collect();
            idle.sort_unstable_by_key(|(t, _)| *t);
            for (_, id) in idle.into_iter().take(MAX_OPEN_SESSIONS / 4) {
                sessions.remove(&id);
            }
        }
        sessions.entry(session.clone()).or_insert(files).clone()
    }

    fn read_all(
        files: &SessionFiles,
        after: Seq,
        limit: usize,
        max_bytes: u64,
    ) -> Result<Vec<JournalItem>, StoreError> {
        use std::os::unix::fs::FileExt;
        let (refs, order, readers): (Vec<LineRef>, Vec<SegmentId>, Vec<Arc<std::fs::File>>) = {
            let writer = files.writer.lock().unwrap_or_else(|p| p.into_inner());
            let from = (after.0 as usize).min(writer.lines.len());
            let mut to = from.saturating_add(limit).min(writer.lines.len());
            if max_bytes != u64::MAX {
                // The first entry always; then while the lines fit.
                let mut bytes = 0u64;
                for (i, line) in writer.lines[from..to].iter().enumerate() {
                    bytes += u64::from(line.len) + 1;
                    if i > 0 && bytes > max_bytes {
                        to = from + i;
                        break;
                    }
                }
            }
            (
                writer.lines[from..to].to_vec(),
                writer.order.clone(),
                writer.readers.clone(),
            )
        };
        // Lines of one segment are contiguous: one positioned read per run
        // of them, then the lines are parsed (on every core for long reads).
        let mut out = Vec::with_capacity(refs.len());
        let mut start = 0;
        while start < refs.len() {
            let segment = refs[start].segment;
            let mut end = start + 1;
            while end < refs.len()
                && refs[end].segment == segment
                && refs[end].offset == refs[end - 1].offset + refs[end - 1].len as u64 + 1
            {
                end += 1;
            }
            let path = || {
                files
                    .segments_path
                    .join(format!("{}.jsonl", order[segment as usize]))
            };
            let base = refs[start].offset;
            let last = &refs[end - 1];
            let mut buf = vec![0u8; (last.offset + last.len as u64 - base) as usize];
            readers[segment as usize]
                .read_exact_at(&mut buf, base)
                .map_err(|e| io(format!("cannot read {}", path().display()))(e))?;
            let first_seq = after.0 + 1 + start as u64;
            let parsed = parse_lines(&buf, base, &refs[start..end]);
            for (i, item) in parsed.into_iter().enumerate() {
                out.push(item.map_err(|reason| StoreError::Corrupt {
                    path: path(),
                    line: 0,
                    reason: format!(
                        "entry {} changed on disk after it was written: {reason}",
                        first_seq + i as u64
                    ),
                })?);
            }
            start = end;
        }
        Ok(out)
    }
}

type Spans = Vec<(u64, u32)>;

/// A whole file, read into a buffer sized from its length (one allocation,
/// one copy).
fn read_whole(dir: &cap_std::fs::Dir, name: &str) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = dir.open(name)?.into_std();
    let len = file.metadata()?.len() as usize;
    let mut bytes = Vec::with_capacity(len + 1);
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(task_failed)
}

/// A store task that panicked or was cancelled.
fn task_failed<T>(e: tokio::task::JoinError) -> Result<T, StoreError> {
    Err(StoreError::Io {
        context: "store task".into(),
        source: std::io::Error::other(e.to_string()),
    })
}

#[async_trait]
impl JournalStore for FileStore {
    async fn create(&self, session: &SessionId, _segment: SegmentId) -> Result<(), StoreError> {
        // The aggregate (with its first segment) is made by `Home::create_worker`;
        // here we only check it is there and empty.
        let head = self.head(session).await?;
        if head.last_seq != Seq(0) {
            return Err(StoreError::SessionExists(session.clone()));
        }
        Ok(())
    }

    async fn head(&self, session: &SessionId) -> Result<Head, StoreError> {
        let files = self.open(session)?;
        let writer = files.writer.lock().unwrap_or_else(|p| p.into_inner());
        Ok(Head {
            last_seq: writer.last_seq,
            active_segment: writer.segment,
            last_generation: writer.last_generation,
        })
    }

    async fn append(
        &self,
        session: &SessionId,
        expected: Seq,
        events: &[Arc<SessionEvent>],
    ) -> Result<(), StoreError> {
        self.writable(session)?;
        let files = self.open(session)?;
        let session = session.clone();
        let events = events.to_vec();
        if files.fresh.load(std::sync::atomic::Ordering::Acquire)
            && files.worker.home().first_commit_shares_syncfs()
        {
            // A task of its own: it ends (advanced or cut back) even if
            // the caller stops waiting, as a blocking write does.
            return tokio::spawn(Self::append_first(files, session, expected, events))
                .await
                .unwrap_or_else(task_failed);
        }
        if let Some(_slot) = InlineSync::take(&files, events.len()) {
            return Self::write_batch(&files, &session, expected, &events);
        }
        blocking(move || Self::write_batch(&files, &session, expected, &events)).await
    }

    async fn read(
        &self,
        session: &SessionId,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<JournalItem>, StoreError> {
        // The first access of a session, reading all of it (a replay, an
        // export): indexed and parsed in one pass, on a blocking thread. A
        // page (the journal route) only indexes, then parses the page.
        let cold = after == Seq(0)
            && limit == usize::MAX
            && !self
                .sessions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(session);
        let mut items = if cold {
            let (this, session) = (self.clone_handle(), session.clone());
            blocking(move || {
                let (files, scanned) = this.open_scanning(&session, true)?;
                match scanned {
                    Some(items) => Ok(items),
                    None => Self::read_all(&files, after, limit, u64::MAX),
                }
            })
            .await?
        } else {
            let files = self.open(session)?;
            blocking(move || Self::read_all(&files, after, limit, u64::MAX)).await?
        };
        cairn_store::restamp(session, &mut items);
        Ok(items)
    }

    async fn read_bytes(
        &self,
        session: &SessionId,
        after: Seq,
        limit: usize,
        max_bytes: u64,
    ) -> Result<Vec<JournalItem>, StoreError> {
        let files = self.open(session)?;
        let mut items = blocking(move || Self::read_all(&files, after, limit, max_bytes)).await?;
        cairn_store::restamp(session, &mut items);
        Ok(items)
    }

    async fn start_segment(
        &self,
        session: &SessionId,
        segment: SegmentId,
        parent: SegmentId,
        first: &[Arc<SessionEvent>],
    ) -> Result<(), StoreError> {
        self.writable(session)?;
        let files = self.open(session)?;
        let session = session.clone();
        let first = first.to_vec();
        blocking(move || {
            let mut writer = files.writer.lock().unwrap_or_else(|p| p.into_inner());
            let active_path = files
                .segments_path
                .join(format!("{}.jsonl", writer.segment));
            let expected = first.first().map_or(writer.last_seq.next(), |e| e.seq);
            Self::fence(&writer, &active_path, &session, expected, &first)?;
            let dir = files
                .worker
                .session_dir()
                .open_dir("segments")
                .map_err(io(format!("cannot open {}", files.segments_path.display())))?;
            let name = format!("{segment}.jsonl");
            let path = files.segments_path.join(&name);
            // metadata.json names it pending first (seed 000's pointer); the
            // new segment is complete — its first entries written and synced
            // — before metadata.json names it active. A crash between leaves
            // the pointer, and the next owner rolls the switch back.
            let mut meta = files.worker.metadata()?;
            meta.pending_segment = Some(segment);
            files.worker.write_metadata(&meta)?;
            let (buf, spans) = encode(&first);
            let mut file = fsutil::create_file_new(&dir, &name)
                .map_err(io(format!("cannot create {}", path.display())))?
                .into_std();
            file.write_all(&buf)
                .and_then(|()| files.sync(&file))
                .map_err(io(format!("cannot write {}", path.display())))?;
            fsutil::sync_dir(&dir)
                .map_err(io(format!("cannot sync {}", files.segments_path.display())))?;
            fsutil::crash_point("segment-before-switch");
            meta.segments.push(crate::worker::SegmentRef {
                segment_id: segment,
                parent: Some(parent),
            });
            meta.active_segment = segment;
            meta.pending_segment = None;
            files.worker.write_metadata(&meta)?;
            let file = fsutil::open_append(&dir, &name)
                .map_err(io(format!("cannot open {}", path.display())))?
                .into_std();
            let reader = dir
                .open(&name)
                .map_err(io(format!("cannot open {}", path.display())))?
                .into_std();
            writer.order.push(segment);
            writer.readers.push(Arc::new(reader));
            writer.file = file;
            writer.len = 0;
            writer.segment = segment;
            Self::advance(&mut writer, &first, &buf, spans);
            Ok(())
        })
        .await
    }

    async fn bytes(&self, session: &SessionId) -> Result<u64, StoreError> {
        let files = self.open(session)?;
        let writer = files.writer.lock().unwrap_or_else(|p| p.into_inner());
        Ok(writer.lines.iter().map(|l| u64::from(l.len) + 1).sum())
    }

    fn is_complete(&self) -> bool {
        true
    }

    fn location(&self, session: &SessionId) -> Option<String> {
        let worker = self
            .home
            .open_worker(self.home.lookup(session).ok()??)
            .ok()?;
        let segment = worker.metadata().ok()?.active_segment;
        let path = worker.path().join("session").join("segments");
        Some(path.join(format!("{segment}.jsonl")).display().to_string())
    }
}
