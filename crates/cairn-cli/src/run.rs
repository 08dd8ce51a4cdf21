//! `cairn run`: one run in-process, claiming and present; Ctrl-C cancels.

use super::HomeArg;
use super::output;
use cairn_runtime::ids::WorkerId;
use cairn_runtime::journal::Delivery;
use cairn_runtime::journal::event::{
    CancelReason, LifecycleEvent, Payload, RequestKind, RunStatus,
};
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
    /// Answer approval requests without asking (`--answer approval=approve`).
    #[arg(long, value_enum)]
    decide: Option<DecideArg>,
    /// Answer every decision of KIND (approval, tool_result, answer) with
    /// JSON, without asking; repeatable. `approval=approve` and
    /// `approval=deny` stand for `{"approved": true|false}`.
    #[arg(long = "answer", value_name = "KIND=JSON")]
    answer: Vec<String>,
    /// Answer decisions in order from FILE, a JSON list of
    /// `{"kind": KIND, "value": JSON}`, one per decision, each checked
    /// against the kind asked (before any `--answer`).
    #[arg(long = "answers", value_name = "FILE")]
    answers: Option<std::path::PathBuf>,
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
    let mut answers = Answers::parse(args.decide, &args.answer, args.answers.as_deref())?;
    let ran = match run_once(&rt, req, args.json, &mut answers, &mut std::io::stdout()).await {
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
    answers: &mut Answers,
    out: &mut (impl Write + Send),
) -> anyhow::Result<Ran> {
    // Claim the session and be present before the run starts, so the claim
    // (and the conversational route for decisions) holds from its first event.
    // A component that cannot be used leaves nothing behind: it is
    // resolved before a session is made for it.
    if let Some(component) = &req.component {
        load_component(rt, component).await?;
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
                request_kind,
                prompt,
                ..
            }) => {
                let value = match answers.next(*request_kind) {
                    Ok(Some(v)) => Ok(v),
                    Ok(None) if std::io::stdin().is_terminal() && !json => {
                        // Asked on the terminal while the run goes on: the
                        // answer may come from elsewhere first (`cairn
                        // decide` through the run's socket).
                        let (rt, id, kind, prompt) = (
                            rt.clone(),
                            decision_id.clone(),
                            *request_kind,
                            prompt.clone(),
                        );
                        tokio::spawn(async move {
                            let answered = match ask(kind, prompt).await {
                                Ok(v) => rt.decide(&id, v).await.map_err(anyhow::Error::from),
                                Err(e) => Err(e),
                            };
                            if let Err(e) = answered {
                                eprintln!("cairn: decision {id}: {e}");
                            }
                        });
                        continue;
                    }
                    Ok(None) => Err(format!(
                        "a decision ({}) was requested, but no --decide, --answer or --answers was given for it and stdin is not a terminal",
                        kind_name(*request_kind)
                    )),
                    Err(why) => Err(why),
                };
                match value {
                    Ok(v) => rt.decide(decision_id, v).await?,
                    Err(why) => {
                        rt.cancel(started.run_id, CancelReason::External, &why)?;
                        refused_decision = Some(why);
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

/// Load (compile, or take from the home's cache) the run's component,
/// saying on stderr what takes time: a big component's first compile is
/// tens of seconds, and a silent wait looks like a hang.
async fn load_component(rt: &Runtime, component: &ComponentRef) -> anyhow::Result<()> {
    let what = match component {
        ComponentRef::Path(p) => {
            let size = std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            format!(
                "{} ({:.1} MB)",
                name.unwrap_or_else(|| p.display().to_string()),
                size as f64 / 1e6
            )
        }
        ComponentRef::BuiltIn(n) => n.clone(),
        ComponentRef::Digest(d) => d.clone(),
        ComponentRef::Bytes(b) => format!("a component ({:.1} MB)", b.len() as f64 / 1e6),
    };
    let started = std::time::Instant::now();
    let said = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let note = {
        let (said, what) = (said.clone(), what.clone());
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            said.store(true, std::sync::atomic::Ordering::SeqCst);
            eprintln!("cairn: compiling {what} … (once: the home keeps the compiled code)");
        })
    };
    let loaded = rt.add_component(component).await;
    note.abort();
    if said.load(std::sync::atomic::Ordering::SeqCst) {
        eprintln!(
            "cairn: compiled {what} in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    loaded?;
    Ok(())
}

/// How `cairn run` answers decisions without asking: `--answers FILE` in
/// order, then `--answer KIND=JSON`, then `--decide` for approvals.
#[derive(Debug, Default)]
pub struct Answers {
    queue: std::collections::VecDeque<(RequestKind, serde_json::Value)>,
    file: Option<String>,
    by_kind: Vec<(RequestKind, serde_json::Value)>,
}

fn kind_name(kind: RequestKind) -> &'static str {
    match kind {
        RequestKind::Approval => "approval",
        RequestKind::ToolResult => "tool_result",
        RequestKind::Answer => "answer",
    }
}

fn kind_of(name: &str) -> anyhow::Result<RequestKind> {
    Ok(match name {
        "approval" => RequestKind::Approval,
        "tool_result" | "tool-result" => RequestKind::ToolResult,
        "answer" => RequestKind::Answer,
        other => {
            anyhow::bail!("{other:?} is not a decision kind: say approval, tool_result or answer")
        }
    })
}

impl Answers {
    /// Approve every approval (what the demo does).
    pub fn approving() -> Self {
        Answers {
            by_kind: vec![(
                RequestKind::Approval,
                serde_json::json!({ "approved": true }),
            )],
            ..Answers::default()
        }
    }

    /// From the flags; a malformed one is an error naming it.
    pub fn parse(
        decide: Option<DecideArg>,
        answer: &[String],
        file: Option<&std::path::Path>,
    ) -> anyhow::Result<Self> {
        let mut out = Answers::default();
        for a in answer {
            let Some((kind, json)) = a.split_once('=') else {
                anyhow::bail!(
                    "--answer {a:?}: write KIND=JSON, such as answer='\"yes\"' or approval=approve"
                );
            };
            let kind = kind_of(kind.trim()).map_err(|e| anyhow::anyhow!("--answer {a:?}: {e}"))?;
            let value = match (kind, json.trim()) {
                (RequestKind::Approval, "approve") => serde_json::json!({ "approved": true }),
                (RequestKind::Approval, "deny") => serde_json::json!({ "approved": false }),
                (_, text) => serde_json::from_str(text).map_err(|e| {
                    anyhow::anyhow!("--answer {a:?}: the value is not JSON ({e}); a string is written with quotes: answer='\"yes\"'")
                })?,
            };
            out.by_kind.retain(|(k, _)| *k != kind);
            out.by_kind.push((kind, value));
        }
        if let Some(d) = decide
            && !out.by_kind.iter().any(|(k, _)| *k == RequestKind::Approval)
        {
            out.by_kind.push((
                RequestKind::Approval,
                serde_json::json!({ "approved": d == DecideArg::Approve }),
            ));
        }
        if let Some(path) = file {
            let name = path.display().to_string();
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("--answers {name}: {e}"))?;
            let list: Vec<serde_json::Value> = serde_json::from_str(&text).map_err(|e| {
                anyhow::anyhow!(
                    "--answers {name}: not a JSON list of {{\"kind\", \"value\"}} ({e})"
                )
            })?;
            for (i, item) in list.into_iter().enumerate() {
                let kind = item["kind"].as_str().ok_or_else(|| {
                    anyhow::anyhow!("--answers {name}: item {} has no \"kind\"", i + 1)
                })?;
                let kind = kind_of(kind)
                    .map_err(|e| anyhow::anyhow!("--answers {name}: item {}: {e}", i + 1))?;
                let Some(value) = item.get("value").cloned() else {
                    anyhow::bail!("--answers {name}: item {} has no \"value\"", i + 1);
                };
                out.queue.push_back((kind, value));
            }
            out.file = Some(name);
        }
        Ok(out)
    }

    /// The answer to the next decision, of `kind`: `Ok(None)` when nothing
    /// given answers it; `Err` when the file's next answer is for another
    /// kind (the run stops: its answers are out of step).
    pub fn next(&mut self, kind: RequestKind) -> Result<Option<serde_json::Value>, String> {
        if let Some((k, _)) = self.queue.front() {
            if *k != kind {
                return Err(format!(
                    "the run asked for a decision of kind {}, and the next answer in {} is for {}",
                    kind_name(kind),
                    self.file.as_deref().unwrap_or("--answers"),
                    kind_name(*k)
                ));
            }
            return Ok(self.queue.pop_front().map(|(_, v)| v));
        }
        Ok(self
            .by_kind
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, v)| v.clone()))
    }
}

async fn ask(kind: RequestKind, prompt: String) -> anyhow::Result<serde_json::Value> {
    if kind != RequestKind::Approval {
        return ask_json(kind, prompt).await;
    }
    tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        loop {
            eprint!("approve \"{prompt}\"? [y/n] ");
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

/// Ask on the terminal for a tool's result or an answer: JSON, or for an
/// answer plain text (taken as a string).
async fn ask_json(kind: RequestKind, prompt: String) -> anyhow::Result<serde_json::Value> {
    tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        loop {
            match kind {
                RequestKind::ToolResult => eprint!("the result of \"{prompt}\" (JSON): "),
                _ => eprint!("answer \"{prompt}\" (JSON, or text): "),
            }
            line.clear();
            if std::io::stdin().read_line(&mut line)? == 0 {
                anyhow::bail!("no answer to \"{prompt}\" (end of input)");
            }
            let text = line.trim();
            match serde_json::from_str::<serde_json::Value>(text) {
                Ok(v) => return Ok(v),
                Err(_) if kind == RequestKind::Answer && !text.is_empty() => {
                    return Ok(serde_json::Value::String(text.to_string()));
                }
                Err(e) => eprintln!("that is not JSON ({e}); try again"),
            }
        }
    })
    .await?
}
