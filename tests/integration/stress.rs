//! Every attack of the hostile suite, one at a time, each beside 100
//! well-behaved neighbours started with it: the attack ends its own run
//! (naming the limit it broke), all 100 neighbours finish with correct,
//! dense journals, and the host gives back what the attack took. The table
//! it prints (attack → how the run ended, time to end, host RSS / CPU / fd
//! deltas, neighbours) is the one quoted in the closing note.

use crate::common::*;
use crate::hostile::hostile;
use cairn_runtime::journal::event::{LifecycleEvent, RunStatus};
use cairn_runtime::runtime::{ComponentRef, StartRun};
use cairn_runtime::{AgentEvent, Payload, Seq};
use std::time::{Duration, Instant};

fn rss_kib() -> i64 {
    cairn_bench::runtime::rss_kib() as i64
}

/// This process's CPU time (user + system), in milliseconds.
fn cpu_ms() -> i64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are
    // the 12th and 13th of them.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<i64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    ticks * 10
}

fn fds() -> i64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as i64)
}

/// How a run ended, in a few words.
fn ending(events: &[cairn_runtime::SessionEvent]) -> String {
    match events.iter().rev().find_map(|e| match &e.payload {
        Payload::Lifecycle(l) if l.is_terminal() => Some(l.clone()),
        _ => None,
    }) {
        Some(LifecycleEvent::Failed { error }) => match error.details {
            Some(d) if d.get("limit").is_some() => {
                format!("{} {}", error.code, d["limit"].as_str().unwrap_or(""))
            }
            _ => error.code.to_string(),
        },
        Some(other) => format!("{other:?}")
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_lowercase(),
        None => "no terminal".into(),
    }
}

