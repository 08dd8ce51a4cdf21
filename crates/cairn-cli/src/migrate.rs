//! `cairn migrate --from DIR`: copy a legacy `process-global-v0` tree into
//! this home's worker aggregates (see `cairn_runtime::migrate`).

use super::HomeArg;
use cairn_runtime::home_lock::HomeLock;
use cairn_runtime::migrate::{Options, Report};
use cairn_runtime::worker::Home;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// `cairn migrate` arguments.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The legacy tree: a directory holding `catalog.json`, `metadata/`
    /// and `sessions/` (default: the home itself).
    #[arg(long, value_name = "DIR")]
    from: Option<PathBuf>,
    #[command(flatten)]
    home: HomeArg,
    /// Print the report as JSON (`cairn_runtime::migrate::Report`, version 1).
    #[arg(long)]
    json: bool,
    /// Check every worker and say what would be done; write nothing.
    #[arg(long)]
    dry_run: bool,
}

pub async fn migrate(args: MigrateArgs) -> anyhow::Result<ExitCode> {
    let home_path = args.home.path();
    let from = args.from.clone().unwrap_or_else(|| home_path.clone());
    let json = args.json;
    let dry_run = args.dry_run;
    let report = tokio::task::spawn_blocking(move || -> anyhow::Result<Report> {
        let options = Options { dry_run };
        let mut shown = Instant::now();
        let mut progress = |done: usize, total: usize| {
            if !json && total >= 20 && (shown.elapsed() >= Duration::from_secs(1) || done == total)
            {
                eprintln!("  {done}/{total} workers");
                shown = Instant::now();
            }
        };
        if dry_run {
            // A dry run writes nothing, so it takes no lock; a home that
            // does not exist yet is an empty one.
            let scratch;
            let home = match Home::open_existing(&home_path) {
                Ok(h) => h,
                Err(_) => {
                    scratch = tempfile::tempdir()?;
                    Home::open(scratch.path())?
                }
            };
            return cairn_runtime::migrate::migrate(&home, &from, &options, &mut progress)
                .map_err(anyhow::Error::msg);
        }
        let _lock = HomeLock::acquire(&home_path, "migrate")?;
        let home = Home::open(&home_path)?;
        if !json {
            eprintln!(
                "migrating {} into {} (under its lock)",
                from.display(),
                home.path().display()
            );
        }
        cairn_runtime::migrate::migrate(&home, &from, &options, &mut progress)
            .map_err(anyhow::Error::msg)
    })
    .await??;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for row in &report.workers {
            if row.action == "failed" {
                println!(
                    "{}  failed: {}",
                    row.worker_id,
                    row.diagnostics.last().map(String::as_str).unwrap_or("")
                );
            }
        }
        for s in &report.source_report.shared_references {
            println!(
                "session {} is shared by {}: assigned to no worker",
                s.session_id,
                s.metadata.join(", ")
            );
        }
        for o in &report.source_report.orphans {
            println!("orphan {} ({}): left in place", o.path, o.reason);
        }
        println!("{}", report.summary());
    }
    Ok(if report.failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
