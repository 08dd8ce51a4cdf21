//! Opaque bytes by key: component bytes, park checkpoints, worktree
//! snapshots. A key is `namespace/name`, each part of `[A-Za-z0-9._-]`, never
//! `.` or `..` — it addresses nothing outside the store, whatever stores it.

use super::StoreError;
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The longest key accepted.
pub const MAX_KEY: usize = 200;

/// Check a blob key; the error names what is wrong.
pub fn check_key(key: &str) -> Result<(), StoreError> {
    let refuse = |why: &str| {
        Err(StoreError::Io {
            context: format!("blob key {key:?}"),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string()),
        })
    };
    if key.is_empty() || key.len() > MAX_KEY {
        return refuse("a key is 1 to 200 bytes");
    }
    let parts: Vec<&str> = key.split('/').collect();
    if parts.len() != 2 {
        return refuse("a key is namespace/name");
    }
    for part in parts {
        if part.is_empty() || part.starts_with('.') {
            return refuse("a key's parts are not empty and do not start with `.`");
        }
        if !part
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return refuse("a key's parts are made of A-Z a-z 0-9 . _ -");
        }
    }
    Ok(())
}

/// Bytes by key.
#[async_trait]
pub trait BlobStore: Send + Sync + 'static {
    /// Keep `bytes` under `key`, replacing what was there; durable when it
    /// returns.
    async fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError>;

    /// The bytes under `key` (`None`: nothing is).
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// Remove `key` (nothing there is not an error).
    async fn delete(&self, key: &str) -> Result<(), StoreError>;

    /// The keys in `namespace`, sorted.
    async fn keys(&self, namespace: &str) -> Result<Vec<String>, StoreError>;
}

/// Blobs in memory.
#[derive(Default)]
pub struct MemoryBlobs {
    blobs: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl MemoryBlobs {
    fn blobs(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        self.blobs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl BlobStore for MemoryBlobs {
    async fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        check_key(key)?;
        self.blobs().insert(key.to_string(), bytes.to_vec());
        Ok(())
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        check_key(key)?;
        Ok(self.blobs().get(key).cloned())
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        check_key(key)?;
        self.blobs().remove(key);
        Ok(())
    }

    async fn keys(&self, namespace: &str) -> Result<Vec<String>, StoreError> {
        check_key(&format!("{namespace}/x"))?;
        let prefix = format!("{namespace}/");
        Ok(self
            .blobs()
            .keys()
            .filter(|k| k.starts_with(&prefix))
            .cloned()
            .collect())
    }
}
