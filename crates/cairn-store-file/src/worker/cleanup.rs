//! Deletes, and what an owner finishes or rolls back when it opens a home:
//! interrupted deletes, staged workers (a creation or a fork a crash cut
//! short), and index entries a crash or a hand lost.

use super::*;

/// The marker a delete leaves first in `workers/<id>/`: from then on the
/// worker is gone for every reader, and a retried delete (or the next
/// owner's open) finishes the removal. It is the last file removed.
pub(super) const DELETING: &str = "deleting";
/// The marker of a fork still being written.
pub(super) const FORKING: &str = "forking";
/// The marker of a session still being created.
pub(super) const CREATING: &str = "creating";
/// The marker of a worker a legacy migration is still copying in: invisible
/// to every reader, left alone by an owner's recovery (a rerun of the
/// migration finishes it).
pub const MIGRATING: &str = "migrating";
/// The prefix of a worker directory being laid out before it is renamed
/// into place (never a worker id, so no walk of `workers/` sees it).
pub(super) const LAYING_OUT: &str = ".new-";
/// A deleted aggregate on its way out of `workers/` (renamed, then removed).
pub(super) const GONE: &str = ".gone-";

/// Whether a worker directory is staged (not yet published).
pub(super) fn is_staged(dir: &Dir) -> bool {
    dir.exists(FORKING) || dir.exists(CREATING) || dir.exists(MIGRATING)
}

/// Whether `dir` is a committed creation whose `creating` marker was not
/// removed yet (or whose removal was lost): the only marker it holds, over
/// a whole first entry.
pub(super) fn committed_creation(id: WorkerId, dir: &Dir) -> bool {
    dir.exists(CREATING)
        && !dir.exists(FORKING)
        && !dir.exists(MIGRATING)
        && !dir.exists(DELETING)
        && first_commit_whole(id, dir)
}

/// What an owner's open found and did, for people.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Deletes finished.
    pub deleted: Vec<WorkerId>,
    /// Staged workers (a creation or fork a crash interrupted) rolled back.
    pub rolled_back: Vec<WorkerId>,
    /// Creations whose first commit was whole (a crash came before their
    /// marker was removed): published.
    pub published: Vec<WorkerId>,
    /// Index entries written again for workers that had lost theirs.
    pub reindexed: Vec<SessionId>,
    /// What could not be repaired (the workers stay listed as corrupt).
    pub problems: Vec<String>,
}

impl Recovery {
    /// One line per thing done, for people.
    pub fn notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        for w in &self.deleted {
            out.push(format!("finished the interrupted delete of worker {w}"));
        }
        for w in &self.rolled_back {
            out.push(format!(
                "rolled back worker {w}: its creation (or fork) was interrupted before it was published"
            ));
        }
        for w in &self.published {
            out.push(format!(
                "published worker {w}: its creation was committed before the crash"
            ));
        }
        for s in &self.reindexed {
            out.push(format!("session {s}: wrote its lost index entry again"));
        }
        out.extend(self.problems.iter().cloned());
        out
    }
}

