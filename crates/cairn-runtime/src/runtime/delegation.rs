//! Delegation (seed 000 "Child, peer, and notification state"): the live
//! side of the `workers` interface. A child is a worker of its own, in its
//! parent's workspace, linked both ways (the child's `worker.json` `parent`,
//! the parent's `metadata.json` `children`, one record per child under the
//! parent's `runs/<gen>/spawned/`). Its session id derives from the parent's
//! run and the spawn's ordinal, so a spawn a crash cut short is adopted when
//! the parent's replay asks again, never made twice. A loaned scope is a
//! directory of the parent's `artifacts/`, given to the child's first run as
//! `/loan` and reclaimed when that run ends or the child is pruned. A
//! child's end writes a `child_notification` into the parent's journal: a
//! hint; `status` and `wait` read the child's own journal.

use super::run::RunCtx;
use super::{Runtime, RuntimeError};
use crate::ids::{RunId, Seq, SessionId, WorkerId};
use crate::journal::event::{
    CancelReason, LifecycleEvent, Liveness, LivenessPolicy, Payload, RunStatus,
};
use crate::worker::{ChildRef, ChildStatus, ParentRef, PeerRef};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

/// Read, change and write a worker's `metadata.json`, one change at a
/// time (see [`crate::worker::WorkerDir::update_metadata`]).
fn update_meta(
    rt: &Runtime,
    worker: WorkerId,
    change: impl FnOnce(&mut crate::worker::WorkerMetadata) -> Result<bool, String>,
) -> Result<(), String> {
    let w = rt
        .workers()
        .open_worker(worker)
        .map_err(|e| e.to_string())?;
    w.update_metadata(change)
}

/// Answer one live `workers` call: `{"ok": …}` or `{"error": "…"}`.
pub(crate) async fn call(rt: &Runtime, ctx: &RunCtx, call: &Value) -> Value {
    let worker = || {
        call["worker_id"]
            .as_str()
            .and_then(|w| w.parse::<WorkerId>().ok())
            .ok_or_else(|| format!("{} is not a worker id", call["worker_id"]))
    };
    let result = match call["call"].as_str().unwrap_or("") {
        "spawn" => spawn(rt, ctx, call).await,
        "status" => match worker() {
            Ok(w) => status(rt, ctx, w).await,
            Err(e) => Err(e),
        },
        "wait" => match worker() {
            Ok(w) => wait(rt, ctx, w, call["timeout_ms"].as_u64().unwrap_or(0)).await,
            Err(e) => Err(e),
        },
        "cancel" => match worker() {
            Ok(w) => cancel(rt, ctx, w).await,
            Err(e) => Err(e),
        },
        "register_peer" => match worker() {
            Ok(w) => register_peer(rt, ctx, w),
            Err(e) => Err(e),
        },
        "peers" => peers(rt, ctx),
        other => Err(format!("no workers call {other:?}")),
    };
    match result {
        Ok(v) => json!({ "ok": v }),
        Err(e) => json!({ "error": guest_visible(rt, ctx, &e) }),
    }
}

/// An error as the guest may see it: no host path. The run's own
/// `artifacts/` reads as `artifacts/`; anything else under the home as
/// `<home>/…` with no absolute prefix (what the host's messages name
/// should be relative already: this is the net under them).
fn guest_visible(rt: &Runtime, ctx: &RunCtx, message: &str) -> String {
    let mut out = message.to_string();
    if let Some(place) = ctx.place()
        && place.artifacts.is_absolute()
    {
        out = out.replace(&*place.artifacts.to_string_lossy(), "artifacts");
    }
    let home = rt.home().path();
    if home.is_absolute() {
        out = out.replace(&*home.to_string_lossy(), "<home>");
    }
    out
}

fn place(ctx: &RunCtx) -> Result<super::run::Place, String> {
    ctx.place()
        .ok_or_else(|| "the run has no generation yet".to_string())
}

fn overlaps(a: &str, b: &str) -> bool {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.split('/').collect(), b.split('/').collect());
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

