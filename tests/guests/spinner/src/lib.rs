//! Emits once, then spins forever without another host call: it ignores a
//! cancel, so only the epoch deadline can stop it.
use cairn_guest::{Controller, Error, Outcome, Start};

struct Spinner;

impl Controller for Spinner {
    fn run(_start: Start) -> Result<Outcome, Error> {
        cairn_guest::emit_text("spinning")?;
        let mut x: u64 = 1;
        loop {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if x == 0 {
                break;
            }
        }
        Ok(Outcome::Finished(x.to_string()))
    }
}

cairn_guest::controller!(Spinner);
