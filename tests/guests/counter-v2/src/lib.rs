//! `counter`, version 2, with a new checkpoint format
//! (`{"next": FIRST, "n": N}`) that still reads version 1's `"FIRST N K"`:
//! the controller a `snapshot` update moves a parked `counter` session
//! onto. It counts on from the checkpoint without asking again and says
//! which format it read.
use cairn_guest::{Controller, Error, Outcome, Start};
use serde_json::Value;

struct CounterV2;

impl Controller for CounterV2 {
    const CAN_PARK: bool = true;

    fn run(start: Start) -> Result<Outcome, Error> {
        let (format, first, n) = match start.checkpoint.as_deref() {
            Some(c) if c.first() == Some(&b'{') => {
                let v: Value = serde_json::from_slice(c)
                    .map_err(|e| Error::new("bad_checkpoint", e.to_string()))?;
                (
                    "v2",
                    v["next"].as_u64().unwrap_or(1),
                    v["n"].as_u64().unwrap_or(3),
                )
            }
            Some(c) => {
                let text = String::from_utf8_lossy(c);
                let mut nums = text
                    .split_whitespace()
                    .map(|a| a.parse::<u64>().unwrap_or(0));
                ("v1", nums.next().unwrap_or(1), nums.next().unwrap_or(3))
            }
            None => ("none", 1, start.prompt.trim().parse().unwrap_or(3)),
        };
        for i in first..=n {
            cairn_guest::emit_text(&i.to_string())?;
        }
        Ok(Outcome::Finished(format!(
            "v2 counted {first}..{n} from a {format} checkpoint"
        )))
    }
}

cairn_guest::controller!(CounterV2);
