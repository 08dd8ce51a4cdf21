//! Property tests (fuzzing that runs everywhere, bounded): the JSONL segment
//! reader and every HTTP request body never panic and never lose a good
//! line; bad input gets a clear error.

use cairn_api::body::parse;
use cairn_runtime::store::file::scan_segment;
use cairn_runtime::{AgentEvent, Payload, RunId, SegmentId, Seq, SessionEvent, SessionId};
use proptest::prelude::*;
use std::path::Path;

fn line(seq: u64, text: &str) -> Vec<u8> {
    let e = SessionEvent {
        session_id: SessionId::parse("fuzz").unwrap(),
        segment_id: SegmentId::new(),
        run_id: Some(RunId::new()),
        seq: Seq(seq),
        at_ms: 1,
        payload: Payload::Agent(AgentEvent::TextDelta {
            text: text.to_string(),
            by: None,
        }),
        facts: None,
        line: Default::default(),
    };
    let mut v = serde_json::to_vec(&e).unwrap();
    v.push(b'\n');
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn the_segment_reader_never_panics_on_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = scan_segment(&bytes, Path::new("fuzz.jsonl"), Some(Seq(0)), "fuzz");
    }

    #[test]
    fn good_lines_survive_any_torn_tail(texts in proptest::collection::vec(".{0,40}", 1..20), cut in any::<prop::sample::Index>(), junk in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut bytes = Vec::new();
        for (i, t) in texts.iter().enumerate() {
            bytes.extend(line(i as u64 + 1, t));
        }
        let good = bytes.len();
        // A torn final write: part of one more line, no newline.
        let mut tail = line(texts.len() as u64 + 1, "torn");
        tail.truncate(cut.index(tail.len()));
        bytes.extend(&tail);
        let junk: Vec<u8> = junk.into_iter().filter(|b| *b != b'\n').collect();
        if tail.is_empty() { bytes.extend(&junk); }
        let scan = scan_segment(&bytes, Path::new("fuzz.jsonl"), Some(Seq(0)), "fuzz").unwrap();
        prop_assert_eq!(scan.items.len(), texts.len());
        prop_assert_eq!(scan.good_len as usize, good);
    }

    #[test]
    fn a_corrupt_middle_line_fails_closed_naming_its_line(texts in proptest::collection::vec("[a-z]{0,10}", 3..10), at in any::<prop::sample::Index>(), junk in "[^\n]{1,30}") {
        let at = at.index(texts.len() - 1);
        let mut bytes = Vec::new();
        for (i, t) in texts.iter().enumerate() {
            if i == at {
                bytes.extend(junk.as_bytes());
                bytes.push(b'\n');
            } else {
                bytes.extend(line(i as u64 + 1, t));
            }
        }
        match scan_segment(&bytes, Path::new("fuzz.jsonl"), Some(Seq(0)), "fuzz") {
            Ok(scan) => {
                // Only JSON with a numeric seq parses; it must keep density.
                let seqs: Vec<u64> = scan.items.iter().map(|i| i.seq().0).collect();
                prop_assert_eq!(seqs, (1..=texts.len() as u64).collect::<Vec<_>>());
            }
            Err(e) => prop_assert!(e.to_string().starts_with("fuzz.jsonl:"), "{}", e),
        }
    }

    #[test]
    fn request_bodies_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse::<cairn_api::wire::StartRunRequest>(&bytes);
        let _ = parse::<cairn_api::wire::CreateSession>(&bytes);
        let _ = parse::<cairn_api::wire::DecideRequest>(&bytes);
        let _ = parse::<cairn_api::wire::ResumeRequest>(&bytes);
    }

    #[test]
    fn json_request_bodies_get_4xx_never_5xx(value in arb_json(), route in 0usize..7) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let status = rt.block_on(async {
            let app = router().await;
            let (method, path) = [
                ("POST", "/v1/runs"),
                ("POST", "/v1/sessions"),
                ("POST", "/v1/decisions/00000000-0000-0000-0000-000000000000"),
                ("POST", "/v1/runs/00000000-0000-0000-0000-000000000000/resume"),
                ("POST", "/v1/chat/completions"),
                ("POST", "/v1/components"),
                ("POST", "/v1/a2a/echo"),
            ][route];
            let req = axum::http::Request::builder()
                .method(method)
                .uri(path)
                .header("content-type", "application/json")
                .body(axum::body::Body::from(value.to_string()))
                .unwrap();
            use tower::ServiceExt;
            app.oneshot(req).await.unwrap().status()
        });
        prop_assert!(!status.is_server_error(), "{} for {}", status, value);
    }
}

fn arb_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        "[a-z_/.:0-9-]{0,20}".prop_map(serde_json::Value::from),
        Just(serde_json::json!("echo")),
        Just(serde_json::json!("sha256:00")),
        Just(serde_json::json!("2.0")),
        Just(serde_json::json!("SendMessage")),
        Just(serde_json::json!("GetTask")),
        Just(serde_json::json!("CancelTask")),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("component".to_string()),
                    Just("prompt".to_string()),
                    Just("session".to_string()),
                    Just("liveness".to_string()),
                    Just("value".to_string()),
                    Just("model".to_string()),
                    Just("messages".to_string()),
                    Just("limits".to_string()),
                    Just("jsonrpc".to_string()),
                    Just("method".to_string()),
                    Just("params".to_string()),
                    Just("message".to_string()),
                    Just("parts".to_string()),
                    Just("text".to_string()),
                    Just("taskId".to_string()),
                    Just("contextId".to_string()),
                    Just("id".to_string()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..5
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

async fn router() -> axum::Router {
    use std::sync::OnceLock;
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    let root = HOME.get_or_init(|| tempfile::tempdir().unwrap());
    // A home of its own per case: a home has one owner at a time, and an
    // earlier case's runtime may still be winding down.
    let home = root.path().join(uuid::Uuid::new_v4().to_string());
    let mut config = cairn_runtime::runtime::RuntimeConfig::new(home);
    config.restore = false;
    config.host.pool.instances = 0;
    cairn_api::router(cairn_runtime::runtime::Runtime::open(config).await.unwrap())
}
