//! Bulk component updates (`cairn update --from A --to B`, `POST
//! /v1/components/{digest}/update`): every session bound to A is
//! shadow-replayed against B, several at once (one per core), and reported
//! `compatible`, `diverges`, `failed` or `pending` (a live run: checked and
//! taken at its next run's start); without `dry_run` exactly the
//! compatible ones switch (each as a single `update`: its journal entry
//! first, so a crash leaves every session on A or on B, `worker.json`
//! following the journal at the next open). The report is kept
//! (`GET /v1/updates/{id}`), rewritten after each session, so an operator
//! can come back to an update cut short.

use super::{ComponentRef, Runtime, RuntimeError};
use crate::SessionId;
use crate::journal::event::UpdateMode;
use serde::{Deserialize, Serialize};

/// What a bulk update did to one session.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionUpdate {
    /// The session.
    pub session_id: SessionId,
    /// `compatible` (every ended run replays against the new component),
    /// `diverges` (one does not: `message` names the first divergence) or
    /// `failed` (it could not be checked: `message` says why).
    pub outcome: SessionUpdateOutcome,
    /// Ended runs shadow-replayed.
    pub checked_runs: usize,
    /// Whether it moved to the new component.
    pub switched: bool,
    /// The divergence or the failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A session's verdict in a bulk update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionUpdateOutcome {
    /// Every ended run replays against the new component.
    Compatible,
    /// A run does not.
    Diverges,
    /// It could not be checked (an unreadable journal, a missing component).
    Failed,
    /// A run was live: the update waits for its next run's start, and is
    /// checked then (`pending_update` on the session).
    Pending,
}

/// A bulk update's report.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BulkUpdate {
    /// Its id (`GET /v1/updates/{id}`).
    pub update_id: uuid::Uuid,
    /// The digest the sessions were bound to.
    pub from: String,
    /// The digest asked for.
    pub to: String,
    /// The workspace whose sessions it took (none: every workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Checked only: nothing switched.
    pub dry_run: bool,
    /// Sessions bound to `from` when it began.
    pub total: usize,
    /// Whether every session was checked (false while it goes on, or when
    /// it was cut short).
    pub done: bool,
    /// Counts of the outcomes so far.
    pub compatible: usize,
    /// See [`SessionUpdateOutcome::Diverges`].
    pub diverges: usize,
    /// See [`SessionUpdateOutcome::Failed`].
    pub failed: usize,
    /// See [`SessionUpdateOutcome::Pending`].
    #[serde(default)]
    pub pending: usize,
    /// Sessions switched to `to`.
    pub switched: usize,
    /// Each session checked so far.
    pub sessions: Vec<SessionUpdate>,
    /// When it began and (once done) ended, ms since the epoch.
    pub started_ms: u64,
    /// See `started_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
}

impl BulkUpdate {
    fn push(&mut self, s: SessionUpdate) {
        match s.outcome {
            SessionUpdateOutcome::Compatible => self.compatible += 1,
            SessionUpdateOutcome::Diverges => self.diverges += 1,
            SessionUpdateOutcome::Failed => self.failed += 1,
            SessionUpdateOutcome::Pending => self.pending += 1,
        }
        self.switched += usize::from(s.switched);
        self.sessions.push(s);
    }
}

impl Runtime {
    /// Move every session bound to `from` (of `workspace`, or all) to `to`
    /// where shadow replay finds it compatible; `progress(checked, total)`
    /// after each session.
    pub async fn update_all(
        &self,
        from: &ComponentRef,
        to: &ComponentRef,
        workspace: Option<&str>,
        dry_run: bool,
        progress: &(dyn Fn(usize, usize) + Sync),
    ) -> Result<BulkUpdate, RuntimeError> {
        if self.inner.cluster.is_some() {
            return Err(RuntimeError::InvalidRequest(
                "component updates are not available on a shared store yet".into(),
            ));
        }
        let from = self.resolve(from).await?.0.digest().to_string();
        let (prepared, bytes) = self.resolve(to).await?;
        let to = prepared.digest().to_string();
        if let Some(bytes) = &bytes {
            self.inner.bytes.put_component(&to, bytes)?;
        }
        let mut sessions = Vec::new();
        for session in self.list_sessions().await? {
            let Ok(worker) = self.open_worker_of(&session) else {
                continue;
            };
            let Ok(record) = worker.record() else {
                continue;
            };
            if record.component.as_deref() == Some(from.as_str())
                && workspace.is_none_or(|w| record.workspace == w)
            {
                sessions.push(session);
            }
        }
        let mut report = BulkUpdate {
            update_id: uuid::Uuid::now_v7(),
            from,
            to: to.clone(),
            workspace: workspace.map(str::to_string),
            dry_run,
            total: sessions.len(),
            done: false,
            compatible: 0,
            diverges: 0,
            failed: 0,
            pending: 0,
            switched: 0,
            sessions: Vec::new(),
            started_ms: crate::fsutil::now_ms(),
            ended_ms: None,
        };
        self.keep_report(&report)?;
        let target = ComponentRef::Digest(to);
        use futures_util::StreamExt;
        let mut checks = futures_util::stream::iter(sessions)
            .map(|session| {
                let target = &target;
                async move { self.update_one(session, target, dry_run).await }
            })
            .buffer_unordered(crate::store::file::cores());
        while let Some(one) = checks.next().await {
            report.push(one);
            progress(report.sessions.len(), report.total);
            self.keep_report(&report)?;
        }
        report.done = true;
        report.ended_ms = Some(crate::fsutil::now_ms());
        self.keep_report(&report)?;
        Ok(report)
    }

    async fn update_one(
        &self,
        session: SessionId,
        to: &ComponentRef,
        dry_run: bool,
    ) -> SessionUpdate {
        match self.update(&session, to, UpdateMode::Replay, dry_run).await {
            Ok(r) if r.pending => SessionUpdate {
                session_id: session,
                outcome: SessionUpdateOutcome::Pending,
                checked_runs: 0,
                switched: false,
                message: Some(
                    "a run is live: the update is checked and taken at its next run's start".into(),
                ),
            },
            Ok(r) => SessionUpdate {
                session_id: session,
                outcome: SessionUpdateOutcome::Compatible,
                checked_runs: r.runs.len(),
                switched: r.switched,
                message: None,
            },
            Err(RuntimeError::UpdateDiverged { message, .. }) => SessionUpdate {
                session_id: session,
                outcome: SessionUpdateOutcome::Diverges,
                checked_runs: 0,
                switched: false,
                message: Some(message),
            },
            Err(e) => SessionUpdate {
                session_id: session,
                outcome: SessionUpdateOutcome::Failed,
                checked_runs: 0,
                switched: false,
                message: Some(self.strip_home(&e.to_string())),
            },
        }
    }

    fn keep_report(&self, report: &BulkUpdate) -> Result<(), RuntimeError> {
        let bytes = serde_json::to_vec_pretty(report).map_err(|e| {
            RuntimeError::InvalidRequest(format!("cannot encode the update's report: {e}"))
        })?;
        self.inner
            .bytes
            .put_update_report(report.update_id, &bytes)?;
        Ok(())
    }

    /// A bulk update's report, by id.
    pub fn update_report(&self, id: uuid::Uuid) -> Option<BulkUpdate> {
        let bytes = self.inner.bytes.update_report(id)?;
        serde_json::from_slice(&bytes).ok()
    }
}