async fn spawn(rt: &Runtime, ctx: &RunCtx, call: &Value) -> Result<Value, String> {
    let place = place(ctx)?.clone();
    let home = rt.workers();
    let n = ctx.spawned.load(std::sync::atomic::Ordering::Relaxed);
    if n > ctx.limits.children_per_run {
        return Err(ctx.break_limit("children_per_run", n, ctx.limits.children_per_run));
    }
    let parent = home
        .open_worker(place.worker_id)
        .map_err(|e| e.to_string())?;
    let record = parent.record().map_err(|e| e.to_string())?;
    let depth = record.parent.as_ref().map_or(0, |p| p.depth) + 1;
    if depth > ctx.limits.child_depth {
        return Err(ctx.break_limit("child_depth", depth, ctx.limits.child_depth));
    }
    let workspace = record.workspace.clone();
    let name = call["component"].as_str().unwrap_or_default();
    let component = match super::ComponentRef::named(name) {
        Some(c @ super::ComponentRef::BuiltIn(_)) => c,
        Some(c) if rt.may_use(&workspace, name).await => c,
        _ => {
            return Err(format!(
                "component {name:?} is not one workspace {workspace:?} may use (a built-in example name, or the digest of an upload)"
            ));
        }
    };
    let (digest, _) = rt
        .add_component(&component)
        .await
        .map_err(|e| e.to_string())?;
    let prompt = call["prompt"].as_str().unwrap_or_default().to_string();
    let liveness = match call["liveness"].as_str() {
        Some("cancel") => LivenessPolicy::Cancel,
        Some("park") => LivenessPolicy::Park,
        _ => LivenessPolicy::Continue,
    };
    // The child's id derives from the spawn: a spawn the parent's replay
    // asks again finds the child it made.
    let key = format!("{}/{}", ctx.run_id, n);
    let session = ctx.session.sibling(
        &SessionId::parse(&format!(
            "s-{}",
            uuid::Uuid::new_v5(
                &uuid::Uuid::NAMESPACE_OID,
                format!("cairn-child:{}:{key}", ctx.session).as_bytes()
            )
        ))
        .map_err(|e| e.to_string())?,
    );
    let meta = parent.metadata().map_err(|e| e.to_string())?;
    let existing = meta
        .children
        .iter()
        .find(|c| c.session_id == session)
        .cloned();
    // The whole tree is bounded, not just this run's fan-out: counted and
    // grown under the tree's lock, so spawns racing in one tree never pass
    // the cap together.
    let root = super::tree::root_of(rt, place.worker_id);
    let _tree = super::tree::lock(root).await;
    if existing.is_none() {
        let cap = ctx.limits.tree_workers;
        let size = 1 + super::tree::descendants(rt, root, cap as usize).len() as u64;
        if size >= cap {
            return Err(ctx.break_limit("tree_workers", size + 1, cap));
        }
    }
    let scope = match call["scope"].as_str() {
        Some(s) => Some(super::loan::check_scope(s)?),
        None => None,
    };
    if let Some(scope) = &scope
        && existing.is_none()
        && let Some(other) = meta.children.iter().find(|c| {
            c.status == ChildStatus::Running
                && !c.loan_reclaimed
                && c.scope.as_deref().is_some_and(|s| overlaps(s, scope))
        })
    {
        return Err(format!(
            "scope {scope:?} overlaps {:?}, loaned to the live child {}",
            other.scope.as_deref().unwrap_or_default(),
            other.worker_id
        ));
    }
    if let Some(scope) = &scope {
        super::loan::make_scope(&place.artifacts, scope)?;
    }
    let child_worker = match home.lookup(&session).map_err(|e| e.to_string())? {
        Some(w) => w,
        None => {
            rt.create_session_in(Some(session.clone()), &workspace)
                .await
                .map_err(|e| e.to_string())?
                .1
        }
    };
    crate::fsutil::crash_point("spawn-child-made");
    let child = home.open_worker(child_worker).map_err(|e| e.to_string())?;
    child
        .update_record(|record| match record.parent.as_mut() {
            // A spawn the parent's replay asks again, in a newer
            // generation, finds a child linked to the old one whose run
            // never held the loan: its loan is the new generation's scope.
            Some(p)
                if p.worker_id == place.worker_id
                    && p.generation != place.generation
                    && p.loan_run.is_none()
                    && !p.loan_reclaimed =>
            {
                p.generation = place.generation;
                true
            }
            Some(_) => false,
            None => {
                record.parent = Some(ParentRef {
                    worker_id: place.worker_id,
                    session_id: ctx.session.clone(),
                    generation: place.generation,
                    run_id: ctx.run_id,
                    scope: scope.clone(),
                    loan_run: None,
                    loan_reclaimed: false,
                    depth,
                });
                true
            }
        })
        .map_err(|e| e.to_string())?;
    crate::fsutil::crash_point("spawn-linked");
    spawned_record(
        &parent.path(),
        &place,
        &key,
        child_worker,
        &session,
        &digest,
        scope.as_deref(),
    )?;
    let link = ChildRef {
        worker_id: child_worker,
        session_id: session.clone(),
        component: digest.clone(),
        scope,
        generation: place.generation,
        status: ChildStatus::Running,
        loan_reclaimed: false,
    };
    update_meta(rt, place.worker_id, |meta| {
        if meta.children.iter().any(|c| c.worker_id == child_worker) {
            return Ok(false);
        }
        meta.children.push(link);
        Ok(true)
    })?;
    crate::fsutil::crash_point("spawn-recorded");
    if rt
        .session_runs(&session)
        .await
        .map_err(|e| e.to_string())?
        .is_empty()
    {
        rt.start(super::StartRun {
            session: Some(session.clone()),
            worker: None,
            component: Some(super::ComponentRef::Digest(digest)),
            prompt,
            liveness: Liveness {
                policy: liveness,
                grace_ms: 0,
            },
            timeout_ms: None,
            continues: None,
            workspace: Some(workspace),
            limits: Default::default(),
            tools: None,
            first_commit: crate::runtime::FirstCommit::Now,
            resume_on_start: None,
        })
        .await
        .map_err(|e| e.to_string())?;
    }
    Ok(json!({ "worker_id": child_worker, "session_id": session }))
}

