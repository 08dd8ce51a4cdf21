//! The runtime: transitions and their journal entries, observers and claims,
//! liveness, decisions, cancel, park and resume, state, sockets, shutdown.

use crate::common::*;
use cairn_runtime::journal::Delivery;
use cairn_runtime::journal::event::{
    ApprovalRoute, CancelReason, DecidedBy, DetachCause, LifecycleEvent, Liveness, LivenessPolicy,
    ObserverRole, RunStatus,
};
use cairn_runtime::runtime::state::{AgentState, BlockReason};
use cairn_runtime::runtime::{AttachSpec, ComponentRef, Runtime, RuntimeError, StartRun};
use cairn_runtime::{Payload, RunId, Seq, SessionEvent, SessionId};
use std::time::Duration;

pub fn kind(e: &SessionEvent) -> String {
    serde_json::to_value(&e.payload).unwrap()["event"]["type"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Read deliveries until one satisfies `pred`; everything seen on the way.
pub async fn until(
    sub: &mut cairn_runtime::journal::Subscription,
    pred: impl Fn(&SessionEvent) -> bool,
) -> Vec<SessionEvent> {
    let mut seen = Vec::new();
    loop {
        let d = tokio::time::timeout(Duration::from_secs(30), sub.next())
            .await
            .expect("the expected event arrives")
            .expect("journal open")
            .expect("no store error");
        if let Delivery::Event(e) = d {
            seen.push((*e).clone());
            if pred(&e) {
                return seen;
            }
        }
    }
}

fn liveness(policy: LivenessPolicy, grace_ms: u64) -> Liveness {
    Liveness { policy, grace_ms }
}

fn counter(prompt: &str) -> StartRun {
    StartRun::new(ComponentRef::Path(fixture("counter")), prompt)
}

async fn session(rt: &Runtime) -> SessionId {
    rt.create_session(None).await.unwrap().0
}

fn is_terminal(e: &SessionEvent) -> bool {
    e.facts.is_some()
}

fn decision_of(e: &SessionEvent) -> Option<cairn_runtime::DecisionId> {
    match &e.payload {
        Payload::Lifecycle(LifecycleEvent::DecisionRequested { decision_id, .. }) => {
            Some(decision_id.clone())
        }
        _ => None,
    }
}

#[tokio::test]
async fn each_transition_writes_its_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let s = session(&rt).await;
    let mut sub = rt.subscribe(&s, Seq(0)).await.unwrap();
    let observer = rt
        .attach(&s, AttachSpec::claiming_present(Seq(0)))
        .await
        .unwrap();
    let mut req = counter("4 2");
    req.session = Some(s.clone());
    req.liveness = liveness(LivenessPolicy::Cancel, 0);
    let started = rt.start(req).await.unwrap();
    let seen = until(&mut sub, |e| decision_of(e).is_some()).await;
    let id = decision_of(seen.last().unwrap()).unwrap();
    rt.decide(&id, serde_json::json!({"approved": true}))
        .await
        .unwrap();
    let rest = until(&mut sub, is_terminal).await;
    let kinds: Vec<String> = seen.iter().chain(&rest).map(kind).collect();
    assert_eq!(
        kinds,
        [
            "segment_created",
            "observer_attached",
            "generation_reserved",
            "started",
            "custom",
            "text_delta",
            "text_delta",
            "decision_requested",
            "approval_routed",
            "decision_recorded",
            "text_delta",
            "text_delta",
            "finished"
        ]
    );
    let routed = &seen
        .iter()
        .chain(&rest)
        .find(|e| kind(e) == "approval_routed")
        .unwrap()
        .payload;
    assert!(matches!(
        routed,
        Payload::Lifecycle(LifecycleEvent::ApprovalRouted {
            route: ApprovalRoute::Conversational,
            ..
        })
    ));
    let facts = rt.wait(started.run_id).await.unwrap();
    assert_eq!(facts.status, RunStatus::Finished);
    assert_eq!(facts.first_seq, Seq(3));
    // Run events carry the run id; observer events belong to the session.
    assert!(rest.iter().all(|e| e.run_id == Some(started.run_id)));
    assert_eq!(seen[1].run_id, None);
    // Detaching after the run: released, no claims exhausted (no live run).
    observer.detach().await;
    let tail = until(&mut sub, |e| kind(e) == "observer_detached").await;
    assert!(matches!(
        &tail.last().unwrap().payload,
        Payload::Lifecycle(LifecycleEvent::ObserverDetached {
            because: DetachCause::Released,
            ..
        })
    ));
    assert!(
        tokio::time::timeout(Duration::from_millis(100), sub.next())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_second_claim_is_refused_or_takes_over() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let s = session(&rt).await;
    let first = rt
        .attach(&s, AttachSpec::claiming_present(Seq(0)))
        .await
        .unwrap();
    let err = rt
        .attach(&s, AttachSpec::claiming_present(Seq(0)))
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::ClaimHeld { .. }), "{err}");
    assert!(err.to_string().contains(&first.observer().id), "{err}");
    let mut spec = AttachSpec::claiming_present(Seq(0));
    spec.takeover = true;
    let second = rt.attach(&s, spec).await.unwrap();
    assert_eq!(rt.observer_counts(&s), (0, 1, 1));
    // Observer entries are committed with the next write or within the
    // commit delay; last_seq waits for what is pending.
    rt.last_seq(&s).await.unwrap();
    let events: Vec<SessionEvent> = rt
        .read(&s, Seq(0))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|i| i.event().cloned())
        .collect();
    let last_two: Vec<String> = events[events.len() - 2..].iter().map(kind).collect();
    assert_eq!(last_two, ["observer_detached", "observer_attached"]);
    assert!(matches!(
        &events[events.len() - 2].payload,
        Payload::Lifecycle(LifecycleEvent::ObserverDetached { because: DetachCause::Displaced, observer }) if observer.id == first.observer().id
    ));
    // The displaced guard's drop does not journal a second detach.
    drop(first);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(rt.last_seq(&s).await.unwrap(), events.last().unwrap().seq);
    // Collectors are unlimited and never claim.
    let _c1 = rt.attach(&s, AttachSpec::collecting(Seq(0))).await.unwrap();
    let _c2 = rt.attach(&s, AttachSpec::collecting(Seq(0))).await.unwrap();
    assert_eq!(rt.observer_counts(&s), (2, 1, 1));
    drop(second);
}

