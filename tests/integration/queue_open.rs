//! Open worker sessions are bounded by `max_concurrency` (seed 001; issue
//! 38 item 2): a card whose controller cannot park and waits on a decision
//! keeps its run live, so it holds its slot while it awaits, and it writes
//! no ledger row until its run ends.

use crate::queue::{card, dispatch, open, until};
use cairn_orchestration::{AnswerValue, RowState};
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awaiting_cards_with_live_runs_hold_their_slots() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (rt, q) = open(&home, Some("[queue]\nmax_concurrency = 2\n")).await;
    // `hostile` cannot park; `wait` asks for an approval and waits.
    let hostile = super::delegation::grant(&rt, "hostile").await;
    let ws = rt.default_workspace().to_string();
    for i in 0..5 {
        q.add(card(&format!("w{i}"), &hostile, "wait", None, &ws))
            .await
            .unwrap();
    }
    let _d = dispatch(&q);
    until(&q, "w0", "awaiting", |r| r.state == RowState::Awaiting).await;
    until(&q, "w1", "awaiting", |r| r.state == RowState::Awaiting).await;
    // For a while: never more than two live runs, three cards pending
    // (before: five live runs, each with an `awaiting` ledger row).
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(3) {
        let live = rt.live_runs().len();
        assert!(live <= 2, "{live} live runs under max_concurrency = 2");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rows = q.rows(None).unwrap();
    let pending = rows.iter().filter(|r| r.state == RowState::Pending).count();
    assert_eq!(pending, 3, "{rows:?}");
    assert!(q.ledger().unwrap().is_empty(), "{:?}", q.ledger().unwrap());
    // An answer ends one run: its slot goes to a pending card, and the
    // ended run (only) has its ledger row.
    q.answer(&ws, "w0", AnswerValue::Value(json!({"approved": true})))
        .await
        .unwrap();
    until(&q, "w0", "done", |r| r.state == RowState::Done).await;
    until(&q, "w2", "awaiting", |r| r.state == RowState::Awaiting).await;
    let ledger = q.ledger().unwrap();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(ledger[0]["card"], "w0");
    assert_eq!(ledger[0]["outcome"], "done");
    assert!(rt.live_runs().len() <= 2);
    rt.begin_shutdown();
}
