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

/// Whether `hex` names a blob: 64 lowercase hex digits (so never a path).
fn is_blob_name(hex: &str) -> bool {
    hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The blob a snapshot's digest (`sha256:<64 hex>`) names; the error says
/// what is wrong with it.
pub fn blob_of(digest: &str) -> io::Result<&str> {
    digest
        .strip_prefix("sha256:")
        .filter(|h| is_blob_name(h))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{digest:?} is not a worktree snapshot's digest (sha256:<64 hex>)"),
            )
        })
}

/// The file blobs a manifest names, each checked to be a blob's name.
fn files_of(digest: &str, manifest: &Manifest) -> io::Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for hex in manifest.entries.iter().filter_map(|e| e.sha256.as_deref()) {
        if !is_blob_name(hex) {
            return Err(bad(format!(
                "worktree snapshot {digest} names {hex:?}, not a blob"
            )));
        }
        if !out.iter().any(|h| h == hex) {
            out.push(hex.to_string());
        }
    }
    Ok(out)
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
        let manifest: Manifest = serde_json::from_slice(&read(blob_of(digest)?)?)
            .map_err(|e| bad(format!("worktree snapshot {digest}: {e}")))?;
        files_of(digest, &manifest)?;
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

    /// The snapshot `digest` in the packed form a generation's worktree
    /// travels in (`cairn_worktree::pack`): what the viewer lays out to
    /// replay in the browser. `None` when this worker holds no such
    /// snapshot.
    pub fn pack_worktree(
        &self,
        digest: &str,
        budget: &cairn_worktree::Budget,
    ) -> io::Result<Option<Vec<u8>>> {
        if !self.has_snapshot(digest) {
            return Ok(None);
        }
        let scratch = tempfile::tempdir()?;
        let to = Dir::open_ambient_dir(scratch.path(), cap_std::ambient_authority())?;
        self.lay_out_worktree(digest, &to)?;
        cairn_worktree::pack(&to, budget)?.map(Some).ok_or_else(|| {
            io::Error::other(format!(
                "worktree snapshot {digest} is over the worktree limits"
            ))
        })
    }

    /// Whether this worker holds snapshot `digest`'s manifest.
    pub fn has_snapshot(&self, digest: &str) -> bool {
        blob_of(digest).is_ok_and(|hex| {
            self.session_dir()
                .open_dir(DIR)
                .is_ok_and(|d| d.exists(hex))
        })
    }

    /// Snapshot `digest`'s blobs, `(hex, bytes)`: its manifest first, then
    /// each file it names (what a shared store keeps for other instances).
    pub fn snapshot_blobs(&self, digest: &str) -> io::Result<Vec<(String, Vec<u8>)>> {
        let store = self.session_dir().open_dir(DIR)?;
        let hex = blob_of(digest)?;
        let manifest = store.read(hex)?;
        let files = files_of(digest, &Self::parse_manifest(digest, &manifest)?)?;
        let mut out = vec![(hex.to_string(), manifest)];
        for file in files {
            let data = store.read(&file)?;
            out.push((file, data));
        }
        Ok(out)
    }

    /// Keep one blob of a snapshot brought from elsewhere: refused unless
    /// `bytes` are what `hex` names.
    pub fn keep_snapshot_blob(&self, hex: &str, bytes: &[u8]) -> io::Result<()> {
        if !is_blob_name(hex) || hex_of(bytes) != hex {
            return Err(bad(format!("blob {hex} does not hold the bytes it names")));
        }
        let store = fsutil::ensure_dir(self.session_dir(), DIR)?;
        if !store.exists(hex) {
            fsutil::write_document(&store, hex, bytes)?;
        }
        Ok(())
    }

    /// The file blobs snapshot `digest`'s manifest names (hex, each once).
    pub fn manifest_blobs(digest: &str, manifest: &[u8]) -> io::Result<Vec<String>> {
        files_of(digest, &Self::parse_manifest(digest, manifest)?)
    }

    fn parse_manifest(digest: &str, manifest: &[u8]) -> io::Result<Manifest> {
        serde_json::from_slice(manifest)
            .map_err(|e| bad(format!("worktree snapshot {digest}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_or_a_manifest_naming_anything_but_a_blob_is_refused() {
        let good = format!("sha256:{}", "ab".repeat(32));
        assert_eq!(blob_of(&good).unwrap(), "ab".repeat(32));
        for bad_digest in [
            "sha256:../../worker.json",
            "sha256:AB",
            &format!("sha256:{}", "AB".repeat(32)),
            &"ab".repeat(32),
        ] {
            let e = blob_of(bad_digest).unwrap_err();
            assert!(
                e.to_string()
                    .contains("is not a worktree snapshot's digest"),
                "{e}"
            );
        }
        let manifest = |hex: &str| Manifest {
            version: 1,
            entries: vec![Entry {
                path: "a.txt".into(),
                kind: "file".into(),
                sha256: Some(hex.into()),
                size: Some(1),
            }],
        };
        assert_eq!(
            files_of(&good, &manifest(&"cd".repeat(32))).unwrap().len(),
            1
        );
        let e = files_of(&good, &manifest("../../worker.json")).unwrap_err();
        assert!(e.to_string().contains("not a blob"), "{e}");
    }
}
