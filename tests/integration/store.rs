//! One conformance suite against both stores, then the file store's own
//! recovery rules and a SIGKILL crash test.

use crate::common::cairn_bin;
use cairn_runtime::journal::event::{
    AgentEvent, FinishOutcome, LifecycleEvent, RunFacts, RunStatus, Usage,
};
use cairn_runtime::journal::{Delivery, Journals, SessionJournal};
use cairn_runtime::store::file::FileStore;
use cairn_runtime::store::memory::MemoryStore;
use cairn_runtime::store::{JournalItem, JournalStore, Store, StoreError};
use cairn_runtime::worker::Home;
use cairn_runtime::{Generation, Payload, RunId, Seq, SessionId};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Memory,
    File,
}

pub(crate) const KINDS: [Kind; 2] = [Kind::Memory, Kind::File];

pub(crate) struct Fixture {
    _tmp: tempfile::TempDir,
    pub(crate) home: Home,
    pub(crate) store: Arc<dyn Store>,
    journals: Journals,
}

pub(crate) fn fixture(kind: Kind, live_window: usize) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::open(&tmp.path().join("home")).unwrap();
    let store: Arc<dyn Store> = match kind {
        Kind::Memory => Arc::new(MemoryStore::new(1_000_000)),
        Kind::File => Arc::new(FileStore::new(home.clone())),
    };
    let journals = Journals::new(store.clone(), live_window);
    Fixture {
        _tmp: tmp,
        home,
        store,
        journals,
    }
}

impl Fixture {
    pub(crate) async fn session(&self, id: &str) -> Arc<SessionJournal> {
        self.session_in(&self.journals, id).await
    }

    /// A new session `id` of this fixture's home, journaled by `journals`
    /// (over this fixture's store, or a wrapper of it).
    pub(crate) async fn session_in(&self, journals: &Journals, id: &str) -> Arc<SessionJournal> {
        let session = SessionId::parse(id).unwrap();
        let worker = self
            .home
            .create_published_worker(&session, None, "local")
            .unwrap();
        let segment = worker.metadata().unwrap().active_segment;
        journals.create(&session, segment).await.unwrap()
    }
}

pub(crate) fn text(n: u64) -> Payload {
    Payload::Agent(AgentEvent::TextDelta {
        text: format!("t{n}"),
        by: None,
    })
}

