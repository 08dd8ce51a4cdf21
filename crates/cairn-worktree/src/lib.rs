//! A generation's worktree (`artifacts/`) as the limits count it, and its
//! copy into the next generation.
//!
//! One rule for size: a regular file counts as the larger of its length and
//! the blocks it holds — so a sparse file counts as its length (and the copy,
//! which may fill its holes, stays under the same limit), and a file
//! preallocated past its length counts what it took from the disk. Every
//! entry (file, directory, symlink, anything else) counts once against
//! `artifact_files`, and a directory counts its own blocks as bytes (a
//! tree of empty directories is not free); nesting past `artifact_depth`
//! levels is itself a breach.
//!
//! Walks measure; an [`ArtifactMeter`] enforces at the write: every write,
//! `set-size` and new directory of the run's guest is charged before it
//! happens, and one that would pass `artifact_bytes` fails with an error
//! value (`insufficient-space`) instead. The walks the run's watcher makes
//! bring the meter back to what is really there (deletions give room back).
//! Walks are iterative, hold one descriptor per level (at most
//! `artifact_depth`), and stop at the first limit crossed, so a hostile tree
//! costs the host no more than the limits allow.
//!
//! ```
//! use cairn_worktree::{Budget, usage};
//! use cap_std::{ambient_authority, fs::Dir};
//!
//! let tmp = tempfile::tempdir()?;
//! let tree = Dir::open_ambient_dir(tmp.path(), ambient_authority())?;
//! tree.create_dir("notes")?;
//! tree.write("notes/a.txt", b"hello")?;
//! let budget = Budget { bytes: 1 << 20, files: 2, depth: 4 };
//! let (used, breach) = usage(&tree, &budget)?;
//! assert_eq!((used.files, used.depth), (2, 2)); // a directory and a file in it
//! assert!(used.bytes >= 5 && breach.is_none());
//! // One more entry crosses `artifact_files`: the walk stops there.
//! tree.write("b.txt", b"")?;
//! assert_eq!(usage(&tree, &budget)?.1.map(|b| b.0), Some("artifact_files"));
//! # Ok::<(), std::io::Error>(())
//! ```

#![deny(missing_docs)]

pub mod fs;

use crate::fs as fsutil;
use cap_std::fs::{Dir, MetadataExt};
use std::io;

/// The limits a worktree is held to.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// `artifact_bytes`.
    pub bytes: u64,
    /// `artifact_files`.
    pub files: u64,
    /// `artifact_depth`.
    pub depth: u64,
}

impl Budget {
    /// The budget of a run's limits.
    pub fn of(limits: &cairn_types::limits::Limits) -> Budget {
        Budget {
            bytes: limits.artifact_bytes,
            files: limits.artifact_files,
            depth: limits.artifact_depth,
        }
    }
}

/// What a walk counted (up to where it stopped).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes, by the rule above.
    pub bytes: u64,
    /// Entries.
    pub files: u64,
    /// The deepest level met (the root's entries are level 1).
    pub depth: u64,
}

/// A limit a tree is over: (limit, value counted so far, max).
pub type Breach = (&'static str, u64, u64);

/// The bytes a file counts for.
pub fn file_bytes(meta: &cap_std::fs::Metadata) -> u64 {
    meta.len().max(meta.blocks().saturating_mul(512))
}

/// Count `dir`'s tree against `budget`, stopping at the first breach.
pub fn usage(dir: &Dir, budget: &Budget) -> io::Result<(Usage, Option<Breach>)> {
    let mut used = Usage::default();
    // Depth-first with one open directory per level.
    let mut iters: Vec<cap_std::fs::ReadDir> = vec![dir.entries()?];
    while let Some(it) = iters.last_mut() {
        let Some(entry) = it.next() else {
            iters.pop();
            continue;
        };
        let entry = entry?;
        let level = iters.len() as u64;
        used.files += 1;
        used.depth = used.depth.max(level);
        if used.files > budget.files {
            return Ok((used, Some(("artifact_files", used.files, budget.files))));
        }
        if level > budget.depth {
            return Ok((used, Some(("artifact_depth", level, budget.depth))));
        }
        let kind = entry.file_type()?;
        if kind.is_dir() {
            used.bytes = used
                .bytes
                .saturating_add(entry.metadata()?.blocks().saturating_mul(512));
            if used.bytes > budget.bytes {
                return Ok((used, Some(("artifact_bytes", used.bytes, budget.bytes))));
            }
            iters.push(entry.open_dir()?.entries()?);
        } else if kind.is_file() {
            used.bytes = used.bytes.saturating_add(file_bytes(&entry.metadata()?));
            if used.bytes > budget.bytes {
                return Ok((used, Some(("artifact_bytes", used.bytes, budget.bytes))));
            }
        }
    }
    Ok((used, None))
}

/// What a new directory is charged at its creation, before a walk counts
/// its blocks: one block of most filesystems.
pub const DIRECTORY_BYTES: u64 = 4096;

/// Where a meter's charges stood when a walk began.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    taken: u64,
    inflight: u64,
}