fn spawned_record(
    parent: &Path,
    place: &super::run::Place,
    key: &str,
    child: WorkerId,
    session: &SessionId,
    component: &str,
    scope: Option<&str>,
) -> Result<(), String> {
    let gen_dir = parent.join("runs").join(place.generation.0.to_string());
    let dir = cap_std::fs::Dir::open_ambient_dir(&gen_dir, cap_std::ambient_authority())
        .map_err(|e| format!("cannot open the caller's generation: {}", e.kind()))?;
    let spawned = crate::fsutil::ensure_dir(&dir, "spawned")
        .map_err(|e| format!("cannot make spawned/: {e}"))?;
    let doc = json!({ "version": 1, "spawn": key, "worker_id": child, "session_id": session, "component": component, "scope": scope });
    crate::fsutil::write_document(
        &spawned,
        &format!("{child}.json"),
        doc.to_string().as_bytes(),
    )
    .map_err(|e| format!("cannot record the child: {e}"))
}

/// A related worker: a child (`control`) or a peer of the caller.
fn related(
    rt: &Runtime,
    ctx: &RunCtx,
    worker: WorkerId,
    control: bool,
) -> Result<(SessionId, Option<ChildRef>), String> {
    let place = place(ctx)?;
    let meta = rt
        .workers()
        .open_worker(place.worker_id)
        .and_then(|w| w.metadata())
        .map_err(|e| e.to_string())?;
    if let Some(c) = meta.children.iter().find(|c| c.worker_id == worker) {
        return Ok((c.session_id.clone(), Some(c.clone())));
    }
    if !control && let Some(p) = meta.peers.iter().find(|p| p.worker_id == worker) {
        return Ok((p.session_id.clone(), None));
    }
    Err(match control {
        true => format!("worker {worker} is not a child of this worker"),
        false => format!("worker {worker} is neither a child nor a peer of this worker"),
    })
}

