//! The restart figures of `cairn bench runtime`: restoring interrupted
//! workers by replay, and opening a home of many sessions after a clean
//! stop, a crash in this boot and a crash in another.

use cairn_runtime::ids::{RunId, SessionId};
use cairn_runtime::journal::Journals;
use cairn_runtime::journal::event::{LifecycleEvent, Payload};
use cairn_runtime::runtime::{ComponentRef, Runtime, RuntimeConfig, StartRun};
use cairn_runtime::store::Store;
use cairn_runtime::store::file::FileStore;
use cairn_runtime::worker::Home;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Wall time to restore `n` interrupted workers: each has a `Started` run
/// with no terminal entry (as a SIGKILL leaves it); the runtime opens,
/// replays every one into a new generation, and they all finish.
pub(crate) async fn restore(dir: &Path, n: usize) -> anyhow::Result<f64> {
    let home = dir.join("restore-home");
    let digest =
        cairn_runtime::component::digest_of(cairn_examples::built_in("echo").expect("built in"));
    {
        let h = Home::open(&home)?;
        let store: Arc<dyn Store> = Arc::new(FileStore::new(h.clone()));
        let journals = Journals::new(store, 16);
        for i in 0..n {
            let session = SessionId::parse(&format!("interrupted-{i}"))?;
            let worker = h.create_published_worker(&session, Some(&digest), "bench")?;
            let journal = journals
                .create(&session, worker.metadata()?.active_segment)
                .await?;
            let generation = worker.reserve_generation(None)?.generation;
            let run = RunId::new();
            journal
                .append_batch(
                    Some(run),
                    vec![
                        Payload::Lifecycle(LifecycleEvent::GenerationReserved {
                            worker_id: worker.id(),
                            generation,
                        }),
                        Payload::Lifecycle(LifecycleEvent::Started {
                            component: digest.as_str().into(),
                            prompt: "restored".into(),
                            tools: None,
                            timeout_ms: None,
                            liveness: cairn_runtime::journal::event::Liveness {
                                policy: cairn_runtime::journal::event::LivenessPolicy::Continue,
                                grace_ms: 0,
                            },
                            generation,
                            continues: None,
                            resume_on_start: false,
                            resumes: None,
                            seed: 7,
                        }),
                    ],
                )
                .await?;
        }
    }
    let mut config = RuntimeConfig::new(&home);
    config.sockets = false;
    config.host.pool.instances = (n + 16) as u32;
    let t = Instant::now();
    let rt = Runtime::open(config).await?;
    let restored = rt.restored();
    anyhow::ensure!(restored.len() == n, "restored {} of {n}", restored.len());
    for run in restored {
        let facts = rt.wait(run).await?;
        anyhow::ensure!(
            facts.status == cairn_runtime::journal::event::RunStatus::Finished,
            "a restored run ended {:?}",
            facts.status
        );
    }
    Ok(t.elapsed().as_secs_f64() * 1000.0)
}

/// Process-free start → first trivial run ended, on a home of `n` ended
/// sessions: after a clean stop (the next owner finds `cairn.clean` and
/// skips the walk) and after a crash (no marker: the walk for crash remains
/// and interrupted runs reads every session). Milliseconds, (clean, crash).
pub(crate) async fn reopen(dir: &Path, n: usize) -> anyhow::Result<(f64, f64, f64)> {
    let home = dir.join("reopen-home");
    let mut config = RuntimeConfig::new(&home);
    config.sockets = false;
    {
        let rt = Runtime::open(config.clone()).await?;
        for chunk in (0..n).collect::<Vec<_>>().chunks(32) {
            let mut runs = Vec::new();
            for _ in chunk {
                let req = StartRun::new(ComponentRef::BuiltIn("echo".into()), "hi");
                runs.push(rt.start(req).await?.run_id);
            }
            for run in runs {
                rt.wait(run).await?;
            }
        }
        rt.shutdown(Duration::from_secs(10)).await;
    }
    let first = |config: RuntimeConfig| async move {
        let t = Instant::now();
        let rt = Runtime::open(config).await?;
        let req = StartRun::new(ComponentRef::BuiltIn("echo".into()), "first");
        let run = rt.start(req).await?.run_id;
        rt.wait(run).await?;
        Ok::<_, anyhow::Error>((rt, t.elapsed().as_secs_f64() * 1000.0))
    };
    let (rt, clean) = first(config.clone()).await?;
    // A crash: the lock goes with no marker left behind, and its record
    // names the dead owner (a clean release empties it). In this boot of
    // the kernel the live index says what to look at.
    let crashed = |boot: Option<String>| -> anyhow::Result<()> {
        let holder = cairn_runtime::home_lock::Holder {
            version: 1,
            pid: 1,
            command: "serve".into(),
            started_at_ms: 0,
            url: None,
            boot_id: None,
            boot,
        };
        let record = serde_json::to_string(&holder)? + "\n";
        std::fs::write(home.join("cairn.lock"), record)?;
        Ok(())
    };
    rt.release_home();
    crashed(cairn_runtime::home_lock::boot_id())?;
    let (rt, crash) = first(config.clone()).await?;
    // The same crash as after a reboot: the record names another boot, so
    // the next owner walks every worker.
    rt.release_home();
    crashed(Some("another-boot".into()))?;
    let (rt, rebooted) = first(config).await?;
    rt.shutdown(Duration::from_secs(10)).await;
    Ok((clean, crash, rebooted))
}
