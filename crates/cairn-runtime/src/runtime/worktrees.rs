//! A session's worktree snapshots, served to the viewer (what it lays out
//! to replay a run in the browser; see `worker/snapshots.rs`).

use super::{Runtime, RuntimeError};
use crate::ids::SessionId;

impl Runtime {
    /// The snapshot `digest` of `session`, packed (`worktree::pack`'s
    /// form); `None` when the session holds no such snapshot.
    pub async fn worktree_snapshot(
        &self,
        session: &SessionId,
        digest: &str,
    ) -> Result<Option<Vec<u8>>, RuntimeError> {
        let ok = digest
            .strip_prefix("sha256:")
            .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
        if !ok {
            return Err(RuntimeError::InvalidRequest(format!(
                "{digest:?} is not a worktree snapshot's digest (sha256:<64 hex>)"
            )));
        }
        let worker = self.open_worker_of(session)?;
        let budget = crate::worktree::Budget::of(&self.inner.config.host.limits);
        let digest = digest.to_string();
        tokio::task::spawn_blocking(move || worker.pack_worktree(&digest, &budget))
            .await
            .map_err(|e| RuntimeError::Storage(e.to_string()))?
            .map_err(|e| RuntimeError::Storage(format!("session {session}: {e}")))
    }
}

/// A snapshot blob's key in a shared store's blob store.
fn blob_key(hex: &str) -> String {
    format!("worktrees/{hex}")
}

impl Runtime {
    /// On a shared store, keep snapshot `digest` of `worker` in the store's
    /// blob store too (`worktrees/<hex>`, each blob once), so a replay at
    /// any instance can lay it out. Nothing on a store of its own.
    pub(crate) async fn share_snapshot(&self, worker: crate::ids::WorkerId, digest: &str) {
        let Some(cluster) = &self.inner.cluster else {
            return;
        };
        let blobs = self
            .inner
            .workers
            .open_worker_any(worker)
            .map_err(|e| e.to_string())
            .and_then(|w| w.snapshot_blobs(digest).map_err(|e| e.to_string()));
        let blobs = match blobs {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(worker_id = %worker, "worktree snapshot {digest} is not shared: {e}");
                return;
            }
        };
        for (hex, bytes) in blobs {
            let key = blob_key(&hex);
            match crate::store::BlobStore::get(&*cluster.shared, &key).await {
                Ok(Some(_)) => continue,
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(worker_id = %worker, "worktree snapshot {digest} is not shared: {e}");
                    return;
                }
            }
            if let Err(e) = crate::store::BlobStore::put(&*cluster.shared, &key, &bytes).await {
                tracing::warn!(worker_id = %worker, "worktree snapshot {digest} is not shared: {e}");
                return;
            }
        }
    }

    /// Bring the snapshots `digests` that `worker`'s copy here lacks from a
    /// shared store's blob store (a run recorded at another instance).
    pub(crate) async fn fetch_snapshots(
        &self,
        worker: &crate::worker::WorkerDir,
        digests: &[String],
    ) {
        let Some(cluster) = &self.inner.cluster else {
            return;
        };
        for digest in digests.iter().filter(|d| !worker.has_snapshot(d)) {
            let hex = digest.strip_prefix("sha256:").unwrap_or_default();
            let fetched: Result<(), String> = async {
                let get = |hex: String| async move {
                    crate::store::BlobStore::get(&*cluster.shared, &blob_key(&hex))
                        .await
                        .map_err(|e| e.to_string())?
                        .ok_or_else(|| format!("the shared store holds no blob {hex}"))
                };
                let manifest = get(hex.to_string()).await?;
                for file in crate::worker::WorkerDir::manifest_blobs(&manifest)
                    .map_err(|e| e.to_string())?
                {
                    let bytes = get(file.clone()).await?;
                    worker
                        .keep_snapshot_blob(&file, &bytes)
                        .map_err(|e| e.to_string())?;
                }
                // The manifest last: held means whole.
                worker
                    .keep_snapshot_blob(hex, &manifest)
                    .map_err(|e| e.to_string())
            }
            .await;
            if let Err(e) = fetched {
                tracing::warn!(worker_id = %worker.id(), "worktree snapshot {digest} cannot be brought here: {e}");
            }
        }
    }
}
