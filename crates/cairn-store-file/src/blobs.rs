//! Blobs in a directory: the file store's `blobs/`.

use async_trait::async_trait;
use cairn_store::StoreError;
use cairn_store::blob::{BlobStore, check_key};
use cap_std::fs::Dir;
use std::io::Read;

/// Blobs in a directory (the file store's `blobs/`): one directory per
/// namespace, one file per name, written whole (temp file, fsync, rename,
/// directory fsync) so a crash leaves the old bytes or the new ones.
pub struct DirBlobs {
    dir: Dir,
}

impl DirBlobs {
    /// Blobs kept in `dir`.
    pub fn new(dir: Dir) -> Self {
        DirBlobs { dir }
    }

    fn io(key: &str, what: &str) -> impl FnOnce(std::io::Error) -> StoreError {
        let context = format!("blob {key}: {what}");
        move |source| StoreError::Io { context, source }
    }

    fn split(key: &str) -> (&str, &str) {
        key.split_once('/').expect("a checked key has one /")
    }
}

#[async_trait]
impl BlobStore for DirBlobs {
    async fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        check_key(key)?;
        let (ns, name) = Self::split(key);
        let new = !self.dir.exists(ns);
        let dir = crate::fsutil::ensure_dir(&self.dir, ns).map_err(Self::io(key, "namespace"))?;
        if new {
            crate::fsutil::sync_dir(&self.dir).map_err(Self::io(key, "namespace"))?;
        }
        crate::fsutil::write_document(&dir, name, bytes).map_err(Self::io(key, "write"))?;
        Ok(())
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        check_key(key)?;
        let (ns, name) = Self::split(key);
        let file = match self.dir.open(format!("{ns}/{name}")) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Self::io(key, "open")(e)),
        };
        let mut bytes = Vec::new();
        file.into_std()
            .read_to_end(&mut bytes)
            .map_err(Self::io(key, "read"))?;
        Ok(Some(bytes))
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        check_key(key)?;
        let (ns, name) = Self::split(key);
        match self.dir.remove_file(format!("{ns}/{name}")) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Self::io(key, "remove")(e)),
        }
    }

    async fn keys(&self, namespace: &str) -> Result<Vec<String>, StoreError> {
        check_key(&format!("{namespace}/x"))?;
        let dir = match self.dir.open_dir(namespace) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Self::io(namespace, "open")(e)),
        };
        let mut keys = Vec::new();
        for entry in dir.entries().map_err(Self::io(namespace, "list"))? {
            let entry = entry.map_err(Self::io(namespace, "list"))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // Temp files of an interrupted write are not blobs.
            if check_key(&format!("{namespace}/{name}")).is_ok() {
                keys.push(format!("{namespace}/{name}"));
            }
        }
        keys.sort();
        Ok(keys)
    }
}
