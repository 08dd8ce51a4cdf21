//! A new session's `creating` marker after its first commit.
//!
//! The first commit makes a creation durable, and from then on the marker
//! says only what the journal's whole first entry says too: a restart that
//! finds both publishes the worker (`cleanup.rs`). Removed at once, it
//! dirtied the worker's directory just before the session's next
//! `fdatasync` — the first on its new journal, which on ext4 without a
//! journal also writes every new parent directory that is dirty
//! (`ext4_sync_parent`), and on a journaling filesystem commits the
//! removal with it — so the run that followed waited for one more
//! metadata write (a run start's p50 about 50 µs longer here:
//! `docs/bench/round24-marker.json`).
//!
//! So it goes later, off a run start's path: with the second durable
//! commit after the first (the store's `MARKER_COMMITS`: a run's first
//! entries after its start, or its end), and at the latest before the
//! worker leaves the live index (a restart in this boot looks only at
//! listed workers), when a later creation finds it [`GRACE`] old, or at a
//! clean stop ([`Home::unmark_all`]). Meanwhile this process serves the
//! worker as published, and a reader in another process treats a
//! `creating` marker over a whole first entry as published, as recovery
//! does ([`Home::staged`](super::Home)).

use super::cleanup::CREATING;
use super::*;
use std::time::{Duration, Instant};

/// How long a committed creation's marker may stay before a later
/// creation removes it.
pub(super) const GRACE: Duration = Duration::from_secs(1);

impl Home {
    fn marked(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<WorkerId, Instant>> {
        super::cache::lock(&self.inner.marked)
    }

    /// `worker`'s creation is durable: its marker goes later (see the
    /// module's notes). Markers of earlier creations [`GRACE`] old go now.
    pub(super) fn defer_unmark(&self, worker: WorkerId) {
        let mut marked = self.marked();
        let due: Vec<WorkerId> = marked
            .iter()
            .filter(|(_, at)| at.elapsed() >= GRACE)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            marked.remove(&id);
            self.remove_marker(id);
        }
        marked.insert(worker, Instant::now());
    }

    /// Remove `worker`'s marker now if its removal was deferred.
    pub(super) fn unmark(&self, worker: WorkerId) {
        let mut marked = self.marked();
        if marked.remove(&worker).is_some() {
            self.remove_marker(worker);
        }
    }

