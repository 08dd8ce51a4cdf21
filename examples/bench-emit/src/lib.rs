//! `bench-emit`: the baseline component of `cairn bench`: emits the same
//! text delta N times (N is the prompt), then finishes.
use cairn_guest::{Controller, Error, Outcome, Start};

struct BenchEmit;

impl Controller for BenchEmit {
    fn run(start: Start) -> Result<Outcome, Error> {
        let n: u64 = start.prompt.trim().parse().unwrap_or(1000);
        for _ in 0..n {
            cairn_guest::emit_text("a typical short text delta")?;
        }
        Ok(Outcome::Finished(n.to_string()))
    }
}

cairn_guest::controller!(BenchEmit);
