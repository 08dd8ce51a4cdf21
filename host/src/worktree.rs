//! A generation's worktree (`artifacts/`) as the limits count it, and its
//! copy into the next generation.
//!
//! One rule for size: a regular file counts as the larger of its length and
//! the blocks it holds — so a sparse file counts as its length (and the copy,
//! which may fill its holes, stays under the same limit), and a file
//! preallocated past its length counts what it took from the disk. Every
//! entry (file, directory, symlink, anything else) counts once against
//! `artifact_files`; nesting past `artifact_depth` levels is itself a breach.
//! Walks are iterative, hold one descriptor per level (at most
//! `artifact_depth`), and stop at the first limit crossed, so a hostile tree
//! costs the host no more than the limits allow.

use crate::fsutil;
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
    pub fn of(limits: &crate::limits::Limits) -> Budget {
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