/// A run's worktree bytes as its writes grow them, against its
/// `artifact_bytes`: charged before each write, brought back to the
/// measured usage by each walk.
#[derive(Debug)]
pub struct ArtifactMeter {
    used: std::sync::atomic::AtomicU64,
    /// Every byte ever taken: what was charged while a walk went on.
    taken: std::sync::atomic::AtomicU64,
    /// Bytes charged to writes still on their way to the file (a stream's
    /// write lands later, on a blocking thread): a walk may not see them.
    inflight: std::sync::atomic::AtomicU64,
    /// The guest created, linked or wrote something: only then can the
    /// tree it leaves differ from the one it was given.
    touched: std::sync::atomic::AtomicBool,
    budget: u64,
}

impl ArtifactMeter {
    /// A meter of `budget` bytes, `used` of them taken (the carried tree).
    pub fn new(budget: u64, used: u64) -> std::sync::Arc<Self> {
        std::sync::Arc::new(ArtifactMeter {
            used: std::sync::atomic::AtomicU64::new(used),
            taken: std::sync::atomic::AtomicU64::new(0),
            inflight: std::sync::atomic::AtomicU64::new(0),
            touched: std::sync::atomic::AtomicBool::new(false),
            budget,
        })
    }

    /// Something that may grow the tree without a charge (a new file, a
    /// link) is about to happen.
    pub fn touch(&self) {
        self.touched
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether the guest changed the tree in a way that can grow it.
    pub fn touched(&self) -> bool {
        self.touched.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Take `bytes` more, or refuse when the budget would be passed.
    pub fn take(&self, bytes: u64) -> bool {
        use std::sync::atomic::Ordering;
        self.touch();
        bytes == 0
            || self
                .used
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                    used.checked_add(bytes).filter(|&u| u <= self.budget)
                })
                .is_ok()
                && {
                    self.taken.fetch_add(bytes, Ordering::AcqRel);
                    true
                }
    }

    /// Take `bytes` for a write that lands later: counted in flight until
    /// [`Self::landed`] says it reached the file.
    pub fn take_inflight(&self, bytes: u64) -> bool {
        let taken = self.take(bytes);
        if taken {
            self.inflight
                .fetch_add(bytes, std::sync::atomic::Ordering::AcqRel);
        }
        taken
    }

    /// Writes of `bytes` taken with [`Self::take_inflight`] reached the file
    /// (or failed and were given back).
    pub fn landed(&self, bytes: u64) {
        use std::sync::atomic::Ordering;
        let _ = self
            .inflight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(bytes))
            });
    }

    /// Where the charges stand before a walk (see [`Self::measured`]).
    pub fn mark(&self) -> Mark {
        Mark {
            taken: self.taken.load(std::sync::atomic::Ordering::Acquire),
            inflight: self.inflight.load(std::sync::atomic::Ordering::Acquire),
        }
    }

    /// Give `bytes` back (a write that failed, a file truncated).
    pub fn give(&self, bytes: u64) {
        use std::sync::atomic::Ordering;
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }

    /// A walk begun at `mark` measured `bytes`: that, whatever was charged
    /// while it went on, and what was in flight when it began (which it may
    /// or may not have seen: counted again rather than missed), is what is
    /// there now.
    pub fn measured(&self, mark: Mark, bytes: u64) {
        let since = self
            .taken
            .load(std::sync::atomic::Ordering::Acquire)
            .saturating_sub(mark.taken);
        self.used.store(
            bytes.saturating_add(since).saturating_add(mark.inflight),
            std::sync::atomic::Ordering::Release,
        );
    }

    /// Bytes taken now.
    pub fn used(&self) -> u64 {
        self.used.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The budget.
    pub fn budget(&self) -> u64 {
        self.budget
    }
}

