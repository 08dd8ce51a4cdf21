//! `GET /metrics`: one registry per runtime (two servers in one process
//! count apart), requests by route and status, runs started and ended,
//! run durations and commit latency as histograms, live runs as gauges.

use crate::common::served_here;
use serde_json::json;

async fn scrape(http: &reqwest::Client, base: &str) -> String {
    http.get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Wait until `GET /v1/runs/{run}` says `finished`: long, as a loaded
/// machine compiles the component slowly, and saying so if it never does.
async fn finished(http: &reqwest::Client, base: &str, run: &str) {
    let t = std::time::Instant::now();
    loop {
        let r = crate::common::get_json(http, &format!("{base}/v1/runs/{run}")).await;
        if r["state"] == "finished" {
            return;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "the run did not finish in 60 s: {r}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// The value of the sample `name` (with its labels as written), if any.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_per_runtime_and_count_requests_runs_and_commits() {
    let (_a_dir, _a, a) = served_here(None).await;
    let (_b_dir, _b, b) = served_here(None).await;
    let http = reqwest::Client::new();
    let started: serde_json::Value = http
        .post(format!("{a}/v1/runs"))
        .json(&json!({"component": "echo", "prompt": "counted"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run = started["run_id"].as_str().unwrap();
    finished(&http, &a, run).await;
    let _ = http
        .get(format!("{a}/v1/runs/not-a-run"))
        .send()
        .await
        .unwrap();
    let text = scrape(&http, &a).await;
    // Every sample line is `name{labels} value`.
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let value = line.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }
    assert_eq!(
        sample(&text, "cairn_runs_started_total"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "cairn_runs_ended_total{status=\"finished\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "cairn_run_duration_seconds_count{status=\"finished\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert!(
        sample(&text, "cairn_journal_commit_seconds_count").is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert!(
        sample(&text, "cairn_events_appended_total").is_some_and(|n| n >= 3.0),
        "{text}"
    );
    assert!(
        sample(
            &text,
            "cairn_http_requests_total{method=\"POST\",route=\"/v1/runs\",status=\"202\"}"
        ) == Some(1.0)
            || sample(
                &text,
                "cairn_http_requests_total{method=\"POST\",route=\"/v1/runs\",status=\"201\"}"
            ) == Some(1.0),
        "{text}"
    );
    assert!(
        text.contains("route=\"/v1/runs/{id}\",status=\"400\"")
            || text.contains("route=\"/v1/runs/{id}\",status=\"404\""),
        "the route template, never the raw path: {text}"
    );
    assert!(!text.contains("not-a-run"), "{text}");
    assert_eq!(
        sample(&text, "cairn_runs_live{state=\"running\"}"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(sample(&text, "cairn_runs_waiting"), Some(0.0), "{text}");
    // The other runtime in this process counted nothing of it.
    let other = scrape(&http, &b).await;
    assert_eq!(
        sample(&other, "cairn_runs_started_total"),
        Some(0.0),
        "{other}"
    );
    assert!(!other.contains("route=\"/v1/runs\""), "{other}");
}

/// A run's end is in the store a moment before it is published
/// (`CAIRN_FAULT=end-published-late` holds that moment 500 ms), and
/// readable a moment before its task hands back the facts
/// (`facts-late`, 500 ms): either way, once `GET /v1/runs/{id}` says
/// `finished`, the metrics scraped count the run ended and not running
/// (the test above failed so under a loaded suite, both ways).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_read_as_ended_is_counted_ended_in_the_metrics() {
    for fault in ["end-published-late", "facts-late"] {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let served = crate::common::serve_with(&home, &[("CAIRN_FAULT", fault)]).unwrap();
        let base = &served.url;
        let http = reqwest::Client::new();
        let started = crate::common::post_json(
            &http,
            &format!("{base}/v1/runs"),
            &json!({"component": "echo", "prompt": "counted at once"}),
        )
        .await;
        let run = started["run_id"].as_str().unwrap();
        finished(&http, base, run).await;
        let text = scrape(&http, base).await;
        assert_eq!(
            sample(&text, "cairn_runs_ended_total{status=\"finished\"}"),
            Some(1.0),
            "{fault}: {text}"
        );
        assert_eq!(
            sample(&text, "cairn_runs_live{state=\"running\"}"),
            Some(0.0),
            "{fault}: {text}"
        );
    }
}
