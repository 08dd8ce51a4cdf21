//! Creating a worker aggregate: laid out under a name no walk sees,
//! renamed into place whole with its marker (`creating`, `forking`), named
//! by the index, and published once its journal holds its first entry.
//!
//! Two ways to make it durable. **Synced** (forks, adoptions, a home
//! beside a shared store): every file and directory is synced before the
//! rename, the rename and the index entry after it, and publishing removes
//! the marker durably. **With its first commit** (a new session on the
//! file store): nothing is synced while it is laid out; the journal's
//! first commit makes the lot durable at once (the tree, the rename, the
//! index entry and the first entries together: one `syncfs`, shared by
//! every first commit waiting at once ([`crate::syncfs`]), or every
//! entry synced concurrently when the machine has much unwritten data —
//! [`FirstCommitSync`]). From the start this process treats the worker as
//! published; the marker is removed (unsynced) a little after that
//! commit, off the next run start's path (`marker.rs`), and readers
//! elsewhere take a marker over a whole first entry as published. A crash
//! before that commit leaves the marker and an empty or torn journal: the
//! next owner rolls it back. A crash after it leaves the marker and a
//! journal whose first entry is whole: the next owner finishes the
//! publication ([`Home::recover`]).

use super::cleanup::{CREATING, FORKING, LAYING_OUT, committed_creation, is_staged};
use super::*;

