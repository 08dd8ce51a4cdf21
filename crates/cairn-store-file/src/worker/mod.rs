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
use cairn_types::ids::{Generation, SegmentId, SessionId, WorkerId};
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub use cairn_store::records::*;

/// Read `worker.json` in `dir` (any version this cairn reads), upgraded.
pub(crate) fn read_record(dir: &Dir) -> Result<WorkerRecord, DocumentError> {
    let mut record: WorkerRecord =
        fsutil::read_document_since(dir, "worker.json", 1, WORKER_VERSION)?;
    record.version = WORKER_VERSION;
    Ok(record)
}

/// Read `metadata.json` in `dir` (any version this cairn reads), upgraded.
pub(crate) fn read_metadata(dir: &Dir) -> Result<WorkerMetadata, DocumentError> {
    let mut meta: WorkerMetadata =
        fsutil::read_document_since(dir, "metadata.json", 1, METADATA_VERSION)?;
    meta.version = METADATA_VERSION;
    Ok(meta)
}

mod cache;
mod cleanup;
mod components;
mod counts;
mod creation;
mod documents;
mod generation;
use documents::Stripes;
mod live;
mod marker;
mod snapshots;
pub use cleanup::MIGRATING;
pub use cleanup::Recovery;
use cleanup::{CREATING, DELETING, FORKING};
pub use creation::FirstCommitSync;
pub use generation::{GenerationDir, Reserved};
pub use live::LiveEntry;
pub use snapshots::{Recorded as RecordedWorktree, blob_of as snapshot_blob};

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
    /// Generation directories exist already, many in a row: never reused.
    #[error(
        "worker {worker}: generation directories up to runs/{generation} exist already; a generation is never reused (the numbers are consumed: retry to get the next one)"
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

impl From<WorkerError> for cairn_store::StoreError {
    fn from(e: WorkerError) -> Self {
        cairn_store::StoreError::Layout(Box::new(e))
    }
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
    /// Serializes read-modify-write of the home's own documents (component
    /// grants) within this process.
    reserve: Mutex<()>,
    /// Serialize read-modify-write of one worker's `worker.json` (and,
    /// apart, its `metadata.json`) within this process: striped by worker,
    /// so creations and runs of different workers do not wait on one
    /// another's writes.
    records: Stripes,
    metadata: Stripes,
    /// Set when this process lost the home's lock: why (nothing is written
    /// from then on).
    lost: std::sync::OnceLock<String>,
    /// Every published session of the home and its worker, as the owner's
    /// open found them (and kept current since): an index entry lost while
    /// this process owns the home is written again instead of letting the
    /// session id get a second worker.
    known: Mutex<std::collections::HashMap<SessionId, WorkerId>>,
    /// New sessions' workers laid out unsynced, served by this process,
    /// whose journals' first commit has not happened yet (their marker is
    /// still on disk).
    unsynced: Mutex<std::collections::HashMap<WorkerId, std::time::Instant>>,
    /// Their journal files, open since their creation, until the store
    /// adopts them.
    created_journals: Mutex<std::collections::HashMap<WorkerId, std::fs::File>>,
    /// Those of them whose first commit has not begun: what is written in
    /// their tree now is made durable by that commit (see
    /// [`Home::tree_open`]).
    open_trees: Mutex<std::collections::HashSet<WorkerId>>,
    /// Creations whose first commit is durable and whose marker's removal
    /// is deferred (`marker.rs`), since when.
    marked: Mutex<std::collections::HashMap<WorkerId, std::time::Instant>>,
    /// How those first commits make them durable.
    first_commit: Mutex<FirstCommitSync>,
    /// The live index (`index/live.jsonl`), read on first use.
    live: std::sync::OnceLock<Result<Mutex<live::LiveLog>, String>>,
    /// The `syncfs` first commits share.
    syncfs: Arc<crate::syncfs::SharedSyncfs>,
    /// Whether [`Home::keep_settled`] was called (by the home's owner).
    settling: std::sync::atomic::AtomicBool,
    /// Workers this owner found published and not being deleted: opened
    /// again without probing for markers they cannot have.
    settled: Mutex<std::collections::HashSet<WorkerId>>,
    /// Their documents, as last read or written.
    documents: cache::Documents,
}

impl std::fmt::Debug for Home {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Home")
            .field("path", &self.inner.path)
            .finish()
    }
}

impl Home {
    /// This process lost the home's lock (`reason`): its stores write
    /// nothing more.
    pub fn lose(&self, reason: String) {
        let _ = self.inner.lost.set(reason);
    }

    /// Why this process lost the home's lock, if it did.
    pub fn lost(&self) -> Option<&str> {
        self.inner.lost.get().map(String::as_str)
    }

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
                records: Stripes::default(),
                metadata: Stripes::default(),
                lost: std::sync::OnceLock::new(),
                known: Mutex::new(Default::default()),
                unsynced: Mutex::new(Default::default()),
                created_journals: Mutex::new(Default::default()),
                open_trees: Mutex::new(Default::default()),
                marked: Mutex::new(Default::default()),
                first_commit: Mutex::new(Default::default()),
                live: std::sync::OnceLock::new(),
                syncfs: Default::default(),
                settling: Default::default(),
                settled: Mutex::new(Default::default()),
                documents: Default::default(),
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