/// A worker's state from its own journal: its last run's end.
async fn read_status(rt: &Runtime, session: &SessionId, pruned: bool) -> Result<Value, String> {
    let items = rt.read(session, Seq(0)).await.map_err(|e| e.to_string())?;
    let mut last: Option<(RunId, Option<Value>)> = None;
    for e in items.iter().filter_map(|i| i.event()) {
        let Payload::Lifecycle(l) = &e.payload else {
            continue;
        };
        let Some(run) = e.run_id else { continue };
        match l {
            LifecycleEvent::Started { .. } => last = Some((run, None)),
            LifecycleEvent::Finished { text, .. } => {
                last = Some((run, Some(json!({ "state": "finished", "text": text }))))
            }
            LifecycleEvent::Failed { error } => {
                last = Some((
                    run,
                    Some(
                        json!({ "state": "failed", "error": format!("{}: {}", error.code, error.message) }),
                    ),
                ))
            }
            LifecycleEvent::Cancelled { reason, message } => {
                let state = if *reason == CancelReason::Shutdown {
                    "stopped"
                } else {
                    "cancelled"
                };
                last = Some((run, Some(json!({ "state": state, "error": message }))));
            }
            LifecycleEvent::Parked { .. } => {
                last = Some((run, Some(json!({ "state": "stopped" }))))
            }
            _ => {}
        }
    }
    let status = match last {
        None => json!({ "state": "running" }),
        Some((_, Some(end))) => end,
        Some((run, None)) => match rt.live_runs().iter().any(|(_, r)| *r == run) {
            true => json!({ "state": "running" }),
            // Started, not ended, not live: interrupted (a restore may be
            // about to pick it up).
            false => json!({ "state": "stopped", "interrupted": true }),
        },
    };
    Ok(match pruned {
        true => json!({ "state": "pruned", "text": status["text"], "error": status["error"] }),
        false => status,
    })
}

async fn status(rt: &Runtime, ctx: &RunCtx, worker: WorkerId) -> Result<Value, String> {
    let (session, child) = related(rt, ctx, worker, false)?;
    let pruned = child
        .as_ref()
        .is_some_and(|c| c.status == ChildStatus::Pruned);
    let mut status = read_status(rt, &session, pruned).await?;
    if let Some(child) = &child {
        reconcile(rt, ctx, worker, &status);
        if let Some(scope) = &child.scope {
            super::loan::record_returned(rt, ctx, scope, &mut status).await;
        }
    }
    Ok(status)
}

/// What the child's journal says, written into the links before the parent
/// hears it: its status in the parent's `metadata.json`, and its loan ended
/// once the run that held it ended (the end hook may not have run yet, or
/// a crash cut it short).
fn reconcile(rt: &Runtime, ctx: &RunCtx, worker: WorkerId, status: &Value) {
    if status["interrupted"] == true {
        return;
    }
    let state = match status["state"].as_str() {
        Some("finished") => ChildStatus::Finished,
        Some("failed") => ChildStatus::Failed,
        Some("cancelled") => ChildStatus::Cancelled,
        Some("stopped") => ChildStatus::Stopped,
        _ => return,
    };
    let Ok(place) = place(ctx) else { return };
    let mut reclaimed = false;
    if state != ChildStatus::Stopped
        && let Ok(child) = rt.workers().open_worker(worker)
    {
        let _ = child.update_record(|record| match record.parent.as_mut() {
            Some(p) if p.loan_run.is_some() => {
                reclaimed = true;
                !std::mem::replace(&mut p.loan_reclaimed, true)
            }
            _ => false,
        });
    }
    let _ = update_meta(rt, place.worker_id, |meta| {
        match meta.children.iter_mut().find(|c| c.worker_id == worker) {
            Some(c)
                if c.status != ChildStatus::Pruned
                    && (c.status != state || (reclaimed && !c.loan_reclaimed)) =>
            {
                c.status = state;
                c.loan_reclaimed |= reclaimed;
                Ok(true)
            }
            _ => Ok(false),
        }
    });
}

