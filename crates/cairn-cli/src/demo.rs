//! `cairn demo`: `echo` and `approval`, end to end, on the default home;
//! then the `agent` example when a model is configured (`[models.default]`,
//! or `OPENAI_API_KEY` / `OPENAI_BASE_URL` in the environment).

use super::run::{Answers, journal_path, run_once};
use cairn_runtime::journal::event::RunStatus;
use cairn_runtime::runtime::{ComponentRef, RuntimeConfig, StartRun};
use cairn_types::model::{ModelEntry, Provider, SecretSource};
use std::path::PathBuf;
use std::process::ExitCode;

/// How to turn the agent step on, in one line.
const NO_MODEL: &str = "agent: skipped, no model configured: set OPENAI_API_KEY (OpenAI), or OPENAI_BASE_URL=http://127.0.0.1:11434/v1 OPENAI_MODEL=llama3.2 (a local Ollama), or add [models.default] to cairn.toml";

/// `[models.default]` from the environment, when the config has none and
/// `OPENAI_API_KEY` or `OPENAI_BASE_URL` is set.
fn model_from_env(config: &mut RuntimeConfig) -> bool {
    if config.host.models.contains_key("default") {
        return true;
    }
    let key = std::env::var("OPENAI_API_KEY")
        .ok()
        .filter(|k| !k.is_empty());
    let base = std::env::var("OPENAI_BASE_URL")
        .ok()
        .filter(|b| !b.is_empty());
    if key.is_none() && base.is_none() {
        return false;
    }
    let api_key = key.map(|_| {
        config.host.secrets.insert(
            "openai-api-key".into(),
            SecretSource::Env("OPENAI_API_KEY".into()),
        );
        "openai-api-key".to_string()
    });
    config.host.models.insert(
        "default".into(),
        ModelEntry {
            provider: Provider::Openai,
            base_url: base.unwrap_or_else(|| "https://api.openai.com/v1".into()),
            model: std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".into()),
            api_key,
            max_retries: None,
            timeout_ms: None,
        },
    );
    true
}

pub async fn demo(home: PathBuf) -> anyhow::Result<ExitCode> {
    let mut config = RuntimeConfig {
        command: "demo".into(),
        ..RuntimeConfig::load(&home, None)?
    };
    let agent = model_from_env(&mut config);
    let rt = crate::open_runtime(config).await?;
    let mut out = std::io::stdout();
    let mut ok = true;
    let mut examples = vec![
        ("echo", "hello from a sandboxed controller", false),
        ("approval", "deploy the demo", true),
    ];
    if agent {
        examples.push((
            "agent",
            "write a haiku about durable journals to haiku.txt, then read it back to me",
            true,
        ));
    }
    for (example, prompt, decide) in examples {
        println!("\n== {example}: {prompt:?}");
        let req = StartRun::new(ComponentRef::BuiltIn(example.into()), prompt);
        let mut answers = if decide {
            Answers::approving()
        } else {
            Answers::default()
        };
        let ran = run_once(&rt, req, false, &mut answers, &mut out).await?;
        ok &= ran.status == RunStatus::Finished;
        println!("== {example} {}", ran.reason);
        println!("   journal: {}", journal_path(&rt, &ran.started)?);
    }
    if !agent {
        println!("\n{NO_MODEL}");
    }
    println!("\nhome: {}", rt.workers().path().display());
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