/// The measurement runs in a process of its own (this test binary again,
/// this one test), so no other test's memory, CPU or descriptors count
/// against the attacks.
#[test]
fn every_attack_beside_a_hundred_neighbours_measured() {
    if std::env::var_os("CAIRN_STRESS_CHILD").is_none() {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "stress::every_attack_beside_a_hundred_neighbours_measured",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("CAIRN_STRESS_CHILD", "1")
            .status()
            .unwrap();
        assert!(status.success(), "the measured stress run failed: {status}");
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(measured());
}

async fn measured() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    // Warm: compile both components, settle the allocator.
    run_to_end(&rt, hostile("trap"), None).await;
    // The 100 neighbours' sessions, made once and given a new run beside
    // every attack (so what the store keeps open for them is counted before
    // the first attack, not against it).
    let mut neighbours = Vec::new();
    for _ in 0..100 {
        let req = StartRun::new(ComponentRef::Path(fixture("counter")), "2 0");
        let (started, _, _) = run_to_end(&rt, req, None).await;
        neighbours.push(started.session_id);
    }
    let attacks = [
        // The neighbours alone: the baseline every other row compares with.
        ("none", ""),
        ("loop", "limit_exceeded wall_ms"),
        ("memory", "limit_exceeded memory_bytes"),
        ("flood", "limit_exceeded events_per_run"),
        ("giant", "limit_exceeded event_bytes"),
        // Refused at the write (insufficient-space): the guest gives up.
        ("disk", "controller_error"),
        ("nest", "limit_exceeded artifact_depth"),
        ("sparse", "controller_error"),
        ("inodes", "limit_exceeded artifact_files"),
        ("files", "limit_exceeded open_files"),
        ("logs", "limit_exceeded log_bytes"),
        ("wait", "limit_exceeded wall_ms"),
        ("decisions", "limit_exceeded events_per_run"),
        ("huge-answer", "limit_exceeded event_bytes"),
        ("huge-checkpoint", "limit_exceeded checkpoint_bytes"),
        ("stack", "trap"),
        ("trap", "trap"),
        ("panic", "trap"),
    ];
    let start_rss = rss_kib();
    let mut peak_all = start_rss;
    let mut rows = vec![
        "| attack | ended | time to end | RSS Δ at end (peak) | CPU | fd Δ after | neighbours |"
            .to_string(),
        "|---|---|---|---|---|---|---|".to_string(),
    ];
    for (attack, expected) in attacks {
        let (rss0, cpu0, fd0) = (rss_kib(), cpu_ms(), fds());
        let mut req = hostile(attack);
        // Under a hundred neighbours on two cores, an attack bounded by
        // anything but time gets room to reach that bound first.
        if !["loop", "wait"].contains(&attack) {
            req.limits.wall_ms = Some(20_000);
        }
        if ["flood", "decisions"].contains(&attack) {
            // Each entry is a sync: a lower ceiling ends it sooner.
            req.limits.events_per_run = Some(200);
        }
        let hostile_run = match attack {
            "none" => None,
            _ => Some(rt.start(req).await.unwrap()),
        };
        let mut good = Vec::new();
        for (i, session) in neighbours.iter().enumerate() {
            let n = 3 + i % 5;
            let mut req = StartRun::new(ComponentRef::Path(fixture("counter")), format!("{n} 0"));
            req.session = Some(session.clone());
            good.push((n, Instant::now(), rt.start(req).await.unwrap()));
        }
        let mut peak = rss0;
        let mut slowest = Duration::ZERO;
        for (n, began, started) in &good {
            let facts = tokio::time::timeout(Duration::from_secs(120), rt.wait(started.run_id))
                .await
                .unwrap_or_else(|_| panic!("{attack}: a neighbour did not finish"))
                .unwrap();
            slowest = slowest.max(began.elapsed());
            peak = peak.max(rss_kib());
            assert_eq!(facts.status, RunStatus::Finished, "{attack}: a neighbour");
            let items = rt.read(&started.session_id, Seq(0)).await.unwrap();
            let seqs: Vec<u64> = items.iter().map(|i| i.seq().0).collect();
            assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "dense");
            let texts: Vec<String> = items
                .iter()
                .filter_map(|i| i.event())
                .filter(|e| e.run_id == Some(started.run_id))
                .filter_map(|e| match &e.payload {
                    Payload::Agent(AgentEvent::TextDelta { text, .. }) => Some(text.clone()),
                    _ => None,
                })
                .collect();
            assert_eq!(texts, (1..=*n).map(|i| i.to_string()).collect::<Vec<_>>());
        }
        let Some(hostile_run) = hostile_run else {
            rows.push(format!(
                "| (neighbours only) | — | — | {:+} MiB ({:+} MiB) | {} ms | {:+} | 100/100 finished, slowest {} ms |",
                (rss_kib() - rss0) / 1024,
                (peak - rss0) / 1024,
                cpu_ms() - cpu0,
                fds() - fd0,
                slowest.as_millis(),
            ));
            continue;
        };
        let facts = tokio::time::timeout(Duration::from_secs(60), rt.wait(hostile_run.run_id))
            .await
            .unwrap_or_else(|_| panic!("the {attack} attack was not stopped"))
            .unwrap();
        let took = Duration::from_millis(facts.ended_at_ms.saturating_sub(facts.started_at_ms));
        peak = peak.max(rss_kib());
        peak_all = peak_all.max(peak);
        let events: Vec<cairn_runtime::SessionEvent> = rt
            .read(&hostile_run.session_id, Seq(0))
            .await
            .unwrap()
            .into_iter()
            .filter_map(|i| i.event().cloned())
            .collect();
        let ended = ending(&events);
        assert_eq!(facts.status, RunStatus::Failed, "{attack}");
        assert_eq!(ended, expected, "{attack}");
        // What the attack held is given back once it ended (the run's
        // worktree copy, descriptors, instance).
        tokio::time::sleep(Duration::from_millis(100)).await;
        let fd_after = fds() - fd0;
        assert!(
            fd_after < 32,
            "{attack}: {fd_after} descriptors more than before"
        );
        rows.push(format!(
            "| {attack} | {ended} | {} ms | {:+} MiB ({:+} MiB) | {} ms | {fd_after:+} | 100/100 finished, slowest {} ms |",
            took.as_millis(),
            (rss_kib() - rss0) / 1024,
            (peak - rss0) / 1024,
            cpu_ms() - cpu0,
            slowest.as_millis(),
        ));
    }
    for row in &rows {
        eprintln!("{row}");
    }
    eprintln!(
        "stress: RSS at start {} MiB, peak {} MiB, at end {} MiB",
        start_rss / 1024,
        peak_all / 1024,
        rss_kib() / 1024
    );
    assert!(
        peak_all < start_rss + 1024 * 1024,
        "RSS grew by more than 1 GiB: {start_rss} -> {peak_all} KiB"
    );
    // The host goes on.
    let (_, facts, _) = run_to_end(&rt, start_req("echo", "still fine"), None).await;
    assert_eq!(facts.status, RunStatus::Finished);
}