impl Home {
    /// Delete a worker in seed 003's order, after its runs were stopped: the
    /// durable `deleting` marker, then the index entry, then the directory's
    /// contents, the marker last. A crash at any step leaves a state the
    /// next call (or the next owner's [`Home::recover`]) completes; nothing
    /// half-deleted is served, and nothing unmarked is left behind.
    pub fn delete_worker(
        &self,
        worker_id: WorkerId,
        session: &SessionId,
    ) -> Result<(), WorkerError> {
        let name = worker_id.to_string();
        let ctx = format!("cannot delete worker {worker_id}");
        // Listed while the delete is under way: a crash leaves it for the
        // next owner's recovery to finish, whichever way that owner walks.
        self.mark_live(worker_id).map_err(io_err(ctx.clone()))?;
        // Probed again from now on: it is being deleted.
        self.unsettle(worker_id);
        match self.inner.workers.open_dir(&name) {
            Ok(dir) => {
                if !dir.exists(DELETING) {
                    fsutil::write_document(&dir, DELETING, b"{\"version\": 1}\n")
                        .map_err(io_err(ctx.clone()))?;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(ctx)(e)),
        }
        fsutil::crash_point("delete-after-marker");
        self.known().remove(session);
        self.remove_index_entry(session, worker_id)
            .map_err(io_err(ctx.clone()))?;
        fsutil::crash_point("delete-after-index");
        self.remove_worker_dir(&name).map_err(io_err(ctx))?;
        // A creation deleted before its first commit awaits none.
        self.unsynced().remove(&worker_id);
        self.created_journals().remove(&worker_id);
        // Gone: nothing to restore or finish (a crash before this leaves it
        // listed, and the next owner finishes the delete).
        let _ = self.clear_live(worker_id);
        Ok(())
    }

    /// Remove the index entry of `session` if it names `worker_id`.
    fn remove_index_entry(&self, session: &SessionId, worker_id: WorkerId) -> io::Result<()> {
        let index = Self::index_name(session);
        if let Ok(entry) =
            fsutil::read_document::<IndexEntry>(&self.inner.index, &index, DOC_VERSION)
            && entry.worker_id == worker_id
        {
            self.inner.index.remove_file(&index)?;
            fsutil::sync_dir(&self.inner.index)?;
        }
        Ok(())
    }

    /// Remove `workers/<name>`: everything in it but its marker first, then
    /// the marker, then the directory.
    pub(super) fn remove_worker_dir(&self, name: &str) -> io::Result<()> {
        // The aggregate leaves `workers/` in one rename, its marker still
        // inside: no listing names a `.gone-` entry, and a crash from here
        // on leaves one the next owner's recovery removes (before, the
        // marker went first and a crash before the directory left an empty
        // `workers/<id>/` listed as corrupt forever).
        let gone = format!("{GONE}{name}-{}", uuid::Uuid::new_v4().simple());
        match self.inner.workers.rename(name, &self.inner.workers, &gone) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
        fsutil::sync_dir(&self.inner.workers)?;
        fsutil::crash_point("delete-before-marker-removed");
        fsutil::remove_tree(&self.inner.workers, &gone)?;
        fsutil::sync_dir(&self.inner.workers)
    }

    /// What a clean stop vouches for: the index entries and worker
    /// directories the home holds now (directory listings, no reads).
    pub fn vouched(&self) -> io::Result<crate::home_lock::Vouched> {
        let mut index = 0;
        for entry in self.inner.index.entries()? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".json") && !name.starts_with('.') {
                index += 1;
            }
        }
        let mut workers = 0;
        for entry in self.inner.workers.entries()? {
            if entry?
                .file_name()
                .to_string_lossy()
                .parse::<WorkerId>()
                .is_ok()
            {
                workers += 1;
            }
        }
        Ok(crate::home_lock::Vouched { index, workers })
    }

    /// What the owner does when it opens a home: finish interrupted
    /// deletes, roll back staged workers, remove half-laid-out directories,
    /// and write lost index entries again. Never fails as a whole: what it
    /// cannot repair is reported, and that worker alone stays unusable.
    pub fn recover(&self) -> Recovery {
        self.recover_some(None)
    }

    /// [`Home::recover`] after a crash of the previous owner's process in
    /// this boot: the workers the live index lists (`listed`: every one
    /// whose layout or run was changing) are visited, the others only
    /// named — `workers/` is listed for the remains of half-laid-out and
    /// deleted directories, but no other worker is opened.
    pub fn recover_listed(&self, listed: &[WorkerId]) -> Recovery {
        self.recover_some(Some(listed.iter().copied().collect()))
    }

    fn recover_some(&self, listed: Option<std::collections::HashSet<WorkerId>>) -> Recovery {
        let mut out = Recovery::default();
        // Temp files of index entries a crash interrupted name nothing.
        if let Ok(entries) = self.inner.index.entries() {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(name) = name.to_str() else { continue };
                if name.starts_with('.')
                    && name.contains(".tmp-")
                    && let Err(e) = self.inner.index.remove_file(name)
                {
                    out.problems
                        .push(format!("cannot remove the index's temp file {name}: {e}"));
                }
            }
        }
        let Ok(entries) = self.inner.workers.entries() else {
            out.problems
                .push(format!("cannot list {}/workers", self.path().display()));
            return out;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with(LAYING_OUT) || name.starts_with(GONE) {
                if let Err(e) = fsutil::remove_tree(&self.inner.workers, name) {
                    out.problems.push(format!(
                        "cannot remove workers/{name} (half laid out or deleted): {e}"
                    ));
                }
                continue;
            }
            let Ok(id) = name.parse::<WorkerId>() else {
                continue;
            };
            if listed.as_ref().is_some_and(|l| !l.contains(&id)) {
                continue;
            }
            let Ok(dir) = entry.open_dir() else { continue };
            // An empty aggregate is what an older cairn's delete left when
            // it died between the marker and the directory: it holds
            // nothing, so it goes.
            if dir.entries().is_ok_and(|mut e| e.next().is_none()) {
                match self.inner.workers.remove_dir(name) {
                    Ok(()) => out.deleted.push(id),
                    Err(e) => out
                        .problems
                        .push(format!("cannot remove the empty workers/{name}: {e}")),
                }
                continue;
            }
            if dir.exists(MIGRATING) && !dir.exists(DELETING) {
                continue;
            }
            let deleting = dir.exists(DELETING);
            if !deleting
                && dir.exists(CREATING)
                && !dir.exists(FORKING)
                && first_commit_whole(id, &dir)
            {
                // Committed (its journal's first entry is whole, so the
                // tree was synced with it): the marker's removal was lost.
                let published = dir
                    .remove_file(CREATING)
                    .and_then(|()| fsutil::sync_dir(&dir));
                match published {
                    Ok(()) => out.published.push(id),
                    Err(e) => out
                        .problems
                        .push(format!("cannot publish worker {id}: {e}")),
                }
                self.reindex(id, &dir, &mut out);
                continue;
            }
            if deleting || is_staged(&dir) {
                let session = dir
                    .open_dir("session")
                    .ok()
                    .and_then(|d| {
                        fsutil::read_document::<SessionDoc>(&d, "session.json", DOC_VERSION).ok()
                    })
                    .map(|d| d.session_id);
                let result = match &session {
                    Some(s) => self.delete_worker(id, s),
                    None => self
                        .remove_worker_dir(name)
                        .map_err(io_err(format!("cannot remove worker {id}"))),
                };
                match result {
                    Ok(()) if deleting => out.deleted.push(id),
                    Ok(()) => out.rolled_back.push(id),
                    Err(e) => out.problems.push(e.to_string()),
                }
                continue;
            }
            self.reindex(id, &dir, &mut out);
        }
        out
    }

    /// Write the index entry of a published worker that lost it, unless
    /// another worker claims the session (then both are reported).
    fn reindex(&self, id: WorkerId, dir: &Dir, out: &mut Recovery) {
        let Some(doc) = dir.open_dir("session").ok().and_then(|d| {
            fsutil::read_document::<SessionDoc>(&d, "session.json", DOC_VERSION).ok()
        }) else {
            return;
        };
        if doc.worker_id != id {
            return;
        }
        self.known().insert(doc.session_id.clone(), id);
        let index = Self::index_name(&doc.session_id);
        match fsutil::read_document::<IndexEntry>(&self.inner.index, &index, DOC_VERSION) {
            Ok(entry) if entry.worker_id == id && entry.session_id == doc.session_id => {}
            Ok(entry)
                if entry.session_id == doc.session_id
                    && self.inner.workers.exists(entry.worker_id.to_string()) =>
            {
                out.problems.push(format!(
                    "session {}: workers {} and {id} both hold it; the index names {}",
                    doc.session_id, entry.worker_id, entry.worker_id
                ));
            }
            _ => match self.write_index_entry(&doc.session_id, id) {
                Ok(()) => out.reindexed.push(doc.session_id),
                Err(e) => out.problems.push(format!(
                    "session {}: cannot write its index entry again: {e}",
                    doc.session_id
                )),
            },
        }
    }
}

