//! Connection and stream budgets of `cairn serve`, from outside: idle and
//! slow-loris connections are closed at the header timeout, a full server
//! answers `503 capacity` and recovers, and event streams are capped per
//! session and per workspace — each refusal naming its budget.

use crate::common::serve;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn home_with(tmp: &std::path::Path, server: &str) -> std::path::PathBuf {
    let home = tmp.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("cairn.toml"), format!("[server]\n{server}\n")).unwrap();
    home
}

fn addr(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

/// Whether the server closed `stream` within `within` (reads EOF or reset).
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let end = Instant::now() + within;
    let mut buf = [0u8; 512];
    while Instant::now() < end {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return true,
        }
    }
    false
}

fn healthz(url: &str) -> u16 {
    reqwest::blocking::get(format!("{url}/healthz"))
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

#[test]
fn idle_and_slow_connections_are_closed_and_a_full_server_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let home = home_with(tmp.path(), "max_connections = 8\nheader_timeout_ms = 700");
    let served = serve(&home);
    let at = addr(&served.url);
    // Eight connections that say nothing hold every place.
    let mut idle: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(&at).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(100));
    // The ninth is told why, and closed.
    let mut ninth = TcpStream::connect(&at).unwrap();
    let mut answer = String::new();
    ninth
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = ninth.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains("\"capacity\"") && answer.contains("max_connections"),
        "{answer}"
    );
    // Past the header timeout every idle one is closed, and the server
    // serves again.
    for c in &mut idle {
        assert!(
            closed_within(c, Duration::from_secs(5)),
            "an idle connection stayed open"
        );
    }
    assert_eq!(healthz(&served.url), 200);
    // A slow-loris client (a header byte every 200 ms) is cut off too.
    let mut slow = TcpStream::connect(&at).unwrap();
    let started = Instant::now();
    let header =
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    let mut cut = false;
    for b in header {
        if slow.write_all(&[*b]).is_err() {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        if started.elapsed() > Duration::from_secs(3) {
            break;
        }
    }
    assert!(
        cut || closed_within(&mut slow, Duration::from_secs(3)),
        "the slow client was not cut off"
    );
    assert!(started.elapsed() < Duration::from_secs(8));
    // A keep-alive client that goes on asking is served throughout.
    let client = reqwest::blocking::Client::new();
    for _ in 0..5 {
        let r = client
            .get(format!("{}/healthz", served.url))
            .send()
            .unwrap();
        assert_eq!(r.status(), 200);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn event_streams_are_capped_per_session_and_per_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let home = home_with(
        tmp.path(),
        "streams_per_session = 2\nstreams_per_workspace = 3",
    );
    let served = serve(&home);
    let http = reqwest::Client::new();
    for id in ["a", "b"] {
        let r = http
            .post(format!("{}/v1/sessions", served.url))
            .json(&serde_json::json!({ "id": id }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    let open = |id: &str| {
        let url = format!("{}/v1/sessions/{id}/events", served.url);
        let http = http.clone();
        async move { http.get(url).send().await.unwrap() }
    };
    let a1 = open("a").await;
    let a2 = open("a").await;
    assert_eq!((a1.status().as_u16(), a2.status().as_u16()), (200, 200));
    let a3 = open("a").await;
    assert_eq!(a3.status(), 429);
    let body: serde_json::Value = a3.json().await.unwrap();
    assert_eq!(body["error"]["code"], "capacity");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("streams_per_session"),
        "{body}"
    );
    let b1 = open("b").await;
    assert_eq!(b1.status(), 200);
    let b2 = open("b").await;
    assert_eq!(b2.status(), 429);
    let body: serde_json::Value = b2.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("streams_per_workspace"),
        "{body}"
    );
    // A client that goes away gives its place back.
    drop(a1);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let again = open("b").await;
        if again.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the place was never given back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop((a2, b1));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_is_taken_over_only_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let home = home_with(tmp.path(), "");
    let served = serve(&home);
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/v1/sessions", served.url))
        .json(&serde_json::json!({ "id": "held" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let events = |query: &str| {
        let url = format!("{}/v1/sessions/held/events?{query}", served.url);
        let http = http.clone();
        async move { http.get(url).send().await.unwrap() }
    };
    let first = events("claim=true").await;
    assert_eq!(first.status(), 200);
    let mut first = crate::api::SseReader::new(first);
    first.until("observer_attached").await;
    // A second claim is refused; takeover without a claim is a bad request.
    let refused = events("claim=true").await;
    assert_eq!(refused.status(), 409);
    assert_eq!(events("takeover=true").await.status(), 400);
    // With takeover it displaces the first, which is told why.
    let second = events("claim=true&takeover=true").await;
    assert_eq!(second.status(), 200);
    let seen = first.until("observer_detached").await;
    let detached = seen.last().unwrap();
    assert_eq!(
        detached["payload"]["event"]["because"], "displaced",
        "{detached}"
    );
    drop(second);
}