async fn waiting_run(
    rt: &Runtime,
    policy: Liveness,
    prompt: &str,
) -> (
    SessionId,
    RunId,
    cairn_runtime::journal::Subscription,
    cairn_runtime::runtime::Observation,
) {
    let s = session(rt).await;
    let sub = rt.subscribe(&s, Seq(0)).await.unwrap();
    let obs = rt
        .attach(&s, AttachSpec::claiming_present(Seq(0)))
        .await
        .unwrap();
    let mut req = counter(prompt);
    req.session = Some(s.clone());
    req.liveness = policy;
    let started = rt.start(req).await.unwrap();
    let mut sub = sub;
    until(&mut sub, |e| kind(e) == "approval_routed").await;
    (s, started.run_id, sub, obs)
}

#[tokio::test]
async fn cancel_policy_on_detach_cancels_unclaimed() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let (_, run, mut sub, obs) = waiting_run(&rt, liveness(LivenessPolicy::Cancel, 0), "4 2").await;
    drop(obs);
    let seen = until(&mut sub, is_terminal).await;
    let kinds: Vec<String> = seen.iter().map(kind).collect();
    assert_eq!(
        kinds,
        [
            "observer_detached",
            "claims_exhausted",
            "liveness_decided",
            "cancelled"
        ]
    );
    assert!(matches!(
        &seen[3].payload,
        Payload::Lifecycle(LifecycleEvent::Cancelled {
            reason: CancelReason::Unclaimed,
            ..
        })
    ));
    assert_eq!(rt.wait(run).await.unwrap().status, RunStatus::Cancelled);
}

