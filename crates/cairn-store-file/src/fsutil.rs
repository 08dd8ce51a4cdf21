//! Owner-only, crash-safe file operations on cap-std directories. Every host
//! access inside a home goes through a [`Dir`]; nothing here joins a path.

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use std::io::{self, Write};

/// Mode of every directory cairn creates, and the owner-only directory
/// made new (shared with the engine's worktree).
pub use cairn_worktree::fs::{DIR_MODE, create_dir_new, handle_path, make_dir};
/// Mode of every file cairn creates.
pub const FILE_MODE: u32 = 0o600;

/// Open `name` inside `dir`, creating it owner-only when missing.
pub fn ensure_dir(dir: &Dir, name: &str) -> io::Result<Dir> {
    match create_dir_new(dir, name) {
        Ok(d) => Ok(d),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => dir.open_dir(name),
        Err(e) => Err(e),
    }
}

/// Open (creating, owner-only) a file for appending.
pub fn open_append(dir: &Dir, name: &str) -> io::Result<cap_std::fs::File> {
    let mut opts = OpenOptions::new();
    opts.append(true).create(true).read(true).mode(FILE_MODE);
    dir.open_with(name, &opts)
}

/// Create a new, empty owner-only journal, open to append and to read; an
/// existing one is an error.
pub fn create_journal_new(dir: &Dir, name: &str) -> io::Result<std::fs::File> {
    let mut opts = OpenOptions::new();
    opts.append(true)
        .read(true)
        .create_new(true)
        .mode(FILE_MODE);
    dir.open_with(name, &opts).map(cap_std::fs::File::into_std)
}

/// Create a new, empty owner-only file; an existing one is an error.
pub fn create_file_new(dir: &Dir, name: &str) -> io::Result<cap_std::fs::File> {
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true).mode(FILE_MODE);
    dir.open_with(name, &opts)
}

/// Make the marker `name` in `dir`: a hard link to `target` in
/// `target_dir` (no inode of its own to allocate, and none to free when
/// it goes), or, where the filesystem refuses links, a new empty file.
/// An existing `name` is an error either way.
pub fn mark(target_dir: &Dir, target: &str, dir: &Dir, name: &str) -> io::Result<()> {
    match target_dir.hard_link(target, dir, name) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(e),
        Err(_) => create_file_new(dir, name).map(drop),
    }
}

static SYNCS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// fsync/fdatasync calls this process made through cairn's stores (for
/// `cairn bench`).
pub fn syncs() -> u64 {
    SYNCS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Count one sync.
pub fn count_sync() {
    SYNCS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    #[cfg(test)]
    THREAD_SYNCS.with(|n| n.set(n.get() + 1));
}

#[cfg(test)]
thread_local! {
    /// The syncs this thread made (unit tests run side by side).
    pub(crate) static THREAD_SYNCS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Flush a directory's entries to disk (after a create or rename in it).
pub fn sync_dir(dir: &Dir) -> io::Result<()> {
    count_sync();
    // cap-std opens directories with O_PATH, which cannot be synced: open
    // the directory itself for reading and sync that.
    dir.open(".")?.sync_all()
}

/// Write a new owner-only file whole, unsynced; returns its handle (to
/// sync with [`sync_together`]).
pub fn write_new(dir: &Dir, name: &str, bytes: &[u8]) -> io::Result<cap_std::fs::File> {
    let mut file = create_file_new(dir, name)?;
    file.write_all(bytes)?;
    Ok(file)
}

/// Unwritten bytes on this machine at most which a first commit still
/// syncs its whole filesystem (`[store] first_commit_sync = "auto"`): a
/// backlog this small is flushed in a few milliseconds.
pub const SYNCFS_DIRTY_MAX: u64 = 8 << 20;

/// Bytes dirty or under writeback on this machine (`/proc/meminfo`), when
/// it says.
pub fn unwritten_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let mut total = 0;
    let mut seen = 0;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if key == "Dirty" || key == "Writeback" {
            let kb: u64 = value.trim().trim_end_matches("kB").trim().parse().ok()?;
            total += kb * 1024;
            seen += 1;
        }
    }
    (seen == 2).then_some(total)
}

/// [`unwritten_bytes`] as read at most 5 ms ago: many first commits at
/// once read `/proc/meminfo` once between them (the kernel formats the
/// whole file each time: ~1 % of a busy server's CPU when read per commit).
pub fn unwritten_bytes_recent() -> Option<u64> {
    use std::time::{Duration, Instant};
    static LAST: std::sync::Mutex<Option<(Instant, Option<u64>)>> = std::sync::Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    match *last {
        Some((at, bytes)) if at.elapsed() < Duration::from_millis(5) => bytes,
        _ => {
            let bytes = unwritten_bytes();
            *last = Some((Instant::now(), bytes));
            bytes
        }
    }
}