async fn wait(
    rt: &Runtime,
    ctx: &RunCtx,
    worker: WorkerId,
    timeout_ms: u64,
) -> Result<Value, String> {
    let (session, _) = related(rt, ctx, worker, true)?;
    // Any u64 a guest passes: at most a year (no deadline arithmetic overflows).
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(timeout_ms.min(365 * 24 * 3_600_000));
    let _suspended = ctx.suspended();
    let mut cancel = ctx.cancel.subscribe();
    let cancelled = "the run was cancelled while it waited".to_string();
    loop {
        let live = rt
            .live_runs()
            .into_iter()
            .find(|(s, _)| *s == session)
            .map(|(_, r)| r);
        if let Some(run) = live {
            tokio::select! {
                _ = rt.wait(run) => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = cancel.wait_for(|c| c.is_some()) => return Err(cancelled),
            }
        }
        let status = status(rt, ctx, worker).await?;
        if tokio::time::Instant::now() >= deadline {
            return Ok(status);
        }
        // A child that went live since the look above (a restore that
        // registered its run in between) is waited on; an interrupted one
        // is being restored: wait for it to go live.
        let running = status["state"] == "running";
        if !running && status["interrupted"] != true {
            return Ok(status);
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = cancel.wait_for(|c| c.is_some()) => return Err(cancelled),
        }
    }
}

async fn cancel(rt: &Runtime, ctx: &RunCtx, worker: WorkerId) -> Result<Value, String> {
    let (session, _) = related(rt, ctx, worker, true)?;
    if let Some((_, run)) = rt.live_runs().into_iter().find(|(s, _)| *s == session) {
        match rt.cancel(run, CancelReason::External, "cancelled by its parent") {
            Ok(()) | Err(RuntimeError::UnknownRun(_)) => {}
            Err(e) => return Err(e.to_string()),
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), rt.wait(run)).await;
    }
    Ok(Value::Null)
}

fn register_peer(rt: &Runtime, ctx: &RunCtx, worker: WorkerId) -> Result<Value, String> {
    let place = place(ctx)?;
    if worker == place.worker_id {
        return Err("a worker is not its own peer".into());
    }
    let home = rt.workers();
    let parent = home
        .open_worker(place.worker_id)
        .map_err(|e| e.to_string())?;
    let mine = parent.record().map_err(|e| e.to_string())?.workspace;
    let peer = home
        .open_worker(worker)
        .and_then(|w| w.record())
        .ok()
        .filter(|r| r.workspace == mine)
        .ok_or_else(|| format!("no worker {worker} in this workspace"))?;
    update_meta(rt, place.worker_id, |meta| {
        if meta.peers.iter().any(|p| p.worker_id == worker) {
            return Ok(false);
        }
        meta.peers.push(PeerRef {
            worker_id: worker,
            session_id: peer.session_id,
        });
        Ok(true)
    })?;
    Ok(Value::Null)
}

fn peers(rt: &Runtime, ctx: &RunCtx) -> Result<Value, String> {
    let place = place(ctx)?;
    let meta = rt
        .workers()
        .open_worker(place.worker_id)
        .and_then(|w| w.metadata())
        .map_err(|e| e.to_string())?;
    Ok(json!(
        meta.peers
            .iter()
            .map(|p| json!({ "worker_id": p.worker_id, "session_id": p.session_id }))
            .collect::<Vec<_>>()
    ))
}

