//! Resident memory per session: a waiting one (live, split by what holds
//! it, read off the process's mappings) and a parked one (nothing of it
//! live).

use cairn_runtime::runtime::{ComponentRef, Runtime, RuntimeConfig, StartRun};
use std::path::Path;
use std::time::{Duration, Instant};

/// This process's resident set, in KiB (0 where /proc is not there).
pub fn rss_kib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0.0)
}

/// One mapping of this process, from `/proc/self/smaps`.
struct Mapping {
    start: u64,
    size_kib: f64,
    rss_kib: f64,
    name: String,
}

fn mappings() -> Vec<Mapping> {
    let Ok(text) = std::fs::read_to_string("/proc/self/smaps") else {
        return Vec::new();
    };
    let mut out: Vec<Mapping> = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if let Some((start, _)) = first.split_once('-')
            && let Ok(start) = u64::from_str_radix(start, 16)
        {
            out.push(Mapping {
                start,
                size_kib: 0.0,
                rss_kib: 0.0,
                name: words.nth(4).unwrap_or("").to_string(),
            });
        } else if let Some(m) = out.last_mut() {
            let mut kib = || {
                words
                    .next()
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            match first {
                "Size:" => m.size_kib = kib(),
                "Rss:" => m.rss_kib = kib(),
                _ => {}
            }
        }
    }
    out
}

/// What the resident growth from `before` to `after` is made of, per
/// session of `n` (the split a profile of the mappings gives: a guest's
/// linear memory is its copy-on-write image (`/memfd:wasm-memory-image`)
/// over a slot of the pooling allocator's memory pool (one mapping of
/// `slots` × 2 memories of `memory_bytes`), each fiber stack is a 2 MiB
/// mapping of its own, the instance and table pools are one mapping each,
/// and malloc's heaps — `[heap]`, small mappings, mimalloc's GiB arenas —
/// hold the stores and the host's own state).
fn rss_split(
    before: &[Mapping],
    after: &[Mapping],
    n: usize,
    slots: f64,
    memory_bytes: f64,
) -> Vec<(&'static str, f64)> {
    let mut parts = [
        ("guest linear memory", 0.0),
        ("fiber stacks", 0.0),
        ("wasmtime instance and table pools", 0.0),
        ("host heap: stores, instance state, runtime records", 0.0),
        ("code and files", 0.0),
    ];
    const STACK_KIB: f64 = 2048.0;
    // mimalloc (the binary's allocator) reserves its arenas in whole GiB:
    // such a mapping is the heap, not one of wasmtime's pools (whose sizes
    // follow the pool's slots and were 357 MiB for 116 instances).
    const ARENA_KIB: f64 = 1024.0 * 1024.0;
    for m in after {
        let was = before
            .iter()
            .find(|b| b.start == m.start)
            .map_or(0.0, |b| b.rss_kib);
        // Growth only: a mapping that shrank meanwhile (pages another
        // runtime's pool handed back, under load) freed memory these
        // sessions did not hold; it is not a negative part of theirs.
        let grew = (m.rss_kib - was).max(0.0);
        let anonymous = m.name.is_empty();
        let part = if m.name.contains("wasm-memory-image")
            || (anonymous && m.size_kib * 1024.0 >= slots * memory_bytes)
        {
            0
        } else if anonymous && (STACK_KIB..STACK_KIB * 1.1).contains(&m.size_kib) {
            1
        } else if m.name == "[heap]"
            || (anonymous && (m.size_kib <= 128.0 * 1024.0 || m.size_kib % ARENA_KIB == 0.0))
        {
            3
        } else if anonymous {
            2
        } else {
            4
        };
        parts[part].1 += grew / (n.max(2) - 1) as f64;
    }
    parts.to_vec()
}

/// Wait until this process's RSS stopped moving (two readings 50 ms apart
/// within 64 KiB, or 3 s): memory an earlier figure freed goes back to the
/// system a little later (the allocator purges freed pages after a delay).
async fn settle_rss() {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut last = rss_kib();
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = rss_kib();
        if (now - last).abs() < 64.0 || Instant::now() >= deadline {
            return;
        }
        last = now;
    }
}

