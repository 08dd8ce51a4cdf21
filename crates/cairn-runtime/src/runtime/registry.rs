//! What this runtime holds live — sessions' observers, claims and live
//! runs, the runs it hosts, draft sessions, the runs restored at open —
//! in one registry behind one lock. Never serialized; a restart has none
//! of it. Callers take the part they need for one short critical section
//! (no await while held) and never two parts at once.

use super::{LiveRecord, SessionLive};
use crate::ids::{RunId, SessionId};
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard};

/// Everything the registry holds.
#[derive(Default)]
pub(crate) struct Live {
    pub sessions: HashMap<SessionId, SessionLive>,
    pub runs: HashMap<RunId, LiveRecord>,
    /// Draft sessions: a stable id in memory, with its workspace.
    pub drafts: HashMap<SessionId, String>,
    pub restored: Vec<RunId>,
    /// Sessions given a live run since the last count (a start counts the
    /// workspace's live runs from here, not from every session it holds,
    /// and drops those whose run ended).
    pub running: std::collections::HashSet<SessionId>,
    /// Workers just made for a caller whose start follows (a chat call
    /// creates, attaches, then starts): that start takes its handles
    /// instead of opening the worker again. A few at most; a delete takes
    /// its worker's out first.
    pub made: std::collections::VecDeque<crate::worker::WorkerDir>,
}

/// How many just-made workers [`Live::made`] keeps (the oldest goes).
pub(crate) const MADE_KEPT: usize = 16;

/// The one lock.
#[derive(Default)]
pub(crate) struct Registry {
    live: Mutex<Live>,
}

/// One part of the registry, the lock held while it lives.
pub(crate) struct Part<'a, T> {
    guard: MutexGuard<'a, Live>,
    get: fn(&Live) -> &T,
    get_mut: fn(&mut Live) -> &mut T,
}

impl<T> Deref for Part<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        (self.get)(&self.guard)
    }
}

impl<T> DerefMut for Part<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        (self.get_mut)(&mut self.guard)
    }
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Live sessions.
    pub fn sessions(&self) -> Part<'_, HashMap<SessionId, SessionLive>> {
        Part {
            guard: self.lock(),
            get: |l| &l.sessions,
            get_mut: |l| &mut l.sessions,
        }
    }

    /// Every part at once (a start, which counts live runs as it takes one).
    pub fn all(&self) -> MutexGuard<'_, Live> {
        self.lock()
    }

    /// Runs hosted here (live, or ended within the retention window).
    pub fn runs(&self) -> Part<'_, HashMap<RunId, LiveRecord>> {
        Part {
            guard: self.lock(),
            get: |l| &l.runs,
            get_mut: |l| &mut l.runs,
        }
    }

    /// Draft sessions and their workspaces.
    pub fn drafts(&self) -> Part<'_, HashMap<SessionId, String>> {
        Part {
            guard: self.lock(),
            get: |l| &l.drafts,
            get_mut: |l| &mut l.drafts,
        }
    }

    /// Workers just made, for the start that follows.
    pub fn made(&self) -> Part<'_, std::collections::VecDeque<crate::worker::WorkerDir>> {
        Part {
            guard: self.lock(),
            get: |l| &l.made,
            get_mut: |l| &mut l.made,
        }
    }

    /// Runs restored when the runtime opened.
    pub fn restored(&self) -> Part<'_, Vec<RunId>> {
        Part {
            guard: self.lock(),
            get: |l| &l.restored,
            get_mut: |l| &mut l.restored,
        }
    }
}