#[tokio::test]
async fn a_claimant_back_within_the_grace_window_keeps_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let (s, run, mut sub, obs) =
        waiting_run(&rt, liveness(LivenessPolicy::Cancel, 400), "4 2").await;
    drop(obs);
    until(&mut sub, |e| kind(e) == "claims_exhausted").await;
    let back = rt
        .attach(&s, AttachSpec::claiming_present(Seq(0)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    // No liveness decision: the run still waits, and it is Blocked on approval.
    let summary = rt.summary(&s).await.unwrap();
    assert_eq!(
        summary.state,
        AgentState::Blocked {
            on: BlockReason::Approval
        }
    );
    assert_eq!(summary.live_run, Some(run));
    let id = rt.pending_decisions(Some(&s))[0].decision_id.clone();
    rt.decide(&id, serde_json::json!({"approved": true}))
        .await
        .unwrap();
    let seen = until(&mut sub, is_terminal).await;
    assert!(
        !seen.iter().any(|e| kind(e) == "liveness_decided"),
        "{:?}",
        seen.iter().map(kind).collect::<Vec<_>>()
    );
    assert_eq!(rt.wait(run).await.unwrap().status, RunStatus::Finished);
    // The claim outlives the run: the same observer claims the next run.
    assert_eq!(rt.observer_counts(&s), (0, 1, 1));
    drop(back);
    // Now nobody comes back: after the grace, the policy applies.
    let (_, run, mut sub, obs) =
        waiting_run(&rt, liveness(LivenessPolicy::Cancel, 100), "4 2").await;
    drop(obs);
    let seen = until(&mut sub, is_terminal).await;
    assert_eq!(
        seen.iter().map(kind).collect::<Vec<_>>(),
        [
            "observer_detached",
            "claims_exhausted",
            "liveness_decided",
            "cancelled"
        ]
    );
    assert_eq!(rt.wait(run).await.unwrap().status, RunStatus::Cancelled);
}

#[tokio::test]
async fn continue_policy_on_detach_lets_the_run_finish() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let (s, run, mut sub, obs) =
        waiting_run(&rt, liveness(LivenessPolicy::Continue, 0), "4 2").await;
    drop(obs);
    until(&mut sub, |e| kind(e) == "liveness_decided").await;
    let id = rt.pending_decisions(Some(&s))[0].decision_id.clone();
    rt.decide(&id, serde_json::json!({"approved": true}))
        .await
        .unwrap();
    until(&mut sub, is_terminal).await;
    assert_eq!(rt.wait(run).await.unwrap().status, RunStatus::Finished);
}

