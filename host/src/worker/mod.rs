//! The worker aggregate on disk (seed 000's layout):
//!
//! ```text
//! <home>/index/sessions/<v5-uuid of session_id>.json
//! <home>/workers/<worker_id>/{worker.json, metadata.json, session/, runs/}
//! ```
//!
//! Every access goes through a cap-std [`Dir`] opened from the home; names
//! are built only from ids the host minted or v5 keys.

use crate::fsutil::{self, DocumentError};
use crate::ids::{Generation, SegmentId, SessionId, WorkerId};
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The on-disk format of a worker aggregate, recorded in `session.json`.
pub const FORMAT: &str = "worker-aggregate-v1";
/// The work queue's worktree identity of the key a worker serves.
pub const WORKTREE: &str = "worktree.json";
pub(crate) const DOC_VERSION: u64 = 1;

mod cleanup;
mod components;
mod docs;
mod generation;
pub(crate) use cleanup::MIGRATING;
pub use cleanup::Recovery;
use cleanup::{CREATING, DELETING, FORKING, LAYING_OUT, is_staged};
pub use docs::*;
pub use generation::{GenerationDir, Reserved};

/// Something went wrong with the layout on disk.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// An I/O error, with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, naming the file.
        context: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A document is unreadable or of another version.
    #[error("worker {worker}: {source}")]
    Document {
        /// The worker (or `index`).
        worker: String,
        /// The cause.
        #[source]
        source: DocumentError,
    },
    /// There is no home here (a reader creates none).
    #[error("no cairn home at {0} (nothing has been written there yet)")]
    NoHome(PathBuf),
    /// No such worker in this home.
    #[error("no worker {0} in this home")]
    NoSuchWorker(WorkerId),
    /// The generation directory exists already: it is never reused.
    #[error(
        "worker {worker}: generation directory runs/{generation} already exists; a generation is never reused (the reservation is consumed: retry to get the next one)"
    )]
    GenerationCollision {
        /// The worker.
        worker: WorkerId,
        /// The generation whose directory exists.
        generation: Generation,
    },
    /// A document names another id than the one it is stored under.
    #[error("worker {worker}: {what}")]
    Mismatch {
        /// The worker.
        worker: WorkerId,
        /// What does not match.
        what: String,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> WorkerError {
    let context = context.into();
    move |source| WorkerError::Io { context, source }
}

/// A cairn home: the root of the file layout.
#[derive(Clone)]
pub struct Home {
    inner: Arc<HomeInner>,
}

struct HomeInner {
    path: PathBuf,
    root: Dir,
    index: Dir,
    workers: Dir,
    /// Serializes generation reservations within this process.
    reserve: Mutex<()>,
    /// Every published session of the home and its worker, as the owner's
    /// open found them (and kept current since): an index entry lost while
    /// this process owns the home is written again instead of letting the
    /// session id get a second worker.
    known: Mutex<std::collections::HashMap<SessionId, WorkerId>>,
}

impl std::fmt::Debug for Home {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Home")
            .field("path", &self.inner.path)
            .finish()
    }
}

impl Home {
    /// Open the home at `path`, creating it (owner-only) when missing.
    pub fn open(path: &Path) -> Result<Home, WorkerError> {
        let shown = path.display().to_string();
        std::fs::create_dir_all(path).map_err(io_err(format!("cannot create home {shown}")))?;
        let root = Dir::open_ambient_dir(path, ambient_authority())
            .map_err(io_err(format!("cannot open home {shown}")))?;
        let index_root = fsutil::ensure_dir(&root, "index")
            .map_err(io_err(format!("cannot open {shown}/index")))?;
        let index = fsutil::ensure_dir(&index_root, "sessions")
            .map_err(io_err(format!("cannot open {shown}/index/sessions")))?;
        let workers = fsutil::ensure_dir(&root, "workers")
            .map_err(io_err(format!("cannot open {shown}/workers")))?;
        Ok(Self::from_dirs(path, root, index, workers))
    }

