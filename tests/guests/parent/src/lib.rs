//! A delegating controller driven by its prompt: a JSON list of steps, run
//! in order, each result emitted as a `step` custom event and collected
//! into the final answer (JSON). Steps: `{"spawn": {"component", "prompt",
//! "scope"?}}`, `{"wait": N, "timeout_ms": T}` (N: the Nth spawned child),
//! `{"status": N}`, `{"cancel": N}`, `{"write": [path, text]}`,
//! `{"read": path}`, `{"peer": worker_id}`, `"peers"`, `{"approve": prompt}`,
//! `{"loan_race": {"component", "scope", "link", "spawns", "swaps"}}`: the
//! loan race of the hostile round (spawn a child lent `scope`, then swap
//! `scope` and `link` by renames while the child starts; wait; repeat),
//! its result the count of each child's answer. `{"sleep": ms}`: the
//! monotonic time that passed across a sleep of `ms`; `{"poll_timer": ms}`:
//! how many times a timer of `ms` was looked at (`ready()`) before it was
//! ready; `{"peek_timer": ms}`: whether a new timer of `ms` is ready at
//! its first look; `{"race": [ms, …]}`: one `poll` over a timer each, the
//! index of the first ready and the monotonic time that passed (with
//! `"spin": n`, n rounds of work after the poll, the timers still held). `{"history": n}`: the session's last `n` turns before this run,
//! as `seq role: text` lines.
use cairn_guest::workers;
use cairn_guest::{Controller, Error, Outcome, Start};
use serde_json::{Value, json};

struct Parent;

/// Set-up run while the instance is made (the component calls a module's
/// `_initialize` at instantiation, the convention of WASI's build targets):
/// with a `slow-start` file in the worktree naming a count, it looks that
/// many times for a `go` file before it returns, as a large controller's
/// set-up would take its time — what a test of seed 002's `Preparing`
/// holds open.
#[unsafe(no_mangle)]
pub extern "C" fn _initialize() {
    let Ok(text) = std::fs::read_to_string("slow-start") else {
        return;
    };
    for _ in 0..text.trim().parse::<u64>().unwrap_or(0) {
        if std::fs::metadata("go").is_ok() {
            return;
        }
    }
}

fn status_json(s: &workers::ChildStatus) -> Value {
    json!({ "state": format!("{:?}", s.state).to_lowercase(), "text": s.text, "error": s.error })
}

impl Controller for Parent {
    const CAN_PARK: bool = false;

