//! Durable append: the memory and file stores at several batch sizes, beside
//! a raw `write` + `fdatasync` group-commit loop on the same disk and SQLite
//! WAL inserts (synchronous=FULL) of the same lines.

use super::Row;
use cairn_runtime::ids::{RunId, SegmentId, Seq, SessionId};
use cairn_runtime::journal::Journals;
use cairn_runtime::journal::event::{AgentEvent, Payload, SessionEvent};
use cairn_runtime::store::Store;
use cairn_runtime::store::file::FileStore;
use cairn_runtime::store::memory::MemoryStore;
use cairn_runtime::worker::Home;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

pub(super) const BATCHES: [usize; 3] = [1, 16, 256];

pub(super) fn events_for(batch: usize, quick: bool) -> usize {
    let syncs = if quick { 100 } else { 1000 };
    (syncs * batch).min(if quick { 20_000 } else { 200_000 })
}

pub(super) fn sample(session: &SessionId, seq: u64) -> SessionEvent {
    SessionEvent {
        session_id: session.clone(),
        segment_id: SegmentId::new(),
        run_id: Some(RunId::new()),
        seq: Seq(seq),
        at_ms: 1_700_000_000_000 + seq,
        payload: Payload::Agent(AgentEvent::TextDelta {
            text: format!("a typical text delta of a streaming answer, number {seq}"),
            by: None,
        }),
        facts: None,
        line: Default::default(),
    }
}

async fn store_rate(
    store: Arc<dyn Store>,
    home: &Home,
    name: &str,
    batch: usize,
    n: usize,
) -> anyhow::Result<f64> {
    let session = SessionId::parse(name)?;
    let segment = home
        .create_published_worker(&session, None, "bench")?
        .metadata()?
        .active_segment;
    append_rate(store, &session, segment, batch, n).await
}

/// Appends of `batch` entries through a new journal of `session` on
/// `store` (its segment laid out), until `n` are durable: entries/s.
pub(super) async fn append_rate(
    store: Arc<dyn Store>,
    session: &SessionId,
    segment: SegmentId,
    batch: usize,
    n: usize,
) -> anyhow::Result<f64> {
    let journals = Journals::new(store, 64);
    let journal = journals.create(session, segment).await?;
    let payload = sample(session, 0).payload;
    let start = Instant::now();
    let mut done = 0;
    while done < n {
        journal
            .append_batch(None, vec![payload.clone(); batch])
            .await?;
        done += batch;
    }
    Ok(done as f64 / start.elapsed().as_secs_f64())
}

