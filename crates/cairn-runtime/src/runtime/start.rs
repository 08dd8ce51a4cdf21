//! Starting runs: finding or making the worker
//! (a new session is staged until its first entry is durable), holding the
//! session's one run slot, and spawning the run task.

use super::*;

impl Runtime {
    /// Hold a draft session: a stable id in memory, no directory. Its first
    /// run (or [`Runtime::create_session_in`] with its id) persists it.
    pub fn create_draft(
        &self,
        id: Option<SessionId>,
        workspace: &str,
    ) -> Result<SessionId, RuntimeError> {
        let session = self.new_key(id, workspace)?;
        let mut drafts = self.inner.registry.drafts();
        if drafts.contains_key(&session) || self.inner.workers.lookup(&session)?.is_some() {
            return Err(RuntimeError::SessionExists(session.unscoped()));
        }
        drafts.insert(session.clone(), workspace.to_string());
        Ok(session)
    }

    /// The workspace of a draft, if `session` is one.
    pub fn draft_workspace(&self, session: &SessionId) -> Option<String> {
        self.inner.registry.drafts().get(session).cloned()
    }

    /// Persist a new session (and its worker) now, in the default workspace.
    pub async fn create_session(
        &self,
        id: Option<SessionId>,
    ) -> Result<(SessionId, WorkerId), RuntimeError> {
        let workspace = self.inner.config.workspace.clone();
        self.create_session_in(id, &workspace).await
    }

    /// Persist a new session (and its worker) now, in `workspace`; no
    /// component yet. Durable when it returns.
    pub async fn create_session_in(
        &self,
        id: Option<SessionId>,
        workspace: &str,
    ) -> Result<(SessionId, WorkerId), RuntimeError> {
        let (session, worker) = self.create_session_first(id, workspace).await?;
        if self.inner.file_store.is_some() {
            self.inner
                .journals
                .open(&session)
                .await?
                .commit()
                .await
                .map_err(|e| RuntimeError::from(e).for_session(&session))?;
        }
        Ok((session, worker))
    }

    /// A new session for a caller whose next write (a run's start, an
    /// import) commits it: on the file store its first entry stays
    /// pending, so the creation and that write are made durable together
    /// (one `syncfs`; within the defer delay if no write follows). Every
    /// reader of this process sees it at once.
    pub async fn create_session_first(
        &self,
        id: Option<SessionId>,
        workspace: &str,
    ) -> Result<(SessionId, WorkerId), RuntimeError> {
        let (session, worker) = self.create_session_with(id, workspace).await?;
        let id = worker.id();
        let mut made = self.inner.registry.made();
        if made.len() >= super::registry::MADE_KEPT {
            made.pop_front();
        }
        made.push_back(worker);
        Ok((session, id))
    }

    /// [`Runtime::create_session_first`], keeping the worker it opened.
    async fn create_session_with(
        &self,
        id: Option<SessionId>,
        workspace: &str,
    ) -> Result<(SessionId, WorkerDir), RuntimeError> {
        // A draft of this workspace is persisted under its own key.
        let draft = id
            .as_ref()
            .map(|id| self.scoped(id, workspace))
            .filter(|key| self.draft_workspace(key).as_deref() == Some(workspace));
        let session = match draft {
            Some(key) => key,
            None => self.new_key(id, workspace)?,
        };
        if self.inner.workers.lookup(&session)?.is_some() {
            return Err(RuntimeError::SessionExists(session.unscoped()));
        }
        self.reserve_worker(workspace)?;
        let made = self.create_reserved(session, workspace).await;
        if made.is_err() {
            self.worker_gone(workspace);
        }
        made
    }