    /// Open the home at `path` to read it: nothing is created.
    pub fn open_existing(path: &Path) -> Result<Home, WorkerError> {
        let shown = path.display().to_string();
        let missing = |e: io::Error, what: &str| {
            if e.kind() == io::ErrorKind::NotFound {
                WorkerError::NoHome(path.to_path_buf())
            } else {
                io_err(format!("cannot open {shown}{what}"))(e)
            }
        };
        let root = Dir::open_ambient_dir(path, ambient_authority()).map_err(|e| missing(e, ""))?;
        let index = root
            .open_dir("index/sessions")
            .map_err(|e| missing(e, "/index/sessions"))?;
        let workers = root
            .open_dir("workers")
            .map_err(|e| missing(e, "/workers"))?;
        Ok(Self::from_dirs(path, root, index, workers))
    }

    fn from_dirs(path: &Path, root: Dir, index: Dir, workers: Dir) -> Home {
        Home {
            inner: Arc::new(HomeInner {
                path: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
                root,
                index,
                workers,
                reserve: Mutex::new(()),
                known: Mutex::new(Default::default()),
            }),
        }
    }

    /// The home's path on the host.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The home's root directory.
    pub fn root(&self) -> &Dir {
        &self.inner.root
    }

    /// The lock that serialises read-modify-write of this home's documents
    /// (worker.json reservations, component grants).
    fn reserve_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.inner.reserve.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn index_name(session: &SessionId) -> String {
        format!("{}.json", session.storage_key())
    }

    /// The worker holding `session`, a fork still being written included
    /// (for the store that writes it).
    pub fn lookup_any(&self, session: &SessionId) -> Result<Option<WorkerId>, WorkerError> {
        match fsutil::read_document::<IndexEntry>(
            &self.inner.index,
            &Self::index_name(session),
            DOC_VERSION,
        ) {
            Ok(entry) if entry.session_id == *session => Ok(self
                .inner
                .workers
                .open_dir(entry.worker_id.to_string())
                .ok()
                .filter(|d| !d.exists(DELETING))
                .map(|_| entry.worker_id)),
            Ok(_) => Ok(None),
            Err(e) if e.is_not_found() => Ok(self.reindex_known(session)),
            Err(source) => Err(WorkerError::Document {
                worker: "index".into(),
                source,
            }),
        }
    }

    /// A session whose index entry is gone but whose worker this process
    /// knows: its entry is written again.
    fn reindex_known(&self, session: &SessionId) -> Option<WorkerId> {
        let worker = *self.known().get(session)?;
        let dir = self.inner.workers.open_dir(worker.to_string()).ok()?;
        if dir.exists(DELETING) {
            return None;
        }
        self.write_index_entry(session, worker).ok()?;
        Some(worker)
    }

