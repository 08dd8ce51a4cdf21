//! Session ids are one namespace per workspace: `s-1` of one workspace and
//! `s-1` of another are two sessions, and neither workspace can learn the
//! other's exists (a create answers as for an unused id). Stores key a
//! session of a workspace other than the host's own with the workspace in
//! front ([`SessionId::in_workspace`]); sessions made before ids were
//! scoped keep their bare keys and are still found by their workspace.

use super::{Runtime, RuntimeError};
use crate::ids::SessionId;

impl Runtime {
    /// `name` as `workspace` keys it (no lookup).
    pub fn scoped(&self, name: &SessionId, workspace: &str) -> SessionId {
        name.in_workspace(workspace, &self.inner.config.workspace)
    }

    /// The ids `name` of `workspace` may be kept under: its scoped key, and
    /// for a workspace other than the host's own, the bare key of a session
    /// made before ids were scoped.
    fn keys_of(&self, name: &SessionId, workspace: &str) -> Vec<SessionId> {
        let scoped = self.scoped(name, workspace);
        if scoped.is_scoped() {
            let legacy = scoped.unscoped();
            vec![scoped, legacy]
        } else {
            vec![scoped]
        }
    }

    /// The session `name` of `workspace` (a draft included), as stores key
    /// it; `UnknownSession` (naming `name`) when the workspace holds none,
    /// whatever another workspace holds.
    pub fn resolve_session(
        &self,
        workspace: &str,
        name: &SessionId,
    ) -> Result<SessionId, RuntimeError> {
        for key in self.keys_of(name, workspace) {
            if let Some(owner) = self.draft_workspace(&key) {
                if owner == workspace {
                    return Ok(key);
                }
                continue;
            }
            match self.session_workspace(&key) {
                Ok(owner) if owner == workspace => return Ok(key),
                Ok(_)
                | Err(RuntimeError::UnknownSession(_))
                | Err(RuntimeError::Worker(crate::worker::WorkerError::NoSuchWorker(_))) => {}
                Err(e) => return Err(e),
            }
        }
        Err(RuntimeError::UnknownSession(name.unscoped()))
    }

    /// [`Runtime::resolve_session`] on a shared store, where the session may be
    /// held by another instance: the catalog answers. `None` when the
    /// workspace holds no such session (anywhere).
    pub async fn resolve_shared(&self, workspace: &str, name: &SessionId) -> Option<SessionId> {
        if let Ok(key) = self.resolve_session(workspace, name) {
            return Some(key);
        }
        let cluster = self.inner.cluster.as_ref()?;
        for key in self.keys_of(name, workspace) {
            if let Ok(Some(record)) = crate::store::Catalog::record(&*cluster.shared, &key).await
                && record.workspace == workspace
            {
                return Some(key);
            }
        }
        None
    }

    /// The key a new session `id` (or a minted one) of `workspace` gets;
    /// `SessionExists` (naming the name) when the workspace holds it
    /// already. Another workspace's session of that name is no obstacle.
    pub(crate) fn new_key(
        &self,
        id: Option<SessionId>,
        workspace: &str,
    ) -> Result<SessionId, RuntimeError> {
        // A fresh id names no session yet (the creation checks the index
        // once more before it writes its entry).
        let Some(name) = id else {
            return Ok(self.scoped(&SessionId::new(), workspace));
        };
        match self.resolve_session(workspace, &name) {
            Ok(_) => Err(RuntimeError::SessionExists(name.unscoped())),
            Err(RuntimeError::UnknownSession(_)) => Ok(self.scoped(&name, workspace)),
            Err(e) => Err(e),
        }
    }
}
