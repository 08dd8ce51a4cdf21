//! `approval`: asks for approval of the prompt and finishes with what was decided.
use cairn_guest::{Approval, Controller, Error, Outcome, Start};

struct AskFirst;

impl Controller for AskFirst {
    const CAN_PARK: bool = true;

    fn run(start: Start) -> Result<Outcome, Error> {
        if let Some(checkpoint) = &start.checkpoint {
            let asked = String::from_utf8_lossy(checkpoint);
            cairn_guest::emit_text(&format!("resuming after parking on: {asked}"))?;
        }
        cairn_guest::emit_reasoning("this needs a human's approval first")?;
        let verdict = match cairn_guest::request_approval(&start.prompt) {
            Approval::Approved(reason) => format!("approved{}", because(reason)),
            Approval::Denied(reason) => format!("denied{}", because(reason)),
            Approval::TimedOut => "no answer in time".to_string(),
            Approval::Cancelled => return Err(Error::new("cancelled", "cancelled while waiting")),
            Approval::Park => return Ok(Outcome::Parked(start.prompt.into_bytes())),
        };
        cairn_guest::emit_text(&verdict)?;
        Ok(Outcome::Finished(verdict))
    }
}

fn because(reason: Option<String>) -> String {
    reason.map(|r| format!(": {r}")).unwrap_or_default()
}

cairn_guest::controller!(AskFirst);
