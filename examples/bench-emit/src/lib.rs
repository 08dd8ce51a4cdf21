//! `bench-emit`: the baseline component of `cairn bench`: emits the same
//! text delta N times (N is the prompt), then finishes. With the prompt
//! `model N` it makes N model calls instead (`model-stream N`: streamed),
//! for the model bench.
use cairn_guest::model::{self, Message, Request};
use cairn_guest::{Controller, Error, Outcome, Start};

struct BenchEmit;

impl Controller for BenchEmit {
    fn run(start: Start) -> Result<Outcome, Error> {
        let mut words = start.prompt.split_whitespace();
        let (calls, stream) = match words.next() {
            Some("model") => (true, false),
            Some("model-stream") => (true, true),
            _ => (false, false),
        };
        if calls {
            let n: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(1);
            for i in 0..n {
                let request = Request::new(vec![Message::user(format!("call {i}"))]).stream(stream);
                model::chat(&request)?;
            }
            return Ok(Outcome::Finished(n.to_string()));
        }
        let n: u64 = start.prompt.trim().parse().unwrap_or(1000);
        for _ in 0..n {
            cairn_guest::emit_text("a typical short text delta")?;
        }
        Ok(Outcome::Finished(n.to_string()))
    }
}

cairn_guest::controller!(BenchEmit);
