//! The journal's vocabulary round-trips, keeps tags apart, and its published
//! schema matches the code.

use cairn_runtime::journal::event::*;
use cairn_runtime::{
    DecisionId, Generation, Payload, RunId, SegmentId, Seq, SessionEvent, SessionId, WorkerId,
};

fn samples() -> Vec<Payload> {
    let session = SessionId::parse("s").unwrap();
    let decision = DecisionId::derive(&session, Seq(9));
    let observer = Observer {
        id: "o1".into(),
        role: ObserverRole::Claiming,
        present: true,
    };
    let lineage = SegmentLineage {
        segment: SegmentId::new(),
        through_seq: Seq(4),
    };
    let agent = vec![
        AgentEvent::TextDelta {
            text: "hi".into(),
            by: None,
        },
        AgentEvent::ReasoningDelta {
            text: "hm".into(),
            by: None,
        },
        AgentEvent::ToolCall {
            id: "c1".into(),
            name: "search".into(),
            arguments: serde_json::json!({"type": "x", "kind": "y"}),
            by: None,
        },
        AgentEvent::TextDelta {
            text: "tok".into(),
            by: Some(By::Model),
        },
        AgentEvent::ToolCall {
            id: "c2".into(),
            name: "read_file".into(),
            arguments: serde_json::json!({"path": "a"}),
            by: Some(By::Model),
        },
        AgentEvent::Progress {
            message: "m".into(),
            done: 1,
            total: Some(2),
        },
        AgentEvent::Retrying {
            attempt: 2,
            after_ms: 500,
            reason: "429".into(),
        },
        AgentEvent::Custom {
            name: "probe".into(),
            data: serde_json::json!([1, 2]),
        },
    ];
    let lifecycle = vec![
        LifecycleEvent::SegmentCreated {
            segment_id: SegmentId::new(),
            compacted_from: Some(lineage.clone()),
            forked_from: Some(lineage),
        },
        LifecycleEvent::GenerationReserved {
            worker_id: WorkerId::new(),
            generation: Generation(3),
        },
        LifecycleEvent::Started {
            component: "sha256:00".into(),
            prompt: "p".into(),
            tools: Some(r#"{"tools":[]}"#.into()),
            timeout_ms: Some(1000),
            liveness: Liveness {
                policy: LivenessPolicy::Park,
                grace_ms: 250,
            },
            generation: Generation(3),
            continues: Some(RunId::new()),
            resumes: Some(RunId::new()),
            resume_on_start: true,
            seed: 42,
        },
        LifecycleEvent::ObserverAttached {
            observer: observer.clone(),
        },
        LifecycleEvent::ObserverDetached {
            observer: observer.clone(),
            because: DetachCause::Released,
        },
        LifecycleEvent::ObserverDetached {
            observer: observer.clone(),
            because: DetachCause::Expired,
        },
        LifecycleEvent::ObserverDetached {
            observer,
            because: DetachCause::Displaced,
        },
        LifecycleEvent::ClaimsExhausted,
        LifecycleEvent::LivenessDecided {
            policy: LivenessPolicy::Cancel,
        },
        LifecycleEvent::DecisionRequested {
            decision_id: decision.clone(),
            request_kind: RequestKind::Approval,
            prompt: "ok?".into(),
            details: serde_json::json!({}),
            timeout_ms: Some(5),
            default_value: Some(serde_json::json!({"approved": false})),
        },
        LifecycleEvent::ApprovalRouted {
            decision_id: decision.clone(),
            route: ApprovalRoute::Parked,
            because: "nobody present".into(),
        },
        LifecycleEvent::DecisionRecorded {
            decision_id: decision.clone(),
            value: serde_json::json!({"approved": true}),
            by: DecidedBy::Expiry,
        },
        LifecycleEvent::DecisionTimedOut {
            decision_id: decision,
        },
        LifecycleEvent::ResumedByReplay {
            generation: Generation(4),
            through_seq: Seq(17),
        },
        LifecycleEvent::Finished {
            usage: Usage {
                events: 3,
                event_bytes: 90,
                wall_ms: 12,
                host_calls: 2,
                input_tokens: 40,
                output_tokens: 9,
            },
            outcome: FinishOutcome::Question,
            text: "why?".into(),
        },
        LifecycleEvent::Failed {
            error: ErrorInfo {
                code: "limit_exceeded".into(),
                message: "too many".into(),
                details: Some(serde_json::json!({"limit": "events_per_run", "value": 9})),
            },
        },
        LifecycleEvent::Parked {
            checkpoint: "k".into(),
        },
        LifecycleEvent::CompactionSummary {
            text: "user: hi".into(),
            through_seq: Seq(12),
        },
        LifecycleEvent::HistoryImported {
            turns: vec![
                ImportedTurn {
                    role: "user".into(),
                    text: "hi".into(),
                    tool_calls: None,
                    tool_call_id: None,
                },
                ImportedTurn {
                    role: "assistant".into(),
                    text: String::new(),
                    tool_calls: Some(serde_json::json!([{"id": "c1", "type": "function"}])),
                    tool_call_id: None,
                },
            ],
            because: Some("resumed_by_replay".into()),
        },
        LifecycleEvent::ComponentUpdated {
            from: "sha256:aa".into(),
            to: "sha256:bb".into(),
            mode: UpdateMode::Replay,
            checked_runs: 3,
            at_seq: Seq(40),
        },
        LifecycleEvent::HostCallStarted {
            call_id: 1,
            capability: "model".into(),
            op: "chat".into(),
            request: serde_json::json!({"model": "default", "messages": [{"role": "user", "content": "hi"}], "stream": true}),
        },
        LifecycleEvent::HostCallFinished {
            call_id: 1,
            response: Some(
                serde_json::json!({"text": "hello", "finish_reason": "stop", "input_tokens": 3, "output_tokens": 1, "model": "m"}),
            ),
            error: None,
            usage: Some(CallUsage {
                input_tokens: 3,
                output_tokens: 1,
            }),
        },
        LifecycleEvent::HostCallFinished {
            call_id: 2,
            response: None,
            error: Some(CallError {
                code: CallErrorCode::Interrupted,
                message: "the host stopped".into(),
            }),
            usage: None,
        },
        LifecycleEvent::WorkerCall {
            call: serde_json::json!({"call": "spawn", "component": "echo", "prompt": "p", "scope": "a", "liveness": "continue"}),
            result: serde_json::json!({"ok": {"worker_id": "w", "session_id": "s"}}),
        },
        LifecycleEvent::ChildNotification {
            worker_id: WorkerId::new(),
            session_id: SessionId::parse("child").unwrap(),
            child_run_id: RunId::new(),
            status: "finished".into(),
        },
        LifecycleEvent::ForkedFrom {
            parent_session_id: SessionId::parse("parent").unwrap(),
            before_seq: Seq(7),
            prompt: "edit me".into(),
        },
    ];
    let mut all: Vec<Payload> = agent.into_iter().map(Payload::Agent).collect();
    for reason in [
        CancelReason::Deadline,
        CancelReason::External,
        CancelReason::ClientTool,
        CancelReason::Unclaimed,
        CancelReason::Shutdown,
    ] {
        all.push(Payload::Lifecycle(LifecycleEvent::Cancelled {
            reason,
            message: "m".into(),
        }));
    }
    all.extend(lifecycle.into_iter().map(Payload::Lifecycle));
    all
}

#[test]
fn every_event_round_trips_through_a_journal_line() {
    for (i, payload) in samples().into_iter().enumerate() {
        let event = SessionEvent {
            session_id: SessionId::parse("s").unwrap(),
            segment_id: SegmentId::new(),
            run_id: Some(RunId::new()),
            seq: Seq(i as u64 + 1),
            at_ms: 1_700_000_000_000,
            payload,
            facts: None,
            line: Default::default(),
        };
        let line = serde_json::to_string(&event).unwrap();
        assert!(!line.contains('\n'));
        let back: SessionEvent = serde_json::from_str(&line).unwrap();
        assert_eq!(back, event, "{line}");
    }
}

#[test]
fn no_variant_field_collides_with_a_tag_name() {
    for payload in samples() {
        let v = serde_json::to_value(&payload).unwrap();
        let envelope = v.as_object().unwrap();
        let keys: Vec<&String> = envelope.keys().collect();
        assert_eq!(keys, ["event", "kind"], "{v}");
        let inner = v["event"].as_object().unwrap();
        assert!(inner["type"].is_string(), "{v}");
        assert_eq!(payload.kind(), inner["type"], "kind() names the tag");
        // Only the tag is called `type`; nothing inside an event is `kind`.
        assert!(!inner.contains_key("kind"), "{v}");
    }
    let kinds: std::collections::BTreeSet<String> = samples()
        .iter()
        .map(|p| {
            serde_json::to_value(p).unwrap()["event"]["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(kinds.len(), 6 + 24, "every variant sampled once: {kinds:?}");
}

#[test]
fn durations_are_millisecond_integers() {
    let l = Liveness {
        policy: LivenessPolicy::Continue,
        grace_ms: 1500,
    };
    assert_eq!(
        serde_json::to_value(l).unwrap(),
        serde_json::json!({"policy": "continue", "grace_ms": 1500})
    );
}

#[test]
fn the_published_schema_matches_the_code() {
    let committed = include_str!("../../docs/journal.schema.json");
    let current = cairn_runtime::journal::schema::journal_line();
    assert!(
        committed == current,
        "docs/journal.schema.json drifted from the code: run `cargo run -- schema journal > docs/journal.schema.json`"
    );
    let out = crate::common::cairn_bin()
        .args(["schema", "journal"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), current);
}

#[test]
fn the_seed_is_written_as_text_and_a_number_still_reads() {
    let started = Payload::Lifecycle(LifecycleEvent::Started {
        component: "sha256:00".into(),
        prompt: "p".into(),
        tools: None,
        timeout_ms: None,
        liveness: Liveness {
            policy: LivenessPolicy::Continue,
            grace_ms: 0,
        },
        generation: Generation(1),
        continues: None,
        resumes: None,
        resume_on_start: false,
        seed: u64::MAX - 1,
    });
    let v = serde_json::to_value(&started).unwrap();
    // A double would round this: 18446744073709551614 → …552000.
    assert_eq!(v["event"]["seed"], "18446744073709551614");
    assert_eq!(
        serde_json::from_value::<Payload>(v.clone()).unwrap(),
        started
    );
    let mut old = v.to_string();
    old = old.replace("\"18446744073709551614\"", "12345");
    let read: Payload = serde_json::from_str(&old).unwrap();
    let Payload::Lifecycle(LifecycleEvent::Started { seed, .. }) = read else {
        panic!()
    };
    assert_eq!(seed, 12345);
    let bad = v
        .to_string()
        .replace("\"18446744073709551614\"", "\"twelve\"");
    assert!(serde_json::from_str::<Payload>(&bad).is_err());
}

#[test]
fn the_browser_replays_the_kinds_the_host_replays() {
    // One list (cairn-types `event::replayed_kinds`): the viewer imports its copy.
    let committed = include_str!("../../viewer/src/replayed.json");
    assert_eq!(
        committed,
        cairn_types::schema::replayed(),
        "viewer/src/replayed.json drifted: run `cargo run -- schema replayed > viewer/src/replayed.json`"
    );
    let out = crate::common::cairn_bin()
        .args(["schema", "replayed"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), committed);
    let kinds = cairn_types::event::replayed_kinds();
    for kind in [
        "text_delta",
        "host_call_started",
        "host_call_finished",
        "worker_call",
        "decision_recorded",
    ] {
        assert!(kinds.contains(&kind), "{kind}");
    }
    assert!(!kinds.contains(&"child_notification"));
}
