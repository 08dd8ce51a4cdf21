//! Component updates (`cairn update`, `POST /v1/sessions/{id}/update`): a
//! worker's binding moves to another component, recorded in the journal as
//! `component_updated`. In `replay` mode every ended run is first re-run
//! offline against the new component (a shadow replay, nothing written) and
//! the switch happens only when all match; `next_run` switches unchecked.
//! Each run keeps replaying with the component its `started` names, so old
//! runs replay as they ran either way. A live run is never switched: the
//! update waits, pending on the session, and is taken (checked as asked)
//! at the next run's start.

use super::replay::RunReplay;
use super::{ComponentRef, Runtime, RuntimeError};
use crate::SessionId;
use crate::journal::event::{LifecycleEvent, Payload, UpdateMode};
use serde::Serialize;

/// What an update did (or, with `dry_run`, would do).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct UpdateReport {
    /// The session.
    pub session_id: SessionId,
    /// The digest it was bound to.
    pub from: Option<String>,
    /// The digest asked for.
    pub to: String,
    /// How it was checked.
    pub mode: UpdateMode,
    /// Whether the binding moved (false on a dry run, or when nothing was
    /// to change).
    pub switched: bool,
    /// Each ended run's shadow replay (`replay` mode).
    pub runs: Vec<RunReplay>,
    /// The session had a live run: the update waits for its next run's
    /// start (`pending_update` on the session).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
    /// `snapshot` mode: the run the new component resumed from the parked
    /// run's checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<crate::ids::RunId>,
}

