//! The `cairn` command line.

#![deny(missing_docs)]

mod attach;
mod client;
mod debug;
mod demo;
mod manage;
mod migrate;
mod output;
mod queue;
mod replay;
mod run;
mod scaffold;
mod serve;
mod tree;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// cairn: a host runtime for agent controllers shipped as WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "cairn", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP API (default 127.0.0.1:7777).
    Serve(serve::ServeArgs),
    /// Run one run of a controller in-process and print its events.
    Run(run::RunArgs),
    /// Run the `echo` and `approval` examples end to end and say where the journal is.
    Demo(HomeArg),
    /// List sessions.
    Ls(manage::LsArgs),
    /// A session's state, observers and runs.
    Inspect(manage::InspectArgs),
    /// A session's journal events (`--follow` for live ones).
    Events(manage::EventsArgs),
    /// Answer a pending decision.
    Decide(manage::DecideArgs),
    /// Cancel a live run.
    Cancel(manage::RunArg),
    /// Start a new run from a parked run's checkpoint.
    Resume(manage::RunArg),
    /// Delete a session: stop its run, remove its worker.
    Rm(manage::SessionArg),
    /// Prune a child: stop its run, reclaim its loan, mark it pruned.
    Prune(manage::SessionArg),
    /// The delegation tree under a session, with states.
    Tree(manage::SessionArg),
    /// Compact a session: a new segment whose first entry summarises it.
    Compact(manage::SessionArg),
    /// Branch a session at a seq: a sibling segment in the same session.
    Branch(manage::BranchArgs),
    /// Fork a session before a user message into a new worker and session.
    Fork(manage::ForkArgs),
    /// Move a session to another version of its controller, checked by
    /// shadow replay of every ended run (or not: --mode next-run).
    Update(manage::UpdateArgs),
    /// Write a session's journal as JSONL to stdout.
    Export(manage::SessionArg),
    /// Re-run a session's ended runs offline against its journal; exit 1 on divergence.
    Replay(replay::ReplayArgs),
    /// Follow a live generation through its control socket.
    Attach(attach::AttachArgs),
    /// Copy a legacy process-global tree into this home's worker aggregates.
    Migrate(migrate::MigrateArgs),
    /// The work queue: cards whose workers resume by key in the same round.
    #[command(subcommand)]
    Queue(queue::QueueCommand),
    /// What in the home needs a human; exit 1 when anything does.
    Doctor(client::TargetArgs),
    /// One screen about the home: owner, sessions, workers, queue, health.
    Status(client::TargetArgs),
    /// Measure performance beside baselines from the same run; prints a table.
    #[cfg(feature = "bench")]
    Bench(cairn_bench::BenchArgs),
    /// Helpers for crash tests.
    #[command(subcommand, hide = true)]
    Debug(debug::Debug),
    /// Make a controller project (Rust, Python or JavaScript) that builds
    /// with one command and runs with `cairn run`.
    New(scaffold::NewArgs),
    /// Print a published JSON Schema.
    Schema {
        /// Which schema: `journal` (one journal line), or `replayed` (the
        /// entry kinds a replay feeds back, as the browser's replayer reads
        /// them).
        #[arg(value_parser = ["journal", "replayed"])]
        which: String,
    },
}

/// `--home DIR`, defaulting to `$CAIRN_HOME`, then `./.cairn`; `--config FILE`.
#[derive(Debug, clap::Args)]
pub struct HomeArg {
    /// The cairn home (default: $CAIRN_HOME, or ./.cairn).
    #[arg(long, value_name = "DIR")]
    home: Option<PathBuf>,
    /// The host config (default: cairn.toml in the home).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

impl HomeArg {
    /// The runtime config of this home, for `command` (as the home lock
    /// records it).
    pub fn runtime_config(
        &self,
        command: &str,
    ) -> anyhow::Result<cairn_runtime::runtime::RuntimeConfig> {
        let mut config =
            cairn_runtime::runtime::RuntimeConfig::load(self.path(), self.config.as_deref())?;
        config.command = command.to_string();
        Ok(config)
    }

    fn path(&self) -> PathBuf {
        home_path(self.home.as_deref())
    }
}

/// `--home`, else `$CAIRN_HOME`, else `./.cairn`, made absolute (the
/// compiled-code cache, and every path printed, needs it).
fn home_path(given: Option<&std::path::Path>) -> PathBuf {
    let home = given
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("CAIRN_HOME").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(".cairn"));
    std::path::absolute(&home).unwrap_or(home)
}

/// An error and its causes, each cause once: one whose text the message
/// already holds (an error that prints its source) is not said again.
/// A session named on the command line: `NAME` (the host's own workspace,
/// or the token's workspace at a server), or `WORKSPACE/NAME` for another
/// workspace's session of a home opened here (session ids are one
/// namespace per workspace).
pub(crate) fn session_arg(arg: &str) -> anyhow::Result<cairn_runtime::ids::SessionId> {
    match arg.split_once('/') {
        Some((workspace, name)) if !workspace.is_empty() => {
            Ok(cairn_runtime::ids::SessionId::parse(name)?
                .in_workspace(workspace, cairn_runtime::runtime::HOST_WORKSPACE))
        }
        _ => Ok(cairn_runtime::ids::SessionId::parse(arg)?),
    }
}

fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// What the library reports (a holder that does not answer, a cache it
/// cannot use, a run's start and end at debug) goes to stderr: by default
/// one plain line each with its fields; `RUST_LOG` filters (default
/// `info`).
fn init_logs(format: Option<serve::LogFormat>) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_ansi(false);
    let _ = match format {
        Some(serve::LogFormat::Json) => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
        Some(serve::LogFormat::Pretty) => builder.with_target(true).try_init(),
        None => builder.with_target(false).without_time().try_init(),
    };
}

