//! 100 well-behaved workers run alongside every hostile one: all 100 finish
//! with correct, dense journals, the hostile ones fail on their own, the
//! host's RSS stays bounded, and nothing panics.

use crate::common::*;
use crate::hostile::hostile;
use cairn::journal::event::RunStatus;
use cairn::runtime::{ComponentRef, StartRun};
use cairn::{AgentEvent, Payload, Seq};

fn rss_kib() -> u64 {
    cairn::bench::runtime::rss_kib() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_workers_beside_every_attack() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let before = rss_kib();
    let attacks = [
        "loop", "memory", "flood", "giant", "disk", "logs", "wait", "stack", "trap", "panic",
    ];
    let mut hostile_runs = Vec::new();
    for attack in attacks {
        hostile_runs.push((attack, rt.start(hostile(attack)).await.unwrap()));
    }
    let mut good = Vec::new();
    for i in 0..100 {
        let req = StartRun::new(
            ComponentRef::Path(fixture("counter")),
            format!("{} 0", 20 + i % 10),
        );
        good.push((20 + i % 10, rt.start(req).await.unwrap()));
    }
    let mut peak = before;
    for (n, started) in &good {
        let facts =
            tokio::time::timeout(std::time::Duration::from_secs(120), rt.wait(started.run_id))
                .await
                .expect("every well-behaved run finishes")
                .unwrap();
        peak = peak.max(rss_kib());
        assert_eq!(facts.status, RunStatus::Finished);
        let items = rt.read(&started.session_id, Seq(0)).await.unwrap();
        let seqs: Vec<u64> = items.iter().map(|i| i.seq().0).collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "dense");
        let texts: Vec<String> = items
            .iter()
            .filter_map(|i| match &i.event()?.payload {
                Payload::Agent(AgentEvent::TextDelta { text }) => Some(text.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, (1..=*n).map(|i| i.to_string()).collect::<Vec<_>>());
    }
    for (attack, started) in &hostile_runs {
        let facts = rt.wait(started.run_id).await.unwrap();
        assert_eq!(facts.status, RunStatus::Failed, "{attack}");
    }
    peak = peak.max(rss_kib());
    eprintln!(
        "stress: RSS before {} MiB, peak {} MiB, after {} MiB (100 workers + {} attacks)",
        before / 1024,
        peak / 1024,
        rss_kib() / 1024,
        attacks.len()
    );
    assert!(
        peak < before + 1024 * 1024,
        "RSS grew by more than 1 GiB: {before} -> {peak} KiB"
    );
}
