//! Listing sessions: one row per worker, filtered by workspace before any
//! journal is read, paginated by worker id, and a damaged session shown as
//! `corrupt` (with its reason) beside every healthy one — one bad session
//! never blinds a listing.

use super::state::{AgentState, ObserverCounts, SessionSummary};
use super::{Runtime, RuntimeError};
use crate::ids::{SegmentId, Seq, SessionId, WorkerId};
use crate::worker::WorkerEntry;

/// One page of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The rows.
    pub items: Vec<T>,
    /// Where the next page starts, when there is one.
    pub next_cursor: Option<String>,
}

/// The most rows a page holds.
pub const MAX_PAGE: usize = 1000;

impl Runtime {
    /// `text` with this home's host path left out (`workers/…` stays): what
    /// a tenant is told about its damaged session names no host layout.
    /// `text` with the home's path taken out: paths in it read relative to
    /// the home (what a client or a guest may be told).
    pub fn strip_home(&self, text: &str) -> String {
        let home = self.inner.workers.path().display().to_string();
        text.replace(&format!("{home}/"), "")
            .replace(&home, "<home>")
    }

    /// A `corrupt` error with its reason stripped of the host path.
    pub(crate) fn home_relative(&self, e: RuntimeError) -> RuntimeError {
        match e {
            RuntimeError::Corrupt { session, reason } => RuntimeError::Corrupt {
                reason: self.strip_home(&reason),
                session,
            },
            other => other,
        }
    }

    /// Every persisted session id in this home whose worker opens (corrupt
    /// ones are left out; [`Runtime::sessions_page`] shows them).
    pub async fn list_sessions(&self) -> Result<Vec<SessionId>, RuntimeError> {
        let mut out = Vec::new();
        for id in self.inner.workers.list_workers()? {
            let entry = self.inner.workers.worker_entry(id);
            if let (Some(s), None) = (entry.session_id, entry.problem) {
                out.push(s);
            }
        }
        Ok(out)
    }

    /// Whether a listing for `workspace` (`None`: every workspace) shows a
    /// worker. One whose workspace nothing names any more is shown only to
    /// the host's own default workspace and to the local CLI.
    fn shows(&self, entry: &WorkerEntry, workspace: Option<&str>) -> bool {
        match (workspace, &entry.workspace) {
            (None, _) => true,
            (Some(ws), Some(owner)) => ws == owner,
            (Some(ws), None) => ws == self.inner.config.workspace,
        }
    }

    /// A page of session summaries, oldest worker first: those of
    /// `workspace` (`None`: all), after the worker `cursor`, at most
    /// `limit`. A session whose files are damaged is a `corrupt` row.
    pub async fn sessions_page(
        &self,
        workspace: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<SessionSummary>, RuntimeError> {
        let after: Option<WorkerId> = parse_cursor(cursor)?;
        let limit = limit.clamp(1, MAX_PAGE);
        let mut items = Vec::new();
        let mut last = None;
        let mut more = false;
        for id in self.inner.workers.list_workers()? {
            if after.is_some_and(|a| id <= a) {
                continue;
            }
            let entry = self.inner.workers.worker_entry(id);
            if !self.shows(&entry, workspace) {
                continue;
            }
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(self.row(entry).await);
            last = Some(id);
        }
        Ok(Page {
            items,
            next_cursor: more.then(|| last.map(|l| l.to_string())).flatten(),
        })
    }

    /// A session's summary, or its `corrupt` row.
    async fn row(&self, entry: WorkerEntry) -> SessionSummary {
        let reason = match (&entry.session_id, &entry.problem) {
            (Some(session), None) => match self.summary(session).await {
                Ok(summary) => return summary,
                Err(e) => e.to_string(),
            },
            (_, Some(problem)) => self.strip_home(problem),
            (None, None) => "no document names its session".to_string(),
        };
        corrupt_row(entry, reason)
    }
}

/// A page cursor this host gave out (an id), or none.
pub(crate) fn parse_cursor<T: std::str::FromStr>(
    cursor: Option<&str>,
) -> Result<Option<T>, RuntimeError> {
    cursor
        .map(|c| {
            c.parse().map_err(|_| {
                RuntimeError::InvalidRequest(format!("cursor {c:?} is not one this host gave out"))
            })
        })
        .transpose()
}

/// The row of a session that cannot be read.
fn corrupt_row(entry: WorkerEntry, reason: String) -> SessionSummary {
    let session_id = entry
        .session_id
        .or_else(|| SessionId::parse(&entry.worker_id.to_string()).ok())
        .expect("a worker id is a valid session id");
    SessionSummary {
        session_id,
        worker_id: entry.worker_id,
        state: AgentState::Corrupt,
        observers: ObserverCounts {
            collecting: 0,
            claiming: 0,
            present: 0,
        },
        live_run: None,
        last_run: None,
        component: None,
        stale: false,
        last_seq: Seq(0),
        workspace: entry.workspace.unwrap_or_default(),
        active_segment: SegmentId::nil(),
        segments: vec![],
        forked_from: None,
        corrupt: Some(reason),
        children: vec![],
        peers: vec![],
        parent: None,
        pending_update: None,
    }
}
