//! The runtime's use of the run index ([`crate::store::RunIndex`]): on the
//! embedded store it is built once from the journals (the first lookup
//! after open; corrupt sessions are skipped), then kept current at every
//! start and terminal write, so a lookup or a page of runs reads no
//! journal. A shared store's appends keep its index themselves.

use super::state::runs_of;
use super::{Runtime, RuntimeError};
use crate::ids::{RunId, SessionId};
use crate::journal::event::RunFacts;
use crate::store::RunIndex;

impl Runtime {
    /// The run index, built from the journals on first use.
    pub(crate) async fn run_index(&self) -> Result<&dyn RunIndex, RuntimeError> {
        let index = &*self.inner.run_index;
        if index.kept_by_appends() {
            return Ok(index);
        }
        self.inner
            .run_index_built
            .get_or_try_init(|| async {
                for id in self.inner.workers.list_workers()? {
                    let entry = self.inner.workers.worker_entry(id);
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
        for (run, _, terminal) in runs_of(&events) {
            self.index_started(run, session, workspace).await;
            if let Some(facts) = terminal.and_then(|t| t.facts) {
                self.index_ended(&facts).await;
            }
        }
    }

    /// Index a run that started (or is restored) here, unless the store's
    /// appends did. The index is a cache of the journals: a failure to
    /// update it is told, never the run's failure.
    pub(crate) async fn index_started(&self, run: RunId, session: &SessionId, workspace: &str) {
        let index = &self.inner.run_index;
        if !index.kept_by_appends()
            && let Err(e) = index.started(run, session, workspace).await
        {
            eprintln!("cairn: run {run} of session {session}: not indexed: {e}");
        }
    }

    /// Index a run's end, unless the store's appends did.
    pub(crate) async fn index_ended(&self, facts: &RunFacts) {
        let index = &self.inner.run_index;
        if !index.kept_by_appends()
            && let Err(e) = index.ended(facts).await
        {
            eprintln!("cairn: run {}: its end not indexed: {e}", facts.run_id);
        }
    }
}
