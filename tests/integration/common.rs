//! Helpers shared by the topics.

use cairn::journal::Delivery;
use cairn::runtime::{ComponentRef, Runtime, RuntimeConfig, StartRun, Started};
use cairn::{LifecycleEvent, Payload, RunFacts, SessionEvent};
use std::path::Path;

/// A runtime on a fresh home inside `dir`.
pub async fn runtime(dir: &Path) -> Runtime {
    Runtime::open(RuntimeConfig::new(dir.join("home")))
        .await
        .expect("runtime opens")
}

/// A request for a built-in example.
pub fn start_req(example: &str, prompt: &str) -> StartRun {
    StartRun::new(ComponentRef::BuiltIn(example.into()), prompt)
}

/// Start a run, answer each decision with `answer`, collect its events to the end.
pub async fn run_to_end(
    rt: &Runtime,
    req: StartRun,
    answer: Option<serde_json::Value>,
) -> (Started, RunFacts, Vec<SessionEvent>) {
    let started = rt.start(req).await.expect("run starts");
    let mut sub = rt
        .subscribe(&started.session_id, started.after)
        .await
        .unwrap();
    let mut events = Vec::new();
    loop {
        let d = tokio::time::timeout(std::time::Duration::from_secs(60), sub.next())
            .await
            .expect("the run goes on")
            .expect("journal open")
            .expect("no store error");
        let Delivery::Event(e) = d else {
            panic!("unexpected delivery {d:?}")
        };
        events.push((*e).clone());
        if let Payload::Lifecycle(LifecycleEvent::DecisionRequested { decision_id, .. }) =
            &e.payload
            && let Some(v) = &answer
        {
            rt.decide(decision_id, v.clone()).await.unwrap();
        }
        if let Some(facts) = &e.facts {
            return (started, facts.clone(), events);
        }
    }
}

/// The journal lines of a file, parsed.
pub fn read_jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect()
}

/// The `cairn` binary.
pub fn cairn_bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
}

/// A fixture guest's component path.
pub fn fixture(name: &str) -> std::path::PathBuf {
    cairn::examples::FIXTURES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| std::path::PathBuf::from(p))
        .unwrap_or_else(|| panic!("no fixture {name}"))
}

/// Percent-encode a path segment.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
