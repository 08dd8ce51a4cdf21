//! Sends the HTTP requests its prompt lists, with `wstd`'s client over
//! `wasi:http`: the prompt is a JSON list of `{"method", "url",
//! "headers"?: {name: value}, "body"?}`; each answer (`{"status", "body",
//! "headers"}` or `{"error"}`) is emitted as a `response` custom event, and
//! the run finishes with all of them as a JSON array. A step `"emit"`
//! emits a marker event between requests.
use cairn_guest::{Controller, Error, Outcome, Start};
use serde_json::{Value, json};
use wstd::http::{Body, Client, Request};

struct HttpUser;

async fn send(step: &Value) -> Result<Value, String> {
    let method = step["method"].as_str().unwrap_or("GET");
    let url = step["url"].as_str().unwrap_or_default();
    let mut request = Request::builder().method(method).uri(url);
    if let Some(headers) = step["headers"].as_object() {
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str().unwrap_or_default());
        }
    }
    let body = match step["body"].as_str() {
        Some(text) => Body::from(text.to_string()),
        None => Body::empty(),
    };
    let request = request.body(body).map_err(|e| e.to_string())?;
    let response = Client::new()
        .send(request)
        .await
        .map_err(|e| format!("{e:?}"))?;
    let status = response.status().as_u16();
    let headers: serde_json::Map<String, Value> = response
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), json!(String::from_utf8_lossy(v.as_bytes()))))
        .collect();
    let mut body = response.into_body();
    let bytes = body.contents().await.map_err(|e| format!("{e:?}"))?;
    let text = String::from_utf8_lossy(bytes).into_owned();
    Ok(json!({"status": status, "body": text, "bytes": bytes.len(), "headers": headers}))
}

impl Controller for HttpUser {
    fn run(start: Start) -> Result<Outcome, Error> {
        let steps: Vec<Value> = serde_json::from_str(&start.prompt)
            .map_err(|e| Error::new("bad_prompt", format!("the prompt is not a JSON list: {e}")))?;
        let mut out = Vec::new();
        for step in &steps {
            if step == "emit" {
                cairn_guest::emit_custom("marker", &json!({}))?;
                continue;
            }
            let answer = match wstd::runtime::block_on(send(step)) {
                Ok(v) => v,
                Err(e) => json!({"error": e}),
            };
            cairn_guest::emit_custom("response", &answer)?;
            out.push(answer);
        }
        Ok(Outcome::Finished(Value::Array(out).to_string()))
    }
}

cairn_guest::controller!(HttpUser);