    pub(crate) fn known(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<SessionId, WorkerId>> {
        self.inner.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `workers/`.
    pub(crate) fn workers_dir(&self) -> &Dir {
        &self.inner.workers
    }

    /// The index entry of `session` as stored, if any.
    pub(crate) fn index_entry(
        &self,
        session: &SessionId,
    ) -> Result<Option<IndexEntry>, DocumentError> {
        match fsutil::read_document(&self.inner.index, &Self::index_name(session), DOC_VERSION) {
            Ok(entry) => Ok(Some(entry)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn write_index_entry(
        &self,
        session: &SessionId,
        worker_id: WorkerId,
    ) -> io::Result<()> {
        let doc = Self::index_doc(session, worker_id);
        fsutil::write_document(&self.inner.index, &Self::index_name(session), &doc)
    }

    /// The index entry naming `worker_id` for `session`, as stored.
    fn index_doc(session: &SessionId, worker_id: WorkerId) -> Vec<u8> {
        to_json(&IndexEntry {
            version: DOC_VERSION,
            session_id: session.clone(),
            worker_id,
        })
    }

    /// The worker holding `session`, if the session is persisted here (a
    /// fork still being written is not).
    pub fn lookup(&self, session: &SessionId) -> Result<Option<WorkerId>, WorkerError> {
        Ok(self.lookup_any(session)?.filter(|id| {
            self.inner
                .workers
                .open_dir(id.to_string())
                .is_ok_and(|d| !is_staged(&d))
        }))
    }

    /// Every worker in this home, by id (UUIDv7: oldest first); workers being
    /// deleted are not listed.
    pub fn list_workers(&self) -> Result<Vec<WorkerId>, WorkerError> {
        let mut ids: Vec<WorkerId> = self
            .worker_dirs()?
            .into_iter()
            .filter(|(_, dir)| {
                !dir.as_ref()
                    .is_some_and(|d| d.exists(DELETING) || is_staged(d))
            })
            .map(|(id, _)| id)
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// What a listing needs of a worker, read leniently: a worker whose
    /// documents are damaged still says what it can (its session and
    /// workspace, from whichever document still names them) and why it is
    /// unusable.
    pub fn worker_entry(&self, id: WorkerId) -> WorkerEntry {
        let problem = match self
            .open_worker(id)
            .and_then(|w| w.record().map(|r| (w, r)))
        {
            Ok((w, r)) => {
                return WorkerEntry {
                    worker_id: id,
                    session_id: Some(w.session_id().clone()),
                    workspace: Some(r.workspace),
                    problem: None,
                };
            }
            Err(e) => e.to_string(),
        };
        let raw = |dir: &str, name: &str| -> Option<serde_json::Value> {
            let worker = self.inner.workers.open_dir(id.to_string()).ok()?;
            let dir = if dir.is_empty() {
                worker
            } else {
                worker.open_dir(dir).ok()?
            };
            serde_json::from_slice(&dir.read(name).ok()?).ok()
        };
        let record = raw("", "worker.json");
        let doc = raw("session", "session.json");
        let field = |v: &Option<serde_json::Value>, f: &str| {
            v.as_ref()
                .and_then(|v| v.get(f))
                .and_then(|s| s.as_str())
                .map(str::to_string)
        };
        WorkerEntry {
            worker_id: id,
            session_id: field(&doc, "session_id")
                .or_else(|| field(&record, "session_id"))
                .and_then(|s| SessionId::parse(&s).ok()),
            workspace: field(&record, "workspace").or_else(|| field(&doc, "workspace")),
            problem: Some(problem),
        }
    }

    /// Every directory under `workers/` named by a worker id, opened when it
    /// can be.
    fn worker_dirs(&self) -> Result<Vec<(WorkerId, Option<Dir>)>, WorkerError> {
        let mut dirs = Vec::new();
        for entry in self
            .inner
            .workers
            .entries()
            .map_err(io_err("cannot list workers/"))?
        {
            let entry = entry.map_err(io_err("cannot list workers/"))?;
            if let Some(id) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
                dirs.push((id, entry.open_dir().ok()));
            }
        }
        Ok(dirs)
    }

    /// Create a new worker aggregate holding `session`, bound to
    /// `component`. It stays invisible (a `creating` marker) until
    /// [`WorkerDir::publish`]: a crash before that leaves nothing served, and
    /// the next owner rolls it back.
    pub fn create_worker(
        &self,
        session: &SessionId,
        component: Option<&str>,
        workspace: &str,
    ) -> Result<WorkerDir, WorkerError> {
        self.create_worker_inner(session, component, workspace, CREATING, None)
    }

    /// Lay out, published, a worker another instance created (the shared
    /// catalog's `record`: same worker id, session, workspace, binding and
    /// parent). Nothing in this home names the session yet.
    pub fn adopt_worker(&self, record: &WorkerRecord) -> Result<WorkerDir, WorkerError> {
        let worker = self.create_worker_inner(
            &record.session_id,
            record.component.as_deref(),
            &record.workspace,
            CREATING,
            Some(record),
        )?;
        worker.publish()?;
        Ok(worker)
    }

    /// A new worker, published at once (for tools and tests that write its
    /// journal themselves; the runtime stages a creation until its first
    /// entry is durable).
    pub fn create_published_worker(
        &self,
        session: &SessionId,
        component: Option<&str>,
        workspace: &str,
    ) -> Result<WorkerDir, WorkerError> {
        let worker = self.create_worker(session, component, workspace)?;
        worker.publish()?;
        Ok(worker)
    }

    /// Like [`Home::create_worker`], for a fork (a `forking` marker).
    pub fn create_worker_staged(
        &self,
        session: &SessionId,
        component: Option<&str>,
        workspace: &str,
    ) -> Result<WorkerDir, WorkerError> {
        self.create_worker_inner(session, component, workspace, FORKING, None)
    }

    /// The aggregate is laid out under a name no walk sees, renamed into
    /// place whole (with its marker), and only then named by the index: at
    /// no moment does the index name a half-made worker.
    fn create_worker_inner(
        &self,
        session: &SessionId,
        component: Option<&str>,
        workspace: &str,
        marker: &str,
        given: Option<&WorkerRecord>,
    ) -> Result<WorkerDir, WorkerError> {
        let worker_id = given.map_or_else(WorkerId::new, |r| r.worker_id);
        let segment = SegmentId::new();
        let now = given.map_or_else(fsutil::now_ms, |r| r.created_at_ms);
        let ctx = format!("cannot create worker {worker_id}");
        let temp = format!("{LAYING_OUT}{worker_id}");
        let index_name = Self::index_name(session);
        let index_temp = format!(".{index_name}.tmp-{}", uuid::Uuid::new_v4().simple());
        // Everything is written unsynced, then synced at once (one wait for
        // the lot: the files' contents and every new directory entry),
        // before the rename makes the aggregate visible; the index entry's
        // content is synced with them and renamed into place after.
        let laid_out = (|| -> Result<(), WorkerError> {
            let dir =
                fsutil::create_dir_new(&self.inner.workers, &temp).map_err(io_err(ctx.clone()))?;
            // The marker's presence is what counts (synced with the
            // directory), not its bytes.
            fsutil::write_new(&dir, marker, b"{\"version\": 1}\n").map_err(io_err(ctx.clone()))?;
            let session_dir =
                fsutil::create_dir_new(&dir, "session").map_err(io_err(ctx.clone()))?;
            let segments =
                fsutil::create_dir_new(&session_dir, "segments").map_err(io_err(ctx.clone()))?;
            fsutil::create_dir_new(&dir, "runs").map_err(io_err(ctx.clone()))?;
            for name in [format!("{segment}.jsonl"), format!("{segment}.trace.jsonl")] {
                fsutil::create_file_new(&segments, &name).map_err(io_err(ctx.clone()))?;
            }
            let doc = SessionDoc {
                version: DOC_VERSION,
                format: FORMAT.to_string(),
                session_id: session.clone(),
                worker_id,
                created_at_ms: now,
                workspace: Some(workspace.to_string()),
            };
            let meta = WorkerMetadata {
                version: DOC_VERSION,
                active_segment: segment,
                pending_segment: None,
                segments: vec![SegmentRef {
                    segment_id: segment,
                    parent: None,
                }],
                children: vec![],
                forked_from: None,
                peers: vec![],
            };
            let record = WorkerRecord {
                version: DOC_VERSION,
                worker_id,
                session_id: session.clone(),
                workspace: workspace.to_string(),
                component: component.map(str::to_string),
                created_at_ms: now,
                last_generation: given.map_or(Generation(0), |r| r.last_generation),
                status: given.map_or(WorkerStatus::Active, |r| r.status),
                parent: given.and_then(|r| r.parent.clone()),
            };
            let handles = vec![
                fsutil::write_new(&session_dir, "session.json", &to_json(&doc)),
                fsutil::write_new(&dir, "metadata.json", &to_json(&meta)),
                fsutil::write_new(&dir, "worker.json", &to_json(&record)),
                fsutil::write_new(
                    &self.inner.index,
                    &index_temp,
                    &Self::index_doc(session, worker_id),
                ),
                fsutil::dir_handle(&segments),
                fsutil::dir_handle(&session_dir),
                fsutil::dir_handle(&dir),
            ]
            .into_iter()
            .collect::<io::Result<Vec<_>>>()
            .map_err(io_err(ctx.clone()))?;
            fsutil::sync_together(handles).map_err(io_err(ctx.clone()))?;
            fsutil::crash_point("create-laid-out");
            self.inner
                .workers
                .rename(&temp, &self.inner.workers, worker_id.to_string())
                .map_err(io_err(ctx.clone()))?;
            fsutil::sync_dir(&self.inner.workers).map_err(io_err(ctx.clone()))?;
            Ok(())
        })();
        if let Err(e) = laid_out {
            let _ = fsutil::remove_tree(&self.inner.workers, &temp);
            let _ = self.inner.index.remove_file(&index_temp);
            return Err(e);
        }
        fsutil::crash_point("create-before-index");
        let indexed = self
            .inner
            .index
            .rename(&index_temp, &self.inner.index, &index_name)
            .and_then(|()| fsutil::sync_dir(&self.inner.index));
        if let Err(e) = indexed {
            let _ = self.inner.index.remove_file(&index_temp);
            let _ = self.remove_worker_dir(&worker_id.to_string());
            return Err(io_err(format!(
                "cannot write the index entry of session {session}"
            ))(e));
        }
        fsutil::crash_point("create-after-index");
        self.known().insert(session.clone(), worker_id);
        self.open_worker_any(worker_id)
    }

    /// Undo a staged worker this process could not finish (a failed
    /// creation): its index entry and its directory.
    pub fn discard_staged(&self, worker: &WorkerDir) {
        if is_staged(&worker.dir) {
            let _ = self.delete_worker(worker.id, &worker.session);
        }
    }

    /// Open an existing worker aggregate, checking that its documents agree.
    /// A worker being deleted, or a fork not yet published, is not there.
    pub fn open_worker(&self, worker_id: WorkerId) -> Result<WorkerDir, WorkerError> {
        let worker = self.open_worker_any(worker_id)?;
        if is_staged(&worker.dir) {
            return Err(WorkerError::NoSuchWorker(worker_id));
        }
        Ok(worker)
    }

    /// Open a worker, a fork still being written included.
    pub fn open_worker_any(&self, worker_id: WorkerId) -> Result<WorkerDir, WorkerError> {
        let dir = match self.inner.workers.open_dir(worker_id.to_string()) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(WorkerError::NoSuchWorker(worker_id));
            }
            Err(e) => return Err(io_err(format!("cannot open worker {worker_id}"))(e)),
        };
        if dir.exists(DELETING) {
            return Err(WorkerError::NoSuchWorker(worker_id));
        }
        let session_dir = dir
            .open_dir("session")
            .map_err(io_err(format!("worker {worker_id}: cannot open session/")))?;
        let doc: SessionDoc = fsutil::read_document(&session_dir, "session.json", DOC_VERSION)
            .map_err(|source| WorkerError::Document {
                worker: worker_id.to_string(),
                source,
            })?;
        if doc.worker_id != worker_id || doc.format != FORMAT {
            return Err(WorkerError::Mismatch {
                worker: worker_id,
                what: format!(
                    "session/session.json names worker {} in format {:?}",
                    doc.worker_id, doc.format
                ),
            });
        }
        let worker = WorkerDir {
            home: self.clone(),
            id: worker_id,
            session: doc.session_id,
            dir,
            session_dir,
        };
        let record = worker.record()?;
        if record.session_id != worker.session {
            return Err(WorkerError::Mismatch {
                worker: worker_id,
                what: "worker.json and session/session.json name different sessions".into(),
            });
        }
        Ok(worker)
    }
}

/// A worker as a listing sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerEntry {
    /// The worker.
    pub worker_id: WorkerId,
    /// Its session, when a document still names it.
    pub session_id: Option<SessionId>,
    /// Its workspace, when `worker.json` still names it.
    pub workspace: Option<String>,
    /// Why it cannot be opened, if it cannot.
    pub problem: Option<String>,
}

/// One worker aggregate, opened.
pub struct WorkerDir {
    home: Home,
    id: WorkerId,
    session: SessionId,
    dir: Dir,
    session_dir: Dir,
}

impl std::fmt::Debug for WorkerDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerDir").field("id", &self.id).finish()
    }
}

