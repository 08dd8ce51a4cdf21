//! `cairn:model`: a controller calls a language model through the host,
//! against a stand-in provider on loopback (`model_standin`) that speaks
//! the OpenAI and Anthropic wires. The key stays host-side, every answer is
//! journaled, a replay calls nobody, a crash re-sends only the call that
//! was under way.

use crate::common::{cairn_in, run_to_end, session_of_output, start_req};
use crate::model_standin::{self, Reply};
use cairn_runtime::runtime::{Runtime, RuntimeConfig};
use cairn_runtime::{LifecycleEvent, Payload};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

const KEY: &str = "sk-standin-7f3a9c1e-never-in-a-journal";

/// `cairn.toml` with one model entry over the stand-in; the key from a
/// file (in-process tests cannot set the environment safely) or `env`.
fn config(base: &str, provider: &str, key: &str, extra: &str) -> String {
    let base_url = match provider {
        "openai" => format!("{base}/v1"),
        _ => base.to_string(),
    };
    format!(
        "[secrets]\nmodel-key = {key}\n\n[models.default]\nprovider = \"{provider}\"\nbase_url = \"{base_url}\"\nmodel = \"standin-1\"\napi_key = \"model-key\"\n{extra}"
    )
}

fn key_file(dir: &Path) -> String {
    let path = dir.join("model.key");
    std::fs::write(&path, format!("{KEY}\n")).unwrap();
    format!("{{ file = \"{}\" }}", path.display())
}

async fn runtime(home: &Path, toml: &str) -> Runtime {
    std::fs::create_dir_all(home).unwrap();
    std::fs::write(home.join("cairn.toml"), toml).unwrap();
    cairn_cli::open_runtime(RuntimeConfig::load(home, None).unwrap())
        .await
        .unwrap()
}

