//! `cairn events --server` as an SSE client: through a proxy in front of a
//! real server that hands the stream over one byte at a time (so every
//! multi-byte character is split across reads) and drops the connection
//! after the first event, the CLI prints every entry once, intact, and
//! resumes with `Last-Event-ID`.

use crate::common::{cairn_bin, run_to_end, served_here, start_req};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Forwards to `upstream`; the answer to the first `/events?` request goes
/// one byte at a time and ends just after its first SSE event (whichever
/// connection carries it: the client may reuse a kept-alive one or open
/// another). Records each request head.
async fn splitting_proxy(upstream: String) -> (String, Arc<Mutex<Vec<String>>>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    let split_done = Arc::new(AtomicBool::new(false));
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            let heads = seen.clone();
            let split_done = split_done.clone();
            let events_here = Arc::new(AtomicBool::new(false));
            let marking = events_here.clone();
            tokio::spawn(async move {
                let server = TcpStream::connect(&upstream).await.unwrap();
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut head = Vec::new();
                    while let Ok(k) = cr.read(&mut buf).await {
                        if k == 0 {
                            break;
                        }
                        head.extend_from_slice(&buf[..k]);
                        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                            let text = String::from_utf8_lossy(&head[..end]).to_lowercase();
                            if text.contains("/events?") {
                                marking.store(true, Ordering::SeqCst);
                            }
                            heads.lock().unwrap().push(text);
                            head.clear();
                        }
                        if sw.write_all(&buf[..k]).await.is_err() {
                            break;
                        }
                    }
                });
                let mut answer = Vec::new();
                let mut splitting = false;
                let mut buf = vec![0u8; 8192];
                while let Ok(k) = sr.read(&mut buf).await {
                    if k == 0 {
                        break;
                    }
                    if !splitting
                        && events_here.load(Ordering::SeqCst)
                        && split_done
                            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                            .is_ok()
                    {
                        splitting = true;
                    }
                    if !splitting {
                        if cw.write_all(&buf[..k]).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    for &b in &buf[..k] {
                        answer.push(b);
                        if cw.write_all(&[b]).await.is_err() {
                            return;
                        }
                        cw.flush().await.unwrap();
                        let body = answer
                            .windows(4)
                            .position(|w| w == b"\r\n\r\n")
                            .map(|h| &answer[h + 4..]);
                        // The first event, whole: then the line drops.
                        if body.is_some_and(|b| {
                            b.windows(2).any(|w| w == b"\n\n")
                                && b.windows(5).any(|w| w == b"data:")
                        }) {
                            return;
                        }
                    }
                }
            });
        }
    });
    (url, heads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_over_a_split_and_dropped_stream_print_each_entry_once_and_intact() {
    let (_tmp, rt, base) = served_here(None).await;
    let prompt = "héllo ✓ wörld — 日本";
    let (started, facts, _) = run_to_end(&rt, start_req("echo", prompt), None).await;
    let session = started.session_id.to_string();
    let upstream = base.trim_start_matches("http://").to_string();
    let (proxy, heads) = splitting_proxy(upstream).await;
    let out = tokio::process::Command::new(cairn_bin().get_program())
        .args(["events", &session, "--server", &proxy, "--json"])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    let seqs: Vec<u64> = stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    let expected: Vec<u64> = (1..=facts.last_seq.0).collect();
    assert_eq!(seqs, expected, "each entry once, in order: {stdout}");
    assert!(stdout.contains(prompt), "the text arrives whole: {stdout}");
    assert!(!stdout.contains('\u{fffd}'), "{stdout}");
    assert!(stderr.contains("resuming after seq 1"), "{stderr}");
    let heads = heads.lock().unwrap().clone();
    let streams: Vec<&String> = heads.iter().filter(|h| h.contains("/events?")).collect();
    assert_eq!(streams.len(), 2, "{heads:?}");
    assert!(!streams[0].contains("last-event-id"), "{heads:?}");
    assert!(streams[1].contains("last-event-id: 1"), "{heads:?}");
}
