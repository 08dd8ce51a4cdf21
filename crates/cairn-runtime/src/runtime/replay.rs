//! Deterministic replay. On open, a run with no terminal entry is restored
//! into a fresh generation: the same component (by digest) re-runs with the
//! journaled seed, clock and answers, every emit is checked against the
//! journal, and where the journal ends the run goes on live
//! (`ResumedByReplay`). A mismatch ends it `Failed { replay_diverged }` and
//! marks the worker stale — never continued, never silently restarted.
//! [`Runtime::replay_offline`] re-runs ended runs without writing anything.

use super::failure::FailureCode;
use super::run::{ErrorOrCancel, ReplayPlan, RunCtx, RunPlan, Script, execute};
use super::state::runs_of;
use super::{ComponentRef, Runtime, RuntimeError};
use crate::component::{JournalClock, Outcome, RunStart, Sandbox};
use crate::ids::{Generation, RunId, Seq, SessionId};
use crate::journal::event::{
    ErrorInfo, FinishOutcome, LifecycleEvent, Liveness, LivenessPolicy, Payload, RunStatus,
    SessionEvent,
};
use crate::store::JournalItem;
use crate::worker::WorkerStatus;
use serde::Serialize;
use std::sync::Arc;

/// Restore every interrupted run in the home.
pub(crate) async fn restore_all(rt: &Runtime, live_index: bool) -> Result<(), RuntimeError> {
    // Sessions are independent: their journals are read a few at a time
    // (each read is a blocking-pool hop; one after another, a home of
    // thousands of sessions kept `serve` from listening for a while).
    use futures_util::StreamExt;
    let parallel = crate::store::file::cores().max(2) * 2;
    // After a crash of the process in this boot the live index names
    // every worker with something to restore: only their journals are
    // read. Otherwise every worker's is.
    let workers = match live_index {
        true => match rt.inner.home.live_workers() {
            Ok(listed) => listed,
            Err(e) => {
                tracing::warn!("the live index cannot be read ({e}): every worker is walked");
                rt.inner.workers.list_workers()?
            }
        },
        false => rt.inner.workers.list_workers()?,
    };
    futures_util::stream::iter(workers)
        .for_each_concurrent(parallel, |worker_id| restore_worker(rt, worker_id))
        .await;
    Ok(())
}

/// Restore the interrupted run of one worker, if it has one (a worker an
/// instance takes over from the shared store, or each one at open). A
/// worker left with nothing to restore leaves the live index.
pub(crate) async fn restore_worker(rt: &Runtime, worker_id: crate::ids::WorkerId) {
    if !restore_one(rt, worker_id).await
        && let Err(e) = rt.inner.home.clear_live(worker_id)
    {
        tracing::warn!("worker {worker_id}: cannot take it out of the live index: {e}");
    }
}