/// Every file under `dir`, as bytes, with its path.
fn every_file(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let ty = entry.file_type().unwrap();
        if ty.is_dir() {
            out.extend(every_file(&path));
        } else if ty.is_file() && !path.ends_with("model.key") {
            out.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    out
}

fn assert_no_key(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    assert!(!text.contains(KEY), "the key is in {what}");
    assert!(!text.contains("7f3a9c1e"), "part of the key is in {what}");
}

/// The agent's three steps: write a file, read it back, answer.
fn agent_script() -> Vec<Reply> {
    vec![
        Reply::tool(
            "call_1",
            "write_file",
            json!({"path": "notes.txt", "content": "hello from the agent"}),
        ),
        Reply::tool("call_2", "read_file", json!({"path": "notes.txt"})),
        Reply::text("notes.txt says: hello from the agent"),
    ]
}

fn journal_of(home: &Path, session: &str) -> Vec<Value> {
    let out = cairn_in(home, &["export", session]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_key("cairn export", &out.stdout);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The message of the run's `failed` entry.
fn failure_of(events: &[Value]) -> String {
    of_type(events, "failed")
        .last()
        .map(|e| {
            e["payload"]["event"]["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .unwrap_or_default()
}

/// The entries of type `ty` that belong to model calls (an agent also
/// lists its MCP tools through the host).
fn model_calls<'a>(entries: &'a [Value], ty: &str) -> Vec<&'a Value> {
    let model: Vec<(&Value, &Value)> = of_type(entries, "host_call_started")
        .into_iter()
        .filter(|e| e["payload"]["event"]["capability"] == "model")
        .map(|e| (&e["run_id"], &e["payload"]["event"]["call_id"]))
        .collect();
    of_type(entries, ty)
        .into_iter()
        .filter(|e| model.contains(&(&e["run_id"], &e["payload"]["event"]["call_id"])))
        .collect()
}

fn of_type<'a>(entries: &'a [Value], ty: &str) -> Vec<&'a Value> {
    entries
        .iter()
        .filter(|e| e["payload"]["event"]["type"] == ty)
        .collect()
}

#[test]
fn an_agent_calls_the_model_through_the_host_and_replays_without_it() {
    let provider = model_standin::start(agent_script());
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("cairn.toml"),
        config(
            &provider.base,
            "openai",
            "{ env = \"CAIRN_TEST_MODEL_KEY\" }",
            "",
        ),
    )
    .unwrap();
    let out = crate::common::cairn_bin()
        .args([
            "run",
            "agent",
            "--prompt",
            "note hello, then tell me what the note says",
            "--json",
            "--home",
        ])
        .arg(&home)
        .env("CAIRN_TEST_MODEL_KEY", KEY)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_key("cairn run's stdout", &out.stdout);
    assert_no_key("cairn run's stderr", &out.stderr);
    let session = session_of_output(&out.stdout);

    // The provider saw three calls, each with the key, the tools and the
    // conversation so far (tool results by their call's id).
    let bodies = provider.bodies();
    assert_eq!(bodies.len(), 3);
    for headers in provider.seen.headers.lock().unwrap().iter() {
        assert_eq!(headers["authorization"], format!("Bearer {KEY}").as_str());
    }
    assert_eq!(bodies[0]["model"], "standin-1");
    assert_eq!(bodies[0]["messages"][0]["role"], "system");
    assert_eq!(bodies[0]["tools"].as_array().unwrap().len(), 4);
    assert_eq!(bodies[0]["stream"], true);
    let second = bodies[1]["messages"].as_array().unwrap();
    let assistant = &second[second.len() - 2];
    assert_eq!(assistant["tool_calls"][0]["id"], "call_1");
    assert_eq!(second.last().unwrap()["role"], "tool");
    assert_eq!(second.last().unwrap()["tool_call_id"], "call_1");
    assert_eq!(second.last().unwrap()["content"], "written");
    let third = bodies[2]["messages"].as_array().unwrap();
    assert_eq!(third.last().unwrap()["content"], "hello from the agent");

    // The journal: each call started and finished, the tokens streamed as
    // the model's, usage summed on the run's end; no key anywhere.
    let entries = journal_of(&home, &session);
    let started = model_calls(&entries, "host_call_started");
    let finished = model_calls(&entries, "host_call_finished");
    assert_eq!(started.len(), 3);
    assert_eq!(finished.len(), 3);
    assert_eq!(started[0]["payload"]["event"]["capability"], "model");
    assert_eq!(
        started[0]["payload"]["event"]["request"]["model"],
        "default"
    );
    let ids: Vec<u64> = finished
        .iter()
        .map(|e| e["payload"]["event"]["call_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [2, 3, 4], "after the tools list (call 1)");
    let model_text: String = of_type(&entries, "text_delta")
        .iter()
        .filter(|e| e["payload"]["event"]["by"] == "model")
        .map(|e| e["payload"]["event"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(model_text, "notes.txt says: hello from the agent");
    let model_calls: Vec<_> = of_type(&entries, "tool_call")
        .into_iter()
        .filter(|e| e["payload"]["event"]["by"] == "model")
        .collect();
    assert_eq!(model_calls.len(), 2);
    let end = of_type(&entries, "finished");
    assert_eq!(end.len(), 1);
    assert_eq!(
        end[0]["payload"]["event"]["text"],
        "notes.txt says: hello from the agent"
    );
    let usage = &end[0]["payload"]["event"]["usage"];
    assert_eq!(usage["input_tokens"], 33);
    assert_eq!(usage["output_tokens"], 21);
    // Three model calls, and the agent's look for MCP tools (none granted).
    assert_eq!(usage["host_calls"], 4);
    for (path, bytes) in every_file(&home) {
        assert_no_key(&path.display().to_string(), &bytes);
    }

    // Offline replay re-runs the agent against the journal: it matches and
    // the provider hears nothing.
    let out = cairn_in(&home, &["replay", &session]);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 of 1"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(provider.requests(), 3, "a replay called the provider");
}

#[tokio::test]
async fn a_workspace_without_the_model_grant_is_refused() {
    let provider = model_standin::start(vec![Reply::text("granted")]);
    let tmp = tempfile::tempdir().unwrap();
    let extra = "[workspaces.a]\ntokens = [\"token-of-workspace-a-0123456789\"]\nmodels = [\"default\"]\n[workspaces.b]\ntokens = [\"token-of-workspace-b-0123456789\"]\n";
    let rt = runtime(
        &tmp.path().join("home"),
        &config(&provider.base, "openai", &key_file(tmp.path()), extra),
    )
    .await;
    let mut req = start_req("agent", "hello");
    req.workspace = Some("b".into());
    let (started, facts, _) = run_to_end(&rt, req, None).await;
    assert_eq!(facts.status, cairn_runtime::RunStatus::Failed);
    let events = crate::common::entries_json(&rt, &started.session_id).await;
    let message = failure_of(&events);
    assert!(
        message.contains("may not use the model \"default\""),
        "{message}"
    );
    let finished = model_calls(&events, "host_call_finished");
    assert_eq!(finished[0]["payload"]["event"]["error"]["code"], "refused");
    assert_eq!(
        provider.requests(),
        0,
        "a refused call reached the provider"
    );
    let mut req = start_req("agent", "hello");
    req.workspace = Some("a".into());
    let (_, facts, _) = run_to_end(&rt, req, None).await;
    assert_eq!(facts.status, cairn_runtime::RunStatus::Finished);
    assert_eq!(provider.requests(), 1);
    // /metrics counts calls and tokens per workspace and model entry.
    let metrics = rt.render_metrics();
    for line in [
        "cairn_model_calls_total{workspace=\"b\",model=\"default\",outcome=\"refused\"} 1",
        "cairn_model_calls_total{workspace=\"a\",model=\"default\",outcome=\"ok\"} 1",
        "cairn_model_tokens_total{workspace=\"a\",model=\"default\",direction=\"input\"} 11",
        "cairn_model_tokens_total{workspace=\"a\",model=\"default\",direction=\"output\"} 7",
    ] {
        assert!(metrics.contains(line), "no {line} in\n{metrics}");
    }
}

#[tokio::test]
async fn a_429_storm_blocks_on_provider_retry_then_fails_by_name() {
    let provider = model_standin::start(vec![Reply::Status(429, Some(1))]);
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(
        &tmp.path().join("home"),
        &config(
            &provider.base,
            "openai",
            &key_file(tmp.path()),
            "max_retries = 2\n",
        ),
    )
    .await;
    let started = rt.start(start_req("agent", "hello")).await.unwrap();
    // While it waits out a retry, the session reads blocked: provider_retry.
    let mut saw_blocked = false;
    for _ in 0..100 {
        let state =
            serde_json::to_value(rt.summary(&started.session_id).await.unwrap().state).unwrap();
        if state.to_string().contains("provider_retry") {
            saw_blocked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        saw_blocked,
        "the session never read blocked: provider_retry"
    );
    let facts = rt.wait(started.run_id).await.unwrap();
    assert_eq!(facts.status, cairn_runtime::RunStatus::Failed);
    let events = crate::common::entries_json(&rt, &started.session_id).await;
    let message = failure_of(&events);
    assert!(message.contains("429"), "{message}");
    assert!(message.contains("after 3 attempts"), "{message}");
    assert_eq!(provider.requests(), 3);
    let retries = of_type(&events, "retrying");
    assert_eq!(retries.len(), 2);
    assert_eq!(retries[0]["payload"]["event"]["after_ms"], 1000);
    for e in &events {
        assert_no_key("the journal", e.to_string().as_bytes());
    }
}

#[tokio::test]
async fn the_anthropic_wire_carries_the_agent_loop() {
    let provider = model_standin::start(agent_script());
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(
        &tmp.path().join("home"),
        &config(&provider.base, "anthropic", &key_file(tmp.path()), ""),
    )
    .await;
    let (_, facts, events) = run_to_end(&rt, start_req("agent", "note hello"), None).await;
    assert_eq!(facts.status, cairn_runtime::RunStatus::Finished);
    let bodies = provider.bodies();
    assert_eq!(bodies.len(), 3);
    for headers in provider.seen.headers.lock().unwrap().iter() {
        assert_eq!(headers["x-api-key"], KEY);
        assert_eq!(headers["anthropic-version"], "2023-06-01");
    }
    // System apart; the tool result a user turn's tool_result block.
    assert!(bodies[0]["system"].as_str().unwrap().contains("agent"));
    assert_eq!(bodies[0]["tools"][0]["input_schema"]["type"], "object");
    let last = bodies[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"][0]["type"], "tool_result");
    assert_eq!(last["content"][0]["tool_use_id"], "call_1");
    let before = &bodies[1]["messages"].as_array().unwrap()
        [bodies[1]["messages"].as_array().unwrap().len() - 2];
    assert_eq!(before["content"][0]["type"], "tool_use");
    assert_eq!(before["content"][0]["input"]["path"], "notes.txt");
    let text: String = events
        .iter()
        .filter_map(|e| match &e.payload {
            Payload::Agent(cairn_runtime::AgentEvent::TextDelta { text, by: Some(_) }) => {
                Some(text.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(text, "notes.txt says: hello from the agent");
    let tokens: u64 = events
        .iter()
        .filter_map(|e| match &e.payload {
            Payload::Lifecycle(LifecycleEvent::HostCallFinished { usage: Some(u), .. }) => {
                Some(u.input_tokens)
            }
            _ => None,
        })
        .sum();
    assert_eq!(tokens, 39);
}

#[tokio::test]
async fn a_cancel_during_a_stream_closes_the_provider_connection() {
    let provider = model_standin::start(vec![Reply::slow(&"x".repeat(400), 50)]);
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(
        &tmp.path().join("home"),
        &config(&provider.base, "openai", &key_file(tmp.path()), ""),
    )
    .await;
    let started = rt.start(start_req("agent", "talk")).await.unwrap();
    // Wait for the stream to be under way (a token journaled).
    let mut streaming = false;
    for _ in 0..200 {
        let events = crate::common::entries_json(&rt, &started.session_id).await;
        if events
            .iter()
            .any(|e| e["payload"]["event"]["by"] == "model")
        {
            streaming = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(streaming, "the stream never began");
    rt.cancel(
        started.run_id,
        cairn_runtime::journal::event::CancelReason::External,
        "enough",
    )
    .unwrap();
    let facts = rt.wait(started.run_id).await.unwrap();
    assert_eq!(facts.status, cairn_runtime::RunStatus::Cancelled);
    let mut closed = false;
    for _ in 0..100 {
        if provider
            .seen
            .dropped
            .load(std::sync::atomic::Ordering::SeqCst)
            == 1
        {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(closed, "the provider's stream was not closed by the cancel");
    assert_eq!(provider.requests(), 1);
}

#[test]
fn a_killed_server_sends_an_unfinished_model_call_again_once() {
    // Call 1 ends before the kill; call 2 is streaming when `serve` is
    // killed; after the restart call 2 is sent again (once) and call 1 is
    // answered from the journal.
    let provider = model_standin::start(vec![
        Reply::tool(
            "call_1",
            "write_file",
            json!({"path": "notes.txt", "content": "before the crash"}),
        ),
        Reply::slow("this answer is cut short by a crash of the host", 150),
        Reply::text("answered after the restart"),
    ]);
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("cairn.toml"),
        config(&provider.base, "openai", &key_file(tmp.path()), ""),
    )
    .unwrap();
    let http = reqwest::blocking::Client::new();
    let served = crate::common::serve(&home);
    let r: Value = http
        .post(format!("{}/v1/runs", served.url))
        .json(&json!({"component": "agent", "prompt": "note it, then answer", "session": "crashy"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let run = r["run_id"].as_str().expect("accepted").to_string();
    // Kill -9 while call 2 streams (its start is durable before it is sent).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while provider.requests() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "call 2 never went out"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(700));
    drop(served);
    assert_eq!(provider.requests(), 2);

    let served = crate::common::serve(&home);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let end = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the restored run never ended"
        );
        let v: Value = http
            .get(format!("{}/v1/runs/{run}", served.url))
            .send()
            .unwrap()
            .json()
            .unwrap();
        if ["finished", "failed", "cancelled", "parked"]
            .iter()
            .any(|s| v["state"] == *s)
        {
            break v;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(end["state"], "finished", "{end}");
    drop(served);
    // Call 1 was never sent again; call 2 was, once, as it was.
    let bodies = provider.bodies();
    assert_eq!(bodies.len(), 3, "requests: {bodies:?}");
    assert_eq!(bodies[2], bodies[1], "the re-sent call is the same request");
    let entries = journal_of(&home, "crashy");
    let started = model_calls(&entries, "host_call_started");
    let finished = model_calls(&entries, "host_call_finished");
    assert_eq!(started.len(), 2, "each call started once in the journal");
    assert_eq!(finished.len(), 2);
    assert_eq!(finished[1]["payload"]["event"]["call_id"], 3);
    assert_eq!(
        finished[1]["payload"]["event"]["response"]["text"],
        "answered after the restart"
    );
    assert_eq!(of_type(&entries, "resumed_by_replay").len(), 1);
    assert_eq!(
        of_type(&entries, "finished")[0]["payload"]["event"]["text"],
        "answered after the restart"
    );
    // And the session replays offline without the provider.
    let out = cairn_in(&home, &["replay", "crashy"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(provider.requests(), 3);
}

#[test]
fn the_demo_runs_the_agent_when_openai_base_url_names_a_model_server() {
    let provider = model_standin::start(vec![
        Reply::tool(
            "call_1",
            "write_file",
            json!({"path": "haiku.txt", "content": "journals never forget"}),
        ),
        Reply::tool("call_2", "read_file", json!({"path": "haiku.txt"})),
        Reply::text("journals never forget"),
    ]);
    let tmp = tempfile::tempdir().unwrap();
    let out = crate::common::cairn_bin()
        .arg("demo")
        .env("CAIRN_HOME", tmp.path())
        .env("OPENAI_BASE_URL", format!("{}/v1", provider.base))
        .env("OPENAI_API_KEY", KEY)
        .env("OPENAI_MODEL", "standin-1")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("== agent finished"), "{text}");
    assert!(!text.contains("agent: skipped"), "{text}");
    assert_no_key("the demo's output", text.as_bytes());
    assert_eq!(provider.requests(), 3);
    assert_eq!(provider.bodies()[0]["model"], "standin-1");
    for (path, bytes) in every_file(tmp.path()) {
        assert_no_key(&path.display().to_string(), &bytes);
    }
}

#[tokio::test]
async fn a_provider_that_echoes_the_key_has_it_redacted_from_every_message() {
    let provider = model_standin::start(vec![Reply::EchoKey]);
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(
        &tmp.path().join("home"),
        &config(&provider.base, "openai", &key_file(tmp.path()), ""),
    )
    .await;
    let (started, facts, _) = run_to_end(&rt, start_req("agent", "hello"), None).await;
    assert_eq!(facts.status, cairn_runtime::RunStatus::Failed);
    assert_eq!(provider.requests(), 1, "a 401 is not retried");
    let events = crate::common::entries_json(&rt, &started.session_id).await;
    let message = failure_of(&events);
    assert!(message.contains("401"), "{message}");
    assert!(message.contains("[secret model-key]"), "{message}");
    for e in &events {
        assert_no_key("the journal", e.to_string().as_bytes());
    }
    drop(rt);
    for (path, bytes) in every_file(tmp.path()) {
        assert_no_key(&path.display().to_string(), &bytes);
    }
}

#[tokio::test]
async fn model_limits_end_the_run_by_name() {
    // Two calls where one is allowed: the second is refused as a value and
    // the run ends limit_exceeded naming model_calls.
    let provider = model_standin::start(agent_script());
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(
        &tmp.path().join("home"),
        &config(
            &provider.base,
            "openai",
            &key_file(tmp.path()),
            "\n[limits]\nmodel_calls = 1\n",
        ),
    )
    .await;
    let (started, facts, _) = run_to_end(&rt, start_req("agent", "note hello"), None).await;
    assert_eq!(facts.status, cairn_runtime::RunStatus::Failed);
    assert_eq!(provider.requests(), 1);
    let events = crate::common::entries_json(&rt, &started.session_id).await;
    let failed = of_type(&events, "failed");
    let error = &failed[0]["payload"]["event"]["error"];
    assert_eq!(error["code"], "limit_exceeded", "{error}");
    assert_eq!(error["details"]["limit"], "model_calls", "{error}");
    let finished = model_calls(&events, "host_call_finished");
    assert_eq!(finished.len(), 2);
    assert_eq!(
        finished[1]["payload"]["event"]["error"]["code"],
        "limit_exceeded"
    );

    // Tokens: the first call's 18 tokens pass a budget of 10.
    let provider = model_standin::start(agent_script());
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(
        &tmp.path().join("home"),
        &config(
            &provider.base,
            "openai",
            &key_file(tmp.path()),
            "\n[limits]\nmodel_tokens = 10\n",
        ),
    )
    .await;
    let (started, facts, _) = run_to_end(&rt, start_req("agent", "note hello"), None).await;
    assert_eq!(facts.status, cairn_runtime::RunStatus::Failed);
    let events = crate::common::entries_json(&rt, &started.session_id).await;
    let error = &of_type(&events, "failed")[0]["payload"]["event"]["error"];
    assert_eq!(error["details"]["limit"], "model_tokens", "{error}");
    assert_eq!(error["details"]["value"], 18, "{error}");
    assert_eq!(provider.requests(), 1);
}

#[tokio::test]
async fn a_chat_client_sees_the_models_tokens_live_and_never_the_key() {
    let provider = model_standin::start(vec![Reply::slow("streamed through the chat seam", 20)]);
    let tmp = tempfile::tempdir().unwrap();
    let toml = config(&provider.base, "openai", &key_file(tmp.path()), "");
    let (_home, _rt, base) = crate::common::served_here(Some(&toml)).await;
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": "agent", "stream": true, "messages": [{"role": "user", "content": "say something"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    assert_no_key("the chat stream", body.as_bytes());
    let content: String = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(content, "streamed through the chat seam");
    // The tokens came as many chunks, as the model streamed them.
    let chunks = body.lines().filter(|l| l.contains("\"content\"")).count();
    assert!(chunks >= 10, "{chunks} chunks:\n{body}");
    assert_eq!(provider.requests(), 1);
}

#[tokio::test]
async fn every_run_of_a_multi_turn_agent_session_replays_with_the_history_it_saw() {
    // The agent puts the session's history into its model request: an
    // offline replay of run 1 must give it the turns before run 1 only,
    // not run 2's (its journaled request would differ otherwise).
    let provider = model_standin::start(vec![
        Reply::text("the first answer"),
        Reply::text("the second answer"),
    ]);
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rt = runtime(
        &home,
        &config(&provider.base, "openai", &key_file(tmp.path()), ""),
    )
    .await;
    let (first, facts, _) = run_to_end(&rt, start_req("agent", "first question"), None).await;
    assert_eq!(facts.status, cairn_runtime::RunStatus::Finished);
    let mut second = start_req("agent", "second question");
    second.session = Some(first.session_id.clone());
    second.component = None;
    let (_, facts, _) = run_to_end(&rt, second, None).await;
    assert_eq!(facts.status, cairn_runtime::RunStatus::Finished);
    let bodies = provider.bodies();
    let contents: Vec<&str> = bodies[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        contents[1..],
        ["first question", "the first answer", "second question"]
    );
    rt.shutdown(Duration::from_secs(5)).await;
    drop(rt);
    let out = cairn_in(&home, &["replay", &first.session_id.to_string()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("2 of 2"), "{stdout}");
    assert_eq!(provider.requests(), 2);
}

#[test]
fn an_agent_on_a_host_without_models_says_how_to_add_one() {
    let tmp = tempfile::tempdir().unwrap();
    let out = crate::common::cairn_bin()
        .args(["run", "agent", "--prompt", "hello", "--home"])
        .arg(tmp.path().join("home"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("there is no model \"default\" in this host's [models] (add [models.default] to cairn.toml)"),
        "{text}"
    );
}
