//! `cairn replay SESSION`: re-run a session's ended runs offline against the
//! journal and report divergence. Writes nothing.

use super::HomeArg;
use cairn_runtime::runtime::replay::RunReplay;
use std::process::ExitCode;

/// `cairn replay` arguments.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The session to replay.
    session: String,
    #[command(flatten)]
    home: HomeArg,
    /// Print the report as JSON: `{"session_id", "component"?, "compiled_cache": "used" | "missed" | "absent", "runs": [{"result": "matched" | "diverged" | "skipped", "run_id", …}]}`
    /// (`compiled_cache`: whether the home's compiled code served every
    /// component, or one had to be compiled, or the home has none yet).
    #[arg(long)]
    json: bool,
    /// Re-run every run with this component instead of the one it started
    /// with (a file, a built-in example or `sha256:…` of an uploaded one):
    /// does another version do exactly what the journal says?
    #[arg(long, value_name = "COMPONENT")]
    component: Option<String>,
}

pub async fn replay(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let session = super::session_arg(&args.session)?;
    let mut config = args.home.runtime_config("replay")?;
    // Offline replay reads only: no lock, no repair, nothing written.
    config.read_only = true;
    config.restore = false;
    config.sockets = false;
    let rt = crate::open_runtime(config).await?;
    let against = args
        .component
        .as_deref()
        .map(cairn_runtime::runtime::ComponentRef::parse);
    let cached = rt.compiled_cache_files();
    let report = rt
        .replay_offline_against(&session, against.as_ref())
        .await?;
    // The home's compiled code served every component when the mirror of
    // it grew by nothing.
    let compiled_cache = match (cached, rt.compiled_cache_files()) {
        (Some(before), Some(after)) if after == before => "used",
        (Some(_), Some(_)) => "missed",
        _ => "absent",
    };
    let diverged = report
        .iter()
        .any(|r| matches!(r, RunReplay::Diverged { .. }));
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "session_id": session, "component": args.component, "compiled_cache": compiled_cache, "runs": report })
        );
    } else {
        for r in &report {
            match r {
                RunReplay::Matched { run_id, entries } => {
                    println!("run {run_id}: matched ({entries} entries)")
                }
                RunReplay::Diverged { run_id, error } => {
                    println!("run {run_id}: DIVERGED: {}", error.message)
                }
                RunReplay::Skipped { run_id, why } => println!("run {run_id}: skipped ({why})"),
            }
        }
        let matched = report
            .iter()
            .filter(|r| matches!(r, RunReplay::Matched { .. }))
            .count();
        match &args.component {
            Some(c) => println!(
                "{matched} of {} runs matched the journal when re-run by {c}",
                report.len()
            ),
            None => println!("{matched} of {} runs matched the journal", report.len()),
        }
        if compiled_cache == "missed" {
            println!(
                "(a component was compiled for this replay: the home's compiled cache, which only its owner fills, did not hold it)"
            );
        }
    }
    Ok(if diverged {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
