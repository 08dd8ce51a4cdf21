//! A worker's documents (`worker.json`, `metadata.json`): read through
//! the home's cache, written atomically — or, in a new worker's tree
//! before its first commit, in place — under per-worker locks.

use super::*;

/// How a document is written.
#[derive(Clone, Copy)]
pub(super) enum Write {
    /// Replaced atomically and synced (the file and its directory).
    Synced,
    /// Replaced atomically, unsynced: a projection the journal backs (a
    /// power loss may leave the previous one, which is written again).
    Unsynced,
    /// Overwritten in place, unsynced: a new worker's tree before its
    /// first commit (see [`Home::tree_open`]).
    InPlace,
}

/// Locks striped by worker: two workers share one only when their ids hash
/// alike. No lock is taken while another of the same set is held, and only
/// `Home::close_tree` holds two (its worker's `records` lock, then its
/// `metadata` lock; nothing takes them the other way round), so sharing a
/// stripe cannot deadlock.
pub(super) struct Stripes([Mutex<()>; 64]);

impl Default for Stripes {
    fn default() -> Self {
        Stripes(std::array::from_fn(|_| Mutex::new(())))
    }
}

impl Stripes {
    pub(super) fn lock(&self, worker: WorkerId) -> std::sync::MutexGuard<'_, ()> {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(worker);
        self.0[(hash % self.0.len() as u64) as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

impl WorkerDir {
    /// [`Self::update_metadata`] for a projection of what the journal
    /// holds (the resolved manifest, of the component its `Started` entry
    /// names): replaced atomically without a sync of its own.
    pub(super) fn update_metadata_projection(
        &self,
        change: impl FnOnce(&mut WorkerMetadata) -> Result<bool, String>,
    ) -> Result<(), String> {
        self.update_metadata_with(change, Write::Unsynced)
    }

    /// Read a document of this worker's; one of a new worker's tree, which
    /// is overwritten in place (see [`Home::tree_open`]), is read again
    /// when a read caught it half-written.
    fn read_whole<T>(
        &self,
        read: impl Fn(&Dir) -> Result<T, DocumentError>,
    ) -> Result<T, DocumentError> {
        let mut tries = 0;
        loop {
            match read(&self.dir) {
                Err(DocumentError::Invalid { .. })
                    if tries < 20 && self.home.tree_open(self.id) =>
                {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                other => return other,
            }
        }
    }

    fn doc_err(&self) -> impl FnOnce(DocumentError) -> WorkerError {
        let worker = self.id.to_string();
        move |source| WorkerError::Document { worker, source }
    }

    /// Read `worker.json`.
    pub fn record(&self) -> Result<WorkerRecord, WorkerError> {
        if let Some(record) = self.home.cached_record(self.id) {
            return Ok(record.scoped());
        }
        let record = self.read_whole(read_record).map_err(self.doc_err())?;
        if record.worker_id != self.id {
            return Err(WorkerError::Mismatch {
                worker: self.id,
                what: format!("worker.json names worker {}", record.worker_id),
            });
        }
        self.home.cache_record(self.id, record.clone());
        Ok(record.scoped())
    }

    /// Replace `worker.json` atomically.
    pub fn write_record(&self, record: &WorkerRecord) -> Result<(), WorkerError> {
        self.write_record_as(record, Write::Synced)
    }

    /// Read, change and write `worker.json` under this worker's record
    /// lock, so no other change made in this process (a run's generation
    /// and restore marks, a loan moved with its parent) is written over;
    /// written, synced, when `change` says it changed. Whether it did.
    pub fn update_record(
        &self,
        change: impl FnOnce(&mut WorkerRecord) -> bool,
    ) -> Result<bool, WorkerError> {
        let _guard = self.home.record_lock(self.id);
        let mut record = self.record()?;
        if !change(&mut record) {
            return Ok(false);
        }
        self.write_record(&record)?;
        Ok(true)
    }

    /// Write `worker.json` as `how` says (see [`Self::locked_write`]).
    pub(super) fn write_record_as(
        &self,
        record: &WorkerRecord,
        how: Write,
    ) -> Result<(), WorkerError> {
        let bytes = to_json(record);
        let written = self.write_document_as("worker.json", &bytes, how);
        match &written {
            Ok(()) => self.home.cache_written_record(self.id, &bytes),
            // What is on disk now is not known: read it next time.
            Err(_) => self.home.forget_documents(self.id),
        }
        written
    }

    /// How a write made under this worker's lock for the document goes:
    /// `how`, but in place while its tree is open (see
    /// [`Home::tree_open`]).
    pub(super) fn locked_write(&self, how: Write) -> Write {
        if self.home.tree_open(self.id) {
            Write::InPlace
        } else {
            how
        }
    }

    fn write_document_as(&self, name: &str, bytes: &[u8], how: Write) -> Result<(), WorkerError> {
        match how {
            Write::Synced => fsutil::write_document(&self.dir, name, bytes),
            Write::Unsynced => fsutil::write_document_unsynced(&self.dir, name, bytes),
            Write::InPlace => fsutil::overwrite_unsynced(&self.dir, name, bytes),
        }
        .map_err(io_err(format!("worker {}: cannot write {name}", self.id)))
    }

    /// Read `metadata.json`.
    pub fn metadata(&self) -> Result<WorkerMetadata, WorkerError> {
        if let Some(meta) = self.home.cached_metadata(self.id) {
            return Ok(meta.scoped(&self.session));
        }
        let meta = self.read_whole(read_metadata).map_err(self.doc_err())?;
        self.home.cache_metadata(self.id, meta.clone());
        Ok(meta.scoped(&self.session))
    }

    /// Read, change and write `metadata.json`, one such change at a time in
    /// this process (spawns, child ends, peers, prunes and a run's resolved
    /// manifest race otherwise); written when `change` says it changed.
    /// Fails with the change's reason, or the document's.
    pub fn update_metadata(
        &self,
        change: impl FnOnce(&mut WorkerMetadata) -> Result<bool, String>,
    ) -> Result<(), String> {
        self.update_metadata_with(change, Write::Synced)
    }

    /// [`Self::update_metadata`], written as `how` says — but a new
    /// worker's tree before its first commit is written in place, unsynced:
    /// that commit, which waits for this lock before it begins, makes the
    /// tree durable with it.
    fn update_metadata_with(
        &self,
        change: impl FnOnce(&mut WorkerMetadata) -> Result<bool, String>,
        how: Write,
    ) -> Result<(), String> {
        let _guard = self.home.inner.metadata.lock(self.id);
        let mut meta = self.metadata().map_err(|e| e.to_string())?;
        if change(&mut meta)? {
            let how = self.locked_write(how);
            self.write_metadata_with(&meta, how)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Replace `metadata.json` atomically.
    pub fn write_metadata(&self, meta: &WorkerMetadata) -> Result<(), WorkerError> {
        self.write_metadata_with(meta, Write::Synced)
    }

    fn write_metadata_with(&self, meta: &WorkerMetadata, how: Write) -> Result<(), WorkerError> {
        let bytes = to_json(meta);
        let written = self.write_document_as("metadata.json", &bytes, how);
        match &written {
            Ok(()) => self.home.cache_written_metadata(self.id, &bytes),
            Err(_) => self.home.forget_documents(self.id),
        }
        written
    }

    /// Mark the worker stale (a replay diverged).
    pub fn mark_stale(&self) -> Result<(), WorkerError> {
        self.update_record(|record| {
            record.status = WorkerStatus::Stale;
            true
        })
        .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Home, WorkerRequest, WorkerRequestKind};
    use cairn_types::ids::{Generation, SessionId};

    /// A change through `update_record` and a run's generation written
    /// meanwhile from another handle both stay: neither writes over the
    /// other (a loan moved with its parent's restore was lost so once,
    /// and the restored child ran without `/loan`).
    #[test]
    fn record_changes_from_two_handles_are_never_written_over() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::open(tmp.path()).unwrap();
        let session: SessionId = "s-two-writers".parse().unwrap();
        let made = home.create_worker(&session, None, "default").unwrap();
        let id = made.id;
        let first = made.record().unwrap().request.map_or(0, |q| q.at_ms);
        const ROUNDS: u64 = 300;
        std::thread::scope(|s| {
            s.spawn(|| {
                let w = made.try_clone().unwrap();
                for g in 1..=ROUNDS {
                    w.record_generation(Generation(g), None).unwrap();
                }
            });
            s.spawn(|| {
                let w = made.try_clone().unwrap();
                for _ in 0..ROUNDS {
                    w.update_record(|r| {
                        let n = r.request.as_ref().map_or(0, |q| q.at_ms);
                        r.request = Some(WorkerRequest {
                            kind: WorkerRequestKind::Restore,
                            at_ms: n + 1,
                            run: None,
                        });
                        true
                    })
                    .unwrap();
                }
            });
        });
        // Read from disk, not the cache.
        let record: serde_json::Value = serde_json::from_slice(
            &std::fs::read(
                tmp.path()
                    .join("workers")
                    .join(id.to_string())
                    .join("worker.json"),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(record["last_generation"], ROUNDS, "{record}");
        assert_eq!(record["request"]["at_ms"], first + ROUNDS, "{record}");
    }
}
