//! Runtime figures: the emit path against a raw import call, run start
//! against one fsync, RSS per waiting session, fan-out, replay reads.

use super::Row;
/// This process's resident set (here, where the stress test has always
/// found it).
pub use super::memory::rss_kib;
use super::memory::{density, parked};
use async_trait::async_trait;
use cairn_runtime::component::{
    Answer, Components, DecisionRequest, EmitDone, EmitRefusal, HostFailure, JournalClock, RunHost,
    RunStart, Sandbox, Turn,
};
use cairn_runtime::ids::{Generation, RunId, Seq, SessionId, WorkerId};
use cairn_runtime::journal::event::{AgentEvent, LifecycleEvent, Payload};
use cairn_runtime::journal::{Delivery, Journals};
use cairn_runtime::runtime::{ComponentRef, Runtime, RuntimeConfig, StartRun, StoreKind};
use cairn_runtime::store::file::FileStore;
use cairn_runtime::store::memory::MemoryStore;
use cairn_runtime::store::{JournalStore, Store};
use cairn_runtime::worker::Home;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A host whose imports do nothing: the cost of the import call itself.
/// Its emits take the host's fastest way (no future), as the runtime's do.
struct NullHost(AtomicU64);

#[async_trait]
impl RunHost for NullHost {
    async fn emit(&self, _event: AgentEvent) -> Result<Result<u64, EmitRefusal>, HostFailure> {
        Ok(Ok(self.0.fetch_add(1, Ordering::Relaxed)))
    }
    fn try_emit(&self, _event: AgentEvent) -> Result<EmitDone, AgentEvent> {
        Ok(Ok(Ok(self.0.fetch_add(1, Ordering::Relaxed))))
    }
    async fn wait(&self, _request: DecisionRequest) -> Result<Answer, HostFailure> {
        Ok(Answer::TimedOut)
    }
    async fn history(&self, _limit: u32) -> Result<Vec<Turn>, HostFailure> {
        Ok(vec![])
    }
    fn should_trap(&self) -> bool {
        false
    }
    fn limit_broken(&self, _limit: &str, _value: u64, _max: u64) {}
}

/// The bench component compiled once, for every raw call of a run.
struct RawCall {
    components: Components,
    prepared: Arc<cairn_runtime::component::Prepared>,
}

impl RawCall {
    async fn new() -> anyhow::Result<Self> {
        let components = Components::new(0, 256 << 20, None)?;
        let prepared = components
            .prepare(cairn_examples::built_in("bench-emit").expect("built in"))
            .await?;
        Ok(RawCall {
            components,
            prepared,
        })
    }
}

async fn raw_import_ns(raw: &RawCall, dir: &Path, n: u64) -> anyhow::Result<f64> {
    let artifacts = dir.join("null-artifacts");
    std::fs::create_dir_all(&artifacts)?;
    let host = Arc::new(NullHost(AtomicU64::new(1)));
    let sandbox = Sandbox {
        loan: None,
        artifacts,
        stdout: dir.join("null.log"),
        stderr: dir.join("null.log"),
        clock: JournalClock::new(0),
        limits: cairn_runtime::limits::Limits {
            events_per_run: u64::MAX,
            ..Default::default()
        },
        host: host.clone(),
        meter: None,
    };
    let start = RunStart {
        run_id: RunId::new(),
        session_id: SessionId::new(),
        worker_id: WorkerId::new(),
        generation: Generation(1),
        prompt: n.to_string(),
        continues: None,
        checkpoint: None,
        seed: 1,
        tools: None,
    };
    let t = Instant::now();
    raw.components
        .run(&raw.prepared, sandbox, start)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(t.elapsed().as_nanos() as f64 / n as f64)
}