#[tokio::test]
async fn park_policy_parks_and_resume_starts_a_new_run_from_the_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let (s, run, mut sub, obs) = waiting_run(&rt, liveness(LivenessPolicy::Park, 0), "6 2").await;
    drop(obs);
    let seen = until(&mut sub, is_terminal).await;
    assert_eq!(
        seen.iter().map(kind).collect::<Vec<_>>(),
        [
            "observer_detached",
            "claims_exhausted",
            "liveness_decided",
            "approval_routed",
            "parked"
        ]
    );
    let facts = rt.wait(run).await.unwrap();
    assert_eq!(facts.status, RunStatus::Parked);
    assert_eq!(rt.summary(&s).await.unwrap().state, AgentState::Parked);
    let key = facts.checkpoint.clone().unwrap();
    assert!(!key.contains('/'));
    let checkpoint = tmp
        .path()
        .join("home/workers")
        .join(rt.summary(&s).await.unwrap().worker_id.to_string())
        .join(format!("session/checkpoints/{key}.bin"));
    assert_eq!(std::fs::read(&checkpoint).unwrap(), b"3 6 2");
    // Resume: a NEW run in the same session, from the checkpoint.
    let resumed = rt.resume(run, None).await.unwrap();
    assert_ne!(resumed.run_id, run);
    assert_eq!(resumed.session_id, s);
    let mut texts = Vec::new();
    loop {
        let seen = until(&mut sub, |e| is_terminal(e) || decision_of(e).is_some()).await;
        for e in &seen {
            if let Payload::Agent(cairn_runtime::AgentEvent::TextDelta { text, .. }) = &e.payload {
                texts.push(text.clone());
            }
            if let Payload::Lifecycle(LifecycleEvent::Started { resumes, .. }) = &e.payload {
                assert_eq!(*resumes, Some(run));
            }
        }
        let last = seen.last().unwrap();
        if let Some(id) = decision_of(last) {
            rt.decide(&id, serde_json::json!({"approved": true}))
                .await
                .unwrap();
        } else {
            break;
        }
    }
    assert_eq!(texts, ["3", "4", "5", "6"]);
    let facts = rt.wait(resumed.run_id).await.unwrap();
    assert_eq!(
        (facts.status, facts.resumes),
        (RunStatus::Finished, Some(run))
    );
    // A finished run cannot be resumed; it can be continued.
    let err = rt.resume(resumed.run_id, None).await.unwrap_err();
    assert!(
        err.to_string().contains("only a parked run can be resumed"),
        "{err}"
    );
    let next = rt
        .continue_run(
            resumed.run_id,
            "2 0".into(),
            liveness(LivenessPolicy::Continue, 0),
        )
        .await
        .unwrap();
    let facts = rt.wait(next.run_id).await.unwrap();
    assert_eq!(
        (facts.status, facts.continues),
        (RunStatus::Finished, Some(resumed.run_id))
    );
}

#[tokio::test]
async fn nobody_present_under_park_parks_at_the_request() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let mut req = counter("4 2");
    req.liveness = liveness(LivenessPolicy::Park, 0);
    let (_, facts, events) = run_to_end(&rt, req, None).await;
    assert_eq!(facts.status, RunStatus::Parked);
    assert!(events.iter().any(|e| matches!(
        &e.payload,
        Payload::Lifecycle(LifecycleEvent::ApprovalRouted {
            route: ApprovalRoute::Parked,
            ..
        })
    )));
    // A controller that cannot park is refused the policy at start.
    let mut req = start_req("echo", "x");
    req.liveness = liveness(LivenessPolicy::Park, 0);
    let err = rt.start(req).await.unwrap_err();
    assert!(
        matches!(err, RuntimeError::UnsupportedPolicy { .. }),
        "{err}"
    );
    assert_eq!(err.code(), "unsupported_policy");
}

#[tokio::test]
async fn decisions_are_idempotent_conflicts_are_refused_and_expiry_records_the_default() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let (s, run, mut sub, _obs) =
        waiting_run(&rt, liveness(LivenessPolicy::Continue, 0), "4 2").await;
    let id = rt.pending_decisions(Some(&s))[0].decision_id.clone();
    let yes = serde_json::json!({"approved": true});
    rt.decide(&id, yes.clone()).await.unwrap();
    rt.decide(&id, yes.clone())
        .await
        .expect("the same answer again is accepted");
    let err = rt
        .decide(&id, serde_json::json!({"approved": false}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "conflict", "{err}");
    until(&mut sub, is_terminal).await;
    let recorded = rt
        .read(&s, Seq(0))
        .await
        .unwrap()
        .iter()
        .filter(|i| i.event().is_some_and(|e| kind(e) == "decision_recorded"))
        .count();
    assert_eq!(recorded, 1, "journaled once");
    assert_eq!(rt.wait(run).await.unwrap().status, RunStatus::Finished);
    let unknown = rt
        .decide(&cairn_runtime::DecisionId::derive(&s, Seq(999)), yes)
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), "not_found");

    // A request with a timeout and a default records the default on expiry.
    let (_, facts, events) = run_to_end(&rt, counter("4 2 50"), None).await;
    assert_eq!(facts.status, RunStatus::Finished);
    assert!(events.iter().any(|e| matches!(
        &e.payload,
        Payload::Lifecycle(LifecycleEvent::DecisionRecorded {
            by: DecidedBy::Expiry,
            ..
        })
    )));
}

