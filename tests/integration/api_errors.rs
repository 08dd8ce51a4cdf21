//! The HTTP seam refusing bad requests: each with its status and stable
//! error code, over real HTTP on 127.0.0.1:0.

use crate::api::{server, status_and_code};
use serde_json::json;

#[tokio::test]
async fn bad_requests_get_the_right_status_and_code() {
    let s = server().await;
    let post = |path: &str, body: &'static [u8]| {
        s.http
            .post(format!("{}{path}", s.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    // A body must say it is JSON: a page's `text/plain` (or no type) is refused.
    for kind in [Some("text/plain"), None] {
        let mut req = s
            .http
            .post(format!("{}/v1/runs", s.base))
            .body(r#"{"component":"echo","prompt":"x"}"#);
        if let Some(kind) = kind {
            req = req.header("content-type", kind);
        }
        assert_eq!(
            status_and_code(req.send().await.unwrap()).await,
            (415, "unsupported_media_type".into()),
            "{kind:?}"
        );
    }
    assert_eq!(
        status_and_code(post("/v1/runs", b"{nope").await.unwrap()).await,
        (400, "invalid_json".into())
    );
    assert_eq!(
        status_and_code(
            post("/v1/runs", br#"{"component":"echo","extra":1}"#)
                .await
                .unwrap()
        )
        .await,
        (400, "unknown_field".into())
    );
    assert_eq!(
        status_and_code(post("/v1/runs", br#"{"component":5}"#).await.unwrap()).await,
        (400, "invalid_request".into())
    );
    assert_eq!(
        status_and_code(
            post("/v1/runs", br#"{"component":"/etc/passwd"}"#)
                .await
                .unwrap()
        )
        .await,
        (404, "not_found".into())
    );
    assert_eq!(
        status_and_code(
            post("/v1/runs", br#"{"component":"echo","liveness":"park"}"#)
                .await
                .unwrap()
        )
        .await,
        (400, "unsupported_policy".into())
    );
    let huge = format!(
        r#"{{"component":"echo","prompt":"{}"}}"#,
        "x".repeat(3 << 20)
    );
    let resp = s
        .http
        .post(format!("{}/v1/runs", s.base))
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(status_and_code(resp).await, (413, "too_large".into()));
    for (path, want) in [
        ("/v1/sessions/nope", (404, "not_found")),
        // Outside the id alphabet: refused before anything is looked up.
        ("/v1/sessions/..%2F..%2Fetc%2Fpasswd", (400, "invalid_id")),
        ("/v1/sessions/%2Fetc%2Fpasswd/events", (400, "invalid_id")),
        ("/v1/sessions/a%E2%80%AEb", (400, "invalid_id")),
    ] {
        let resp = s
            .http
            .get(format!("{}{path}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(
            status_and_code(resp).await,
            (want.0, want.1.into()),
            "{path}"
        );
    }
    for path in ["/v1/runs/..%2Fx", "/v1/runs/not-a-uuid/events"] {
        let resp = s
            .http
            .get(format!("{}{path}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(
            status_and_code(resp).await,
            (400, "invalid_id".into()),
            "{path}"
        );
    }
    let unknown_run = cairn_runtime::RunId::new();
    let resp = s
        .http
        .get(format!("{}/v1/runs/{unknown_run}", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(status_and_code(resp).await, (404, "not_found".into()));
    let resp = s
        .http
        .post(format!("{}/v1/decisions/{}", s.base, uuid_like()))
        .json(&json!({"value": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(status_and_code(resp).await, (404, "not_found".into()));
    let resp = s
        .http
        .post(format!("{}/v1/decisions/x", s.base))
        .json(&json!({"value": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(status_and_code(resp).await, (400, "invalid_id".into()));
    let resp = s
        .http
        .delete(format!("{}/v1/sessions/ghost", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(status_and_code(resp).await, (404, "not_found".into()));
    let resp = s
        .http
        .get(format!("{}/v1/nowhere", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(status_and_code(resp).await, (404, "not_found".into()));
    // Sessions: create with an id, twice; delete.
    let resp = s
        .http
        .post(format!("{}/v1/sessions", s.base))
        .json(&json!({"id": "../mine"}))
        .send()
        .await
        .unwrap();
    // Outside the safe alphabet: refused, naming why.
    let (status, code) = status_and_code(resp).await;
    assert_eq!((status, code.as_str()), (400, "invalid_id"));
    let resp = s
        .http
        .post(format!("{}/v1/sessions", s.base))
        .json(&json!({"id": "mine"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let resp = s
        .http
        .post(format!("{}/v1/sessions", s.base))
        .json(&json!({"id": "mine"}))
        .send()
        .await
        .unwrap();
    assert_eq!(status_and_code(resp).await, (409, "conflict".into()));
    let resp = s
        .http
        .delete(format!("{}/v1/sessions/mine", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    let resp = s
        .http
        .get(format!("{}/v1/sessions/mine", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
}

fn uuid_like() -> String {
    cairn_runtime::RunId::new().to_string()
}

/// Every wire error code: its one status on an answer, `Retry-After` when
/// it is retryable, and its listing in the published OpenAPI document.
#[tokio::test]
async fn every_error_code_has_one_status_and_is_listed_in_openapi() {
    use axum::response::IntoResponse;
    use cairn_runtime::ErrorCode;
    let doc = cairn_api::openapi::document();
    let listed: Vec<&str> = doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .unwrap_or_else(|| panic!("no ErrorCode enum in {}", doc["components"]["schemas"]))
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(listed.len(), ErrorCode::ALL.len(), "{listed:?}");
    for &code in ErrorCode::ALL {
        assert!(listed.contains(&code.as_str()), "{code} not in {listed:?}");
        let response = cairn_api::error::ApiError::new(code, "x").into_response();
        assert_eq!(response.status().as_u16(), code.status(), "{code}");
        assert_eq!(
            response.headers().contains_key("retry-after"),
            code.retryable(),
            "{code}"
        );
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["code"], code.as_str());
    }
    // The statuses a client meets, by code.
    let status = |c: ErrorCode| c.status();
    assert_eq!(status(ErrorCode::NotFound), 404);
    assert_eq!(status(ErrorCode::HomeBusy), 503);
    assert_eq!(status(ErrorCode::Restoring), 409);
    assert_eq!(status(ErrorCode::Capacity), 429);
}

/// Every operation of the document has its own operationId and a tag;
/// every `/v1` operation names the bearer scheme and its `401`.
#[test]
fn every_operation_has_an_id_a_tag_and_its_security() {
    let doc = cairn_api::openapi::document();
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer",
        "{}",
        doc["components"]
    );
    let mut ids = std::collections::BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path}"));
            assert!(ids.insert(id.to_string()), "{id} twice");
            assert!(op["tags"][0].is_string(), "{method} {path}");
            if path.starts_with("/v1/") {
                assert_eq!(
                    op["security"][0]["bearer"],
                    serde_json::json!([]),
                    "{method} {path}"
                );
                assert!(op["responses"]["401"].is_object(), "{method} {path}");
            }
        }
    }
    assert!(
        ids.contains("get_runs") && ids.contains("get_runs_by_id"),
        "{ids:?}"
    );
}

/// Query-string errors and methods a route does not serve answer the JSON
/// error body too; an ended run's event stream reconnected after its last
/// entry is `204`, not a stream held open forever.
#[tokio::test]
async fn query_and_method_errors_are_json_and_an_ended_runs_stream_closes() {
    let s = server().await;
    let r = s
        .http
        .get(format!("{}/v1/sessions?limit=abc", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let (status, code) = status_and_code(r).await;
    assert_eq!((status, code.as_str()), (400, "invalid_request"));
    let r = s
        .http
        .delete(format!("{}/v1/runs", s.base))
        .send()
        .await
        .unwrap();
    assert!(r.headers().contains_key("allow"), "{:?}", r.headers());
    assert_eq!(status_and_code(r).await, (405, "method_not_allowed".into()));
    let started: serde_json::Value = s
        .http
        .post(format!("{}/v1/runs", s.base))
        .json(&json!({"component": "echo", "prompt": "to the end"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run = started["run_id"].as_str().unwrap();
    // The whole stream: it ends after the run's last entry.
    let whole = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        s.http
            .get(format!("{}/v1/runs/{run}/events", s.base))
            .send()
            .await
            .unwrap()
            .text(),
    )
    .await
    .expect("the stream of an ended run ends")
    .unwrap();
    let last: u64 = whole
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .filter_map(|id| id.trim().parse().ok())
        .max()
        .unwrap();
    // A reconnect after it: nothing more will come.
    let again = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        s.http
            .get(format!("{}/v1/runs/{run}/events", s.base))
            .header("last-event-id", last.to_string())
            .send(),
    )
    .await
    .expect("answered at once")
    .unwrap();
    assert_eq!(again.status(), 204);
}

/// `POST /v1/runs` with an `Idempotency-Key`: sent again (a client that
/// timed out before the `202`), it answers with the run the first attempt
/// started and starts none; another key starts another run.
#[tokio::test]
async fn a_retried_start_with_an_idempotency_key_is_one_run() {
    let s = server().await;
    let start = |key: &'static str| {
        s.http
            .post(format!("{}/v1/runs", s.base))
            .header("idempotency-key", key)
            .json(&json!({"component": "echo", "prompt": "once"}))
            .send()
    };
    let first: serde_json::Value = start("k-1").await.unwrap().json().await.unwrap();
    let again = start("k-1").await.unwrap();
    assert_eq!(again.status(), 202);
    let again: serde_json::Value = again.json().await.unwrap();
    assert_eq!(again["run_id"], first["run_id"], "{again} {first}");
    assert_eq!(again["session_id"], first["session_id"]);
    let other: serde_json::Value = start("k-2").await.unwrap().json().await.unwrap();
    assert_ne!(other["run_id"], first["run_id"]);
    let sessions: Vec<serde_json::Value> = s
        .http
        .get(format!("{}/v1/sessions", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
}
