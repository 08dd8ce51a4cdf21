//! Pending decisions and their answers. An answer is journaled
//! (`DecisionRecorded`) before the waiting controller is woken, and an id
//! can be answered once: the same answer again is accepted, another is a
//! conflict.

use super::RuntimeError;
use crate::ids::{DecisionId, RunId, SessionId};
use crate::journal::SessionJournal;
use crate::journal::event::{DecidedBy, LifecycleEvent, Payload};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// An answer as delivered to a waiting run: the value and the journaled time.
pub type Delivered = (serde_json::Value, u64);

struct Pending {
    session: SessionId,
    run: RunId,
    journal: Arc<SessionJournal>,
    tx: oneshot::Sender<Delivered>,
    /// Why its webhook delivery failed, when it did.
    delivery: Option<String>,
}

/// Why a decision was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// No pending or recorded decision has this id.
    #[error("no pending decision {0}")]
    NotPending(DecisionId),
    /// It was answered already, differently.
    #[error("decision {id} was already answered with {recorded}; a different answer is refused")]
    Conflict {
        /// The decision.
        id: DecisionId,
        /// The recorded answer.
        recorded: serde_json::Value,
    },
    /// The journal could not record it.
    #[error("cannot record decision {id}: {source}")]
    Store {
        /// The decision.
        id: DecisionId,
        /// The cause.
        #[source]
        source: crate::store::StoreError,
    },
}

/// A pending decision, as listed to clients.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct PendingDecision {
    /// The decision.
    pub decision_id: DecisionId,
    /// Its session.
    pub session_id: SessionId,
    /// Its run.
    pub run_id: RunId,
    /// What is asked (`approval`, `tool_result`, `answer`); filled by the
    /// HTTP listing from the journal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_kind: Option<crate::journal::event::RequestKind>,
    /// The question, for people.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The request's details (JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
    /// Why the workspace's decisions webhook could not be reached, its
    /// retries spent (the decision stays pending: any seam may answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery_failed: Option<String>,
}

/// Hold `id` as pending for a waiter: its receiving end.
fn waiting(
    pending: &mut HashMap<DecisionId, Pending>,
    id: DecisionId,
    session: SessionId,
    run: RunId,
    journal: Arc<SessionJournal>,
) -> oneshot::Receiver<Delivered> {
    let (tx, rx) = oneshot::channel();
    let entry = Pending {
        session,
        run,
        journal,
        tx,
        delivery: None,
    };
    pending.insert(id, entry);
    rx
}

/// Every pending decision of the process.
#[derive(Default)]
pub struct Broker {
    pending: Mutex<HashMap<DecisionId, Pending>>,
    recorded: Mutex<HashMap<DecisionId, (SessionId, serde_json::Value)>>,
}

