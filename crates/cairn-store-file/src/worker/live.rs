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

impl Home {
    fn live_dir(&self) -> Option<&Dir> {
        self.inner
            .live
            .get_or_init(|| {
                self.inner
                    .root
                    .open_dir("index")
                    .and_then(|index| fsutil::ensure_dir(&index, LIVE))
                    .ok()
            })
            .as_ref()
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
        let mut options = cap_std::fs::OpenOptions::new();
        options.write(true).create(true);
        dir.open_with(worker.to_string(), &options).map(drop)
    }

    /// Take `worker` out of the live index (unsynced; one not listed is
    /// not an error).
    pub fn clear_live(&self, worker: WorkerId) -> io::Result<()> {
        let Some(dir) = self.live_dir() else {
            return Ok(());
        };
        match dir.remove_file(worker.to_string()) {
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