/// A handle to sync for every directory and regular file under `dir`
/// (`dir` included), appended to `out`; other entries (a socket) are
/// left out.
///
/// An entry gone between the listing and its opening (a temp file renamed
/// over a document, a generation's layout moving into place, while a new
/// worker's first commit walks its tree) is left out: its going is the
/// directory's change, which the directory's own sync covers, and the
/// writes that moved it are not the commit's to make durable (before:
/// `ENOENT` failed the first commit, and the run, under load).
pub fn tree_handles(dir: &Dir, out: &mut Vec<cap_std::fs::File>) -> io::Result<()> {
    out.push(dir_handle(dir)?);
    for entry in dir.entries()? {
        let entry = entry?;
        let kind = match entry.file_type() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            kind => kind?,
        };
        if kind.is_dir() {
            match entry.open_dir() {
                Ok(sub) => tree_handles(&sub, out)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        } else if kind.is_file() {
            match entry.open() {
                Ok(file) => out.push(file),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// A directory's handle to sync (cap-std opens directories `O_PATH`).
pub fn dir_handle(dir: &Dir) -> io::Result<cap_std::fs::File> {
    dir.open(".")
}

/// Sync every handle (files and directories) at once, one thread each:
/// the filesystem's journal commits concurrent syncs together (ext4 and
/// xfs flush once for the lot), so a new tree of files and directories
/// costs about one sync's wait instead of one per entry. Every handle is
/// synced even when one fails; the first failure is returned.
pub fn sync_together(handles: Vec<cap_std::fs::File>) -> io::Result<()> {
    if handles.len() <= 1 {
        for h in &handles {
            count_sync();
            h.sync_all()?;
        }
        return Ok(());
    }
    std::thread::scope(|scope| {
        let joins: Vec<_> = handles
            .iter()
            .map(|h| {
                scope.spawn(move || {
                    count_sync();
                    h.sync_all()
                })
            })
            .collect();
        let mut first = Ok(());
        for j in joins {
            let r = j
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a sync thread panicked")));
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
}

/// Replace `name` atomically: write a temp file, fsync it, rename it over
/// `name`, fsync the directory.
pub fn write_document(dir: &Dir, name: &str, bytes: &[u8]) -> io::Result<()> {
    replace(dir, name, bytes, true)
}

/// Replace `name` atomically (temp file, rename) without syncing: for a
/// document another durable record backs (the journal), reconciled from it
/// after a power loss.
pub fn write_document_unsynced(dir: &Dir, name: &str, bytes: &[u8]) -> io::Result<()> {
    replace(dir, name, bytes, false)
}

/// Overwrite `name` in place, unsynced (no temp file, no rename: no inode
/// made or freed), for a document of a new worker's tree that no reader
/// sees yet and whose creation is rolled back unless its first commit,
/// begun after this returns, is whole (see `Home::tree_open`). A file
/// that is not there is made as [`write_document_unsynced`] would.
///
/// Never truncated to nothing: written over from its start, then cut to
/// the new length if it was longer. Emptying a file costs ext4 more than
/// the write: the blocks it frees are discarded at once on a filesystem
/// mounted `discard` without a journal (a synchronous wait for the
/// device), and a file emptied and rewritten is written back when it is
/// closed (`auto_da_alloc`). A reader that catches the write half done
/// sees a document that does not parse and reads it again.
pub fn overwrite_unsynced(dir: &Dir, name: &str, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut opts = OpenOptions::new();
    opts.write(true);
    match dir.open_with(name, &opts) {
        Ok(file) => {
            let file = file.into_std();
            file.write_all_at(bytes, 0)?;
            if file.metadata()?.len() > bytes.len() as u64 {
                file.set_len(bytes.len() as u64)?;
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => replace(dir, name, bytes, false),
        Err(e) => Err(e),
    }
}

fn replace(dir: &Dir, name: &str, bytes: &[u8], sync: bool) -> io::Result<()> {
    let tmp = format!(".{name}.tmp-{}", uuid::Uuid::new_v4().simple());
    let result = (|| {
        let mut file = create_file_new(dir, &tmp)?;
        file.write_all(bytes)?;
        if sync {
            count_sync();
            file.sync_all()?;
        }
        dir.rename(&tmp, dir, name)?;
        if sync {
            sync_dir(dir)?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = dir.remove_file(&tmp);
    }
    result
}

/// Read a JSON document and check its `"version"` before the full parse, so
/// a foreign version is reported rather than mis-parsed.
pub fn read_document<T: serde::de::DeserializeOwned>(
    dir: &Dir,
    name: &str,
    expected_version: u64,
) -> Result<T, DocumentError> {
    read_document_since(dir, name, expected_version, expected_version)
}

/// [`read_document`] for a document whose format versions `oldest` to
/// `newest` this cairn reads (a newer version adds fields an older one
/// lacks; the caller upgrades what it read).
pub fn read_document_since<T: serde::de::DeserializeOwned>(
    dir: &Dir,
    name: &str,
    oldest: u64,
    newest: u64,
) -> Result<T, DocumentError> {
    let bytes = dir.read(name).map_err(|source| DocumentError::Io {
        name: name.to_string(),
        source,
    })?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| DocumentError::Invalid {
            name: name.to_string(),
            reason: e.to_string(),
        })?;
    match value.get("version").and_then(|v| v.as_u64()) {
        Some(v) if (oldest..=newest).contains(&v) => {}
        Some(v) => {
            return Err(DocumentError::Version {
                name: name.to_string(),
                found: v,
                expected: newest,
            });
        }
        None => {
            return Err(DocumentError::Invalid {
                name: name.to_string(),
                reason: "it has no \"version\" field".to_string(),
            });
        }
    }
    serde_json::from_value(value).map_err(|e| DocumentError::Invalid {
        name: name.to_string(),
        reason: e.to_string(),
    })
}

/// A document that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// The file could not be read.
    #[error("cannot read {name}: {source}")]
    Io {
        /// The document.
        name: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The file is not the expected JSON.
    #[error("{name} is not valid: {reason}")]
    Invalid {
        /// The document.
        name: String,
        /// Why.
        reason: String,
    },
    /// The file has another format version.
    #[error("{name} has format version {found}; this cairn reads version {expected}")]
    Version {
        /// The document.
        name: String,
        /// Its version.
        found: u64,
        /// Ours.
        expected: u64,
    },
}

impl DocumentError {
    /// Whether the document does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, DocumentError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

pub use cairn_store::faults::{crash_point, fault_point, now_ms};

/// Raise this process's soft open-file limit to its hard limit (what a
/// server holding many sessions needs: each live run holds a few
/// descriptors). Returns the limit now in force.
pub fn raise_open_file_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
    getrlimit(Resource::Nofile).current
}

/// The descriptor slots a server makes ready at start ([`presize_fd_table`]):
/// the file store's open sessions (four descriptors each, at most
/// [`crate::file::MAX_OPEN_SESSIONS`]) and as many again for connections,
/// live runs and their sockets. 64 KiB of table.
pub const FD_SLOTS_AT_START: u64 = 8192;

/// Grow this process's descriptor table to `slots` (at most its open-file
/// limit) now, and return the slots it holds. Call it while the process has
/// one thread: a table that grows in a process of several threads waits
/// for an RCU grace period before it lets go of the old one
/// (`expand_files` → `synchronize_rcu`: milliseconds on a busy two-core
/// machine), and whichever open got the first descriptor past the old
/// size waited with it — once a doubling, on requests that had nothing to
/// do with it. The table never shrinks; a slot costs 8 bytes.
pub fn presize_fd_table(slots: u64) -> io::Result<u64> {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let highest = slots.min(limit).min(i32::MAX as u64).saturating_sub(1);
    if highest > 0 {
        let probe = std::fs::File::open("/dev/null")?;
        // The lowest free descriptor at or past `highest`: the table grows
        // to hold it; closing it keeps the table.
        drop(rustix::io::fcntl_dupfd_cloexec(&probe, highest as i32)?);
    }
    Ok(highest + 1)
}

/// Remove the directory `name` inside `parent` and everything under it,
/// holding a fixed number of descriptors however deep it nests: each
/// subdirectory met is first renamed up into one flat trash directory, then
/// emptied there. (A recursive removal holds one descriptor per level, and a
/// guest can nest its worktree deeper than a process may open.)
pub fn remove_tree(parent: &Dir, name: &str) -> io::Result<()> {
    let top = match parent.open_dir(name) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let trash_name = format!(".trash-{}", uuid::Uuid::new_v4().simple());
    let trash = create_dir_new(&top, &trash_name)?;
    let mut next = 0u64;
    // Empty `dir`: files go, subdirectories move into the trash.
    let mut empty = |dir: &Dir, skip: Option<&str>| -> io::Result<()> {
        for entry in dir.entries()? {
            let entry = entry?;
            let file = entry.file_name();
            let Some(file) = file.to_str() else {
                return Err(io::Error::other("a name that is not UTF-8"));
            };
            if Some(file) == skip {
                continue;
            }
            if entry.file_type()?.is_dir() {
                next += 1;
                dir.rename(file, &trash, next.to_string())?;
            } else {
                dir.remove_file(file)?;
            }
        }
        Ok(())
    };
    empty(&top, Some(&trash_name))?;
    loop {
        let Some(entry) = trash.entries()?.next() else {
            break;
        };
        let entry = entry?;
        let file = entry.file_name().to_string_lossy().into_owned();
        let sub = trash.open_dir(&file)?;
        empty(&sub, None)?;
        drop(sub);
        trash.remove_dir(&file)?;
    }
    drop(trash);
    top.remove_dir(&trash_name)?;
    drop(top);
    parent.remove_dir(name)
}

/// Milliseconds since the Unix epoch as RFC 3339 UTC text
/// (`2026-11-30T19:22:57.123Z`), as JSON protocols carry timestamps.
pub fn rfc3339_ms(ms: u64) -> String {
    const FORMAT: &[time::format_description::BorrowedFormatItem<'_>] = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(FORMAT).ok())
        .unwrap_or_else(|| "9999-12-31T23:59:59.999Z".into())
}

#[cfg(test)]
mod rfc3339_tests {
    #[test]
    fn known_instants() {
        assert_eq!(super::rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            super::rfc3339_ms(951_782_400_123),
            "2000-02-29T00:00:00.123Z"
        );
        assert_eq!(
            super::rfc3339_ms(1_796_066_577_000),
            "2026-11-30T19:22:57.000Z"
        );
    }
}

#[cfg(test)]
mod overwrite_tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// Written over in place, longer or shorter, the file holds exactly
    /// the new bytes (a shorter document is cut to its length: no tail of
    /// the old one is left) and keeps its inode.
    #[test]
    fn an_overwrite_in_place_leaves_exactly_the_new_bytes_in_the_same_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        overwrite_unsynced(&dir, "doc.json", b"{\"a\": 1}").unwrap();
        let inode = std::fs::metadata(tmp.path().join("doc.json"))
            .unwrap()
            .ino();
        for bytes in [
            &b"{\"a\": 1, \"longer\": true}"[..],
            b"{\"b\": 2}",
            b"{}",
            b"{\"c\": \"grown again\"}",
        ] {
            overwrite_unsynced(&dir, "doc.json", bytes).unwrap();
            let path = tmp.path().join("doc.json");
            assert_eq!(std::fs::read(&path).unwrap(), bytes);
            assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);
        }
    }

    /// A marker is a second name for its target where the filesystem
    /// links (no inode of its own); one that exists already is an error;
    /// where no link can be made (here: no target), an empty file.
    #[test]
    fn a_marker_is_a_link_to_its_target_or_else_an_empty_file() {
        let tmp = tempfile::tempdir().unwrap();
        let root = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        let sub = create_dir_new(&root, "sub").unwrap();
        write_new(&sub, "doc.json", b"{}").unwrap();
        mark(&sub, "doc.json", &root, "creating").unwrap();
        let (doc, marker) = (
            std::fs::metadata(tmp.path().join("sub/doc.json")).unwrap(),
            std::fs::metadata(tmp.path().join("creating")).unwrap(),
        );
        assert_eq!(
            marker.ino(),
            doc.ino(),
            "the marker has an inode of its own"
        );
        assert_eq!(doc.nlink(), 2);
        let again = mark(&sub, "doc.json", &root, "creating").unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
        root.remove_file("creating").unwrap();
        assert_eq!(
            std::fs::metadata(tmp.path().join("sub/doc.json"))
                .unwrap()
                .nlink(),
            1
        );

        mark(&sub, "missing.json", &root, "forking").unwrap();
        let fallback = std::fs::metadata(tmp.path().join("forking")).unwrap();
        assert!(fallback.is_file());
        assert_eq!((fallback.len(), fallback.nlink()), (0, 1));
    }
}

#[cfg(test)]
mod fd_table_tests {
    /// The slots of this process's descriptor table (`FDSize` in
    /// `/proc/self/status`).
    fn table_slots() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("FDSize:")).unwrap();
        line["FDSize:".len()..].trim().parse().unwrap()
    }

    /// The table is grown at once, to the slots asked for, and stays grown
    /// with the probe descriptor closed.
    #[test]
    fn presizing_grows_the_descriptor_table_at_once() {
        let limit = super::raise_open_file_limit().unwrap_or(1024);
        let before = table_slots();
        let wanted = (before * 4).min(limit);
        assert!(
            wanted > before,
            "the open-file limit ({limit}) leaves no room to grow a table of {before}"
        );
        let held = super::presize_fd_table(wanted).unwrap();
        assert_eq!(held, wanted);
        let after = table_slots();
        assert!(
            after >= wanted,
            "the table holds {after} slots, asked {wanted}"
        );
        // The probe is closed: the next descriptor is a low one.
        let file = std::fs::File::open("/dev/null").unwrap();
        use std::os::fd::AsRawFd;
        assert!((file.as_raw_fd() as u64) < before, "{}", file.as_raw_fd());
    }
}