/// Emits, one entry a call, through the journal's group commit on the file
/// store, until every one is durable.
async fn emit_rate(home: &Home, n: usize) -> anyhow::Result<f64> {
    let session = SessionId::parse("file-emits")?;
    let segment = home
        .create_published_worker(&session, None, "bench")?
        .metadata()?
        .active_segment;
    let store: Arc<dyn Store> = Arc::new(FileStore::new(home.clone()));
    let journals = Journals::new(store, 64);
    let journal = journals.create(&session, segment).await?;
    let payload = sample(&session, 0).payload;
    let start = Instant::now();
    for _ in 0..n {
        journal.append_seq(None, payload.clone()).await?;
    }
    journal.commit().await?;
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

fn raw_rate(dir: &Path, batch: usize, n: usize, line: &[u8]) -> anyhow::Result<f64> {
    let path = dir.join(format!("raw-{batch}.jsonl"));
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    let start = Instant::now();
    let mut done = 0;
    let mut buf = Vec::with_capacity(line.len() * batch);
    while done < n {
        buf.clear();
        for _ in 0..batch {
            buf.extend_from_slice(line);
        }
        file.write_all(&buf)?;
        file.sync_data()?;
        done += batch;
    }
    Ok(done as f64 / start.elapsed().as_secs_f64())
}

fn sqlite_rate(dir: &Path, batch: usize, n: usize, line: &str) -> anyhow::Result<f64> {
    let conn = rusqlite::Connection::open(dir.join(format!("sqlite-{batch}.db")))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute("CREATE TABLE journal (session TEXT NOT NULL, seq INTEGER NOT NULL, line TEXT NOT NULL, PRIMARY KEY (session, seq))", [])?;
    let start = Instant::now();
    let mut seq = 0i64;
    while (seq as usize) < n {
        let tx = conn.unchecked_transaction()?;
        {
            let mut stmt =
                tx.prepare_cached("INSERT INTO journal (session, seq, line) VALUES (?1, ?2, ?3)")?;
            for _ in 0..batch {
                seq += 1;
                stmt.execute(rusqlite::params!["bench", seq, line])?;
            }
        }
        tx.commit()?;
    }
    Ok(seq as f64 / start.elapsed().as_secs_f64())
}

/// Run the journal figures; `progress` gets a line per step.
pub async fn run(
    dir: &Path,
    quick: bool,
    progress: &mut dyn FnMut(String),
) -> anyhow::Result<Vec<Row>> {
    let home = Home::open(&dir.join("home"))?;
    let session = SessionId::parse("bench")?;
    let mut line = sample(&session, 1).line().as_bytes().to_vec();
    line.push(b'\n');
    let line_text = String::from_utf8(line.clone())?;
    let mut rows = Vec::new();
    for batch in BATCHES {
        let n = events_for(batch, quick);
        progress(format!(
            "journal: batch {batch}: {n} events each through raw fsync, SQLite, file store, memory store"
        ));
        let raw = raw_rate(dir, batch, n, &line)?;
        let sqlite = {
            let dir = dir.to_path_buf();
            let line = line_text.clone();
            tokio::task::spawn_blocking(move || sqlite_rate(&dir, batch, n, &line)).await??
        };
        let file: Arc<dyn Store> = Arc::new(FileStore::new(home.clone()));
        let file_rate = store_rate(file, &home, &format!("file-{batch}"), batch, n).await?;
        let memory: Arc<dyn Store> = Arc::new(MemoryStore::new(n + 16));
        let memory_rate = store_rate(memory, &home, &format!("memory-{batch}"), batch, n).await?;
        let raw_name = format!("raw write+fdatasync, batch {batch}");
        rows.push(Row::new(
            "journal",
            format!("file store append, batch {batch}"),
            "events/s",
            file_rate,
            raw_name.clone(),
            raw,
            "higher",
        ));
        rows.push(Row::new(
            "journal",
            format!("file store append, batch {batch}"),
            "events/s",
            file_rate,
            format!("SQLite WAL insert, batch {batch}"),
            sqlite,
            "higher",
        ));
        if batch == 1 {
            let emits = emit_rate(&home, n * 16).await?;
            rows.push(Row::new(
                "journal",
                "file journal emits, 1 a call (group commit)",
                "events/s",
                emits,
                "SQLite WAL insert, batch 1",
                sqlite,
                "higher",
            ));
        }
        rows.push(Row::new(
            "journal",
            format!("memory store append, batch {batch}"),
            "events/s",
            memory_rate,
            raw_name,
            raw,
            "higher",
        ));
    }
    let n = if quick { 20_000 } else { 200_000 };
    progress(format!(
        "journal: {n} lines encoded and parsed, with their checksums and without"
    ));
    rows.extend(checksum_rows(&session, n));
    Ok(rows)
}

/// What a line's checksum costs where a line is made (serialized, sealed)
/// and where it is read (checked, parsed), beside the same work without it,
/// side by side on the same entries: lines/s.
fn checksum_rows(session: &SessionId, n: usize) -> Vec<Row> {
    let events: Vec<SessionEvent> = (1..=n as u64).map(|seq| sample(session, seq)).collect();
    let rate = |start: Instant| n as f64 / start.elapsed().as_secs_f64();
    let mut best = [0f64; 4];
    for _ in 0..3 {
        let fresh = events.clone();
        let start = Instant::now();
        let bare: Vec<Arc<str>> = events
            .iter()
            .map(|e| serde_json::to_string(e).expect("serializes").into())
            .collect();
        best[0] = best[0].max(rate(start));
        let start = Instant::now();
        for e in &fresh {
            std::hint::black_box(e.line());
        }
        best[1] = best[1].max(rate(start));
        let sealed: Vec<&str> = fresh.iter().map(|e| e.line()).collect();
        let start = Instant::now();
        for line in &bare {
            std::hint::black_box(cairn_runtime::store::file::parse_line(line.as_bytes()).ok());
        }
        best[2] = best[2].max(rate(start));
        let start = Instant::now();
        for line in &sealed {
            std::hint::black_box(cairn_runtime::store::file::parse_line(line.as_bytes()).ok());
        }
        best[3] = best[3].max(rate(start));
    }
    vec![
        Row::new(
            "journal",
            "line encode with its checksum",
            "lines/s",
            best[1],
            "line encode without one",
            best[0],
            "higher",
        ),
        Row::new(
            "journal",
            "line read: checksum checked, then parsed",
            "lines/s",
            best[3],
            "line parse without a checksum",
            best[2],
            "higher",
        ),
    ]
}
