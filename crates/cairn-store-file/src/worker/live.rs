//! The live index: `index/live.jsonl`, a log naming each worker whose
//! journal may hold something a restart after a crash must act on — a run
//! reserved and not yet ended, a park that asked to be resumed at the next
//! start, a component update journaled before `worker.json` followed it.
//! A worker is listed (`{"mark":"<worker_id>"}`) before the journal entry
//! it guards is written and unlisted (`{"clear":"<worker_id>"}`) after the
//! entry that settles it, both appended unsynced: after a crash of the
//! process (not of the machine) the page cache holds every such write, so
//! a restart in the same boot restores the workers listed here and reads
//! no other journal. After a reboot, or when the previous owner kept no
//! such index, a restart walks every worker as before (see
//! `HomeLock::previous_kept_live_index`).
//!
//! One append a listing, to one file: an older cairn kept an empty file a
//! worker (`index/live/<worker_id>`), and renaming entries in and out of
//! one directory serialized every run's start and end on its lock (ten
//! per cent of a trivial run's CPU under fifty clients). Its entries are
//! read once, written to the log, and removed.

use super::*;

/// An older cairn's live index: a directory of empty files, one a worker
/// (and `.spare-<uuid>` entries, which name none). Read once, then removed.
pub const LIVE: &str = "live";

/// The live index's log, inside `index/`.
pub const LIVE_LOG: &str = "live.jsonl";

/// Lines the log holds before it is written again with only the listed
/// workers (about 16,000 runs).
const COMPACT_AFTER: usize = 32_768;

/// The live index as this process keeps it: the listed workers, and the
/// log it appends to.
pub(super) struct LiveLog {
    listed: std::collections::HashSet<WorkerId>,
    file: std::fs::File,
    /// Lines in the log.
    lines: usize,
    /// Why the log this owner found could not be read: it lists nothing
    /// for this owner (whose restart then walks every worker), and a new
    /// log, listing what this owner's runs list, replaced it.
    unreadable: Option<String>,
}

/// One line of the log.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum LiveLine {
    Mark(WorkerId),
    Clear(WorkerId),
}

