//! The work queue (seed 001): a card is a unit of work with a component, a
//! prompt and a round; its worker is keyed `worker:<card>:r<round>`, one key,
//! one worker, one session for the whole round. A same-round re-dispatch
//! (an answer, a rework, a crash) resumes the stored worker; when it cannot
//! be resumed the card's bounded transcript is replayed into a fresh worker
//! (`resumed_by_replay`), and when that fails too the record is `blocked`,
//! the row `failed`, and `doctor` says so. Never two workers for one key.
//!
//! Rows: `pending → processing → done | awaiting | failed | blocked`;
//! `awaiting → pending` by `answer` or `rework`; `done | failed → pending`
//! by `rework`; a higher round supersedes a row in place (a processing row
//! only once it ends).
//!
//! A queue over an embedded runtime: add a card, dispatch until idle.
//!
//! ```
//! use cairn_orchestration::{NewCard, Queue, RowState};
//! use cairn_runtime::runtime::HOST_WORKSPACE;
//! use cairn_runtime::{Runtime, RuntimeConfig};
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let home = tempfile::tempdir()?;
//! let rt = Runtime::builder(RuntimeConfig::new(home.path())).open().await?;
//! let queue = Queue::open(rt.clone())?;
//! let card = NewCard {
//!     card: "greet".into(),
//!     component: "echo".into(),
//!     prompt: "hello".into(),
//!     round: None,
//!     workspace: HOST_WORKSPACE.into(),
//! };
//! assert_eq!(queue.add(card).await?.state, RowState::Pending);
//! queue.work(true).await?; // until no row is pending or processing
//! let rows = queue.rows(None)?;
//! assert_eq!((rows[0].state, rows[0].worker_key.as_str()), (RowState::Done, "worker:greet:r1"));
//! rt.shutdown(std::time::Duration::from_secs(5)).await;
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

mod dispatch;
pub mod doctor;
mod fairness;
pub mod model;
mod recover;

pub use model::{FileQueue, QueueStore, Record, RecordStatus, Resume, Row, RowState};

use cairn_runtime::runtime::{Runtime, RuntimeError};
use model::{Cards, NextRound, Records};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// Why a queue call was refused.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
    /// No such card (in this workspace).
    #[error("{0}")]
    NotFound(String),
    /// Not in a state that allows it.
    #[error("{0}")]
    Conflict(String),
    /// The workspace holds its `[quota] cards`.
    #[error("{0}")]
    Capacity(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] model::StoreFailure),
    /// The runtime refused.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// A card to add.
#[derive(Debug, Clone)]
pub struct NewCard {
    /// `[a-z0-9][a-z0-9-]{0,63}`.
    pub card: String,
    /// A built-in example name or `sha256:<hex>`.
    pub component: String,
    /// The prompt.
    pub prompt: String,
    /// The round (default 1).
    pub round: Option<u32>,
    /// The workspace.
    pub workspace: String,
}

/// An answer to an awaiting card.
#[derive(Debug, Clone)]
pub enum AnswerValue {
    /// Text.
    Text(String),
    /// A JSON value (a decision's answer).
    Value(serde_json::Value),
}

/// The queue of one home, and its dispatcher.
pub struct Queue {
    rt: Runtime,
    store: Box<dyn QueueStore>,
    /// One writer of the queue's documents at a time.
    lock: tokio::sync::Mutex<()>,
    wake: tokio::sync::Notify,
    max: usize,
    /// Cards with a dispatch in flight in this process.
    inflight: Mutex<HashSet<String>>,
    /// Which dispatch endings (key, run, outcome, reason) the ledger holds: read
    /// from the ledger on first use, so an ending written again after a
    /// crash is not written twice.
    ledgered: Mutex<Option<HashSet<String>>>,
    /// The rows' stamp when a fill last found nothing to start: until it
    /// changes, the next fill reads nothing (an idle queue of large cards
    /// costs a `stat` per tick, not a parse).
    quiet: Mutex<Option<[i64; 6]>>,
}

/// Check a card id: `[a-z0-9][a-z0-9-]{0,63}`.
pub fn check_card(card: &str) -> Result<(), QueueError> {
    let ok = !card.is_empty()
        && card.len() <= 64
        && card
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !card.starts_with('-');
    match ok {
        true => Ok(()),
        false => Err(QueueError::Invalid(format!(
            "card id {card:?} is not [a-z0-9][a-z0-9-]{{0,63}}"
        ))),
    }
}

impl Queue {
    /// The queue of `rt`'s home (made on first write).
    pub fn open(rt: Runtime) -> Result<Arc<Queue>, QueueError> {
        let store = FileQueue::open(rt.state_root(), !rt.is_read_only())?;
        Ok(Self::with_store(rt, Box::new(store)))
    }

    /// The queue of `rt` on `store`.
    pub fn with_store(rt: Runtime, store: Box<dyn QueueStore>) -> Arc<Queue> {
        let max = rt.host_config().queue.max_concurrency.max(1);
        Arc::new(Queue {
            rt,
            store,
            lock: Default::default(),
            wake: Default::default(),
            max,
            inflight: Default::default(),
            ledgered: Default::default(),
            quiet: Default::default(),
        })
    }

