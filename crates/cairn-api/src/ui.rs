//! The browser viewer at `/ui/`: the assets of `viewer/dist/`, built from
//! the TypeScript in `viewer/` and embedded in the binary (no CDN, no
//! network: the page and jco's transpiler for in-browser replay are all
//! here). The page reads the API like any client, with the caller's token.

use axum::extract::{Path, RawQuery};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

/// Every asset: its name under `/ui/`, bytes and content type.
const ASSETS: &[(&str, &[u8], &str)] = &[
    (
        "index.html",
        include_bytes!("../../../viewer/dist/index.html"),
        "text/html; charset=utf-8",
    ),
    (
        "app.js",
        include_bytes!("../../../viewer/dist/app.js"),
        "text/javascript; charset=utf-8",
    ),
    (
        "app.css",
        include_bytes!("../../../viewer/dist/app.css"),
        "text/css; charset=utf-8",
    ),
    (
        "js-component-bindgen-component.core.wasm",
        include_bytes!("../../../viewer/dist/js-component-bindgen-component.core.wasm"),
        "application/wasm",
    ),
    (
        "js-component-bindgen-component.core2.wasm",
        include_bytes!("../../../viewer/dist/js-component-bindgen-component.core2.wasm"),
        "application/wasm",
    ),
];

/// Each asset's ETag: the start of its content's SHA-256 (computed once).
fn etag(name: &str) -> Option<&'static str> {
    static TAGS: OnceLock<Vec<(&'static str, String)>> = OnceLock::new();
    TAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|(n, bytes, _)| {
                (
                    *n,
                    format!("\"{}\"", &hex::encode(Sha256::digest(bytes))[..20]),
                )
            })
            .collect()
    })
    .iter()
    .find(|(n, _)| *n == name)
    .map(|(_, t)| t.as_str())
}

/// The page, naming its script and stylesheet by content (`app.js?v=TAG`),
/// so a browser may keep those for good and reload nothing it has.
fn page() -> &'static [u8] {
    static PAGE: OnceLock<Vec<u8>> = OnceLock::new();
    PAGE.get_or_init(|| {
        let (_, bytes, _) = ASSETS[0];
        let mut text = String::from_utf8_lossy(bytes).into_owned();
        for name in ["app.js", "app.css"] {
            let tag = etag(name).unwrap_or_default().trim_matches('"');
            text = text.replace(&format!("\"{name}\""), &format!("\"{name}?v={tag}\""));
        }
        text.into_bytes()
    })
}

/// The served page's ETag (of the page as served: a new script is a new
/// page).
fn page_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| format!("\"{}\"", &hex::encode(Sha256::digest(page()))[..20]))
}

fn asset(name: &str, query: Option<&str>, headers: &HeaderMap) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, bytes, content_type)) => {
            let tag = if name == "index.html" {
                page_tag()
            } else {
                etag(name).unwrap_or_default()
            };
            // Revalidated by its ETag: an unchanged asset is a 304, no body.
            let fresh = headers
                .get(header::IF_NONE_MATCH)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
            let body: &'static [u8] = if name == "index.html" { page() } else { bytes };
            let mut r = if fresh {
                StatusCode::NOT_MODIFIED.into_response()
            } else {
                body.into_response()
            };
            let h = r.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            if let Ok(v) = HeaderValue::from_str(tag) {
                h.insert(header::ETAG, v);
            }
            // Named by its content (`?v=` its tag): kept for good. Anything
            // else revalidates (the page, jco's core wasm, an old `?v=`).
            let versioned = query
                .and_then(|q| q.strip_prefix("v="))
                .is_some_and(|v| v == tag.trim_matches('"'));
            h.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static(if versioned {
                    "public, max-age=31536000, immutable"
                } else {
                    "no-cache"
                }),
            );
            h.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(
                    "default-src 'self'; script-src 'self' blob: 'wasm-unsafe-eval'; \
                     style-src 'self'; img-src 'self' data:; connect-src 'self'",
                ),
            );
            h.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            r
        }
        None => super::error::ApiError::not_found(format!("the viewer has no asset {name:?}"))
            .into_response(),
    }
}

/// `GET /ui`: to `/ui/`, so the page's relative asset paths resolve.
pub async fn root_redirect() -> Redirect {
    Redirect::permanent("/ui/")
}

/// `GET /ui/`: the page.
pub async fn index(headers: HeaderMap) -> Response {
    asset("index.html", None, &headers)
}

/// `GET /ui/{file}`: one of its assets.
pub async fn file(
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    asset(&name, query.as_deref(), &headers)
}
