//! The routes a browser viewer needs (component bytes, park checkpoints,
//! journal pages, decisions with their requests) and CORS, over a real
//! server on loopback.

use cairn_runtime::runtime::Runtime;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

async fn served(toml: Option<&str>) -> (tempfile::TempDir, Runtime, String) {
    super::common::served_here(toml).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_gets_components_checkpoints_journal_pages_and_requests() {
    let (_tmp, rt, base) = served(None).await;
    let http = reqwest::Client::new();
    // Component bytes, by name or digest; the digest of the body matches.
    let digest = cairn_examples::built_in_digest("approval").unwrap();
    for name in ["approval", digest] {
        let r = http
            .get(format!("{base}/v1/components/{name}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "application/wasm");
        let body = r.bytes().await.unwrap();
        assert_eq!(cairn_runtime::component::digest_of(&body), digest);
    }
    let missing = http
        .get(format!("{base}/v1/components/sha256:{}", "0".repeat(64)))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    // A run that parks (policy park, nobody present): its checkpoint.
    let (session, checkpoint) = park_and_fetch_checkpoint(&http, &base).await;
    assert_eq!(checkpoint, (200, "park me".to_string()));

    // A run waiting on a decision: the listing carries the request.
    let waiting: Value = http
        .post(format!("{base}/v1/runs"))
        .json(&json!({ "component": "approval", "prompt": "ship it?" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let t = Instant::now();
    let listed = loop {
        let d: Value = http
            .get(format!("{base}/v1/decisions"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if let Some(first) = d.as_array().unwrap().first() {
            break first.clone();
        }
        assert!(t.elapsed() < Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(listed["session_id"], waiting["session_id"]);
    assert_eq!(
        (listed["request_kind"].as_str(), listed["prompt"].as_str()),
        (Some("approval"), Some("ship it?"))
    );
    assert!(listed["details"].is_object());
    let none = http
        .get(format!(
            "{base}/v1/runs/{}/checkpoint",
            waiting["run_id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(none.status(), 404);

    // Journal pages: the whole journal, in order, page by page.
    let mut after = 0;
    let mut seqs = Vec::new();
    loop {
        let page: Value = http
            .get(format!(
                "{base}/v1/sessions/{session}/journal?after={after}&limit=3"
            ))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let entries = page["entries"].as_array().unwrap();
        assert!(entries.len() <= 3);
        seqs.extend(entries.iter().map(|e| e["seq"].as_u64().unwrap()));
        match page["next_after"].as_u64() {
            Some(n) => after = n,
            None => {
                assert_eq!(page["last_seq"].as_u64(), seqs.last().copied());
                break;
            }
        }
    }
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert!(seqs.len() > 3);
    let bad = http
        .get(format!("{base}/v1/sessions/{session}/journal?limit=0"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    rt.begin_shutdown();
}

#[tokio::test]
async fn cors_answers_allowed_origins_and_refuses_others() {
    let (_tmp, _rt, base) = served(Some(
        "[http]\nallowed_origins = [\"https://viewer.example\"]\n",
    ))
    .await;
    let http = reqwest::Client::new();
    let preflight = |origin: &'static str| {
        http.request(reqwest::Method::OPTIONS, format!("{base}/v1/sessions"))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type, authorization",
            )
            .send()
    };
    let ok = preflight("https://viewer.example").await.unwrap();
    assert_eq!(ok.status(), 204);
    assert_eq!(
        ok.headers()["access-control-allow-origin"],
        "https://viewer.example"
    );
    assert!(
        ok.headers()["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .contains("authorization")
    );
    let refused = preflight("https://evil.example").await.unwrap();
    assert_eq!(refused.status(), 403);
    assert!(
        refused
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    // A read and a write from the allowed origin carry the header.
    let read = http
        .get(format!("{base}/v1/sessions"))
        .header("origin", "https://viewer.example")
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    assert_eq!(
        read.headers()["access-control-allow-origin"],
        "https://viewer.example"
    );
    assert!(
        read.headers()["access-control-expose-headers"]
            .to_str()
            .unwrap()
            .contains("x-next-cursor")
    );
    let write = http
        .post(format!("{base}/v1/sessions"))
        .header("origin", "https://viewer.example")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(write.status(), 201, "{:?}", write.text().await);
    // Another origin: no header on reads, and writes refused.
    let other = http
        .get(format!("{base}/v1/sessions"))
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());
    let evil = http
        .post(format!("{base}/v1/sessions"))
        .header("origin", "https://evil.example")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(evil.status(), 403);
    // The server's own origin is always allowed.
    let own = base.clone();
    let same = http
        .get(format!("{base}/v1/sessions"))
        .header("origin", own.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(same.headers()["access-control-allow-origin"], own.as_str());
}

/// A read-only follower does not grow the replay journal: its attach and
/// detach go to the segment's trace file; presence is counted live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collecting_followers_leave_the_journal_alone() {
    let (tmp, rt, base) = served(None).await;
    let http = reqwest::Client::new();
    let started: Value = http
        .post(format!("{base}/v1/runs"))
        .json(&json!({ "component": "echo", "prompt": "watched" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let session = started["session_id"].as_str().unwrap().to_string();
    let run: cairn_runtime::RunId = started["run_id"].as_str().unwrap().parse().unwrap();
    rt.wait(run).await.unwrap();
    let last = |s: Value| s["last_seq"].as_u64().unwrap();
    let before = last(
        http.get(format!("{base}/v1/sessions/{session}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap(),
    );
    for _ in 0..3 {
        let stream = http
            .get(format!("{base}/v1/sessions/{session}/events"))
            .send()
            .await
            .unwrap();
        assert_eq!(stream.status(), 200);
        let s: Value = http
            .get(format!("{base}/v1/sessions/{session}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(s["observers"]["collecting"], 1, "{s}");
        drop(stream);
        let t = Instant::now();
        loop {
            let s: Value = http
                .get(format!("{base}/v1/sessions/{session}"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if s["observers"]["collecting"] == 0 {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "{s}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let after = last(
        http.get(format!("{base}/v1/sessions/{session}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap(),
    );
    assert_eq!(
        after, before,
        "three followers came and went; the journal did not grow"
    );
    let trace: Vec<Value> = walk(tmp.path())
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".trace.jsonl"))
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<Value>>()
        })
        .collect();
    let kinds: Vec<&str> = trace
        .iter()
        .map(|t| t["payload"]["event"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "observer_attached").count(),
        3,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "observer_detached").count(),
        3,
        "{kinds:?}"
    );
    // A claiming follower still goes into the journal.
    let claim = http
        .get(format!("{base}/v1/sessions/{session}/events?claim=true"))
        .send()
        .await
        .unwrap();
    assert_eq!(claim.status(), 200);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let claimed = last(
        http.get(format!("{base}/v1/sessions/{session}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap(),
    );
    assert_eq!(claimed, before + 1);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The viewer's assets carry ETags (a 304 for what the browser has), the
/// page names its script and stylesheet by content (`?v=TAG`, cached for
/// good), and anything else revalidates.
#[tokio::test]
async fn viewer_assets_are_cached_by_content_and_revalidated_by_etag() {
    let (_tmp, _rt, base) = served(None).await;
    let http = reqwest::Client::new();
    let page = http.get(format!("{base}/ui/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let page_tag = page.headers()["etag"].to_str().unwrap().to_string();
    assert_eq!(page.headers()["cache-control"], "no-cache");
    let html = page.text().await.unwrap();
    let script = html
        .split('"')
        .find(|s| s.starts_with("app.js?v="))
        .unwrap_or_else(|| panic!("the page names no versioned script: {html}"))
        .to_string();
    let again = http
        .get(format!("{base}/ui/"))
        .header("if-none-match", &page_tag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    assert!(again.bytes().await.unwrap().is_empty());
    let js = http
        .get(format!("{base}/ui/{script}"))
        .send()
        .await
        .unwrap();
    assert_eq!(js.status(), 200);
    assert_eq!(
        js.headers()["cache-control"],
        "public, max-age=31536000, immutable"
    );
    let js_tag = js.headers()["etag"].to_str().unwrap().to_string();
    assert_eq!(format!("app.js?v={}", js_tag.trim_matches('"')), script);
    // jco's core wasm: revalidated, a 304 once the browser has it.
    let wasm_url = format!("{base}/ui/js-component-bindgen-component.core.wasm");
    let wasm = http.get(&wasm_url).send().await.unwrap();
    assert_eq!(wasm.headers()["cache-control"], "no-cache");
    let tag = wasm.headers()["etag"].to_str().unwrap().to_string();
    assert!(wasm.bytes().await.unwrap().len() > 1_000_000);
    let cached = http
        .get(&wasm_url)
        .header("if-none-match", &tag)
        .send()
        .await
        .unwrap();
    assert_eq!(cached.status(), 304);
    // A stale version or a wrong tag gets the asset anew, revalidating.
    let stale = http
        .get(format!("{base}/ui/app.js?v=0000"))
        .header("if-none-match", "\"nope\"")
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), 200);
    assert_eq!(stale.headers()["cache-control"], "no-cache");
}

/// A run's end is readable in the journal (its summary says `parked`) a
/// moment before its task publishes the facts (`CAIRN_FAULT=facts-late`
/// holds that moment 500 ms): the checkpoint is served all the same, not
/// a 404 calling the run live (the viewer test above failed so under a
/// loaded suite).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_is_served_as_soon_as_the_park_is_journaled() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let served = super::common::serve_with(&home, &[("CAIRN_FAULT", "facts-late")]).unwrap();
    let http = reqwest::Client::new();
    let (_, checkpoint) = park_and_fetch_checkpoint(&http, &served.url).await;
    assert_eq!(checkpoint, (200, "park me".to_string()));
}

/// Start a run that parks at once (`approval`, policy park, nobody
/// present), wait until `GET /v1/runs/{id}` says `parked`, then fetch its
/// checkpoint: (the session, (the checkpoint's status, its body)).
async fn park_and_fetch_checkpoint(http: &reqwest::Client, base: &str) -> (String, (u16, String)) {
    let started = super::common::post_json(
        http,
        &format!("{base}/v1/runs"),
        &json!({ "component": "approval", "prompt": "park me", "liveness": "park" }),
    )
    .await;
    let run = started["run_id"].as_str().unwrap().to_string();
    let t = Instant::now();
    loop {
        let r = super::common::get_json(http, &format!("{base}/v1/runs/{run}")).await;
        if r["facts"]["status"] == "parked" {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{r}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let cp = http
        .get(format!("{base}/v1/runs/{run}/checkpoint"))
        .send()
        .await
        .unwrap();
    let status = cp.status().as_u16();
    let body = String::from_utf8_lossy(&cp.bytes().await.unwrap()).into_owned();
    let session = started["session_id"].as_str().unwrap().to_string();
    (session, (status, body))
}
