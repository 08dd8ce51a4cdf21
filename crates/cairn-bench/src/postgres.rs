//! The PostgreSQL store's append, beside raw `INSERT`s of the same lines on
//! the same server (one transaction per batch, the same table shape), at
//! batch 1, 16 and 256. Run with `cairn bench journal --store URL`; the
//! rows write two tables of their own in that database and drop them.

use super::Row;
use super::journal::{BATCHES, append_rate, events_for, sample};
use cairn_runtime::ids::{SegmentId, SessionId};
use cairn_runtime::store::Store;
use cairn_store_postgres::PgStore;
use std::sync::Arc;
use std::time::Instant;

async fn store_rate(store: Arc<dyn Store>, batch: usize, n: usize) -> anyhow::Result<f64> {
    let session = SessionId::parse(&format!(
        "bench-pg-{batch}-{}",
        uuid::Uuid::new_v4().simple()
    ))?;
    append_rate(store, &session, SegmentId::new(), batch, n).await
}

async fn raw_rate(url: &str, batch: usize, n: usize, line: &str) -> anyhow::Result<f64> {
    let (mut client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    client
        .batch_execute(
            "DROP TABLE IF EXISTS cairn_bench_raw;
             CREATE TABLE cairn_bench_raw (session_id TEXT NOT NULL, seq BIGINT NOT NULL,
                segment_id TEXT NOT NULL, line TEXT NOT NULL, PRIMARY KEY (session_id, seq))",
        )
        .await?;
    let segment = SegmentId::new().to_string();
    let start = Instant::now();
    let mut seq = 0i64;
    while (seq as usize) < n {
        let seqs: Vec<i64> = (seq + 1..=seq + batch as i64).collect();
        let segments = vec![segment.as_str(); batch];
        let lines = vec![line; batch];
        let tx = client.transaction().await?;
        tx.execute(
            "INSERT INTO cairn_bench_raw (session_id, seq, segment_id, line)
             SELECT 'bench', s, g, l FROM unnest($1::BIGINT[], $2::TEXT[], $3::TEXT[]) AS t(s, g, l)",
            &[&seqs, &segments, &lines],
        )
        .await?;
        tx.commit().await?;
        seq += batch as i64;
    }
    let rate = seq as f64 / start.elapsed().as_secs_f64();
    client.batch_execute("DROP TABLE cairn_bench_raw").await?;
    Ok(rate)
}

/// The lease time the failover row runs with.
const FAILOVER_TTL_MS: u64 = 2_000;

/// Follow until an entry of type `kind`.
async fn until(
    follower: &mut cairn_runtime::runtime::Observation,
    kind: &str,
) -> anyhow::Result<()> {
    let needle = format!("\"type\":\"{kind}\"");
    loop {
        match follower.next().await {
            Some(Ok(cairn_runtime::journal::Delivery::Event(e))) if e.line().contains(&needle) => {
                return Ok(());
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => anyhow::bail!("following the session: {e}"),
            None => anyhow::bail!("the follower ended"),
        }
    }
}

/// Failover: a `cairn serve` child holds a session whose run waits on a
/// decision; it is killed with SIGKILL; an instance in this process (on the
/// same database) follows the session through the relay and takes it over
/// when the lease expires. Kill → first entry the new holder writes, beside
/// the lease time (what no failover can beat).
async fn failover(
    url: &str,
    scratch: &std::path::Path,
    progress: &mut dyn FnMut(String),
) -> anyhow::Result<Row> {
    use cairn_runtime::runtime::{AttachSpec, Runtime, RuntimeConfig};
    progress(format!(
        "postgres: failover: kill -9 a holder, lease {FAILOVER_TTL_MS} ms"
    ));
    let toml = format!("[store]\nlease_ttl_ms = {FAILOVER_TTL_MS}\n");
    let dir = scratch.join(format!("failover-{}", uuid::Uuid::new_v4().simple()));
    let (home_a, home_b) = (dir.join("a"), dir.join("b"));
    for h in [&home_a, &home_b] {
        std::fs::create_dir_all(h)?;
        std::fs::write(h.join("cairn.toml"), &toml)?;
    }
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args([
            "serve",
            "--insecure-local",
            "--listen",
            "127.0.0.1:0",
            "--store",
            url,
        ])
        .arg("--home")
        .arg(&home_a)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let killed = async {
        let mut line = String::new();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let mut reader = std::io::BufReader::new(stdout);
        tokio::task::block_in_place(|| std::io::BufRead::read_line(&mut reader, &mut line))?;
        let base = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .ok_or_else(|| anyhow::anyhow!("the holder did not start"))?
            .to_string();
        let session = format!("failover-{}", uuid::Uuid::new_v4().simple());
        let started = reqwest::Client::new()
            .post(format!("{base}/v1/runs"))
            .json(
                &serde_json::json!({"component": "approval", "prompt": "wait", "session": session}),
            )
            .send()
            .await?;
        anyhow::ensure!(started.status().is_success(), "the holder refused the run");
        let config = RuntimeConfig::load(&home_b, None)?;
        let config = RuntimeConfig {
            host: cairn_runtime::config::HostConfig {
                store: cairn_runtime::config::SharedStoreConfig {
                    url: Some(url.to_string()),
                    ..config.host.store.clone()
                },
                ..config.host.clone()
            },
            ..config
        };
        let b = Runtime::builder(config)
            .shared_store(cairn_store_postgres::Postgres)
            .open()
            .await?;
        b.join_cluster("http://127.0.0.1:9").await?;
        let session = cairn_runtime::ids::SessionId::parse(&session)?;
        let mut follower = b
            .attach(&session, AttachSpec::collecting(cairn_runtime::ids::Seq(0)))
            .await?;
        // Until the run asks: the holder is mid-run.
        until(&mut follower, "decision_requested").await?;
        let _ = child.kill();
        let at = Instant::now();
        // The new holder's first entry: the restore's reservation.
        until(&mut follower, "generation_reserved").await?;
        let took = at.elapsed();
        b.shutdown(std::time::Duration::from_secs(5)).await;
        Ok::<_, anyhow::Error>(took)
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let took = killed?;
    Ok(Row::new(
        "postgres",
        "failover: kill -9 of the holder → first entry on the new holder",
        "ms",
        took.as_secs_f64() * 1000.0,
        format!("the lease time ({FAILOVER_TTL_MS} ms)"),
        FAILOVER_TTL_MS as f64,
        "lower",
    ))
}

/// The PostgreSQL rows; `progress` gets a line per step.
pub async fn run(
    url: &str,
    scratch: &std::path::Path,
    quick: bool,
    progress: &mut dyn FnMut(String),
) -> anyhow::Result<Vec<Row>> {
    let store = Arc::new(PgStore::connect(url, "bench").await?);
    let session = SessionId::parse("bench")?;
    let line = serde_json::to_string(&sample(&session, 1))?;
    let mut rows = Vec::new();
    for batch in BATCHES {
        // A commit is a round trip and a WAL flush: a tenth of the file
        // figures' events is plenty.
        let n = (events_for(batch, quick) / 10).max(batch * 20);
        progress(format!(
            "postgres: batch {batch}: {n} events through the store and through raw INSERTs"
        ));
        let raw = raw_rate(url, batch, n, &line).await?;
        let stored = store_rate(store.clone(), batch, n).await?;
        rows.push(Row::new(
            "postgres",
            format!("postgres store append, batch {batch}"),
            "events/s",
            stored,
            format!("raw INSERT, a transaction per batch of {batch}"),
            raw,
            "higher",
        ));
    }
    rows.push(failover(url, scratch, progress).await?);
    Ok(rows)
}