/// [`restore_worker`]'s work: whether the worker still needs the live
/// index (a run restored, a resume queued, or a restore that could not
/// begin and is tried again at the next start).
async fn restore_one(rt: &Runtime, worker_id: crate::ids::WorkerId) -> bool {
    let worker = match rt.inner.workers.open_worker(worker_id) {
        Ok(w) => w,
        // Listed by the live index but deleted since: nothing to restore.
        Err(crate::worker::WorkerError::NoSuchWorker(_)) => return false,
        Err(e) => {
            rt.restore_incomplete();
            tracing::warn!("not restoring worker {worker_id}: {e}");
            return true;
        }
    };
    let record = match worker.record() {
        Ok(r) => r,
        Err(e) => {
            rt.restore_incomplete();
            tracing::warn!("not restoring worker {worker_id}: {e}");
            return true;
        }
    };
    let session = worker.session_id().clone();
    // A worker bound only in the journal (worker.json's unsynced write
    // lost to a power loss) is named by its last `Started`.
    let bound = record.component.clone();
    let items = match rt.read(&session, Seq(0)).await {
        Ok(items) => items,
        Err(e) => {
            rt.restore_incomplete();
            tracing::warn!("not restoring session {session}: {e}");
            return true;
        }
    };
    let events: Vec<SessionEvent> = items
        .into_iter()
        .filter_map(JournalItem::into_event)
        .collect();
    // A component update the journal holds and `worker.json` missed (the
    // host died between the two writes): the binding follows the journal.
    let bound = match super::update::journaled_binding(&events) {
        Some(to) if bound.as_deref() != Some(to.as_str()) => match worker.rebind(&to) {
            Ok(()) => Some(to),
            Err(e) => {
                tracing::warn!("session {session}: cannot follow its component update: {e}");
                bound
            }
        },
        _ => bound,
    };
    let runs = runs_of(&events);
    // A last run that parked asking to be resumed at the next start is.
    if let Some((run, Some(started), Some(end))) = runs.last()
        && matches!(
            end.payload,
            Payload::Lifecycle(LifecycleEvent::Parked { .. })
        )
        && matches!(
            started.payload,
            Payload::Lifecycle(LifecycleEvent::Started {
                resume_on_start: true,
                ..
            })
        )
        && record.status != WorkerStatus::Stale
    {
        rt.inner
            .resume_pending
            .store(true, std::sync::atomic::Ordering::SeqCst);
        rt.inner
            .resume_at_start
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(*run);
        return true;
    }
    let Some((run, started, None)) = runs.last().cloned() else {
        return false;
    };
    let Some(component) = bound.or_else(|| {
        started.as_ref().and_then(|s| match &s.payload {
            Payload::Lifecycle(LifecycleEvent::Started { component, .. }) => {
                Some(component.to_string())
            }
            _ => None,
        })
    }) else {
        return false;
    };
    let journal = match rt.inner.journals.open(&session).await {
        Ok(j) => j,
        Err(e) => {
            rt.restore_incomplete();
            tracing::warn!("not restoring session {session}: {e}");
            return true;
        }
    };
    rt.index_started(
        run,
        &session,
        &record.workspace,
        super::run_index::after_of(&events, run),
    )
    .await;
    let Some(started) = started else {
        // It died between reserving a generation and starting: nothing
        // ran, and its prompt was never journaled. Close it, visibly.
        let message =
            "the host stopped after reserving a generation and before the run started; nothing ran";
        close_run(
            rt,
            &journal,
            run,
            &component,
            &events,
            FailureCode::Interrupted,
            message,
        )
        .await;
        return false;
    };
    if record.status == WorkerStatus::Stale {
        return false;
    }
    let Payload::Lifecycle(LifecycleEvent::Started {
        prompt,
        tools,
        timeout_ms,
        liveness,
        generation: _,
        continues,
        resumes,
        resume_on_start,
        seed,
        ..
    }) = &started.payload
    else {
        unreachable!("runs_of keeps Started entries only")
    };
    // A restore that cannot even begin is journaled and the worker is
    // marked stale: never only a line on stderr.
    let (j, c, ev, w) = (&journal, &component, &events, &worker);
    let restore_failed = move |why: String| async move {
        let message = format!("run {run} cannot be restored: {why}");
        tracing::warn!("{message}");
        close_run(rt, j, run, c, ev, FailureCode::RestoreFailed, &message).await;
        if let Err(e) = w.mark_stale() {
            tracing::warn!("cannot mark worker {worker_id} stale: {e}");
        }
    };
    let prepared = match rt.resolve(&ComponentRef::Digest(component.clone())).await {
        Ok((p, _)) => p,
        Err(e) => {
            restore_failed(format!("its component is not usable: {e}")).await;
            return false;
        }
    };
    let checkpoint = rt.parked_checkpoint(&session, *resumes).await;
    if resumes.is_some() && checkpoint.is_none() {
        restore_failed(format!(
            "the park checkpoint of run {} it resumed cannot be read",
            resumes.map(|r| r.to_string()).unwrap_or_default()
        ))
        .await;
        return false;
    }
    let ctx = rt.replay_ctx(run, &session, &journal, *liveness, &record.workspace);
    ctx.set_script(Script::of_run(&events, run, false));
    let _ = ctx.workspace.set(record.workspace.clone());
    {
        let mut all = rt.inner.registry.all();
        all.sessions.entry(session.clone()).or_default().run = Some(ctx.clone());
        all.running.insert(session.clone());
    }
    let first_seq = events
        .iter()
        .find(|e| e.run_id == Some(run))
        .map(|e| e.seq)
        .unwrap_or(started.seq);
    let previous_generation = generation_before(&events, started.seq);
    // What happened to its claimants before the host stopped: a policy
    // already decided is carried out (a run decided `cancel` never goes
    // on), and a claimant the journal still holds attached died with the
    // host: its lease has run out.
    let decided = events.iter().rev().find_map(|e| match &e.payload {
        Payload::Lifecycle(LifecycleEvent::LivenessDecided { policy }) if e.run_id == Some(run) => {
            Some(*policy)
        }
        _ => None,
    });
    let lost = lost_claimants(&events);
    let run_ctx = ctx.clone();
    let plan = RunPlan {
        ctx,
        worker_id,
        prepared,
        prompt: prompt.to_string(),
        tools: tools.as_deref().map(str::to_string),
        liveness: *liveness,
        timeout_ms: *timeout_ms,
        continues: *continues,
        resumes: *resumes,
        resume_on_start: *resume_on_start,
        checkpoint,
        previous_generation,
        bind: record.component.is_none().then(|| component.clone()),
        generation_floor: last_reserved(&events),
        first_commit: crate::runtime::FirstCommit::Now,
        durable: None,
        child: record.parent.is_some(),
        replay: Some(ReplayPlan {
            seed: *seed,
            first_seq,
            started: started.clone(),
        }),
    };
    rt.inner.registry.restored().push(run);
    // Its unanswered requests answer `409 restoring` until the replay asks
    // them again (the broker has them then) or the run ends.
    let asked = unanswered(&events, run);
    if !asked.is_empty() {
        let mut restoring = rt.inner.restoring.lock().unwrap_or_else(|p| p.into_inner());
        for id in &asked {
            restoring.insert(id.clone(), session.clone());
        }
    }
    rt.spawn_run(worker, plan);
    match decided {
        Some(crate::journal::event::LivenessPolicy::Cancel) => run_ctx.cancel(
            crate::journal::event::CancelReason::Unclaimed,
            "its liveness policy decided cancel before the host stopped",
        ),
        Some(crate::journal::event::LivenessPolicy::Park) => {
            run_ctx.request_park("its liveness policy decided park before the host stopped")
        }
        _ if !lost.is_empty() => {
            // The lost claimants' lease runs from the restart; the task
            // holds no runtime while it waits (a runtime dropped meanwhile
            // lets its home go).
            let ttl = std::time::Duration::from_millis(rt.inner.config.host.store.lease_ttl_ms);
            let (weak, session) = (Arc::downgrade(&rt.inner), session.clone());
            tokio::spawn(async move {
                tokio::time::sleep(ttl).await;
                if let Some(inner) = weak.upgrade() {
                    let rt = Runtime { inner };
                    rt.expire_lost_claimants(&session, lost, run).await;
                }
            });
        }
        _ => {}
    }
    if !asked.is_empty() {
        let rt = rt.clone();
        tokio::spawn(async move {
            let _ = rt.wait(run).await;
            let mut restoring = rt.inner.restoring.lock().unwrap_or_else(|p| p.into_inner());
            for id in &asked {
                restoring.remove(id);
            }
        });
    }
    true
}

