//! `/v1/components`: upload (stored once by digest, validated against the
//! world, visible to the uploading workspace) and list.

use super::AppState;
use super::auth::Workspace;
use super::error::ApiError;
use super::wire::{ComponentInfo, ComponentState};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use cairn_runtime::ErrorCode;
use cairn_runtime::runtime::ComponentRef;
use std::sync::Arc;

/// How long an upload waits for its compile before it answers `202`
/// (a Rust controller compiles in well under it; an 18 MB Python one
/// does not).
const UPLOAD_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

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
    // until its compile ends so two uploads at once cannot both slip in.
    let digest = cairn_runtime::component::digest_of(&body);
    let granted = s.rt.granted(&ws.0).await;
    let reserved = match granted.contains(&digest) {
        true => None,
        false => Some(s.uploads.reserve(&s, &ws.0, &granted, body.len() as u64)?),
    };
    // Checked (imports named, the compile budget) and stored at once.
    let digest = s.rt.store_component(&body).await?;
    if let Some(info) = s.rt.compiled_info(&digest) {
        s.rt.grant(&ws.0, &digest).await?;
        return Ok((StatusCode::CREATED, Json(ready(digest, info, None))));
    }
    // The compile goes on past the answer when it outlasts the wait; the
    // workspace is granted the component once it compiled.
    s.uploads.begin(&ws.0, &digest);
    let compile = {
        let (s, workspace, digest) = (s.clone(), ws.0.clone(), digest.clone());
        tokio::spawn(async move {
            let _reserved = reserved;
            let compiled =
                s.rt.add_component(&ComponentRef::Digest(digest.clone()))
                    .await;
            let granted = match compiled {
                Ok(c) => s.rt.grant(&workspace, &digest).await.map(|()| c),
                Err(e) => Err(e),
            };
            s.uploads.end(
                &workspace,
                &digest,
                granted.as_ref().err().map(|e| e.to_string()),
            );
            granted
        })
    };
    match tokio::time::timeout(UPLOAD_WAIT, compile).await {
        Ok(Ok(Ok((digest, info)))) => Ok((StatusCode::CREATED, Json(ready(digest, info, None)))),
        Ok(Ok(Err(e))) => {
            // Answered here: the upload is refused as a whole.
            s.uploads.forget(&ws.0, &digest);
            Err(e.into())
        }
        Ok(Err(e)) => Err(ApiError::new(
            ErrorCode::Internal,
            format!("the compile stopped: {e}"),
        )),
        Err(_) => Ok((StatusCode::ACCEPTED, Json(unfinished(digest, None)))),
    }
}

fn ready(
    digest: String,
    info: cairn_runtime::component::Info,
    built_in: Option<String>,
) -> ComponentInfo {
    ComponentInfo {
        digest,
        name: info.name,
        version: info.version,
        can_park: info.can_park,
        built_in,
        state: ComponentState::Ready,
        error: None,
    }
}

/// An upload not compiled (yet): `compiling`, or `failed` with its error;
/// its `describe()` fields empty.
fn unfinished(digest: String, error: Option<String>) -> ComponentInfo {
    ComponentInfo {
        digest,
        name: String::new(),
        version: String::new(),
        can_park: false,
        built_in: None,
        state: match error {
            None => ComponentState::Compiling,
            Some(_) => ComponentState::Failed,
        },
        error,
    }
}

pub async fn list(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
) -> Result<Json<Vec<ComponentInfo>>, ApiError> {
    let mut out = usable(&s, &ws).await?;
    // Uploads still compiling, or whose compile failed after the answer.
    for (digest, error) in s.uploads.unfinished(&ws.0) {
        if out.iter().any(|c| c.digest == digest) {
            continue;
        }
        out.push(unfinished(digest, error));
    }
    Ok(Json(out))
}