pub(crate) async fn next(sub: &mut cairn_runtime::journal::Subscription) -> Delivery {
    tokio::time::timeout(Duration::from_secs(30), sub.next())
        .await
        .expect("a delivery in time")
        .expect("journal open")
        .expect("no store error")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seq_is_dense_under_many_concurrent_appenders() {
    for kind in KINDS {
        let f = fixture(kind, 1024);
        let journal = f.session("dense").await;
        let tasks: Vec<_> = (0..16)
            .map(|t| {
                let j = journal.clone();
                tokio::spawn(async move {
                    for i in 0..25 {
                        j.append(None, text(t * 100 + i)).await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let items = f
            .store
            .read(journal.session(), Seq(0), usize::MAX)
            .await
            .unwrap();
        let seqs: Vec<u64> = items.iter().map(|i| i.seq().0).collect();
        assert_eq!(seqs, (1..=401).collect::<Vec<_>>(), "{kind:?}");
    }
}

/// A burst's wake-ups are coalesced; the tail of a burst after which the
/// writer goes quiet still reaches a waiting subscriber (the flusher).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_subscriber_gets_the_tail_of_a_burst_when_the_writer_goes_quiet() {
    for kind in [Kind::Memory] {
        let f = fixture(kind, 4096);
        let journal = f.session("burst").await;
        let mut sub = journal.subscribe(Seq(0));
        assert!(matches!(next(&mut sub).await, Delivery::Event(e) if e.seq == Seq(1)));
        let mut last = 1u64;
        for round in 0..20u64 {
            let waiter = tokio::spawn(async move {
                while last < 1 + (round + 1) * 500 {
                    match next(&mut sub).await {
                        Delivery::Event(e) => {
                            assert_eq!(e.seq.0, last + 1, "dense");
                            last = e.seq.0;
                        }
                        other => panic!("unexpected {other:?}"),
                    }
                }
                (sub, last)
            });
            // Let it wait, then a burst far faster than the hot threshold.
            tokio::time::sleep(Duration::from_millis(2)).await;
            for i in 0..500 {
                journal.append(None, text(i)).await.unwrap();
            }
            // The writer goes quiet: the waiter must still see the burst's last seq.
            (sub, last) = tokio::time::timeout(Duration::from_secs(10), waiter)
                .await
                .expect("the tail of the burst is delivered without another append")
                .unwrap();
        }
    }
}

/// Past `MAX_OPEN_SESSIONS` the file store closes idle sessions' files: a
/// home of many sessions holds a bounded number of descriptors, and every
/// session reads back whole after its files were closed and reopened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_store_keeps_a_bounded_number_of_sessions_open() {
    let f = fixture(Kind::File, 64);
    let n = cairn_runtime::store::file::MAX_OPEN_SESSIONS + 200;
    // Descriptors open on this fixture's files only (other tests may run
    // in this process at the same time).
    let root = f.home.path().to_path_buf();
    let fds = || {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with(&root)))
            .count()
    };
    let before = fds();
    let mut ids = Vec::new();
    for i in 0..n {
        let journal = f.session(&format!("many-{i}")).await;
        journal.append(None, text(i as u64)).await.unwrap();
        ids.push(journal.session().clone());
        f.journals.close(journal.session());
    }
    let open = fds() - before;
    assert!(
        open < 4 * cairn_runtime::store::file::MAX_OPEN_SESSIONS,
        "{open} descriptors open for {n} sessions"
    );
    for (i, id) in ids.iter().enumerate() {
        let items = f.store.read(id, Seq(0), usize::MAX).await.unwrap();
        assert_eq!(items.len(), 2, "session {i}");
        let Some(e) = items[1].event() else {
            panic!("session {i}")
        };
        assert_eq!(e.payload, text(i as u64), "session {i}");
    }
    // Appends to a session whose files were closed go on densely.
    let journal = f.journals.open(&ids[0]).await.unwrap();
    let e = journal.append(None, text(7)).await.unwrap();
    assert_eq!(e.seq, Seq(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_subscriber_gets_one_gap_and_never_slows_the_writer() {
    for kind in KINDS {
        let f = fixture(kind, 8);
        let journal = f.session("slow").await;
        let mut sub = journal.subscribe(Seq(0));
        assert!(matches!(next(&mut sub).await, Delivery::Event(e) if e.seq == Seq(1)));
        // Caught up: it now follows the live broadcast.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), sub.next())
                .await
                .is_err()
        );
        // The subscriber stops reading; the writer must finish regardless.
        tokio::time::timeout(Duration::from_secs(60), async {
            for i in 0..200 {
                journal.append(None, text(i)).await.unwrap();
            }
        })
        .await
        .expect("the writer never waits for a subscriber");
        let Delivery::Gap { resumed_at } = next(&mut sub).await else {
            panic!("{kind:?}: a lagged subscriber gets a gap first")
        };
        assert!(
            resumed_at.0 > 2 && resumed_at.0 <= 201,
            "{kind:?}: {resumed_at}"
        );
        for expect in resumed_at.0..=201 {
            match next(&mut sub).await {
                Delivery::Event(e) => assert_eq!(e.seq.0, expect, "{kind:?}"),
                other => panic!("{kind:?}: exactly one gap, got {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn a_cursor_older_than_the_window_gets_a_gap_at_the_oldest_held() {
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::open(tmp.path()).unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(10));
    let journals = Journals::new(store, 64);
    let session = SessionId::parse("window").unwrap();
    let segment = home
        .create_published_worker(&session, None, "local")
        .unwrap()
        .metadata()
        .unwrap()
        .active_segment;
    let journal = journals.create(&session, segment).await.unwrap();
    for i in 0..50 {
        journal.append(None, text(i)).await.unwrap();
    }
    let mut sub = journal.subscribe(Seq(0));
    assert_eq!(
        next(&mut sub).await,
        Delivery::Gap {
            resumed_at: Seq(42)
        }
    );
    for expect in 42..=51 {
        let Delivery::Event(e) = next(&mut sub).await else {
            panic!()
        };
        assert_eq!(e.seq.0, expect);
    }
}

fn facts(run: RunId, session: &SessionId, seq: Seq) -> RunFacts {
    RunFacts {
        run_id: run,
        session_id: session.clone(),
        component: "sha256:test".into(),
        status: RunStatus::Finished,
        outcome: Some(FinishOutcome::Answer),
        usage: Usage::default(),
        started_at_ms: 1,
        ended_at_ms: 2,
        first_seq: Seq(2),
        last_seq: seq,
        generation: Generation(1),
        checkpoint: None,
        pending_decisions: vec![],
        continues: None,
        resumes: None,
    }
}

#[tokio::test]
async fn the_terminal_event_and_its_facts_are_one_write() {
    for kind in KINDS {
        let f = fixture(kind, 64);
        let journal = f.session("terminal").await;
        let run = RunId::new();
        journal.append(Some(run), text(1)).await.unwrap();
        let session = journal.session().clone();
        let terminal = LifecycleEvent::Finished {
            usage: Usage::default(),
            outcome: FinishOutcome::Answer,
            text: "done".into(),
        };
        let event = journal
            .finish(run, terminal, |seq, _| facts(run, &session, seq))
            .await
            .unwrap();
        assert_eq!(event.facts.as_ref().unwrap().last_seq, event.seq);
        let stored = f
            .store
            .run_facts(&session, run)
            .await
            .unwrap()
            .expect("facts stored");
        assert_eq!(stored, facts(run, &session, event.seq), "{kind:?}");
        let items = f.store.read(&session, Seq(0), usize::MAX).await.unwrap();
        assert_eq!(
            items.last().unwrap().event().unwrap().facts.as_deref(),
            Some(&stored),
            "{kind:?}"
        );
        // Checkpoints are addressed by key, never by path.
        let key = f
            .store
            .put_checkpoint(&session, run, b"state")
            .await
            .unwrap();
        assert_eq!(f.store.checkpoint(&session, &key).await.unwrap(), b"state");
        assert!(
            f.store
                .checkpoint(&session, "../../worker.json")
                .await
                .is_err()
        );
    }
}

/// A file-store session with `n` text events; its segment's path.
async fn file_session(n: u64) -> (tempfile::TempDir, Home, SessionId, std::path::PathBuf) {
    let f = fixture(Kind::File, 64);
    let journal = f.session("recover").await;
    for i in 0..n {
        journal.append(None, text(i)).await.unwrap();
    }
    let session = journal.session().clone();
    let worker = f
        .home
        .open_worker(f.home.lookup(&session).unwrap().unwrap())
        .unwrap();
    let segment = worker.metadata().unwrap().active_segment;
    let path = worker
        .path()
        .join(format!("session/segments/{segment}.jsonl"));
    (f._tmp, f.home, session, path)
}

fn edit(path: &std::path::Path, f: impl FnOnce(Vec<String>) -> Vec<String>) {
    let text = std::fs::read_to_string(path).unwrap();
    let lines = f(text.lines().map(str::to_string).collect());
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

#[tokio::test]
async fn a_crash_truncated_final_line_is_dropped_and_reported() {
    let (_tmp, home, session, path) = file_session(5).await;
    let mut bytes = std::fs::read(&path).unwrap();
    let keep = bytes.len();
    bytes.extend_from_slice(b"{\"session_id\":\"recover\",\"seq\":7,\"pay");
    std::fs::write(&path, &bytes).unwrap();
    let store = FileStore::new(home);
    let items = store.read(&session, Seq(0), usize::MAX).await.unwrap();
    assert_eq!(items.len(), 6);
    let notes = store.take_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains(":7: dropped a crash-truncated final line"),
        "{notes:?}"
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().len() as usize,
        keep,
        "the torn tail is cut off"
    );
    // Appends go on from the last good seq.
    let journals = Journals::new(Arc::new(store), 8);
    let e = journals
        .open(&session)
        .await
        .unwrap()
        .append(None, text(9))
        .await
        .unwrap();
    assert_eq!(e.seq, Seq(7));
}

#[tokio::test]
async fn an_unknown_payload_kind_is_kept_as_unknown_in_its_place() {
    let (_tmp, home, session, path) = file_session(3).await;
    edit(&path, |mut lines| {
        let mut v: serde_json::Value = serde_json::from_str(&lines[2]).unwrap();
        v["payload"] = serde_json::json!({"kind": "from_the_future", "event": {"x": 1}});
        lines[2] = v.to_string();
        lines
    });
    let store: Arc<dyn Store> = Arc::new(FileStore::new(home));
    let items = store.read(&session, Seq(0), usize::MAX).await.unwrap();
    assert_eq!(items.len(), 4);
    assert!(
        matches!(&items[2], JournalItem::Unknown { seq: Seq(3), raw } if raw.contains("from_the_future"))
    );
    let journals = Journals::new(store, 8);
    let mut sub = journals.open(&session).await.unwrap().subscribe(Seq(0));
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(next(&mut sub).await);
    }
    assert!(
        matches!(&got[2], Delivery::Unknown { seq: Seq(3), .. }),
        "{got:?}"
    );
}

#[tokio::test]
async fn corrupt_lines_duplicates_and_holes_fail_closed_with_path_and_line() {
    type Damage = fn(Vec<String>) -> Vec<String>;
    let cases: [(&str, Damage, &str); 4] = [
        (
            "garbage",
            |mut l| {
                l[2] = "this is not json".into();
                l
            },
            ":3: not JSON",
        ),
        (
            "no seq",
            |mut l| {
                l[1] = "{\"hello\":1}".into();
                l
            },
            ":2: no numeric \"seq\"",
        ),
        (
            "duplicate",
            |mut l| {
                let d = l[2].clone();
                l.insert(3, d);
                l
            },
            ":4: duplicate seq 3",
        ),
        (
            "hole",
            |mut l| {
                l.remove(2);
                l
            },
            ":3: hole: seq 4 follows seq 2",
        ),
    ];
    for (name, damage, expect) in cases {
        let (_tmp, home, session, path) = file_session(4).await;
        edit(&path, damage);
        let before = std::fs::read(&path).unwrap();
        let store = FileStore::new(home);
        let err = store.read(&session, Seq(0), usize::MAX).await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{name}: {err}");
        let msg = err.to_string();
        assert!(
            msg.starts_with(&path.display().to_string()) && msg.contains(expect),
            "{name}: {msg}"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "{name}: nothing is rewritten"
        );
    }
}

#[tokio::test]
async fn path_escaping_ids_address_nothing_outside_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let home_dir = tmp.path().join("home");
    let home = Home::open(&home_dir).unwrap();
    let store: Arc<dyn Store> = Arc::new(FileStore::new(home.clone()));
    let journals = Journals::new(store.clone(), 8);
    for id in ["../../escape", "/etc/passwd", "..", "a/../../b"] {
        // Refused as new ids; stored ones (written before the safe
        // alphabet) still read, and still address nothing outside.
        assert!(SessionId::parse(id).is_err(), "{id}");
        let session: SessionId = serde_json::from_value(serde_json::json!(id)).unwrap();
        let segment = home
            .create_published_worker(&session, None, "local")
            .unwrap()
            .metadata()
            .unwrap()
            .active_segment;
        journals
            .create(&session, segment)
            .await
            .unwrap()
            .append(None, text(1))
            .await
            .unwrap();
        assert!(home.lookup(&session).unwrap().is_some());
    }
    // Everything stayed inside the home: only index/ and workers/ beside it.
    let outside: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(outside, vec![std::ffi::OsString::from("home")]);
    let index: Vec<String> = std::fs::read_dir(home_dir.join("index/sessions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(index.len(), 4);
    assert!(
        index
            .iter()
            .all(|n| n.len() == "00000000-0000-0000-0000-000000000000.json".len())
    );
    // An id that is not a session at all is refused before any store.
    assert!(SessionId::parse("").is_err());
    assert!("../x".parse::<cairn_runtime::WorkerId>().is_err());
    let unknown = SessionId::parse("never-made").unwrap();
    assert!(matches!(
        store.head(&unknown).await,
        Err(StoreError::UnknownSession(_))
    ));
}

#[test]
fn acknowledged_appends_survive_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let mut acknowledged = 0u64;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..20 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let batch = 1 + (rng % 8);
        let mut child = cairn_bin()
            .args([
                "debug",
                "append-loop",
                "--session",
                "crash",
                "--batch",
                &batch.to_string(),
                "--home",
            ])
            .arg(&home)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(seq) = line.trim().parse::<u64>() {
                    let _ = tx.send(seq);
                }
            }
        });
        // Let it append for a random while, then kill it without warning.
        let wait = Duration::from_millis(20 + rng % 150);
        let first = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the child appends");
        std::thread::sleep(wait);
        child.kill().unwrap();
        child.wait().unwrap();
        reader.join().unwrap();
        let last = rx.try_iter().last().unwrap_or(first);
        assert!(last > acknowledged, "round {round}: progress");
        acknowledged = last;

        // Reopen: the store opens and holds every acknowledged event, densely.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let held = rt.block_on(async {
            let store = FileStore::new(Home::open(&home).unwrap());
            let items = store
                .read(&SessionId::parse("crash").unwrap(), Seq(0), usize::MAX)
                .await
                .unwrap();
            for (i, item) in items.iter().enumerate() {
                assert_eq!(item.seq().0, i as u64 + 1, "round {round}: dense");
            }
            items.len() as u64
        });
        assert!(
            held >= acknowledged,
            "round {round}: {held} held < {acknowledged} acknowledged"
        );
        acknowledged = held;
    }
}

