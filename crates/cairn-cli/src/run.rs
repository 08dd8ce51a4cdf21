//! `cairn run`: one run in-process, claiming and present; Ctrl-C cancels.

use super::HomeArg;
use super::output;
use cairn_runtime::ids::WorkerId;
use cairn_runtime::journal::Delivery;
use cairn_runtime::journal::event::{CancelReason, LifecycleEvent, Payload, RunStatus};
use cairn_runtime::runtime::{AttachSpec, ComponentRef, Runtime, StartRun, Started};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

/// How `--decide` answers approvals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DecideArg {
    /// `{"approved": true}`.
    Approve,
    /// `{"approved": false}`.
    Deny,
}

/// `cairn run` arguments.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// A built-in example (echo, approval, sandbox-probe, bench-emit, delegate, agent) or the path of a component.
    component: String,
    /// The user's turn.
    #[arg(long, default_value = "")]
    prompt: String,
    #[command(flatten)]
    home: HomeArg,
    /// Continue an existing worker: next generation, same session.
    #[arg(long, value_name = "WORKER_ID")]
    worker: Option<WorkerId>,
    /// Print one JSON journal line per event instead of text.
    #[arg(long)]
    json: bool,
    /// Answer approval requests without asking.
    #[arg(long, value_enum)]
    decide: Option<DecideArg>,
    /// Cancel the run after this many milliseconds.
    #[arg(long, value_name = "MS")]
    timeout_ms: Option<u64>,
}

/// How a run went, for the caller's exit code.
pub struct Ran {
    /// Its start.
    pub started: Started,
    /// Its final status.
    pub status: RunStatus,
    /// The one-line reason.
    pub reason: String,
}

pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let rt = crate::open_runtime(args.home.runtime_config("run")?).await?;
    let mut req = StartRun::new(ComponentRef::parse(&args.component), args.prompt);
    req.worker = args.worker;
    req.timeout_ms = args.timeout_ms;
    req.liveness.policy = cairn_runtime::journal::event::LivenessPolicy::Cancel;
    // It waits for the run anyway: a short run is one write, one sync.
    req.first_commit = cairn_runtime::runtime::FirstCommit::WithRun;
    let ran = match run_once(&rt, req, args.json, args.decide, &mut std::io::stdout()).await {
        Ok(ran) => ran,
        Err(e) => {
            // Stdout closed (`| head`), or the journal failed: stop the
            // run (and any child it spawned) before the process ends, so
            // nothing is torn down under a running controller.
            rt.shutdown(std::time::Duration::from_secs(5)).await;
            return Err(e);
        }
    };
    // Children this run spawned may still be live: they end with the process.
    rt.shutdown(std::time::Duration::from_secs(5)).await;
    for note in rt.recovery_notes() {
        eprintln!("cairn: note: {note}");
    }
    if ran.status == RunStatus::Finished {
        if !args.json {
            println!("journal: {}", journal_path(&rt, &ran.started)?);
        }
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("cairn: run {} {}", ran.started.run_id, ran.reason);
        Ok(ExitCode::from(1))
    }
}

/// Where a run's journal is (its active segment's file on the home).
pub fn journal_path(rt: &Runtime, started: &Started) -> anyhow::Result<String> {
    rt.journal_location(&started.session_id)
        .ok_or_else(|| anyhow::anyhow!("session {} has no journal to point at", started.session_id))
}

