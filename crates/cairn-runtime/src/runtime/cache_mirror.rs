//! A reader's view of the home's compiled-code cache: readers may read it,
//! only the owner fills it. wasmtime's cache writes what it misses into its
//! directory, so a reader (`cairn replay`, the CLI beside a running `serve`)
//! points it at a private mirror instead — each file hard-linked from the
//! home's cache (copied where the filesystem will not link) — and the
//! mirror, with anything the reader compiled into it, goes when the
//! reader does.

use std::path::Path;

/// A private mirror of the cache at `home_cache`, or none when there is
/// nothing to mirror (or no room for it: the reader compiles instead).
pub(crate) fn mirror(home_cache: &Path) -> Option<tempfile::TempDir> {
    if !home_cache.is_dir() {
        return None;
    }
    let dir = match tempfile::Builder::new().prefix("cairn-cache-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "no mirror of the compiled-code cache; components compile anew");
            return None;
        }
    };
    match link_tree(home_cache, dir.path()) {
        Ok(files) => {
            tracing::debug!(files, "mirrored the home's compiled-code cache");
            Some(dir)
        }
        Err(e) => {
            tracing::warn!(error = %e, "no mirror of the compiled-code cache; components compile anew");
            None
        }
    }
}

/// Hard-link (or copy) every file under `from` into `to`; the files linked.
fn link_tree(from: &Path, to: &Path) -> std::io::Result<u64> {
    let mut files = 0;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let ty = entry.file_type()?;
        if ty.is_dir() {
            std::fs::create_dir(&target)?;
            files += link_tree(&entry.path(), &target)?;
        } else if ty.is_file() {
            if std::fs::hard_link(entry.path(), &target).is_err() {
                std::fs::copy(entry.path(), &target)?;
            }
            files += 1;
        }
    }
    Ok(files)
}

/// The compiled artifacts under `dir` (what a cache miss adds to).
pub(crate) fn files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => files(&e.path()),
            // Compiled code only: wasmtime's cache worker writes its
            // bookkeeping (`*.stats`, `.cleanup.wip-<pid>`) on its own
            // thread, whenever it gets to it, in any process that used the
            // cache — not a sign that anything was compiled.
            Ok(t) if t.is_file() => {
                let name = e.file_name();
                let name = name.to_string_lossy();
                usize::from(!name.starts_with('.') && !name.ends_with(".stats"))
            }
            _ => 0,
        })
        .sum()
}
