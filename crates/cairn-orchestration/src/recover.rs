//! Recovery of a dispatch a crash cut short: before a row left
//! `processing` is dispatched again, the worker's journal says what the
//! crashed attempt already did — the run it started (live, or ended: the
//! ending is followed again and written once), the answer it delivered —
//! so no card runs twice and no acknowledged answer is asked again; a
//! worker made for the key before its record was written is adopted.

use super::dispatch::Dispatched;
use super::model::{Resume, Row};
use super::{Queue, QueueError};
use cairn_runtime::ids::{DecisionId, RunId, Seq, SessionId};
use cairn_runtime::journal::event::{LifecycleEvent, Payload};

impl Queue {
    /// What the worker's journal says a crashed dispatch already did, before
    /// anything is dispatched again: a run started for this attempt (at or
    /// after the row went processing: the run the crash left, live or
    /// ended — an ended run ends the card), or the run that recorded the
    /// row's answer (the answer was delivered). `None`: nothing was done,
    /// dispatch as usual.
    pub(crate) async fn recovered(&self, row: &Row) -> Result<Option<Dispatched>, QueueError> {
        let _guard = self.lock.lock().await;
        let mut records = self.store.records()?;
        let Some(record) = records.sessions.get(&row.worker_key).cloned() else {
            // A worker made for the key before its record was written (a
            // crash between them) is adopted, never made twice.
            if let Some((worker, session, _, identity)) = self
                .rt
                .worktree_marks()
                .into_iter()
                .rfind(|(_, _, key, _)| *key == row.worker_key)
            {
                let record = super::model::record_of(
                    row,
                    worker,
                    session,
                    identity,
                    false,
                    Vec::new(),
                    None,
                );
                records.sessions.insert(row.worker_key.clone(), record);
                self.store.put_records(&records)?;
            }
            return Ok(None);
        };
        let session = record.session_id.clone();
        let Ok(runs) = self.rt.session_runs(&session).await else {
            return Ok(None);
        };
        let Some(newest) = runs.last() else {
            return Ok(None);
        };
        let live = self.rt.live_runs().iter().any(|(_, r)| *r == newest.run_id);
        let since = newest
            .facts
            .as_ref()
            .is_some_and(|f| f.started_at_ms >= row.updated_ms);
        // The answer reached the run that asked, or a run started for it
        // (an answer the newest run recorded counts only when that run was
        // started for this attempt: an older run's answers were to other
        // questions).
        let (asked, newest_answered) = match &row.resume {
            Some(Resume::Decide { decision_id, .. }) => {
                self.journal_records(&session, decision_id, newest.run_id)
                    .await
            }
            _ => (false, false),
        };
        let answered = asked || (since && newest_answered);
        let deciding = matches!(row.resume, Some(Resume::Decide { .. }));
        // An answer not yet delivered, and no run started for it: delivered
        // as a dispatch does it (to the run that asked, or the next).
        if deciding && !answered && !since {
            return Ok(None);
        }
        if !(live || since || answered) {
            return Ok(None);
        }
        if record.last_run != Some(newest.run_id) {
            self.record_run(&mut records, &row.worker_key, newest.run_id)?;
        }
        let prompt = match &row.resume {
            Some(Resume::Decide { value, .. }) => format!("Answer: {value}"),
            Some(Resume::Prompt { prompt }) => prompt.clone(),
            None => row.prompt.clone(),
        };
        // A run started for the answer that has not been given it yet
        // gets it when it asks.
        let answer = match &row.resume {
            Some(Resume::Decide { value, .. }) if !answered => Some(value.clone()),
            _ => None,
        };
        Ok(Some(Dispatched {
            session,
            run: newest.run_id,
            prompt,
            answer,
        }))
    }

    /// Whether the session's journal records an answer to `decision`, and
    /// whether it records any answer in `run`.
    async fn journal_records(
        &self,
        session: &SessionId,
        decision: &DecisionId,
        run: RunId,
    ) -> (bool, bool) {
        let (mut asked, mut in_run) = (false, false);
        let _ = self
            .rt
            .scan(session, Seq(0), |item| {
                if let Some(e) = item.event()
                    && let Payload::Lifecycle(LifecycleEvent::DecisionRecorded {
                        decision_id, ..
                    }) = &e.payload
                {
                    asked |= decision_id == decision;
                    in_run |= e.run_id == Some(run);
                }
                true
            })
            .await;
        (asked, in_run)
    }
}
