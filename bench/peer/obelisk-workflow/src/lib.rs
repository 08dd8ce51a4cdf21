//! The peer benchmark's Obelisk workflow (see wit/world.wit).

wit_bindgen::generate!({ path: "wit", world: "trivial", generate_all });

use exports::bench::trivial::workflow::Guest;
use obelisk::types::time::{Duration, ScheduleAt};
use obelisk::workflow::workflow_support::{random_u64, sleep};

struct Trivial;

impl Guest for Trivial {
    fn noop(prompt: String) -> Result<String, ()> {
        Ok(prompt)
    }

    fn steps(n: u32) -> Result<u64, ()> {
        let mut sum = 0u64;
        for _ in 0..n {
            sum = sum.wrapping_add(random_u64(0, 1000));
        }
        Ok(sum)
    }

    fn nap(ms: u64) -> Result<(), ()> {
        for _ in 0..2 {
            sleep(ScheduleAt::In(Duration::Milliseconds(ms / 2))).map_err(|_| ())?;
        }
        Ok(())
    }
}

export!(Trivial);