/// Copy regular files and directories of `from` into `to`; symlinks and
/// anything else are not followed (skipped), so a guest cannot make the
/// host copy from outside its tree. The caller checked `from` against the
/// budget first; the depth bound here keeps a tree that changed since from
/// costing more descriptors.
pub fn copy(from: &Dir, to: &Dir, max_depth: u64) -> io::Result<()> {
    let mut stack: Vec<(cap_std::fs::ReadDir, Dir, Dir)> =
        vec![(from.entries()?, from.try_clone()?, to.try_clone()?)];
    loop {
        let depth = stack.len() as u64;
        let Some((it, src, dst)) = stack.last_mut() else {
            break;
        };
        let Some(entry) = it.next() else {
            stack.pop();
            continue;
        };
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let kind = entry.file_type()?;
        if kind.is_dir() {
            if depth >= max_depth {
                return Err(io::Error::other(format!(
                    "the worktree nests deeper than {max_depth} levels"
                )));
            }
            let sub = fsutil::create_dir_new(dst, name)?;
            let from_sub = entry.open_dir()?;
            let next = (from_sub.entries()?, from_sub, sub);
            stack.push(next);
        } else if kind.is_file() {
            src.copy(name, dst, name)?;
        }
    }
    Ok(())
}

/// The first bytes of a packed worktree.
const PACK_MAGIC: &[u8] = b"cairn-worktree 1\n";

/// Pack `from` (checked against `budget` first) into one byte string: the
/// snapshot a generation leaves in the shared store, so the next
/// generation on another instance starts from it. Directories and regular
/// files only, as [`copy`] carries them; `None` when the tree is over the
/// budget (it is not carried, as [`copy`] would not carry it).
pub fn pack(from: &Dir, budget: &Budget) -> io::Result<Option<Vec<u8>>> {
    if usage(from, budget)?.1.is_some() {
        return Ok(None);
    }
    let mut out = PACK_MAGIC.to_vec();
    let mut stack: Vec<(cap_std::fs::ReadDir, Dir, String)> =
        vec![(from.entries()?, from.try_clone()?, String::new())];
    while let Some((it, dir, prefix)) = stack.last_mut() {
        let Some(entry) = it.next() else {
            stack.pop();
            continue;
        };
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = format!("{prefix}{name}");
        let kind = entry.file_type()?;
        if kind.is_dir() {
            if stack.len() as u64 >= budget.depth {
                return Ok(None);
            }
            put_entry(&mut out, b'd', &path, None);
            let sub = entry.open_dir()?;
            let next = (sub.entries()?, sub, format!("{path}/"));
            stack.push(next);
        } else if kind.is_file() {
            let bytes = dir.read(name)?;
            put_entry(&mut out, b'f', &path, Some(&bytes));
        }
    }
    Ok(Some(out))
}

fn put_entry(out: &mut Vec<u8>, kind: u8, path: &str, bytes: Option<&[u8]>) {
    out.push(kind);
    out.extend_from_slice(&(path.len() as u32).to_be_bytes());
    out.extend_from_slice(path.as_bytes());
    if let Some(bytes) = bytes {
        out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
        out.extend_from_slice(bytes);
    }
}

/// Unpack a [`pack`]ed worktree into the empty directory `to`. A malformed
/// or hostile snapshot (a path with `..`, a truncated entry) is refused
/// with an error that names the problem; `to` never addresses outside
/// itself (a capability directory).
pub fn unpack(bytes: &[u8], to: &Dir) -> io::Result<()> {
    let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    let mut rest = bytes
        .strip_prefix(PACK_MAGIC)
        .ok_or_else(|| bad("not a cairn worktree snapshot".into()))?;
    fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, tail) = (rest.len() >= n).then(|| rest.split_at(n))?;
        *rest = tail;
        Some(head)
    }
    while let Some(kind) = take(&mut rest, 1) {
        let truncated = || bad("the snapshot is truncated".into());
        let len = u32::from_be_bytes(
            take(&mut rest, 4)
                .ok_or_else(truncated)?
                .try_into()
                .unwrap_or_default(),
        );
        let path = take(&mut rest, len as usize).ok_or_else(truncated)?;
        let path = std::str::from_utf8(path).map_err(|_| bad("a path is not UTF-8".into()))?;
        if path
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == ".." || p.contains('\0'))
        {
            return Err(bad(format!(
                "the snapshot names {path:?}, not a path inside the worktree"
            )));
        }
        match kind[0] {
            b'd' => to.create_dir(path)?,
            b'f' => {
                let n = u64::from_be_bytes(
                    take(&mut rest, 8)
                        .ok_or_else(truncated)?
                        .try_into()
                        .unwrap_or_default(),
                );
                let data = take(&mut rest, usize::try_from(n).unwrap_or(usize::MAX))
                    .ok_or_else(truncated)?;
                to.write(path, data)?;
            }
            other => {
                return Err(bad(format!(
                    "unknown entry kind {other:#x} in the snapshot"
                )));
            }
        }
    }
    Ok(())
}
