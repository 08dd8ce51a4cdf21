//! A controller built against `cairn:controller@0.1.0` (`wit/0.1.0/`), as
//! controllers released before 0.2.0 were: it emits, waits on an approval,
//! reads history and finishes — the host must keep running it.
#![allow(clippy::too_many_arguments)] // the generated bindings of the 0.1.0 world
wit_bindgen::generate!({
    path: "../../../wit/0.1.0",
    world: "controller",
});

use cairn::controller::{decisions, history, journal, types};

struct Legacy;

impl Guest for Legacy {
    fn describe() -> types::Info {
        types::Info {
            name: "legacy-v1".into(),
            version: "0.1.0".into(),
            can_park: false,
        }
    }

    fn run(start: types::Start) -> types::Outcome {
        let _ = journal::emit(&journal::AgentEvent::TextDelta(format!(
            "0.1.0 guest: {}",
            start.prompt
        )));
        let turns = history::turns(16).len();
        let answer = decisions::wait(&decisions::Request {
            kind: decisions::RequestKind::Approval,
            prompt: "go on?".into(),
            details: "{}".into(),
            timeout_ms: None,
            default_value: None,
        });
        match answer {
            decisions::Answer::Decided(v) if v.contains("true") => {
                types::Outcome::Finished(format!("approved after {turns} turns"))
            }
            other => types::Outcome::Finished(format!("not approved: {other:?}")),
        }
    }
}

export!(Legacy);