/// Start a run, print its events until it ends, answer its decisions.
pub async fn run_once(
    rt: &Runtime,
    mut req: StartRun,
    json: bool,
    decide: Option<DecideArg>,
    out: &mut (impl Write + Send),
) -> anyhow::Result<Ran> {
    // Claim the session and be present before the run starts, so the claim
    // (and the conversational route for decisions) holds from its first event.
    // A component that cannot be used leaves nothing behind: it is
    // resolved before a session is made for it.
    if let Some(component) = &req.component {
        rt.add_component(component).await?;
    }
    // A session made here is started by its worker (no lookup to repeat).
    let (session, made) = match (req.worker, &req.session) {
        (Some(worker), _) => (rt.session_of_worker(worker)?, None),
        (None, Some(session)) => (session.clone(), None),
        (None, None) => {
            let (session, worker) = rt
                .create_session_first(None, rt.default_workspace())
                .await?;
            (session, Some(worker))
        }
    };
    let after = rt.minted_seq(&session).await?;
    let mut sub = rt
        .attach(&session, AttachSpec::claiming_present(after))
        .await?;
    sub.leave_with_run();
    req.session = Some(session);
    req.worker = made;
    let started = rt.start(req).await?;
    if !json {
        writeln!(
            out,
            "run {} · {} {} · worker {} · session {}",
            started.run_id,
            started.info.name,
            started.info.version,
            started.worker_id,
            started.session_id
        )?;
    }
    let mut refused_decision: Option<String> = None;
    // Once entries were missed, the run's end may be among them: the run
    // ending is then enough to stop following (its end read from the store).
    let mut missed = false;
    loop {
        let delivery: Option<Result<Delivery, cairn_runtime::store::StoreError>> = tokio::select! {
            d = sub.next() => d,
            facts = rt.wait(started.run_id), if missed => {
                let facts = facts?;
                let reason = match rt.read(&started.session_id, after).await {
                    Ok(items) => items
                        .iter()
                        .filter_map(|i| i.event())
                        .filter(|e| e.run_id == Some(started.run_id))
                        .find_map(|e| match &e.payload {
                            Payload::Lifecycle(t) if t.is_terminal() => {
                                Some(cairn_runtime::runtime::describe_terminal(t))
                            }
                            _ => None,
                        }),
                    Err(_) => None,
                };
                return Ok(Ran {
                    started,
                    status: facts.status,
                    reason: refused_decision.or(reason).unwrap_or_else(|| {
                        let status = serde_json::to_value(facts.status).unwrap_or_default();
                        format!("the run ended ({}) while its entries were missed", status.as_str().unwrap_or("?"))
                    }),
                });
            }
            _ = tokio::signal::ctrl_c() => {
                let _ = rt.cancel(started.run_id, CancelReason::External, "interrupted (Ctrl-C)");
                continue;
            }
        };
        let Some(delivery) = delivery else {
            anyhow::bail!(
                "the journal of session {} closed before the run ended",
                started.session_id
            );
        };
        let delivery = delivery?;
        if json {
            writeln!(out, "{}", output::json(&delivery))?;
        } else {
            writeln!(out, "{}", output::delivery(&delivery))?;
        }
        out.flush()?;
        let Delivery::Event(event) = delivery else {
            missed |= matches!(delivery, Delivery::Gap { .. });
            continue;
        };
        if event.run_id != Some(started.run_id) {
            continue;
        }
        match &event.payload {
            Payload::Lifecycle(LifecycleEvent::DecisionRequested {
                decision_id,
                prompt,
                ..
            }) => {
                let value = match decide {
                    Some(DecideArg::Approve) => Some(serde_json::json!({ "approved": true })),
                    Some(DecideArg::Deny) => Some(serde_json::json!({ "approved": false })),
                    None if std::io::stdin().is_terminal() && !json => {
                        Some(ask(prompt.clone()).await?)
                    }
                    None => None,
                };
                match value {
                    Some(v) => rt.decide(decision_id, v).await?,
                    None => {
                        let why = "a decision was requested, but no --decide was given and stdin is not a terminal";
                        refused_decision = Some(why.to_string());
                        rt.cancel(started.run_id, CancelReason::External, why)?;
                    }
                }
            }
            Payload::Lifecycle(terminal) if terminal.is_terminal() => {
                let facts = event.facts.clone().expect("terminal events carry facts");
                let reason = refused_decision
                    .unwrap_or_else(|| cairn_runtime::runtime::describe_terminal(terminal));
                return Ok(Ran {
                    started,
                    status: facts.status,
                    reason,
                });
            }
            _ => {}
        }
    }
}

async fn ask(prompt: String) -> anyhow::Result<serde_json::Value> {
    tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        loop {
            eprint!("approve {prompt:?}? [y/n] ");
            line.clear();
            if std::io::stdin().read_line(&mut line)? == 0 {
                return Ok(
                    serde_json::json!({ "approved": false, "reason": "no answer (end of input)" }),
                );
            }
            match line.trim().to_lowercase().as_str() {
                "y" | "yes" => return Ok(serde_json::json!({ "approved": true })),
                "n" | "no" => return Ok(serde_json::json!({ "approved": false })),
                _ => eprintln!("answer y or n"),
            }
        }
    })
    .await?
}