#[tokio::test]
async fn a_second_start_is_refused_naming_the_live_run() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let (s, run, _sub, _obs) = waiting_run(&rt, liveness(LivenessPolicy::Continue, 0), "4 2").await;
    let mut again = counter("1");
    again.session = Some(s.clone());
    let err = rt.start(again).await.unwrap_err();
    assert!(
        matches!(&err, RuntimeError::LiveRun { run: r, .. } if *r == run),
        "{err}"
    );
    assert!(err.to_string().contains(&run.to_string()));
    rt.cancel(run, CancelReason::External, "test").unwrap();
    assert_eq!(rt.wait(run).await.unwrap().status, RunStatus::Cancelled);
}

#[tokio::test]
async fn a_guest_that_ignores_cancel_is_stopped_by_the_epoch_deadline() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let started = rt
        .start(StartRun::new(ComponentRef::Path(fixture("spinner")), ""))
        .await
        .unwrap();
    let mut sub = rt.subscribe(&started.session_id, Seq(0)).await.unwrap();
    until(&mut sub, |e| kind(e) == "text_delta").await;
    assert_eq!(
        rt.summary(&started.session_id).await.unwrap().state,
        AgentState::Running
    );
    let asked = std::time::Instant::now();
    rt.cancel(started.run_id, CancelReason::External, "stop spinning")
        .unwrap();
    let facts = tokio::time::timeout(Duration::from_secs(10), rt.wait(started.run_id))
        .await
        .unwrap()
        .unwrap();
    eprintln!(
        "spinner stopped {} ms after cancel",
        asked.elapsed().as_millis()
    );
    assert_eq!(facts.status, RunStatus::Cancelled);
    let last = until(&mut sub, is_terminal).await.pop().unwrap();
    assert!(matches!(
        last.payload,
        Payload::Lifecycle(LifecycleEvent::Cancelled {
            reason: CancelReason::External,
            ..
        })
    ));
    // A run's timeout cancels with `deadline`.
    let mut req = StartRun::new(ComponentRef::Path(fixture("spinner")), "");
    req.timeout_ms = Some(100);
    let (_, facts, events) = run_to_end(&rt, req, None).await;
    assert_eq!(facts.status, RunStatus::Cancelled);
    assert!(matches!(
        events.last().unwrap().payload,
        Payload::Lifecycle(LifecycleEvent::Cancelled {
            reason: CancelReason::Deadline,
            ..
        })
    ));
}

/// `runs/1/worker.sock` of `session`'s worker in the test home under `tmp`.
async fn first_socket(
    rt: &Runtime,
    tmp: &std::path::Path,
    session: &SessionId,
) -> std::path::PathBuf {
    let worker = rt.summary(session).await.unwrap().worker_id;
    tmp.join("home/workers")
        .join(worker.to_string())
        .join("runs/1/worker.sock")
}

/// `cairn attach ARGS --socket SOCK`, given 30 s.
async fn cairn_attach(args: &[&str], sock: &std::path::Path) -> std::process::Output {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("attach")
        .args(args)
        .arg("--socket")
        .arg(sock)
        .output();
    tokio::time::timeout(Duration::from_secs(30), out)
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn the_control_socket_follows_decides_and_goes_away() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let (s, run, _sub, _obs) = waiting_run(&rt, liveness(LivenessPolicy::Continue, 0), "4 2").await;
    let sock = first_socket(&rt, tmp.path(), &s).await;
    assert!(sock.exists());
    let id = rt.pending_decisions(Some(&s))[0].decision_id.clone();
    let out = cairn_attach(&["--json", "--decide", "approve"], &sock).await;
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&id.to_string()) && text.contains("\"finished\""),
        "{text}"
    );
    assert_eq!(rt.wait(run).await.unwrap().status, RunStatus::Finished);
    assert!(
        !sock.exists(),
        "the socket is removed when the generation stops"
    );
}