    /// [`Runtime::create_session_with`] once the workspace's quota has room.
    async fn create_reserved(
        &self,
        session: SessionId,
        workspace: &str,
    ) -> Result<(SessionId, WorkerDir), RuntimeError> {
        // On a shared store: the session's lease first, so no other
        // instance writes it.
        self.lease_new(&session).await?;
        let window = self.crash_window();
        // On the file store the journal's first commit makes the worker
        // durable; beside a shared store it is synced step by step.
        let with_first_commit = self.inner.file_store.is_some();
        let worker = if with_first_commit {
            self.inner
                .workers
                .create_worker_unsynced(&session, None, workspace)?
        } else {
            self.inner
                .workers
                .create_worker(&session, None, workspace)?
        };
        // Staged until its first entry is durable; a failure undoes it, a
        // crash leaves it to the next owner to roll back.
        let created = async {
            let segment = worker.metadata()?.active_segment;
            if let Some(fs) = self.inner.file_store.as_ref().filter(|_| with_first_commit) {
                // Its files are open from here on, known to be empty.
                fs.adopt_created(&worker)?;
                self.inner
                    .journals
                    .create_pending(&session, segment)
                    .await?;
            } else {
                self.inner.journals.create(&session, segment).await?;
            }
            crate::fsutil::crash_point("create-before-catalog");
            // On a shared store the catalog row publishes it to every
            // instance, once its journal exists.
            self.publish_new(&worker.record()?).await?;
            crate::fsutil::crash_point("create-before-publish");
            if !with_first_commit {
                worker.publish()?;
            }
            Ok::<_, RuntimeError>(())
        }
        .await;
        if let Err(e) = created {
            self.inner.journals.close(&session);
            if let Some(fs) = &self.inner.file_store {
                fs.forget(&session);
            }
            self.inner.workers.discard_staged(&worker);
            self.release_shared(&session).await;
            return Err(e);
        }
        self.inner.registry.drafts().remove(&session);
        window.closed();
        Ok((session, worker))
    }

    pub(crate) fn open_worker_of(&self, session: &SessionId) -> Result<WorkerDir, RuntimeError> {
        let id = self
            .inner
            .workers
            .lookup(session)?
            .ok_or_else(|| RuntimeError::UnknownSession(session.clone()))?;
        Ok(self.inner.workers.open_worker(id)?)
    }

    /// Start a run. Returns once the run is held (Preparing); it goes on in
    /// its own task.
    pub async fn start(&self, mut req: StartRun) -> Result<Started, RuntimeError> {
        // A session named by its name is the workspace's session of that
        // name (or a new one's key); a key is taken as it is.
        if let Some(name) = req.session.take() {
            let workspace = req
                .workspace
                .clone()
                .unwrap_or_else(|| self.inner.config.workspace.clone());
            // A name that is its own only key (an unscoped name in the
            // host's own workspace) resolves to itself whichever way it
            // goes — found, made by another instance, or new: no lookup
            // (an index read and a worker's opening, on every chat call).
            req.session = Some(
                if name.is_scoped() || self.scoped(&name, &workspace) == name {
                    name
                } else {
                    match self.resolve_session(&workspace, &name) {
                        Ok(key) => key,
                        Err(RuntimeError::UnknownSession(_)) => {
                            match self.resolve_shared(&workspace, &name).await {
                                Some(key) => key,
                                None => self.scoped(&name, &workspace),
                            }
                        }
                        Err(e) => return Err(e),
                    }
                },
            );
        }
        // An update asked while the last run was live is taken now.
        if let Some(session) = &req.session {
            self.take_pending_update(session).await;
        }
        self.start_inner(req, None).await
    }

