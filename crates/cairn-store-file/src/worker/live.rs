//! The live index: `index/live/<worker_id>`, one empty file for each
//! worker whose journal may hold something a restart after a crash must
//! act on — a run reserved and not yet ended, a park that asked to be
//! resumed at the next start, a component update journaled before
//! `worker.json` followed it. The file is made before the journal entry it
//! guards is written and removed after the entry that settles it, both
//! unsynced: after a crash of the process (not of the machine) the page
//! cache holds every such write, so a restart in the same boot restores
//! the workers listed here and reads no other journal. After a reboot, or
//! when the previous owner kept no such index, a restart walks every
//! worker as before (see `HomeLock::previous_kept_live_index`).

use super::*;

/// The live index's directory, inside `index/`.
pub const LIVE: &str = "live";

/// Spare entries of the live index this process keeps for the next runs:
/// a run's end renames its entry to one instead of removing it, and a
/// start renames one to its worker instead of creating a file — no inode
/// is made or freed per run (on ext4 without a journal every inode freed
/// in the last seconds slows each later creation, which scans past them).
/// Named `.spare-<uuid>`, never a worker id, so a restart ignores them.
const SPARE: &str = ".spare-";

/// Spares kept at most (beyond, a run's end removes its entry).
const SPARES_MAX: usize = 1024;