/// RSS per session waiting on a decision, the descriptors open then, and
/// what the RSS is made of.
pub(crate) async fn density(
    dir: &Path,
    n: usize,
    progress: &mut dyn FnMut(String),
) -> anyhow::Result<(f64, usize, Vec<(&'static str, f64)>)> {
    let mut config = RuntimeConfig::new(dir.join(format!("density-home-{n}")));
    config.sockets = false;
    config.host.pool.instances = (n + 16) as u32;
    // Every one of them live: idle eviction (`[runs] evict_idle_ms`) would
    // take the first ones out of memory while the last are still starting
    // (10,000 starts take longer than its 5 s), and the row would mix
    // live and evicted sessions; the parked row measures those.
    config.host.runs.evict_idle_ms = 0;
    let memory_bytes = config.host.limits.memory_bytes as f64;
    let rt = Runtime::open(config).await?;
    rt.add_component(&ComponentRef::BuiltIn("approval".into()))
        .await?;
    // One first, so the engine and caches are in the baseline.
    let first = rt
        .start(StartRun::new(
            ComponentRef::BuiltIn("approval".into()),
            "warm",
        ))
        .await?;
    while rt.pending_decisions(None).is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    settle_rss().await;
    let before_maps = mappings();
    let mut runs = vec![first.run_id];
    for i in 1..n {
        if i % 1000 == 0 {
            progress(format!("runtime: density, {i} of {n} started"));
        }
        runs.push(
            rt.start(StartRun::new(
                ComponentRef::BuiltIn("approval".into()),
                "wait",
            ))
            .await?
            .run_id,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    while rt.pending_decisions(None).len() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = rss_kib();
    let split = rss_split(&before_maps, &mappings(), n, (n + 16) as f64, memory_bytes);
    // The sum of the split, growth only: the process's RSS less the
    // baseline's, the same figure when nothing else moved, also counts
    // whatever memory an earlier figure's teardown handed back meanwhile
    // (it came out negative so, once, under the test suite's load).
    let per = split.iter().map(|(_, kib)| kib).sum::<f64>();
    progress(format!(
        "runtime: density, {n} waiting: per session {}",
        split
            .iter()
            .map(|(what, kib)| format!("{what} {kib:.1} KiB"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let fds = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0);
    progress(format!(
        "runtime: density, {n} waiting: RSS {:.0} MiB, {fds} open descriptors",
        after / 1024.0
    ));
    rt.shutdown(Duration::from_secs(60)).await;
    Ok((per, fds, split))
}

/// RSS per parked session: `n` sessions whose last run parked, opened by a
/// runtime that then lists them (nothing of theirs is live).
pub(crate) async fn parked(
    dir: &Path,
    n: usize,
    progress: &mut dyn FnMut(String),
) -> anyhow::Result<f64> {
    let home = dir.join("parked-home");
    let mut config = RuntimeConfig::new(&home);
    config.sockets = false;
    config.host.pool.instances = 32;
    {
        let rt = Runtime::open(config.clone()).await?;
        for i in 0..n {
            if i > 0 && i % 1000 == 0 {
                progress(format!("runtime: density, {i} of {n} parked"));
            }
            let mut req = StartRun::new(ComponentRef::BuiltIn("approval".into()), "park");
            req.liveness = cairn_runtime::journal::event::Liveness {
                policy: cairn_runtime::journal::event::LivenessPolicy::Park,
                grace_ms: 0,
            };
            let started = rt.start(req).await?;
            rt.wait(started.run_id).await?;
        }
        rt.shutdown(Duration::from_secs(10)).await;
    }
    let before = rss_kib();
    let rt = Runtime::open(config).await?;
    let sessions = rt.list_sessions().await?;
    anyhow::ensure!(
        sessions.len() == n,
        "{} of {n} parked sessions listed",
        sessions.len()
    );
    let after = rss_kib();
    Ok((after - before).max(0.0) / n as f64)
}