/// The claiming observers the journal holds attached at its end (they died
/// with the host that served them).
fn lost_claimants(events: &[SessionEvent]) -> Vec<crate::journal::event::Observer> {
    let mut attached: Vec<crate::journal::event::Observer> = Vec::new();
    for e in events {
        match &e.payload {
            Payload::Lifecycle(LifecycleEvent::ObserverAttached { observer })
                if observer.role == crate::journal::event::ObserverRole::Claiming =>
            {
                attached.retain(|o| o.id != observer.id);
                attached.push(observer.clone());
            }
            Payload::Lifecycle(LifecycleEvent::ObserverDetached { observer, .. }) => {
                attached.retain(|o| o.id != observer.id);
            }
            _ => {}
        }
    }
    attached
}

/// The decisions `run` asked and nobody answered (nor timed out).
fn unanswered(events: &[SessionEvent], run: crate::ids::RunId) -> Vec<crate::ids::DecisionId> {
    let mut asked = Vec::new();
    for e in events.iter().filter(|e| e.run_id == Some(run)) {
        match &e.payload {
            Payload::Lifecycle(LifecycleEvent::DecisionRequested { decision_id, .. }) => {
                asked.push(decision_id.clone());
            }
            Payload::Lifecycle(
                LifecycleEvent::DecisionRecorded { decision_id, .. }
                | LifecycleEvent::DecisionTimedOut { decision_id },
            ) => asked.retain(|d| d != decision_id),
            _ => {}
        }
    }
    asked
}

