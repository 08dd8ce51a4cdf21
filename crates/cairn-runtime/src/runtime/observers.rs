//! Observers: collecting or claiming, present or not. At most one claimant
//! per session; when it leaves while a run is live, `ClaimsExhausted`, then
//! after the grace window `LivenessDecided`, and the run does that. A claim
//! is held on the session, so it outlives any one run.

use super::{Runtime, RuntimeError, SessionLive};
use crate::ids::{Seq, SessionId};
use crate::journal::event::{
    CancelReason, DetachCause, LifecycleEvent, LivenessPolicy, Observer, ObserverRole, Payload,
};
use crate::journal::{Delivery, Subscription};
use crate::store::StoreError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

static NEXT_OBSERVER: AtomicU64 = AtomicU64::new(1);

/// A new observer's key, unique in the process.
pub(super) fn next_observer_id() -> u64 {
    NEXT_OBSERVER.fetch_add(1, Ordering::Relaxed)
}

/// How an observer attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttachSpec {
    /// Collecting or claiming.
    pub role: ObserverRole,
    /// Whether a human is attending.
    pub present: bool,
    /// Deliver entries after this seq (0: from the start).
    pub after: Seq,
    /// When claiming and another claimant holds the session: displace it
    /// (`true`) or be refused (`false`).
    pub takeover: bool,
}

impl AttachSpec {
    /// A collecting, not-present observer from `after`.
    pub fn collecting(after: Seq) -> Self {
        AttachSpec {
            role: ObserverRole::Collecting,
            present: false,
            after,
            takeover: false,
        }
    }

    /// A claiming, present observer from `after` (a CLI, a chat client).
    pub fn claiming_present(after: Seq) -> Self {
        AttachSpec {
            role: ObserverRole::Claiming,
            present: true,
            after,
            takeover: false,
        }
    }
}

/// An attached observer: its subscription and its guard. Dropping it
/// detaches (`ObserverDetached { released }`).
pub struct Observation {
    sub: Source,
    guard: ObserverGuard,
}

/// Where an observation's entries come from: the session's journal here,
/// or — on a shared store, for a session another instance writes — the
/// relay (the store's rows, woken by its notifications).
enum Source {
    Local(Subscription),
    Relay(Box<dyn crate::store::RelayFollower>),
}

impl std::fmt::Debug for Observation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observation")
            .field("observer", &self.guard.observer.id)
            .finish()
    }
}

impl Observation {
    /// The next delivery (see [`Subscription::next`]).
    pub async fn next(&mut self) -> Option<Result<Delivery, StoreError>> {
        match &mut self.sub {
            Source::Local(sub) => sub.next().await,
            Source::Relay(follower) => Some(follower.next().await.map(|item| match item {
                crate::store::JournalItem::Event(e) => Delivery::Event(Arc::new(*e)),
                crate::store::JournalItem::Unknown { seq, raw } => Delivery::Unknown { seq, raw },
            })),
        }
    }

    /// The observer as journaled.
    pub fn observer(&self) -> &Observer {
        &self.guard.observer
    }

    /// Whether it follows the store's rows for a session another instance
    /// writes (then it is leased there: see [`Runtime::lease_observer`]).
    pub fn relayed(&self) -> bool {
        matches!(self.sub, Source::Relay(_))
    }

    /// The last seq delivered.
    pub fn cursor(&self) -> Seq {
        match &self.sub {
            Source::Local(sub) => sub.cursor(),
            Source::Relay(follower) => follower.cursor(),
        }
    }

    /// A claimant that leaves when the next run of its session ends (a
    /// chat call, `cairn run`): its detach is journaled in the run's end
    /// write, right behind the terminal entry, instead of in a write of its
    /// own after it; dropping it later journals nothing more. Call it
    /// before starting the run. An observation dropped before that run ends
    /// detaches as usual.
    pub fn leave_with_run(&self) {
        let Some(inner) = self.guard.runtime.upgrade() else {
            return;
        };
        let mut sessions = inner.registry.sessions();
        if let Some(live) = sessions.get_mut(&self.guard.session)
            && live.claimant == Some(self.guard.id)
        {
            live.leaves_with_run = Some(self.guard.id);
        }
    }

