//! `cairn demo`: `echo` and `approval`, end to end, on the default home.

use super::run::{DecideArg, journal_path, run_once};
use cairn_runtime::journal::event::RunStatus;
use cairn_runtime::runtime::{ComponentRef, RuntimeConfig, StartRun};
use std::path::PathBuf;
use std::process::ExitCode;

pub async fn demo(home: PathBuf) -> anyhow::Result<ExitCode> {
    let rt = crate::open_runtime(RuntimeConfig {
        command: "demo".into(),
        ..RuntimeConfig::load(&home, None)?
    })
    .await?;
    let mut out = std::io::stdout();
    let mut ok = true;
    for (example, prompt, decide) in [
        ("echo", "hello from a sandboxed controller", None),
        ("approval", "deploy the demo", Some(DecideArg::Approve)),
    ] {
        println!("\n== {example}: {prompt:?}");
        let req = StartRun::new(ComponentRef::BuiltIn(example.into()), prompt);
        let ran = run_once(&rt, req, false, decide, &mut out).await?;
        ok &= ran.status == RunStatus::Finished;
        println!("== {example} {}", ran.reason);
        println!("   journal: {}", journal_path(&rt, &ran.started)?);
    }
    println!("\nhome: {}", rt.workers().path().display());
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
