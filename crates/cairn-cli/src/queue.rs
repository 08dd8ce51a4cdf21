//! `cairn queue …`, `cairn doctor`, `cairn status`.

use super::HomeArg;
use super::client::{Client, TargetArgs};
use cairn_orchestration::{AnswerValue, NewCard, Queue, Row};
use serde_json::{Value, json};
use std::process::ExitCode;

/// `cairn queue`.
#[derive(Debug, clap::Subcommand)]
pub enum QueueCommand {
    /// Queue a card (or a new round of one, which supersedes its row).
    Add {
        /// The card id: `[a-z0-9][a-z0-9-]{0,63}`.
        card: String,
        /// A built-in example name or `sha256:<hex>`.
        #[arg(long)]
        component: String,
        /// The card's prompt.
        #[arg(long)]
        prompt: String,
        /// The round (default 1).
        #[arg(long)]
        round: Option<u32>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// List the rows.
    Ls {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Answer an awaiting card: its pending decision, or its question.
    Answer {
        /// The card.
        card: String,
        /// The answer as text.
        #[arg(required_unless_present = "value", conflicts_with = "value")]
        text: Option<String>,
        /// The answer as JSON (a decision's value, such as '{"approved": true}').
        #[arg(long)]
        value: Option<String>,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Ask an ended card's worker for rework.
    Rework {
        /// The card.
        card: String,
        /// Why: given to the worker in its resume prompt.
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Run the dispatcher in-process (what `cairn serve` does).
    Work {
        /// Stop once no row is pending or processing.
        #[arg(long)]
        until_idle: bool,
        #[command(flatten)]
        home: HomeArg,
    },
}

fn print_rows(rows: &Value, json: bool) {
    if json {
        println!("{rows}");
        return;
    }
    let rows = rows.as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        println!("no cards");
        return;
    }
    println!("CARD                     ROUND STATE      ATTEMPTS  LAST REASON");
    for r in rows {
        println!(
            "{:<24} {:>5} {:<10} {:>8}  {}",
            r["card"].as_str().unwrap_or(""),
            r["round"],
            r["state"].as_str().unwrap_or(""),
            r["attempts"],
            r["last_reason"].as_str().unwrap_or("")
        );
    }
}

fn print_row(row: &Value, json: bool, what: &str) {
    match json {
        true => println!("{row}"),
        false => println!(
            "card {} {what}: round {}, {} ({})",
            row["card"].as_str().unwrap_or(""),
            row["round"],
            row["state"].as_str().unwrap_or(""),
            row["worker_key"].as_str().unwrap_or("")
        ),
    }
}

fn local_queue(client: &Client) -> anyhow::Result<Option<std::sync::Arc<Queue>>> {
    match client {
        Client::Local(rt) => Ok(Some(Queue::open(rt.clone())?)),
        Client::Remote { .. } => Ok(None),
    }
}

fn to_json(row: Row) -> anyhow::Result<Value> {
    Ok(serde_json::to_value(row)?)
}

pub async fn queue(cmd: QueueCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        QueueCommand::Add {
            card,
            component,
            prompt,
            round,
            target,
        } => {
            let client = target.writer("queue add").await?;
            let row = match (local_queue(&client)?, &client) {
                (Some(q), Client::Local(rt)) => {
                    if cairn_examples::built_in(&component).is_none()
                        && rt.component_len(&component).is_none()
                    {
                        anyhow::bail!(
                            "no component {component:?}: name a built-in example ({}) or the sha256:<hex> of one this home stores",
                            cairn_examples::names().join(", ")
                        );
                    }
                    let workspace = rt.default_workspace().to_string();
                    to_json(q.add(NewCard { card, component, prompt, round, workspace }).await?)?
                }
                _ => {
                    client
                        .post("/v1/queue", json!({ "card": card, "component": component, "prompt": prompt, "round": round }))
                        .await?
                }
            };
            print_row(&row, target.json, "queued");
        }
        QueueCommand::Ls { target } => {
            let client = target.reader(false).await?;
            let rows = match &client {
                Client::Local(rt) => serde_json::to_value(Queue::open(rt.clone())?.rows(None)?)?,
                Client::Remote { .. } => client.get("/v1/queue").await?,
            };
            print_rows(&rows, target.json);
        }
        QueueCommand::Answer {
            card,
            text,
            value,
            target,
        } => {
            let answer = match (text, value) {
                (_, Some(v)) => AnswerValue::Value(
                    serde_json::from_str(&v)
                        .map_err(|e| anyhow::anyhow!("--value is not JSON: {e}"))?,
                ),
                (Some(t), None) => AnswerValue::Text(t),
                (None, None) => unreachable!("clap requires one"),
            };
            let client = target.writer("queue answer").await?;
            let row = match (local_queue(&client)?, &client) {
                (Some(q), Client::Local(rt)) => {
                    to_json(q.answer(rt.default_workspace(), &card, answer).await?)?
                }
                _ => {
                    let body = match answer {
                        AnswerValue::Text(t) => json!({ "text": t }),
                        AnswerValue::Value(v) => json!({ "value": v }),
                    };
                    client
                        .post(&format!("/v1/queue/{card}/answer"), body)
                        .await?
                }
            };
            print_row(&row, target.json, "answered");
        }
        QueueCommand::Rework {
            card,
            reason,
            target,
        } => {
            let client = target.writer("queue rework").await?;
            let row = match (local_queue(&client)?, &client) {
                (Some(q), Client::Local(rt)) => {
                    to_json(q.rework(rt.default_workspace(), &card, &reason).await?)?
                }
                _ => {
                    client
                        .post(
                            &format!("/v1/queue/{card}/rework"),
                            json!({ "reason": reason }),
                        )
                        .await?
                }
            };
            print_row(&row, target.json, "sent back for rework");
        }
        QueueCommand::Work { until_idle, home } => {
            let rt = crate::open_runtime(home.runtime_config("queue work")?).await?;
            let q = Queue::open(rt.clone())?;
            let work = q.work(until_idle);
            tokio::select! {
                r = work => r?,
                _ = tokio::signal::ctrl_c() => eprintln!("cairn: interrupted; processing rows are recovered on the next start"),
            }
            let rows = serde_json::to_value(q.rows(None)?)?;
            print_rows(&rows, false);
            rt.shutdown(std::time::Duration::from_secs(5)).await;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `cairn doctor [--json]`: exit 1 when anything needs a human.
pub async fn doctor(target: TargetArgs) -> anyhow::Result<ExitCode> {
    let client = target.reader(false).await?;
    let report = match &client {
        Client::Local(rt) => {
            let served = target
                .local_home()
                .and_then(|h| cairn_runtime::home_lock::holder(&h))
                .is_some();
            serde_json::to_value(cairn_orchestration::doctor::examine(rt, served).await)?
        }
        Client::Remote { .. } => client.get("/v1/doctor").await?,
    };
    if target.json {
        println!("{report}");
    } else {
        let report: cairn_orchestration::doctor::Report = serde_json::from_value(report.clone())?;
        print!("{}", report.render());
    }
    Ok(match report["ok"].as_bool() {
        Some(true) => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    })
}

/// `cairn status`: one screen about the home.
pub async fn status(target: TargetArgs) -> anyhow::Result<ExitCode> {
    let holder = target
        .local_home()
        .and_then(|h| cairn_runtime::home_lock::holder(&h));
    let client = target.reader(false).await?;
    let report: cairn_orchestration::doctor::Report = match &client {
        Client::Local(rt) => cairn_orchestration::doctor::examine(rt, holder.is_some()).await,
        Client::Remote { .. } => serde_json::from_value(client.get("/v1/doctor").await?)?,
    };
    let sessions = client.sessions().await?.as_array().map_or(0, Vec::len);
    if target.json {
        println!(
            "{}",
            json!({ "home": report.home, "served_by": holder.as_ref().map(|h| json!({"pid": h.pid, "command": h.command, "url": h.url})), "sessions": sessions, "workers": report.workers, "queue": report.queue, "problems": report.problems.len() })
        );
        return Ok(ExitCode::SUCCESS);
    }
    match (&report.home, &report.workspace) {
        (Some(home), _) => println!("home      {home}"),
        (None, Some(ws)) => {
            println!("workspace {ws} (the server reports only this token's workspace)")
        }
        (None, None) => {}
    }
    match &holder {
        Some(h) => println!(
            "owner     pid {} ({}){}",
            h.pid,
            h.command,
            h.url
                .as_deref()
                .map(|u| format!(" serving {u}"))
                .unwrap_or_default()
        ),
        None => println!("owner     none (the home is free)"),
    }
    println!("sessions  {sessions}");
    let workers: Vec<String> = report
        .workers
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!("workers   {}", workers.join(", "));
    if let Some(rows) = report.queue["rows"].as_object().filter(|r| !r.is_empty()) {
        let rows: Vec<String> = rows.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!("queue     {}", rows.join(", "));
    }
    match report.problems.len() {
        0 => println!("health    ok"),
        n => println!("health    {n} problem(s): run `cairn doctor`"),
    }
    Ok(ExitCode::SUCCESS)
}