    /// Detach now and wait until the detach is journaled.
    pub async fn detach(mut self) {
        if let Some(inner) = self.guard.runtime.upgrade() {
            let rt = Runtime { inner };
            self.guard.done = true;
            rt.detach(&self.guard.session, self.guard.id, DetachCause::Released)
                .await;
        }
    }

    /// Detach now; when that leaves the live run without a claimant, apply
    /// `policy` to it instead of the run's own. A chat call that answers
    /// while its run waits on a decision hands the run over this way
    /// (`continue`), so the decision can still be answered.
    pub async fn hand_over(mut self, policy: LivenessPolicy) {
        if let Some(inner) = self.guard.runtime.upgrade() {
            let rt = Runtime { inner };
            self.guard.done = true;
            rt.detach_with(
                &self.guard.session,
                self.guard.id,
                DetachCause::Released,
                Some(policy),
            )
            .await;
        }
    }
}

struct ObserverGuard {
    runtime: Weak<super::Inner>,
    session: SessionId,
    id: u64,
    observer: Observer,
    done: bool,
}

impl Drop for ObserverGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let Some(inner) = self.runtime.upgrade() else {
            return;
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (session, id) = (self.session.clone(), self.id);
        handle.spawn(async move {
            Runtime { inner }
                .detach(&session, id, DetachCause::Released)
                .await;
        });
    }
}

impl Runtime {
    /// Attach an observer to a persisted session.
    pub async fn attach(
        &self,
        session: &SessionId,
        spec: AttachSpec,
    ) -> Result<Observation, RuntimeError> {
        if let Some(follower) = self.relay_follow(session, spec.after) {
            return self.relayed(session, spec, follower).await;
        }
        let journal = match self.inner.journals.open(session).await {
            Ok(j) => j,
            Err(StoreError::UnknownSession(s)) => return Err(RuntimeError::UnknownSession(s)),
            Err(e) => return Err(RuntimeError::from(e).for_session(session)),
        };
        let sub = journal.subscribe(spec.after);
        let id = NEXT_OBSERVER.fetch_add(1, Ordering::Relaxed);
        let observer = Observer {
            id: format!("o{id}"),
            role: spec.role,
            present: spec.present,
        };
        let displaced = {
            let mut sessions = self.inner.registry.sessions();
            let live = sessions.entry(session.clone()).or_default();
            let mut displaced = None;
            if spec.role == ObserverRole::Claiming {
                if let Some(holder) = live.claimant {
                    if !spec.takeover {
                        return Err(RuntimeError::ClaimHeld {
                            session: session.clone(),
                            holder: format!("o{holder}"),
                        });
                    }
                    displaced = live.observers.remove(&holder);
                }
                live.claimant = Some(id);
                if let Some(grace) = live.grace.take() {
                    grace.abort();
                }
            }
            live.observers.insert(id, observer.clone());
            refresh_presence(live);
            displaced
        };
        let mut entries = Vec::new();
        if let Some(old) = displaced {
            entries.push(Payload::Lifecycle(LifecycleEvent::ObserverDetached {
                observer: old,
                because: DetachCause::Displaced,
            }));
        }
        let attached = Payload::Lifecycle(LifecycleEvent::ObserverAttached {
            observer: observer.clone(),
        });
        // A read-only follower changes nothing a replay needs: it goes to
        // the segment's trace file, not the journal (presence is counted
        // live either way).
        match spec.role {
            ObserverRole::Collecting => self.trace(session, &attached),
            ObserverRole::Claiming => entries.push(attached),
        }
        // Bookkeeping nobody waits on: committed with the session's next
        // write (a run's start, right after, in the chat and CLI paths) or
        // within the commit delay.
        if !entries.is_empty() {
            journal.defer(None, entries).await?;
        }
        Ok(Observation {
            sub: Source::Local(sub),
            guard: ObserverGuard {
                runtime: Arc::downgrade(&self.inner),
                session: session.clone(),
                id,
                observer,
                done: false,
            },
        })
    }

