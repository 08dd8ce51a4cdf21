//! A session's worktree snapshots at the runtime: served to the viewer
//! (what it lays out to replay a run in the browser), shared through a
//! shared store's blob store, and laid out by an offline replay (see
//! `worker/snapshots.rs`).

use super::{Runtime, RuntimeError};
use crate::SessionEvent;
use crate::ids::{RunId, SessionId};
use crate::journal::event::{LifecycleEvent, Payload};

impl Runtime {
    /// The snapshot `digest` of `session`, packed (`worktree::pack`'s
    /// form); `None` when the session holds no such snapshot.
    pub async fn worktree_snapshot(
        &self,
        session: &SessionId,
        digest: &str,
    ) -> Result<Option<Vec<u8>>, RuntimeError> {
        crate::worker::snapshot_blob(digest)
            .map_err(|e| RuntimeError::InvalidRequest(e.to_string()))?;
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
        let shared = &*cluster.shared;
        let shared: Result<(), String> = async {
            let hex = crate::worker::snapshot_blob(digest).map_err(|e| e.to_string())?;
            // Its manifest goes last: held there means whole (an unchanged
            // worktree costs one lookup).
            if crate::store::BlobStore::get(shared, &blob_key(hex))
                .await
                .map_err(|e| e.to_string())?
                .is_some()
            {
                return Ok(());
            }
            let mut blobs = self
                .inner
                .workers
                .open_worker_any(worker)
                .map_err(|e| e.to_string())?
                .snapshot_blobs(digest)
                .map_err(|e| e.to_string())?;
            blobs.rotate_left(1);
            for (hex, bytes) in blobs {
                crate::store::BlobStore::put(shared, &blob_key(&hex), &bytes)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        .await;
        if let Err(e) = shared {
            tracing::warn!(worker_id = %worker, "worktree snapshot {digest} is not shared: {e}");
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
            let fetched: Result<(), String> = async {
                let hex = crate::worker::snapshot_blob(digest).map_err(|e| e.to_string())?;
                let get = |hex: String| async move {
                    crate::store::BlobStore::get(&*cluster.shared, &blob_key(&hex))
                        .await
                        .map_err(|e| e.to_string())?
                        .ok_or_else(|| format!("the shared store holds no blob {hex}"))
                };
                let manifest = get(hex.to_string()).await?;
                for file in crate::worker::WorkerDir::manifest_blobs(digest, &manifest)
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

/// The snapshots `run`'s journal names: its starting worktree's, and each
/// scope a child returned.
pub(super) fn snapshots_of(events: &[SessionEvent], run: RunId) -> Vec<String> {
    let mut out = Vec::new();
    for e in events.iter().filter(|e| e.run_id == Some(run)) {
        let digest = match &e.payload {
            Payload::Lifecycle(LifecycleEvent::WorktreeRecorded { digest, .. }) => {
                Some(digest.clone())
            }
            Payload::Lifecycle(LifecycleEvent::HostCallFinished {
                response: Some(r), ..
            }) => r["snapshot"].as_str().map(str::to_string),
            _ => None,
        };
        if let Some(d) = digest.filter(|d| !out.contains(d)) {
            out.push(d);
        }
    }
    out
}

/// Lay out in `artifacts` the worktree `run` started from, when the
/// journal names one (`worktree_recorded`): its bytes. Why not, when it
/// cannot be.
pub(super) async fn lay_out_started(
    worker: &crate::worker::WorkerDir,
    events: &[SessionEvent],
    run: RunId,
    artifacts: &std::path::Path,
) -> Result<u64, String> {
    let Some(digest) = events.iter().find_map(|e| match &e.payload {
        Payload::Lifecycle(LifecycleEvent::WorktreeRecorded { digest, .. })
            if e.run_id == Some(run) =>
        {
            Some(digest.clone())
        }
        _ => None,
    }) else {
        return Ok(0);
    };
    let (worker, artifacts) = (
        worker.try_clone().map_err(|e| e.to_string())?,
        artifacts.to_path_buf(),
    );
    tokio::task::spawn_blocking(move || {
        let to = open_artifacts(&artifacts)?;
        worker.lay_out_worktree(&digest, &to)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("the worktree it started from cannot be laid out: {e}"))
}

/// Open a generation's `artifacts/` by its host path, making it when its
/// layout did not (a controller that can open no file gets none until the
/// host writes into it: a loaned scope, a restored worktree, moved loans).
pub(crate) fn open_artifacts(artifacts: &std::path::Path) -> std::io::Result<cap_std::fs::Dir> {
    let generation = artifacts.parent().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "an artifacts/ path names no generation directory",
        )
    })?;
    let generation = cap_std::fs::Dir::open_ambient_dir(generation, cap_std::ambient_authority())?;
    crate::fsutil::ensure_dir(&generation, "artifacts")
}
