//! The A2A methods, each a runtime call and a projection of the journal.

use super::task::{TaskState, TaskView};
use super::{Agent, RpcError, code, success};
use crate::AppState;
use crate::auth::{Workspace, find_own, own_run, own_session};
use axum::Json;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use cairn_runtime::ids::{RunId, Seq, SessionId};
use cairn_runtime::journal::Delivery;
use cairn_runtime::journal::event::{CancelReason, Liveness, LivenessPolicy, Payload};
use cairn_runtime::runtime::{AttachSpec, ComponentRef, Observation, RuntimeError, StartRun};
use futures_util::stream;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::time::Duration;

/// One call: the server, the caller's workspace, the agent, the request id.
pub struct Call {
    pub s: AppState,
    pub ws: Workspace,
    pub agent: Agent,
    pub id: Value,
}

/// Where a send left things: the run the reply follows, its session, the
/// task as of `after`, and the seq the stream continues from.
struct Begun {
    session: SessionId,
    view: TaskView,
    after: Seq,
    /// The task's hold on its run's claim, when this call started the run:
    /// done once the claim is let go (after the run's end).
    claim: Option<tokio::task::JoinHandle<()>>,
}

/// How a stream of a task ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Until {
    /// At the end or when it waits on input (a send).
    Interrupted,
    /// At the run's end (a subscribe).
    Ended,
}

fn message_parts(msg: &Value) -> Result<(String, Option<Value>), RpcError> {
    let parts = msg
        .get("parts")
        .and_then(Value::as_array)
        .ok_or_else(|| RpcError::params("message.parts must be a list of parts"))?;
    let text: Vec<&str> = parts
        .iter()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    let data = parts.iter().find_map(|p| p.get("data")).cloned();
    if text.is_empty() && data.is_none() {
        return Err(RpcError::params(
            "the message has no text or data part (file parts are not understood)",
        ));
    }
    Ok((text.join("\n"), data))
}

fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn run_param(params: &Value) -> Result<RunId, RpcError> {
    let id = str_field(params, "id").ok_or_else(|| RpcError::params("params.id names no task"))?;
    id.parse::<RunId>()
        .map_err(|_| RpcError::new(code::TASK_NOT_FOUND, format!("no task {id:?}")))
}

impl Call {
    fn rt(&self) -> &cairn_runtime::runtime::Runtime {
        &self.s.rt
    }

    async fn session_of(&self, run: RunId) -> Result<SessionId, RpcError> {
        own_run(&self.s, &self.ws, run)
            .await
            .map_err(|_| RpcError::new(code::TASK_NOT_FOUND, format!("no task {run}")))
    }

    /// The task as the journal holds it, through `through` (all: `None`).
    async fn view(
        &self,
        run: RunId,
        session: &SessionId,
        through: Option<Seq>,
    ) -> Result<TaskView, RpcError> {
        // From where the run's entries begin, a bounded page at a time,
        // until its end: a task's view never holds the session's journal.
        let rt = self.rt();
        let mut view = TaskView::new(run, session.clone());
        rt.scan(session, rt.run_after(run).await, |item| {
            let Some(e) = item.event() else { return true };
            if through.is_some_and(|t| e.seq > t) {
                return false;
            }
            view.apply(e);
            !view.ended()
        })
        .await?;
        Ok(view)
    }

    /// The task for a run of this agent, or not found.
    async fn task_of(&self, run: RunId) -> Result<(SessionId, TaskView), RpcError> {
        let session = self.session_of(run).await?;
        let view = self.view(run, &session, None).await?;
        if view.component() != Some(self.agent.digest.as_str()) {
            return Err(RpcError::new(
                code::TASK_NOT_FOUND,
                format!("no task {run} of agent {}", self.agent.name),
            ));
        }
        Ok((session, view))
    }

