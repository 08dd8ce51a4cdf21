//! While one commit is written (a file store's write and sync, on a thread
//! of its own), the next one — started by a full batch, waiting for the
//! commit lock — builds the lines of the entries the guest goes on
//! emitting, so its own write starts with them built and a guest waiting
//! for room waits for the disk alone. The lines it builds are the lines a
//! follower reads.

mod support;

use cairn_journal::{BATCH, SessionJournal};
use cairn_types::event::Measured;
use cairn_types::{AgentEvent, Payload, Seq};
use std::time::Duration;
use support::journal;

/// A delta whose JSON is counted, not written: its line is the
/// committer's to build.
fn delta(i: usize) -> (Payload, Measured) {
    let payload = Payload::Agent(AgentEvent::TextDelta {
        text: format!("delta \"{i}\"\n"),
        by: None,
    });
    let json = payload.measure(u64::MAX).unwrap();
    assert!(json.written().is_none(), "a delta's JSON is counted");
    (payload, json)
}

/// A guest's emit: without a wait when the minting lock is free now, the
/// waiting way when a commit holds it for a moment.
async fn emit(journal: &SessionJournal, i: usize) -> Seq {
    let (payload, json) = delta(i);
    match journal.try_emitter() {
        Some(emitter) => emitter.append(None, payload, &json),
        None => journal.append_emit(None, payload, &json).await.unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_batch_is_built_while_a_commit_is_written() {
    let (store, _journals, journal) = journal("build-ahead").await;
    let mut follower = journal.subscribe(Seq(1));
    let gate = store.hold_next_append();
    // A full batch starts a commit (or the commit delay does, for the
    // first of them), which the store holds once written.
    for i in 0..BATCH {
        emit(&journal, i).await;
    }
    tokio::time::timeout(Duration::from_secs(5), gate.reached)
        .await
        .expect("the first commit reached the store")
        .unwrap();
    // More while it is held, up to two whole batches or more pending
    // (nothing takes them while the commit lock is held): the commits
    // they start wait for the lock, building their lines meanwhile.
    let mut emitted = BATCH;
    loop {
        let (_, pending) = journal.pending_lines().await;
        if pending >= 2 * BATCH && pending.is_multiple_of(BATCH) {
            break;
        }
        emit(&journal, emitted).await;
        emitted += 1;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (built, pending) = journal.pending_lines().await;
        if built == pending {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{built} of {pending} pending lines built while the commit ahead was held"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(gate.go);
    // Every entry reaches the follower with the line its payload makes.
    for i in 0..emitted {
        let next = tokio::time::timeout(Duration::from_secs(5), follower.next())
            .await
            .expect("the follower was left waiting");
        let Some(Ok(cairn_journal::Delivery::Event(e))) = next else {
            panic!("expected entry {}, got {next:?}", i + 2);
        };
        assert_eq!(e.seq, Seq(i as u64 + 2));
        let line: serde_json::Value = serde_json::from_str(e.line()).unwrap();
        assert_eq!(line["seq"], i + 2);
        // The payload as serde writes it (the general way).
        assert_eq!(line["payload"], serde_json::to_value(delta(i).0).unwrap());
        cairn_types::event::check_line(e.line().as_bytes())
            .unwrap_or_else(|m| panic!("entry {}: {m}", i + 2));
    }
}

/// The same while the emitting guest keeps its worker (as a guest emitting
/// without a wait does, between its yields): the waiting commit is told of
/// each new batch from elsewhere, so it builds their lines on the other
/// worker now. Told from the guest's worker, it would wait in that
/// worker's LIFO slot, which no other worker can steal, until the guest
/// gave the worker back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_batch_is_built_while_the_guest_keeps_its_worker() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (store, _journals, journal) = journal("build-ahead-busy").await;
    let mut gate = store.hold_next_append();
    let (emitted, done) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let go_on = Arc::new(AtomicBool::new(false));
    let guest = {
        let (journal, emitted, done) = (journal.clone(), emitted.clone(), done.clone());
        let go_on = go_on.clone();
        // Spawned from the test's own thread: it runs on a worker, which
        // it keeps (no await) until told it is done.
        tokio::spawn(async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            let mut i = 0;
            let emit_to = |n: usize, i: &mut usize| {
                while *i < n && std::time::Instant::now() < deadline {
                    if let Some(emitter) = journal.try_emitter() {
                        let (payload, json) = delta(*i);
                        emitter.append(None, payload, &json);
                        *i += 1;
                    }
                }
            };
            // A full batch: its commit, started from elsewhere, reaches
            // the store, which holds it.
            emit_to(BATCH, &mut i);
            while gate.reached.try_recv().is_err() && std::time::Instant::now() < deadline {
                std::hint::spin_loop();
            }
            // The next full batch starts a commit that waits for the lock
            // (and builds its lines as it begins to).
            emit_to(2 * BATCH, &mut i);
            emitted.store(i, Ordering::Release);
            while !go_on.load(Ordering::Acquire) && std::time::Instant::now() < deadline {
                std::hint::spin_loop();
            }
            // And one more batch, whose lines that commit, waiting now, is
            // told to build.
            emit_to(3 * BATCH, &mut i);
            emitted.store(i, Ordering::Release);
            while !done.load(Ordering::Acquire) && std::time::Instant::now() < deadline {
                std::hint::spin_loop();
            }
            gate.go
        })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
    let emitted_to = |n: usize| {
        let emitted = emitted.clone();
        async move {
            while emitted.load(Ordering::Acquire) < n && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert_eq!(emitted.load(Ordering::Acquire), n, "the guest emitted");
        }
    };
    emitted_to(2 * BATCH).await;
    // The second batch's commit waits for the held one, its first look
    // taken: it waits to be told of more.
    while journal.pending_lines().await != (BATCH, BATCH) && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        journal.commits_waiting(),
        1,
        "the second batch's commit waits"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    go_on.store(true, Ordering::Release);
    emitted_to(3 * BATCH).await;
    let built_in_time = loop {
        let (built, pending) = journal.pending_lines().await;
        if built == pending {
            break Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            break Err(format!("{built} of {pending}"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    done.store(true, Ordering::Release);
    drop(guest.await.unwrap());
    if let Err(built) = built_in_time {
        panic!(
            "{built} pending lines built while the guest kept its worker: the waiting commit \
             was not told from elsewhere"
        );
    }
}
