//! `/v1/components`: upload (stored once by digest, validated against the
//! world, visible to the uploading workspace) and list.

use super::AppState;
use super::auth::Workspace;
use super::error::ApiError;
use super::wire::ComponentInfo;
use crate::runtime::{ComponentRef, RuntimeError};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use std::sync::Arc;

pub async fn upload(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    body: Bytes,
) -> Result<(StatusCode, Json<ComponentInfo>), ApiError> {
    if body.is_empty() {
        return Err(ApiError::invalid(
            "the body is empty: send the component's bytes (application/wasm)",
        ));
    }
    let (digest, info) =
        s.rt.add_component(&ComponentRef::Bytes(Arc::new(body.to_vec())))
            .await?;
    s.rt.home()
        .grant_component(&ws.0, &digest)
        .map_err(RuntimeError::from)?;
    Ok((
        StatusCode::CREATED,
        Json(ComponentInfo {
            digest,
            name: info.name,
            version: info.version,
            can_park: info.can_park,
            built_in: None,
        }),
    ))
}

pub async fn list(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
) -> Result<Json<Vec<ComponentInfo>>, ApiError> {
    let mut out = Vec::new();
    for name in crate::examples::names() {
        let (digest, info) =
            s.rt.add_component(&ComponentRef::BuiltIn(name.to_string()))
                .await?;
        out.push(ComponentInfo {
            digest,
            name: info.name,
            version: info.version,
            can_park: info.can_park,
            built_in: Some(name.to_string()),
        });
    }
    for digest in s.rt.home().granted(&ws.0) {
        if out.iter().any(|c| c.digest == digest) {
            continue;
        }
        if let Ok((digest, info)) = s.rt.add_component(&ComponentRef::Digest(digest)).await {
            out.push(ComponentInfo {
                digest,
                name: info.name,
                version: info.version,
                can_park: info.can_park,
                built_in: None,
            });
        }
    }
    Ok(Json(out))
}
