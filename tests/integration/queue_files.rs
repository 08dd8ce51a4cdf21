//! The queue's files stay bounded (isolation round three, item 6): each
//! card's row is its own document under `queue/cards/`, so adding a card
//! writes one small document instead of rewriting every card's prompt; an
//! older home's `cards.queue.json` is read as before and split at the next
//! write.

use crate::queue::{card, dispatch, open, until};
use cairn_orchestration::RowState;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The rows `queue/cards/` holds, in the order cards were added (as
/// another process reads them).
pub(crate) fn rows_on_disk(cards: &Path) -> Vec<Value> {
    let mut docs: Vec<Value> = std::fs::read_dir(cards)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice(&b).ok())
        .collect();
    docs.sort_by_key(|d: &Value| d["order"].as_u64());
    docs.into_iter().map(|d| d["row"].clone()).collect()
}

/// Each card document's inode and size, by file name.
fn files(cards: &Path) -> BTreeMap<String, (u64, u64)> {
    std::fs::read_dir(cards)
        .unwrap()
        .flatten()
        .map(|e| {
            let m = e.metadata().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                (m.ino(), m.len()),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_a_card_writes_its_own_document_and_no_other() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (rt, q) = open(&home, None).await;
    let ws = rt.default_workspace().to_string();
    // Sixty cards of 1 MB prompts (the round's attack: before, one 57 MB
    // file rewritten and fsynced at every add).
    let big = "p".repeat((1 << 20) - 1024);
    for i in 0..60 {
        q.add(card(&format!("big-{i}"), "echo", &big, None, &ws))
            .await
            .unwrap();
    }
    let cards = home.join("queue/cards");
    let before = files(&cards);
    assert_eq!(before.len(), 60, "{before:?}");
    assert!(!home.join("queue/cards.queue.json").exists());
    q.add(card("small", "echo", "one more", None, &ws))
        .await
        .unwrap();
    let after = files(&cards);
    assert_eq!(after.len(), 61);
    // Every earlier document is the very file it was (no rewrite), and the
    // new one holds one small row.
    for (name, was) in &before {
        assert_eq!(after.get(name), Some(was), "{name} was rewritten");
    }
    let (name, (_, len)) = after
        .iter()
        .find(|(n, _)| !before.contains_key(*n))
        .unwrap();
    assert!(*len < 4096, "{name}: {len} bytes");
    let rows = rows_on_disk(&cards);
    assert_eq!(rows.len(), 61);
    assert_eq!(rows[0]["card"], "big-0");
    assert_eq!(rows[60]["card"], "small");
    // The rows read back in the order they were added, and still run.
    let listed: Vec<String> = q.rows(None).unwrap().into_iter().map(|r| r.card).collect();
    assert_eq!(listed.first().map(String::as_str), Some("big-0"));
    assert_eq!(listed.last().map(String::as_str), Some("small"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_cards_file_is_read_as_before_and_split_at_the_next_write() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(home.join("queue")).unwrap();
    let row = |card: &str, state: &str| {
        json!({"card": card, "workspace": "local", "round": 1, "component": "echo",
               "prompt": format!("{card}'s prompt"), "worker_key": format!("worker:{card}:r1"),
               "state": state, "attempts": 0, "updated_ms": 1})
    };
    let old = json!({"version": 1, "rows": [row("first", "done"), row("second", "pending")]});
    std::fs::write(home.join("queue/cards.queue.json"), old.to_string()).unwrap();
    let (rt, q) = open(&home, None).await;
    let listed: Vec<String> = q.rows(None).unwrap().into_iter().map(|r| r.card).collect();
    assert_eq!(listed, ["first", "second"]);
    let ws = rt.default_workspace().to_string();
    q.add(card("third", "echo", "after the split", None, &ws))
        .await
        .unwrap();
    assert!(!home.join("queue/cards.queue.json").exists());
    let rows = rows_on_disk(&home.join("queue/cards"));
    let cards: Vec<&str> = rows.iter().map(|r| r["card"].as_str().unwrap()).collect();
    assert_eq!(cards, ["first", "second", "third"]);
    assert_eq!(rows[1]["prompt"], "second's prompt");
    // The pending row of the old file runs.
    let _d = dispatch(&q);
    until(&q, "second", "done", |r| r.state == RowState::Done).await;
    // A reopened home reads the split documents the same.
    drop(q);
    let q = cairn_orchestration::Queue::open(rt.clone()).unwrap();
    let listed: Vec<String> = q.rows(None).unwrap().into_iter().map(|r| r.card).collect();
    assert_eq!(listed, ["first", "second", "third"]);
}