    /// The key of a card's round in a workspace.
    pub fn worker_key(&self, workspace: &str, card: &str, round: u32) -> String {
        if workspace == self.rt.default_workspace() {
            format!("worker:{card}:r{round}")
        } else {
            format!("worker:{workspace}/{card}:r{round}")
        }
    }

    /// The rows of `workspace` (every row with `None`).
    pub fn rows(&self, workspace: Option<&str>) -> Result<Vec<Row>, QueueError> {
        Ok(self
            .store
            .cards()?
            .rows
            .into_iter()
            .filter(|r| workspace.is_none_or(|w| r.workspace == w))
            .collect())
    }

    /// The worker records by key (retired ones under `<key>#retired-<n>`).
    pub fn records(&self) -> Result<std::collections::BTreeMap<String, Record>, QueueError> {
        Ok(self.store.records()?.sessions)
    }

    fn find<'a>(cards: &'a mut Cards, workspace: &str, card: &str) -> Option<&'a mut Row> {
        cards
            .rows
            .iter_mut()
            .find(|r| r.card == card && r.workspace == workspace)
    }

    /// Queue a card, or a new round of one: a higher round supersedes a
    /// row in place, a processing row once it ends.
    pub async fn add(&self, new: NewCard) -> Result<Row, QueueError> {
        check_card(&new.card)?;
        let round = new.round.unwrap_or(1);
        if round == 0 {
            return Err(QueueError::Invalid("rounds count from 1".into()));
        }
        if new.prompt.is_empty() {
            return Err(QueueError::Invalid("a card needs a prompt".into()));
        }
        // Checked here, not only at dispatch: a card never waits in the
        // queue's files with a prompt no run may take.
        let host = self.rt.host_config();
        let max_prompt = host.ceilings(&new.workspace).prompt_bytes;
        if new.prompt.len() as u64 > max_prompt {
            return Err(QueueError::Runtime(RuntimeError::TooLarge {
                size: new.prompt.len(),
                max: max_prompt as usize,
            }));
        }
        let quota = host.quota_of(
            &new.workspace,
            |q| q.cards,
            cairn_runtime::config::DEFAULT_CARDS,
        );
        let _guard = self.lock.lock().await;
        let mut cards = self.store.cards()?;
        let held = cards
            .rows
            .iter()
            .filter(|r| r.workspace == new.workspace)
            // Open cards: waiting for a slot, running, or waiting on an
            // answer (done and failed ones are closed).
            .filter(|r| {
                matches!(
                    r.state,
                    RowState::Pending | RowState::Processing | RowState::Awaiting
                )
            })
            .count();
        if held >= quota && Self::find(&mut cards, &new.workspace, &new.card).is_none() {
            return Err(QueueError::Capacity(format!(
                "workspace {:?} holds {held} open cards (pending, processing or awaiting), its [quota] cards",
                new.workspace
            )));
        }
        let key = self.worker_key(&new.workspace, &new.card, round);
        let now = cairn_runtime::fsutil::now_ms();
        let row = match Self::find(&mut cards, &new.workspace, &new.card) {
            None => {
                let row = Row {
                    card: new.card.clone(),
                    workspace: new.workspace.clone(),
                    round,
                    component: new.component,
                    prompt: new.prompt,
                    worker_key: key,
                    state: RowState::Pending,
                    attempts: 0,
                    last_reason: None,
                    resume: None,
                    next: None,
                    updated_ms: now,
                };
                cards.rows.push(row.clone());
                row
            }
            Some(row) if round <= row.round => {
                return Err(QueueError::Conflict(format!(
                    "card {} is in round {}; a new round must be higher",
                    new.card, row.round
                )));
            }
            Some(row) if row.state == RowState::Processing => {
                row.next = Some(NextRound {
                    round,
                    component: new.component,
                    prompt: new.prompt,
                });
                row.updated_ms = now;
                row.clone()
            }
            Some(row) => {
                let old = row.worker_key.clone();
                supersede(row, round, new.component, new.prompt, key, now);
                let row = row.clone();
                self.retire(&old, "superseded by a new round")?;
                row
            }
        };
        self.store.put_cards(&cards)?;
        self.wake.notify_one();
        Ok(row)
    }

    /// Retire the record of `key` (kept for audit under a new name).
    /// A session was deleted: the records naming it are retired, and a
    /// card waiting on it (pending or awaiting) ends `failed`, so no answer
    /// or dispatch makes its key a second worker. A processing card's run
    /// was cancelled by the delete; its end is recorded as any other.
    pub async fn session_deleted(
        &self,
        session: &cairn_runtime::ids::SessionId,
    ) -> Result<(), QueueError> {
        let _guard = self.lock.lock().await;
        let mut records = self.store.records()?;
        let keys: Vec<String> = records
            .sessions
            .iter()
            .filter(|(k, r)| !k.contains("#retired-") && r.session_id == *session)
            .map(|(k, _)| k.clone())
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        let why = format!("its session {session} was deleted");
        for key in &keys {
            retire_in(&mut records, key, &why);
        }
        self.store.put_records(&records)?;
        let mut cards = self.store.cards()?;
        let now = cairn_runtime::fsutil::now_ms();
        let mut changed = false;
        for row in cards
            .rows
            .iter_mut()
            .filter(|r| keys.contains(&r.worker_key))
        {
            if matches!(row.state, RowState::Pending | RowState::Awaiting) {
                row.state = RowState::Failed;
                row.last_reason = Some(why.clone());
                row.resume = None;
                row.updated_ms = now;
                changed = true;
            }
        }
        if changed {
            self.store.put_cards(&cards)?;
        }
        Ok(())
    }

    fn retire(&self, key: &str, why: &str) -> Result<(), QueueError> {
        let mut records = self.store.records()?;
        retire_in(&mut records, key, why);
        self.store.put_records(&records)?;
        Ok(())
    }

    /// Answer an awaiting card: its pending decision, or, after a question
    /// or a park, a new run of the same worker carrying the answer.
    pub async fn answer(
        &self,
        workspace: &str,
        card: &str,
        answer: AnswerValue,
    ) -> Result<Row, QueueError> {
        let _guard = self.lock.lock().await;
        let records = self.store.records()?;
        let mut cards = self.store.cards()?;
        let row = Self::find(&mut cards, workspace, card)
            .ok_or_else(|| QueueError::NotFound(format!("no card {card}")))?;
        if row.state != RowState::Awaiting {
            return Err(QueueError::Conflict(format!(
                "card {card} is {:?}, not awaiting: nothing asked for an answer",
                row.state
            )));
        }
        let decision = records
            .sessions
            .get(&row.worker_key)
            .and_then(|r| r.pending_decision.clone());
        row.resume = Some(match (decision, answer) {
            (Some(decision_id), AnswerValue::Value(value)) => Resume::Decide { decision_id, value },
            (Some(decision_id), AnswerValue::Text(text)) => Resume::Decide {
                decision_id,
                value: serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
            },
            (None, AnswerValue::Text(text)) => Resume::Prompt {
                prompt: format!("Answer: {text}"),
            },
            (None, AnswerValue::Value(v)) => Resume::Prompt {
                prompt: format!("Answer: {v}"),
            },
        });
        row.state = RowState::Pending;
        row.updated_ms = cairn_runtime::fsutil::now_ms();
        let row = row.clone();
        self.store.put_cards(&cards)?;
        self.wake.notify_one();
        Ok(row)
    }

    /// Ask for rework of a card that ended (done, failed or awaiting): a
    /// new run of the same worker carrying the reason.
    pub async fn rework(
        &self,
        workspace: &str,
        card: &str,
        reason: &str,
    ) -> Result<Row, QueueError> {
        if reason.trim().is_empty() {
            return Err(QueueError::Invalid("a rework needs a reason".into()));
        }
        let _guard = self.lock.lock().await;
        let records = self.store.records()?;
        let mut cards = self.store.cards()?;
        let row = Self::find(&mut cards, workspace, card)
            .ok_or_else(|| QueueError::NotFound(format!("no card {card}")))?;
        if !matches!(
            row.state,
            RowState::Done | RowState::Awaiting | RowState::Failed
        ) {
            return Err(QueueError::Conflict(format!(
                "card {card} is {:?}; rework is for a card whose run ended",
                row.state
            )));
        }
        if let Some(d) = records
            .sessions
            .get(&row.worker_key)
            .and_then(|r| r.pending_decision.as_ref())
        {
            return Err(QueueError::Conflict(format!(
                "card {card} waits on decision {d}: answer it (cairn queue answer) first"
            )));
        }
        row.resume = Some(Resume::Prompt {
            prompt: format!("Rework requested: {reason}"),
        });
        row.state = RowState::Pending;
        row.last_reason = Some(format!("rework: {reason}"));
        row.updated_ms = cairn_runtime::fsutil::now_ms();
        let row = row.clone();
        self.store.put_cards(&cards)?;
        self.wake.notify_one();
        Ok(row)
    }

    /// The ledger's rows.
    pub fn ledger(&self) -> Result<Vec<serde_json::Value>, QueueError> {
        Ok(self.store.ledger()?)
    }
}

fn supersede(row: &mut Row, round: u32, component: String, prompt: String, key: String, now: u64) {
    row.round = round;
    row.component = component;
    row.prompt = prompt;
    row.worker_key = key;
    row.state = RowState::Pending;
    row.attempts = 0;
    row.last_reason = Some(format!("round {round} superseded the last"));
    row.resume = None;
    row.next = None;
    row.updated_ms = now;
}

fn retire_in(records: &mut Records, key: &str, why: &str) {
    if let Some(mut record) = records.sessions.remove(key) {
        record.status = RecordStatus::Retired;
        record.reason = Some(why.to_string());
        let n = records
            .sessions
            .keys()
            .filter(|k| k.starts_with(&format!("{key}#retired-")))
            .count();
        records
            .sessions
            .insert(format!("{key}#retired-{}", n + 1), record);
    }
}