    pub(crate) async fn start_inner(
        &self,
        req: StartRun,
        resume: Option<(RunId, Vec<u8>)>,
    ) -> Result<Started, RuntimeError> {
        let inner = &self.inner;
        if inner.draining.load(Ordering::SeqCst) {
            return Err(RuntimeError::ShuttingDown);
        }
        let max_prompt = inner.config.host.limits.prompt_bytes;
        if req.prompt.len() as u64 > max_prompt {
            return Err(RuntimeError::TooLarge {
                size: req.prompt.len(),
                max: max_prompt as usize,
            });
        }
        // A component named by the request is checked before anything is laid out.
        let named = match &req.component {
            Some(c) => Some(self.resolve(c).await?),
            None => None,
        };
        // On a shared store, a session another instance holds is served
        // there (the HTTP layer forwards; an in-process caller is told).
        if let Some(session) = &req.session
            && let cluster::Route::Holder { holder, url } = self.route(session).await?
        {
            return Err(RuntimeError::HeldElsewhere {
                session: session.clone(),
                holder,
                url,
            });
        }
        // Find or make the worker.
        let existing = match (req.worker, &req.session) {
            (Some(w), _) => Some(w),
            (None, Some(s)) => inner.workers.lookup(s)?,
            (None, None) => None,
        };
        // A worker made for this start (here, or by the caller just before)
        // has no generation behind it, not even a fork's worktree (forks
        // are made elsewhere).
        let fresh;
        let worker = match existing {
            Some(worker_id) => {
                // One just made for this caller is taken as it was made.
                let made = {
                    let mut made = inner.registry.made();
                    made.iter()
                        .position(|w| w.id() == worker_id)
                        .and_then(|i| made.remove(i))
                };
                fresh = made.is_some();
                let worker =
                    match made {
                        Some(w) => w,
                        None => inner.workers.open_worker(worker_id).map_err(|e| {
                            match &req.session {
                                Some(s) => RuntimeError::from(e).for_session(s),
                                None => e.into(),
                            }
                        })?,
                    };
                if let Some(given) = &req.session
                    && given != worker.session_id()
                {
                    return Err(RuntimeError::SessionMismatch {
                        worker: worker_id,
                        held: worker.session_id().clone(),
                        given: given.clone(),
                    });
                }
                worker
            }
            None => {
                let workspace = req
                    .workspace
                    .clone()
                    .unwrap_or_else(|| inner.config.workspace.clone());
                fresh = true;
                self.create_session_with(req.session.clone(), &workspace)
                    .await?
                    .1
            }
        };
        let session = worker.session_id().clone();
        let record = worker
            .record()
            .map_err(|e| RuntimeError::from(e).for_session(&session))?;
        if let Some(ws) = &req.workspace
            && *ws != record.workspace
        {
            // Another workspace's session is not there for this caller.
            return Err(RuntimeError::UnknownSession(session));
        }
        let limits = inner
            .config
            .host
            .ceilings(&record.workspace)
            .with(&req.limits)?;
        if req.prompt.len() as u64 > limits.prompt_bytes {
            return Err(RuntimeError::TooLarge {
                size: req.prompt.len(),
                max: limits.prompt_bytes as usize,
            });
        }
        if record.status == WorkerStatus::Stale {
            return Err(RuntimeError::Stale(worker.id()));
        }
        let (prepared, bytes) = match (named, &record.component) {
            (Some(named), _) => named,
            (None, Some(bound)) => self.resolve(&ComponentRef::Digest(bound.clone())).await?,
            (None, None) => return Err(RuntimeError::NoComponent(session)),
        };
        match &record.component {
            Some(bound) if bound != prepared.digest() => {
                // Another component on an existing worker is an update,
                // checked by shadow replay of every ended run: switched
                // when all match, refused naming the first divergence.
                let Some(named) = &req.component else {
                    return Err(RuntimeError::ComponentMismatch {
                        worker: worker.id(),
                        bound: bound.clone(),
                        given: prepared.digest().to_string(),
                    });
                };
                self.update(
                    &session,
                    named,
                    crate::journal::event::UpdateMode::Replay,
                    false,
                )
                .await?;
            }
            Some(_) => {}
            None => {
                if let Some(bytes) = &bytes {
                    inner.bytes.put_component(prepared.digest(), bytes)?;
                    self.share_component(prepared.digest(), bytes).await;
                }
            }
        }
        // An unbound worker is bound with its generation's reservation.
        let bind = record
            .component
            .is_none()
            .then(|| prepared.digest().to_string());
        if let Some(digest) = &bind {
            // Every instance sees the binding (a takeover replays this code).
            self.bind_shared(&session, digest).await?;
        }
        if req.liveness.policy == LivenessPolicy::Park && !prepared.info().can_park {
            return Err(RuntimeError::UnsupportedPolicy {
                name: prepared.info().name.clone(),
            });
        }
        let journal = inner
            .journals
            .open(&session)
            .await
            .map_err(|e| RuntimeError::from(e).for_session(&session))?;
        let run_id = RunId::new();
        // The worktree carries over from the last generation (generation 0
        // is the worktree a fork brought along, when there is one) whose
        // reservation is durable: `worker.json` may name one past it (a
        // start whose first entries a crash or a refusal lost), whose
        // worktree no journaled run made.
        let durable_generation = journal.last_generation().await;
        let previous_generation = (!fresh).then(|| record.last_generation.min(durable_generation));
        let ctx = Arc::new(RunCtx::new(
            run_id,
            session.clone(),
            journal.clone(),
            inner.store.clone(),
            inner.broker.clone(),
            req.liveness,
            limits,
        ));
        // One live run per session: held from this moment (Preparing). A
        // run whose terminal entry is being written is waited for (briefly):
        // whoever saw its end may start the next one at once.
        let mut waited = false;
        loop {
            let finishing = {
                let mut all = inner.registry.all();
                let super::registry::Live {
                    sessions, running, ..
                } = &mut *all;
                let live = sessions.entry(session.clone()).or_default();
                if live.deleting {
                    return Err(RuntimeError::UnknownSession(session));
                }
                match live
                    .run
                    .as_ref()
                    .filter(|r| !r.ended.load(Ordering::SeqCst))
                {
                    Some(run) if run.finishing.load(Ordering::SeqCst) && !waited => {
                        Some(run.run_id)
                    }
                    Some(run) => {
                        return Err(RuntimeError::LiveRun {
                            session,
                            run: run.run_id,
                        });
                    }
                    None => {
                        // The workspace's quota of live runs, counted here,
                        // under the one lock every start takes.
                        let quota = inner.config.host.live_run_quota(&record.workspace);
                        running.retain(|s| sessions.get(s).is_some_and(|l| l.live_run().is_some()));
                        let live_runs = || {
                            running
                                .iter()
                                .filter_map(|s| sessions.get(s).and_then(|l| l.live_run()))
                                .filter(|r| r.workspace.get() == Some(&record.workspace))
                        };
                        let held = live_runs().count();
                        if held >= quota {
                            return Err(RuntimeError::Capacity(format!(
                                "workspace {:?} holds {held} live runs, its quota (live_runs = {quota}); try again when one ends",
                                record.workspace
                            )));
                        }
                        let waiting_quota = inner.config.host.quota_of(
                            &record.workspace,
                            |q| q.waiting_runs,
                            usize::MAX,
                        );
                        if waiting_quota != usize::MAX {
                            let waiting: std::collections::HashSet<_> = inner
                                .broker
                                .pending(None)
                                .into_iter()
                                .map(|p| p.run_id)
                                .collect();
                            let held = live_runs().filter(|r| waiting.contains(&r.run_id)).count();
                            if held >= waiting_quota {
                                return Err(RuntimeError::Capacity(format!(
                                    "workspace {:?} holds {held} runs waiting on a decision, its quota (waiting_runs = {waiting_quota}); answer one first",
                                    record.workspace
                                )));
                            }
                        }
                        running.insert(session.clone());
                        let live = sessions.entry(session.clone()).or_default();
                        let _ = ctx.workspace.set(record.workspace.clone());
                        ctx.set_present(live.observers.values().any(|o| o.present));
                        live.run = Some(ctx.clone());
                        None
                    }
                }
            };
            match finishing {
                Some(run) => {
                    waited = true;
                    let _ = tokio::time::timeout(Duration::from_secs(5), self.wait(run)).await;
                }
                None => break,
            }
        }
        // Entries minted before the run (an observer's attach, pending
        // with its first commit) count as before it: no flush here.
        let after = journal.minted_seq().await;
        self.index_started(run_id, &session, &record.workspace, after)
            .await;
        let worker_id = worker.id();
        let started = Started {
            run_id,
            session_id: session.clone(),
            worker_id,
            after,
            info: prepared.info().clone(),
            component: prepared.digest().to_string(),
        };
        let (durable_tx, durable_rx) = tokio::sync::oneshot::channel();
        let (resumes, checkpoint) = match resume {
            Some((r, c)) => (Some(r), Some(c)),
            None => (None, None),
        };
        let resume_on_start = req
            .resume_on_start
            .unwrap_or(inner.config.host.runs.resume_on_start);
        if resume_on_start {
            inner.resume_pending.store(true, Ordering::SeqCst);
        }
        let plan = RunPlan {
            ctx,
            worker_id,
            prepared,
            prompt: req.prompt,
            tools: req.tools,
            liveness: req.liveness,
            timeout_ms: req.timeout_ms,
            continues: req.continues,
            resumes,
            resume_on_start,
            checkpoint,
            previous_generation,
            bind,
            generation_floor: Some(durable_generation),
            replay: None,
            first_commit: req.first_commit,
            durable: Some(durable_tx),
            child: record.parent.is_some(),
        };
        self.spawn_run(worker, plan);
        // Answer only once the run's first batch is durable, so an accepted
        // run id never disappears in a crash.
        if durable_rx.await.is_err() {
            // The run ended before its first entries were written (its
            // end is retried while the store is away: not waited for long).
            match tokio::time::timeout(Duration::from_secs(2), self.wait(run_id)).await {
                Ok(Err(RuntimeError::RunLost(message))) => {
                    return Err(RuntimeError::Storage(message));
                }
                Ok(_) => {}
                Err(_) => {
                    return Err(RuntimeError::Storage(format!(
                        "the store refused run {run_id}'s first entries; its end is written once the store is back"
                    )));
                }
            }
        }
        Ok(started)
    }