impl Home {
    fn live_dir(&self) -> Option<&Dir> {
        self.inner
            .live
            .get_or_init(|| {
                let dir = self
                    .inner
                    .root
                    .open_dir("index")
                    .and_then(|index| fsutil::ensure_dir(&index, LIVE))
                    .ok()?;
                // A previous owner's spares serve this one.
                let mut spares = self.spares();
                for entry in dir.entries().into_iter().flatten().flatten() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if name.starts_with(SPARE) {
                        if spares.len() < SPARES_MAX {
                            spares.push(name);
                        } else {
                            let _ = dir.remove_file(&name);
                        }
                    }
                }
                drop(spares);
                Some(dir)
            })
            .as_ref()
    }

    fn spares(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.inner
            .live_spares
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// List `worker` in the live index (unsynced; a worker listed already
    /// stays listed).
    pub fn mark_live(&self, worker: WorkerId) -> io::Result<()> {
        let dir = self.live_dir().ok_or_else(|| {
            io::Error::other(format!(
                "cannot open {}/index/{LIVE}",
                self.inner.path.display()
            ))
        })?;
        let name = worker.to_string();
        let spare = self.spares().pop();
        if let Some(spare) = spare {
            use rustix::fs::{RenameFlags, renameat_with};
            match renameat_with(
                dir,
                spare.as_str(),
                dir,
                name.as_str(),
                RenameFlags::NOREPLACE,
            ) {
                Ok(()) => return Ok(()),
                // Listed already: the spare stays one.
                Err(rustix::io::Errno::EXIST) => {
                    self.spares().push(spare);
                    return Ok(());
                }
                // Gone (taken by hand): made below.
                Err(_) => {}
            }
        }
        let mut options = cap_std::fs::OpenOptions::new();
        options.write(true).create(true);
        dir.open_with(&name, &options).map(drop)
    }

    /// Take `worker` out of the live index (unsynced; one not listed is
    /// not an error).
    pub fn clear_live(&self, worker: WorkerId) -> io::Result<()> {
        let Some(dir) = self.live_dir() else {
            return Ok(());
        };
        let name = worker.to_string();
        if self.spares().len() < SPARES_MAX {
            let spare = format!("{SPARE}{}", uuid::Uuid::new_v4().simple());
            match dir.rename(&name, dir, &spare) {
                Ok(()) => {
                    self.spares().push(spare);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(_) => {}
            }
        }
        match dir.remove_file(&name) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// The workers the live index lists (names that are no worker id —
    /// a stray file — are left out).
    pub fn live_workers(&self) -> io::Result<Vec<WorkerId>> {
        let dir = self.live_dir().ok_or_else(|| {
            io::Error::other(format!(
                "cannot open {}/index/{LIVE}",
                self.inner.path.display()
            ))
        })?;
        let mut out = Vec::new();
        for entry in dir.entries()? {
            if let Some(id) = entry?
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<WorkerId>().ok())
            {
                out.push(id);
            }
        }
        out.sort();
        Ok(out)
    }

    /// Whether the home outside what `listed` names is as whole as a
    /// clean stop would vouch: the workers not listed and the index
    /// entries not naming a listed worker's session agree in number (two
    /// directory listings and a read of each listed worker's
    /// `session.json`). Only listed workers were changing when the owner
    /// died; a mismatch elsewhere — an index entry or a worker directory
    /// lost or added by hand — makes the restart walk every worker.
    pub fn live_index_holds(&self, listed: &[WorkerId]) -> bool {
        let listed: std::collections::HashSet<WorkerId> = listed.iter().copied().collect();
        let mut sessions = std::collections::HashSet::new();
        for id in &listed {
            let doc = self
                .inner
                .workers
                .open_dir(format!("{id}/session"))
                .ok()
                .and_then(|d| {
                    fsutil::read_document::<SessionDoc>(&d, "session.json", DOC_VERSION).ok()
                });
            if let Some(doc) = doc {
                sessions.insert(Self::index_name(&doc.session_id));
            }
        }
        let count = |dir: &Dir, counted: &dyn Fn(&str) -> bool| -> Option<usize> {
            let mut n = 0;
            for entry in dir.entries().ok()? {
                let name = entry.ok()?.file_name();
                if counted(&name.to_string_lossy()) {
                    n += 1;
                }
            }
            Some(n)
        };
        let workers = count(&self.inner.workers, &|name| {
            name.parse::<WorkerId>()
                .is_ok_and(|id| !listed.contains(&id))
        });
        let entries = count(&self.inner.index, &|name| {
            name.ends_with(".json") && !name.starts_with('.') && !sessions.contains(name)
        });
        workers.is_some() && workers == entries
    }
}

impl WorkerDir {
    /// List this worker in the live index (see [`Home::mark_live`]).
    pub fn mark_live(&self) -> io::Result<()> {
        self.home.mark_live(self.id)
    }

    /// Take this worker out of the live index (see [`Home::clear_live`]).
    pub fn clear_live(&self) -> io::Result<()> {
        self.home.clear_live(self.id)
    }
}

/// A worker's place in the live index, held without the worker's
/// directory handles (a run keeps it while it lives).
#[derive(Clone, Debug)]
pub struct LiveEntry {
    home: Home,
    worker: WorkerId,
}

impl LiveEntry {
    /// Take the worker out of the live index (see [`Home::clear_live`]).
    pub fn clear(&self) -> io::Result<()> {
        self.home.clear_live(self.worker)
    }
}

impl WorkerDir {
    /// Its place in the live index.
    pub fn live_entry(&self) -> LiveEntry {
        LiveEntry {
            home: self.home.clone(),
            worker: self.id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A run's end keeps its entry as a spare and the next start takes it:
    /// listing and unlisting workers makes and frees no inode.
    #[test]
    fn runs_reuse_the_live_index_entries_instead_of_making_new_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::open(tmp.path()).unwrap();
        let live = tmp.path().join("index").join(LIVE);
        let (a, b) = (WorkerId::new(), WorkerId::new());
        home.mark_live(a).unwrap();
        home.mark_live(a).unwrap();
        let inode = std::fs::metadata(live.join(a.to_string())).unwrap().ino();
        home.clear_live(a).unwrap();
        assert_eq!(home.live_workers().unwrap(), vec![]);
        home.mark_live(b).unwrap();
        assert_eq!(home.live_workers().unwrap(), vec![b]);
        assert_eq!(
            std::fs::metadata(live.join(b.to_string())).unwrap().ino(),
            inode,
            "the second worker's entry is the first one's, renamed"
        );
        home.clear_live(b).unwrap();
        home.clear_live(b).unwrap();
        let names: Vec<String> = std::fs::read_dir(&live)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 1, "one spare: {names:?}");
        assert!(names[0].starts_with(SPARE), "{names:?}");
        // A new owner of the home takes the spares it finds.
        drop(home);
        let home = Home::open(tmp.path()).unwrap();
        home.mark_live(a).unwrap();
        assert_eq!(
            std::fs::metadata(live.join(a.to_string())).unwrap().ino(),
            inode
        );
        assert_eq!(std::fs::read_dir(&live).unwrap().count(), 1);
    }
}
