//! `/v1/decisions` (and `/v1/approvals/{id}`, an alias).

use super::AppState;
use super::auth::{Workspace, is_own, own_session};
use super::body::JsonBody;
use super::error::ApiError;
use super::wire::{DecideRequest, Decided, DecisionsQuery};
use axum::extract::{Path, State};
use axum::{Extension, Json};
use cairn_runtime::ids::{DecisionId, SessionId};
use cairn_runtime::runtime::PendingDecision;

pub async fn list(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    crate::body::QueryArgs(q): crate::body::QueryArgs<DecisionsQuery>,
) -> Result<Json<Vec<PendingDecision>>, ApiError> {
    let session = match q.session.as_deref().map(SessionId::parse).transpose()? {
        Some(name) => Some(own_session(&s, &ws, &name)?),
        None => None,
    };
    let mut mine: Vec<PendingDecision> =
        s.rt.pending_decisions(session.as_ref())
            .into_iter()
            .filter(|p| is_own(&s, &ws, &p.session_id))
            .collect();
    // Each request's kind, prompt and details, from its run's entries in
    // the journal (read from where the run begins, a page at a time). A
    // request registered but not yet committed (its id is minted with its
    // entry, which the journal shows once written) is left out until it is:
    // a listing never shows a decision without what it asks.
    let mut unwritten = Vec::new();
    for p in &mut mine {
        let mut asked = None;
        let after = s.rt.run_after(p.run_id).await;
        let scanned =
            s.rt.scan(&p.session_id, after, |i| {
                if let Some(cairn_runtime::journal::event::Payload::Lifecycle(
                    cairn_runtime::journal::event::LifecycleEvent::DecisionRequested {
                        decision_id,
                        request_kind,
                        prompt,
                        details,
                        ..
                    },
                )) = i.event().map(|e| &e.payload)
                    && *decision_id == p.decision_id
                {
                    asked = Some((*request_kind, prompt.clone(), details.clone()));
                }
                asked.is_none()
            })
            .await;
        match asked {
            Some((kind, prompt, details)) => {
                p.request_kind = Some(kind);
                p.prompt = Some(prompt);
                p.details = Some(details);
            }
            // A journal that could not be read hides nothing.
            None if scanned.is_ok() => unwritten.push(p.decision_id.clone()),
            None => {}
        }
    }
    mine.retain(|p| !unwritten.contains(&p.decision_id));
    Ok(Json(mine))
}

pub async fn decide(
    State(s): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<DecideRequest>,
) -> Result<Json<Decided>, ApiError> {
    let id: DecisionId = id.parse()?;
    let not_found = || ApiError::not_found(format!("no pending decision {id}"));
    let session = s.rt.session_of_decision(&id).ok_or_else(not_found)?;
    if !is_own(&s, &ws, &session) {
        return Err(not_found());
    }
    s.rt.decide(&id, req.value).await?;
    Ok(Json(Decided {
        decision_id: id.to_string(),
        recorded: true,
    }))
}
