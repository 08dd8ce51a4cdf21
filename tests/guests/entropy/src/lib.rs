//! Reads every WASI clock and random function the host answers from the
//! journal, emits what each said (`entropy` custom events: one at the start,
//! one after a decision, which advances the wall clock), and finishes. A
//! replay must see the same; a browser replayer must compute the same (see
//! `docs/replay.md`).
use cairn_guest::{Controller, Error, Outcome, Start};
use serde_json::json;
use wasip2::clocks::{monotonic_clock, wall_clock};
use wasip2::random::{insecure, insecure_seed, random};

struct Entropy;

fn reading() -> serde_json::Value {
    let wall = wall_clock::now();
    let wall_res = wall_clock::resolution();
    let (seed_lo, seed_hi) = insecure_seed::insecure_seed();
    json!({
        "wall": [wall.seconds.to_string(), wall.nanoseconds],
        "wall_resolution": [wall_res.seconds.to_string(), wall_res.nanoseconds],
        "monotonic": monotonic_clock::now().to_string(),
        "monotonic_resolution": monotonic_clock::resolution().to_string(),
        "random_u64": random::get_random_u64().to_string(),
        "random_bytes": random::get_random_bytes(5),
        "insecure_u64": insecure::get_insecure_random_u64().to_string(),
        "insecure_bytes": insecure::get_insecure_random_bytes(3),
        "insecure_seed": [seed_lo.to_string(), seed_hi.to_string()],
    })
}

impl Controller for Entropy {
    fn run(_start: Start) -> Result<Outcome, Error> {
        cairn_guest::emit_custom("entropy", &reading())?;
        let _ = cairn_guest::request_approval("advance the clock");
        cairn_guest::emit_custom("entropy", &reading())?;
        Ok(Outcome::Finished("read".into()))
    }
}

cairn_guest::controller!(Entropy);
