//! `cairn serve`: the HTTP API on loopback.

use super::HomeArg;
use std::net::SocketAddr;
use std::process::ExitCode;

/// `cairn serve` arguments.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    home: HomeArg,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:7777", value_name = "ADDR")]
    listen: SocketAddr,
    /// Serve without authentication (when no tokens are configured), only on
    /// a loopback address.
    #[arg(long)]
    insecure_local: bool,
    /// The shared store, `postgres://…` (overrides `[store] url`): several
    /// instances on one database serve the same sessions.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// This instance's name in the shared store (default: a fresh one).
    #[arg(long, value_name = "NAME", requires = "store")]
    instance: Option<String>,
    /// The URL other instances forward requests to (default: the listen
    /// address).
    #[arg(long, value_name = "URL")]
    advertise: Option<String>,
    /// How the server logs to stderr: `json` (one object a line, with the
    /// run's session_id, run_id, generation and workspace) or `pretty`
    /// (times, levels and fields for people). `RUST_LOG` picks what is
    /// logged (default `info`).
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object a line.
    Json,
    /// For people: time, level, target, fields.
    Pretty,
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let mut config = args.home.runtime_config("serve")?;
    if let Some(url) = &args.store {
        config.host.store.url = Some(url.clone());
    }
    if let Some(name) = &args.instance {
        config.host.store.instance = Some(name.clone());
    }
    if let Some(url) = &args.advertise {
        config.host.store.advertise = Some(url.clone());
    }
    let say = Say(args.log_format.is_some());
    if config.host.has_tokens() {
        if args.insecure_local {
            say.warn("tokens are configured, so every /v1/ request needs one; --insecure-local changes nothing".into());
        }
    } else {
        if !args.insecure_local {
            anyhow::bail!(
                "no API tokens are configured (cairn.toml [workspaces.NAME] tokens): start with --insecure-local to serve without authentication on a loopback address"
            );
        }
        if !args.listen.ip().is_loopback() {
            anyhow::bail!(
                "--insecure-local serves only on a loopback address, not {}",
                args.listen
            );
        }
    }
    let rt = crate::open_runtime(config).await?;
    for note in rt.recovery_notes() {
        say.warn(note.to_string());
    }
    let restored = rt.restored();
    if !restored.is_empty() {
        say.info(format!(
            "restored {} interrupted run(s) by replay",
            restored.len()
        ));
    }
    // Compiled before ready: the first run of a component does not wait.
    let warmed = rt
        .warm_components(&mut |note| say.warn(note.to_string()))
        .await;
    say.info(format!("{warmed} component(s) compiled"));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr()?;
    rt.set_served_url(&format!("http://{addr}"))?;
    if rt.clustered() {
        let advertised = rt
            .host_config()
            .store
            .advertise
            .clone()
            .unwrap_or_else(|| format!("http://{addr}"));
        rt.join_cluster(&advertised).await?;
        say.info(format!(
            "instance {} on the shared store, reachable at {advertised}",
            rt.instance_id().unwrap_or_default()
        ));
    }
    println!(
        "cairn: listening on http://{addr} (home {})",
        rt.workers().path().display()
    );
    use std::io::Write;
    std::io::stdout().flush()?;
    let shutdown = async move {
        let signal = termination().await;
        say.info(format!(
            "{signal}: shutting down (draining live runs; a second signal exits at once)"
        ));
        tokio::spawn(async move {
            let again = termination().await;
            say.info(format!("{again} again: exiting now"));
            std::process::exit(130);
        });
    };
    cairn_api::serve(listener, rt.clone(), shutdown).await?;
    rt.release_home();
    say.info("stopped".into());
    Ok(ExitCode::SUCCESS)
}

/// What `serve` tells its operator: plain `cairn: …` lines on stderr, or,
/// with `--log-format`, log events like everything else the server says.
#[derive(Clone, Copy)]
struct Say(bool);

impl Say {
    fn info(self, message: String) {
        match self.0 {
            true => tracing::info!("{message}"),
            false => eprintln!("cairn: {message}"),
        }
    }

    fn warn(self, message: String) {
        match self.0 {
            true => tracing::warn!("{message}"),
            false => eprintln!("cairn: note: {message}"),
        }
    }
}

/// The first SIGINT or SIGTERM, by name.
async fn termination() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        let _ = tokio::signal::ctrl_c().await;
        return "SIGINT";
    };
    tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}
