//! `cairn attach --socket PATH`: follow a live generation through its
//! `worker.sock`, answer its decisions, or cancel it.

use super::run::DecideArg;
use std::path::PathBuf;
use std::process::ExitCode;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// `cairn attach` arguments.
#[derive(Debug, clap::Args)]
pub struct AttachArgs {
    /// The generation's control socket, `runs/<gen>/worker.sock`.
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    /// Follow from after this seq.
    #[arg(long, default_value_t = 0)]
    after: u64,
    /// Print journal lines as JSON.
    #[arg(long)]
    json: bool,
    /// Answer approval requests.
    #[arg(long, value_enum)]
    decide: Option<DecideArg>,
    /// Cancel the run and exit.
    #[arg(long)]
    cancel: bool,
}

async fn request(socket: &PathBuf, req: serde_json::Value) -> anyhow::Result<serde_json::Value> {
    let stream = UnixStream::connect(socket).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot connect to {}: {e} (is the generation live?)",
            socket.display()
        )
    })?;
    let (read, mut write) = stream.into_split();
    write.write_all(format!("{req}\n").as_bytes()).await?;
    let mut lines = BufReader::new(read).lines();
    let line = lines
        .next_line()
        .await?
        .ok_or_else(|| anyhow::anyhow!("the socket closed without a reply"))?;
    Ok(serde_json::from_str(&line)?)
}

/// Deliver a decision to whichever live generation of `home` waits on it,
/// through the generations' control sockets (`cairn decide` on a home that
/// `cairn run` holds). `Ok(false)`: no live generation knows the decision.
pub async fn decide_through_sockets(
    home: &std::path::Path,
    id: &str,
    value: &serde_json::Value,
) -> anyhow::Result<bool> {
    let mut sockets = Vec::new();
    for worker in std::fs::read_dir(home.join("workers"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for generation in std::fs::read_dir(worker.path().join("runs"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let socket = generation.path().join("worker.sock");
            if socket.exists() {
                sockets.push(socket);
            }
        }
    }
    let mut last_error = None;
    for socket in sockets {
        // A socket left by a killed host refuses the connection: skip it.
        let Ok(reply) = request(
            &socket,
            serde_json::json!({ "op": "decide", "decision_id": id, "value": value }),
        )
        .await
        else {
            continue;
        };
        if reply["ok"] == true {
            return Ok(true);
        }
        let code = reply["error"]["code"].as_str().unwrap_or_default();
        if code != "unknown_decision" && code != "not_found" {
            last_error = Some(format!(
                "{}: {}",
                code,
                reply["error"]["message"].as_str().unwrap_or_default()
            ));
        }
    }
    match last_error {
        Some(e) => anyhow::bail!("the live run refused the decision: {e}"),
        None => Ok(false),
    }
}

pub async fn attach(args: AttachArgs) -> anyhow::Result<ExitCode> {
    if args.cancel {
        let reply = request(&args.socket, serde_json::json!({ "op": "cancel" })).await?;
        println!("{reply}");
        return Ok(if reply["ok"] == true {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    let stream = UnixStream::connect(&args.socket).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot connect to {}: {e} (is the generation live?)",
            args.socket.display()
        )
    })?;
    let (read, mut write) = stream.into_split();
    write
        .write_all(
            format!(
                "{}\n",
                serde_json::json!({ "op": "follow", "after": args.after })
            )
            .as_bytes(),
        )
        .await?;
    let mut lines = BufReader::new(read).lines();
    let mut status = None;
    while let Some(line) = lines.next_line().await? {
        let value: serde_json::Value = serde_json::from_str(&line)?;
        if args.json {
            println!("{line}");
        } else if let Ok(event) =
            serde_json::from_value::<cairn_runtime::SessionEvent>(value.clone())
        {
            println!("{}", super::output::line(&event));
        } else {
            println!("{line}");
        }
        let event = &value["payload"]["event"];
        if event["type"] == "decision_requested"
            && let (Some(decide), Some(id)) = (args.decide, event["decision_id"].as_str())
        {
            let v = serde_json::json!({ "approved": decide == DecideArg::Approve });
            let reply = request(
                &args.socket,
                serde_json::json!({ "op": "decide", "decision_id": id, "value": v }),
            )
            .await?;
            if reply["ok"] != true {
                eprintln!("cairn: the decision was refused: {reply}");
            }
        }
        if let Some(s) = value["facts"]["status"].as_str() {
            status = Some(s.to_string());
        }
    }
    Ok(match status.as_deref() {
        Some("finished") => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    })
}