async fn emit_path_ns(dir: &Path, n: u64, memory: bool, round: usize) -> anyhow::Result<f64> {
    let name = if memory {
        "emit-home"
    } else {
        "emit-file-home"
    };
    let mut config = RuntimeConfig::new(dir.join(format!("{name}-{round}")));
    if memory {
        config.store = StoreKind::Memory { window: 1 << 20 };
    }
    config.sockets = false;
    config.host.limits.events_per_run = u64::MAX;
    config.host.pool.instances = 16;
    let rt = Runtime::open(config).await?;
    rt.add_component(&ComponentRef::BuiltIn("bench-emit".into()))
        .await?;
    let (session, _) = rt.create_session(None).await?;
    let mut sub = rt.subscribe(&session, Seq(0)).await?;
    let t = Instant::now();
    let mut req = StartRun::new(ComponentRef::BuiltIn("bench-emit".into()), n.to_string());
    req.session = Some(session);
    rt.start(req).await?;
    let mut received = 0u64;
    while let Some(d) = sub.next().await {
        if let Delivery::Event(e) = d? {
            if matches!(e.payload, Payload::Agent(_)) {
                received += 1;
            }
            if e.facts.is_some() {
                break;
            }
        }
    }
    let per = t.elapsed().as_nanos() as f64 / n as f64;
    anyhow::ensure!(
        received == n,
        "the subscriber received {received} of {n} events"
    );
    // Nothing of this round's runs on into the next one's.
    rt.shutdown(Duration::from_secs(60)).await;
    Ok(per)
}

/// The round whose `ratio` is the median of `rounds` (sorted by it).
fn median_by<T: Copy>(rounds: &mut [T], ratio: impl Fn(&T) -> f64) -> T {
    rounds.sort_by(|a, b| ratio(a).total_cmp(&ratio(b)));
    rounds[rounds.len() / 2]
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// What [`run_start`] measured: the start's p50 and p99, the mean syncs
/// on its path, and the p50 of one raw `fdatasync` in a loop of nothing
/// else and of one in a start's place (after a session's creation, as
/// the start's own is); times in µs.
struct StartFigures {
    p50: f64,
    p99: f64,
    syncs: f64,
    fsync_loop: f64,
    /// The raw loop's own p99: one sync's tail, beside the start's.
    fsync_loop_p99: f64,
    fsync_in_place: f64,
}

async fn run_start(dir: &Path, k: usize) -> anyhow::Result<StartFigures> {
    let mut config = RuntimeConfig::new(dir.join("start-home"));
    config.sockets = false;
    config.host.pool.instances = 16;
    let rt = Runtime::open(config).await?;
    // `bench-emit` with prompt 0 journals nothing of its own: every sync of
    // its run is the start path's, but the one of the terminal entry.
    let component = ComponentRef::BuiltIn("bench-emit".into());
    rt.add_component(&component).await?;
    let in_place_path = dir.join("one-fsync-in-place");
    // Started from a task on the runtime's workers, as every caller of
    // `start` is (an HTTP handler, the queue, a delegation): a caller on
    // a thread of its own pays a wake-up of a parked worker to begin the
    // run and another to hear of it, which no start in a server does.
    let starts = async move {
        let mut times = Vec::new();
        let mut in_place = Vec::new();
        let mut syncs = 0u64;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&in_place_path)?;
        for i in 0..2 * k {
            let (session, _) = rt.create_session(None).await?;
            // Every other session, one raw fdatasync where its start would
            // be: what one sync costs just there on this disk (after the
            // creation's, with the machine in the state a start finds it).
            if i % 2 == 1 {
                in_place.push(append_and_sync_us(&mut file)?);
                continue;
            }
            // Followed from its head, as a chat call or an observer of the
            // session follows the run it starts: what is measured is the
            // start, not a read of the session's creation entry.
            let head = rt.last_seq(&session).await?;
            let mut sub = rt.subscribe(&session, head).await?;
            let mut req = StartRun::new(component.clone(), "0");
            req.session = Some(session);
            let s0 = cairn_runtime::fsutil::syncs();
            let t = Instant::now();
            let started = rt.start(req).await?;
            loop {
                match sub.next().await {
                    Some(Ok(Delivery::Event(e)))
                        if matches!(
                            e.payload,
                            Payload::Lifecycle(LifecycleEvent::Started { .. })
                        ) =>
                    {
                        break;
                    }
                    Some(Ok(_)) => {}
                    _ => anyhow::bail!("the journal closed before Started"),
                }
            }
            times.push(t.elapsed().as_secs_f64() * 1e6);
            rt.wait(started.run_id).await?;
            syncs += (cairn_runtime::fsutil::syncs() - s0).saturating_sub(1);
        }
        Ok::<_, anyhow::Error>((times, in_place, syncs))
    };
    let (mut times, mut in_place, syncs) = tokio::spawn(starts).await??;
    times.sort_by(|a, b| a.total_cmp(b));
    in_place.sort_by(|a, b| a.total_cmp(b));
    // One raw fdatasync of a small append on the same disk, for the baseline.
    let path = dir.join("one-fsync");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    let mut raw = (0..k)
        .map(|_| append_and_sync_us(&mut file))
        .collect::<std::io::Result<Vec<_>>>()?;
    raw.sort_by(|a, b| a.total_cmp(b));
    Ok(StartFigures {
        p50: percentile(&times, 0.5),
        p99: percentile(&times, 0.99),
        syncs: syncs as f64 / k as f64,
        fsync_loop: percentile(&raw, 0.5),
        fsync_loop_p99: percentile(&raw, 0.99),
        fsync_in_place: percentile(&in_place, 0.5),
    })
}

