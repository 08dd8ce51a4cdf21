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
