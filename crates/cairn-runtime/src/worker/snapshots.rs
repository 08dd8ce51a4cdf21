//! Worktree snapshots: what a generation's worktree held when its run
//! started, and what a child left in a loaned scope when its parent heard
//! it ended — inputs a replay needs and the journal alone does not hold
//! (issue 35). Content-addressed and kept in the worker aggregate:
//! `session/worktrees/<hex>` is a file's bytes (SHA-256 of them) or a
//! manifest (SHA-256 of its JSON), so a file that did not change between
//! generations is stored once. The journal names a manifest by its digest
//! (`worktree_recorded`, a `workers` answer's `snapshot`).
//!
//! A manifest: `{"version": 1, "entries": [{"path", "kind": "dir"|"file",
//! "sha256"?, "size"?}]}`, entries sorted by path, directories and regular
//! files only (what a generation's copy carries).

use super::WorkerDir;
use crate::fsutil;
use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io;

/// Where snapshots live in the session directory.
const DIR: &str = "worktrees";

/// A manifest's entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Its path in the tree (`a/b.txt`): plain names joined by `/`.
    pub path: String,
    /// `dir` or `file`.
    pub kind: String,
    /// A file's bytes' SHA-256 (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// A file's length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// A tree as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always 1.
    pub version: u64,
    /// Sorted by path.
    pub entries: Vec<Entry>,
}

/// A recorded snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// `sha256:<hex>` of its manifest.
    pub digest: String,
    /// Files in it.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

fn hex_of(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn bad(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

impl WorkerDir {
    /// Record `tree` (directories and regular files, `max_depth` levels at
    /// most; symlinks and anything else are left out, as a generation's
    /// copy leaves them). `None` for an empty tree: nothing to record.
    pub fn record_worktree(&self, tree: &Dir, max_depth: u64) -> io::Result<Option<Recorded>> {
        let mut entries = Vec::new();
        let mut pending: Vec<(Dir, String)> = vec![(tree.try_clone()?, String::new())];
        let store = std::cell::OnceCell::new();
        let (mut files, mut bytes) = (0u64, 0u64);
        while let Some((dir, prefix)) = pending.pop() {
            let mut names: Vec<(String, cap_std::fs::FileType)> = Vec::new();
            for entry in dir.entries()? {
                let entry = entry?;
                if let Some(name) = entry.file_name().to_str() {
                    names.push((name.to_string(), entry.file_type()?));
                }
            }
            names.sort_by(|a, b| a.0.cmp(&b.0));
            for (name, kind) in names {
                let path = format!("{prefix}{name}");
                if kind.is_dir() {
                    if path.split('/').count() as u64 >= max_depth {
                        return Err(io::Error::other(format!(
                            "the worktree nests deeper than {max_depth} levels"
                        )));
                    }
                    entries.push(Entry {
                        path: path.clone(),
                        kind: "dir".into(),
                        sha256: None,
                        size: None,
                    });
                    pending.push((dir.open_dir(&name)?, format!("{path}/")));
                } else if kind.is_file() {
                    let data = dir.read(&name)?;
                    let hex = hex_of(&data);
                    let store = match store.get() {
                        Some(s) => s,
                        None => {
                            let _ = store.set(fsutil::ensure_dir(self.session_dir(), DIR)?);
                            store.get().expect("just set")
                        }
                    };
                    if !store.exists(&hex) {
                        fsutil::write_document(store, &hex, &data)?;
                    }
                    files += 1;
                    bytes += data.len() as u64;
                    entries.push(Entry {
                        path,
                        kind: "file".into(),
                        sha256: Some(hex),
                        size: Some(data.len() as u64),
                    });
                }
            }
        }
        if entries.is_empty() {
            return Ok(None);
        }
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        let manifest = serde_json::to_vec(&Manifest {
            version: 1,
            entries,
        })
        .map_err(io::Error::other)?;
        let hex = hex_of(&manifest);
        let store = fsutil::ensure_dir(self.session_dir(), DIR)?;
        if !store.exists(&hex) {
            fsutil::write_document(&store, &hex, &manifest)?;
        }
        Ok(Some(Recorded {
            digest: format!("sha256:{hex}"),
            files,
            bytes,
        }))
    }

    /// Lay the snapshot `digest` out in `to` (an empty directory, or one
    /// whose entries of the same names are replaced). A missing or damaged
    /// snapshot is an error naming it; every byte is checked against its
    /// digest, and no path leaves `to`.
    pub fn lay_out_worktree(&self, digest: &str, to: &Dir) -> io::Result<u64> {
        let store = self
            .session_dir()
            .open_dir(DIR)
            .map_err(|e| bad(format!("worktree snapshot {digest}: {e}")))?;
        let read = |hex: &str| -> io::Result<Vec<u8>> {
            let data = store
                .read(hex)
                .map_err(|e| bad(format!("worktree snapshot {digest}: {hex}: {e}")))?;
            if hex_of(&data) != hex {
                return Err(bad(format!(
                    "worktree snapshot {digest}: {hex} does not hold the bytes it names"
                )));
            }
            Ok(data)
        };
        let hex = digest
            .strip_prefix("sha256:")
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| bad(format!("{digest:?} is not a worktree snapshot's digest")))?;
        let manifest: Manifest = serde_json::from_slice(&read(hex)?)
            .map_err(|e| bad(format!("worktree snapshot {digest}: {e}")))?;
        let mut bytes = 0;
        for entry in &manifest.entries {
            if entry
                .path
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == ".." || p.contains('\0'))
            {
                return Err(bad(format!(
                    "worktree snapshot {digest} names {:?}, not a path inside the worktree",
                    entry.path
                )));
            }
            match (entry.kind.as_str(), &entry.sha256) {
                ("dir", _) => match to.create_dir(&entry.path) {
                    Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                    _ => {}
                },
                ("file", Some(hex)) => {
                    let data = read(hex)?;
                    bytes += data.len() as u64;
                    to.write(&entry.path, data)?;
                }
                (kind, _) => {
                    return Err(bad(format!(
                        "worktree snapshot {digest}: entry {:?} of kind {kind:?}",
                        entry.path
                    )));
                }
            }
        }
        Ok(bytes)
    }
}