/// One small line appended to `file` and `fdatasync`ed: how long, in µs.
fn append_and_sync_us(file: &mut std::fs::File) -> std::io::Result<f64> {
    use std::io::Write;
    let t = Instant::now();
    file.write_all(b"{\"a\":1}\n")?;
    file.sync_data()?;
    Ok(t.elapsed().as_secs_f64() * 1e6)
}

/// CPU time the calling thread has used.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// A writer appending `events` entries to a session `subscribers` follow
/// (one of them never reads): (its rate, wall clock, in entries/s; its own
/// CPU time per entry, in ns — the bench's caller drives it on its own
/// thread, so the subscribers' work on the runtime's workers is not in it).
async fn fan_out(subscribers: usize, events: usize) -> anyhow::Result<(f64, f64)> {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(events + 16));
    let journals = Journals::new(store.clone(), 1024);
    let session = SessionId::parse("fan-out")?;
    store
        .create(&session, cairn_runtime::ids::SegmentId::new())
        .await?;
    let journal = journals.open(&session).await?;
    let mut tasks = Vec::new();
    for i in 0..subscribers {
        let mut sub = journal.subscribe(Seq(0));
        let slow = i == 0;
        tasks.push(tokio::spawn(async move {
            if slow {
                // One deliberately slow subscriber: it never reads.
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            while let Some(Ok(_)) = sub.next().await {}
        }));
    }
    let payload = Payload::Agent(AgentEvent::TextDelta {
        text: "fan-out".into(),
        by: None,
    });
    let t = Instant::now();
    let cpu = thread_cpu();
    for _ in 0..events {
        journal.append(None, payload.clone()).await?;
    }
    let cpu = (thread_cpu() - cpu).as_nanos() as f64 / events as f64;
    let rate = events as f64 / t.elapsed().as_secs_f64();
    for task in tasks {
        task.abort();
    }
    Ok((rate, cpu))
}

/// Replay reads of one `events`-entry session, and of the same session with
/// its lines' checksums taken out (as lines written before checksums read),
/// alternating, the best of five each: (checksummed, bare) entries/s.
async fn replay_read(dir: &Path, events: usize) -> anyhow::Result<(f64, f64)> {
    let home = Home::open(&dir.join("replay-home"))?;
    let sealed = SessionId::parse("replay")?;
    let bare = SessionId::parse("replay-bare")?;
    for session in [&sealed, &bare] {
        let store: Arc<dyn Store> = Arc::new(FileStore::new(home.clone()));
        let worker = home.create_published_worker(session, None, "bench")?;
        let segment = worker.metadata()?.active_segment;
        let journals = Journals::new(store, 64);
        let journal = journals.create(session, segment).await?;
        let payload = Payload::Agent(AgentEvent::TextDelta {
            text: "a typical short text delta".into(),
            by: None,
        });
        let mut left = events;
        while left > 0 {
            let n = left.min(4096);
            journal.append_batch(None, vec![payload.clone(); n]).await?;
            left -= n;
        }
        drop((journal, journals));
        if session == &bare {
            let path = worker
                .path()
                .join(format!("session/segments/{segment}.jsonl"));
            let text = std::fs::read_to_string(&path)?;
            let mut out = String::with_capacity(text.len());
            for line in text.lines() {
                out.push_str(&cairn_runtime::journal::event::unsealed(line));
                out.push('\n');
            }
            std::fs::write(&path, out)?;
        }
    }
    let read = |session: SessionId| {
        let store = FileStore::new(home.clone());
        async move {
            let t = Instant::now();
            let items = store.read(&session, Seq(0), usize::MAX).await?;
            anyhow::ensure!(items.len() > events, "read {} of {events}", items.len());
            Ok::<f64, anyhow::Error>(items.len() as f64 / t.elapsed().as_secs_f64())
        }
    };
    let (mut with, mut without) = (0f64, 0f64);
    for _ in 0..5 {
        with = with.max(read(sealed.clone()).await?);
        without = without.max(read(bare.clone()).await?);
    }
    Ok((with, without))
}

