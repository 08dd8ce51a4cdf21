//! One writer per home: an exclusive OS lock on `<home>/cairn.lock`.
//!
//! A process that writes a home holds `flock(LOCK_EX)` on the file for its
//! whole life; the kernel releases it when the process dies, so a stale file
//! left by a dead process is simply taken over. The file records who holds
//! it (pid, command, start, and for `cairn serve` its URL), so a second
//! writer is told exactly who is in the way — and, for a served home, where
//! to send its request instead. Readers never take the lock.

use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The lock file's name inside a home.
pub const LOCK_FILE: &str = "cairn.lock";

/// Left by an owner that stopped cleanly: every run it held had ended,
/// everything it wrote was synced, and it had recovered the home (or found
/// it clean) when it started. The next owner removes it, durably, as it
/// takes the lock, before it writes anything; finding it, that owner skips
/// the walk that looks for crash remains and interrupted runs (a start of
/// a home of thousands of sessions then reads none of them). A crash
/// leaves no marker, so the next start walks everything.
pub const CLEAN_FILE: &str = "cairn.clean";

/// The owner's heartbeat: its holder record, touched while it holds the
/// lock ([`HomeLock::beat`]). A lock file can be removed or replaced under a
/// live owner; a next owner that finds a fresh heartbeat of another live
/// process refuses the home until it goes stale.
pub const OWNER_FILE: &str = "cairn.owner";

/// How long a heartbeat stays fresh.
pub const OWNER_FRESH: std::time::Duration = std::time::Duration::from_secs(3);

/// What the lock file says about its holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Always 1.
    pub version: u64,
    /// The holding process.
    pub pid: u32,
    /// What it runs (`serve`, `run`, `rm`, …).
    pub command: String,
    /// When it took the lock (ms since the epoch).
    pub started_at_ms: u64,
    /// Where it serves the API, for `cairn serve`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The kernel's boot id when it took the lock, written by an older
    /// cairn that kept its live index as `index/live/` (read, never
    /// written: an older cairn that found it would trust that directory,
    /// which this one empties).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// The kernel's boot id when it took the lock. Written only by owners
    /// that keep the live index (`index/live.jsonl`) and the run index's
    /// log: a next owner that finds the same boot id knows the page cache
    /// outlived the crash, so those are whole and a restart reads only the
    /// workers the live index lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<String>,
}

/// This boot of the kernel (`/proc/sys/kernel/random/boot_id`), when it
/// can be read.
pub fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = id.trim();
    (!id.is_empty()).then(|| id.to_string())
}

/// The home is held by another process.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another live process holds the lock.
    #[error("{}", busy_message(home, holder.as_deref()))]
    Busy {
        /// The home.
        home: PathBuf,
        /// Who holds it, when the file says.
        holder: Option<Box<Holder>>,
    },
    /// The lock file cannot be opened or written.
    #[error("cannot lock {path}: {source}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

fn busy_message(home: &Path, holder: Option<&Holder>) -> String {
    let home = home.display();
    match holder {
        Some(Holder {
            pid,
            url: Some(url),
            ..
        }) => format!("home {home} is served by pid {pid} at {url}"),
        Some(Holder { pid, command, .. }) => {
            format!("home {home} is in use by pid {pid} (cairn {command}); try again when it ends")
        }
        None => format!("home {home} is locked by another process"),
    }
}

impl LockError {
    /// The URL of the server holding the home, if one does.
    pub fn server_url(&self) -> Option<&str> {
        match self {
            LockError::Busy {
                holder: Some(holder),
                ..
            } => holder.url.as_deref(),
            _ => None,
        }
    }
}

/// The held lock; dropping it (or the process dying) releases it.
#[derive(Debug)]
pub struct HomeLock {
    file: File,
    /// The heartbeat file ([`OWNER_FILE`]).
    owner: Option<File>,
    path: PathBuf,
    holder: Holder,
    /// The previous owner stopped cleanly ([`CLEAN_FILE`] was there).
    was_clean: bool,
    /// The previous holder, as its record said when this one took over.
    previous: Option<Holder>,
    /// What its marker vouched for: the index entries and worker
    /// directories the home held when it stopped.
    vouched: Option<Vouched>,
}

