//! `cairn bench`: figures printed side by side with a baseline measured in
//! the same run, so a noisy machine still gives a meaningful ratio. Never a
//! timed test.
//!
//! JSON output (`--json FILE`), version 1:
//! `{"version": 1, "quick": bool, "rows": [{"group", "figure", "unit",
//! "value", "baseline", "baseline_value", "ratio", "better"}]}` where `ratio`
//! is `value / baseline_value` and `better` is `"higher"` or `"lower"`.

pub mod journal;
mod memory;
pub mod migrate;
pub mod model;
pub mod postgres;
mod restart;
pub mod runtime;
pub mod update;

use serde::Serialize;
use std::path::PathBuf;

/// One measured figure beside its baseline.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Which group of figures.
    pub group: &'static str,
    /// What was measured.
    pub figure: String,
    /// Its unit, such as `events/s`.
    pub unit: &'static str,
    /// The value.
    pub value: f64,
    /// What it is compared with.
    pub baseline: String,
    /// The baseline's value, same unit.
    pub baseline_value: f64,
    /// `value / baseline_value`.
    pub ratio: f64,
    /// Whether higher or lower values are better.
    pub better: &'static str,
}

impl Row {
    /// A row; the ratio is computed.
    pub fn new(
        group: &'static str,
        figure: impl Into<String>,
        unit: &'static str,
        value: f64,
        baseline: impl Into<String>,
        baseline_value: f64,
        better: &'static str,
    ) -> Self {
        Row {
            group,
            figure: figure.into(),
            unit,
            value,
            baseline: baseline.into(),
            baseline_value,
            ratio: if baseline_value > 0.0 {
                value / baseline_value
            } else {
                f64::NAN
            },
            better,
        }
    }
}

/// `cairn bench` arguments.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Which group to run (default: all).
    #[arg(value_parser = ["journal", "runtime", "migrate", "model", "update"])]
    group: Option<String>,
    /// Fewer iterations: a smoke run, not figures to quote.
    #[arg(long)]
    quick: bool,
    /// Also write the rows as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Where to put the files the disk figures write (default: the current
    /// directory, so they hit the same disk as a home there).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// A PostgreSQL store to measure beside raw `INSERT`s on the same
    /// server (`postgres://…`); its rows run with the journal group.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// Only these figures, comma-separated: append, emit, start, density,
    /// parked, restore, reopen, fanout, replay, migrate, model, update (for
    /// profiling one of them).
    #[arg(long, value_name = "FIGURES", value_delimiter = ',', value_parser = FIGURES)]
    only: Vec<String>,
}

/// The figure families `--only` selects.
pub const FIGURES: [&str; 12] = [
    "append", "emit", "start", "density", "parked", "restore", "reopen", "fanout", "replay",
    "migrate", "model", "update",
];

/// Which figure families to measure.
#[derive(Debug, Clone, Default)]
pub struct Only(Vec<String>);

impl Only {
    /// Whether `figure` is measured.
    pub fn wants(&self, figure: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|f| f == figure)
    }
}

/// What a bench says as it goes (a line for people, one per step).
pub type Progress = std::sync::Arc<dyn Fn(String) + Send + Sync>;

/// Run the benchmarks and write the JSON (`--json`), telling `progress`
/// what is measured as it goes; the rows, for [`table`].
pub async fn run(args: BenchArgs, progress: Progress) -> anyhow::Result<Vec<Row>> {
    let base = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir()?,
    };
    let scratch = tempfile::Builder::new()
        .prefix(".cairn-bench-")
        .tempdir_in(&base)?;
    let mut rows = Vec::new();
    let only = Only(args.only.clone());
    if args.group.as_deref().is_none_or(|g| g == "journal") && only.wants("append") {
        rows.extend(journal::run(scratch.path(), args.quick, &mut |line| progress(line)).await?);
    }
    if args.group.as_deref().is_none_or(|g| g == "journal") && only.wants("append") {
        match &args.store {
            Some(url) => rows.extend(
                postgres::run(url, scratch.path(), args.quick, &mut |line| progress(line)).await?,
            ),
            None => progress("postgres: no --store URL given; its rows are skipped".into()),
        }
    }
    if args.group.as_deref().is_none_or(|g| g == "runtime") {
        rows.extend(
            runtime::run(scratch.path(), args.quick, &only, &mut |line| {
                progress(line)
            })
            .await?,
        );
    }
    if args.group.as_deref().is_none_or(|g| g == "migrate") && only.wants("migrate") {
        let dir = scratch.path().to_path_buf();
        let quick = args.quick;
        let said = progress.clone();
        rows.extend(
            tokio::task::spawn_blocking(move || migrate::run(&dir, quick, &mut |line| said(line)))
                .await??,
        );
    }
    if args.group.as_deref().is_none_or(|g| g == "model") && only.wants("model") {
        rows.extend(
            model::run_bench(scratch.path(), args.quick, &mut |line| progress(line)).await?,
        );
    }
    if args.group.as_deref().is_none_or(|g| g == "update") && only.wants("update") {
        rows.extend(update::run(scratch.path(), args.quick, &mut |line| progress(line)).await?);
    }
    if let Some(path) = &args.json {
        let doc = serde_json::json!({ "version": 1, "quick": args.quick, "rows": rows });
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")?;
        progress(format!("wrote {}", path.display()));
    }
    Ok(rows)
}

fn human(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Rows as an aligned table, one line each.
pub fn table(rows: &[Row]) -> String {
    use std::fmt::Write;
    let fw = rows
        .iter()
        .map(|r| r.figure.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let bw = rows
        .iter()
        .map(|r| r.baseline.len())
        .max()
        .unwrap_or(8)
        .max(8);
    let mut out = format!(
        "{:<fw$}  {:>10}  {:<bw$}  {:>10}  {:>7}  unit\n",
        "figure", "value", "baseline", "baseline", "ratio"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<fw$}  {:>10}  {:<bw$}  {:>10}  {:>6.2}x  {} ({} is better)",
            r.figure,
            human(r.value),
            r.baseline,
            human(r.baseline_value),
            r.ratio,
            r.unit,
            r.better
        );
    }
    out
}