/// A child's loan is opened, and a restored parent's loans moved, one at a
/// time: a child restored while its parent's restore moves the scope would
/// otherwise read where the scope was, find it gone, and run without its
/// loan (or write its `worker.json` back over the moved generation).
static LOANS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The `/loan` a run of `worker` gets: its parent's scope, when this run
/// holds the loan (the child's first run, or its restore) and it has not
/// been reclaimed.
pub(crate) fn loan_for(rt: &Runtime, worker: WorkerId, run: RunId) -> Option<cap_std::fs::Dir> {
    let _moves = LOANS.lock().unwrap_or_else(|p| p.into_inner());
    let home = rt.workers();
    let child = home.open_worker(worker).ok()?;
    let mut held = None;
    child
        .update_record(|record| match record.parent.as_mut() {
            Some(p)
                if p.scope.is_some()
                    && !p.loan_reclaimed
                    && p.loan_run.is_none_or(|r| r == run) =>
            {
                let claimed = p.loan_run.replace(run).is_none();
                held = Some(p.clone());
                claimed
            }
            _ => false,
        })
        .ok()?;
    let parent = held?;
    let scope = parent.scope.clone()?;
    let artifacts = home
        .open_worker(parent.worker_id)
        .ok()?
        .path()
        .join("runs")
        .join(parent.generation.0.to_string())
        .join("artifacts");
    let artifacts =
        cap_std::fs::Dir::open_ambient_dir(&artifacts, cap_std::ambient_authority()).ok()?;
    super::loan::open_scope(&artifacts, &scope).ok()
}

/// After a run of `worker` ended with `status`: when the worker is a child,
/// end its loan (if this run held it), record the status in the parent's
/// `metadata.json`, and put a `child_notification` in the parent's journal.
pub(crate) async fn child_ended(
    rt: &Runtime,
    worker: WorkerId,
    session: &SessionId,
    run: RunId,
    status: RunStatus,
    shutdown: bool,
) {
    let home = rt.workers();
    let Ok(child) = home.open_worker(worker) else {
        return;
    };
    let mut linked = None;
    let mut reclaim = false;
    let _ = child.update_record(|record| {
        let Some(p) = record.parent.as_mut() else {
            return false;
        };
        reclaim = p.loan_run == Some(run) && !p.loan_reclaimed && !shutdown;
        p.loan_reclaimed |= reclaim;
        linked = Some(p.clone());
        reclaim
    });
    let Some(parent) = linked else {
        return;
    };
    let state = match (status, shutdown) {
        (_, true) | (RunStatus::Parked, _) => ChildStatus::Stopped,
        (RunStatus::Finished, _) => ChildStatus::Finished,
        (RunStatus::Failed, _) => ChildStatus::Failed,
        (RunStatus::Cancelled, _) => ChildStatus::Cancelled,
    };
    let _ = update_meta(rt, parent.worker_id, |meta| {
        match meta.children.iter_mut().find(|c| c.worker_id == worker) {
            Some(c) if c.status != ChildStatus::Pruned => {
                c.status = state;
                c.loan_reclaimed |= reclaim;
                Ok(true)
            }
            _ => Ok(false),
        }
    });
    let name = serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    if let Ok(journal) = rt.inner.journals.open(&parent.session_id).await {
        let _ = journal
            .append(
                None,
                Payload::Lifecycle(LifecycleEvent::ChildNotification {
                    worker_id: worker,
                    session_id: session.clone(),
                    child_run_id: run,
                    status: name,
                }),
            )
            .await;
    }
}