/// The generation a run starting at `seq` copied its artifacts from: the
/// one of the run before it.
fn generation_before(events: &[SessionEvent], seq: Seq) -> Option<Generation> {
    events
        .iter()
        .rev()
        .filter(|e| e.seq < seq)
        .find_map(|e| match &e.payload {
            Payload::Lifecycle(LifecycleEvent::Started { generation, .. }) => Some(*generation),
            _ => None,
        })
}

/// The last generation the journal names as reserved.
fn last_reserved(events: &[SessionEvent]) -> Option<Generation> {
    events.iter().rev().find_map(|e| match &e.payload {
        Payload::Lifecycle(LifecycleEvent::GenerationReserved { generation, .. }) => {
            Some(*generation)
        }
        _ => None,
    })
}

/// Close an interrupted run that cannot go on with a journaled `failed`
/// (`code`, `message`); when even that cannot be written, say so.
async fn close_run(
    rt: &Runtime,
    journal: &crate::journal::SessionJournal,
    run: RunId,
    component: &str,
    events: &[SessionEvent],
    code: FailureCode,
    message: &str,
) {
    let first_seq = events.iter().find(|e| e.run_id == Some(run)).map(|e| e.seq);
    let generation = events
        .iter()
        .find_map(|e| match &e.payload {
            Payload::Lifecycle(LifecycleEvent::GenerationReserved { generation, .. })
                if e.run_id == Some(run) =>
            {
                Some(*generation)
            }
            _ => None,
        })
        .unwrap_or_default();
    let session = journal.session().clone();
    let now = crate::fsutil::now_ms();
    let component = component.to_string();
    let closed = journal
        .finish(
            run,
            LifecycleEvent::Failed {
                error: ErrorInfo {
                    code,
                    message: message.to_string(),
                    details: None,
                },
            },
            |seq, at_ms| crate::journal::event::RunFacts {
                run_id: run,
                session_id: session.clone(),
                component,
                status: RunStatus::Failed,
                outcome: None,
                usage: Default::default(),
                started_at_ms: now,
                ended_at_ms: at_ms,
                first_seq: first_seq.unwrap_or(seq),
                last_seq: seq,
                generation,
                checkpoint: None,
                pending_decisions: vec![],
                continues: None,
                resumes: None,
            },
        )
        .await;
    match closed {
        Ok(e) => {
            if let Some(f) = &e.facts {
                rt.index_ended(f).await;
            }
        }
        Err(e) => {
            rt.restore_incomplete();
            tracing::warn!("cannot journal the end of run {run} of session {session}: {e}")
        }
    }
}

/// How one run replayed offline.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum RunReplay {
    /// Every emit and the outcome matched.
    Matched {
        /// The run.
        run_id: RunId,
        /// Guest-visible entries checked.
        entries: usize,
    },
    /// They did not.
    Diverged {
        /// The run.
        run_id: RunId,
        /// What differed.
        error: ErrorInfo,
    },
    /// Not replayable (cancelled, trapped, or still live).
    Skipped {
        /// The run.
        run_id: RunId,
        /// Why.
        why: String,
    },
}

impl Runtime {
    /// The checkpoint of the parked run a run resumed, if any.
    async fn parked_checkpoint(
        &self,
        session: &SessionId,
        resumes: Option<RunId>,
    ) -> Option<Vec<u8>> {
        let parked = resumes?;
        self.inner
            .store
            .checkpoint(session, &parked.to_string())
            .await
            .ok()
    }

    /// The context of a run re-run against its journal.
    fn replay_ctx(
        &self,
        run: RunId,
        session: &SessionId,
        journal: &Arc<crate::journal::SessionJournal>,
        liveness: Liveness,
        workspace: &str,
    ) -> Arc<RunCtx> {
        Arc::new(RunCtx::new(
            run,
            session.clone(),
            journal.clone(),
            self.inner.store.clone(),
            self.inner.broker.clone(),
            liveness,
            self.inner.config.host.ceilings(workspace),
        ))
    }

    /// Restored runs (interrupted runs this runtime found and replayed).
    pub fn restored(&self) -> Vec<RunId> {
        self.inner.registry.restored().clone()
    }