impl WorkerDir {
    /// Another handle on the same aggregate (for blocking work off the
    /// async threads).
    pub fn try_clone(&self) -> io::Result<WorkerDir> {
        Ok(WorkerDir {
            home: self.home.clone(),
            id: self.id,
            session: self.session.clone(),
            dir: self.dir.try_clone()?,
            session_dir: self.session_dir.try_clone()?,
        })
    }

    /// The worker's id.
    pub fn id(&self) -> WorkerId {
        self.id
    }

    /// Its session.
    pub fn session_id(&self) -> &SessionId {
        &self.session
    }

    /// `session/`.
    pub fn session_dir(&self) -> &Dir {
        &self.session_dir
    }

    /// The worktree identity the work queue wrote (`worktree.json`:
    /// `{"key", "identity"}`), if any.
    pub fn worktree_identity(&self) -> Option<(String, String)> {
        let bytes = self.dir.read(WORKTREE).ok()?;
        let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        Some((
            v["key"].as_str()?.to_string(),
            v["identity"].as_str()?.to_string(),
        ))
    }

    /// Record the worktree identity of the queue key this worker serves
    /// (written once, when the worker is made for the key; fsynced).
    pub fn set_worktree_identity(&self, key: &str, identity: &str) -> Result<(), WorkerError> {
        let doc = serde_json::json!({ "version": 1, "key": key, "identity": identity });
        fsutil::write_document(&self.dir, WORKTREE, doc.to_string().as_bytes()).map_err(|source| {
            WorkerError::Io {
                context: format!("cannot write {WORKTREE} of worker {}", self.id),
                source,
            }
        })
    }