/// Whether a staged creation's journal holds a whole first entry of its
/// session (and its documents are whole): the one `syncfs` of its first
/// commit made all of it durable before any of it was acknowledged, so a
/// creation that has it was committed and one that lacks it never was.
fn first_commit_whole(id: WorkerId, dir: &Dir) -> bool {
    let Some(doc) = dir
        .open_dir("session")
        .ok()
        .and_then(|d| fsutil::read_document::<SessionDoc>(&d, "session.json", DOC_VERSION).ok())
    else {
        return false;
    };
    let record = super::read_record(dir);
    let Ok(meta) = super::read_metadata(dir) else {
        return false;
    };
    if doc.worker_id != id || !record.is_ok_and(|r| r.worker_id == id) {
        return false;
    }
    // Its first line only: the journal may be long by now.
    let Ok(bytes) = first_line(
        dir,
        &format!("session/segments/{}.jsonl", meta.active_segment),
    ) else {
        return false;
    };
    let Some(end) = bytes.iter().position(|&b| b == b'\n') else {
        return false;
    };
    matches!(
        cairn_store::parse_line(&bytes[..end]),
        Ok(cairn_store::JournalItem::Event(e)) if e.seq.0 == 1 && e.session_id.same_name(&doc.session_id)
    )
}

/// The bytes of `name` up to and with its first newline (all of it if it
/// has none).
fn first_line(dir: &Dir, name: &str) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = dir.open(name)?;
    let mut out = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = file.read(&mut chunk)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&chunk[..n]);
        if chunk[..n].contains(&b'\n') {
            return Ok(out);
        }
    }
}