    /// Re-run every ended run of `session` offline against its journal and
    /// report, per run, whether the controller did exactly what the journal
    /// says. Writes nothing to the session.
    pub async fn replay_offline(
        &self,
        session: &SessionId,
    ) -> Result<Vec<RunReplay>, RuntimeError> {
        self.replay_offline_against(session, None).await
    }

    /// [`Runtime::replay_offline`] with every run re-run by `against`
    /// instead of the component it started with: a shadow replay, whether
    /// another version of the controller does exactly what the journal
    /// says.
    pub async fn replay_offline_against(
        &self,
        session: &SessionId,
        against: Option<&ComponentRef>,
    ) -> Result<Vec<RunReplay>, RuntimeError> {
        self.replay_offline_before(session, against, None).await
    }

    /// [`Runtime::replay_offline_against`] of the runs that started before
    /// `before` (all when none): what a fork taken there carries.
    pub(crate) async fn replay_offline_before(
        &self,
        session: &SessionId,
        against: Option<&ComponentRef>,
        before: Option<Seq>,
    ) -> Result<Vec<RunReplay>, RuntimeError> {
        let against = match against {
            Some(c) => Some(self.resolve(c).await?.0),
            None => None,
        };
        let worker = self.open_worker_of(session)?;
        let events = self.events_of(session).await?;
        let journal = self.inner.journals.open(session).await?;
        let mut report = Vec::new();
        for (run, started, terminal) in runs_of(&events) {
            if let (Some(before), Some(started)) = (before, &started)
                && started.seq >= before
            {
                continue;
            }
            let (Some(started), Some(terminal)) = (started, terminal) else {
                report.push(RunReplay::Skipped {
                    run_id: run,
                    why: "it has not ended".into(),
                });
                continue;
            };
            let Payload::Lifecycle(LifecycleEvent::Started {
                component,
                prompt,
                tools,
                continues,
                resumes,
                seed,
                generation,
                ..
            }) = &started.payload
            else {
                unreachable!()
            };
            let Payload::Lifecycle(end) = &terminal.payload else {
                unreachable!()
            };
            match end {
                LifecycleEvent::Cancelled { .. } => {
                    report.push(RunReplay::Skipped {
                        run_id: run,
                        why: "it was cancelled".into(),
                    });
                    continue;
                }
                LifecycleEvent::Failed { error } if error.code != "controller_error" => {
                    report.push(RunReplay::Skipped {
                        run_id: run,
                        why: format!("it failed with {}", error.code),
                    });
                    continue;
                }
                _ => {}
            }
            let prepared = match &against {
                Some(p) => p.clone(),
                None => {
                    self.resolve(&ComponentRef::Digest(component.to_string()))
                        .await?
                        .0
                }
            };
            let checkpoint = self.parked_checkpoint(session, *resumes).await;
            let continue_ = Liveness {
                policy: LivenessPolicy::Continue,
                grace_ms: 0,
            };
            let ctx = self.replay_ctx(
                run,
                session,
                &journal,
                continue_,
                &worker.record()?.workspace,
            );
            let script = Script::of_run(&events, run, true);
            let entries = script_len(&events, run);
            ctx.set_script(script);
            let scratch = tempfile::tempdir().map_err(|e| {
                RuntimeError::RunLost(format!(
                    "cannot make a scratch directory for the replay: {e}"
                ))
            })?;
            let artifacts = scratch.path().join("artifacts");
            std::fs::create_dir(&artifacts).map_err(|e| {
                RuntimeError::RunLost(format!("cannot make a scratch directory: {e}"))
            })?;
            // The worktree the run started from, as recorded (and the
            // scopes its children returned), brought here when another
            // instance recorded them.
            self.fetch_snapshots(&worker, &super::worktrees::snapshots_of(&events, run))
                .await;
            let carried =
                match super::worktrees::lay_out_started(&worker, &events, run, &artifacts).await {
                    Ok(bytes) => bytes,
                    // Not checked is not matched: a shadow replay switches
                    // nothing over a run it could not re-run as it was.
                    Err(why) => {
                        report.push(RunReplay::Diverged {
                            run_id: run,
                            error: ErrorInfo {
                                code: FailureCode::ReplayDiverged,
                                message: why,
                                details: None,
                            },
                        });
                        continue;
                    }
                };
            ctx.set_place(super::run::Place {
                worker_id: worker.id(),
                generation: *generation,
                artifacts: artifacts.clone(),
            });
            if let Ok(w) = worker.try_clone() {
                let _ = ctx.replay_worker.set(w);
            }
            let (stdout, stderr) = (scratch.path().join("log"), scratch.path().join("log"));
            // The clock the decisions advance: the one the guest reads.
            let clock = JournalClock::new(started.at_ms);
            *ctx.clock.lock().unwrap_or_else(|p| p.into_inner()) = Some(clock.clone());
            let sandbox = Sandbox {
                loan: None,
                artifacts,
                stdout,
                stderr,
                clock,
                limits: ctx.limits,
                host: ctx.clone(),
                // Charged as the run was: a write refused then is refused now.
                meter: Some(crate::worktree::ArtifactMeter::new(
                    ctx.limits.artifact_bytes,
                    carried,
                )),
            };
            let start = RunStart {
                run_id: run,
                session_id: session.clone(),
                worker_id: worker.id(),
                generation: *generation,
                prompt: prompt.to_string(),
                continues: *continues,
                checkpoint,
                seed: *seed,
                tools: tools.as_deref().map(str::to_string),
            };
            let outcome = execute(&self.inner.components, &ctx, &prepared, sandbox, start).await;
            if let Some(error) = ctx.failure() {
                report.push(RunReplay::Diverged { run_id: run, error });
                continue;
            }
            let mismatch = outcome_mismatch(self, session, end, &outcome).await;
            let remaining = ctx.script_remaining();
            let verdict = match (mismatch, remaining) {
                (Some(error), _) => RunReplay::Diverged { run_id: run, error },
                (None, 0) => RunReplay::Matched {
                    run_id: run,
                    entries,
                },
                (None, n) => RunReplay::Diverged {
                    run_id: run,
                    error: ErrorInfo {
                        code: crate::runtime::failure::FailureCode::ReplayDiverged,
                        message: format!(
                            "the controller ended with {n} journaled entries not yet reproduced"
                        ),
                        details: Some(
                            serde_json::json!({ "seq": terminal.seq, "expected": n, "got": 0 }),
                        ),
                    },
                },
            };
            report.push(verdict);
        }
        Ok(report)
    }
}

