//! Durable timers: `wasi:clocks/monotonic-clock` over wasmtime-wasi's, so a
//! timer's readiness is an input the journal decides (issue 35, item 4).
//!
//! A timer the guest sets (`subscribe-duration`, `subscribe-instant`) gets
//! the next number of the run and a due time in wall milliseconds (now, in
//! real time, plus its duration). The first time it is waited on, the host
//! journals `timer_set {timer, due_ms}`; when it is ready at the guest's
//! `checks`-th look (`ready()`, `block()`, or a `poll` it is part of), the
//! host journals `timer_fired {timer, checks}` and the run's clocks move to
//! its due time — so `elapsed()` across a sleep is (at least) the sleep. A
//! replay answers each look from the journal: not ready before the
//! journaled look, ready at it, no waiting; a restore whose journal set a
//! timer but never fired it waits until its journaled due time, not a
//! whole duration again. A zero duration (the usual "poll without
//! blocking") is ready at its second look and journals nothing.

use crate::HostState;
pub use crate::host::TimerState;
use crate::host::{RunHost, wall_ms};
use std::sync::Arc;
use std::time::Duration;
use wasmtime::component::{HasData, Resource};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock;

/// One timer of a run.
struct Timer {
    /// Its number in the run (from 1); 0 for a zero duration.
    id: u64,
    /// When it is due, as set (a replay takes the journal's).
    due_ms: u64,
    /// Looks so far.
    checks: u64,
    /// The run's host (none in `describe()`: ready at once).
    host: Option<Arc<dyn RunHost>>,
}

impl Drop for Timer {
    fn drop(&mut self) {
        if let (Some(host), true) = (&self.host, self.id > 0) {
            host.timer_dropped(self.id);
        }
    }
}

#[async_trait::async_trait]
impl wasmtime_wasi::p2::Pollable for Timer {
    async fn ready(&mut self) {
        self.checks += 1;
        let Some(host) = self.host.clone() else {
            return;
        };
        if self.id == 0 {
            // Ready at the second look, as wasmtime-wasi's past deadline
            // is; a blocking wait yields once first.
            if self.checks == 1 {
                tokio::task::yield_now().await;
            }
            return;
        }
        loop {
            match host.timer(self.id, self.due_ms, self.checks).await {
                TimerState::Fired => return,
                TimerState::Wait(d) => {
                    // Dropped with the future when another pollable of the
                    // same `poll` answers first.
                    let _blocked = Blocked::new(&host, self.id);
                    tokio::time::sleep(d).await
                }
                TimerState::NotYet => {
                    // A look the journal answers "not ready": a blocking
                    // wait goes on only while the run may (a replay that
                    // diverged or a cancelled run is ended by its host).
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    if host.should_trap() {
                        return;
                    }
                }
            }
        }
    }
}

/// A guest blocked in a timer's wait, told to the host from its start
/// to its end (see [`RunHost::timer_blocked`]).
struct Blocked<'a> {
    host: &'a Arc<dyn RunHost>,
    id: u64,
}

impl<'a> Blocked<'a> {
    fn new(host: &'a Arc<dyn RunHost>, id: u64) -> Self {
        host.timer_blocked(id, true);
        Blocked { host, id }
    }
}

impl Drop for Blocked<'_> {
    fn drop(&mut self) {
        self.host.timer_blocked(self.id, false);
    }
}

/// The monotonic clock over a run's store.
pub(crate) struct Clock<'a>(&'a mut HostState);

/// The `HasData` of [`Clock`].
pub(crate) struct ClockData;

impl HasData for ClockData {
    type Data<'a> = Clock<'a>;
}

impl Clock<'_> {
    fn subscribe(&mut self, duration_ns: u64) -> wasmtime::Result<Resource<DynPollable>> {
        let state = &mut *self.0;
        let id = if duration_ns == 0 {
            0
        } else {
            state.timers += 1;
            state.timers
        };
        let due_ms = wall_ms().saturating_add(duration_ns.div_ceil(1_000_000));
        let timer = state.table.push(Timer {
            id,
            due_ms,
            checks: 0,
            host: state.host.clone(),
        })?;
        wasmtime_wasi::p2::subscribe(&mut state.table, timer)
    }

    fn now_ns(&mut self) -> u64 {
        use wasmtime_wasi::HostMonotonicClock;
        self.0.clock.as_ref().map_or(0, |c| c.now())
    }
}

impl monotonic_clock::Host for Clock<'_> {
    fn now(&mut self) -> wasmtime::Result<monotonic_clock::Instant> {
        Ok(self.now_ns())
    }

    fn resolution(&mut self) -> wasmtime::Result<monotonic_clock::Instant> {
        Ok(1_000_000)
    }

    fn subscribe_instant(
        &mut self,
        when: monotonic_clock::Instant,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let now = self.now_ns();
        self.subscribe(when.saturating_sub(now))
    }

    fn subscribe_duration(
        &mut self,
        duration: monotonic_clock::Duration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.subscribe(duration)
    }
}

/// Link this clock over wasmtime-wasi's (the linker allows shadowing).
pub(crate) fn add_to_linker(
    linker: &mut wasmtime::component::Linker<HostState>,
) -> wasmtime::Result<()> {
    monotonic_clock::add_to_linker::<HostState, ClockData>(linker, |s| Clock(s))
}
