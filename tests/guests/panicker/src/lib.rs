//! Emits one event, then panics (a trap) — or, with prompt "fail", returns
//! an error of its own.
use cairn_guest::{Controller, Error, Outcome, Start};

struct Panicker;

impl Controller for Panicker {
    fn run(start: Start) -> Result<Outcome, Error> {
        cairn_guest::emit_text("about to fail")?;
        if start.prompt == "fail" {
            return Err(Error::new("gave_up", "the controller gave up"));
        }
        panic!("the panicker panics on purpose");
    }
}

cairn_guest::controller!(Panicker);
