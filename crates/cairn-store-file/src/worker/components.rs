//! The home's component store: every component a worker was bound to,
//! stored once by digest (`components/sha256-<hex>.wasm`), and which
//! workspace uploaded which (`components/grants.json`).

use super::{DOC_VERSION, Home, WorkerError, io_err, to_json};
use crate::fsutil;
use cap_std::fs::Dir;
use serde::Deserialize;
use std::io;

impl Home {
    fn component_name(digest: &str) -> Option<String> {
        let hex = digest.strip_prefix("sha256:")?;
        (hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| format!("sha256-{hex}.wasm"))
    }

    /// Keep a component's bytes under `components/`, by digest, so a worker's
    /// runs can be restored and replayed with the code that wrote them.
    pub fn put_component(&self, digest: &str, bytes: &[u8]) -> Result<(), WorkerError> {
        let name = Self::component_name(digest).ok_or_else(|| WorkerError::Io {
            context: format!("component digest {digest:?}"),
            source: io::Error::new(io::ErrorKind::InvalidInput, "not sha256:<64 hex digits>"),
        })?;
        if self.component_stored(&name) {
            return Ok(());
        }
        let dir = fsutil::ensure_dir(&self.inner.root, "components")
            .map_err(io_err("cannot open components/"))?;
        if !dir.exists(&name) {
            fsutil::write_document(&dir, &name, bytes)
                .map_err(io_err(format!("cannot store component {digest}")))?;
        }
        self.remember_component(name);
        Ok(())
    }

    /// Record that `workspace` uploaded `digest` (components are stored once,
    /// by digest, but each workspace sees only its own uploads).
    pub fn grant_component(&self, workspace: &str, digest: &str) -> Result<(), WorkerError> {
        let _guard = self.reserve_lock();
        let dir = fsutil::ensure_dir(&self.inner.root, "components")
            .map_err(io_err("cannot open components/"))?;
        let mut grants = self.grants(&dir);
        let list = grants.entry(workspace.to_string()).or_default();
        if !list.iter().any(|d| d == digest) {
            list.push(digest.to_string());
            let doc = serde_json::json!({ "version": DOC_VERSION, "grants": grants });
            fsutil::write_document(&dir, "grants.json", &to_json(&doc))
                .map_err(io_err("cannot write components/grants.json"))?;
        }
        Ok(())
    }

    /// The digests `workspace` uploaded.
    pub fn granted(&self, workspace: &str) -> Vec<String> {
        let Ok(dir) = self.inner.root.open_dir("components") else {
            return vec![];
        };
        self.grants(&dir).remove(workspace).unwrap_or_default()
    }

    fn grants(&self, dir: &Dir) -> std::collections::BTreeMap<String, Vec<String>> {
        #[derive(Deserialize)]
        struct Grants {
            #[allow(dead_code)]
            version: u64,
            grants: std::collections::BTreeMap<String, Vec<String>>,
        }
        fsutil::read_document::<Grants>(dir, "grants.json", DOC_VERSION)
            .map(|g| g.grants)
            .unwrap_or_default()
    }

    /// The digests of every stored component.
    pub fn component_digests(&self) -> Vec<String> {
        let Ok(dir) = self.inner.root.open_dir("components") else {
            return vec![];
        };
        let Ok(entries) = dir.entries() else {
            return vec![];
        };
        let mut out: Vec<String> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let hex = name.strip_prefix("sha256-")?.strip_suffix(".wasm")?;
                Some(format!("sha256:{hex}"))
            })
            .collect();
        out.sort();
        out
    }

    /// A stored component's size in bytes, by digest.
    pub fn component_len(&self, digest: &str) -> Option<u64> {
        let name = Self::component_name(digest)?;
        let dir = self.inner.root.open_dir("components").ok()?;
        dir.metadata(name).ok().map(|m| m.len())
    }

    /// A stored component's bytes, by digest.
    pub fn component(&self, digest: &str) -> Option<Vec<u8>> {
        let name = Self::component_name(digest)?;
        self.inner.root.open_dir("components").ok()?.read(name).ok()
    }
}

impl Home {
    /// Keep a bulk update's report (`updates/<id>.json`), replaced as the
    /// update goes on.
    pub fn put_update_report(&self, id: uuid::Uuid, bytes: &[u8]) -> Result<(), WorkerError> {
        let dir = fsutil::ensure_dir(&self.inner.root, "updates")
            .map_err(io_err("cannot open updates/"))?;
        fsutil::write_document(&dir, &format!("{id}.json"), bytes)
            .map_err(io_err(format!("cannot write updates/{id}.json")))
    }

    /// A bulk update's report, if this home keeps it.
    pub fn update_report(&self, id: uuid::Uuid) -> Option<Vec<u8>> {
        self.inner
            .root
            .open_dir("updates")
            .ok()?
            .read(format!("{id}.json"))
            .ok()
    }
}
