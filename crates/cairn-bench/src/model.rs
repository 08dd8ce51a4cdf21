//! The model bench: a journaled `cairn:model` call against the same request
//! sent straight to a stand-in provider (OpenAI wire, on loopback, answering
//! after a fixed latency), and a streamed call's first token through cairn
//! against direct. Both measured in the same run, so the ratio holds on a
//! noisy machine.

use super::Row;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use cairn_runtime::journal::Delivery;
use cairn_runtime::journal::event::{AgentEvent, Payload};
use cairn_runtime::runtime::{ComponentRef, Runtime, RuntimeConfig, StartRun, StoreKind};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The stand-in's latency before it answers (its first token, streamed).
pub const LATENCY: Duration = Duration::from_millis(5);

async fn completions(axum::Json(body): axum::Json<serde_json::Value>) -> Response {
    tokio::time::sleep(LATENCY).await;
    if body["stream"].as_bool().unwrap_or(false) {
        let mut chunks: Vec<Result<String, std::io::Error>> = (0..10)
            .map(|i| {
                let c = serde_json::json!({"model": "standin", "choices": [{"index": 0, "delta": {"content": format!("t{i} ")}}]});
                Ok(format!("data: {c}\n\n"))
            })
            .collect();
        let end = serde_json::json!({"model": "standin", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 5, "completion_tokens": 10}});
        chunks.push(Ok(format!("data: {end}\n\ndata: [DONE]\n\n")));
        return Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(futures_util::stream::iter(chunks)))
            .unwrap_or_default();
    }
    axum::Json(serde_json::json!({
        "model": "standin",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "a short answer"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3},
    }))
    .into_response()
}

async fn standin() -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}/v1", listener.local_addr()?);
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(completions));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(base)
}

async fn runtime(home: &Path, base: &str, memory: bool) -> anyhow::Result<Runtime> {
    let mut config = RuntimeConfig::new(home);
    if memory {
        config.store = StoreKind::Memory { window: 1 << 20 };
    }
    config.host.models.insert(
        "default".into(),
        cairn_types::model::ModelEntry {
            provider: cairn_types::model::Provider::Openai,
            base_url: base.to_string(),
            model: "standin".into(),
            api_key: None,
            max_retries: Some(0),
            timeout_ms: None,
        },
    );
    let model = cairn_capabilities::model::ModelCapability::new(
        config.host.models.clone(),
        Default::default(),
    );
    Ok(Runtime::builder(config)
        .capability(Arc::new(model))
        .open()
        .await?)
}

/// One run of `bench-emit` with `prompt`, start to end.
async fn run(rt: &Runtime, prompt: &str) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let started = rt
        .start(StartRun::new(
            ComponentRef::BuiltIn("bench-emit".into()),
            prompt,
        ))
        .await?;
    let facts = rt.wait(started.run_id).await?;
    anyhow::ensure!(
        facts.status == cairn_runtime::RunStatus::Finished,
        "the bench run ended {:?}",
        facts.status
    );
    Ok(t.elapsed())
}

/// Milliseconds a journaled call takes: a run of `n` calls less a run of
/// none, over `n` (the median of three).
async fn journaled_ms(rt: &Runtime, n: u64) -> anyhow::Result<f64> {
    let mut per = Vec::new();
    for _ in 0..3 {
        let none = run(rt, "model 0").await?;
        let many = run(rt, &format!("model {n}")).await?;
        per.push(many.saturating_sub(none).as_secs_f64() * 1e3 / n as f64);
    }
    per.sort_by(f64::total_cmp);
    Ok(per[1])
}

fn body(stream: bool) -> serde_json::Value {
    serde_json::json!({"model": "standin", "messages": [{"role": "user", "content": "call 0"}], "stream": stream})
}

/// Milliseconds the same request takes sent directly (mean of `n`).
async fn direct_ms(base: &str, n: u64) -> anyhow::Result<f64> {
    let client = reqwest::Client::new();
    let url = format!("{base}/chat/completions");
    let t = Instant::now();
    for _ in 0..n {
        let v: serde_json::Value = client
            .post(&url)
            .json(&body(false))
            .send()
            .await?
            .json()
            .await?;
        anyhow::ensure!(
            v["choices"][0]["message"]["content"].is_string(),
            "bad answer"
        );
    }
    Ok(t.elapsed().as_secs_f64() * 1e3 / n as f64)
}

/// Milliseconds from sending a streamed request to its first token (median).
async fn direct_ttft_ms(base: &str, n: usize) -> anyhow::Result<f64> {
    let client = reqwest::Client::new();
    let url = format!("{base}/chat/completions");
    let mut all = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let mut response = client.post(&url).json(&body(true)).send().await?;
        let first = response.chunk().await?;
        anyhow::ensure!(first.is_some_and(|c| !c.is_empty()), "no first chunk");
        all.push(t.elapsed().as_secs_f64() * 1e3);
        while response.chunk().await?.is_some() {}
    }
    all.sort_by(f64::total_cmp);
    Ok(all[all.len() / 2])
}

/// Milliseconds from a run's start to its model's first token at a
/// subscriber (median): a fresh run whose first act is a streamed call.
async fn cairn_ttft_ms(rt: &Runtime, n: usize) -> anyhow::Result<f64> {
    let mut all = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let started = rt
            .start(StartRun::new(
                ComponentRef::BuiltIn("bench-emit".into()),
                "model-stream 1",
            ))
            .await?;
        let mut sub = rt.subscribe(&started.session_id, started.after).await?;
        loop {
            let Some(d) = sub.next().await else {
                anyhow::bail!("the journal closed before the first token");
            };
            if let Delivery::Event(e) = d?
                && matches!(
                    e.payload,
                    Payload::Agent(AgentEvent::TextDelta { by: Some(_), .. })
                )
            {
                all.push(t.elapsed().as_secs_f64() * 1e3);
                break;
            }
        }
        rt.wait(started.run_id).await?;
    }
    all.sort_by(f64::total_cmp);
    Ok(all[all.len() / 2])
}

/// The model bench's rows.
pub async fn run_bench(
    dir: &Path,
    quick: bool,
    progress: &mut dyn FnMut(String),
) -> anyhow::Result<Vec<Row>> {
    let base = standin().await?;
    let n: u64 = if quick { 10 } else { 100 };
    let mut rows = Vec::new();
    progress(format!(
        "model: {n} calls journaled and {n} sent directly, at a {} ms stand-in",
        LATENCY.as_millis()
    ));
    // Warm the connection pool and the compiled component first.
    direct_ms(&base, 3).await?;
    for (memory, store) in [(false, "file store, durable"), (true, "memory store")] {
        let home = dir.join(format!("model-home-{memory}"));
        let rt = runtime(&home, &base, memory).await?;
        run(&rt, "model 3").await?;
        let direct = direct_ms(&base, n).await?;
        let journaled = journaled_ms(&rt, n).await?;
        rows.push(Row::new(
            "model",
            format!(
                "journaled model call ({store}), {} ms stand-in",
                LATENCY.as_millis()
            ),
            "ms/call",
            journaled,
            "the same request sent directly",
            direct,
            "lower",
        ));
        if !memory {
            let k = if quick { 5 } else { 30 };
            let direct = direct_ttft_ms(&base, k).await?;
            let through = cairn_ttft_ms(&rt, k).await?;
            rows.push(Row::new(
                "model",
                "streamed call: run start → first token at a subscriber (p50)",
                "ms",
                through,
                "request → first token, direct",
                direct,
                "lower",
            ));
        }
        rt.shutdown(Duration::from_secs(5)).await;
    }
    Ok(rows)
}