/// A generation serves its socket once it has lived `BIND_AFTER` (a run
/// that ends sooner never binds one), and it is served: a cancel through it
/// ends the run, and it goes with the generation.
#[tokio::test]
async fn a_generation_binds_its_socket_once_it_has_lived_a_while() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let asked = std::time::Instant::now();
    let started = rt
        .start(StartRun::new(ComponentRef::Path(fixture("spinner")), ""))
        .await
        .unwrap();
    let sock = first_socket(&rt, tmp.path(), &started.session_id).await;
    while !sock.exists() {
        assert!(asked.elapsed() < Duration::from_secs(10), "never bound");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let bound_after = asked.elapsed();
    assert!(
        bound_after >= cairn_runtime::socket::BIND_AFTER,
        "bound {} ms after the start",
        bound_after.as_millis()
    );
    let out = cairn_attach(&["--cancel"], &sock).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let facts = tokio::time::timeout(Duration::from_secs(10), rt.wait(started.run_id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(facts.status, RunStatus::Cancelled);
    assert!(!sock.exists(), "the socket goes with its generation");
}

#[tokio::test]
async fn shutdown_drains_by_policy() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let (_, cancel_run, _s1, _o1) =
        waiting_run(&rt, liveness(LivenessPolicy::Continue, 0), "4 2").await;
    let (_, park_run, _s2, _o2) = waiting_run(&rt, liveness(LivenessPolicy::Park, 0), "4 2").await;
    rt.shutdown(Duration::from_secs(10)).await;
    let facts = rt.wait(cancel_run).await.unwrap();
    assert_eq!(facts.status, RunStatus::Cancelled);
    assert_eq!(rt.wait(park_run).await.unwrap().status, RunStatus::Parked);
    let err = rt.start(start_req("echo", "x")).await.unwrap_err();
    assert!(matches!(err, RuntimeError::ShuttingDown));
    assert!(rt.live_runs().is_empty());
}

#[tokio::test]
async fn history_is_derived_from_the_journal_and_state_is_computed() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let (started, _, _) = run_to_end(&rt, start_req("echo", "first turn"), None).await;
    assert_eq!(
        rt.summary(&started.session_id).await.unwrap().state,
        AgentState::Done
    );
    let summary = rt.summary(&started.session_id).await.unwrap();
    assert_eq!(summary.last_run.unwrap().run_id, started.run_id);
    assert_eq!(summary.observers.claiming, 0);
    let j = serde_json::to_value(AgentState::Blocked {
        on: BlockReason::ProviderRetry,
    })
    .unwrap();
    assert_eq!(
        j,
        serde_json::json!({"state": "blocked", "on": "provider_retry"})
    );
    let _ = ObserverRole::Collecting;
}

/// A start is answered once its first entries are durable, before the run
/// records its generation in `worker.json` and lays it out: on one thread,
/// the caller it woke runs first. Before, the run task went straight on to
/// the layout and the instance, and its caller — an HTTP handler on the
/// same worker thread — waited behind them (0.5–1 ms a start).
#[tokio::test(flavor = "current_thread")]
async fn a_start_is_answered_before_the_run_lays_out() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let (session, worker) = rt.create_session(None).await.unwrap();
    let record = tmp
        .path()
        .join("home/workers")
        .join(worker.to_string())
        .join("worker.json");
    let last_generation = || {
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
        doc["last_generation"].as_u64().unwrap()
    };
    assert_eq!(last_generation(), 0);
    let mut req = StartRun::new(ComponentRef::BuiltIn("echo".into()), "hi");
    req.session = Some(session.clone());
    let started = rt.start(req).await.unwrap();
    // Generation 1 is reserved and journaled; nothing has run since.
    assert_eq!(
        last_generation(),
        0,
        "the run recorded its generation before its caller was answered"
    );
    rt.wait(started.run_id).await.unwrap();
    assert_eq!(last_generation(), 1);
}
