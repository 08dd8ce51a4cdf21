//! The owner's copies of `worker.json` and `metadata.json` of its settled
//! workers (see [`Home::keep_settled`]) and of those it is creating: a run
//! reads them several times, and nobody but the owner writes them, so once
//! read or written they are answered from memory, and so is the worker a
//! session was last looked up to (a new session's as soon as it is made).
//! `session/session.json` never changes: its check is kept with the file's
//! stamp, and one `stat` confirms it. A document as cached is what reading
//! the bytes just written would give; a worker being deleted is forgotten.
//! Each map holds at most [`CAP`] workers (past it, one is dropped for
//! each added: a miss costs one read). And the components stored under
//! `components/`, which are never removed.

use super::*;
use std::collections::HashMap;

/// The most workers each map remembers.
pub(super) const CAP: usize = 4096;

/// The cached documents of a home's settled workers.
#[derive(Default)]
pub(super) struct Documents {
    /// Workers this owner created and has not deleted (their documents
    /// are cached while they are still being created, too).
    made: Mutex<std::collections::HashSet<WorkerId>>,
    records: Mutex<HashMap<WorkerId, WorkerRecord>>,
    metadata: Mutex<HashMap<WorkerId, WorkerMetadata>>,
    /// Sessions and the workers that hold them, as looked up (settled
    /// ones), or as made (new sessions served before their first commit).
    sessions: Mutex<HashMap<SessionId, WorkerId>>,
    /// The session each worker's `session/session.json` names, as checked
    /// when it was opened or written, and the file's identity then (a
    /// file changed since, by hand, is read and checked again).
    session_docs: Mutex<HashMap<WorkerId, (SessionId, FileStamp)>>,
    /// Components stored under `components/` (never removed): a run
    /// storing its component again does not look for it.
    components: Mutex<std::collections::HashSet<String>>,
}

/// `m` locked; a lock poisoned by a panic is taken as it is.
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Insert into a map that holds at most [`CAP`] keys.
fn bounded_insert<K: std::hash::Hash + Eq + Clone, V>(map: &mut HashMap<K, V>, key: K, value: V) {
    if map.len() >= CAP
        && !map.contains_key(&key)
        && let Some(old) = map.keys().next().cloned()
    {
        map.remove(&old);
    }
    map.insert(key, value);
}

/// A file's identity and last change, as one `stat` gives them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct FileStamp {
    inode: u64,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

impl FileStamp {
    fn of(dir: &Dir, name: &str) -> Option<FileStamp> {
        Self::from_meta(dir.metadata(name).ok()?)
    }

    /// The stamp of a file through a handle on it (one `fstat`, where a
    /// name takes an open, a `stat` and a close).
    pub(super) fn of_file(file: &cap_std::fs::File) -> Option<FileStamp> {
        Self::from_meta(file.metadata().ok()?)
    }

    fn from_meta(meta: cap_std::fs::Metadata) -> Option<FileStamp> {
        use cap_std::fs::MetadataExt;
        Some(FileStamp {
            inode: meta.ino(),
            len: meta.len(),
            modified: meta.modified().ok().map(|t| t.into_std()),
        })
    }
}

impl Home {
    /// Whether `id`'s documents may be answered from memory.
    pub(super) fn caches(&self, id: WorkerId) -> bool {
        self.is_settled(id) || lock(&self.inner.documents.made).contains(&id)
    }

    /// `id` was just made by this owner (only an owner caches).
    pub(super) fn made_here(&self, id: WorkerId) {
        if self.keeps_settled() {
            let mut made = lock(&self.inner.documents.made);
            if made.len() >= CAP
                && let Some(old) = made.iter().next().copied()
            {
                made.remove(&old);
            }
            made.insert(id);
        }
    }

    pub(super) fn cached_record(&self, id: WorkerId) -> Option<WorkerRecord> {
        match self.caches(id) {
            true => lock(&self.inner.documents.records).get(&id).cloned(),
            false => None,
        }
    }

    pub(super) fn cache_record(&self, id: WorkerId, record: WorkerRecord) {
        if self.caches(id) {
            bounded_insert(&mut lock(&self.inner.documents.records), id, record);
        }
    }

