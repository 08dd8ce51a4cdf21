//! A follower served by another instance's relay is an observer of the
//! session where it is held, by lease (seed 002: "only an attachment that
//! crosses a process boundary is a lease with a TTL; that is where
//! `Expired` comes from"; issue 38, item 6). Before, such a follower was no
//! observer at all: the holder counted none, a present human watching from
//! another instance did not route decisions to the conversation, and
//! nothing was ever detached `expired`.

use super::scale_out::*;
use serde_json::{Value, json};
use std::io::Read;
use std::path::Path;
use std::time::Duration;

/// The observer entries of every trace file under `home`.
fn traced(home: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    let mut dirs = vec![home.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.to_string_lossy().ends_with(".trace.jsonl") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                out.extend(text.lines().filter_map(|l| serde_json::from_str(l).ok()));
            }
        }
    }
    out
}

/// `(observer id, because)` of each traced detach under `home`.
fn detaches(home: &Path) -> Vec<(String, String)> {
    traced(home)
        .iter()
        .filter(|v| v["payload"]["event"]["type"] == "observer_detached")
        .map(|v| {
            let e = &v["payload"]["event"];
            (
                e["observer"]["id"].as_str().unwrap_or("").to_string(),
                e["because"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn a_follower_at_another_instance_is_a_leased_observer_that_expires_with_it() {
    let (_tokio, _pg, store, dir) = shared_store();
    let holder = Instance::start(dir.path(), "h0", &store);
    let other = Instance::start(dir.path(), "h1", &store);
    let http = client();
    let r = http
        .post(format!("{}/v1/sessions", holder.url))
        .json(&json!({"id": "watched"}))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().unwrap());
    let observers = || -> Value {
        let v: Value = http
            .get(format!("{}/v1/sessions/watched", holder.url))
            .send()
            .unwrap()
            .json()
            .unwrap();
        v["observers"].clone()
    };

    // The route itself: a name or a TTL out of bounds is refused, naming
    // it; a lease nobody holds cannot be released.
    let put = |name: &str, body: Value| {
        let r = http
            .put(format!(
                "{}/v1/sessions/watched/observers/{name}",
                other.url
            ))
            .json(&body)
            .send()
            .unwrap();
        (
            r.status().as_u16(),
            r.json::<Value>().unwrap_or(Value::Null),
        )
    };
    let (code, body) = put("a%20b", json!({}));
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"a b\""),
        "{body}"
    );
    let (code, body) = put("ok", json!({"ttl_ms": 3_600_000}));
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("3600000 ms"),
        "{body}"
    );
    let r = http
        .delete(format!(
            "{}/v1/sessions/watched/observers/nobody",
            other.url
        ))
        .send()
        .unwrap();
    assert_eq!(r.status(), 404);

    // Two followers at the other instance: a human present, and a
    // collector that leaves.
    let stream = |query: &str| {
        let response = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap()
            .get(format!("{}/v1/sessions/watched/events?{query}", other.url))
            .send()
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        response
    };
    let human = stream("presence=true");
    let human = std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = { human }.read_to_end(&mut sink);
    });
    let collector = stream("after=0");
    wait_for(
        "the holder to count both followers",
        Duration::from_secs(20),
        || {
            let o = observers();
            o["collecting"] == 2 && o["present"] == 1
        },
    );

    // A run asks while a human watches from the other instance: the
    // request goes to the conversation.
    let started: Value = http
        .post(format!("{}/v1/runs", holder.url))
        .json(&json!({"component": "approval", "prompt": "ship it?", "session": "watched"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert!(started["run_id"].is_string(), "{started}");
    let mut routed = Value::Null;
    wait_for("the run to ask", Duration::from_secs(30), || {
        let page: Value = http
            .get(format!(
                "{}/v1/sessions/watched/journal?after=0&limit=1000",
                holder.url
            ))
            .send()
            .unwrap()
            .json()
            .unwrap();
        if let Some(e) = page["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["payload"]["event"]["type"] == "approval_routed")
        {
            routed = e["payload"]["event"].clone();
        }
        !routed.is_null()
    });
    assert_eq!(routed["route"], "conversational", "{routed}");

    // The collector hangs up: its lease is released.
    drop(collector);
    wait_for(
        "the collector's lease to be released",
        Duration::from_secs(20),
        || observers()["collecting"] == 1,
    );
    let released: Vec<(String, String)> = detaches(&dir.path().join("h0"));
    assert!(
        released
            .iter()
            .any(|(id, because)| id.starts_with("h1.") && because == "released"),
        "{released:?}"
    );

    // The other instance dies with its human's stream: nobody renews that
    // lease, and past its TTL the holder detaches it `expired`.
    other.signal(rustix::process::Signal::KILL);
    let _ = human.join();
    wait_for(
        "the human's lease to expire",
        Duration::from_millis(TTL_MS) + Duration::from_secs(20),
        || observers()["collecting"] == 0,
    );
    let o = observers();
    assert_eq!(o["present"], 0, "{o}");
    let gone = detaches(&dir.path().join("h0"));
    assert!(
        gone.iter()
            .any(|(id, because)| id.starts_with("h1.") && because == "expired"),
        "{gone:?}"
    );
}
