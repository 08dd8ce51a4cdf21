//! One run of a controller: its sandboxed store, the instance, the call.

use super::*;

impl Components {
    /// Instantiate `prepared` for one run and call `run(start)`.
    pub fn run<'a>(
        &'a self,
        prepared: &'a Prepared,
        sandbox: Sandbox,
        start: RunStart,
    ) -> impl Future<Output = Result<Outcome, RunTrap>> + 'a {
        // Built outside the future: what only the setup uses (the WASI
        // builder, the sandbox) is not kept in it while the controller
        // runs, or waits for days.
        let store = self.sandboxed(prepared, sandbox, start.seed);
        async move {
            let mut store = store?;
            let setup = |e: wasmtime::Error| RunTrap::Setup(format!("{e:#}"));
            let trap = |e: wasmtime::Error| {
                let full = e.chain().any(|cause| {
                    matches!(
                        cause.downcast_ref::<wasmtime::component::ResourceTableError>(),
                        Some(wasmtime::component::ResourceTableError::Full)
                    )
                });
                match full {
                    true => RunTrap::TableFull(trap_message(&e)),
                    false => RunTrap::Trap(trap_message(&e)),
                }
            };
            // One conversion for both worlds: their records have the same shape
            // but are distinct types.
            macro_rules! call_run {
            ($pre:expr, $types:path, { $($extra:tt)* }) => {{
                use $types as t;
                let instance = $pre.instantiate_async(&mut store).await.map_err(setup)?;
                if let Some(host) = &store.data().host {
                    host.instantiated();
                }
                let wit_start = t::Start {
                    run_id: start.run_id.to_string(),
                    session_id: start.session_id.to_string(),
                    worker_id: start.worker_id.to_string(),
                    generation: start.generation.0,
                    prompt: start.prompt,
                    continues: start.continues.map(|r| r.to_string()),
                    checkpoint: start.checkpoint,
                    $($extra)*
                };
                match instance.call_run(&mut store, &wit_start).await.map_err(trap)? {
                    t::Outcome::Finished(t) => Outcome::Finished(t),
                    t::Outcome::Question(t) => Outcome::Question(t),
                    t::Outcome::Parked(b) => Outcome::Parked(b),
                    t::Outcome::Failed(e) => Outcome::Failed {
                        code: e.code,
                        message: e.message,
                    },
                }
            }};
        }
            Ok(match &prepared.pre {
                Pre::V1(pre) => call_run!(pre, bindings::types, {}),
                Pre::V2(pre) => call_run!(pre, bindings::v2::types, { tools: start.tools }),
            })
        }
    }

    /// The run's store: WASI over its sandbox, the limiter, the CPU meter.
    fn sandboxed(
        &self,
        prepared: &Prepared,
        sandbox: Sandbox,
        seed: u64,
    ) -> Result<Store<HostState>, RunTrap> {
        let mut wasi = wasmtime_wasi::WasiCtxBuilder::new();
        // A controller that imports no wasi:filesystem cannot see its `/`:
        // nothing to open (its generation may have no `artifacts/`).
        if prepared.opens_files() {
            wasi.preopened_dir(&sandbox.artifacts, "/", wasmtime_wasi::FsPerms::ReadWrite)
                .map_err(|e| RunTrap::Setup(format!("cannot preopen artifacts/: {e:#}")))?;
        }
        if let Some(loan) = &sandbox.loan {
            // The open handle, never the scope's name: a rename or a link
            // the parent makes meanwhile cannot move it.
            let path = crate::fs::handle_path(loan).map_err(RunTrap::Setup)?;
            wasi.preopened_dir(&path, "/loan", wasmtime_wasi::FsPerms::ReadWrite)
                .map_err(|e| RunTrap::Setup(format!("cannot preopen the loaned scope: {e:#}")))?;
        }
        let log_bytes = sandbox.limits.log_bytes;
        wasi.stdout(limiter::CappedLog::new(
            sandbox.stdout,
            log_bytes,
            sandbox.host.clone(),
        ));
        wasi.stderr(limiter::CappedLog::new(
            sandbox.stderr,
            log_bytes,
            sandbox.host.clone(),
        ));
        // Every random source the guest can reach derives from the journaled
        // seed, so replay reproduces it.
        wasi.insecure_random_seed(u128::from(seed));
        wasi.insecure_random(clock::JournalRng::new(b"insecure", seed));
        wasi.secure_random(clock::seeded_rng(seed));
        wasi.wall_clock(sandbox.clock.clone());
        wasi.monotonic_clock(sandbox.clock.clone());
        let mut table = ResourceTable::new();
        // Each open file is a host descriptor: a run holds at most this many.
        table.set_max_capacity(usize::try_from(sandbox.limits.open_files).unwrap_or(usize::MAX));
        let state = HostState {
            wasi: wasi.build(),
            table,
            limits: limiter::Limiter::new(sandbox.limits, Some(sandbox.host.clone())),
            host: Some(sandbox.host.clone()),
            artifacts: sandbox.meter.clone(),
            tools: None,
            http: http::Http::new(Some(sandbox.host.clone()), sandbox.limits.http_body_bytes),
            listings: Default::default(),
            clock: Some(sandbox.clock.clone()),
            timers: 0,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(1);
        let host = sandbox.host.clone();
        let cpu_ms = sandbox.limits.cpu_ms;
        let mut meter = cpu::Meter::new(self.cpu.clone(), host.tenant());
        // Every tick inside guest code is charged to the run: past
        // `cpu_ms` it ends, past a while it takes turns with other long runs.
        store.epoch_deadline_callback(move |_| {
            if host.should_trap() {
                return Ok(wasmtime::UpdateDeadline::Interrupt);
            }
            let charge = meter.tick();
            let used = meter.used_ms();
            if used > cpu_ms {
                host.limit_broken("cpu_ms", used, cpu_ms);
                return Ok(wasmtime::UpdateDeadline::Interrupt);
            }
            Ok(match charge {
                cpu::Charge::Yield => wasmtime::UpdateDeadline::Yield(1),
                cpu::Charge::Turn(turn) => wasmtime::UpdateDeadline::YieldCustom(1, turn),
            })
        });
        Ok(store)
    }
}

fn trap_message(e: &wasmtime::Error) -> String {
    if let Some(failure) = e.downcast_ref::<HostFailure>() {
        return failure.to_string();
    }
    if let Some(trap) = e.downcast_ref::<wasmtime::Trap>() {
        return format!("the controller trapped: {trap}");
    }
    format!("{e:#}")
}
