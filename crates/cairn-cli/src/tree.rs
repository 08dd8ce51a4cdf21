//! `cairn tree SESSION` and `cairn prune CHILD`: delegation from outside.

use super::client::{Client, TargetArgs};
use super::manage::SessionArg;
use cairn_runtime::ids::SessionId;
use serde_json::{Value, json};
use std::process::ExitCode;

/// `cairn prune SESSION`.
pub async fn prune(args: SessionArg) -> anyhow::Result<ExitCode> {
    let session = super::session_arg(&args.session)?;
    let client = args.target.writer("prune").await?;
    match &client {
        Client::Local(rt) => rt.prune(&session).await?,
        Client::Remote { .. } => {
            client
                .post(&format!("/v1/sessions/{}/prune", session.name()), json!({}))
                .await?;
        }
    }
    match args.target.json {
        true => println!("{}", json!({ "session_id": session, "pruned": true })),
        false => println!(
            "{session} pruned: its run and every run below it stopped, their loans reclaimed"
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// `cairn tree SESSION`: the delegation tree under a session, with states.
pub async fn tree(args: SessionArg) -> anyhow::Result<ExitCode> {
    let session = super::session_arg(&args.session)?;
    let client = args.target.reader(false).await?;
    let mut out = Vec::new();
    walk(&client, &session, None, 0, &mut out, &args.target).await?;
    if args.target.json {
        println!("{}", Value::Array(out));
    }
    Ok(ExitCode::SUCCESS)
}

async fn walk(
    client: &Client,
    session: &SessionId,
    link: Option<&Value>,
    depth: usize,
    out: &mut Vec<Value>,
    target: &TargetArgs,
) -> anyhow::Result<()> {
    let (summary, _) = client.inspect(session).await?;
    let state = summary["state"]["state"]
        .as_str()
        .or(summary["state"].as_str())
        .unwrap_or("?")
        .to_string();
    let status = link.and_then(|l| l["status"].as_str()).unwrap_or("");
    let scope = link.and_then(|l| l["scope"].as_str());
    if !target.json {
        let indent = "  ".repeat(depth);
        let mut line = format!("{indent}{session} {state}");
        if !status.is_empty() {
            line.push_str(&format!(" (child: {status}"));
            if let Some(s) = scope {
                line.push_str(&format!(", scope {s}"));
            }
            if link.is_some_and(|l| l["loan_reclaimed"] == true) {
                line.push_str(", loan reclaimed");
            }
            line.push(')');
        }
        println!("{line}");
        for p in summary["peers"].as_array().into_iter().flatten() {
            println!(
                "{indent}  ~ peer {}",
                p["session_id"].as_str().unwrap_or("?")
            );
        }
    }
    out.push(json!({ "session_id": session, "depth": depth, "state": state, "link": link, "peers": summary["peers"] }));
    let children = summary["children"].as_array().cloned().unwrap_or_default();
    for c in &children {
        if let Some(s) = c["session_id"]
            .as_str()
            .and_then(|s| SessionId::parse(s).ok())
        {
            Box::pin(walk(client, &s, Some(c), depth + 1, out, target)).await?;
        }
    }
    Ok(())
}