impl Home {
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
        self.create_worker_inner(session, component, workspace, CREATING, None, true)
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
            true,
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
        self.create_worker_inner(session, component, workspace, FORKING, None, true)
    }

    /// A new session's worker, made durable by its journal's first commit
    /// (see the module's notes): nothing is synced here. This process
    /// treats it as published at once; the store's first commit of its
    /// journal syncs it and calls [`Home::creation_committed`].
    pub fn create_worker_unsynced(
        &self,
        session: &SessionId,
        component: Option<&str>,
        workspace: &str,
    ) -> Result<WorkerDir, WorkerError> {
        let worker =
            self.create_worker_inner(session, component, workspace, CREATING, None, false)?;
        self.unsynced().insert(worker.id, std::time::Instant::now());
        self.open_trees().insert(worker.id);
        Ok(worker)
    }

    /// How many creations other than `worker`'s wait for a first commit
    /// that should come soon: made in the last [`COMING_WITHIN`] (one made
    /// before is a creation whose run never started, not one on its way).
    fn creations_coming(&self, worker: WorkerId) -> usize {
        self.unsynced()
            .iter()
            .filter(|(id, made)| **id != worker && made.elapsed() < COMING_WITHIN)
            .count()
    }

    /// The journal file a creation made and kept open, for the store to
    /// append to and read from (taken once; `None` for any other worker).
    pub fn take_created_journal(&self, worker: WorkerId) -> Option<std::fs::File> {
        self.created_journals().remove(&worker)
    }

    pub(super) fn created_journals(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<WorkerId, std::fs::File>> {
        super::cache::lock(&self.inner.created_journals)
    }

    /// Whether `worker` is a creation waiting for its first commit.
    pub fn awaits_first_commit(&self, worker: WorkerId) -> bool {
        self.unsynced().contains_key(&worker)
    }

    /// The first commit of an unsynced creation's journal made it durable
    /// (the tree with it): it is served as published, and its marker goes
    /// later, unsynced (`marker.rs`; a crash that keeps the marker leaves
    /// a whole first entry, which the next owner's recovery publishes).
    pub fn creation_committed(&self, worker: &WorkerDir) {
        self.defer_unmark(worker.id);
        self.unsynced().remove(&worker.id);
        self.open_trees().remove(&worker.id);
    }

    /// How first commits make creations durable (`[store]
    /// first_commit_sync`).
    pub fn set_first_commit_sync(&self, mode: FirstCommitSync) {
        *super::cache::lock(&self.inner.first_commit) = mode;
    }

    /// The first commit of `worker`'s journal, whose batch was just
    /// written to `journal`: the batch, the worker's tree, its index entry
    /// and the directories naming them are made durable together, then
    /// the creation is published.
    pub fn commit_creation(&self, worker: &WorkerDir, journal: &std::fs::File) -> io::Result<()> {
        self.close_tree(worker.id);
        let mode = self.first_commit_sync();
        if Self::shares_syncfs(mode) {
            // Shared with every first commit waiting at once, and held a
            // little for the other creations in flight.
            let coming = self.creations_coming(worker.id);
            self.inner.syncfs.sync(journal, coming)?;
        } else {
            self.sync_creation(worker)?;
            // Too much unwritten to wait for: drain it in the background,
            // so the next commits can share a `syncfs` again.
            if mode == FirstCommitSync::Auto {
                self.inner.syncfs.drain_in_background(journal);
            }
        }
        self.creation_durable(worker);
        Ok(())
    }

    fn first_commit_sync(&self) -> FirstCommitSync {
        *super::cache::lock(&self.inner.first_commit)
    }

    /// Whether a first commit now makes its creation durable by the shared
    /// `syncfs` (else by syncing its tree entry by entry, on the calling
    /// thread: [`Home::commit_creation`]).
    pub fn first_commit_shares_syncfs(&self) -> bool {
        Self::shares_syncfs(self.first_commit_sync())
    }

    fn shares_syncfs(mode: FirstCommitSync) -> bool {
        match mode {
            FirstCommitSync::Syncfs => true,
            FirstCommitSync::Each => false,
            FirstCommitSync::Auto => {
                fsutil::unwritten_bytes_recent().is_some_and(|b| b <= fsutil::SYNCFS_DIRTY_MAX)
            }
        }
    }

    /// The first commit of `worker`'s journal, its batch just written
    /// (its tree closed: [`Home::close_tree`]), when it shares
    /// the `syncfs` ([`Home::first_commit_shares_syncfs`]): what is
    /// written so far is covered by the `syncfs` the returned future waits
    /// for, without holding a thread. Then [`Home::creation_durable`].
    pub fn first_commit_wait(
        &self,
        worker: WorkerId,
    ) -> impl Future<Output = io::Result<()>> + Send + use<> {
        let coming = self.creations_coming(worker);
        self.inner.syncfs.sync_async(&self.inner.workers, coming)
    }

    /// A creation's first commit is durable: it is published (its marker
    /// goes later, unsynced).
    pub fn creation_durable(&self, worker: &WorkerDir) {
        fsutil::crash_point("create-committed");
        self.creation_committed(worker);
    }

    /// Sync, all at once, every file and directory in `worker`'s tree (its
    /// journal included), its index entry, and `workers/` and the index's
    /// directory (which name them).
    fn sync_creation(&self, worker: &WorkerDir) -> io::Result<()> {
        let mut handles = vec![
            fsutil::dir_handle(&self.inner.workers)?,
            fsutil::dir_handle(&self.inner.index)?,
            self.inner.index.open(Self::index_name(&worker.session))?,
        ];
        fsutil::tree_handles(&worker.dir, &mut handles)?;
        fsutil::sync_together(handles)
    }

    /// Whether `worker` is a new worker whose first commit has not begun:
    /// asked under the worker's `worker.json` or `metadata.json` lock, a
    /// `true` holds until that lock is released (the commit takes both
    /// before it writes the journal's first entry), so a write made
    /// meanwhile may go unsynced — the commit syncs it — and in place: a
    /// crash before that entry is written rolls the creation back, and
    /// the entry is written only after the write is whole.
    pub(super) fn tree_open(&self, worker: WorkerId) -> bool {
        self.open_trees().contains(&worker)
    }

    /// The first commit of `worker` begins (before its first entry is
    /// written): nothing written from here on is left for it to sync.
    pub fn close_tree(&self, worker: WorkerId) {
        if !self.open_trees().contains(&worker) {
            return;
        }
        let _record = self.inner.records.lock(worker);
        let _metadata = self.inner.metadata.lock(worker);
        self.open_trees().remove(&worker);
    }

    fn open_trees(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<WorkerId>> {
        super::cache::lock(&self.inner.open_trees)
    }

    pub(super) fn unsynced(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<WorkerId, std::time::Instant>> {
        super::cache::lock(&self.inner.unsynced)
    }

    /// Whether a worker directory is staged for readers: its marker says
    /// so, and it is not a creation this process already serves. A
    /// `creating` marker over a whole first entry is a committed creation
    /// whose marker's removal is deferred or was lost (`marker.rs`): not
    /// staged, as recovery publishes it.
    pub(super) fn staged(&self, id: WorkerId, dir: &Dir) -> bool {
        !self.is_settled(id)
            && !self.unsynced().contains_key(&id)
            && !self.marker_deferred(id)
            && is_staged(dir)
            && !committed_creation(id, dir)
    }

    /// The aggregate is laid out under a name no walk sees, renamed into
    /// place whole (with its marker), and only then named by the index: at
    /// no moment does the index name a half-made worker. `synced`: every
    /// step is durable before the next (otherwise the first commit of its
    /// journal makes the lot durable at once).
    fn create_worker_inner(
        &self,
        session: &SessionId,
        component: Option<&str>,
        workspace: &str,
        marker: &str,
        given: Option<&WorkerRecord>,
        synced: bool,
    ) -> Result<WorkerDir, WorkerError> {
        let worker_id = given.map_or_else(WorkerId::new, |r| r.worker_id);
        let segment = SegmentId::new();
        let now = given.map_or_else(fsutil::now_ms, |r| r.created_at_ms);
        let ctx = format!("cannot create worker {worker_id}");
        let temp = format!("{LAYING_OUT}{worker_id}");
        let index_name = Self::index_name(session);
        let index_temp = format!(".{index_name}.tmp-{}", uuid::Uuid::new_v4().simple());
        // Listed until it is published (or its first commit's run ends): a
        // crash meanwhile leaves it for the next owner's recovery to finish
        // or roll back, whichever way that owner walks.
        self.mark_live(worker_id).map_err(io_err(ctx.clone()))?;
        // Everything is written unsynced, then synced at once (one wait for
        // the lot: the files' contents and every new directory entry),
        // before the rename makes the aggregate visible; the index entry's
        // content is synced with them and renamed into place after.
        let laid_out = (|| -> Result<LaidOut, WorkerError> {
            let dir =
                fsutil::create_dir_new(&self.inner.workers, &temp).map_err(io_err(ctx.clone()))?;
            let session_dir =
                fsutil::create_dir_new(&dir, "session").map_err(io_err(ctx.clone()))?;
            let segments =
                fsutil::create_dir_new(&session_dir, "segments").map_err(io_err(ctx.clone()))?;
            fsutil::make_dir(&dir, "runs").map_err(io_err(ctx.clone()))?;
            // The journal only: its `.trace.jsonl` is made by the first
            // diagnostic written to it.
            // Kept open (to append and to read) for the store to adopt.
            let journal = fsutil::create_journal_new(&segments, &format!("{segment}.jsonl"))
                .map_err(io_err(ctx.clone()))?;
            let doc = SessionDoc {
                version: DOC_VERSION,
                format: FORMAT.to_string(),
                session_id: session.clone(),
                worker_id,
                created_at_ms: now,
                workspace: Some(workspace.to_string()),
            };
            let meta = WorkerMetadata {
                version: super::METADATA_VERSION,
                active_segment: segment,
                pending_segment: None,
                segments: vec![SegmentRef {
                    segment_id: segment,
                    parent: None,
                }],
                children: vec![],
                forked_from: None,
                peers: vec![],
                manifest: None,
            };
            let record = WorkerRecord {
                version: super::WORKER_VERSION,
                worker_id,
                session_id: session.clone(),
                workspace: workspace.to_string(),
                component: component.map(str::to_string),
                created_at_ms: now,
                last_generation: given.map_or(Generation(0), |r| r.last_generation),
                status: given.map_or(WorkerStatus::Active, |r| r.status),
                parent: given.and_then(|r| r.parent.clone()),
                request: given
                    .and_then(|r| r.request.clone())
                    .or(Some(WorkerRequest {
                        kind: WorkerRequestKind::Create,
                        at_ms: now,
                        run: None,
                    })),
                limits: given.and_then(|r| r.limits),
            };
            let (meta_bytes, record_bytes) = (to_json(&meta), to_json(&record));
            let mut handles = vec![
                fsutil::write_new(&session_dir, "session.json", &to_json(&doc)),
                fsutil::write_new(&dir, "metadata.json", &meta_bytes),
                fsutil::write_new(&dir, "worker.json", &record_bytes),
                fsutil::write_new(
                    &self.inner.index,
                    &index_temp,
                    &Self::index_doc(session, worker_id),
                ),
            ];
            if synced {
                handles.extend([
                    fsutil::dir_handle(&segments),
                    fsutil::dir_handle(&session_dir),
                    fsutil::dir_handle(&dir),
                ]);
            }
            let handles = handles
                .into_iter()
                .collect::<io::Result<Vec<_>>>()
                .map_err(io_err(ctx.clone()))?;
            // The marker's presence is what counts (synced with the
            // directory), not its bytes. It is a second name for
            // `session/session.json`, which never changes: removing it
            // after the first commit frees no inode and no block. (A freed inode
            // is what every later creation skips on a filesystem without
            // a journal for minutes — ext4's recently-deleted check — and
            // on one mounted `discard`, each freed block is a wait for the
            // device.) Where links are refused, an empty file.
            fsutil::mark(&session_dir, "session.json", &dir, marker)
                .map_err(io_err(ctx.clone()))?;
            // session.json's identity as written, for the cache: from its
            // handle, not by name again.
            let session_stamp = super::cache::FileStamp::of_file(&handles[0]);
            if synced {
                fsutil::sync_together(handles).map_err(io_err(ctx.clone()))?;
            }
            fsutil::crash_point("create-laid-out");
            self.inner
                .workers
                .rename(&temp, &self.inner.workers, worker_id.to_string())
                .map_err(io_err(ctx.clone()))?;
            if synced {
                fsutil::sync_dir(&self.inner.workers).map_err(io_err(ctx.clone()))?;
            }
            // The handles stay good across the rename: the worker is
            // served from them, not opened and read back.
            Ok(LaidOut {
                dir,
                session_dir,
                meta_bytes,
                record_bytes,
                journal,
                session_stamp,
            })
        })();
        let laid_out = match laid_out {
            Ok(laid_out) => laid_out,
            Err(e) => {
                let _ = fsutil::remove_tree(&self.inner.workers, &temp);
                let _ = self.inner.index.remove_file(&index_temp);
                return Err(e);
            }
        };
        fsutil::crash_point("create-before-index");
        let indexed = self
            .inner
            .index
            .rename(&index_temp, &self.inner.index, &index_name)
            .and_then(|()| {
                if synced {
                    fsutil::sync_dir(&self.inner.index)
                } else {
                    Ok(())
                }
            });
        if let Err(e) = indexed {
            let _ = self.inner.index.remove_file(&index_temp);
            let _ = self.remove_worker_dir(&worker_id.to_string());
            return Err(io_err(format!(
                "cannot write the index entry of session {session}"
            ))(e));
        }
        fsutil::crash_point("create-after-index");
        self.known().insert(session.clone(), worker_id);
        // Its documents as written, for the run about to read them.
        self.made_here(worker_id);
        self.cache_session_stamp(worker_id, session, || laid_out.session_stamp);
        self.cache_written_metadata(worker_id, &laid_out.meta_bytes);
        self.cache_written_record(worker_id, &laid_out.record_bytes);
        if !synced {
            // Served as published at once (a fork, staged, is not).
            self.cache_lookup(session, worker_id);
            self.created_journals().insert(worker_id, laid_out.journal);
        }
        Ok(WorkerDir {
            home: self.clone(),
            id: worker_id,
            session: session.clone(),
            dir: laid_out.dir,
            session_dir: laid_out.session_dir,
        })
    }

    /// Undo a staged worker this process could not finish (a failed
    /// creation): its index entry and its directory.
    pub fn discard_staged(&self, worker: &WorkerDir) {
        self.unsynced().remove(&worker.id);
        self.created_journals().remove(&worker.id);
        self.open_trees().remove(&worker.id);
        if is_staged(&worker.dir) {
            let _ = self.delete_worker(worker.id, &worker.session);
        }
    }
}

/// How recent a creation must be for its first commit to count as on its
/// way (a run's first commit comes within milliseconds of its start).
const COMING_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

/// How the first commit of a session made for a run makes its worker tree
/// durable with its first entries (`[store] first_commit_sync`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FirstCommitSync {
    /// `syncfs` while the machine has little unwritten data (at most
    /// [`crate::fsutil::SYNCFS_DIRTY_MAX`] dirty or under writeback), so
    /// the commit never waits on a large backlog of others' writes;
    /// otherwise `each`.
    #[default]
    Auto,
    /// One `syncfs` of the home's filesystem: the fewest syncs, but it
    /// waits for every unwritten byte on that filesystem.
    Syncfs,
    /// Every file and directory of the tree, its index entry and the
    /// directories naming them, synced at once (one thread each): waits
    /// only for the session's own writes.
    Each,
}

/// A new worker's tree as laid out: its handles and its documents' bytes
/// (served from memory, not read back), its journal open for the store.
struct LaidOut {
    dir: Dir,
    session_dir: Dir,
    meta_bytes: Vec<u8>,
    record_bytes: Vec<u8>,
    journal: std::fs::File,
    session_stamp: Option<super::cache::FileStamp>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsutil::THREAD_SYNCS;

    fn manifest(version: &str) -> cairn_store::records::ResolvedManifest {
        cairn_store::records::ResolvedManifest {
            component: format!("sha256:{}", "ab".repeat(32)),
            name: "echo".into(),
            version: version.into(),
            can_park: false,
            imports: vec![],
            resolved_at_ms: 1,
        }
    }

    /// A new worker's documents are written in place without a sync of
    /// their own until its first commit begins (which syncs the tree with
    /// them); from then on metadata.json is replaced, synced but for the
    /// manifest.
    #[test]
    fn a_new_workers_documents_are_synced_by_its_first_commit_and_later_changes_by_themselves() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::open(tmp.path()).unwrap();
        home.set_first_commit_sync(FirstCommitSync::Each);
        let session: SessionId = "s-gate".parse().unwrap();
        let worker = home
            .create_worker_unsynced(&session, None, "default")
            .unwrap();
        let syncs = || THREAD_SYNCS.with(|n| n.get());
        use std::os::unix::fs::MetadataExt;
        let inode = |name: &str| {
            std::fs::metadata(
                tmp.path()
                    .join("workers")
                    .join(worker.id.to_string())
                    .join(name),
            )
            .unwrap()
            .ino()
        };
        let (meta_inode, record_inode) = (inode("metadata.json"), inode("worker.json"));
        let marker = tmp
            .path()
            .join("workers")
            .join(worker.id.to_string())
            .join(CREATING);
        let session_json = inode("session/session.json");
        assert_eq!(
            std::fs::metadata(&marker).unwrap().ino(),
            session_json,
            "the creating marker is not a second name for session.json (its removal would free an inode)"
        );
        let before = syncs();
        worker.record_manifest(manifest("1")).unwrap();
        worker
            .record_run(Generation(1), Some("sha256:x"), None)
            .unwrap();
        assert_eq!(
            syncs(),
            before,
            "the open tree's documents were synced on their own"
        );
        assert_eq!(worker.metadata().unwrap().manifest.unwrap().version, "1");
        assert_eq!(
            read_metadata(&worker.dir)
                .unwrap()
                .manifest
                .unwrap()
                .version,
            "1"
        );
        assert_eq!(
            read_record(&worker.dir).unwrap().last_generation,
            Generation(1)
        );
        assert_eq!(
            (inode("metadata.json"), inode("worker.json")),
            (meta_inode, record_inode),
            "the open tree's documents are written in place (no inode made or freed)"
        );

        let journal = std::fs::File::open(tmp.path()).unwrap();
        // `each` syncs the tree on threads of its own: the process's count.
        let before = crate::fsutil::syncs();
        home.commit_creation(&worker, &journal).unwrap();
        assert!(
            crate::fsutil::syncs() > before,
            "the first commit synced nothing"
        );
        assert!(!home.awaits_first_commit(worker.id));
        // Its marker goes later (`marker.rs`): at the latest before the
        // worker leaves the live index.
        assert!(marker.exists(), "the first commit removed the marker");
        home.clear_live(worker.id).unwrap();
        assert!(!marker.exists(), "the marker outlived the live listing");
        let doc = std::fs::metadata(
            tmp.path()
                .join("workers")
                .join(worker.id.to_string())
                .join("session/session.json"),
        )
        .unwrap();
        assert_eq!(
            (doc.ino(), doc.nlink()),
            (session_json, 1),
            "removing the marker did more than drop session.json's second name"
        );

        // After it: replaced atomically; the manifest (a projection of the
        // journal's `Started`) without a sync, any other change synced.
        let before = syncs();
        worker.record_manifest(manifest("2")).unwrap();
        assert_eq!(syncs(), before, "the manifest is not synced on its own");
        let reread = read_metadata(&worker.dir).unwrap();
        assert_eq!(reread.manifest.unwrap().version, "2");
        assert_ne!(
            inode("metadata.json"),
            meta_inode,
            "a committed worker's is replaced"
        );
        let before = syncs();
        worker
            .update_metadata(|meta| {
                meta.peers.clear();
                Ok(true)
            })
            .unwrap();
        assert_eq!(
            syncs() - before,
            2,
            "any other change: the file and its directory"
        );
    }

    /// The first commits a `syncfs` may wait for: the other creations made
    /// in the last second and not yet committed — not its own, not one
    /// deleted, not one made long ago whose run never started.
    #[test]
    fn the_creations_coming_are_the_recent_uncommitted_others() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::open(tmp.path()).unwrap();
        let made: Vec<WorkerDir> = ["s-a", "s-b", "s-c"]
            .iter()
            .map(|s| {
                home.create_worker_unsynced(&s.parse().unwrap(), None, "default")
                    .unwrap()
            })
            .collect();
        assert_eq!(home.creations_coming(made[0].id), 2);
        home.delete_worker(made[1].id, &made[1].session).unwrap();
        assert_eq!(home.creations_coming(made[0].id), 1);
        *home.unsynced().get_mut(&made[2].id).unwrap() -= COMING_WITHIN;
        assert_eq!(home.creations_coming(made[0].id), 0, "made long ago");
        assert_eq!(home.creations_coming(made[2].id), 1, "the first one");
    }

    /// A creation keeps its new journal open for the store to adopt (no
    /// second open): that file, to append to and read from, taken once;
    /// a creation deleted first lets it go.
    #[test]
    fn a_creation_hands_its_open_journal_to_the_store_once() {
        use std::os::unix::fs::{FileExt, MetadataExt};
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::open(tmp.path()).unwrap();
        let worker = home
            .create_worker_unsynced(&"s-journal".parse().unwrap(), None, "default")
            .unwrap();
        let mut journal = home.take_created_journal(worker.id).unwrap();
        assert!(home.take_created_journal(worker.id).is_none(), "taken once");
        let segment = worker.metadata().unwrap().active_segment;
        let path = worker
            .path()
            .join("session/segments")
            .join(format!("{segment}.jsonl"));
        assert_eq!(
            journal.metadata().unwrap().ino(),
            std::fs::metadata(&path).unwrap().ino()
        );
        std::io::Write::write_all(&mut journal, b"line\n").unwrap();
        let mut read = [0u8; 5];
        journal.read_exact_at(&mut read, 0).unwrap();
        assert_eq!(&read, b"line\n");
        let other = home
            .create_worker_unsynced(&"s-gone".parse().unwrap(), None, "default")
            .unwrap();
        home.delete_worker(other.id, &other.session).unwrap();
        assert!(home.take_created_journal(other.id).is_none());
    }

    /// An owner remembers the `session.json` its creation wrote, stamped
    /// from the file's handle: the next lookup answers from memory, and
    /// another file put under the name since is read again.
    #[test]
    fn a_creation_remembers_the_session_document_it_wrote() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::open(tmp.path()).unwrap();
        home.keep_settled();
        let session: SessionId = "s-stamped".parse().unwrap();
        let worker = home
            .create_worker_unsynced(&session, None, "default")
            .unwrap();
        assert_eq!(
            home.cached_session_doc(worker.id, &worker.session_dir),
            Some(session.clone())
        );
        let path = worker.path().join("session/session.json");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, text).unwrap();
        assert_eq!(
            home.cached_session_doc(worker.id, &worker.session_dir),
            None,
            "another file under the name is not the one remembered"
        );
    }
}