    pub(crate) fn spawn_run(&self, worker: crate::worker::WorkerDir, plan: RunPlan) {
        let (done_tx, done_rx) = watch::channel(None);
        let run_id = plan.ctx.run_id;
        let session = plan.ctx.session.clone();
        self.inner.registry.runs().insert(
            run_id,
            LiveRecord {
                ctx: plan.ctx.clone(),
                done: done_rx,
            },
        );
        let rt = self.clone();
        // What the run task and its host calls report carries the run's ids.
        let span = tracing::warn_span!(
            "run",
            session_id = %session,
            run_id = %run_id,
            workspace = plan.ctx.workspace.get().map(String::as_str).unwrap_or(""),
            generation = tracing::field::Empty,
        );
        // Made out here, and boxed: the task's own future holds a pointer,
        // not the plan's parts a second time.
        let run = Box::pin(run::run_task(self.run_env(), worker, plan));
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                tracing::debug!("run started");
                rt.inner.telemetry.runs_started.inc();
                let facts = run.await;
                Box::pin(ended(rt, session, run_id, facts, done_tx)).await;
            },
            span,
        ));
    }

    /// Start a new run after `run` (which finished, with an answer or a
    /// question) in the same session; `continues` records the lineage.
    pub async fn continue_run(
        &self,
        run: RunId,
        prompt: String,
        liveness: Liveness,
    ) -> Result<Started, RuntimeError> {
        let (session, facts) = self.find_run(run).await?;
        if facts.status != RunStatus::Finished {
            return Err(RuntimeError::WrongRunState {
                run,
                state: status_name(facts.status),
                needed: "only a finished run can be continued".into(),
            });
        }
        let mut req = StartRun {
            session: Some(session),
            worker: None,
            component: None,
            prompt,
            liveness,
            timeout_ms: None,
            continues: Some(run),
            workspace: None,
            limits: Default::default(),
            tools: None,
            first_commit: FirstCommit::Now,
            resume_on_start: None,
        };
        req.component = None;
        self.start(req).await
    }

    /// Start a NEW run in the same session that receives `run`'s park
    /// checkpoint.
    pub async fn resume(
        &self,
        run: RunId,
        liveness: Option<Liveness>,
    ) -> Result<Started, RuntimeError> {
        let (session, facts) = self.find_run(run).await?;
        let Some(key) = facts
            .checkpoint
            .clone()
            .filter(|_| facts.status == RunStatus::Parked)
        else {
            return Err(RuntimeError::WrongRunState {
                run,
                state: status_name(facts.status),
                needed: "only a parked run can be resumed".into(),
            });
        };
        let checkpoint = self.inner.store.checkpoint(&session, &key).await?;
        // The resumed run keeps the parked one's `resume_on_start`.
        let mut inherited = false;
        self.scan(&session, self.run_after(run).await, |item| {
            if let Some(e) = item.event()
                && e.run_id == Some(run)
                && let crate::journal::event::Payload::Lifecycle(
                    crate::journal::event::LifecycleEvent::Started {
                        resume_on_start, ..
                    },
                ) = &e.payload
            {
                inherited = *resume_on_start;
                return false;
            }
            true
        })
        .await?;
        let req = StartRun {
            session: Some(session),
            worker: None,
            component: None,
            prompt: String::new(),
            liveness: liveness.unwrap_or(Liveness {
                policy: LivenessPolicy::Continue,
                grace_ms: 0,
            }),
            timeout_ms: None,
            continues: None,
            workspace: None,
            limits: Default::default(),
            tools: None,
            first_commit: FirstCommit::Now,
            resume_on_start: Some(inherited),
        };
        self.start_inner(req, Some((run, checkpoint))).await
    }
}

