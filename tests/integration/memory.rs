//! Memory bounded by bytes, not counts (isolation round three, item 2):
//! the live windows of every session together stay under a host-wide cap
//! (an evicted window costs a later reader only a store read), and what
//! answers one run or task reads from where the run begins, never the
//! whole journal.

use super::api::server;
use super::common::fixture;
use cairn_runtime::Seq;
use cairn_runtime::journal::Delivery;
use cairn_runtime::runtime::{AttachSpec, ComponentRef, StartRun};
use serde_json::{Value, json};
use std::time::Duration;

/// Twelve sessions of one run each, every run emitting 4 × 256 KiB, under
/// a host-wide cap of 2 MiB: the windows are emptied oldest first and stay
/// under it (before: 12 MiB held for the retention window, growing with
/// every session), and every entry of every session is still delivered to
/// a subscriber from the start, with no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_windows_stay_under_the_host_cap_and_evicted_ones_read_from_the_store() {
    const CAP: u64 = 2 << 20;
    let tmp = tempfile::tempdir().unwrap();
    let rt = super::common::runtime_with(
        &tmp.path().join("home"),
        Some(&format!(
            "[limits]\nlive_window_bytes = {}\nlive_total_bytes = {CAP}\n",
            2 << 20
        )),
    )
    .await;
    let mut sessions = Vec::new();
    for _ in 0..12 {
        let req = StartRun::new(ComponentRef::Path(fixture("hostile")), "emits 4 256");
        let started = rt.start(req).await.unwrap();
        let facts = tokio::time::timeout(Duration::from_secs(60), rt.wait(started.run_id))
            .await
            .expect("the run ends")
            .unwrap();
        assert_eq!(
            facts.status,
            cairn_runtime::RunStatus::Finished,
            "{facts:?}"
        );
        sessions.push(started.session_id);
        let held = rt.metrics().live_window_bytes;
        assert!(
            held <= CAP,
            "the live windows hold {held} bytes, over the cap of {CAP}"
        );
    }
    let m = rt.metrics();
    assert!(
        m.live_windows_evicted >= 6,
        "12 MiB of windows under a 2 MiB cap empty most of them: {} emptied",
        m.live_windows_evicted
    );
    for s in &sessions {
        let mut obs = rt.attach(s, AttachSpec::collecting(Seq(0))).await.unwrap();
        let mut big = 0;
        loop {
            let d = tokio::time::timeout(Duration::from_secs(30), obs.next())
                .await
                .expect("the journal is read")
                .expect("open")
                .expect("no store error");
            let e = match d {
                Delivery::Event(e) => e,
                other => panic!(
                    "session {s}: an evicted window is read from the store, never a {other:?}"
                ),
            };
            if e.line().len() > 256 << 10 {
                big += 1;
            }
            if e.facts.is_some() {
                break;
            }
        }
        assert_eq!(big, 4, "session {s}: every emit comes back");
    }
}

/// The segment line holding `marker`, made invalid JSON in place (same
/// length): a read that reaches it fails, one that starts after it does not.
fn corrupt_line_with(home: &std::path::Path, marker: &str) {
    let mut stack = vec![home.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "jsonl") {
                let text = std::fs::read_to_string(&path).unwrap();
                if let Some(at) = text.find(marker) {
                    // One byte, in place: entries appended meanwhile stay.
                    use std::os::unix::fs::FileExt;
                    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                    file.write_all_at(b"\"", (at + marker.len() - 1) as u64)
                        .unwrap();
                    return;
                }
            }
        }
    }
    panic!("no segment holds {marker}");
}

/// A task and a run are read from where their entries begin: with an
/// entry of the session's first run corrupted on disk, the second run's
/// `GET /v1/runs/{id}` and A2A `GetTask` still answer (before, each read
/// the whole journal and failed on the first run's line); the first run's
/// own reads name the corruption.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_and_a_task_are_read_from_where_they_begin() {
    let s = server().await;
    let url = format!("{}/v1/a2a/echo", s.base);
    let send = |text: &str, context: Option<&str>| {
        let mut message =
            json!({ "messageId": text, "role": "ROLE_USER", "parts": [{ "text": text }] });
        if let Some(c) = context {
            message["contextId"] = json!(c);
        }
        json!({ "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": { "message": message } })
    };
    let call = |body: Value| {
        let (http, url) = (s.http.clone(), url.clone());
        async move {
            let r = http.post(&url).json(&body).send().await.unwrap();
            r.json::<Value>().await.unwrap()
        }
    };
    let first = call(send("first-turn-6f1d", None)).await;
    let context = first["result"]["task"]["contextId"]
        .as_str()
        .unwrap_or_else(|| panic!("{first}"))
        .to_string();
    let task1 = first["result"]["task"]["id"].as_str().unwrap().to_string();
    let second = call(send("second-turn", Some(&context))).await;
    let task2 = second["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{second}"))
        .to_string();
    corrupt_line_with(s.rt.home().path(), "first-turn-6f1d");

    let get_task = |id: &str| {
        call(json!({ "jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": { "id": id } }))
    };
    let got = get_task(&task2).await;
    assert_eq!(
        got["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "the second task reads only its own entries: {got}"
    );
    let run = s
        .http
        .get(format!("{}/v1/runs/{task2}", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(run.status(), 200);
    let run: Value = run.json().await.unwrap();
    assert_eq!(run["state"], "finished", "{run}");

    // The first run's own reads reach the broken line: they fail, naming it.
    let got = get_task(&task1).await;
    assert!(
        got["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("changed on disk")),
        "{got}"
    );
    let run = s
        .http
        .get(format!("{}/v1/runs/{task1}", s.base))
        .send()
        .await
        .unwrap();
    let status = run.status();
    let body = run.text().await.unwrap();
    assert!(
        status != 200 && body.contains("changed on disk"),
        "{status} {body}"
    );
    // Followed from the start over SSE, the stream ends on the broken line
    // with an `error` event, which names it relative to the home too.
    let events = tokio::time::timeout(
        Duration::from_secs(30),
        s.http
            .get(format!("{}/v1/sessions/{context}/events?after=0", s.base))
            .send(),
    )
    .await
    .unwrap()
    .unwrap();
    let events = tokio::time::timeout(Duration::from_secs(30), events.text())
        .await
        .expect("the stream ends at the error")
        .unwrap();
    assert!(
        events.contains("event: error") && events.contains("changed on disk"),
        "{events}"
    );
    let home = s.rt.home().path().display().to_string();
    assert!(
        !body.contains(&home) && !got.to_string().contains(&home) && !events.contains(&home),
        "the home's path reaches a client: {body} {got} {events}"
    );
}
