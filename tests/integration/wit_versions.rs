//! Both versions of the controller world run: a controller built against
//! `cairn:controller@0.1.0` keeps working, and under 0.2.0 a decision
//! request the host refuses comes back as a value the controller handles.

use crate::common::*;
use cairn::journal::event::{LifecycleEvent, RunStatus};
use cairn::runtime::{ComponentRef, StartRun};
use cairn::{AgentEvent, Payload};

fn texts(events: &[cairn::SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            Payload::Agent(AgentEvent::TextDelta { text }) => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_built_against_0_1_0_still_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let req = StartRun::new(ComponentRef::Path(fixture("legacy-v1")), "hello");
    let (_, facts, events) =
        run_to_end(&rt, req, Some(serde_json::json!({ "approved": true }))).await;
    assert_eq!(facts.status, RunStatus::Finished, "{events:?}");
    assert_eq!(texts(&events), vec!["0.1.0 guest: hello".to_string()]);
    let Payload::Lifecycle(LifecycleEvent::Finished { text, .. }) = &events.last().unwrap().payload
    else {
        panic!("{:?}", events.last())
    };
    assert_eq!(text, "approved after 0 turns");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_decision_request_is_a_value_the_controller_handles() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let req = StartRun::new(ComponentRef::Path(fixture("hostile")), "bad-wait");
    let (_, facts, events) = run_to_end(&rt, req, None).await;
    assert_eq!(facts.status, RunStatus::Finished, "{events:?}");
    let said = texts(&events);
    assert_eq!(said.len(), 3, "{said:?}");
    assert!(
        said[1].starts_with("refused: decision details is not JSON"),
        "{said:?}"
    );
    assert!(
        said[2].contains("nests") && said[2].contains("deep"),
        "{said:?}"
    );
    // Nothing was asked of anyone.
    assert!(!events.iter().any(|e| matches!(
        e.payload,
        Payload::Lifecycle(LifecycleEvent::DecisionRequested { .. })
    )));
}

/// Shipped components carry code, not debug info: what a browser downloads
/// and a host compiles.
#[test]
fn built_in_and_test_components_carry_no_debug_info() {
    let mut checked = 0;
    let fixtures = cairn::examples::FIXTURES
        .iter()
        .map(|(n, p)| (*n, std::fs::read(p).unwrap()));
    let built_in = cairn::examples::BUILT_IN.iter().map(|(n, b)| (*n, b.to_vec()));
    for (name, bytes) in built_in.chain(fixtures) {
        for payload in wasmparser::Parser::new(0).parse_all(&bytes) {
            if let Ok(wasmparser::Payload::CustomSection(c)) = payload {
                assert!(
                    !c.name().starts_with(".debug"),
                    "{name} carries {} ({} bytes)",
                    c.name(),
                    c.data().len()
                );
            }
        }
        assert!(bytes.len() < 1 << 20, "{name} is {} bytes", bytes.len());
        checked += 1;
    }
    assert!(checked >= 10, "{checked}");
}