    /// An observer of a session another instance writes: it follows the
    /// store's rows; it claims nothing (a claim lives with the writer) and
    /// journals nothing.
    async fn relayed(
        &self,
        session: &SessionId,
        spec: AttachSpec,
        follower: Box<dyn crate::store::RelayFollower>,
    ) -> Result<Observation, RuntimeError> {
        if spec.role == ObserverRole::Claiming {
            return Err(RuntimeError::InvalidRequest(format!(
                "session {session} runs on another instance: a claim is made there (attach to any instance without claim to follow it)"
            )));
        }
        // It exists (the relay would wait forever on nothing).
        self.inner.store.head(session).await.map_err(|e| match e {
            StoreError::UnknownSession(s) => RuntimeError::UnknownSession(s),
            e => RuntimeError::from(e).for_session(session),
        })?;
        let id = NEXT_OBSERVER.fetch_add(1, Ordering::Relaxed);
        Ok(Observation {
            sub: Source::Relay(follower),
            guard: ObserverGuard {
                runtime: Weak::new(),
                session: session.clone(),
                id,
                observer: Observer {
                    id: format!("o{id}"),
                    role: spec.role,
                    present: spec.present,
                },
                done: true,
            },
        })
    }

    pub(crate) async fn detach(&self, session: &SessionId, id: u64, cause: DetachCause) {
        self.detach_with(session, id, cause, None).await
    }

    async fn detach_with(
        &self,
        session: &SessionId,
        id: u64,
        cause: DetachCause,
        policy: Option<LivenessPolicy>,
    ) {
        let (observer, exhausted) = {
            let mut sessions = self.inner.registry.sessions();
            let Some(live) = sessions.get_mut(session) else {
                return;
            };
            let Some(observer) = live.observers.remove(&id) else {
                return;
            };
            let was_claimant = live.claimant == Some(id);
            if was_claimant {
                live.claimant = None;
            }
            refresh_presence(live);
            (observer, if was_claimant { live.run.clone() } else { None })
        };
        let Ok(journal) = self.inner.journals.open(session).await else {
            return;
        };
        let role = observer.role;
        let detached = Payload::Lifecycle(LifecycleEvent::ObserverDetached {
            observer,
            because: cause,
        });
        match role {
            ObserverRole::Collecting => self.trace(session, &detached),
            ObserverRole::Claiming => {
                let _ = journal.defer(None, vec![detached]).await;
            }
        }
        let Some(run) = exhausted else { return };
        if journal
            .append(
                Some(run.run_id),
                Payload::Lifecycle(LifecycleEvent::ClaimsExhausted),
            )
            .await
            .is_err()
        {
            return;
        }
        self.start_grace(session, run, policy);
    }

