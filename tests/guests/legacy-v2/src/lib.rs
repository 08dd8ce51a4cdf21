//! A controller built against `cairn:controller@0.2.0` (`wit/0.2.0/`), as
//! controllers released before 0.2.1 were: it reads the session's history
//! and answers the roles it saw — 0.2.0 knows only user and assistant, so
//! the host must give it those alone.
wit_bindgen::generate!({
    path: "../../../wit/0.2.0",
    world: "controller",
});

use cairn::controller::{history, journal, types};

struct Legacy;

impl Guest for Legacy {
    fn describe() -> types::Info {
        types::Info {
            name: "legacy-v2".into(),
            version: "0.2.0".into(),
            can_park: false,
        }
    }

    fn run(_start: types::Start) -> types::Outcome {
        let roles: Vec<String> = history::turns(16)
            .into_iter()
            .map(|t| match t.role {
                history::Role::User => format!("user={}", t.text),
                history::Role::Assistant => format!("assistant={}", t.text),
            })
            .collect();
        let said = roles.join("; ");
        let _ = journal::emit(&journal::AgentEvent::TextDelta(said.clone()));
        types::Outcome::Finished(said)
    }
}

export!(Legacy);
