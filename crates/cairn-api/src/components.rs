//! `/v1/components`: upload (stored once by digest, validated against the
//! world, visible to the uploading workspace) and list.

use super::AppState;
use super::auth::Workspace;
use super::error::ApiError;
use super::wire::ComponentInfo;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use cairn_runtime::ErrorCode;
use cairn_runtime::runtime::ComponentRef;
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
    // A new digest counts against the workspace's upload quotas, reserved
    // before the (long) compile so two uploads at once cannot both slip in.
    let digest = cairn_runtime::component::digest_of(&body);
    let granted = s.rt.granted(&ws.0).await;
    let _reserved = match granted.contains(&digest) {
        true => None,
        false => Some(s.uploads.reserve(&s, &ws.0, &granted, body.len() as u64)?),
    };
    let (digest, info) =
        s.rt.add_component(&ComponentRef::Bytes(Arc::new(body.to_vec())))
            .await?;
    s.rt.grant(&ws.0, &digest).await?;
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
    Ok(Json(usable(&s, &ws).await?))
}

/// The components a workspace may use: the built-in examples, then its
/// uploads. `/v1/components`, `/v1/models` and the A2A agents list these.
pub async fn usable(s: &AppState, ws: &Workspace) -> Result<Vec<ComponentInfo>, ApiError> {
    let mut out = Vec::new();
    for name in cairn_examples::names() {
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
    for digest in s.rt.granted(&ws.0).await {
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
    Ok(out)
}

/// Uploads being compiled, per workspace: (count, bytes), counted with
/// what the workspace already holds against `uploads` and
/// `component_bytes`.
#[derive(Clone, Default)]
pub struct Uploads {
    reserved: Arc<std::sync::Mutex<std::collections::HashMap<String, (usize, u64)>>>,
}

/// A reservation, given back when the upload ends (stored or refused).
pub struct Reserved {
    uploads: Uploads,
    workspace: String,
    bytes: u64,
}

impl Uploads {
    fn reserve(
        &self,
        s: &AppState,
        workspace: &str,
        granted: &[String],
        bytes: u64,
    ) -> Result<Reserved, ApiError> {
        let host = s.rt.host_config();
        let max_uploads = host.quota_of(
            workspace,
            |q| q.uploads,
            cairn_runtime::config::DEFAULT_UPLOADS,
        );
        let max_bytes = host.quota_of(
            workspace,
            |q| q.component_bytes,
            cairn_runtime::config::DEFAULT_COMPONENT_BYTES,
        );
        let held: u64 = granted.iter().filter_map(|d| s.rt.component_len(d)).sum();
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        let (n, b) = reserved.get(workspace).copied().unwrap_or((0, 0));
        let full = |message: String| ApiError::new(ErrorCode::Capacity, message);
        if granted.len() + n + 1 > max_uploads {
            return Err(full(format!(
                "workspace {workspace:?} holds {} components, its quota (uploads = {max_uploads})",
                granted.len() + n
            )));
        }
        if held + b + bytes > max_bytes {
            return Err(full(format!(
                "workspace {workspace:?} would hold {} bytes of components, over its quota (component_bytes = {max_bytes})",
                held + b + bytes
            )));
        }
        reserved.insert(workspace.to_string(), (n + 1, b + bytes));
        Ok(Reserved {
            uploads: self.clone(),
            workspace: workspace.to_string(),
            bytes,
        })
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        let mut reserved = self
            .uploads
            .reserved
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some((n, b)) = reserved.get_mut(&self.workspace) {
            *n -= 1;
            *b -= self.bytes;
            if *n == 0 {
                reserved.remove(&self.workspace);
            }
        }
    }
}