/// What a clean stop vouches for: how many index entries and worker
/// directories the home held. A next owner that finds other counts (an
/// index entry lost, a directory gone) walks the home as after a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Vouched {
    /// `index/sessions/*.json`.
    pub index: u64,
    /// `workers/<worker_id>/`.
    pub workers: u64,
}

impl HomeLock {
    /// Whether the lock file at the home is still the one this process
    /// holds locked: `Err` says what happened to it (removed, replaced).
    pub fn intact(&self) -> Result<(), String> {
        use std::os::unix::fs::MetadataExt;
        let held = self
            .file
            .metadata()
            .map_err(|e| format!("cannot stat the held lock: {e}"))?;
        match std::fs::symlink_metadata(&self.path) {
            Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => Ok(()),
            Ok(_) => Err(format!("{LOCK_FILE} was replaced")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(format!("{LOCK_FILE} was removed"))
            }
            Err(e) => Err(format!("{LOCK_FILE} cannot be read: {e}")),
        }
    }

    /// Take the lock of the home at `home` (created when missing) for
    /// `command`, or say who holds it.
    pub fn acquire(home: &Path, command: &str) -> Result<HomeLock, LockError> {
        let path = home.join(LOCK_FILE);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(home).map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(crate::fsutil::FILE_MODE)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                // The holder writes who it is just after it takes the lock:
                // give it a moment, so the refusal can name it.
                let mut holder = read_holder(&mut file);
                for _ in 0..25 {
                    if holder.is_some() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    holder = read_holder(&mut file);
                }
                return Err(LockError::Busy {
                    home: home.to_path_buf(),
                    holder: holder.map(Box::new),
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        // A live owner whose lock file was taken away still writes: its
        // heartbeat says so, and the home is its until that goes stale.
        if let Some(holder) = live_owner(home) {
            return Err(LockError::Busy {
                home: home.to_path_buf(),
                holder: Some(Box::new(holder)),
            });
        }
        let owner = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(crate::fsutil::FILE_MODE)
            .open(home.join(OWNER_FILE))
            .ok();
        let mut file_for_previous = file.try_clone().map_err(io)?;
        let mut lock = HomeLock {
            file,
            owner,
            path: path.clone(),
            holder: Holder {
                version: 1,
                pid: std::process::id(),
                command: command.to_string(),
                started_at_ms: crate::fsutil::now_ms(),
                url: None,
                boot_id: None,
                boot: boot_id(),
            },
            was_clean: false,
            previous: read_holder(&mut file_for_previous),
            vouched: None,
        };
        if let Err(e) = lock.write() {
            return Err(io(e));
        }
        // Consumed before anything is written: a crash of this owner must
        // leave no marker behind.
        let marker = home.join(CLEAN_FILE);
        lock.vouched = std::fs::read_to_string(&marker).ok().and_then(|text| {
            text.lines()
                .find_map(|l| serde_json::from_str::<Vouched>(l).ok())
        });
        lock.was_clean = match std::fs::remove_file(&marker) {
            Ok(()) => {
                File::open(home)
                    .and_then(|d| d.sync_all())
                    .map_err(|source| LockError::Io {
                        path: marker.clone(),
                        source,
                    })?;
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(source) => {
                return Err(LockError::Io {
                    path: marker,
                    source,
                });
            }
        };
        Ok(lock)
    }

    /// Whether the previous owner stopped cleanly.
    pub fn was_clean(&self) -> bool {
        self.was_clean
    }

    /// Whether the previous owner kept the live index and ran in this
    /// boot of the kernel: then every unsynced write it made — the live
    /// index's included — outlived its end (a crash of the process loses
    /// none; only a crash of the machine does), and a restart may read
    /// that index instead of walking every worker.
    pub fn previous_kept_live_index(&self) -> bool {
        let now = boot_id();
        self.previous_kept_indexes()
            && now.is_some()
            && self
                .previous
                .as_ref()
                .is_some_and(|p| p.boot.as_ref().or(p.boot_id.as_ref()) == now.as_ref())
    }

    /// Whether the previous owner kept the live index and the run index's
    /// log (a cairn that records its boot id does; an older one does not,
    /// and what it left of them may be stale).
    pub fn previous_kept_indexes(&self) -> bool {
        self.previous
            .as_ref()
            .is_some_and(|p| p.boot.is_some() || p.boot_id.is_some())
    }

    /// What the previous owner's clean stop vouched for (`None`: no
    /// marker, or one that vouched for nothing).
    pub fn vouched(&self) -> Option<Vouched> {
        self.vouched
    }

    /// Give the lock up after a clean stop: sync the home's filesystem,
    /// then leave [`CLEAN_FILE`] (synced) for the next owner.
    pub fn release_clean(self, vouched: Vouched) -> std::io::Result<()> {
        rustix::fs::syncfs(&self.file)?;
        let home = self.path.parent().unwrap_or(Path::new("."));
        let mut marker = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(crate::fsutil::FILE_MODE)
            .open(home.join(CLEAN_FILE))?;
        writeln!(
            marker,
            "stopped cleanly by pid {} at {} ms",
            self.holder.pid,
            crate::fsutil::now_ms()
        )?;
        writeln!(
            marker,
            "{}",
            serde_json::to_string(&vouched).unwrap_or_default()
        )?;
        marker.sync_all()?;
        File::open(home)?.sync_all()
    }

    /// Record the URL this process serves the home at.
    pub fn set_url(&mut self, url: &str) -> Result<(), LockError> {
        self.holder.url = Some(url.to_string());
        self.write().map_err(|source| LockError::Io {
            path: self.path.clone(),
            source,
        })
    }

    /// What the lock file says now.
    pub fn holder(&self) -> &Holder {
        &self.holder
    }

    fn write(&mut self) -> std::io::Result<()> {
        let mut bytes = serde_json::to_vec(&self.holder).expect("a holder serializes");
        bytes.push(b'\n');
        self.file.set_len(0)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(&bytes)?;
        if let Some(owner) = &mut self.owner {
            // Best effort: the heartbeat only ever delays a next owner.
            let _ = owner
                .set_len(0)
                .and_then(|()| owner.seek(SeekFrom::Start(0)))
                .and_then(|_| owner.write_all(&bytes));
        }
        self.file.sync_data()
    }

    /// Say this owner is alive and writing (the heartbeat's mtime).
    pub fn beat(&self) {
        if let Some(owner) = &self.owner {
            let _ = owner.set_modified(std::time::SystemTime::now());
        }
    }
}

/// The holder a fresh heartbeat names, when it is another live process.
fn live_owner(home: &Path) -> Option<Holder> {
    let path = home.join(OWNER_FILE);
    let meta = std::fs::metadata(&path).ok()?;
    let age = meta.modified().ok()?.elapsed().unwrap_or_default();
    if age > OWNER_FRESH {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let holder: Holder = serde_json::from_str(text.lines().next()?).ok()?;
    let alive = Path::new(&format!("/proc/{}", holder.pid)).exists();
    (holder.pid != std::process::id() && alive).then_some(holder)
}

impl Drop for HomeLock {
    fn drop(&mut self) {
        // Say nobody holds it before the kernel releases it with the file;
        // the heartbeat goes too, unless a next owner's replaced it.
        let _ = self.file.set_len(0);
        if self.intact().is_ok()
            && let Some(home) = self.path.parent()
        {
            let _ = std::fs::remove_file(home.join(OWNER_FILE));
        }
    }
}

fn read_holder(file: &mut File) -> Option<Holder> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    serde_json::from_str(text.trim()).ok()
}

/// Who holds the home at `home` now, if anyone (a reader's look: it takes
/// nothing). `None` when the lock is free or there is no home.
pub fn holder(home: &Path) -> Option<Holder> {
    let mut file = File::open(home.join(LOCK_FILE)).ok()?;
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            None
        }
        Err(_) => read_holder(&mut file).or(Some(Holder {
            version: 1,
            pid: 0,
            command: "?".into(),
            started_at_ms: 0,
            url: None,
            boot_id: None,
            boot: None,
        })),
    }
}

/// The holder record a lock file keeps although nobody holds the lock (its
/// holder died without releasing it: harmless, the next owner overwrites
/// it). `None` when the lock is held, or the file is empty or absent.
pub fn read_record(home: &Path) -> Option<Holder> {
    let mut file = File::open(home.join(LOCK_FILE)).ok()?;
    file.try_lock_shared().ok()?;
    let record = read_holder(&mut file);
    let _ = file.unlock();
    record
}