fn entry(
    session: &SessionId,
    segment: cairn_runtime::SegmentId,
    seq: u64,
) -> Arc<cairn_runtime::SessionEvent> {
    Arc::new(cairn_runtime::SessionEvent {
        session_id: session.clone(),
        segment_id: segment,
        run_id: None,
        seq: Seq(seq),
        at_ms: 1,
        payload: text(seq),
        facts: None,
        line: Default::default(),
    })
}

/// The fence, against every store: an append that does not continue the
/// head is refused with `Conflict { expected, head }` and writes nothing.
#[tokio::test]
async fn an_append_that_does_not_continue_the_head_is_a_conflict_and_writes_nothing() {
    for kind in KINDS {
        let f = fixture(kind, 64);
        let journal = f.session("fenced").await;
        let session = journal.session().clone();
        for i in 0..3 {
            journal.append(None, text(i)).await.unwrap();
        }
        let head = f.store.head(&session).await.unwrap();
        assert_eq!(head.last_seq, Seq(4), "{kind:?}");
        // A writer that believes the head is at 2 (it lost seq 3 and 4 to
        // another writer).
        let stale = [entry(&session, head.active_segment, 3)];
        match f.store.append(&session, Seq(3), &stale).await {
            Err(StoreError::Conflict { expected, head, .. }) => {
                assert_eq!((expected, head), (Seq(3), Seq(4)), "{kind:?}");
            }
            other => panic!("{kind:?}: {other:?}"),
        }
        // One ahead of the head is refused the same way.
        let ahead = [entry(&session, head.active_segment, 6)];
        assert!(
            matches!(
                f.store.append(&session, Seq(6), &ahead).await,
                Err(StoreError::Conflict { .. })
            ),
            "{kind:?}"
        );
        let items = f.store.read(&session, Seq(0), usize::MAX).await.unwrap();
        assert_eq!(items.len(), 4, "{kind:?}: nothing was written");
        // The right one goes through.
        let next = [entry(&session, head.active_segment, 5)];
        f.store.append(&session, Seq(5), &next).await.unwrap();
        assert_eq!(f.store.head(&session).await.unwrap().last_seq, Seq(5));
    }
}

