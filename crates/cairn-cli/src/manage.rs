//! `ls`, `inspect`, `events`, `decide`, `cancel`, `resume`, `rm`, `export`:
//! in-process on a home, or against a server with `--server URL`.

use super::client::TargetArgs;
use cairn_runtime::ids::{DecisionId, RunId};
use serde_json::Value;
use std::io::Write;
use std::process::ExitCode;

/// `cairn ls`.
#[derive(Debug, clap::Args)]
pub struct LsArgs {
    #[command(flatten)]
    target: TargetArgs,
}

/// `cairn inspect SESSION`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The session.
    session: String,
    #[command(flatten)]
    target: TargetArgs,
}

/// `cairn events SESSION`.
#[derive(Debug, clap::Args)]
pub struct EventsArgs {
    /// The session.
    session: String,
    /// Keep following live events (until Ctrl-C).
    #[arg(long)]
    follow: bool,
    /// Start after this seq.
    #[arg(long, default_value_t = 0, value_name = "SEQ")]
    after: u64,
    #[command(flatten)]
    target: TargetArgs,
}

/// `cairn decide DECISION_ID approve|deny|--value JSON`.
#[derive(Debug, clap::Args)]
pub struct DecideArgs {
    /// The decision.
    decision: String,
    /// `approve` or `deny` (an approval), unless --value is given.
    #[arg(value_parser = ["approve", "deny"], required_unless_present = "value")]
    verdict: Option<String>,
    /// Any JSON answer.
    #[arg(long, value_name = "JSON", conflicts_with = "verdict")]
    value: Option<String>,
    /// A reason, with approve or deny.
    #[arg(long)]
    reason: Option<String>,
    #[command(flatten)]
    target: TargetArgs,
}

/// `cairn cancel RUN` / `cairn resume RUN`.
#[derive(Debug, clap::Args)]
pub struct RunArg {
    /// The run.
    run: String,
    #[command(flatten)]
    target: TargetArgs,
}

/// `cairn rm SESSION` / `cairn export SESSION`.
#[derive(Debug, clap::Args)]
pub struct SessionArg {
    /// The session.
    pub(super) session: String,
    #[command(flatten)]
    pub(super) target: TargetArgs,
}

/// `cairn branch SESSION --at SEQ`.
#[derive(Debug, clap::Args)]
pub struct BranchArgs {
    /// The session.
    session: String,
    /// The entry of the active lineage the branch carries up to.
    #[arg(long, value_name = "SEQ")]
    at: u64,
    #[command(flatten)]
    target: TargetArgs,
}

/// `cairn fork SESSION --before SEQ`.
#[derive(Debug, clap::Args)]
pub struct ForkArgs {
    /// The session.
    session: String,
    /// A user message (a `started` entry): the fork carries what came before.
    #[arg(long, value_name = "SEQ")]
    before: u64,
    /// Bind the fork to another component (a built-in example, a file or
    /// `sha256:…`), checked as `--mode` says.
    #[arg(long)]
    component: Option<String>,
    /// With `--component`: `replay` (every run the fork carries re-run
    /// against it first; a divergence refuses the fork) or `next-run`.
    #[arg(long, default_value = "replay", value_parser = ["replay", "next-run"], requires = "component")]
    mode: String,
    #[command(flatten)]
    target: TargetArgs,
}

#[derive(Debug, clap::Args)]
pub struct UpdateArgs {
    /// The session (or, with `--from` and `--to`, none: every session bound
    /// to a component).
    session: Option<String>,
    /// The component to move the session to: a built-in example, a file,
    /// or `sha256:…`.
    #[arg(long, conflicts_with_all = ["from", "to"])]
    component: Option<String>,
    /// Every session bound to this component (a built-in example, a file
    /// or `sha256:…`) is checked against `--to`.
    #[arg(long, requires = "to", conflicts_with = "session")]
    from: Option<String>,
    /// The component the sessions bound to `--from` move to.
    #[arg(long, requires = "from")]
    to: Option<String>,
    /// With `--from`: only this workspace's sessions.
    #[arg(long, requires = "from")]
    workspace: Option<String>,
    /// `replay` (every ended run re-run against it first; switched only if
    /// all match), `next-run` (unchecked; one session only) or `snapshot`
    /// (a live run parks; the new component resumes from the checkpoint).
    #[arg(long, default_value = "replay", value_parser = ["replay", "next-run", "snapshot"])]
    mode: String,
    /// Check only; switch nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    target: TargetArgs,
}

