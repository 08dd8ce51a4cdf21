//! The run index: run id → its session, workspace and (once ended) facts.
//! Built once from the journals (the first lookup after open; corrupt
//! sessions are skipped), then kept current at every start and terminal
//! write, so a lookup or a page of runs reads no journal.

use super::state::runs_of;
use super::{Runtime, RuntimeError};
use crate::ids::{RunId, SessionId};
use crate::journal::event::RunFacts;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// What the index knows of one run.
#[derive(Debug, Clone)]
pub(crate) struct IndexedRun {
    pub session: SessionId,
    pub workspace: String,
    pub facts: Option<RunFacts>,
}

#[derive(Default)]
pub(crate) struct RunIndex {
    built: tokio::sync::OnceCell<()>,
    runs: Mutex<BTreeMap<RunId, IndexedRun>>,
}

impl RunIndex {
    fn runs(&self) -> std::sync::MutexGuard<'_, BTreeMap<RunId, IndexedRun>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A run started (or was restored) in `session`.
    pub fn started(&self, run: RunId, session: &SessionId, workspace: &str) {
        self.runs().entry(run).or_insert_with(|| IndexedRun {
            session: session.clone(),
            workspace: workspace.to_string(),
            facts: None,
        });
    }

    /// A run's terminal entry is durable.
    pub fn ended(&self, facts: &RunFacts) {
        if let Some(r) = self.runs().get_mut(&facts.run_id) {
            r.facts = Some(facts.clone());
        }
    }

    /// A session is gone.
    pub fn forget_session(&self, session: &SessionId) {
        self.runs().retain(|_, r| r.session != *session);
    }

    /// One run.
    pub fn get(&self, run: RunId) -> Option<IndexedRun> {
        self.runs().get(&run).cloned()
    }

    /// Runs of `workspace` (`None`: all), newest first, older than
    /// `before`, at most `limit`; and whether more remain.
    pub fn page(
        &self,
        workspace: Option<&str>,
        before: Option<RunId>,
        limit: usize,
    ) -> (Vec<(RunId, IndexedRun)>, bool) {
        let runs = self.runs();
        let mut out = Vec::new();
        let range = match before {
            Some(b) => runs.range(..b),
            None => runs.range(..),
        };
        for (id, r) in range.rev() {
            if workspace.is_some_and(|ws| ws != r.workspace) {
                continue;
            }
            if out.len() == limit {
                return (out, true);
            }
            out.push((*id, r.clone()));
        }
        (out, false)
    }
}

impl Runtime {
    /// The run index, built from the journals on first use.
    pub(crate) async fn run_index(&self) -> Result<&RunIndex, RuntimeError> {
        let index = &self.inner.run_index;
        index
            .built
            .get_or_try_init(|| async {
                for id in self.inner.home.list_workers()? {
                    let entry = self.inner.home.worker_entry(id);
                    let (Some(session), None, Some(ws)) =
                        (entry.session_id, entry.problem, entry.workspace)
                    else {
                        continue;
                    };
                    self.index_session(&session, &ws).await;
                }
                Ok::<_, RuntimeError>(())
            })
            .await?;
        Ok(index)
    }

    /// Put every run of one session's journal in the index (a session that
    /// cannot be read is left out: it is listed as corrupt instead).
    pub(crate) async fn index_session(&self, session: &SessionId, workspace: &str) {
        let Ok(events) = self.events_of(session).await else {
            return;
        };
        let index = &self.inner.run_index;
        for (run, _, terminal) in runs_of(&events) {
            index.started(run, session, workspace);
            if let Some(facts) = terminal.and_then(|t| t.facts) {
                index.ended(&facts);
            }
        }
    }
}
