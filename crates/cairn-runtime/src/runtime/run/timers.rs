//! A run's durable timers, the host side of `cairn_component::timers`: what
//! the journal says of each (`timer_set`, `timer_fired`), and the answer to
//! each look the guest takes at one.

use super::RunCtx;
use crate::SessionEvent;
use crate::component::timers::TimerState;
use crate::ids::RunId;
use crate::journal::event::{LifecycleEvent, Payload};
use std::collections::HashMap;
use std::time::Duration;

/// One timer as journaled or set.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rec {
    /// Its due time: the journal's, or as set live.
    due_ms: Option<u64>,
    /// Whether its `timer_set` is journaled.
    set: bool,
    /// The look it fired at, when it did.
    fired: Option<u64>,
}

/// A run's timers.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    recs: HashMap<u64, Rec>,
    /// An offline replay: a timer the journal never fired never fires.
    offline: bool,
}

impl Timers {
    /// The timers `run`'s journal names.
    pub(crate) fn of_run(events: &[SessionEvent], run: RunId, offline: bool) -> Timers {
        let mut recs: HashMap<u64, Rec> = HashMap::new();
        for e in events.iter().filter(|e| e.run_id == Some(run)) {
            match &e.payload {
                Payload::Lifecycle(LifecycleEvent::TimerSet { timer, due_ms }) => {
                    let r = recs.entry(*timer).or_default();
                    r.due_ms = Some(*due_ms);
                    r.set = true;
                }
                Payload::Lifecycle(LifecycleEvent::TimerFired { timer, checks }) => {
                    recs.entry(*timer).or_default().fired = Some(*checks);
                }
                _ => {}
            }
        }
        Timers { recs, offline }
    }
}

impl RunCtx {
    /// The `check`-th look at timer `id` (due at `due_ms` as the guest set
    /// it now; a journaled due time wins).
    pub(super) fn timer_look(&self, id: u64, due_ms: u64, check: u64) -> TimerState {
        let mut timers = self.timers.lock().unwrap_or_else(|p| p.into_inner());
        let offline = timers.offline;
        let rec = timers.recs.entry(id).or_default();
        let due = *rec.due_ms.get_or_insert(due_ms);
        if let Some(at) = rec.fired {
            if check < at {
                // Replayed, not ready yet: the run is not idle.
                drop(timers);
                self.timer_pending(id, due);
                return TimerState::NotYet;
            }
            drop(timers);
            self.advance_clock(due);
            self.timer_done(id);
            return TimerState::Fired;
        }
        if offline {
            return TimerState::NotYet;
        }
        let mut entries = Vec::new();
        if !rec.set {
            entries.push(LifecycleEvent::TimerSet {
                timer: id,
                due_ms: due,
            });
        }
        let now = crate::fsutil::now_ms();
        let fires = now >= due;
        if fires {
            entries.push(LifecycleEvent::TimerFired {
                timer: id,
                checks: check,
            });
        }
        if !entries.is_empty() {
            // Minted now, in the guest's order (a later emit is committed
            // after it); a look that finds the journal busy is a look that
            // was not ready, which the journaled count says.
            let payloads: Vec<Payload> = entries.into_iter().map(Payload::Lifecycle).collect();
            let sizes: Vec<u64> = payloads
                .iter()
                .map(|p| p.kind().len() as u64 + 96)
                .collect();
            if self
                .journal
                .try_defer(Some(self.run_id), payloads)
                .is_none()
            {
                drop(timers);
                self.timer_pending(id, due);
                return TimerState::Wait(Duration::from_millis(1));
            }
            // Counted like every journaled byte: past a limit the run ends.
            let _ = self.admit(&sizes);
            rec.set = true;
            if fires {
                rec.fired = Some(check);
            }
        }
        drop(timers);
        if fires {
            self.advance_clock(due);
            self.timer_done(id);
            TimerState::Fired
        } else {
            // A long wait lets the task evict the instance meanwhile.
            self.timer_waits(id, due, now);
            TimerState::Wait(Duration::from_millis(due - now))
        }
    }
}