    /// Remove `worker`'s marker now if its removal was deferred, through
    /// its directory's handle.
    pub(crate) fn unmark_worker(&self, worker: &WorkerDir) {
        let mut marked = self.marked();
        if marked.remove(&worker.id).is_some() {
            match worker.dir.remove_file(CREATING) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(
                    "worker {}: cannot remove its creating marker: {e}",
                    worker.id
                ),
            }
        }
    }

    /// Remove every deferred marker (a clean stop, before it vouches for
    /// the home: the next owner walks nothing).
    pub fn unmark_all(&self) {
        let mut marked = self.marked();
        for (id, _) in marked.drain() {
            self.remove_marker(id);
        }
    }

    /// Whether `worker`'s marker is there only because its removal was
    /// deferred (this process serves it as published).
    pub(super) fn marker_deferred(&self, worker: WorkerId) -> bool {
        self.marked().contains_key(&worker)
    }

    /// Forget a deferred marker without removing it (a delete takes the
    /// whole directory; its own marker says what to finish).
    pub(super) fn forget_marker(&self, worker: WorkerId) {
        self.marked().remove(&worker);
    }

    /// Called with the deferred markers' lock held, so a delete (which
    /// forgets the marker under it first) never races this removal.
    fn remove_marker(&self, worker: WorkerId) {
        match self
            .inner
            .workers
            .remove_file(format!("{worker}/{CREATING}"))
        {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            // Durable either way: the next owner publishes it.
            Err(e) => tracing::warn!("worker {worker}: cannot remove its creating marker: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_types::event::{LifecycleEvent, Payload, SessionEvent};
    use cairn_types::ids::Seq;

    /// A new session laid out unsynced, its first entry written and
    /// committed (the store's way: `crate::file`'s tests go through it).
    fn committed(home: &Home, name: &str) -> WorkerDir {
        let session = SessionId::parse(name).unwrap();
        let worker = home.create_worker_unsynced(&session, None, "t").unwrap();
        let segment = worker.metadata().unwrap().active_segment;
        let first = SessionEvent {
            session_id: session.clone(),
            segment_id: segment,
            run_id: None,
            seq: Seq(1),
            at_ms: 1,
            payload: Payload::Lifecycle(LifecycleEvent::SegmentCreated {
                segment_id: segment,
                compacted_from: None,
                forked_from: None,
            }),
            facts: None,
            line: Default::default(),
        };
        let journal = home.take_created_journal(worker.id).unwrap();
        use std::io::Write;
        (&journal)
            .write_all(format!("{}\n", first.line()).as_bytes())
            .unwrap();
        home.commit_creation(&worker, &journal).unwrap();
        assert!(!home.awaits_first_commit(worker.id));
        worker
    }

    fn marker(home: &Home, worker: &WorkerDir) -> PathBuf {
        home.path()
            .join(format!("workers/{}/{CREATING}", worker.id))
    }

    #[test]
    fn a_committed_creations_marker_stays_until_the_worker_leaves_the_live_index() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::open(tmp.path()).unwrap();
        let worker = committed(&home, "s-one");
        let session = SessionId::parse("s-one").unwrap();
        // Durable and served, its marker not removed yet.
        assert!(
            marker(&home, &worker).exists(),
            "the marker went at the first commit"
        );
        assert_eq!(home.lookup(&session).unwrap(), Some(worker.id));
        assert!(home.list_workers().unwrap().contains(&worker.id));
        // A reader elsewhere (another handle on the home, nothing shared
        // in memory): a marker over a whole first entry reads as published.
        let reader = Home::open_existing(tmp.path()).unwrap();
        assert_eq!(
            reader.lookup(&session).unwrap(),
            Some(worker.id),
            "another process's reader does not see the session"
        );
        assert!(reader.list_workers().unwrap().contains(&worker.id));
        // It goes before the worker leaves the live index.
        home.clear_live(worker.id).unwrap();
        assert!(
            !marker(&home, &worker).exists(),
            "the marker outlived the live listing"
        );
    }

    #[test]
    fn deferred_markers_go_when_a_later_creation_finds_them_old_and_at_a_clean_stop() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::open(tmp.path()).unwrap();
        let old = committed(&home, "s-old");
        home.marked()
            .insert(old.id, Instant::now() - GRACE - Duration::from_millis(1));
        let young = committed(&home, "s-young");
        assert!(
            !marker(&home, &old).exists(),
            "an old deferred marker stayed"
        );
        assert!(marker(&home, &young).exists());
        home.unmark_all();
        assert!(
            !marker(&home, &young).exists(),
            "a clean stop left a marker"
        );
    }

    #[test]
    fn a_marker_over_a_cut_first_entry_still_stages_the_worker() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::open(tmp.path()).unwrap();
        let session = SessionId::parse("s-cut").unwrap();
        let worker = home.create_worker_unsynced(&session, None, "t").unwrap();
        let journal = home.take_created_journal(worker.id).unwrap();
        use std::io::Write;
        // Half a line: the first commit never finished.
        (&journal).write_all(b"{\"seq\":1,\"sess").unwrap();
        let reader = Home::open_existing(tmp.path()).unwrap();
        assert_eq!(reader.lookup(&session).unwrap(), None);
        assert!(!reader.list_workers().unwrap().contains(&worker.id));
    }

    #[test]
    fn a_deleted_workers_deferred_marker_is_forgotten() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::open(tmp.path()).unwrap();
        let worker = committed(&home, "s-gone");
        home.delete_worker(worker.id, &SessionId::parse("s-gone").unwrap())
            .unwrap();
        assert!(!home.marker_deferred(worker.id));
        assert!(!home.path().join(format!("workers/{}", worker.id)).exists());
        home.unmark_all();
    }
}