    /// Cache what reading `bytes`, just written as `worker.json`, gives.
    pub(super) fn cache_written_record(&self, id: WorkerId, bytes: &[u8]) {
        match serde_json::from_slice::<WorkerRecord>(bytes) {
            Ok(mut record) => {
                record.version = WORKER_VERSION;
                self.cache_record(id, record);
            }
            Err(_) => self.forget_documents(id),
        }
    }

    pub(super) fn cached_metadata(&self, id: WorkerId) -> Option<WorkerMetadata> {
        match self.caches(id) {
            true => lock(&self.inner.documents.metadata).get(&id).cloned(),
            false => None,
        }
    }

    pub(super) fn cache_metadata(&self, id: WorkerId, meta: WorkerMetadata) {
        if self.caches(id) {
            bounded_insert(&mut lock(&self.inner.documents.metadata), id, meta);
        }
    }

    /// Cache what reading `bytes`, just written as `metadata.json`, gives.
    pub(super) fn cache_written_metadata(&self, id: WorkerId, bytes: &[u8]) {
        match serde_json::from_slice::<WorkerMetadata>(bytes) {
            Ok(mut meta) => {
                meta.version = METADATA_VERSION;
                self.cache_metadata(id, meta);
            }
            Err(_) => self.forget_documents(id),
        }
    }

    /// The settled (or made here) worker `session` was last looked up to.
    pub(super) fn cached_lookup(&self, session: &SessionId) -> Option<WorkerId> {
        let id = *lock(&self.inner.documents.sessions).get(session)?;
        self.caches(id).then_some(id)
    }

    pub(super) fn cache_lookup(&self, session: &SessionId, id: WorkerId) {
        if self.caches(id) {
            bounded_insert(
                &mut lock(&self.inner.documents.sessions),
                session.clone(),
                id,
            );
        }
    }

    /// The session `id`'s `session.json` (in `session_dir`) was found (or
    /// written) to name, if the file is the one then checked.
    pub(super) fn cached_session_doc(&self, id: WorkerId, session_dir: &Dir) -> Option<SessionId> {
        if !self.caches(id) {
            return None;
        }
        let (session, stamp) = lock(&self.inner.documents.session_docs).get(&id).cloned()?;
        (FileStamp::of(session_dir, "session.json") == Some(stamp)).then_some(session)
    }

    pub(super) fn cache_session_doc(&self, id: WorkerId, session: &SessionId, session_dir: &Dir) {
        self.cache_session_stamp(id, session, || FileStamp::of(session_dir, "session.json"));
    }

    /// [`Self::cache_session_doc`], the file's stamp as `stamp` gives it
    /// (taken only when this owner caches `id`).
    pub(super) fn cache_session_stamp(
        &self,
        id: WorkerId,
        session: &SessionId,
        stamp: impl FnOnce() -> Option<FileStamp>,
    ) {
        if self.caches(id)
            && let Some(stamp) = stamp()
        {
            bounded_insert(
                &mut lock(&self.inner.documents.session_docs),
                id,
                (session.clone(), stamp),
            );
        }
    }

    /// Whether this process stored (or found) the component file `name`.
    pub(super) fn component_stored(&self, name: &str) -> bool {
        lock(&self.inner.documents.components).contains(name)
    }

    pub(super) fn remember_component(&self, name: String) {
        let mut known = lock(&self.inner.documents.components);
        if known.len() < CAP {
            known.insert(name);
        }
    }

    /// Forget `id`'s documents, and that this owner made it (a delete).
    pub(super) fn forget_worker(&self, id: WorkerId) {
        lock(&self.inner.documents.made).remove(&id);
        self.forget_documents(id);
    }

    pub(super) fn forget_documents(&self, id: WorkerId) {
        lock(&self.inner.documents.records).remove(&id);
        lock(&self.inner.documents.metadata).remove(&id);
        lock(&self.inner.documents.session_docs).remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_holds_at_most_cap_keys_and_keeps_the_newest() {
        let mut map = HashMap::new();
        for i in 0..CAP + 10 {
            bounded_insert(&mut map, i, i);
        }
        assert_eq!(map.len(), CAP);
        assert_eq!(map.get(&(CAP + 9)), Some(&(CAP + 9)));
        // Replacing a key it holds drops nothing.
        let held = *map.keys().next().unwrap();
        bounded_insert(&mut map, held, 0);
        assert_eq!((map.len(), map[&held]), (CAP, 0));
    }
}
