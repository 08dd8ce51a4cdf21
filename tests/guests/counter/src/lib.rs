//! Emits "1".."N" as text deltas, asking for approval after every K of them.
//! Prompt: `N K [TIMEOUT_MS]` (N defaults to 3); with a timeout each request has the default
//! answer `{"approved": true}`. It starts by emitting what its clock and
//! randomness say, and what the filesystem says of a file it writes (its
//! times, its metadata hash), so a replay checks they are journal-derived.
use cairn_guest::{Answer, Controller, Error, Outcome, RequestKind, Start};
use serde_json::json;

struct Counter;

impl Controller for Counter {
    const CAN_PARK: bool = true;

    fn run(start: Start) -> Result<Outcome, Error> {
        // A checkpoint is "FIRST N K": where to go on from, and the prompt's numbers.
        let resumed = start
            .checkpoint
            .as_ref()
            .map(|c| String::from_utf8_lossy(c).into_owned());
        let text = resumed
            .clone()
            .unwrap_or_else(|| format!("1 {}", start.prompt));
        let mut args = text
            .split_whitespace()
            .map(|a| a.parse::<u64>().unwrap_or(0));
        let first = args.next().unwrap_or(1);
        let n = args.next().unwrap_or(3);
        let k = args.next().unwrap_or(0);
        let timeout = args.next();
        // Std's hash keys come from WASI randomness, which the host derives
        // from the journaled seed.
        let random = {
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new().hash_one(42u64)
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        // Every other random source a guest can reach: the insecure
        // interface, and more secure bytes than one 64 KiB block.
        let insecure = wasip2::random::insecure::get_insecure_random_u64();
        let secure = wasip2::random::random::get_random_bytes(80 * 1024);
        let secure_tail: Vec<u8> = secure[64 * 1024..64 * 1024 + 8].to_vec();
        let seed = wasip2::random::insecure_seed::insecure_seed();
        // What the filesystem says of a file it just wrote: its times and
        // its metadata hash (constant, or journal-derived, on the host).
        let _ = std::fs::write("stamp.txt", format!("from {first}"));
        let mtime = std::fs::metadata("stamp.txt")
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos() as u64);
        let hash = wasip2::filesystem::preopens::get_directories()
            .into_iter()
            .next()
            .and_then(|(dir, _)| {
                dir.metadata_hash_at(wasip2::filesystem::types::PathFlags::empty(), "stamp.txt")
                    .ok()
            })
            .map(|h| [h.lower, h.upper]);
        cairn_guest::emit_custom(
            "environment",
            &json!({
                "random": random,
                "now_ms": now,
                "first": first,
                "insecure": insecure,
                "secure_tail": secure_tail,
                "insecure_seed": [seed.0, seed.1],
                "stamp_mtime_ns": mtime,
                "stamp_hash": hash,
            }),
        )?;
        for i in first..=n {
            cairn_guest::emit_text(&i.to_string())?;
            if k > 0 && i % k == 0 && i < n {
                let default = json!({ "approved": true });
                let answer = cairn_guest::request(
                    RequestKind::Approval,
                    &format!("go on after {i}?"),
                    &json!({ "at": i }),
                    timeout,
                    timeout.map(|_| &default),
                );
                match answer {
                    Answer::Decided(v) if v["approved"] == true => {}
                    Answer::Decided(_) => return Ok(Outcome::Finished(format!("stopped at {i}"))),
                    Answer::TimedOut => return Ok(Outcome::Finished(format!("timed out at {i}"))),
                    Answer::Cancelled => {
                        return Err(Error::new("cancelled", "cancelled while waiting"));
                    }
                    Answer::Refused(why) => return Err(Error::new("refused", why)),
                    Answer::Park => {
                        return Ok(Outcome::Parked(format!("{} {n} {k}", i + 1).into_bytes()));
                    }
                }
            }
        }
        Ok(Outcome::Finished(format!("counted to {n}")))
    }
}

cairn_guest::controller!(Counter);