impl Broker {
    /// Register a request; called under the journal's append lock, so no
    /// observer can see the request before it can be answered.
    pub fn register(
        &self,
        id: DecisionId,
        session: SessionId,
        run: RunId,
        journal: Arc<SessionJournal>,
    ) -> oneshot::Receiver<Delivered> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        waiting(&mut pending, id, session, run, journal)
    }

    /// Register a request again for a waiter whose sender was lost, unless
    /// another waiter holds the id now (then `None`: it is theirs).
    pub fn register_again(
        &self,
        id: DecisionId,
        session: SessionId,
        run: RunId,
        journal: Arc<SessionJournal>,
    ) -> Option<oneshot::Receiver<Delivered>> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if pending.contains_key(&id) {
            return None;
        }
        Some(waiting(&mut pending, id, session, run, journal))
    }

    /// A new receiver for pending decision `id`, whose waiter went (an
    /// evicted instance): its answer goes there. `None` once it is being
    /// answered (its answer is journaled first: read it there).
    pub fn rewait(&self, id: &DecisionId) -> Option<oneshot::Receiver<Delivered>> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let entry = pending.get_mut(id)?;
        let (tx, rx) = oneshot::channel();
        entry.tx = tx;
        Some(rx)
    }

    /// Withdraw a request (its wait ended otherwise). True when it was still
    /// pending, so the caller owns its ending.
    pub fn withdraw(&self, id: &DecisionId) -> bool {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)
            .is_some()
    }

    /// Note that a pending decision's webhook delivery failed.
    pub fn note_delivery(&self, id: &DecisionId, why: String) {
        if let Some(p) = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(id)
        {
            p.delivery = Some(why);
        }
    }

    /// The pending decisions, optionally of one session.
    pub fn pending(&self, session: Option<&SessionId>) -> Vec<PendingDecision> {
        let pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<PendingDecision> = pending
            .iter()
            .filter(|(_, p)| session.is_none_or(|s| *s == p.session))
            .map(|(id, p)| PendingDecision {
                decision_id: id.clone(),
                session_id: p.session.clone(),
                run_id: p.run,
                request_kind: None,
                prompt: None,
                details: None,
                delivery_failed: p.delivery.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.decision_id.cmp(&b.decision_id));
        out
    }

    /// The session a decision (pending or answered here) belongs to.
    pub fn session_of(&self, id: &DecisionId) -> Option<SessionId> {
        if let Some(p) = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
        {
            return Some(p.session.clone());
        }
        self.recorded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .map(|(s, _)| s.clone())
    }

    /// Answer a decision: journal `DecisionRecorded`, then wake the waiter.
    /// Recording and waking run on a task of their own, so a caller that
    /// goes away mid-call (a client that hung up, a request timed out while
    /// the store rode out an outage) never leaves an answer journaled and
    /// its run without it.
    pub async fn decide(
        self: &Arc<Self>,
        id: &DecisionId,
        value: serde_json::Value,
        by: DecidedBy,
    ) -> Result<(), DecideError> {
        if let Some((_, recorded)) = self
            .recorded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
        {
            return if *recorded == value {
                Ok(())
            } else {
                Err(DecideError::Conflict {
                    id: id.clone(),
                    recorded: recorded.clone(),
                })
            };
        }
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)
            .ok_or_else(|| DecideError::NotPending(id.clone()))?;
        let broker = self.clone();
        let task_id = id.clone();
        let task = tokio::spawn(async move { broker.record(task_id, pending, value, by).await });
        match task.await {
            Ok(done) => done,
            // The runtime is going down under it.
            Err(e) => Err(DecideError::Store {
                id: id.clone(),
                source: crate::store::StoreError::Io {
                    context: "recording a decision".into(),
                    source: std::io::Error::other(e.to_string()),
                },
            }),
        }
    }

    /// Journal `pending`'s answer, then wake its run; not recorded, it is
    /// left pending to be answered again.
    async fn record(
        &self,
        id: DecisionId,
        pending: Pending,
        value: serde_json::Value,
        by: DecidedBy,
    ) -> Result<(), DecideError> {
        let event = pending
            .journal
            .append(
                Some(pending.run),
                Payload::Lifecycle(LifecycleEvent::DecisionRecorded {
                    decision_id: id.clone(),
                    value: value.clone(),
                    by,
                }),
            )
            .await;
        let event = match event {
            Ok(e) => e,
            Err(source) => {
                self.pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id.clone(), pending);
                return Err(DecideError::Store { id, source });
            }
        };
        self.recorded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), (pending.session.clone(), value.clone()));
        // A waiter that misses this wake-up reads its answer from the
        // journal (the fault point drops it, as a lost broker would).
        if !crate::fsutil::fault_point("decision-undelivered")
            && let Err(delivered) = pending.tx.send((value, event.at_ms))
        {
            // Its waiter is gone (an instance evicted while it waited): the
            // one its restore registered since gets it, if there is one.
            let again = self
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            if let Some(again) = again {
                let _ = again.tx.send(delivered);
            }
        }
        Ok(())
    }
}

impl super::Runtime {
    /// Answer a decision (journaled before the controller sees it).
    pub async fn decide(
        &self,
        id: &DecisionId,
        value: serde_json::Value,
    ) -> Result<(), RuntimeError> {
        crate::journal::check_json_depth("the decision value", &value)
            .map_err(RuntimeError::InvalidRequest)?;
        // An answer is journaled into the run's session (counted with its
        // request): one larger than the run's entries may be is refused.
        let live = self.session_of_decision(id).and_then(|session| {
            let sessions = self.inner.registry.sessions();
            sessions.get(&session).and_then(|l| l.live_run().cloned())
        });
        if self.inner.broker.session_of(id).is_none()
            && let Some(session) = self
                .inner
                .restoring
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(id)
        {
            return Err(RuntimeError::Restoring {
                decision: id.clone(),
                session: session.clone(),
            });
        }
        let size = crate::journal::json_len(&value) + 256;
        if let Some(ctx) = &live
            && size > ctx.limits.event_bytes
        {
            return Err(RuntimeError::TooLarge {
                size: size as usize,
                max: ctx.limits.event_bytes as usize,
            });
        }
        self.inner
            .broker
            .decide(id, value, DecidedBy::Client)
            .await?;
        Ok(())
    }

    /// The session a decision belongs to, when this host knows it.
    pub fn session_of_decision(&self, id: &DecisionId) -> Option<SessionId> {
        self.inner.broker.session_of(id).or_else(|| {
            self.inner
                .restoring
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(id)
                .cloned()
        })
    }
}
