//! The PostgreSQL store's append, beside raw `INSERT`s of the same lines on
//! the same server (one transaction per batch, the same table shape), at
//! batch 1, 16 and 256. Run with `cairn bench journal --store URL`; the
//! rows write two tables of their own in that database and drop them.

use super::Row;
use super::journal::{BATCHES, append_rate, events_for, sample};
use crate::ids::{SegmentId, SessionId};
use crate::store::Store;
use crate::store::postgres::PgStore;
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

/// The PostgreSQL rows; `progress` gets a line per step.
pub async fn run(
    url: &str,
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
    Ok(rows)
}