    /// Start a run on `session` claimed by its task: the claim is held
    /// until the run ends, whoever reads its stream.
    async fn start_claimed(
        &self,
        session: &SessionId,
        prompt: String,
        continues: Option<RunId>,
    ) -> Result<Begun, RpcError> {
        let rt = self.rt();
        let after = rt.minted_seq(session).await?;
        let spec = AttachSpec {
            role: cairn_runtime::journal::event::ObserverRole::Claiming,
            present: false,
            after,
            takeover: false,
        };
        let claim = rt.attach(session, spec).await?;
        let started = rt
            .start(StartRun {
                session: Some(session.clone()),
                worker: None,
                component: Some(ComponentRef::Digest(self.agent.digest.clone())),
                prompt,
                liveness: Liveness {
                    policy: LivenessPolicy::Continue,
                    grace_ms: 0,
                },
                timeout_ms: None,
                continues,
                workspace: Some(self.ws.0.clone()),
                limits: Default::default(),
                tools: None,
                first_commit: cairn_runtime::runtime::FirstCommit::Now,
                resume_on_start: None,
            })
            .await?;
        let claim = tokio::spawn(hold(claim, started.run_id));
        Ok(Begun {
            session: session.clone(),
            view: TaskView::new(started.run_id, session.clone()),
            after,
            claim: Some(claim),
        })
    }

    /// A message: a reply on a task (`taskId`), or a new task in a session
    /// (`contextId`) or in a new session.
    async fn begin(&self, params: &Value) -> Result<Begun, RpcError> {
        let msg = params
            .get("message")
            .filter(|m| m.is_object())
            .ok_or_else(|| RpcError::params("params.message is required"))?;
        let (text, data) = message_parts(msg)?;
        let context = str_field(msg, "contextId");
        if let Some(task) = str_field(msg, "taskId") {
            let run = task
                .parse::<RunId>()
                .map_err(|_| RpcError::new(code::TASK_NOT_FOUND, format!("no task {task:?}")))?;
            let (session, _) = self.task_of(run).await?;
            if context.is_some_and(|c| c != session.name()) {
                return Err(RpcError::params(format!(
                    "task {run} belongs to context {session}, not {}",
                    context.unwrap_or_default()
                )));
            }
            return self.reply(run, session, text, data).await;
        }
        let rt = self.rt();
        let session = match context {
            Some(c) => {
                let id = SessionId::parse(c).map_err(|e| RpcError::params(e.to_string()))?;
                match find_own(&self.s, &self.ws, &id)? {
                    Some(key) => key,
                    None => rt.create_session_first(Some(id), &self.ws.0).await?.0,
                }
            }
            None => rt.create_session_first(None, &self.ws.0).await?.0,
        };
        let prompt = match (text.is_empty(), data) {
            (false, _) | (true, None) => text,
            (true, Some(d)) => d.to_string(),
        };
        self.start_claimed(&session, prompt, None).await
    }

    /// A reply on a task: the answer to its pending decision, or, after a
    /// question, a new run that continues it.
    async fn reply(
        &self,
        run: RunId,
        session: SessionId,
        text: String,
        data: Option<Value>,
    ) -> Result<Begun, RpcError> {
        let rt = self.rt();
        let after = rt.last_seq(&session).await?;
        let view = self.view(run, &session, Some(after)).await?;
        match view.state() {
            TaskState::InputRequired if !view.pending().is_empty() => {
                let decision = view.pending()[0].parse().map_err(|_| {
                    RpcError::new(code::INTERNAL, "a pending decision id is not valid")
                })?;
                let value = data.unwrap_or(Value::String(text));
                rt.decide(&decision, value).await.map_err(|e| match e {
                    RuntimeError::Decide(cairn_runtime::runtime::DecideError::NotPending(_)) => {
                        RpcError::new(
                            code::UNSUPPORTED_OPERATION,
                            format!("task {run} waits on no decision this server holds now"),
                        )
                    }
                    other => other.into(),
                })?;
                Ok(Begun {
                    session,
                    view,
                    after,
                    claim: None,
                })
            }
            TaskState::InputRequired if view.ended() && !is_parked(rt, run).await => {
                let prompt = match (text.is_empty(), data) {
                    (false, _) | (true, None) => text,
                    (true, Some(d)) => d.to_string(),
                };
                self.start_claimed(&session, prompt, Some(run)).await
            }
            TaskState::InputRequired => Err(RpcError::new(
                code::UNSUPPORTED_OPERATION,
                format!("task {run} is parked: resume it with POST /v1/runs/{run}/resume"),
            )),
            state if state.terminal() => Err(RpcError::new(
                code::UNSUPPORTED_OPERATION,
                format!(
                    "task {run} is {}: send a message without taskId (contextId {session}) to start a new one",
                    state.wire()
                ),
            )),
            _ => Err(RpcError::new(
                code::UNSUPPORTED_OPERATION,
                format!("task {run} is working: it takes a message only while input-required"),
            )),
        }
    }