    fn run(start: Start) -> Result<Outcome, Error> {
        let steps: Vec<Value> = serde_json::from_str(&start.prompt)
            .map_err(|e| Error::new("bad_prompt", e.to_string()))?;
        let mut children: Vec<workers::Child> = Vec::new();
        let mut results = Vec::new();
        let child = |children: &[workers::Child], n: &Value| -> String {
            match n.as_u64() {
                Some(i) => children
                    .get(i as usize)
                    .map(|c| c.worker_id.clone())
                    .unwrap_or_else(|| "none".to_string()),
                None => n.as_str().unwrap_or("none").to_string(),
            }
        };
        for step in &steps {
            let result = if let Some(s) = step.get("spawn") {
                match workers::spawn(
                    s["component"].as_str().unwrap_or("echo"),
                    s["prompt"].as_str().unwrap_or(""),
                    s["scope"].as_str(),
                ) {
                    Ok(c) => {
                        let v = json!({ "worker_id": c.worker_id, "session_id": c.session_id });
                        children.push(c);
                        v
                    }
                    Err(e) => json!({ "error": e }),
                }
            } else if let Some(n) = step.get("wait") {
                let t = step["timeout_ms"].as_u64().unwrap_or(60_000);
                match workers::wait(&child(&children, n), t) {
                    Ok(s) => status_json(&s),
                    Err(e) => json!({ "error": e }),
                }
            } else if let Some(n) = step.get("status") {
                match workers::status(&child(&children, n)) {
                    Ok(s) => status_json(&s),
                    Err(e) => json!({ "error": e }),
                }
            } else if let Some(n) = step.get("cancel") {
                match workers::cancel(&child(&children, n)) {
                    Ok(()) => json!("cancelled"),
                    Err(e) => json!({ "error": e }),
                }
            } else if let Some(w) = step.get("write") {
                let (path, text) = (w[0].as_str().unwrap_or("x"), w[1].as_str().unwrap_or(""));
                if let Some(dir) = std::path::Path::new(path).parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                json!(std::fs::write(path, text).is_ok())
            } else if let Some(ms) = step.get("sleep").and_then(Value::as_u64) {
                let t = std::time::Instant::now();
                std::thread::sleep(std::time::Duration::from_millis(ms));
                json!(t.elapsed().as_millis() as u64)
            } else if let Some(ms) = step.get("poll_timer").and_then(Value::as_u64) {
                let timer = wasip2::clocks::monotonic_clock::subscribe_duration(ms * 1_000_000);
                let mut looks: u64 = 0;
                while !timer.ready() {
                    looks += 1;
                }
                json!(looks)
            } else if let Some(race) = step.get("race").and_then(Value::as_array) {
                // `poll` over one timer a duration: the index of the first
                // ready, and the monotonic time that passed.
                let t = std::time::Instant::now();
                let timers: Vec<_> = race
                    .iter()
                    .map(|ms| {
                        wasip2::clocks::monotonic_clock::subscribe_duration(
                            ms.as_u64().unwrap_or(0).saturating_mul(1_000_000),
                        )
                    })
                    .collect();
                let refs: Vec<&wasip2::io::poll::Pollable> = timers.iter().collect();
                let ready = wasip2::io::poll::poll(&refs);
                // `"spin": n`: work n rounds while the timers are still
                // held (the host's epoch ticks yield in the middle of it).
                let spins = step.get("spin").and_then(Value::as_u64).unwrap_or(0);
                let mut x = 0u64;
                for i in 0..spins {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                }
                json!([ready.first(), t.elapsed().as_millis() as u64])
            } else if let Some(ms) = step.get("peek_timer").and_then(Value::as_u64) {
                let timer = wasip2::clocks::monotonic_clock::subscribe_duration(
                    ms.saturating_mul(1_000_000),
                );
                json!(timer.ready())
            } else if let Some(n) = step.get("history").and_then(Value::as_u64) {
                json!(
                    cairn_guest::turns(n as u32)
                        .iter()
                        .map(|t| format!("{} {:?}: {}", t.seq, t.role, t.text))
                        .collect::<Vec<_>>()
                )
            } else if let Some(p) = step.get("read") {
                json!(std::fs::read_to_string(p.as_str().unwrap_or("x")).ok())
            } else if let Some(w) = step.get("peer") {
                match workers::register_peer(w.as_str().unwrap_or("")) {
                    Ok(()) => json!("registered"),
                    Err(e) => json!({ "error": e }),
                }
            } else if step == "peers" {
                json!(
                    workers::peers()
                        .iter()
                        .map(|p| p.worker_id.clone())
                        .collect::<Vec<_>>()
                )
            } else if let Some(r) = step.get("loan_race") {
                loan_race(r)
            } else if let Some(p) = step.get("approve") {
                json!(format!(
                    "{:?}",
                    cairn_guest::request_approval(p.as_str().unwrap_or(""))
                ))
            } else {
                json!({ "error": "unknown step" })
            };
            cairn_guest::emit_custom("step", &json!({ "step": step, "result": result }))?;
            results.push(result);
        }
        Ok(Outcome::Finished(Value::Array(results).to_string()))
    }
}

/// Spawn a child lent `scope` and, while it starts, swap `scope` with
/// `link` (a link to `/` the test planted) by renames; wait for the child
/// and count what it answered. Every swap ends with the names as they were.
fn loan_race(r: &Value) -> Value {
    let (component, scope, link) = (
        r["component"].as_str().unwrap_or("echo"),
        r["scope"].as_str().unwrap_or("s"),
        r["link"].as_str().unwrap_or("L"),
    );
    let spare = format!("{scope}.spare");
    let mut counts = serde_json::Map::new();
    let mut bump = |k: String| {
        let n = counts.get(&k).and_then(Value::as_u64).unwrap_or(0);
        counts.insert(k, json!(n + 1));
    };
    for _ in 0..r["spawns"].as_u64().unwrap_or(10) {
        let child = match workers::spawn(component, "loan-probe", Some(scope)) {
            Ok(c) => c,
            Err(e) => {
                bump(format!(
                    "refused: {}",
                    e.chars().take(60).collect::<String>()
                ));
                continue;
            }
        };
        for _ in 0..r["swaps"].as_u64().unwrap_or(20) {
            let _ = std::fs::rename(scope, &spare);
            let _ = std::fs::rename(link, scope);
            let _ = std::fs::rename(scope, link);
            let _ = std::fs::rename(&spare, scope);
        }
        match workers::wait(&child.worker_id, 60_000) {
            Ok(s) => bump(s.text.or(s.error).unwrap_or_else(|| "nothing".into())),
            Err(e) => bump(format!("wait: {e}")),
        }
    }
    Value::Object(counts)
}

cairn_guest::controller!(Parent);