/// A run task's end, once its facts are in: the run indexed and out of its
/// session, whoever waits told, and after the retention window its record
/// gone (in a future of its own: the run task does not carry it while the
/// controller runs).
async fn ended(
    rt: Runtime,
    session: SessionId,
    run_id: RunId,
    facts: Result<RunFacts, String>,
    done_tx: watch::Sender<Option<Result<RunFacts, String>>>,
) {
    match &facts {
        Ok(f) => tracing::debug!(
            status = status_name(f.status),
            last_seq = f.last_seq.0,
            "run ended"
        ),
        Err(e) => tracing::warn!(error = %e, "run ended without its facts"),
    }
    // Counted as its end was written (`Supervisor::run_counted`).
    if let Ok(f) = &facts {
        rt.index_ended(f).await;
    }
    {
        let mut sessions = rt.inner.registry.sessions();
        if let Some(live) = sessions.get_mut(&session) {
            if live.run.as_ref().is_some_and(|r| r.run_id == run_id) {
                live.run = None;
            }
            if let Some(g) = live.grace.take() {
                g.abort();
            }
        }
    }
    let _ = done_tx.send(Some(facts));
    // Ended runs stay readable here for the retention window.
    let retention = rt.inner.config.retention;
    let weak = Arc::downgrade(&rt.inner);
    drop(rt);
    tokio::time::sleep(retention).await;
    if let Some(inner) = weak.upgrade() {
        inner.registry.runs().remove(&run_id);
        // It retires: said in its journal (while this host may
        // still write there).
        let rt = Runtime { inner };
        if !rt.inner.draining.load(Ordering::SeqCst)
            && let Ok(journal) = rt.inner.journals.open(&session).await
        {
            let _ = journal
                .append(
                    Some(run_id),
                    Payload::Lifecycle(LifecycleEvent::RunRetired {
                        after_ms: retention.as_millis() as u64,
                    }),
                )
                .await;
        }
        // The session's live window goes too, once nothing uses it.
        rt.inner.journals.close_if_idle(&session);
    }
}
