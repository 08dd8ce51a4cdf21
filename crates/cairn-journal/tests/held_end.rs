//! A run's end keeps minting still across its store write: whatever is
//! minted meanwhile waits for it and follows the terminal entry, and an
//! end the store refuses, or one abandoned in flight, leaves the run's
//! pending entries for the retried end, ahead of it.

mod support;

use cairn_types::event::{FinishOutcome, Usage};
use cairn_types::{Generation, LifecycleEvent, RunFacts, RunId, RunStatus, Seq, SessionId};
use std::time::Duration;
use support::{abandon, entries, journal, text};

fn finished() -> LifecycleEvent {
    LifecycleEvent::Finished {
        outcome: FinishOutcome::Answer,
        text: "done".into(),
        usage: Usage::default(),
    }
}

fn facts(run: RunId, session: &SessionId) -> impl FnOnce(Seq, u64) -> RunFacts {
    let session = session.clone();
    move |last, at_ms| RunFacts {
        run_id: run,
        session_id: session,
        component: "sha256:held-end".into(),
        status: RunStatus::Finished,
        outcome: Some(FinishOutcome::Answer),
        usage: Usage::default(),
        started_at_ms: at_ms,
        ended_at_ms: at_ms,
        first_seq: Seq(2),
        last_seq: last,
        generation: Generation(1),
        checkpoint: None,
        pending_decisions: vec![],
        continues: None,
        resumes: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emit_during_a_runs_end_waits_for_it_and_follows_the_terminal_entry() {
    let (store, _journals, journal) = journal("held-end").await;
    let session = journal.session().clone();
    let run = RunId::new();
    let mut follower = journal.subscribe(Seq(0));
    assert_eq!(
        journal.append_seq(Some(run), text("last")).await.unwrap(),
        Seq(2)
    );
    let gate = store.hold_next_finish();
    let ending = {
        let journal = journal.clone();
        tokio::spawn(async move { journal.finish(run, finished(), facts(run, &session)).await })
    };
    gate.reached.await.expect("the end reached the store");
    // Minting is still while the end is in flight: no emit without a
    // wait, and the waiting way waits.
    assert!(
        journal.try_emitter().is_none(),
        "an emit was let in during the end"
    );
    assert!(
        journal.has_pending(),
        "the end's entries are not durable yet"
    );
    let later = {
        let journal = journal.clone();
        tokio::spawn(async move { journal.append_seq(None, text("later")).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!later.is_finished(), "an entry was minted during the end");
    gate.go.send(()).unwrap();
    let end = ending.await.unwrap().expect("the end is written");
    assert_eq!(end.seq, Seq(3));
    assert_eq!(later.await.unwrap().unwrap(), Seq(4));
    journal.commit().await.unwrap();
    assert_eq!(
        entries(&mut follower, 4).await,
        [
            (1, "segment".into()),
            (2, "last".into()),
            (3, "finished".into()),
            (4, "later".into())
        ]
    );
}

#[tokio::test]
async fn a_refused_end_leaves_the_runs_entries_for_the_retried_end() {
    let (store, _journals, journal) = journal("refused-end").await;
    let session = journal.session().clone();
    let run = RunId::new();
    let mut follower = journal.subscribe(Seq(0));
    journal.append_seq(Some(run), text("one")).await.unwrap();
    journal.seal().await.unwrap();
    journal.append_seq(Some(run), text("two")).await.unwrap();
    store.refuse_next_finish();
    let refused = journal
        .finish(run, finished(), facts(run, &session))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("refused"), "{refused}");
    assert!(journal.has_pending(), "the run's entries were dropped");
    let end = journal
        .finish(run, finished(), facts(run, &session))
        .await
        .expect("the retried end");
    assert_eq!(end.seq, Seq(4));
    assert_eq!(
        entries(&mut follower, 4).await,
        [
            (1, "segment".into()),
            (2, "one".into()),
            (3, "two".into()),
            (4, "finished".into())
        ]
    );
    // The journal is open again after the end.
    assert_eq!(
        journal.append_seq(None, text("next")).await.unwrap(),
        Seq(5)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_abandoned_in_flight_leaves_the_runs_entries_and_lets_minting_go() {
    let (store, _journals, journal) = journal("abandoned-end").await;
    let session = journal.session().clone();
    let run = RunId::new();
    let mut follower = journal.subscribe(Seq(0));
    journal.append_seq(Some(run), text("last")).await.unwrap();
    let gate = store.hold_next_finish();
    let ending = {
        let (journal, session) = (journal.clone(), session.clone());
        tokio::spawn(async move { journal.finish(run, finished(), facts(run, &session)).await })
    };
    // The end's task is dropped while its store call is in flight (a
    // runtime shutting down aborts it so).
    abandon(gate, ending).await;
    assert!(
        journal.has_pending(),
        "the run's entry was dropped with its end"
    );
    let end = journal
        .finish(run, finished(), facts(run, &session))
        .await
        .expect("the retried end");
    assert_eq!(end.seq, Seq(3));
    assert_eq!(
        entries(&mut follower, 3).await,
        [
            (1, "segment".into()),
            (2, "last".into()),
            (3, "finished".into())
        ]
    );
}