fn script_len(events: &[SessionEvent], run: RunId) -> usize {
    Script::of_run(events, run, true).len()
}

async fn outcome_mismatch(
    rt: &Runtime,
    session: &SessionId,
    end: &LifecycleEvent,
    outcome: &Result<Outcome, ErrorOrCancel>,
) -> Option<ErrorInfo> {
    let expected = serde_json::to_value(end).unwrap_or_default();
    let got = match outcome {
        Ok(Outcome::Finished(text)) => {
            if matches!(end, LifecycleEvent::Finished { text: t, outcome: FinishOutcome::Answer, .. } if t == text)
            {
                return None;
            }
            serde_json::json!({ "finished": text })
        }
        Ok(Outcome::Question(text)) => {
            if matches!(end, LifecycleEvent::Finished { text: t, outcome: FinishOutcome::Question, .. } if t == text)
            {
                return None;
            }
            serde_json::json!({ "question": text })
        }
        Ok(Outcome::Parked(bytes)) => {
            if let LifecycleEvent::Parked { checkpoint } = end
                && rt
                    .inner
                    .store
                    .checkpoint(session, checkpoint)
                    .await
                    .ok()
                    .as_deref()
                    == Some(bytes.as_slice())
            {
                return None;
            }
            serde_json::json!({ "parked": bytes.len() })
        }
        Ok(Outcome::Failed { code, message }) => {
            if matches!(end, LifecycleEvent::Failed { error } if error.details.as_ref().and_then(|d| d.get("controller_code")).and_then(|c| c.as_str()) == Some(code.as_str()))
            {
                return None;
            }
            serde_json::json!({ "failed": code, "message": message })
        }
        Err(e) => serde_json::json!({ "trap": e.message }),
    };
    Some(ErrorInfo {
        code: crate::runtime::failure::FailureCode::ReplayDiverged,
        message: format!(
            "the run ended differently: the journal has {expected}, the replay got {got}"
        ),
        details: Some(serde_json::json!({ "seq": 0, "expected": expected, "got": got })),
    })
}