/// A runtime as the `cairn` binary opens it: with the PostgreSQL shared
/// store registered (`[store] url`, `--store`) and the capabilities: the
/// model (`[models]`), decisions by webhook, MCP tools (`[mcp]`) and
/// outgoing HTTP (`allowed_outbound_hosts`), with `[secrets]`.
pub async fn open_runtime(
    config: cairn_runtime::RuntimeConfig,
) -> Result<cairn_runtime::Runtime, cairn_runtime::runtime::RuntimeError> {
    let model = cairn_capabilities::model::ModelCapability::new(
        config.host.models.clone(),
        config.host.secrets.clone(),
    );
    let webhook = cairn_capabilities::webhook::WebhookCapability::new(config.host.secrets.clone());
    let tools = cairn_capabilities::tools::ToolsCapability::new(
        config.host.mcp.clone(),
        config.host.secrets.clone(),
    );
    let http = cairn_capabilities::http::HttpCapability::new(config.host.secrets.clone());
    cairn_runtime::Runtime::builder(config)
        .shared_store(cairn_store_postgres::Postgres)
        .capability(std::sync::Arc::new(model))
        .capability(std::sync::Arc::new(webhook))
        .capability(std::sync::Arc::new(tools))
        .capability(std::sync::Arc::new(http))
        .open()
        .await
}

/// Tasks a worker polls between its looks at the sockets and timers, and
/// at the runtime's shared queue (tokio's defaults are 61 and about 31). A
/// worker may spend a whole slice in one guest — 500 µs of emits, up to a
/// 10 ms epoch tick of compute — and with every worker so busy, that many
/// such polls keep an HTTP request, a database reply, or a commit spawned
/// into the shared queue (see `cairn-journal`'s `away.rs`) waiting for
/// tens to hundreds of milliseconds.
const EVENT_INTERVAL: u32 = 8;

/// Run the CLI; the process's exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs(match &cli.command {
        Command::Serve(args) => args.log_format,
        _ => None,
    });
    // When stdout's reader goes (`cairn ls | head -3`), end quietly with
    // the status a Unix tool killed by SIGPIPE has (141), instead of a
    // panic and its backtrace.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default_hook(info)
    }));
    cairn_runtime::fsutil::raise_open_file_limit();
    // While this is the only thread (see `presize_fd_table`).
    if let Err(e) =
        cairn_runtime::fsutil::presize_fd_table(cairn_runtime::fsutil::FD_SLOTS_AT_START)
    {
        tracing::debug!("the descriptor table stays as it is: {e}");
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .event_interval(EVENT_INTERVAL)
        .global_queue_interval(EVENT_INTERVAL)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cairn: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let asks_on_terminal = matches!(cli.command, Command::Run(_));
    let result = rt.block_on(async move {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Serve(args) => serve::serve(args).await,
            Command::Demo(home) => demo::demo(home.path()).await,
            Command::Debug(cmd) => debug::debug(cmd).await,
            Command::Replay(args) => replay::replay(args).await,
            Command::Ls(args) => manage::ls(args).await,
            Command::Inspect(args) => manage::inspect(args).await,
            Command::Events(args) => manage::events(args).await,
            Command::Decide(args) => manage::decide(args).await,
            Command::Cancel(args) => manage::cancel(args).await,
            Command::Resume(args) => manage::resume(args).await,
            Command::Rm(args) => manage::rm(args).await,
            Command::Prune(args) => tree::prune(args).await,
            Command::Tree(args) => tree::tree(args).await,
            Command::Export(args) => manage::export(args).await,
            Command::Compact(args) => manage::compact(args).await,
            Command::Branch(args) => manage::branch(args).await,
            Command::Fork(args) => manage::fork(args).await,
            Command::Update(args) => manage::update(args).await,
            Command::Attach(args) => attach::attach(args).await,
            Command::Migrate(args) => migrate::migrate(args).await,
            Command::Queue(cmd) => queue::queue(cmd).await,
            Command::Doctor(target) => queue::doctor(target).await,
            Command::Status(target) => queue::status(target).await,
            #[cfg(feature = "bench")]
            Command::Bench(args) => {
                let progress = std::sync::Arc::new(|line: String| eprintln!("{line}"));
                let rows = cairn_bench::run(args, progress).await?;
                print!("{}", cairn_bench::table(&rows));
                Ok(ExitCode::SUCCESS)
            }
            Command::New(args) => scaffold::new(args),
            Command::Schema { which } => {
                match which.as_str() {
                    "replayed" => print!("{}", cairn_types::schema::replayed()),
                    _ => print!("{}", cairn_runtime::journal::schema::journal_line()),
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    });
    // `cairn run`: a question still open on the terminal (its answer came
    // another way) holds a blocking read; do not wait for it. Every other
    // command waits for its blocking work as it always did.
    if asks_on_terminal {
        rt.shutdown_timeout(std::time::Duration::from_millis(200));
    } else {
        drop(rt);
    }
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cairn: {}", error_chain(&e));
            // Another process owns the home: exit 2, having changed nothing.
            let busy = e.chain().any(|c| {
                c.downcast_ref::<cairn_runtime::home_lock::LockError>()
                    .is_some_and(|l| matches!(l, cairn_runtime::home_lock::LockError::Busy { .. }))
                    || c.downcast_ref::<cairn_runtime::runtime::RuntimeError>()
                        .is_some_and(|r| {
                            matches!(r, cairn_runtime::runtime::RuntimeError::HomeBusy(_))
                        })
            });
            ExitCode::from(if busy { 2 } else { 1 })
        }
    }
}