/// The components a workspace may use: the built-in examples, then its
/// uploads. `/v1/components`, `/v1/models` and the A2A agents list these.
pub async fn usable(s: &AppState, ws: &Workspace) -> Result<Vec<ComponentInfo>, ApiError> {
    let mut out = Vec::new();
    for name in cairn_examples::names() {
        let (digest, info) =
            s.rt.add_component(&ComponentRef::BuiltIn(name.to_string()))
                .await?;
        out.push(ready(digest, info, Some(name.to_string())));
    }
    for digest in s.rt.granted(&ws.0).await {
        if out.iter().any(|c| c.digest == digest) {
            continue;
        }
        if let Ok((digest, info)) = s.rt.add_component(&ComponentRef::Digest(digest)).await {
            out.push(ready(digest, info, None));
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
    /// Uploads answered before their compile ended, by (workspace,
    /// digest): `None` while it goes on, the error once it failed (kept
    /// for the listing until the process ends or the digest is uploaded
    /// again); removed once it compiled.
    unfinished: Arc<std::sync::Mutex<Unfinished>>,
}

/// Uploads answered before their compile ended: (workspace, digest) →
/// the compile's error once it failed.
type Unfinished = std::collections::BTreeMap<(String, String), Option<String>>;

/// A reservation, given back when the upload ends (stored or refused).
pub struct Reserved {
    uploads: Uploads,
    workspace: String,
    bytes: u64,
}

impl Uploads {
    fn unfinished_map(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<(String, String), Option<String>>>
    {
        self.unfinished.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn begin(&self, workspace: &str, digest: &str) {
        self.unfinished_map()
            .insert((workspace.to_string(), digest.to_string()), None);
    }

    fn end(&self, workspace: &str, digest: &str, error: Option<String>) {
        let key = (workspace.to_string(), digest.to_string());
        match error {
            None => {
                self.unfinished_map().remove(&key);
            }
            Some(e) => {
                self.unfinished_map().insert(key, Some(e));
            }
        }
    }

    fn forget(&self, workspace: &str, digest: &str) {
        self.unfinished_map()
            .remove(&(workspace.to_string(), digest.to_string()));
    }

    /// Whether `workspace`'s upload of `digest` is compiling now.
    pub fn compiling(&self, workspace: &str, digest: &str) -> bool {
        self.unfinished_map()
            .get(&(workspace.to_string(), digest.to_string()))
            .is_some_and(Option::is_none)
    }

    /// A workspace's uploads not (yet) compiled: (digest, error).
    fn unfinished(&self, workspace: &str) -> Vec<(String, Option<String>)> {
        self.unfinished_map()
            .iter()
            .filter(|((w, _), _)| w == workspace)
            .map(|((_, d), e)| (d.clone(), e.clone()))
            .collect()
    }

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

/// `POST /v1/components/{digest}/update`: move the workspace's sessions
/// bound to `digest` to another component where shadow replay finds them
/// compatible; the report (kept: `GET /v1/updates/{id}`).
pub async fn update_all(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    axum::extract::Path(digest): axum::extract::Path<String>,
    crate::body::JsonBody(req): crate::body::JsonBody<crate::wire::BulkUpdateRequest>,
) -> Result<Json<cairn_runtime::runtime::update_bulk::BulkUpdate>, ApiError> {
    let from = crate::runs::component_ref(&s, &ws, &digest).await?;
    let to = crate::runs::component_ref(&s, &ws, &req.to).await?;
    Ok(Json(
        s.rt.update_all(&from, &to, Some(&ws.0), req.dry_run, &|_, _| {})
            .await?,
    ))
}

/// `GET /v1/updates/{id}`: a bulk update's report (the workspace's own).
pub async fn update_report(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Json<cairn_runtime::runtime::update_bulk::BulkUpdate>, ApiError> {
    let missing = || ApiError::not_found(format!("no update {id}"));
    let uuid = uuid::Uuid::parse_str(&id).map_err(|_| missing())?;
    let report = s.rt.update_report(uuid).ok_or_else(missing)?;
    if report.workspace.as_deref().is_some_and(|w| w != ws.0) {
        return Err(missing());
    }
    Ok(Json(report))
}