/// `cairn update`: move a session, or every session bound to a component,
/// to another component.
pub async fn update(args: UpdateArgs) -> anyhow::Result<ExitCode> {
    use cairn_runtime::journal::event::UpdateMode;
    if let (Some(from), Some(to)) = (&args.from, &args.to) {
        return update_all(&args, from, to).await;
    }
    let (Some(session), Some(component)) = (&args.session, &args.component) else {
        anyhow::bail!(
            "name a session and --component, or --from and --to for every session bound to a component"
        );
    };
    let session = super::session_arg(session)?;
    let mode = match args.mode.as_str() {
        "next-run" => UpdateMode::NextRun,
        "snapshot" => UpdateMode::Snapshot,
        _ => UpdateMode::Replay,
    };
    let out = args
        .target
        .writer("update")
        .await?
        .update(&session, component, mode, args.dry_run)
        .await?;
    if args.target.json {
        println!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    let runs = out["runs"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let matched = runs.iter().filter(|r| r["result"] == "matched").count();
    if mode == UpdateMode::Replay {
        println!(
            "{matched} of {} runs replay against {}",
            runs.len(),
            out["to"].as_str().unwrap_or("")
        );
    }
    if let Some(run) = out["resumed"].as_str() {
        println!(
            "session {} moved to {}; run {run} resumes its checkpoint there",
            out["session_id"].as_str().unwrap_or(""),
            out["to"].as_str().unwrap_or("")
        );
        return Ok(ExitCode::SUCCESS);
    }
    if out["pending"] == true {
        println!(
            "session {} has a live run: the update to {} is taken at its next run's start",
            out["session_id"].as_str().unwrap_or(""),
            out["to"].as_str().unwrap_or("")
        );
        return Ok(ExitCode::SUCCESS);
    }
    match (out["switched"].as_bool(), args.dry_run) {
        (Some(true), _) => println!(
            "session {} moved from {} to {}",
            out["session_id"].as_str().unwrap_or(""),
            out["from"].as_str().unwrap_or("(none)"),
            out["to"].as_str().unwrap_or("")
        ),
        (_, true) => println!("dry run: nothing switched"),
        _ => println!(
            "session {} is on {} already",
            out["session_id"].as_str().unwrap_or(""),
            out["to"].as_str().unwrap_or("")
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// `cairn update --from A --to B`: the bulk form; the report, and the
/// sessions that stay on A with why.
async fn update_all(args: &UpdateArgs, from: &str, to: &str) -> anyhow::Result<ExitCode> {
    if args.mode != "replay" {
        anyhow::bail!(
            "a bulk update checks every session by shadow replay: --mode next-run names one session"
        );
    }
    let out = args
        .target
        .writer("update")
        .await?
        .update_all(from, to, args.workspace.as_deref(), args.dry_run)
        .await?;
    if args.target.json {
        println!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    let n = |k: &str| out[k].as_u64().unwrap_or(0);
    println!(
        "{} sessions on {}: {} compatible, {} diverge, {} failed",
        n("total"),
        out["from"].as_str().unwrap_or(""),
        n("compatible"),
        n("diverges"),
        n("failed")
    );
    for s in out["sessions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        if s["outcome"] != "compatible" {
            println!(
                "  {} {}: {}",
                s["session_id"].as_str().unwrap_or(""),
                s["outcome"].as_str().unwrap_or(""),
                s["message"].as_str().unwrap_or("")
            );
        }
    }
    match args.dry_run {
        true => println!("dry run: nothing switched"),
        false => println!(
            "{} switched to {}",
            n("switched"),
            out["to"].as_str().unwrap_or("")
        ),
    }
    println!(
        "report: GET /v1/updates/{}",
        out["update_id"].as_str().unwrap_or("")
    );
    Ok(ExitCode::SUCCESS)
}

async fn segment(
    target: &TargetArgs,
    session: &str,
    op: super::client::SegmentOp,
) -> anyhow::Result<ExitCode> {
    let session = super::session_arg(session)?;
    let command = match op {
        super::client::SegmentOp::Compact => "compact",
        super::client::SegmentOp::Branch(_) => "branch",
        super::client::SegmentOp::Fork(..) => "fork",
    };
    let out = target.writer(command).await?.segment(&session, op).await?;
    if target.json {
        println!("{out}");
    } else if let Some(prompt) = out["prompt"].as_str() {
        println!(
            "forked {} into session {} (worker {}); the message to re-edit:\n{prompt}",
            out["parent_session_id"].as_str().unwrap_or(""),
            out["session_id"].as_str().unwrap_or(""),
            out["worker_id"].as_str().unwrap_or("")
        );
    } else {
        println!(
            "session {}: new active segment {} (seq {})",
            out["session_id"].as_str().unwrap_or(""),
            out["segment_id"].as_str().unwrap_or(""),
            out["seq"]
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn compact(args: SessionArg) -> anyhow::Result<ExitCode> {
    segment(
        &args.target,
        &args.session,
        super::client::SegmentOp::Compact,
    )
    .await
}

pub async fn branch(args: BranchArgs) -> anyhow::Result<ExitCode> {
    segment(
        &args.target,
        &args.session,
        super::client::SegmentOp::Branch(args.at),
    )
    .await
}

pub async fn fork(args: ForkArgs) -> anyhow::Result<ExitCode> {
    segment(
        &args.target,
        &args.session,
        super::client::SegmentOp::Fork(
            args.before,
            args.component.clone().map(|c| {
                let mode = match args.mode.as_str() {
                    "next-run" => cairn_runtime::journal::event::UpdateMode::NextRun,
                    _ => cairn_runtime::journal::event::UpdateMode::Replay,
                };
                (c, mode)
            }),
        ),
    )
    .await
}

fn state_name(v: &Value) -> String {
    match v["state"]["state"].as_str() {
        Some("corrupt") => "corrupt".to_string(),
        Some("blocked") => format!("blocked ({})", v["state"]["on"].as_str().unwrap_or("?")),
        Some(s) => s.to_string(),
        None => "?".into(),
    }
}

pub async fn ls(args: LsArgs) -> anyhow::Result<ExitCode> {
    let sessions = match args.target.reader(false).await {
        Ok(client) => client.sessions().await?,
        Err(e)
            if e.downcast_ref::<cairn_runtime::runtime::RuntimeError>()
                .is_some_and(|e| {
                    matches!(
                        e,
                        cairn_runtime::runtime::RuntimeError::Worker(
                            cairn_runtime::worker::WorkerError::NoHome(_)
                        )
                    )
                }) =>
        {
            Value::Array(vec![])
        }
        Err(e) => return Err(e),
    };
    // A reader migrates nothing: say so when legacy roots wait in the home.
    if let Some(home) = args.target.local_home()
        && cairn_runtime::migrate::has_legacy_roots(&home)
        && !cairn_runtime::migrate::manifest_path(&home).exists()
    {
        eprintln!(
            "cairn: {} holds legacy roots (catalog.json, metadata/, sessions/) not migrated yet; the next writing command migrates them, or run `cairn migrate`",
            home.display()
        );
    }
    if args.target.json {
        println!("{sessions}");
        return Ok(ExitCode::SUCCESS);
    }
    let rows = sessions.as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        println!("no sessions");
        return Ok(ExitCode::SUCCESS);
    }
    let width = rows
        .iter()
        .map(|r| r["session_id"].as_str().unwrap_or("").len())
        .max()
        .unwrap_or(7)
        .max(7);
    println!(
        "{:<width$}  {:<20}  {:>6}  {:<10}  LAST RUN",
        "SESSION", "STATE", "EVENTS", "STATUS"
    );
    for r in &rows {
        println!(
            "{:<width$}  {:<20}  {:>6}  {:<10}  {}",
            r["session_id"].as_str().unwrap_or(""),
            state_name(r),
            r["last_seq"],
            r["last_run"]["status"].as_str().unwrap_or("-"),
            r["last_run"]["run_id"].as_str().unwrap_or("-"),
        );
    }
    for r in &rows {
        if let Some(reason) = r["corrupt"].as_str() {
            println!(
                "\ncorrupt: session {} (worker {}): {reason}",
                r["session_id"].as_str().unwrap_or("?"),
                r["worker_id"].as_str().unwrap_or("?")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn inspect(args: InspectArgs) -> anyhow::Result<ExitCode> {
    let session = super::session_arg(&args.session)?;
    let (summary, runs) = args.target.reader(false).await?.inspect(&session).await?;
    if args.target.json {
        println!(
            "{}",
            serde_json::json!({ "session": summary, "runs": runs })
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "session    {}",
        summary["session_id"].as_str().unwrap_or("")
    );
    println!("worker     {}", summary["worker_id"].as_str().unwrap_or(""));
    println!("state      {}", state_name(&summary));
    println!(
        "component  {}",
        summary["component"].as_str().unwrap_or("(none yet)")
    );
    println!("events     {}", summary["last_seq"]);
    println!(
        "segment    {} (of {})",
        summary["active_segment"].as_str().unwrap_or("?"),
        summary["segments"].as_array().map_or(0, |a| a.len())
    );
    if let Some(p) = summary["parent"].as_object() {
        println!(
            "parent     worker {} (session {}), scope {}{}",
            p["worker_id"].as_str().unwrap_or("?"),
            p["session_id"].as_str().unwrap_or("?"),
            p["scope"].as_str().unwrap_or("(none)"),
            if p["loan_reclaimed"] == true {
                ", loan reclaimed"
            } else {
                ""
            }
        );
    }
    for c in summary["children"].as_array().into_iter().flatten() {
        println!(
            "child      {} {} scope {}{}",
            c["session_id"].as_str().unwrap_or("?"),
            c["status"].as_str().unwrap_or("?"),
            c["scope"].as_str().unwrap_or("(none)"),
            if c["loan_reclaimed"] == true {
                " (loan reclaimed)"
            } else {
                ""
            }
        );
    }
    for p in summary["peers"].as_array().into_iter().flatten() {
        println!("peer       {}", p["session_id"].as_str().unwrap_or("?"));
    }
    if let Some(parent) = summary["forked_from"].as_array() {
        println!(
            "forked     from session {} before seq {}",
            parent[0].as_str().unwrap_or("?"),
            parent[1]
        );
    }
    println!(
        "observers  {} collecting, {} claiming, {} present",
        summary["observers"]["collecting"],
        summary["observers"]["claiming"],
        summary["observers"]["present"]
    );
    if summary["stale"] == true {
        println!("STALE      a replay diverged; this worker never runs again");
    }
    println!("runs:");
    for r in runs.as_array().cloned().unwrap_or_default() {
        println!(
            "  {}  {:<9}  generation {}  seq {}..{}",
            r["run_id"].as_str().unwrap_or(""),
            r["state"].as_str().unwrap_or(""),
            r["facts"]["generation"],
            r["facts"]["first_seq"],
            r["facts"]["last_seq"],
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn events(args: EventsArgs) -> anyhow::Result<ExitCode> {
    let session = super::session_arg(&args.session)?;
    let client = args.target.reader(args.follow).await?;
    let json = args.target.json;
    let mut out = std::io::stdout();
    client
        .events(&session, args.after, args.follow, |v, line| {
            if json {
                writeln!(out, "{line}")?;
            } else if let Ok(e) = serde_json::from_value::<cairn_runtime::SessionEvent>(v.clone()) {
                writeln!(out, "{}", super::output::line(&e))?;
            } else if let Some(at) = v["gap"]["resumed_at"].as_u64() {
                writeln!(out, "…     missed events; resuming at #{at}")?;
            } else {
                writeln!(out, "{v}")?;
            }
            out.flush()?;
            Ok(())
        })
        .await?;
    Ok(ExitCode::SUCCESS)
}

pub async fn export(args: SessionArg) -> anyhow::Result<ExitCode> {
    let session = super::session_arg(&args.session)?;
    let client = args.target.reader(false).await?;
    let mut out = std::io::stdout().lock();
    let mut n = 0u64;
    client
        // The lines as journaled, byte for byte: checksums still hold.
        .events(&session, 0, false, |_, line| {
            writeln!(out, "{line}")?;
            n += 1;
            Ok(())
        })
        .await?;
    out.flush()?;
    eprintln!("cairn: exported {n} journal lines of session {session}");
    Ok(ExitCode::SUCCESS)
}

pub async fn decide(args: DecideArgs) -> anyhow::Result<ExitCode> {
    let id: DecisionId = args.decision.parse()?;
    let value = match (&args.value, args.verdict.as_deref()) {
        (Some(v), _) => {
            serde_json::from_str(v).map_err(|e| anyhow::anyhow!("--value is not JSON: {e}"))?
        }
        (None, Some(verdict)) => {
            let mut v = serde_json::json!({ "approved": verdict == "approve" });
            if let Some(reason) = &args.reason {
                v["reason"] = Value::String(reason.clone());
            }
            v
        }
        (None, None) => unreachable!("clap requires one"),
    };
    // A home `cairn run` holds: the run is told through its generation's
    // control socket.
    let held_by_run = args
        .target
        .local_home()
        .and_then(|home| cairn_runtime::home_lock::holder(&home).map(|h| (home, h)))
        .filter(|(_, h)| h.command == "run");
    match held_by_run {
        Some((home, holder)) => {
            if !super::attach::decide_through_sockets(&home, &id.to_string(), &value).await? {
                anyhow::bail!(
                    "{home} is held by cairn run (pid {}), and none of its live runs waits on decision {id}",
                    holder.pid,
                    home = home.display()
                );
            }
        }
        None => {
            args.target
                .writer("decide")
                .await?
                .decide(&id, value.clone())
                .await?
        }
    }
    if args.target.json {
        println!(
            "{}",
            serde_json::json!({ "decision_id": id, "recorded": true, "value": value })
        );
    } else {
        println!("decision {id} recorded: {value}");
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn cancel(args: RunArg) -> anyhow::Result<ExitCode> {
    let run: RunId = args.run.parse()?;
    args.target.writer("cancel").await?.cancel(run).await?;
    if args.target.json {
        println!(
            "{}",
            serde_json::json!({ "run_id": run, "cancel": "requested" })
        );
    } else {
        println!("run {run}: cancel requested");
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn resume(args: RunArg) -> anyhow::Result<ExitCode> {
    let run: RunId = args.run.parse()?;
    let started = args.target.writer("resume").await?.resume(run).await?;
    if args.target.json {
        println!("{started}");
    } else {
        println!(
            "run {run} resumed as run {}",
            started["run_id"].as_str().unwrap_or("?")
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn rm(args: SessionArg) -> anyhow::Result<ExitCode> {
    let session = super::session_arg(&args.session)?;
    args.target.writer("rm").await?.rm(&session).await?;
    if args.target.json {
        println!(
            "{}",
            serde_json::json!({ "session_id": session, "deleted": true })
        );
    } else {
        println!("session {session} deleted");
    }
    Ok(ExitCode::SUCCESS)
}