impl WorkerDir {
    /// Carry `source`'s snapshots into this (new) worker: a fork's carried
    /// history names them. Each is hard-linked where the filesystem allows
    /// (they never change), else copied.
    pub fn carry_snapshots(&self, source: &WorkerDir) -> io::Result<()> {
        let Ok(from) = source.session_dir().open_dir(DIR) else {
            return Ok(());
        };
        let to = fsutil::ensure_dir(self.session_dir(), DIR)?;
        for entry in from.entries()? {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if !entry.file_type()?.is_file() || to.exists(&name) {
                continue;
            }
            if from.hard_link(&name, &to, &name).is_err() {
                from.copy(&name, &to, &name)?;
            }
        }
        fsutil::sync_dir(&to)
    }
}

impl WorkerDir {
    /// The snapshot `digest` in the packed form a generation's worktree
    /// travels in (`crate::worktree::pack`): what the viewer lays out to
    /// replay in the browser. `None` when this worker holds no such
    /// snapshot.
    pub fn pack_worktree(
        &self,
        digest: &str,
        budget: &crate::worktree::Budget,
    ) -> io::Result<Option<Vec<u8>>> {
        let hex = digest.strip_prefix("sha256:").unwrap_or_default();
        let held = self
            .session_dir()
            .open_dir(DIR)
            .is_ok_and(|d| !hex.is_empty() && d.exists(hex));
        if !held {
            return Ok(None);
        }
        let scratch = tempfile::tempdir()?;
        let to = Dir::open_ambient_dir(scratch.path(), cap_std::ambient_authority())?;
        self.lay_out_worktree(digest, &to)?;
        crate::worktree::pack(&to, budget)?
            .map(Some)
            .ok_or_else(|| {
                io::Error::other(format!(
                    "worktree snapshot {digest} is over the worktree limits"
                ))
            })
    }
}

impl WorkerDir {
    /// Whether this worker holds snapshot `digest`'s manifest.
    pub fn has_snapshot(&self, digest: &str) -> bool {
        let hex = digest.strip_prefix("sha256:").unwrap_or_default();
        !hex.is_empty()
            && self
                .session_dir()
                .open_dir(DIR)
                .is_ok_and(|d| d.exists(hex))
    }

    /// Snapshot `digest`'s blobs, `(hex, bytes)`: its manifest first, then
    /// each file it names (what a shared store keeps for other instances).
    pub fn snapshot_blobs(&self, digest: &str) -> io::Result<Vec<(String, Vec<u8>)>> {
        let store = self.session_dir().open_dir(DIR)?;
        let hex = digest
            .strip_prefix("sha256:")
            .unwrap_or_default()
            .to_string();
        let manifest = store.read(&hex)?;
        let parsed: Manifest = serde_json::from_slice(&manifest)
            .map_err(|e| bad(format!("worktree snapshot {digest}: {e}")))?;
        let mut out = vec![(hex, manifest)];
        for entry in parsed.entries {
            if let Some(h) = entry.sha256
                && !out.iter().any(|(k, _)| *k == h)
            {
                let data = store.read(&h)?;
                out.push((h, data));
            }
        }
        Ok(out)
    }

    /// Keep one blob of a snapshot brought from elsewhere: refused unless
    /// `bytes` are what `hex` names.
    pub fn keep_snapshot_blob(&self, hex: &str, bytes: &[u8]) -> io::Result<()> {
        if hex_of(bytes) != hex {
            return Err(bad(format!("blob {hex} does not hold the bytes it names")));
        }
        let store = fsutil::ensure_dir(self.session_dir(), DIR)?;
        if !store.exists(hex) {
            fsutil::write_document(&store, hex, bytes)?;
        }
        Ok(())
    }

    /// The file blobs a manifest names (hex).
    pub fn manifest_blobs(manifest: &[u8]) -> io::Result<Vec<String>> {
        let parsed: Manifest = serde_json::from_slice(manifest)
            .map_err(|e| bad(format!("a worktree manifest: {e}")))?;
        Ok(parsed
            .entries
            .into_iter()
            .filter_map(|e| e.sha256)
            .collect())
    }
}
