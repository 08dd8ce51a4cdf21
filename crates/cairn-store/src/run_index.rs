//! The run index: run id → its session, workspace and (once ended) facts,
//! so a lookup or a page of runs reads no journal.
//!
//! On the embedded store the index is in memory ([`MemoryRunIndex`]): the
//! runtime builds it from the journals on first use and keeps it current at
//! every start and terminal write. On a shared store it is rows every
//! instance reads (cairn-store-postgres's `PgStore`): the append of a run's
//! `started` entry indexes it in the same statement, and its end writes its
//! facts in the same transaction as its terminal entry, so a page of runs
//! at any instance lists the runs of every instance.

use super::StoreError;
use async_trait::async_trait;
use cairn_types::event::RunFacts;
use cairn_types::ids::{RunId, Seq, SessionId};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// What the index knows of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexedRun {
    /// The session it belongs to.
    pub session: SessionId,
    /// That session's workspace.
    pub workspace: String,
    /// How it ended (`None`: not ended, or interrupted).
    pub facts: Option<RunFacts>,
    /// No entry of the run is at or before this seq: a read of the run
    /// starts here, not at the journal's start (`None`: not known, as for
    /// runs a shared store indexed before it recorded this).
    pub after: Option<Seq>,
}

/// A page of runs, newest first, and whether older ones remain.
pub type RunPage = (Vec<(RunId, IndexedRun)>, bool);

/// The run index.
#[async_trait]
pub trait RunIndex: Send + Sync + 'static {
    /// A run started (or was restored) in `session` of `workspace`, its
    /// entries after `after`. Indexing a run already there changes nothing.
    async fn started(
        &self,
        run: RunId,
        session: &SessionId,
        workspace: &str,
        after: Seq,
    ) -> Result<(), StoreError>;

    /// A run's terminal entry is durable: its facts.
    async fn ended(&self, facts: &RunFacts) -> Result<(), StoreError>;

    /// A session is gone: its runs leave the index.
    async fn forget_session(&self, session: &SessionId) -> Result<(), StoreError>;

    /// One run.
    async fn get(&self, run: RunId) -> Result<Option<IndexedRun>, StoreError>;

    /// Whether the journal store's appends keep this index (a `started`
    /// entry indexes its run, a terminal entry writes its facts, in the
    /// same transaction): then the runtime does not call [`Self::started`]
    /// and [`Self::ended`] itself.
    fn kept_by_appends(&self) -> bool {
        false
    }

    /// Whether it holds every run the journals hold without being built
    /// from them (it was loaded from what the previous owner kept): then
    /// the runtime reads no journal to answer its first lookup.
    fn is_whole(&self) -> bool {
        false
    }

    /// The runtime has just filled it from every journal: an index that
    /// keeps itself across restarts writes out what it holds now.
    async fn built(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Runs of `workspace` (`None`: all), newest first (by id, a UUIDv7),
    /// older than `before`, at most `limit`; and whether more remain.
    async fn page(
        &self,
        workspace: Option<&str>,
        before: Option<RunId>,
        limit: usize,
    ) -> Result<RunPage, StoreError>;
}

/// The embedded store's index: a map in memory.
#[derive(Default)]
pub struct MemoryRunIndex {
    runs: Mutex<BTreeMap<RunId, IndexedRun>>,
}

impl std::fmt::Debug for MemoryRunIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRunIndex")
            .field("runs", &self.runs().len())
            .finish()
    }
}

impl MemoryRunIndex {
    /// Every run it holds, oldest first.
    pub fn all(&self) -> Vec<(RunId, IndexedRun)> {
        self.runs().iter().map(|(id, r)| (*id, r.clone())).collect()
    }

    /// [`RunIndex::started`], without waiting: whether the run is new.
    pub fn record_started(
        &self,
        run: RunId,
        session: &SessionId,
        workspace: &str,
        after: Option<Seq>,
    ) -> bool {
        let mut runs = self.runs();
        if runs.contains_key(&run) {
            return false;
        }
        runs.insert(
            run,
            IndexedRun {
                session: session.clone(),
                workspace: workspace.to_string(),
                facts: None,
                after,
            },
        );
        true
    }

    /// [`RunIndex::ended`], without waiting.
    pub fn record_ended(&self, facts: &RunFacts) {
        if let Some(r) = self.runs().get_mut(&facts.run_id) {
            r.facts = Some(facts.clone());
        }
    }

    /// [`RunIndex::forget_session`], without waiting.
    pub fn record_forgotten(&self, session: &SessionId) {
        self.runs().retain(|_, r| r.session != *session);
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, BTreeMap<RunId, IndexedRun>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl RunIndex for MemoryRunIndex {
    async fn started(
        &self,
        run: RunId,
        session: &SessionId,
        workspace: &str,
        after: Seq,
    ) -> Result<(), StoreError> {
        self.record_started(run, session, workspace, Some(after));
        Ok(())
    }

    async fn ended(&self, facts: &RunFacts) -> Result<(), StoreError> {
        self.record_ended(facts);
        Ok(())
    }

    async fn forget_session(&self, session: &SessionId) -> Result<(), StoreError> {
        self.record_forgotten(session);
        Ok(())
    }

    async fn get(&self, run: RunId) -> Result<Option<IndexedRun>, StoreError> {
        Ok(self.runs().get(&run).cloned())
    }

    async fn page(
        &self,
        workspace: Option<&str>,
        before: Option<RunId>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
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
                return Ok((out, true));
            }
            out.push((*id, r.clone()));
        }
        Ok((out, false))
    }
}