    /// The grace window after the claims are exhausted; past it, unless a
    /// claimant attached, the liveness policy decides. The timer is
    /// registered before it can fire, so a claimant that attaches within
    /// the window can abort it.
    fn start_grace(
        &self,
        session: &SessionId,
        run: Arc<super::RunCtx>,
        policy: Option<LivenessPolicy>,
    ) {
        let rt = self.clone();
        let task_session = session.clone();
        // A claimant that handed the run over decided its policy: no window
        // for it to come back.
        let grace = match policy {
            Some(_) => Duration::ZERO,
            None => Duration::from_millis(run.liveness.grace_ms),
        };
        let mut sessions = self.inner.registry.sessions();
        let task = tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            rt.decide_liveness(&task_session, run, policy).await;
        });
        if let Some(live) = sessions.get_mut(session) {
            if live.claimant.is_some() {
                task.abort();
            } else if let Some(old) = live.grace.replace(task) {
                old.abort();
            }
        }
    }

    /// A restored run's claimants that died with the host: their lease
    /// runs `[store] lease_ttl_ms` from the restart (a client may come back
    /// and claim again); past it, while the run is still live, each is
    /// journaled detached (`expired`) and, unless a claimant attached
    /// meanwhile, the claims are exhausted and, after the grace window, the
    /// run's liveness policy decides — as when a live claimant leaves.
    pub(crate) async fn expire_lost_claimants(
        &self,
        session: &SessionId,
        lost: Vec<crate::journal::event::Observer>,
        run: crate::ids::RunId,
    ) {
        let run = {
            let sessions = self.inner.registry.sessions();
            sessions
                .get(session)
                .and_then(|l| l.run.clone())
                .filter(|r| r.run_id == run)
        };
        // Ended meanwhile: nothing left to decide.
        let Some(run) = run else {
            return;
        };
        let Ok(journal) = self.inner.journals.open(session).await else {
            return;
        };
        let detached: Vec<Payload> = lost
            .into_iter()
            .map(|observer| {
                Payload::Lifecycle(LifecycleEvent::ObserverDetached {
                    observer,
                    because: DetachCause::Expired,
                })
            })
            .collect();
        if journal.append_batch(None, detached).await.is_err() {
            return;
        }
        let claimed = {
            let sessions = self.inner.registry.sessions();
            sessions.get(session).is_some_and(|l| l.claimant.is_some())
        };
        if claimed
            || journal
                .append(
                    Some(run.run_id),
                    Payload::Lifecycle(LifecycleEvent::ClaimsExhausted),
                )
                .await
                .is_err()
        {
            return;
        }
        self.start_grace(session, run, None);
    }

    async fn decide_liveness(
        &self,
        session: &SessionId,
        run: Arc<super::RunCtx>,
        policy: Option<LivenessPolicy>,
    ) {
        {
            let mut sessions = self.inner.registry.sessions();
            let Some(live) = sessions.get_mut(session) else {
                return;
            };
            let still_live = live.run.as_ref().is_some_and(|r| r.run_id == run.run_id);
            if live.claimant.is_some() || !still_live {
                return;
            }
            live.grace = None;
        }
        let policy = policy.unwrap_or(run.liveness.policy);
        if run
            .journal
            .append(
                Some(run.run_id),
                Payload::Lifecycle(LifecycleEvent::LivenessDecided { policy }),
            )
            .await
            .is_err()
        {
            return;
        }
        match policy {
            LivenessPolicy::Cancel => {
                run.cancel(CancelReason::Unclaimed, "its last claimant detached")
            }
            LivenessPolicy::Continue => {}
            LivenessPolicy::Park => {
                run.request_park("its last claimant detached and the policy is park")
            }
        }
    }

    /// Observer counts of a session: (collecting, claiming, present).
    pub fn observer_counts(&self, session: &SessionId) -> (usize, usize, usize) {
        let sessions = self.inner.registry.sessions();
        sessions.get(session).map_or((0, 0, 0), |live| {
            let claiming = live
                .observers
                .values()
                .filter(|o| o.role == ObserverRole::Claiming)
                .count();
            let present = live.observers.values().filter(|o| o.present).count();
            (live.observers.len() - claiming, claiming, present)
        })
    }
}

impl Runtime {
    /// The detach of a claimant that leaves with the run ending now
    /// ([`Observation::leave_with_run`]), for the end's write: it is no
    /// longer an observer from here on.
    pub(crate) fn leaving_with_run(&self, session: &SessionId) -> Vec<Payload> {
        let mut sessions = self.inner.registry.sessions();
        let Some(live) = sessions.get_mut(session) else {
            return Vec::new();
        };
        let Some(id) = live.leaves_with_run.take() else {
            return Vec::new();
        };
        if live.claimant != Some(id) {
            return Vec::new();
        }
        let Some(observer) = live.observers.remove(&id) else {
            return Vec::new();
        };
        live.claimant = None;
        refresh_presence(live);
        vec![Payload::Lifecycle(LifecycleEvent::ObserverDetached {
            observer,
            because: DetachCause::Released,
        })]
    }
}

pub(super) fn refresh_presence(live: &mut SessionLive) {
    if let Some(run) = &live.run {
        run.set_present(live.observers.values().any(|o| o.present));
    }
}

impl Runtime {
    /// Append a diagnostic line to the session's active segment's trace
    /// file (`<segment>.trace.jsonl`, which `000_…` reserves for
    /// diagnostics): `{"at_ms", "payload"}`. Best effort, not synced: it is
    /// never read back as history.
    pub(super) fn trace(&self, session: &SessionId, payload: &Payload) {
        let Ok(worker) = self.open_worker_of(session) else {
            return;
        };
        let Ok(meta) = worker.metadata() else { return };
        let Ok(segments) = worker.session_dir().open_dir("segments") else {
            return;
        };
        let name = format!("{}.trace.jsonl", meta.active_segment);
        // One line, one write: formatting a JSON value straight into an
        // unbuffered file writes it a few bytes at a time.
        let mut line =
            serde_json::json!({ "at_ms": crate::fsutil::now_ms(), "payload": payload }).to_string();
        line.push('\n');
        if let Ok(mut f) = crate::fsutil::open_append(&segments, &name) {
            use std::io::Write;
            let _ = f.write_all(line.as_bytes());
        }
    }
}