    /// The lock that serialises read-modify-write of this home's own
    /// documents (component grants).
    fn reserve_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.inner.reserve.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The lock that serialises read-modify-write of `worker`'s
    /// `worker.json` (generation reservations, the run's record).
    fn record_lock(&self, worker: WorkerId) -> std::sync::MutexGuard<'_, ()> {
        self.inner.records.lock(worker)
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
        if let Some(id) = self.cached_lookup(session) {
            return Ok(Some(id));
        }
        let found = self.lookup_any(session)?.filter(|id| {
            self.inner
                .workers
                .open_dir(id.to_string())
                .is_ok_and(|d| !self.staged(*id, &d))
        });
        if let Some(id) = found {
            self.cache_lookup(session, id);
        }
        Ok(found)
    }

    /// Every worker in this home, by id (UUIDv7: oldest first); workers being
    /// deleted are not listed.
    pub fn list_workers(&self) -> Result<Vec<WorkerId>, WorkerError> {
        let mut ids: Vec<WorkerId> = self
            .worker_dirs()?
            .into_iter()
            .filter(|(id, dir)| {
                !dir.as_ref()
                    .is_some_and(|d| d.exists(DELETING) || self.staged(*id, d))
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
                .and_then(|s| SessionId::from_key(&s).ok()),
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

    /// Open an existing worker aggregate, checking that its documents agree.
    /// A worker being deleted, or a fork not yet published, is not there.
    pub fn open_worker(&self, worker_id: WorkerId) -> Result<WorkerDir, WorkerError> {
        let worker = self.open_worker_any(worker_id)?;
        if self.staged(worker_id, &worker.dir) {
            return Err(WorkerError::NoSuchWorker(worker_id));
        }
        self.settle(worker_id);
        Ok(worker)
    }

    /// Remember which workers are settled (published, not being deleted)
    /// once seen so, and open them again without probing for markers: for
    /// the home's owner only — nobody else changes the home under it, and
    /// its own deletes unsettle a worker before they mark it.
    pub fn keep_settled(&self) {
        self.inner
            .settling
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn settled_set(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<WorkerId>> {
        self.inner.settled.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn is_settled(&self, id: WorkerId) -> bool {
        self.inner
            .settling
            .load(std::sync::atomic::Ordering::Relaxed)
            && self.settled_set().contains(&id)
    }

    fn settle(&self, id: WorkerId) {
        if self
            .inner
            .settling
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            self.settled_set().insert(id);
        }
    }

    pub(super) fn unsettle(&self, id: WorkerId) {
        self.forget_marker(id);
        self.settled_set().remove(&id);
        self.forget_worker(id);
    }

    /// Whether this is the owner, remembering what it settles and makes.
    pub(super) fn keeps_settled(&self) -> bool {
        self.inner
            .settling
            .load(std::sync::atomic::Ordering::Relaxed)
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
        if !self.caches(worker_id) && dir.exists(DELETING) {
            return Err(WorkerError::NoSuchWorker(worker_id));
        }
        let session_dir = dir
            .open_dir("session")
            .map_err(io_err(format!("worker {worker_id}: cannot open session/")))?;
        let cached = self.cached_session_doc(worker_id, &session_dir);
        let checked = cached.is_some();
        let session = match cached {
            Some(session) => session,
            None => {
                let doc: SessionDoc =
                    fsutil::read_document(&session_dir, "session.json", DOC_VERSION).map_err(
                        |source| WorkerError::Document {
                            worker: worker_id.to_string(),
                            source,
                        },
                    )?;
                if doc.worker_id != worker_id || doc.format != FORMAT {
                    return Err(WorkerError::Mismatch {
                        worker: worker_id,
                        what: format!(
                            "session/session.json names worker {} in format {:?}",
                            doc.worker_id, doc.format
                        ),
                    });
                }
                doc.session_id
            }
        };
        let worker = WorkerDir {
            home: self.clone(),
            id: worker_id,
            session,
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
        if !checked {
            self.cache_session_doc(worker_id, &worker.session, &worker.session_dir);
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

    /// Bind it to the component `to` (a digest) in `worker.json`.
    pub fn rebind(&self, to: &str) -> Result<(), WorkerError> {
        self.update_record(|record| {
            record.component = Some(to.to_string());
            true
        })
        .map(drop)
    }

    /// The home it is in.
    pub(crate) fn home(&self) -> &Home {
        &self.home
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
        fsutil::sync_dir(&self.dir)
            .map_err(io_err(format!("worker {}: cannot publish", self.id)))?;
        // Published by this owner: settled (opened and read from memory
        // from now on, until a delete unsettles it).
        self.home.settle(self.id);
        // Whole and published: nothing for a restart to finish (a run of it,
        // which starts after this, lists it again).
        if let Err(e) = self.clear_live() {
            tracing::warn!(
                "worker {}: cannot take it out of the live index: {e}",
                self.id
            );
        }
        Ok(())
    }
}
