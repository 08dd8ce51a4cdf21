//! Leased observers (seed 002: "only an attachment that crosses a process
//! boundary is a lease with a TTL; that is where `Expired` comes from"). A
//! follower another instance serves from the store's rows (the relay), or
//! any client that holds presence over HTTP, leases an observer at the
//! session's holder by name and renews it within its TTL. The holder counts
//! it like any observer of the session (a present one routes decisions
//! conversationally); released, it is detached `released`; not renewed in
//! time — its instance died, its network went — it is detached `expired`.
//! A lease is collecting: a claim is made where the session is held.

use super::{Runtime, RuntimeError};
use crate::ids::SessionId;
use crate::journal::event::{DetachCause, LifecycleEvent, Observer, ObserverRole, Payload};
use std::sync::Arc;
use std::time::Duration;

/// The shortest lease.
pub const MIN_LEASE_TTL: Duration = Duration::from_millis(100);
/// The longest lease.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(300);

/// A leased observer, held in its session's live record.
pub(crate) struct Lease {
    /// Its observer's key in the session's observers.
    id: u64,
    /// Detaches it `expired` when its TTL runs out unrenewed.
    timer: tokio::task::JoinHandle<()>,
}

/// A lease as granted.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Leased {
    /// The observer, as its attach and detach are traced.
    pub observer: Observer,
    /// How long it lives unless renewed.
    pub ttl_ms: u64,
    /// Whether this call attached it (false: it renewed a lease).
    pub attached: bool,
}

/// Check a lease's name: 1 to 64 of `A-Z a-z 0-9 . _ : -`.
fn check_name(name: &str) -> Result<(), RuntimeError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(RuntimeError::InvalidRequest(format!(
            "an observer lease's name is 1 to 64 of A-Z, a-z, 0-9, '.', '_', ':' and '-'; {:?} is not",
            name.chars().take(80).collect::<String>()
        )))
    }
}

impl Runtime {
    /// Lease (or renew) the observer `name` of `session` for `ttl`.
    pub async fn lease_observer(
        &self,
        session: &SessionId,
        name: &str,
        present: bool,
        ttl: Duration,
    ) -> Result<Leased, RuntimeError> {
        check_name(name)?;
        if !(MIN_LEASE_TTL..=MAX_LEASE_TTL).contains(&ttl) {
            return Err(RuntimeError::InvalidRequest(format!(
                "an observer lease lives {} ms to {} s; {} ms asked",
                MIN_LEASE_TTL.as_millis(),
                MAX_LEASE_TTL.as_secs(),
                ttl.as_millis()
            )));
        }
        // The session exists here.
        self.open_worker_of(session)?;
        let observer = Observer {
            id: name.to_string(),
            role: ObserverRole::Collecting,
            present,
        };
        let attached = {
            let mut sessions = self.inner.registry.sessions();
            let live = sessions.entry(session.clone()).or_default();
            let id = match live.leases.get(name) {
                Some(lease) => lease.id,
                None => super::observers::next_observer_id(),
            };
            let attached = !live.leases.contains_key(name);
            let timer = self.expire_after(session, name, id, ttl);
            if let Some(old) = live.leases.insert(name.to_string(), Lease { id, timer }) {
                old.timer.abort();
            }
            live.observers.insert(id, observer.clone());
            super::observers::refresh_presence(live);
            attached
        };
        if attached {
            self.trace(
                session,
                &Payload::Lifecycle(LifecycleEvent::ObserverAttached {
                    observer: observer.clone(),
                }),
            );
        }
        Ok(Leased {
            observer,
            ttl_ms: ttl.as_millis() as u64,
            attached,
        })
    }

    /// Release the observer lease `name` of `session`: false when it held
    /// none by that name (released or expired already).
    pub async fn release_observer(
        &self,
        session: &SessionId,
        name: &str,
    ) -> Result<bool, RuntimeError> {
        check_name(name)?;
        self.open_worker_of(session)?;
        let lease = {
            let mut sessions = self.inner.registry.sessions();
            sessions
                .get_mut(session)
                .and_then(|live| live.leases.remove(name))
        };
        let Some(lease) = lease else {
            return Ok(false);
        };
        lease.timer.abort();
        self.detach(session, lease.id, DetachCause::Released).await;
        Ok(true)
    }

    /// The timer of lease `name` (observer `id`): past `ttl`, unless it
    /// was renewed or released meanwhile, it is detached `expired`.
    fn expire_after(
        &self,
        session: &SessionId,
        name: &str,
        id: u64,
        ttl: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(&self.inner);
        let (session, name) = (session.clone(), name.to_string());
        tokio::spawn(async move {
            tokio::time::sleep(ttl).await;
            let Some(inner) = weak.upgrade() else { return };
            let rt = Runtime { inner };
            let expired = {
                let mut sessions = rt.inner.registry.sessions();
                let Some(live) = sessions.get_mut(&session) else {
                    return;
                };
                // Renewed meanwhile, this timer would have been stopped;
                // the id guards against a lease released and made again.
                let mine = live.leases.get(&name).is_some_and(|l| l.id == id);
                if mine {
                    live.leases.remove(&name);
                }
                mine
            };
            if expired {
                rt.detach(&session, id, DetachCause::Expired).await;
            }
        })
    }
}
