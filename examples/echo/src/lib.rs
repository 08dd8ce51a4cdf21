//! `echo`: emits the prompt back as several text deltas, then finishes with it.
use cairn_guest::{Controller, Error, Outcome, Start};

struct Echo;

impl Controller for Echo {
    fn run(start: Start) -> Result<Outcome, Error> {
        cairn_guest::emit_progress("echoing", 0, Some(1))?;
        for word in start.prompt.split_inclusive(' ') {
            cairn_guest::emit_text(word)?;
        }
        cairn_guest::emit_progress("echoing", 1, Some(1))?;
        Ok(Outcome::Finished(start.prompt))
    }
}

cairn_guest::controller!(Echo);
