//! `PUT` and `DELETE /v1/sessions/{id}/observers/{name}`: an observer
//! leased across a process boundary (seed 002), held where the session is
//! (the forwarding layer takes the call to its holder). And the keeper of
//! the lease a stream served here from another instance's session (the
//! relay) holds there while it is open: renewed every third of its TTL
//! through whichever instance holds the session then, released when the
//! stream ends; a dead instance's leases expire (`observer_detached`,
//! `expired`).

use super::AppState;
use super::auth::{Workspace, own_session};
use super::error::ApiError;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::{Extension, Json};
use cairn_runtime::ids::SessionId;
use cairn_runtime::runtime::Leased;
use cairn_runtime::runtime::cluster::Route;
use std::time::Duration;

/// `PUT /v1/sessions/{id}/observers/{name}`'s body.
#[derive(Debug, Default, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    /// Whether a human is attending (a present observer routes the
    /// session's decisions to the conversation).
    #[serde(default)]
    pub present: bool,
    /// How long the lease lives unless renewed, 100 ms to 300 s (default:
    /// the shared store's lease time, else 10 s).
    #[serde(default)]
    pub ttl_ms: Option<u64>,
}

/// The TTL a lease gets when its request names none.
fn default_ttl(s: &AppState) -> Duration {
    match s.rt.lease_ttl() {
        Duration::ZERO => Duration::from_secs(10),
        ttl => ttl,
    }
}

pub async fn lease(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path((id, name)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Result<Json<Leased>, ApiError> {
    let session = own_session(&s, &ws, &SessionId::parse(&id)?)?;
    let req: LeaseRequest = if body.is_empty() {
        LeaseRequest::default()
    } else {
        crate::body::parse(&body)?
    };
    let ttl = req
        .ttl_ms
        .map_or_else(|| default_ttl(&s), Duration::from_millis);
    Ok(Json(
        s.rt.lease_observer(&session, &name, req.present, ttl)
            .await?,
    ))
}

pub async fn release(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path((id, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let session = own_session(&s, &ws, &SessionId::parse(&id)?)?;
    match s.rt.release_observer(&session, &name).await? {
        true => Ok(StatusCode::NO_CONTENT),
        false => Err(ApiError::not_found(format!(
            "session {id} holds no observer lease {name}"
        ))),
    }
}

/// The lease a relayed stream holds at the session's holder, for as long
/// as it is kept: dropping it stops the renewals and releases the lease.
pub struct Keeper {
    task: tokio::task::JoinHandle<()>,
    lease: Option<Lease>,
}

/// What a release needs.
struct Lease {
    state: AppState,
    session: SessionId,
    path: String,
    name: String,
    auth: Option<HeaderValue>,
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.task.abort();
        let (Some(l), Ok(handle)) = (self.lease.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        handle.spawn(async move {
            let release = |rt: cairn_runtime::Runtime| {
                let (session, name) = (l.session.clone(), l.name.clone());
                async move { rt.release_observer(&session, &name).await.map(|_| ()) }
            };
            if let Err(e) = at_holder(
                &l.state,
                &l.session,
                &l.path,
                Method::DELETE,
                None,
                l.auth.as_ref(),
                release,
            )
            .await
            {
                tracing::debug!(session = %l.session, "cannot release an observer lease (it expires): {e}");
            }
        });
    }
}

/// Keep a lease for `obs`, a stream of `session` served here from the
/// relay, at the session's holder; `headers` are the stream request's (its
/// credentials go with each renewal). `None` for a stream of a session
/// held here (it is an observer here already).
pub fn keep(
    s: &AppState,
    session: &SessionId,
    obs: &cairn_runtime::runtime::Observation,
    headers: &HeaderMap,
) -> Option<Keeper> {
    if !obs.relayed() {
        return None;
    }
    let name = format!(
        "{}.{}",
        s.rt.instance_id().unwrap_or("relay"),
        obs.observer().id
    );
    let present = obs.observer().present;
    let id = session.name().to_string();
    let session = session.clone();
    let ttl = default_ttl(s);
    let lease = Lease {
        state: s.clone(),
        path: format!(
            "/v1/sessions/{}/observers/{name}",
            percent_encoding::utf8_percent_encode(&id, percent_encoding::NON_ALPHANUMERIC)
        ),
        session,
        name,
        auth: headers.get(axum::http::header::AUTHORIZATION).cloned(),
    };
    let body = serde_json::json!({ "present": present, "ttl_ms": ttl.as_millis() as u64 });
    let (state, session, path, name, auth) = (
        lease.state.clone(),
        lease.session.clone(),
        lease.path.clone(),
        lease.name.clone(),
        lease.auth.clone(),
    );
    let task = tokio::spawn(async move {
        loop {
            let renew = |rt: cairn_runtime::Runtime| {
                let (session, name) = (session.clone(), name.clone());
                async move {
                    rt.lease_observer(&session, &name, present, ttl)
                        .await
                        .map(|_| ())
                }
            };
            if let Err(e) = at_holder(
                &state,
                &session,
                &path,
                Method::PUT,
                Some(&body),
                auth.as_ref(),
                renew,
            )
            .await
            {
                tracing::debug!(session = %session, "cannot renew an observer lease: {e}");
            }
            tokio::time::sleep(ttl / 3).await;
        }
    });
    Some(Keeper {
        task,
        lease: Some(lease),
    })
}

/// Send one lease call where `session` is held: here (`local`), or to its
/// holder with the stream's credentials.
async fn at_holder<F, Fut>(
    s: &AppState,
    session: &SessionId,
    path: &str,
    method: Method,
    body: Option<&serde_json::Value>,
    auth: Option<&HeaderValue>,
    local: F,
) -> Result<(), String>
where
    F: FnOnce(cairn_runtime::Runtime) -> Fut,
    Fut: std::future::Future<Output = Result<(), cairn_runtime::runtime::RuntimeError>>,
{
    match s.rt.route(session).await.map_err(|e| e.to_string())? {
        Route::Here => local(s.rt.clone()).await.map_err(|e| e.to_string()),
        Route::Unknown => Err(format!("no session {session}")),
        Route::Holder { url, .. } => {
            let mut req =
                s.rt.forwarder()
                    .request(method, format!("{}{path}", url.trim_end_matches('/')))
                    .header(
                        crate::forward::FORWARDED,
                        s.rt.instance_id().unwrap_or("unknown"),
                    )
                    .timeout(Duration::from_secs(5));
            if let Some(auth) = auth {
                req = req.header(axum::http::header::AUTHORIZATION, auth);
            }
            if let Some(body) = body {
                req = req.json(body);
            }
            let answer = req.send().await.map_err(|e| e.to_string())?;
            if answer.status().is_success() || answer.status() == StatusCode::NOT_FOUND {
                Ok(())
            } else {
                Err(format!("{} answered {}", url, answer.status()))
            }
        }
    }
}