/// Run the runtime figures.
pub async fn run(
    dir: &Path,
    quick: bool,
    only: &super::Only,
    progress: &mut dyn FnMut(String),
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    if only.wants("emit") {
        let n = if quick { 20_000 } else { 200_000 };
        let rounds = if quick { 3 } else { 5 };
        progress(format!(
            "runtime: emit path, {n} events through the runtime and through a null import, \
             {rounds} rounds"
        ));
        // The raw call and both paths are measured side by side in each
        // round (this VM's speed drifts by more than the figure from one
        // minute to the next): each path right between two raw calls,
        // beside their mean (the raw call alone moves by a third from one
        // run to the next), and each row is the round with its median
        // ratio.
        let raw_call = RawCall::new().await?;
        let mut measured: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            let mut before = raw_import_ns(&raw_call, dir, n).await?;
            for (i, memory) in [true, false].into_iter().enumerate() {
                let path = emit_path_ns(dir, n, memory, round).await?;
                let after = raw_import_ns(&raw_call, dir, n).await?;
                measured[i].push((path, (before + after) / 2.0));
                before = after;
            }
        }
        for (mut pairs, figure) in measured.into_iter().zip([
            "emit → memory journal → 1 subscriber",
            "emit → file journal (durable) → 1 subscriber",
        ]) {
            let (path, raw) = median_by(&mut pairs, |&(path, raw)| path / raw);
            rows.push(Row::new(
                "runtime",
                figure,
                "ns/event",
                path,
                "raw import call (null host)",
                raw,
                "lower",
            ));
        }
    }

    if only.wants("start") {
        let k = if quick { 20 } else { 200 };
        progress(format!(
            "runtime: run start, {k} warm starts on the file store"
        ));
        let figures = run_start(dir, k).await?;
        let target = figures.fsync_loop + 100.0;
        for (name, v) in [("p50", figures.p50), ("p99", figures.p99)] {
            rows.push(Row::new(
                "runtime",
                format!("run start → Started, {name}"),
                "µs",
                v,
                "one fdatasync + 100 µs",
                target,
                "lower",
            ));
        }
        // The p99 beside one sync's own p99 (the raw loop's tail is half
        // again its p50 on this disk): how much of the start's tail is
        // its own rather than the disk's.
        rows.push(Row::new(
            "runtime",
            "run start → Started, p99",
            "µs",
            figures.p99,
            "one fdatasync's p99 + 100 µs",
            figures.fsync_loop_p99 + 100.0,
            "lower",
        ));
        // The same p50 beside one sync measured where a start's is, in
        // every other session: how much of the gap is the disk's state
        // after a creation rather than the start's own work.
        rows.push(Row::new(
            "runtime",
            "run start → Started, p50",
            "µs",
            figures.p50,
            "one fdatasync in a start's place + 100 µs",
            figures.fsync_in_place + 100.0,
            "lower",
        ));
        rows.push(Row::new(
            "runtime",
            "fsyncs on the start path (mean)",
            "fsyncs",
            figures.syncs,
            "target",
            1.0,
            "lower",
        ));
    }

    if only.wants("density") {
        let sizes: &[usize] = if quick { &[100] } else { &[1_000, 10_000] };
        let limit = cairn_runtime::fsutil::raise_open_file_limit().unwrap_or(1024) as usize;
        for &waiting in sizes {
            // A waiting run holds its preopen; the file store keeps at most
            // MAX_OPEN_SESSIONS sessions' files open (four each).
            let store = 4 * waiting.min(cairn_runtime::store::file::MAX_OPEN_SESSIONS);
            let needed = 64 + waiting + waiting / 8 + store;
            if needed > limit {
                progress(format!(
                    "runtime: density, {waiting} waiting: not measured — about {needed} open \
                     descriptors needed, and the limit could be raised only to {limit}"
                ));
                continue;
            }
            progress(format!(
                "runtime: density, {waiting} sessions each waiting on a decision"
            ));
            let (per, fds, split) = density(dir, waiting, progress).await?;
            progress(format!(
                "runtime: density, {waiting} waiting: {:.2} descriptors a session",
                fds as f64 / waiting as f64
            ));
            rows.push(Row::new(
                "runtime",
                format!("RSS per waiting session ({waiting} live)"),
                "KiB",
                per,
                "1 GiB / 10,000 sessions (target)",
                1024.0 * 1024.0 / 10_000.0,
                "lower",
            ));
            // The split, each part beside the whole.
            for (what, kib) in split {
                rows.push(Row::new(
                    "runtime",
                    format!("  of which {what} ({waiting} live)"),
                    "KiB",
                    kib,
                    "RSS per waiting session",
                    per,
                    "lower",
                ));
            }
        }
    }

    if only.wants("parked") {
        let n_parked = if quick { 200 } else { 10_000 };
        progress(format!("runtime: density, {n_parked} parked sessions"));
        let per_parked = parked(dir, n_parked, progress).await?;
        rows.push(Row::new(
            "runtime",
            format!("RSS per parked session ({n_parked} listed)"),
            "KiB",
            per_parked,
            "1 GiB / 10,000 sessions (target)",
            1024.0 * 1024.0 / 10_000.0,
            "lower",
        ));
    }

    if only.wants("restore") {
        let n_restore = if quick { 50 } else { 1_000 };
        progress(format!(
            "runtime: restore, {n_restore} interrupted workers replayed and finished"
        ));
        let ms = super::restart::restore(dir, n_restore).await?;
        rows.push(Row::new(
            "runtime",
            format!("restore {n_restore} interrupted workers"),
            "ms",
            ms,
            "1 s (target for 1,000)",
            1000.0 * n_restore as f64 / 1000.0,
            "lower",
        ));
    }

    if only.wants("reopen") {
        let n = if quick { 200 } else { 1_000 };
        progress(format!(
            "runtime: reopen, {n} sessions, then start → first run after a clean stop and after a crash (in this boot, in another)"
        ));
        let (clean, crash, rebooted) = super::restart::reopen(dir, n).await?;
        rows.push(Row::new(
            "runtime",
            format!("open → first run, {n} sessions, after a clean stop"),
            "ms",
            clean,
            "the same after a crash in another boot (walks them all)",
            rebooted,
            "lower",
        ));
        rows.push(Row::new(
            "runtime",
            format!("open → first run, {n} sessions, after a crash in this boot (live index)"),
            "ms",
            crash,
            "the same after a crash in another boot (walks them all)",
            rebooted,
            "lower",
        ));
    }

    if only.wants("fanout") {
        let events = if quick { 5_000 } else { 50_000 };
        const ROUNDS: usize = 5;
        progress(format!(
            "runtime: fan-out, {events} appends with 0, 100 and 1000 subscribers (one slow), \
             {ROUNDS} rounds"
        ));
        // A run is a tenth of a second, and this VM's speed drifts by more
        // than the figure from one to the next: each round measures the
        // writer alone right beside it with subscribers, and the round
        // with the median ratio is the row.
        for subs in [100, 1000] {
            let mut rounds = Vec::with_capacity(ROUNDS);
            for _ in 0..ROUNDS {
                let (zero, zero_cpu) = fan_out(0, events).await?;
                let (rate, cpu) = fan_out(subs, events).await?;
                rounds.push((rate, zero, cpu, zero_cpu));
            }
            let (rate, zero, _, _) = median_by(&mut rounds, |r| r.0 / r.1);
            rows.push(Row::new(
                "runtime",
                format!("writer with {subs} subscribers"),
                "events/s",
                rate,
                "writer with 0 subscribers",
                zero,
                "higher",
            ));
            let (_, _, cpu, zero_cpu) = median_by(&mut rounds, |r| r.2 / r.3);
            rows.push(Row::new(
                "runtime",
                format!("writer's CPU per entry, {subs} subscribers"),
                "ns/event",
                cpu,
                "the same with 0 subscribers",
                zero_cpu,
                "lower",
            ));
        }
    }

    if only.wants("replay") {
        let total = if quick { 100_000 } else { 1_000_000 };
        progress(format!("runtime: replay read of a {total}-event session"));
        let (rate, bare) = replay_read(dir, total).await?;
        rows.push(Row::new(
            "runtime",
            format!("replay read, {total} events (file store)"),
            "events/s",
            rate,
            "1,000,000 events/s (target)",
            1_000_000.0,
            "higher",
        ));
        rows.push(Row::new(
            "runtime",
            format!("replay read, {total} checksummed lines"),
            "events/s",
            rate,
            "the same lines without checksums",
            bare,
            "higher",
        ));
    }
    Ok(rows)
}