/// Two file stores on one home (two processes that skipped the lock): the
/// second to write finds the first's lines and is refused, instead of
/// writing the same seq twice.
#[tokio::test]
async fn a_second_file_store_on_the_same_files_is_fenced_out() {
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::open(&tmp.path().join("home")).unwrap();
    let session = SessionId::parse("shared").unwrap();
    let worker = home
        .create_published_worker(&session, None, "local")
        .unwrap();
    let segment = worker.metadata().unwrap().active_segment;
    let one = FileStore::new(home.clone());
    let two = FileStore::new(home.clone());
    // Both open the session at the same head.
    assert_eq!(one.head(&session).await.unwrap().last_seq, Seq(0));
    assert_eq!(two.head(&session).await.unwrap().last_seq, Seq(0));
    one.append(
        &session,
        Seq(1),
        &[entry(&session, segment, 1), entry(&session, segment, 2)],
    )
    .await
    .unwrap();
    match two
        .append(&session, Seq(1), &[entry(&session, segment, 1)])
        .await
    {
        Err(StoreError::Conflict { expected, head, .. }) => {
            assert_eq!((expected, head), (Seq(1), Seq(2)));
        }
        other => panic!("{other:?}"),
    }
    let fresh = FileStore::new(home);
    let items = fresh.read(&session, Seq(0), usize::MAX).await.unwrap();
    assert_eq!(items.len(), 2, "no seq was written twice");
}

