//! `echo`, version 2: what `echo` does for every prompt it ever got, and,
//! behind a version check (prompts starting `v2 `), one reasoning line
//! more — a compatible update. With the prompt `shout …` it shouts instead:
//! an incompatible one for runs that said `shout` before.
use cairn_guest::{Controller, Error, Outcome, Start};

struct EchoV2;

impl Controller for EchoV2 {
    fn run(start: Start) -> Result<Outcome, Error> {
        cairn_guest::emit_progress("echoing", 0, Some(1))?;
        if start.prompt.starts_with("v2 ") {
            cairn_guest::emit_reasoning("version 2 thinks before it echoes")?;
        }
        let shout = start.prompt.starts_with("shout ");
        for word in start.prompt.split_inclusive(' ') {
            match shout {
                true => cairn_guest::emit_text(&word.to_uppercase())?,
                false => cairn_guest::emit_text(word)?,
            };
        }
        cairn_guest::emit_progress("echoing", 1, Some(1))?;
        Ok(Outcome::Finished(start.prompt))
    }
}

cairn_guest::controller!(EchoV2);
