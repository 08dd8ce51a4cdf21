//! Legacy migration: a generated `process-global-v0` tree of N workers of M
//! events each migrated into a fresh home, beside `cp -r` of the same tree
//! followed by `sync`, on the same disk, in the same run.

use super::Row;
use cairn_runtime::ids::{SegmentId, Seq, SessionId, WorkerId};
use cairn_runtime::journal::event::{AgentEvent, LifecycleEvent, Payload, SessionEvent};
use cairn_runtime::worker::Home;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// Write a legacy tree of `workers` workers with `events` entries each.
/// The byte count written.
pub fn write_tree(root: &Path, workers: usize, events: usize) -> anyhow::Result<u64> {
    std::fs::create_dir_all(root.join("metadata"))?;
    let mut catalog = Vec::with_capacity(workers);
    let mut total = 0u64;
    for w in 0..workers {
        let worker = WorkerId::new();
        let session = SessionId::parse(&format!("bench-{w}"))?;
        let segment = SegmentId::new();
        let dir = root
            .join("sessions")
            .join(session.as_str())
            .join("segments");
        std::fs::create_dir_all(&dir)?;
        let mut buf = Vec::with_capacity(events * 200);
        for seq in 1..=events as u64 {
            let payload = match seq {
                1 => Payload::Lifecycle(LifecycleEvent::SegmentCreated {
                    segment_id: segment,
                    compacted_from: None,
                    forked_from: None,
                }),
                _ => Payload::Agent(AgentEvent::TextDelta {
                    text: format!("a typical text delta of a streaming answer, number {seq}"),
                    by: None,
                }),
            };
            let event = SessionEvent {
                session_id: session.clone(),
                segment_id: segment,
                run_id: None,
                seq: Seq(seq),
                at_ms: 1_700_000_000_000 + seq,
                payload,
                facts: None,
                line: Default::default(),
            };
            serde_json::to_writer(&mut buf, &event)?;
            buf.push(b'\n');
        }
        total += buf.len() as u64;
        std::fs::File::create(dir.join(format!("{segment}.jsonl")))?.write_all(&buf)?;
        std::fs::File::create(dir.join(format!("{segment}.trace.jsonl")))?;
        let meta = serde_json::json!({
            "worker_id": worker, "session_id": session, "active_segment": segment,
            "segments": [segment], "children": [], "peers": [],
        });
        std::fs::write(
            root.join("metadata").join(format!("{worker}.json")),
            meta.to_string(),
        )?;
        catalog.push(serde_json::json!({"worker_id": worker, "workspace": "bench"}));
    }
    let doc = serde_json::json!({"format": "process-global-v0", "workers": catalog});
    std::fs::write(root.join("catalog.json"), doc.to_string())?;
    Ok(total)
}

fn sync_all() -> anyhow::Result<()> {
    let status = std::process::Command::new("sync").status()?;
    anyhow::ensure!(status.success(), "sync failed");
    Ok(())
}

/// Run the migration figure; `progress` gets a line per step.
pub fn run(dir: &Path, quick: bool, progress: &mut dyn FnMut(String)) -> anyhow::Result<Vec<Row>> {
    let (workers, events) = if quick { (100, 100) } else { (1000, 1000) };
    progress(format!(
        "migrate: writing a legacy tree of {workers} workers × {events} events"
    ));
    let root = dir.join("legacy");
    let bytes = write_tree(&root, workers, events)?;
    progress(format!(
        "migrate: {:.1} MB of journal; cp -r + sync, then cairn migrate",
        bytes as f64 / 1e6
    ));
    // Alternate the two, a few rounds, and keep each one's best: the
    // disk's background flushing makes any single figure noisy.
    let rounds = if quick { 1 } else { 3 };
    let (mut copy, mut migrate) = (f64::MAX, f64::MAX);
    for round in 0..rounds {
        sync_all()?;
        let start = Instant::now();
        let status = std::process::Command::new("cp")
            .arg("-r")
            .arg(&root)
            .arg(dir.join(format!("copy-{round}")))
            .status()?;
        anyhow::ensure!(status.success(), "cp -r failed");
        sync_all()?;
        copy = copy.min(start.elapsed().as_secs_f64());
        sync_all()?;
        let home = Home::open(&dir.join(format!("migrated-{round}")))?;
        let start = Instant::now();
        let report = cairn_runtime::migrate::migrate(
            &home,
            &root,
            &cairn_runtime::migrate::Options::default(),
            &mut |done, total| {
                if done > 0 && done % (total / 4).max(1) == 0 {
                    progress(format!(
                        "migrate: round {}: {done}/{total} workers",
                        round + 1
                    ));
                }
            },
        )
        .map_err(anyhow::Error::msg)?;
        migrate = migrate.min(start.elapsed().as_secs_f64());
        anyhow::ensure!(
            report.migrated == workers && report.failed == 0,
            "the bench migration did not copy every worker: {}",
            report.summary()
        );
        progress(format!(
            "migrate: round {}: cp -r + sync {copy:.2} s, cairn migrate {migrate:.2} s (best so far)",
            round + 1
        ));
    }
    Ok(vec![Row::new(
        "migrate",
        format!("cairn migrate, {workers} workers × {events} events"),
        "s",
        migrate,
        "cp -r + sync of the same tree",
        copy,
        "lower",
    )])
}
