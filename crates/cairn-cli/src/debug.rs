//! `cairn debug …`: hidden helpers for crash tests; not a user surface.

use cairn_runtime::journal::Journals;
use cairn_runtime::journal::event::{AgentEvent, Payload};
use cairn_runtime::store::Store;
use cairn_runtime::store::file::FileStore;
use cairn_runtime::worker::Home;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Hidden debugging commands.
#[derive(Debug, clap::Subcommand)]
pub enum Debug {
    /// Append text events to a session's file journal forever, printing each
    /// acknowledged (durable) seq on its own line.
    AppendLoop {
        /// The home.
        #[arg(long)]
        home: PathBuf,
        /// The session (created when missing).
        #[arg(long)]
        session: String,
        /// Events per append batch.
        #[arg(long, default_value_t = 1)]
        batch: usize,
    },
}

pub async fn debug(cmd: Debug) -> anyhow::Result<ExitCode> {
    match cmd {
        Debug::AppendLoop {
            home,
            session,
            batch,
        } => {
            let home = Home::open(&home)?;
            let session = super::session_arg(&session)?;
            let store: Arc<dyn Store> = Arc::new(FileStore::new(home.clone()));
            let journals = Journals::new(store, 16);
            let journal = match home.lookup(&session)? {
                Some(_) => journals.open(&session).await?,
                None => {
                    let worker = home.create_published_worker(&session, None, "local")?;
                    journals
                        .create(&session, worker.metadata()?.active_segment)
                        .await?
                }
            };
            let mut out = std::io::stdout().lock();
            let mut n = 0u64;
            loop {
                let payloads = (0..batch.max(1))
                    .map(|_| {
                        n += 1;
                        Payload::Agent(AgentEvent::TextDelta {
                            text: format!("event {n} {}", "x".repeat((n % 97) as usize)),
                            by: None,
                        })
                    })
                    .collect();
                let events = journal.append_batch(None, payloads).await?;
                writeln!(out, "{}", events.last().expect("a batch").seq)?;
                out.flush()?;
            }
        }
    }
}