/// A component update waiting for a session's next run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct PendingUpdate {
    /// The digest asked for.
    pub to: String,
    /// How it is checked when taken.
    pub mode: UpdateMode,
    /// When it was asked, ms since the epoch.
    pub asked_ms: u64,
    /// Why it was not taken (a divergence found when the run ended), if
    /// it was not; it is not tried again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Runtime {
    /// Move `session`'s worker to `component` (see the module's notes).
    pub async fn update(
        &self,
        session: &SessionId,
        component: &ComponentRef,
        mode: UpdateMode,
        dry_run: bool,
    ) -> Result<UpdateReport, RuntimeError> {
        // On a shared store the instance holding the session updates it
        // (the HTTP seam forwards there); its catalog row follows.
        let worker = self.open_worker_of(session)?;
        let record = worker
            .record()
            .map_err(|e| RuntimeError::from(e).for_session(session))?;
        let live = self.live_run_of(session);
        let (prepared, bytes) = self.resolve(component).await?;
        let to = prepared.digest().to_string();
        let from = record.component.clone();
        let mut report = UpdateReport {
            session_id: session.clone(),
            from: from.clone(),
            to: to.clone(),
            mode,
            switched: false,
            runs: Vec::new(),
            pending: false,
            resumed: None,
        };
        if from.as_deref() == Some(to.as_str()) {
            return Ok(report);
        }
        if mode == UpdateMode::Snapshot {
            if dry_run {
                return Ok(report);
            }
            if let Some(bytes) = &bytes {
                self.inner.bytes.put_component(&to, bytes)?;
            }
            report.resumed = self.update_by_snapshot(session, &worker, from, &to).await?;
            report.switched = true;
            return Ok(report);
        }
        // A live run is never switched: the update waits for the next
        // run's start (a dry run checks the ended runs now).
        if live.is_some() && !dry_run {
            if let Some(bytes) = &bytes {
                self.inner.bytes.put_component(&to, bytes)?;
            }
            self.pending_map().insert(
                session.clone(),
                PendingUpdate {
                    to,
                    mode,
                    asked_ms: crate::fsutil::now_ms(),
                    error: None,
                },
            );
            report.pending = true;
            return Ok(report);
        }
        if mode == UpdateMode::Replay {
            report.runs = self
                .replay_offline_against(session, Some(component))
                .await?;
            if let Some(RunReplay::Diverged { run_id, error }) = report
                .runs
                .iter()
                .find(|r| matches!(r, RunReplay::Diverged { .. }))
            {
                return Err(RuntimeError::UpdateDiverged {
                    session: session.clone(),
                    message: format!(
                        "run {run_id} does not replay against {to}: {}",
                        error.message
                    ),
                });
            }
        }
        if dry_run {
            return Ok(report);
        }
        if let Some(bytes) = &bytes {
            self.inner.bytes.put_component(&to, bytes)?;
        }
        let checked_runs = report
            .runs
            .iter()
            .filter(|r| matches!(r, RunReplay::Matched { .. }))
            .count() as u64;
        self.switch(session, &worker, from, &to, mode, checked_runs)
            .await?;
        report.switched = true;
        Ok(report)
    }

    /// Journal a switch of `session`'s worker from `from` to `to`, then
    /// follow it in `worker.json`.
    pub(crate) async fn switch(
        &self,
        session: &SessionId,
        worker: &crate::worker::WorkerDir,
        from: Option<String>,
        to: &str,
        mode: UpdateMode,
        checked_runs: u64,
    ) -> Result<(), RuntimeError> {
        let journal = self
            .inner
            .journals
            .open(session)
            .await
            .map_err(|e| RuntimeError::from(e).for_session(session))?;
        let at_seq = journal.last_seq().await;
        // Listed before the journal names the switch: a crash before
        // `worker.json` follows it leaves the worker for the next owner's
        // restore to finish (a restore with nothing else to do unlists it).
        worker.mark_live().map_err(|e| {
            RuntimeError::from(crate::worker::WorkerError::Io {
                context: format!("cannot list worker {} in the live index", worker.id()),
                source: e,
            })
            .for_session(session)
        })?;
        // The journal first (the authority), then `worker.json`.
        journal
            .append(
                None,
                Payload::Lifecycle(LifecycleEvent::ComponentUpdated {
                    from: from.clone().unwrap_or_default(),
                    to: to.to_string(),
                    mode,
                    checked_runs,
                    at_seq,
                }),
            )
            .await
            .map_err(|e| RuntimeError::from(e).for_session(session))?;
        crate::fsutil::crash_point("update-journaled");
        worker
            .rebind(to)
            .map_err(|e| RuntimeError::from(e).for_session(session))?;
        if let Some(c) = &self.inner.cluster {
            c.shared.rebind(session, to).await?;
        }
        Ok(())
    }

    /// Fork `session` before the user message at `before` (see
    /// [`Runtime::fork`]) onto `component`: in `replay` mode every ended run
    /// the fork carries is shadow-replayed against it first, and a
    /// divergence refuses the fork (nothing is made); `next_run` binds it
    /// unchecked. The new session's journal records the switch.
    pub async fn fork_onto(
        &self,
        session: &SessionId,
        before: crate::ids::Seq,
        new_id: Option<SessionId>,
        component: &ComponentRef,
        mode: UpdateMode,
    ) -> Result<super::segments::Forked, RuntimeError> {
        let (prepared, bytes) = self.resolve(component).await?;
        let to = prepared.digest().to_string();
        let mut checked_runs = 0;
        if mode == UpdateMode::Replay {
            let runs = self
                .replay_offline_before(session, Some(component), Some(before))
                .await?;
            for r in &runs {
                match r {
                    RunReplay::Diverged { run_id, error } => {
                        return Err(RuntimeError::UpdateDiverged {
                            session: session.clone(),
                            message: format!(
                                "not forked: run {run_id} does not replay against {to}: {}",
                                error.message
                            ),
                        });
                    }
                    RunReplay::Matched { .. } => checked_runs += 1,
                    _ => {}
                }
            }
        }
        if let Some(bytes) = &bytes {
            self.inner.bytes.put_component(&to, bytes)?;
        }
        let forked = self.fork(session, before, new_id).await?;
        let worker = self.open_worker_of(&forked.session_id)?;
        let from = worker.record()?.component;
        if from.as_deref() != Some(to.as_str()) {
            self.switch(&forked.session_id, &worker, from, &to, mode, checked_runs)
                .await?;
        }
        Ok(forked)
    }

    /// `snapshot` mode: a live run is asked to park (at its next decision
    /// wait) and waited for; the binding moves; a parked last run resumes
    /// on the new component from its checkpoint.
    async fn update_by_snapshot(
        &self,
        session: &SessionId,
        worker: &crate::worker::WorkerDir,
        from: Option<String>,
        to: &str,
    ) -> Result<Option<crate::ids::RunId>, RuntimeError> {
        let live = self
            .inner
            .registry
            .sessions()
            .get(session)
            .and_then(|l| l.live_run().cloned());
        if let Some(run) = live {
            run.request_park(&format!(
                "a component update (snapshot) moves the session to {to}"
            ));
            let deadline = std::time::Instant::now() + SNAPSHOT_PARK_WAIT;
            while self.live_run_of(session).is_some() {
                if std::time::Instant::now() > deadline {
                    return Err(RuntimeError::LiveRun {
                        session: session.clone(),
                        run: run.run_id,
                    });
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        let last = self.session_runs(session).await?.pop();
        self.switch(session, worker, from, to, UpdateMode::Snapshot, 0)
            .await?;
        match last.filter(|r| {
            r.facts
                .as_ref()
                .is_some_and(|f| f.status == crate::RunStatus::Parked)
        }) {
            // Boxed: a start may update, and this update starts.
            Some(parked) => Ok(Some(
                Box::pin(self.resume(parked.run_id, None)).await?.run_id,
            )),
            None => Ok(None),
        }
    }

    fn pending_map(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<SessionId, PendingUpdate>> {
        self.inner
            .pending_updates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The update waiting for `session`'s next run, if one is.
    pub(crate) fn pending_update(&self, session: &SessionId) -> Option<PendingUpdate> {
        self.pending_map().get(session).cloned()
    }

    /// Take the update waiting for `session`'s next run, now that no run
    /// is live: checked as it was asked; a divergence leaves the session
    /// where it is, the reason kept on the session.
    pub(crate) async fn take_pending_update(&self, session: &SessionId) {
        let pending = {
            let mut map = self.pending_map();
            match map.get(session) {
                Some(p) if p.error.is_none() && self.live_run_of(session).is_none() => {
                    map.remove(session)
                }
                _ => None,
            }
        };
        let Some(p) = pending else {
            return;
        };
        let to = ComponentRef::Digest(p.to.clone());
        if let Err(e) = self.update(session, &to, p.mode, false).await {
            tracing::warn!(session = %session, error = %e, "a pending component update was not taken");
            self.pending_map().insert(
                session.clone(),
                PendingUpdate {
                    error: Some(self.strip_home(&e.to_string())),
                    ..p
                },
            );
        }
    }

    /// The live run of `session` in this process, if any.
    fn live_run_of(&self, session: &SessionId) -> Option<crate::ids::RunId> {
        self.inner
            .registry
            .sessions()
            .get(session)
            .and_then(|l| l.live_run().map(|r| r.run_id))
    }
}

/// How long a `snapshot` update waits for a live run to park.
const SNAPSHOT_PARK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The component the journal's last `component_updated` binds to, if any.
pub(crate) fn journaled_binding(events: &[crate::SessionEvent]) -> Option<String> {
    events.iter().rev().find_map(|e| match &e.payload {
        Payload::Lifecycle(LifecycleEvent::ComponentUpdated { to, .. }) => Some(to.clone()),
        _ => None,
    })
}