    /// The aggregate's host path.
    pub fn path(&self) -> PathBuf {
        self.home.path().join("workers").join(self.id.to_string())
    }

    fn doc_err(&self) -> impl FnOnce(DocumentError) -> WorkerError {
        let worker = self.id.to_string();
        move |source| WorkerError::Document { worker, source }
    }

    /// Read `worker.json`.
    pub fn record(&self) -> Result<WorkerRecord, WorkerError> {
        let record: WorkerRecord =
            fsutil::read_document(&self.dir, "worker.json", DOC_VERSION).map_err(self.doc_err())?;
        if record.worker_id != self.id {
            return Err(WorkerError::Mismatch {
                worker: self.id,
                what: format!("worker.json names worker {}", record.worker_id),
            });
        }
        Ok(record)
    }

    /// Replace `worker.json` atomically.
    pub fn write_record(&self, record: &WorkerRecord) -> Result<(), WorkerError> {
        fsutil::write_document(&self.dir, "worker.json", &to_json(record)).map_err(io_err(format!(
            "worker {}: cannot write worker.json",
            self.id
        )))
    }

    /// Read `metadata.json`.
    pub fn metadata(&self) -> Result<WorkerMetadata, WorkerError> {
        fsutil::read_document(&self.dir, "metadata.json", DOC_VERSION).map_err(self.doc_err())
    }

    /// Make a staged worker visible (the last step of a creation or a
    /// fork).
    pub fn publish(&self) -> Result<(), WorkerError> {
        let ctx = format!("worker {}: cannot publish", self.id);
        for marker in [CREATING, FORKING] {
            match self.dir.remove_file(marker) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(ctx)(e)),
            }
        }
        fsutil::sync_dir(&self.dir).map_err(io_err(format!("worker {}: cannot publish", self.id)))
    }

    /// Replace `metadata.json` atomically.
    pub fn write_metadata(&self, meta: &WorkerMetadata) -> Result<(), WorkerError> {
        fsutil::write_document(&self.dir, "metadata.json", &to_json(meta)).map_err(io_err(format!(
            "worker {}: cannot write metadata.json",
            self.id
        )))
    }

    /// Mark the worker stale (a replay diverged).
    pub fn mark_stale(&self) -> Result<(), WorkerError> {
        let mut record = self.record()?;
        record.status = WorkerStatus::Stale;
        self.write_record(&record)
    }
}