impl LiveLog {
    /// Read the log and an older cairn's directory, write what they list
    /// as a new log, remove the directory, and open the log to append.
    fn load(index: &Dir) -> io::Result<LiveLog> {
        let mut listed = std::collections::HashSet::new();
        let mut unreadable = None;
        match index.read(LIVE_LOG) {
            Ok(bytes) => {
                let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
                let last = lines.len().saturating_sub(1);
                for (n, line) in lines.iter().enumerate() {
                    if line.is_empty() {
                        continue;
                    }
                    match serde_json::from_slice::<LiveLine>(line) {
                        Ok(LiveLine::Mark(id)) => {
                            listed.insert(id);
                        }
                        Ok(LiveLine::Clear(id)) => {
                            listed.remove(&id);
                        }
                        // A final line the crash cut short was never
                        // acted on: the write it began did not return.
                        Err(_) if n == last => {}
                        Err(e) => {
                            unreadable = Some(format!("index/{LIVE_LOG} line {}: {e}", n + 1));
                            listed.clear();
                            break;
                        }
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let legacy = match index.open_dir(LIVE) {
            Ok(dir) => {
                for entry in dir.entries()? {
                    if let Some(id) = entry?
                        .file_name()
                        .to_str()
                        .and_then(|n| n.parse::<WorkerId>().ok())
                    {
                        listed.insert(id);
                    }
                }
                true
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(e),
        };
        let file = Self::write_listed(index, &listed)?;
        if legacy {
            fsutil::remove_tree(index, LIVE)?;
        }
        Ok(LiveLog {
            lines: listed.len(),
            listed,
            file,
            unreadable,
        })
    }

    /// Replace the log with one line for each of `listed` (unsynced, like
    /// every write of it); the new log, open to append.
    fn write_listed(
        index: &Dir,
        listed: &std::collections::HashSet<WorkerId>,
    ) -> io::Result<std::fs::File> {
        let temp = format!(".{LIVE_LOG}.tmp");
        let mut bytes = Vec::with_capacity(listed.len() * 48);
        for id in listed {
            bytes.extend_from_slice(&line(&LiveLine::Mark(*id)));
        }
        let mut options = cap_std::fs::OpenOptions::new();
        cap_std::fs::OpenOptionsExt::mode(
            options.write(true).create(true).truncate(true),
            fsutil::FILE_MODE,
        );
        let mut file = index.open_with(&temp, &options)?;
        io::Write::write_all(&mut file, &bytes)?;
        drop(file);
        index.rename(&temp, index, LIVE_LOG)?;
        let mut options = cap_std::fs::OpenOptions::new();
        options.append(true);
        Ok(index.open_with(LIVE_LOG, &options)?.into_std())
    }

    fn append(&mut self, entry: &LiveLine) -> io::Result<()> {
        io::Write::write_all(&mut self.file, &line(entry))?;
        self.lines += 1;
        Ok(())
    }
}

fn line(entry: &LiveLine) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(entry).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

impl Home {
    fn live_log(&self) -> io::Result<std::sync::MutexGuard<'_, LiveLog>> {
        let log = self.inner.live.get_or_init(|| {
            self.inner
                .root
                .open_dir("index")
                .and_then(|index| LiveLog::load(&index))
                .map(Mutex::new)
                .map_err(|e| e.to_string())
        });
        match log {
            Ok(log) => Ok(log.lock().unwrap_or_else(|p| p.into_inner())),
            Err(e) => Err(io::Error::other(format!(
                "cannot read {}/index/{LIVE_LOG}: {e}",
                self.inner.path.display()
            ))),
        }
    }

    /// List `worker` in the live index (unsynced; a worker listed already
    /// stays listed).
    pub fn mark_live(&self, worker: WorkerId) -> io::Result<()> {
        let mut log = self.live_log()?;
        if !log.listed.insert(worker) {
            return Ok(());
        }
        log.append(&LiveLine::Mark(worker)).inspect_err(|_| {
            log.listed.remove(&worker);
        })
    }

    /// Take `worker` out of the live index (unsynced; one not listed is
    /// not an error).
    pub fn clear_live(&self, worker: WorkerId) -> io::Result<()> {
        // A restart in this boot looks at listed workers only: a deferred
        // marker goes first (`marker.rs`).
        self.unmark(worker);
        let mut log = self.live_log()?;
        if !log.listed.remove(&worker) {
            return Ok(());
        }
        if let Err(e) = log.append(&LiveLine::Clear(worker)) {
            log.listed.insert(worker);
            return Err(e);
        }
        if log.lines >= COMPACT_AFTER {
            let index = self.inner.root.open_dir("index")?;
            let file = LiveLog::write_listed(&index, &log.listed)?;
            log.lines = log.listed.len();
            log.file = file;
        }
        Ok(())
    }

    /// The workers the live index lists (an error when the log this owner
    /// found could not be read: then it cannot say, and the caller walks
    /// every worker).
    pub fn live_workers(&self) -> io::Result<Vec<WorkerId>> {
        let log = self.live_log()?;
        if let Some(why) = &log.unreadable {
            return Err(io::Error::new(io::ErrorKind::InvalidData, why.clone()));
        }
        let mut out: Vec<WorkerId> = log.listed.iter().copied().collect();
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

    fn logged(home: &std::path::Path) -> Vec<String> {
        std::fs::read_to_string(home.join("index").join(LIVE_LOG))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Listing and unlisting append one line each (nothing for a worker
    /// listed already, or not listed); a new owner reads what the log
    /// lists and starts its log from that.
    #[test]
    fn the_live_index_is_a_log_of_marks_and_clears() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::open(tmp.path()).unwrap();
        let (a, b) = (WorkerId::new(), WorkerId::new());
        home.mark_live(a).unwrap();
        home.mark_live(a).unwrap();
        home.mark_live(b).unwrap();
        home.clear_live(a).unwrap();
        home.clear_live(a).unwrap();
        assert_eq!(home.live_workers().unwrap(), vec![b]);
        assert_eq!(
            logged(tmp.path()),
            vec![
                format!("{{\"mark\":\"{a}\"}}"),
                format!("{{\"mark\":\"{b}\"}}"),
                format!("{{\"clear\":\"{a}\"}}"),
            ]
        );
        drop(home);
        let home = Home::open(tmp.path()).unwrap();
        assert_eq!(home.live_workers().unwrap(), vec![b]);
        assert_eq!(logged(tmp.path()), vec![format!("{{\"mark\":\"{b}\"}}")]);
    }

    /// A final line a crash cut short is left out; a bad line before it
    /// makes the index say nothing to this owner (its restart walks every
    /// worker), and a new log goes on from there.
    #[test]
    fn a_cut_final_line_is_skipped_and_a_bad_one_before_it_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let a = WorkerId::new();
        std::fs::create_dir_all(tmp.path().join("index")).unwrap();
        let log = tmp.path().join("index").join(LIVE_LOG);
        std::fs::write(&log, format!("{{\"mark\":\"{a}\"}}\n{{\"clear\":\"01")).unwrap();
        let home = Home::open(tmp.path()).unwrap();
        assert_eq!(home.live_workers().unwrap(), vec![a]);
        drop(home);
        std::fs::write(
            &log,
            format!("{{\"mark\":\"{a}\"}}\nnot json\n{{\"mark\":\"{a}\"}}\n"),
        )
        .unwrap();
        let home = Home::open(tmp.path()).unwrap();
        let err = home.live_workers().unwrap_err().to_string();
        assert!(err.contains("live.jsonl line 2"), "{err}");
        let b = WorkerId::new();
        home.mark_live(b).unwrap();
        assert_eq!(logged(tmp.path()), vec![format!("{{\"mark\":\"{b}\"}}")]);
        drop(home);
        let home = Home::open(tmp.path()).unwrap();
        assert_eq!(
            home.live_workers().unwrap(),
            vec![b],
            "the next owner reads the new log"
        );
    }

    /// An older cairn's index (`index/live/<worker_id>`, with spares) is
    /// read into the log and removed.
    #[test]
    fn an_older_cairns_live_directory_is_read_into_the_log() {
        let tmp = tempfile::tempdir().unwrap();
        let a = WorkerId::new();
        let dir = tmp.path().join("index").join(LIVE);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(a.to_string()), b"").unwrap();
        std::fs::write(dir.join(".spare-0123"), b"").unwrap();
        let home = Home::open(tmp.path()).unwrap();
        assert_eq!(home.live_workers().unwrap(), vec![a]);
        assert!(!dir.exists(), "the directory is gone");
        assert_eq!(logged(tmp.path()), vec![format!("{{\"mark\":\"{a}\"}}")]);
    }

    /// Past `COMPACT_AFTER` lines the log is written again with only the
    /// listed workers.
    #[test]
    fn a_long_log_is_written_again_with_only_the_listed_workers() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::open(tmp.path()).unwrap();
        let kept = WorkerId::new();
        home.mark_live(kept).unwrap();
        for _ in 0..COMPACT_AFTER / 2 {
            let w = WorkerId::new();
            home.mark_live(w).unwrap();
            home.clear_live(w).unwrap();
        }
        assert_eq!(logged(tmp.path()), vec![format!("{{\"mark\":\"{kept}\"}}")]);
        assert_eq!(home.live_workers().unwrap(), vec![kept]);
    }
}
