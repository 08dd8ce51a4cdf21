//! `cairn bench update`: shadow-replay throughput — what a component
//! update checks for each session, several sessions at once (one per core,
//! as `cairn update --from --to` does) — beside `cairn replay`'s own
//! (one session after another), on the same sessions of ~100 events.

use super::Row;
use cairn_runtime::runtime::{ComponentRef, Runtime, RuntimeConfig, StartRun};
use std::path::Path;
use std::time::{Duration, Instant};

/// Sessions of one `echo` run whose prompt has this many words: about a
/// hundred journaled events each (a text delta per word, progress, the
/// run's lifecycle).
const WORDS: usize = 94;

/// Rows: shadow replay (sessions/s, events/s) beside `cairn replay`'s.
pub async fn run(
    dir: &Path,
    quick: bool,
    progress: &mut dyn FnMut(String),
) -> anyhow::Result<Vec<Row>> {
    let n = if quick { 8 } else { 64 };
    let home = dir.join("update-home");
    let mut config = RuntimeConfig::new(&home);
    config.sockets = false;
    let rt = Runtime::open(config).await?;
    let prompt: Vec<String> = (0..WORDS).map(|i| format!("word{i}")).collect();
    let prompt = prompt.join(" ");
    let mut sessions = Vec::new();
    for i in 0..n {
        if i % 16 == 0 {
            progress(format!("update: recording session {i} of {n}"));
        }
        let started = rt
            .start(StartRun::new(ComponentRef::BuiltIn("echo".into()), &prompt))
            .await?;
        rt.wait(started.run_id).await?;
        sessions.push(started.session_id);
    }
    let events = rt.last_seq(&sessions[0]).await?.0 as f64;
    progress(format!(
        "update: {n} sessions of {events} events; cairn replay's pass"
    ));
    // `cairn replay`: each session with the components its runs started with.
    let t = Instant::now();
    for s in &sessions {
        let report = rt.replay_offline(s).await?;
        anyhow::ensure!(
            report
                .iter()
                .all(|r| matches!(r, cairn_runtime::runtime::replay::RunReplay::Matched { .. })),
            "a replay diverged"
        );
    }
    let replay = t.elapsed();
    progress("update: the shadow replay's pass".into());
    // A bulk update's check: each session against a named component, one
    // per core at once.
    let against = ComponentRef::BuiltIn("echo".into());
    let t = Instant::now();
    use futures_util::StreamExt;
    let results: Vec<_> = futures_util::stream::iter(&sessions)
        .map(|s| {
            let against = &against;
            let rt = &rt;
            async move { rt.replay_offline_against(s, Some(against)).await }
        })
        .buffer_unordered(cairn_runtime::store::file::cores())
        .collect()
        .await;
    let shadow = t.elapsed();
    for r in results {
        anyhow::ensure!(
            r?.iter()
                .all(|r| matches!(r, cairn_runtime::runtime::replay::RunReplay::Matched { .. })),
            "a shadow replay diverged"
        );
    }
    rt.shutdown(Duration::from_secs(10)).await;
    let per_s = |d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    Ok(vec![
        Row::new(
            "update",
            format!(
                "shadow replay, {n} sessions of {events} events ({} at once)",
                cairn_runtime::store::file::cores()
            ),
            "sessions/s",
            per_s(shadow),
            "cairn replay, one session after another",
            per_s(replay),
            "higher",
        ),
        Row::new(
            "update",
            "shadow replay, events".to_string(),
            "events/s",
            per_s(shadow) * events,
            "cairn replay, events",
            per_s(replay) * events,
            "higher",
        ),
    ])
}
