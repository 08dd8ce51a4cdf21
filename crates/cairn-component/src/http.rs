//! Outgoing HTTP: `wasi:http/outgoing-handler` (wasmtime-wasi-http's
//! bindings) with cairn's `send_request` hook. A request never leaves from
//! here: its call id is taken when the guest calls `handle` (so ids follow
//! the guest's order, however responses arrive), its body is read whole
//! (at most `http_body_bytes`), and it goes to the run's
//! [`crate::RunHost::keyed_call`] — journaled as a host call of capability
//! `http`, answered from the journal on replay, sent by the runtime's
//! `http` capability live (allowlist, secrets, timeout there).

use super::HostState;
use crate::host::RunHost;
use bytes::Bytes;
use cairn_types::event::{CallError, CallErrorCode};
use cairn_types::http::{HttpRequest, HttpResponse, decode_body, encode_body};
use http_body_util::BodyExt;
use std::sync::Arc;
use wasmtime_wasi_http::{
    Error as HttpError, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpView,
};

/// The capability's name in the journal.
pub const HTTP: &str = "http";

/// The per-run state of `wasi:http`.
pub(crate) struct Http {
    ctx: WasiHttpCtx,
    hooks: Hooks,
}

struct Hooks {
    host: Option<Arc<dyn RunHost>>,
    body_limit: u64,
}

impl Http {
    pub(crate) fn new(host: Option<Arc<dyn RunHost>>, body_limit: u64) -> Self {
        Http {
            ctx: WasiHttpCtx::new(),
            hooks: Hooks { host, body_limit },
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http.ctx,
            table: &mut self.table,
            hooks: &mut self.http.hooks,
        }
    }
}

/// Link `wasi:http` (types and outgoing-handler; an optional import).
pub(crate) fn add_to_linker(
    linker: &mut wasmtime::component::Linker<HostState>,
) -> wasmtime::Result<()> {
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)
}

type SendFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
                ),
                HttpError,
            >,
        > + Send,
>;

impl wasmtime_wasi_http::WasiHttpHooks for Hooks {
    // The capability sets `host` from the URL; a journaled request names
    // its URL once.
    fn set_host_header(&mut self) -> bool {
        false
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        _options: Option<wasmtime_wasi_http::RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> SendFuture {
        let host = self.host.clone();
        let call_id = host.as_ref().map(|h| h.reserve_call_id());
        let body_limit = self.body_limit;
        Box::new(async move {
            let (Some(host), Some(call_id)) = (host, call_id) else {
                return Err(HttpError::InternalError(Some(
                    "outgoing HTTP is not available during describe()".into(),
                )));
            };
            let (parts, body) = request.into_parts();
            let body = read_limited(body, body_limit).await?;
            let (body, body_base64) = encode_body(&body);
            let journaled = HttpRequest {
                method: parts.method.as_str().to_string(),
                url: parts.uri.to_string(),
                headers: headers_of(&parts.headers),
                body,
                body_base64,
            };
            let request = serde_json::to_value(&journaled).map_err(|e| {
                HttpError::InternalError(Some(format!("cannot encode the request: {e}")))
            })?;
            let answer = host
                .keyed_call(call_id, HTTP, "request", request)
                .await
                .map_err(|failure| HttpError::InternalError(Some(failure.0)))?;
            let value = answer.map_err(error_of)?;
            let response: HttpResponse = serde_json::from_value(value).map_err(|e| {
                HttpError::InternalError(Some(format!("the journaled response does not read: {e}")))
            })?;
            let bytes = decode_body(&response.body, &response.body_base64).map_err(|e| {
                HttpError::InternalError(Some(format!("the journaled body does not read: {e}")))
            })?;
            let mut builder = http::Response::builder().status(response.status);
            for (name, value) in &response.headers {
                builder = builder.header(name, value);
            }
            let body = http_body_util::Full::new(Bytes::from(bytes))
                .map_err(|never| match never {})
                .boxed_unsync();
            let response = builder.body(body).map_err(|e| {
                HttpError::InternalError(Some(format!("the response does not build: {e}")))
            })?;
            let done: Box<dyn Future<Output = Result<(), HttpError>> + Send> =
                Box::new(async { Ok(()) });
            Ok((response, done))
        })
    }
}

/// Headers as journaled: `[name, value]` in order (a value that is not
/// text, lossily).
fn headers_of(headers: &http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// The whole body, refused past `limit` bytes.
async fn read_limited(mut body: WasiBody, limit: u64) -> Result<Vec<u8>, HttpError> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        if let Ok(data) = frame.into_data() {
            if (out.len() + data.len()) as u64 > limit {
                return Err(HttpError::HttpRequestBodySize(Some(limit)));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

/// A failed call as the guest's `error-code`: the capability names the
/// kind first (`connection-refused: …`); a refusal is `HTTP-request-denied`.
fn error_of(e: CallError) -> HttpError {
    match e.code {
        CallErrorCode::Refused => HttpError::HttpRequestDenied,
        CallErrorCode::Cancelled => HttpError::InternalError(Some("the run was cancelled".into())),
        CallErrorCode::LimitExceeded | CallErrorCode::Interrupted => {
            HttpError::InternalError(Some(format!("{}: {}", e.code.as_str(), e.message)))
        }
        CallErrorCode::Provider => {
            let kind = e
                .message
                .split_once(':')
                .map_or(e.message.as_str(), |(k, _)| k);
            match kind {
                "connection-refused" => HttpError::ConnectionRefused,
                "connection-timeout" => HttpError::ConnectionTimeout,
                "response-timeout" => HttpError::HttpResponseTimeout,
                "dns-error" => HttpError::DnsError {
                    rcode: None,
                    info_code: None,
                },
                "response-body-size" => HttpError::HttpResponseBodySize(None),
                "uri-invalid" => HttpError::HttpRequestUriInvalid,
                "tls" => HttpError::TlsProtocolError,
                _ => HttpError::InternalError(Some(e.message)),
            }
        }
    }
}