impl Runtime {
    /// Prune a child: stop its live run and every run below it, end its
    /// loan, mark it and its descendants `pruned` in their parents'
    /// `metadata.json`. Pruning a root stops its whole tree. The workers
    /// and their journals stay.
    pub async fn prune(&self, session: &SessionId) -> Result<(), RuntimeError> {
        let worker = self
            .inner
            .workers
            .lookup(session)?
            .ok_or_else(|| RuntimeError::UnknownSession(session.clone()))?;
        let child = self.inner.workers.open_worker(worker)?;
        let record = child.record()?;
        if record.parent.is_none() && child.metadata()?.children.is_empty() {
            return Err(RuntimeError::InvalidRequest(format!(
                "session {session} is not a child and has no children: only a child, or the root of a delegation tree, can be pruned"
            )));
        }
        // Everything below goes first, so nothing it spawns outlives it.
        self.stop_below(worker).await;
        if let Some((_, run)) = self.live_runs().into_iter().find(|(s, _)| s == session) {
            let _ = self.cancel(run, CancelReason::External, "its child was pruned");
            let _ = tokio::time::timeout(Duration::from_secs(10), self.wait(run)).await;
        }
        // A root is stopped with its tree; only a child is marked pruned.
        let Some(parent) = record.parent else {
            return Ok(());
        };
        child.update_record(|record| match record.parent.as_mut() {
            Some(p) => !std::mem::replace(&mut p.loan_reclaimed, true),
            None => false,
        })?;
        self.mark_pruned(&parent.worker_id, worker);
        Ok(())
    }

    /// A child's parent records it pruned (its loan reclaimed).
    pub(crate) fn mark_pruned(&self, parent: &WorkerId, child: WorkerId) {
        let _ = update_meta(self, *parent, |meta| {
            match meta.children.iter_mut().find(|c| c.worker_id == child) {
                Some(c) => {
                    c.status = ChildStatus::Pruned;
                    c.loan_reclaimed = true;
                    Ok(true)
                }
                None => Ok(false),
            }
        });
    }
}

/// A parent restored into generation `to` from a run of generation `from`:
/// the scopes it loaned its live children move into `to` (what they wrote
/// with them; an open `/loan` follows the rename), and the children's
/// records name `to`, so a child's later run or restore gets its loan
/// there — where the parent's replay reads it.
pub(crate) fn loans_follow(
    rt: &Runtime,
    parent: WorkerId,
    from: crate::ids::Generation,
    to: &crate::worker::GenerationDir,
) {
    let home = rt.workers();
    let Ok(worker) = home.open_worker(parent) else {
        return;
    };
    let Ok(meta) = worker.metadata() else { return };
    let loans: Vec<_> = meta
        .children
        .iter()
        .filter(|c| c.generation == from && !c.loan_reclaimed && c.status == ChildStatus::Running)
        .filter_map(|c| Some((c.worker_id, c.scope.clone()?)))
        .collect();
    if loans.is_empty() {
        return;
    }
    let old = worker
        .path()
        .join("runs")
        .join(from.0.to_string())
        .join("artifacts");
    let (Ok(old), Ok(new)) = (
        cap_std::fs::Dir::open_ambient_dir(&old, cap_std::ambient_authority()),
        super::worktrees::open_artifacts(&to.artifacts_path),
    ) else {
        return;
    };
    let mut moved = Vec::new();
    let moves = LOANS.lock().unwrap_or_else(|p| p.into_inner());
    for (child_id, scope) in loans {
        let Ok(child) = home.open_worker(child_id) else {
            continue;
        };
        // Moved and recorded under the child's record lock: a write of its
        // `worker.json` made meanwhile (its own restore's generation) never
        // puts the old generation back.
        let mut failed = None;
        let recorded = child.update_record(|record| {
            let Some(p) = record
                .parent
                .as_mut()
                .filter(|p| p.worker_id == parent && p.generation == from && !p.loan_reclaimed)
            else {
                return false;
            };
            if let Err(e) = super::loan::move_scope(&old, &new, &scope) {
                failed = Some(e);
                return false;
            }
            p.generation = to.generation;
            true
        });
        match (recorded, failed) {
            (_, Some(e)) => {
                tracing::warn!(worker = %parent, child = %child_id, "a loan stays in generation {from}: {e}");
            }
            (Ok(true), None) => moved.push(child_id),
            _ => {}
        }
    }
    drop(moves);
    let _ = update_meta(rt, parent, |meta| {
        for c in meta
            .children
            .iter_mut()
            .filter(|c| moved.contains(&c.worker_id))
        {
            c.generation = to.generation;
        }
        Ok(!moved.is_empty())
    });
}
