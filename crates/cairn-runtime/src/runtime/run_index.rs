//! The runtime's use of the run index ([`crate::store::RunIndex`]): on the
//! embedded store it is loaded from the log the previous owner kept when
//! that log is whole, otherwise built once from the journals (the first
//! lookup after open; corrupt sessions are skipped) and written out; it is
//! kept current at every start and terminal write, so a lookup or a page
//! of runs reads no journal. A shared store's appends keep its index
//! themselves.

use super::state::runs_of;
use super::{Runtime, RuntimeError};
use crate::ids::{RunId, Seq, SessionId};
use crate::journal::event::RunFacts;
use crate::store::{JournalItem, RunIndex, StoreError};

/// Bytes (as journaled) one page of [`Runtime::scan`] reads at most (an
/// entry larger than this is read alone).
pub const SCAN_PAGE_BYTES: u64 = 4 << 20;
/// Entries one page of [`Runtime::scan`] reads at most.
const SCAN_PAGE_ENTRIES: usize = 4096;

impl Runtime {
    /// Where a run's entries begin: the seq before its first, as the run
    /// index has it (0 when it does not know).
    pub async fn run_after(&self, run: RunId) -> Seq {
        let Ok(index) = self.run_index().await else {
            return Seq(0);
        };
        match index.get(run).await {
            Ok(Some(r)) => r.after.unwrap_or(Seq(0)),
            _ => Seq(0),
        }
    }

    /// Page through a session's entries after `after`, a page of at most
    /// 4 MiB at a time, handing each entry to `each` until it
    /// answers `false`: what answers one run or task holds one page, never
    /// the whole journal. Only what this process has published is read
    /// ([`crate::journal::SessionJournal::published_head`]): a run's end a
    /// write here has in the store but not yet published is not there yet.
    pub async fn scan(
        &self,
        session: &SessionId,
        after: Seq,
        mut each: impl FnMut(JournalItem) -> bool,
    ) -> Result<(), RuntimeError> {
        let mut after = after;
        loop {
            let page = match self
                .inner
                .store
                .read_bytes(session, after, SCAN_PAGE_ENTRIES, SCAN_PAGE_BYTES)
                .await
            {
                Err(StoreError::UnknownSession(s)) => return Err(RuntimeError::UnknownSession(s)),
                Err(e) => {
                    return Err(self.home_relative(RuntimeError::from(e).for_session(session)));
                }
                Ok(page) => page,
            };
            let Some(last) = page.last() else {
                return Ok(());
            };
            after = last.seq();
            // Entries a write here has not published yet are not there
            // yet: asked after the read, so none slips past.
            let published = self
                .inner
                .journals
                .opened(session)
                .and_then(|j| j.published_head());
            for item in page {
                if published.is_some_and(|head| item.seq() > head) || !each(item) {
                    return Ok(());
                }
            }
        }
    }

    /// The run index, built from the journals on first use.
    pub(crate) async fn run_index(&self) -> Result<&dyn RunIndex, RuntimeError> {
        let index = &*self.inner.run_index;
        if index.kept_by_appends() || index.is_whole() {
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
                if let Err(e) = index.built().await {
                    tracing::warn!("the run index is not kept for the next start: {e}");
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
            self.index_started(run, session, workspace, after_of(&events, run))
                .await;
            if let Some(facts) = terminal.and_then(|t| t.facts) {
                self.index_ended(&facts).await;
            }
        }
    }

    /// Index a run that started (or is restored) here, unless the store's
    /// appends did. The index is a cache of the journals: a failure to
    /// update it is told, never the run's failure.
    pub(crate) async fn index_started(
        &self,
        run: RunId,
        session: &SessionId,
        workspace: &str,
        after: Seq,
    ) {
        let index = &self.inner.run_index;
        if !index.kept_by_appends()
            && let Err(e) = index.started(run, session, workspace, after).await
        {
            tracing::warn!(run_id = %run, session_id = %session, "not indexed: {e}");
        }
    }

    /// Index a run's end, unless the store's appends did.
    pub(crate) async fn index_ended(&self, facts: &RunFacts) {
        let index = &self.inner.run_index;
        if !index.kept_by_appends()
            && let Err(e) = index.ended(facts).await
        {
            tracing::warn!("run {}: its end not indexed: {e}", facts.run_id);
        }
    }
}

/// The seq before a run's first entry in `events` (0 when it has none).
pub(crate) fn after_of(events: &[crate::SessionEvent], run: RunId) -> Seq {
    events
        .iter()
        .find(|e| e.run_id == Some(run))
        .map_or(Seq(0), |e| Seq(e.seq.0.saturating_sub(1)))
}