/// A new segment is complete before it is active: its first entries go
/// with the switch, fenced like an append.
#[tokio::test]
async fn a_new_segment_starts_with_its_first_entries_or_not_at_all() {
    for kind in KINDS {
        let f = fixture(kind, 64);
        let journal = f.session("segments").await;
        let session = journal.session().clone();
        journal.append(None, text(1)).await.unwrap();
        let old = f.store.head(&session).await.unwrap().active_segment;
        let new = cairn_runtime::SegmentId::new();
        // A stale writer's switch is refused and changes nothing.
        let stale = [entry(&session, new, 2)];
        assert!(
            matches!(
                f.store.start_segment(&session, new, old, &stale).await,
                Err(StoreError::Conflict { .. })
            ),
            "{kind:?}"
        );
        assert_eq!(f.store.head(&session).await.unwrap().active_segment, old);
        let first = [entry(&session, new, 3)];
        f.store
            .start_segment(&session, new, old, &first)
            .await
            .unwrap();
        let head = f.store.head(&session).await.unwrap();
        assert_eq!(
            (head.active_segment, head.last_seq),
            (new, Seq(3)),
            "{kind:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_window_is_bounded_in_bytes_and_a_reader_still_sees_everything_once() {
    for kind in KINDS {
        let mut fx = fixture(kind, 4096);
        fx.journals = Journals::new(fx.store.clone(), 4096).with_window_bytes(1 << 20);
        let journal = fx.session("big").await;
        let mut early = journal.subscribe(Seq(0));
        let big = "x".repeat(300 << 10);
        for _ in 0..20 {
            journal
                .append(
                    None,
                    Payload::Agent(AgentEvent::TextDelta {
                        text: big.clone(),
                        by: None,
                    }),
                )
                .await
                .unwrap();
        }
        // 20 × 300 KiB written; the window holds about 1 MiB of it.
        let held = journal.window_bytes();
        assert!(
            held <= (1 << 20) + (301 << 10),
            "{kind:?}: {held} bytes held"
        );
        assert!(held >= 300 << 10, "{kind:?}: the newest entry is held");
        // A subscriber from the start reads the rest from the store: every
        // entry once, in order, no gap.
        let mut seqs = Vec::new();
        while seqs.len() < 21 {
            match next(&mut early).await {
                Delivery::Event(e) => seqs.push(e.seq.0),
                other => panic!("{kind:?}: {other:?}"),
            }
        }
        assert_eq!(seqs, (1..=21).collect::<Vec<_>>(), "{kind:?}");
    }
}
