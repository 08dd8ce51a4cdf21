//! An emit taken without a wait ([`SessionJournal::try_emitter`]) mints
//! like one that waits: dense seqs shared with the waiting way, the same
//! committed lines; and it is refused — sending the emit the waiting way —
//! once the pending batch is full, until a commit took it.

use cairn_journal::{Delivery, Journals, MAX_PENDING, SessionJournal, Subscription};
use cairn_store::MemoryStore;
use cairn_types::event::Measured;
use cairn_types::{AgentEvent, Payload, SegmentId, Seq, SessionId};
use std::sync::Arc;
use std::time::Duration;

/// A delta (its JSON counted: its line is the committer's to build), and
/// every fifth a progress report (its JSON written: its line built at once).
fn text(i: usize) -> (Payload, Measured) {
    let payload = Payload::Agent(match i % 5 {
        4 => AgentEvent::Progress {
            message: format!("step \"{i}\""),
            done: i as u64,
            total: None,
        },
        _ => AgentEvent::TextDelta {
            text: format!("delta \"{i}\"\n"),
            by: None,
        },
    });
    let json = payload.measure(u64::MAX).unwrap();
    (payload, json)
}

async fn journal(name: &str) -> Arc<SessionJournal> {
    let store = Arc::new(MemoryStore::new(1 << 16));
    let journals = Journals::new(store, 1 << 16);
    let session = SessionId::parse(name).unwrap();
    journals.create(&session, SegmentId::new()).await.unwrap()
}

/// The next `n` events' seqs and payloads (each within 5 s).
async fn events(follower: &mut Subscription, n: usize) -> Vec<(u64, Payload, String)> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        match tokio::time::timeout(Duration::from_secs(5), follower.next()).await {
            Ok(Some(Ok(Delivery::Event(e)))) => {
                out.push((e.seq.0, e.payload.clone(), e.line().to_string()))
            }
            other => panic!("after {} events: expected more, got {other:?}", out.len()),
        }
    }
    out
}

#[tokio::test(flavor = "current_thread")]
async fn emits_without_a_wait_share_dense_seqs_and_lines_with_the_waiting_way() {
    let journal = journal("emitter-dense").await;
    let mut follower = journal.subscribe(Seq(1));
    let mut expected = Vec::new();
    for i in 0..40 {
        let (payload, json) = text(i);
        let seq = if i % 3 == 0 {
            journal
                .append_emit(None, payload.clone(), &json)
                .await
                .unwrap()
        } else {
            let emitter = journal
                .try_emitter()
                .expect("the lock is free and the batch has room");
            emitter.append(None, payload.clone(), &json)
        };
        expected.push((seq.0, payload));
    }
    journal.commit().await.unwrap();
    let got = events(&mut follower, 40).await;
    let seqs: Vec<u64> = got.iter().map(|(s, _, _)| *s).collect();
    assert_eq!(
        seqs,
        (2..42).collect::<Vec<_>>(),
        "dense, after the creation"
    );
    for ((seq, payload, line), (want_seq, want)) in got.iter().zip(&expected) {
        assert_eq!((seq, payload), (want_seq, want));
        // The line kept is the one the entry serializes to.
        let parsed: cairn_types::SessionEvent = serde_json::from_str(line).unwrap();
        assert_eq!(&parsed.payload, want, "line {line}");
        assert_eq!(parsed.seq.0, *seq);
        // Parsed, the entry's cache is empty: serde writes it again, and
        // must write the same bytes.
        assert_eq!(parsed.line(), line.as_str());
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_full_batch_sends_emits_the_waiting_way_until_a_commit_took_it() {
    let journal = journal("emitter-full").await;
    // On one thread the commits these emits start cannot run before the
    // test yields: the batch only grows.
    for i in 0..MAX_PENDING - 1 {
        let (payload, json) = text(i);
        let emitter = journal
            .try_emitter()
            .unwrap_or_else(|| panic!("refused at {i} of {MAX_PENDING} pending"));
        emitter.append(None, payload, &json);
    }
    assert!(
        journal.try_emitter().is_none(),
        "with {} pending an emit must wait for the disk",
        MAX_PENDING - 1
    );
    // The waiting way returns once a commit took the batch (the guest
    // goes on while it is written).
    let (payload, json) = text(MAX_PENDING);
    let seq = journal.append_emit(None, payload, &json).await.unwrap();
    assert_eq!(seq.0, 1 + MAX_PENDING as u64);
    assert!(journal.try_emitter().is_some(), "a commit took the batch");
    assert_eq!(journal.last_seq().await, seq);
}
