//! The browser viewer at `/ui/`: the assets of `viewer/dist/`, built from
//! the TypeScript in `viewer/` and embedded in the binary (no CDN, no
//! network: the page and jco's transpiler for in-browser replay are all
//! here). The page reads the API like any client, with the caller's token.

use axum::extract::Path;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};

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

fn asset(name: &str) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, bytes, content_type)) => {
            let mut r = bytes.into_response();
            let h = r.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            // The page always revalidates; its assets are small enough.
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
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
pub async fn index() -> Response {
    asset("index.html")
}

/// `GET /ui/{file}`: one of its assets.
pub async fn file(Path(name): Path<String>) -> Response {
    asset(&name)
}
