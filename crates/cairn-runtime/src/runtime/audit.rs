//! What the orchestration layer (the work queue, the doctor) asks of the
//! home, as runtime calls: it never opens the home's layout itself.

use super::{Runtime, RuntimeError};
use crate::ids::{SessionId, WorkerId};
use crate::worker::WorkerRecord;

/// One worker as the doctor sees it.
#[derive(Debug, Clone)]
pub struct WorkerAudit {
    /// The worker.
    pub id: WorkerId,
    /// Its record, or why it cannot be read.
    pub record: Result<WorkerRecord, String>,
    /// For a child: whether its parent lists it among its children.
    pub listed_by_parent: Option<bool>,
    /// Whether its component is stored in this home (absent: none bound).
    pub component_stored: Option<bool>,
}

impl Runtime {
    /// Every worker of the home, with what a health check needs of it.
    pub fn audit_workers(&self) -> Vec<WorkerAudit> {
        let home = &self.inner.home;
        let mut out = Vec::new();
        for id in home.list_workers().unwrap_or_default() {
            let Ok(worker) = home.open_worker(id) else {
                continue;
            };
            let record = worker.record().map_err(|e| e.to_string());
            let (listed_by_parent, component_stored) = match &record {
                Ok(r) => (
                    r.parent.as_ref().map(|parent| {
                        home.open_worker(parent.worker_id)
                            .and_then(|p| p.metadata())
                            .is_ok_and(|m| m.children.iter().any(|c| c.worker_id == id))
                    }),
                    r.component.as_ref().map(|c| {
                        cairn_examples::names()
                            .into_iter()
                            .any(|n| cairn_examples::built_in_digest(n) == Some(c.as_str()))
                            || home.component_len(c).is_some()
                    }),
                ),
                Err(_) => (None, None),
            };
            out.push(WorkerAudit {
                id,
                record,
                listed_by_parent,
                component_stored,
            });
        }
        out
    }

    /// The holder a lock file names when no live process holds it (a
    /// crashed owner's record), if any.
    pub fn stale_lock(&self) -> Option<crate::home_lock::Holder> {
        crate::home_lock::read_record(self.inner.home.path())
    }

    /// The home, for people (an operator's report).
    pub fn home_label(&self) -> String {
        self.inner.home.path().display().to_string()
    }

    /// The worker that holds `session` in this home, if any.
    pub fn session_worker(&self, session: &SessionId) -> Result<Option<WorkerId>, RuntimeError> {
        Ok(self.inner.home.lookup(session)?)
    }

    /// The worktree identity a worker's owner wrote (`(key, identity)`),
    /// if its worktree still carries one.
    pub fn worktree_identity(
        &self,
        worker: WorkerId,
    ) -> Result<Option<(String, String)>, RuntimeError> {
        Ok(self.inner.home.open_worker(worker)?.worktree_identity())
    }

    /// Every worker whose worktree is marked as some key's (the work
    /// queue's `worker:<card>:r<round>`), oldest first: the worker, its
    /// session, the key and the worktree identity.
    pub fn worktree_marks(&self) -> Vec<(WorkerId, SessionId, String, String)> {
        let mut out = Vec::new();
        for id in self.inner.workers.list_workers().unwrap_or_default() {
            let Some(session) = self.inner.workers.worker_entry(id).session_id else {
                continue;
            };
            if let Ok(Some((key, identity))) = self.worktree_identity(id) {
                out.push((id, session, key, identity));
            }
        }
        out
    }

    /// Mark a worker's worktree as `key`'s, with a fresh `identity`.
    pub fn set_worktree_identity(
        &self,
        worker: WorkerId,
        key: &str,
        identity: &str,
    ) -> Result<(), RuntimeError> {
        Ok(self
            .inner
            .home
            .open_worker(worker)?
            .set_worktree_identity(key, identity)?)
    }

    /// The directory an orchestration layer keeps its own state under
    /// (the work queue's `queue/`), as a handle.
    pub fn state_root(&self) -> &cap_std::fs::Dir {
        self.inner.home.root()
    }
}