    /// `SendMessage`: the task once it completes or waits on input (at
    /// once with `configuration.returnImmediately`).
    pub async fn send(self, params: Value) -> Result<Response, RpcError> {
        let begun = self.begin(&params).await?;
        let config = params.get("configuration").cloned().unwrap_or_default();
        let history = config.get("historyLength").and_then(Value::as_u64);
        let mut view = begun.view;
        if config.get("returnImmediately") != Some(&json!(true)) {
            let mut sub = self.rt().subscribe(&begun.session, begun.after).await?;
            loop {
                match sub.next().await {
                    Some(Ok(Delivery::Event(e))) => {
                        if !view.apply(&e).is_empty() && view.state().interrupted() {
                            break;
                        }
                    }
                    Some(Ok(Delivery::Gap { resumed_at })) => {
                        let through = Seq(resumed_at.0.saturating_sub(1));
                        view = self
                            .view(view_run(&view), &begun.session, Some(through))
                            .await?;
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(RpcError::new(code::INTERNAL, e.to_string())),
                    None => break,
                }
            }
        }
        // A task answered as ended has let go of its run's claim first: the
        // client's next message on the context must not find it held.
        if (view.state().terminal() || view.ended())
            && let Some(claim) = begun.claim
        {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), claim).await;
        }
        let body = success(
            &self.id,
            json!({ "task": view.task(history.map(|h| h as usize)) }),
        );
        Ok(Json(body).into_response())
    }

    /// `SendStreamingMessage`: the task, then its updates until it
    /// completes or waits on input.
    pub async fn send_streaming(self, params: Value) -> Result<Response, RpcError> {
        let begun = self.begin(&params).await?;
        // The client's stream is its own collecting observer; the task holds
        // the claim.
        let obs = self
            .rt()
            .attach(&begun.session, AttachSpec::collecting(begun.after))
            .await?;
        self.stream(begun, obs, Until::Interrupted)
    }

    /// `SubscribeToTask`: a collecting observer from the run's `Started`:
    /// the task as it was submitted, then every update, until the run ends.
    pub async fn subscribe(self, params: Value) -> Result<Response, RpcError> {
        let run = run_param(&params)?;
        let (session, view) = self.task_of(run).await?;
        if view.state().terminal() {
            return Err(RpcError::new(
                code::UNSUPPORTED_OPERATION,
                format!(
                    "task {run} is {}: there is nothing to follow",
                    view.state().wire()
                ),
            ));
        }
        let rt = self.rt();
        let mut first = None;
        rt.scan(&session, rt.run_after(run).await, |item| {
            first = item
                .event()
                .filter(|e| e.run_id == Some(run))
                .map(|e| e.seq);
            first.is_none()
        })
        .await?;
        let after = Seq(first.unwrap_or(Seq(1)).0.saturating_sub(1));
        let obs = self
            .rt()
            .attach(&session, AttachSpec::collecting(after))
            .await?;
        let begun = Begun {
            view: TaskView::new(run, session.clone()),
            session,
            after,
            claim: None,
        };
        self.stream(begun, obs, Until::Ended)
    }

    fn stream(self, begun: Begun, source: Observation, until: Until) -> Result<Response, RpcError> {
        let s = self.s.clone();
        let slot = s
            .streams
            .take(&s.rt.host_config().server, &self.ws.0, Some(&begun.session))?;
        let id = self.id.clone();
        let first = success(&id, json!({ "task": begun.view.task(None) }));
        let state = (Some(source), begun.view, self, Some(first), begun.claim);
        let frames = stream::unfold(
            state,
            move |(source, mut view, call, first, mut claim)| async move {
                let data = |v: &Value| Event::default().data(v.to_string());
                if let Some(first) = first {
                    return Some((vec![data(&first)], (source, view, call, None, claim)));
                }
                let mut source = source?;
                loop {
                    let e = match source.next().await {
                        Some(Ok(Delivery::Event(e))) => e,
                        Some(Ok(Delivery::Gap { resumed_at })) => {
                            // Missed entries: the task as the journal has it.
                            let through = Seq(resumed_at.0.saturating_sub(1));
                            let session = view_session(&view);
                            view = call
                                .view(view_run(&view), &session, Some(through))
                                .await
                                .ok()?;
                            let snapshot = success(&call.id, json!({ "task": view.task(None) }));
                            return Some((
                                vec![data(&snapshot)],
                                (Some(source), view, call, None, claim),
                            ));
                        }
                        Some(Ok(_)) => continue,
                        _ => return None,
                    };
                    let updates = view.apply(&e);
                    if updates.is_empty() {
                        continue;
                    }
                    let frames: Vec<Event> = updates
                        .iter()
                        .map(|u| data(&success(&call.id, u.clone())))
                        .collect();
                    let done = match until {
                        Until::Interrupted => view.state().interrupted(),
                        Until::Ended => view.ended(),
                    };
                    // The run's end is the stream's last word only once the
                    // task has let go of its claim (the client's next message
                    // on the context must not find it held).
                    if view.ended()
                        && let Some(held) = claim.take()
                    {
                        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), held).await;
                    }
                    let next = if done { None } else { Some(source) };
                    return Some((frames, (next, view, call, None, claim)));
                }
            },
        );
        let flat = futures_util::StreamExt::flat_map(frames, |events| {
            stream::iter(events.into_iter().map(Ok::<_, Infallible>))
        });
        let sse = Sse::new(crate::streams::holding(flat, slot))
            .keep_alive(KeepAlive::new().interval(crate::events::KEEP_ALIVE));
        Ok(sse.into_response())
    }

    /// `GetTask`.
    pub async fn get(self, params: Value) -> Result<Response, RpcError> {
        let run = run_param(&params)?;
        let history = params.get("historyLength").and_then(Value::as_u64);
        let (_, view) = self.task_of(run).await?;
        let body = success(&self.id, view.task(history.map(|h| h as usize)));
        Ok(Json(body).into_response())
    }

    /// `ListTasks`: this agent's tasks in the caller's workspace (of one
    /// context with `contextId`), newest first, filtered by `status`, then
    /// paged (`pageSize`, `pageToken` = the last task of the page before;
    /// `totalSize` counts every task that matches).
    pub async fn list(self, params: Value) -> Result<Response, RpcError> {
        let size = params
            .get("pageSize")
            .and_then(Value::as_u64)
            .unwrap_or(50)
            .clamp(1, 100) as usize;
        let status = match params.get("status") {
            None | Some(Value::Null) => None,
            Some(v) => match TaskState::parse(v) {
                Some(s) => Some(s),
                None if v == "TASK_STATE_UNSPECIFIED" || v == 0 => None,
                None => return Err(RpcError::params(format!("no task state {v}"))),
            },
        };
        let history = params.get("historyLength").and_then(Value::as_u64);
        let artifacts = params.get("includeArtifacts") == Some(&json!(true));
        let rt = self.rt();
        // Every run of the context (or of the workspace), newest first;
        // filtered before it is paged, so a page is full and the token
        // goes on exactly where it stopped.
        let runs: Vec<_> = match str_field(&params, "contextId") {
            Some(c) => {
                let session = own_session(
                    &self.s,
                    &self.ws,
                    &SessionId::parse(c).map_err(|e| RpcError::params(e.to_string()))?,
                )?;
                let mut runs: Vec<_> = rt
                    .session_runs(&session)
                    .await?
                    .into_iter()
                    .map(|r| (r.run_id, r.session_id))
                    .collect();
                runs.reverse();
                runs
            }
            None => {
                let mut all = Vec::new();
                let mut cursor: Option<String> = None;
                loop {
                    let page = rt
                        .runs_page(Some(&self.ws.0), cursor.as_deref(), 1000)
                        .await?;
                    all.extend(page.items.into_iter().map(|r| (r.run_id, r.session_id)));
                    match page.next_cursor {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
                all
            }
        };
        let mut matching = Vec::new();
        for (run, session) in runs {
            let view = self.view(run, &session, None).await?;
            if view.component() == Some(self.agent.digest.as_str())
                && status.is_none_or(|s| s == view.state())
            {
                matching.push((run, view));
            }
        }
        let start = match str_field(&params, "pageToken").filter(|t| !t.is_empty()) {
            None => 0,
            Some(token) => {
                matching
                    .iter()
                    .position(|(run, _)| run.to_string() == token)
                    .ok_or_else(|| {
                        RpcError::params(format!(
                            "pageToken {token:?} names no task of this list (take it from the last page's nextPageToken)"
                        ))
                    })?
                    + 1
            }
        };
        let total = matching.len();
        let page: Vec<_> = matching.into_iter().skip(start).take(size).collect();
        let next = match start + page.len() < total {
            true => page.last().map(|(run, _)| run.to_string()),
            false => None,
        };
        let tasks: Vec<Value> = page
            .into_iter()
            .map(|(_, view)| {
                let mut task = view.task(history.map(|h| h as usize));
                if !artifacts {
                    task.as_object_mut().map(|t| t.remove("artifacts"));
                }
                task
            })
            .collect();
        let body = success(
            &self.id,
            json!({
                "tasks": tasks,
                "nextPageToken": next.unwrap_or_default(),
                "pageSize": size,
                "totalSize": total,
            }),
        );
        Ok(Json(body).into_response())
    }

    /// `CancelTask`: cancel the live run, then answer with the task as it
    /// ended.
    pub async fn cancel(self, params: Value) -> Result<Response, RpcError> {
        let run = run_param(&params)?;
        let (session, view) = self.task_of(run).await?;
        let not_cancelable = || {
            RpcError::new(
                code::TASK_NOT_CANCELABLE,
                format!(
                    "task {run} is {} and cannot be canceled",
                    view.state().wire()
                ),
            )
        };
        if view.ended() {
            return Err(not_cancelable());
        }
        match self
            .rt()
            .cancel(run, CancelReason::External, "cancelled through A2A")
        {
            Ok(()) => {}
            Err(RuntimeError::UnknownRun(_) | RuntimeError::WrongRunState { .. }) => {
                return Err(not_cancelable());
            }
            Err(e) => return Err(e.into()),
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), self.rt().wait(run)).await;
        let view = self.view(run, &session, None).await?;
        Ok(Json(success(&self.id, view.task(None))).into_response())
    }
}

fn view_run(view: &TaskView) -> RunId {
    view.run()
}

fn view_session(view: &TaskView) -> SessionId {
    view.session().clone()
}

async fn is_parked(rt: &cairn_runtime::runtime::Runtime, run: RunId) -> bool {
    rt.find_run(run)
        .await
        .is_ok_and(|(_, f)| f.status == cairn_runtime::journal::event::RunStatus::Parked)
}

/// The task's claim on its run, held until the run ends.
async fn hold(mut claim: Observation, run: RunId) {
    while let Some(d) = claim.next().await {
        let Ok(Delivery::Event(e)) = d else { continue };
        if e.run_id == Some(run) && matches!(&e.payload, Payload::Lifecycle(l) if l.is_terminal()) {
            break;
        }
    }
    claim.detach().await;
}
