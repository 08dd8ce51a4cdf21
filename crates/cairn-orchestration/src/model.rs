//! The work queue's durable state and its file store: `<home>/queue/`
//! `cards/` (one document per card's row, version 1; before, every row was
//! in `cards.queue.json`, read as before and split at the next write),
//! `sessions.state.json` (the
//! worker records by key, version 3, keys in the `worker:` namespace) and
//! `ledger.jsonl` (one terminal `worker-session` row per dispatch that
//! ended). Both documents are written atomically (temp file, fsync,
//! rename, directory fsync); the ledger is appended and fsynced, before the
//! documents, once per ending (see `Queue::ledger_once`).

use cairn_runtime::fsutil;
use cairn_runtime::ids::{DecisionId, RunId, SessionId, WorkerId};
use cap_std::fs::Dir;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;

/// The queue's directory in the home.
pub const DIR: &str = "queue";
/// Where every row was before each card had its own document.
pub const CARDS: &str = "cards.queue.json";
/// One document per card: `<v5 of workspace and card>.json`.
pub const CARD_DIR: &str = "cards";
/// The key → worker session map of dispatched cards.
pub const SESSIONS: &str = "sessions.state.json";
/// Every dispatch's end, one JSON line each.
pub const LEDGER: &str = "ledger.jsonl";
/// A card's transcript (each dispatch's prompt and answer) is kept to this.
pub const TRANSCRIPT_BYTES: usize = 64 << 10;

/// Where a row stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RowState {
    /// Waiting for a dispatch slot.
    Pending,
    /// Its worker runs (the row is the concurrency slot).
    Processing,
    /// It asked a question, waits on a decision, or parked: `answer` or
    /// `rework` re-dispatches it.
    Awaiting,
    /// Its last run finished with an answer.
    Done,
    /// Its last run failed or was cancelled.
    Failed,
    /// Its worker could not be resumed nor replayed: a human must look.
    Blocked,
}

/// What a re-dispatch gives the stored worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Resume {
    /// Answer the decision the last run waits on.
    Decide {
        /// The decision.
        decision_id: DecisionId,
        /// The answer.
        value: serde_json::Value,
    },
    /// A new run that continues the last one (or resumes it when parked).
    Prompt {
        /// The resume prompt: the answer or the rework reason.
        prompt: String,
    },
}

/// A higher round added while the row was processing: applied when it ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NextRound {
    /// The round.
    pub round: u32,
    /// Its component.
    pub component: String,
    /// Its prompt.
    pub prompt: String,
}

/// One card's row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Row {
    /// The card.
    pub card: String,
    /// Its workspace.
    pub workspace: String,
    /// Its round (from 1).
    pub round: u32,
    /// The component: a built-in example name or `sha256:<hex>`.
    pub component: String,
    /// The card's prompt.
    pub prompt: String,
    /// `worker:<card>:r<round>` (`worker:<workspace>/<card>:r<round>`
    /// outside the default workspace).
    pub worker_key: String,
    /// Where it stands.
    pub state: RowState,
    /// Dispatches started this round (a crash recovery counts none).
    pub attempts: u32,
    /// Why it last left `processing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reason: Option<String>,
    /// What the next dispatch gives the stored worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<Resume>,
    /// A higher round waiting for this processing row to end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<NextRound>,
    /// When the row last changed (ms since the epoch).
    pub updated_ms: u64,
}

/// `cards.queue.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cards {
    /// 1.
    pub version: u64,
    /// The rows, in the order cards were added.
    pub rows: Vec<Row>,
}

/// `cards/<name>.json`: one card's row, and where it stands among the
/// others (the order cards were added).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CardDoc {
    /// 1.
    version: u64,
    /// Its place in the order cards were added.
    order: u64,
    /// The row.
    row: Row,
}

/// The name of a row's document: a v5 UUID of its workspace and card, so
/// no card name reaches the file system.
fn card_file(row: &Row) -> String {
    const NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x2b8e_61d4_7c93_4f0a_9e15_c4a7_30d2_58f1);
    let id = uuid::Uuid::new_v5(
        &NAMESPACE,
        format!("{}\0{}", row.workspace, row.card).as_bytes(),
    );
    format!("{id}.json")
}

/// What this process knows `cards/` holds: each document's order and row.
type CardFiles = BTreeMap<String, (u64, Row)>;

/// The rows as last read or written, with `cards/`'s stamp then.
type CachedRows = (Option<[i64; 6]>, Vec<Row>);

/// A worker record's standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecordStatus {
    /// The key's worker.
    Active,
    /// A past round's (or a recreated worktree's) worker, kept for audit.
    Retired,
    /// Its worker could not be resumed and the replay failed.
    Blocked,
}

/// One prompt and its answer, for the replay fallback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TranscriptTurn {
    /// What the dispatch asked.
    pub prompt: String,
    /// The run's final text.
    pub answer: String,
}

/// The worker a key has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// `worker:<card>:r<round>`.
    pub key: String,
    /// The card.
    pub card: String,
    /// The round.
    pub round: u32,
    /// The workspace.
    pub workspace: String,
    /// The worker.
    pub worker_id: WorkerId,
    /// Its session (persisted before any run starts), as stores key it.
    #[serde(with = "cairn_runtime::ids::session_key")]
    #[schemars(with = "String")]
    pub session_id: SessionId,
    /// The worktree identity written into the worker (`worktree.json`).
    pub worktree: String,
    /// Its standing.
    pub status: RecordStatus,
    /// Its worker was made by replaying the card's transcript.
    #[serde(default)]
    pub resumed_by_replay: bool,
    /// The last run dispatched to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<RunId>,
    /// The decision that run waits on, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_decision: Option<DecisionId>,
    /// The last run whose end was recorded (so a recovery records it once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_run: Option<RunId>,
    /// Each ended dispatch's prompt and answer, oldest first, at most
    /// [`TRANSCRIPT_BYTES`] of text.
    #[serde(default)]
    pub transcript: Vec<TranscriptTurn>,
    /// Why it is blocked or retired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it was made.
    pub created_ms: u64,
}

impl Record {
    /// Keep the transcript within its bound, dropping the oldest turns.
    pub fn push_turn(&mut self, prompt: String, answer: String) {
        self.transcript.push(TranscriptTurn { prompt, answer });
        let size = |t: &TranscriptTurn| t.prompt.len() + t.answer.len();
        while self.transcript.iter().map(size).sum::<usize>() > TRANSCRIPT_BYTES
            && self.transcript.len() > 1
        {
            self.transcript.remove(0);
        }
        if let Some(t) = self.transcript.first_mut()
            && size(t) > TRANSCRIPT_BYTES
        {
            t.prompt.truncate(TRANSCRIPT_BYTES / 2);
            t.answer.truncate(TRANSCRIPT_BYTES / 2);
        }
    }
}

/// `sessions.state.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Records {
    /// 3.
    pub version: u64,
    /// Records by key; retired ones under `<key>#retired-<n>`.
    pub sessions: BTreeMap<String, Record>,
    /// What an older file (version 1 or 2, before the `worker:` namespace)
    /// held that is not a worker record, kept as it was: read as before,
    /// written back with the file's upgrade to version 3.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub legacy: BTreeMap<String, serde_json::Value>,
}

impl Records {
    /// An older file's contents as version 3: its `worker:` records (when
    /// they read as records) keep their keys; everything else is kept
    /// aside in `legacy`, unchanged.
    fn upgrade(old: serde_json::Value) -> Records {
        let mut out = Records {
            version: 3,
            ..Default::default()
        };
        let serde_json::Value::Object(top) = old else {
            return out;
        };
        for (name, value) in top {
            match (name.as_str(), value) {
                ("version", _) => {}
                ("sessions", serde_json::Value::Object(entries)) => {
                    for (key, entry) in entries {
                        let record = key
                            .starts_with("worker:")
                            .then(|| serde_json::from_value::<Record>(entry.clone()).ok())
                            .flatten();
                        match record {
                            Some(r) => {
                                out.sessions.insert(key, r);
                            }
                            None => {
                                out.legacy.insert(format!("sessions.{key}"), entry);
                            }
                        }
                    }
                }
                (_, value) => {
                    out.legacy.insert(name, value);
                }
            }
        }
        out
    }
}

/// A queue store failure.
#[derive(Debug, thiserror::Error)]
#[error("the work queue's store: {0}")]
pub struct StoreFailure(pub String);

/// Where the queue's state lives.
pub trait QueueStore: Send + Sync {
    /// The rows.
    fn cards(&self) -> Result<Cards, StoreFailure>;
    /// Replace the rows (durable on return).
    fn put_cards(&self, cards: &Cards) -> Result<(), StoreFailure>;
    /// The records.
    fn records(&self) -> Result<Records, StoreFailure>;
    /// Replace the records (durable on return).
    fn put_records(&self, records: &Records) -> Result<(), StoreFailure>;
    /// Append a terminal ledger row (durable on return).
    fn append_ledger(&self, row: &serde_json::Value) -> Result<(), StoreFailure>;
    /// The ledger's rows.
    fn ledger(&self) -> Result<Vec<serde_json::Value>, StoreFailure>;
    /// A mark that changes whenever the rows do (the file's inode, size
    /// and times: every write replaces it), so a dispatcher with nothing
    /// to do re-reads nothing until they change. `None`: always re-read.
    fn cards_stamp(&self) -> Option<[i64; 6]> {
        None
    }
}

/// The file store: `<home>/queue/`, made on the first write.
pub struct FileQueue {
    root: Dir,
    writable: bool,
    /// `cards/` as last read or written (`None`: not known yet), so a
    /// write replaces only the rows that changed.
    known: std::sync::Mutex<Option<CardFiles>>,
    /// The rows as last read or written, and `cards/`'s stamp then: while
    /// the stamp holds, nothing else wrote them and they are not parsed
    /// again.
    rows: std::sync::Mutex<Option<CachedRows>>,
}

/// An append a crash cut short leaves a last line without its newline;
/// the next row must not be glued to it. Cut the file back to its last
/// whole line (the reader already ignores such a tail).
fn cut_torn_tail(file: &mut cap_std::fs::File) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let mut last = [0u8; 1];
    file.seek(SeekFrom::Start(len - 1))?;
    file.read_exact(&mut last)?;
    if last[0] == b'\n' {
        return Ok(());
    }
    let mut text = Vec::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_end(&mut text)?;
    let keep = text.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    file.set_len(keep as u64)
}

impl FileQueue {
    /// The queue of the home whose root is `root`; `writable` when this
    /// process owns the home.
    pub fn open(root: &Dir, writable: bool) -> Result<Self, StoreFailure> {
        let root = root
            .try_clone()
            .map_err(|e| StoreFailure(format!("cannot open the home: {e}")))?;
        Ok(FileQueue {
            root,
            writable,
            known: std::sync::Mutex::new(None),
            rows: std::sync::Mutex::new(None),
        })
    }

    fn rows_cache(&self) -> std::sync::MutexGuard<'_, Option<CachedRows>> {
        self.rows.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Option<CardFiles>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every card document of `cards/`, in the order cards were added.
    fn card_docs(&self, dir: &Dir) -> Result<Vec<(String, CardDoc)>, StoreFailure> {
        let cards = match dir.open_dir(CARD_DIR) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(StoreFailure(format!("{DIR}/{CARD_DIR}/: {e}"))),
        };
        let fail = |e: &dyn std::fmt::Display| StoreFailure(format!("{DIR}/{CARD_DIR}/: {e}"));
        let mut docs = Vec::new();
        for entry in cards.entries().map_err(|e| fail(&e))? {
            let entry = entry.map_err(|e| fail(&e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // Temp files of an interrupted write start with a dot.
            if name.starts_with('.') || !name.ends_with(".json") {
                continue;
            }
            let doc = fsutil::read_document::<CardDoc>(&cards, &name, 1)
                .map_err(|e| StoreFailure(format!("{DIR}/{CARD_DIR}/{name}: {e}")))?;
            docs.push((name, doc));
        }
        docs.sort_by_key(|(name, doc)| (doc.order, name.clone()));
        Ok(docs)
    }

    fn existing(&self) -> Option<Dir> {
        self.root.open_dir(DIR).ok()
    }

    fn dir(&self) -> Result<Dir, StoreFailure> {
        if !self.writable {
            return Err(StoreFailure(format!(
                "this home is open read-only; {DIR}/ is not written"
            )));
        }
        fsutil::ensure_dir(&self.root, DIR)
            .map_err(|e| StoreFailure(format!("cannot make {DIR}/: {e}")))
    }

    fn read<T: serde::de::DeserializeOwned + Default>(
        &self,
        name: &str,
        version: u64,
    ) -> Result<T, StoreFailure> {
        let Some(dir) = self.existing() else {
            return Ok(T::default());
        };
        match fsutil::read_document::<T>(&dir, name, version) {
            Ok(doc) => Ok(doc),
            Err(e) if e.is_not_found() => Ok(T::default()),
            Err(e) => Err(StoreFailure(format!("{DIR}/{name}: {e}"))),
        }
    }

    fn write<T: Serialize>(&self, name: &str, doc: &T) -> Result<(), StoreFailure> {
        let bytes = serde_json::to_vec_pretty(doc).map_err(|e| StoreFailure(e.to_string()))?;
        fsutil::write_document(&self.dir()?, name, &bytes)
            .map_err(|e| StoreFailure(format!("cannot write {DIR}/{name}: {e}")))
    }
}

impl QueueStore for FileQueue {
    fn cards_stamp(&self) -> Option<[i64; 6]> {
        use cap_std::fs::MetadataExt;
        // Every write of a row renames a document into `cards/` (or an
        // older home's one file is replaced): the directory's times change.
        let dir = self.existing()?;
        let m = dir
            .metadata(CARDS)
            .or_else(|_| dir.metadata(CARD_DIR))
            .ok()?;
        Some([
            m.ino() as i64,
            m.len() as i64,
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
        ])
    }

    fn cards(&self) -> Result<Cards, StoreFailure> {
        let Some(dir) = self.existing() else {
            return Ok(Cards {
                version: 1,
                rows: Vec::new(),
            });
        };
        if dir.exists(CARDS) {
            // An older home: every row in one file, the truth until the
            // next write splits it (a split a crash cut short included).
            *self.known() = None;
            let mut c: Cards = self.read(CARDS, 1)?;
            c.version = 1;
            return Ok(c);
        }
        let stamp = self.cards_stamp();
        if stamp.is_some()
            && self.known().is_some()
            && let Some((held, rows)) = self.rows_cache().as_ref()
            && *held == stamp
        {
            return Ok(Cards {
                version: 1,
                rows: rows.clone(),
            });
        }
        let docs = self.card_docs(&dir)?;
        let mut known = CardFiles::new();
        let mut rows = Vec::with_capacity(docs.len());
        for (name, doc) in docs {
            known.insert(name, (doc.order, doc.row.clone()));
            rows.push(doc.row);
        }
        *self.known() = Some(known);
        *self.rows_cache() = Some((stamp, rows.clone()));
        Ok(Cards { version: 1, rows })
    }

    /// Only the rows that changed are written, each its own document
    /// (atomically: temp file, fsync, rename, directory fsync), so adding
    /// a card costs one small document however many cards there are.
    fn put_cards(&self, cards: &Cards) -> Result<(), StoreFailure> {
        let dir = self.dir()?;
        let fail = |e: &dyn std::fmt::Display| {
            StoreFailure(format!("cannot write {DIR}/{CARD_DIR}/: {e}"))
        };
        let card_dir = fsutil::ensure_dir(&dir, CARD_DIR).map_err(|e| fail(&e))?;
        let older = dir.exists(CARDS);
        let mut known = self.known();
        let held = match known.take() {
            Some(k) => k,
            None => self
                .card_docs(&dir)?
                .into_iter()
                .map(|(name, doc)| (name, (doc.order, doc.row)))
                .collect(),
        };
        let mut next = held.values().map(|(o, _)| *o + 1).max().unwrap_or(0);
        let mut now = CardFiles::new();
        let result = (|| {
            for row in &cards.rows {
                let name = card_file(row);
                let order = match held.get(&name) {
                    Some((o, _)) => *o,
                    None => {
                        next += 1;
                        next - 1
                    }
                };
                if held.get(&name).map(|(_, r)| r) != Some(row) {
                    let doc = CardDoc {
                        version: 1,
                        order,
                        row: row.clone(),
                    };
                    let bytes = serde_json::to_vec_pretty(&doc).map_err(|e| fail(&e))?;
                    fsutil::write_document(&card_dir, &name, &bytes).map_err(|e| fail(&e))?;
                }
                now.insert(name, (order, row.clone()));
            }
            let mut removed = false;
            for name in held.keys().filter(|n| !now.contains_key(*n)) {
                card_dir.remove_file(name).map_err(|e| fail(&e))?;
                removed = true;
            }
            if removed {
                fsutil::sync_dir(&card_dir).map_err(|e| fail(&e))?;
            }
            if older {
                // Split: the one file goes once every row has its own.
                dir.remove_file(CARDS).map_err(|e| fail(&e))?;
                fsutil::sync_dir(&dir).map_err(|e| fail(&e))?;
            }
            Ok(())
        })();
        // What is on disk is known only after a write that went through.
        if result.is_ok() {
            *known = Some(now);
            *self.rows_cache() = Some((self.cards_stamp(), cards.rows.clone()));
        } else {
            *self.rows_cache() = None;
        }
        result
    }

    fn records(&self) -> Result<Records, StoreFailure> {
        let fresh = || Records {
            version: 3,
            ..Default::default()
        };
        let fail = |e: &dyn std::fmt::Display| StoreFailure(format!("{DIR}/{SESSIONS}: {e}"));
        let Some(dir) = self.existing() else {
            return Ok(fresh());
        };
        match fsutil::read_document::<Records>(&dir, SESSIONS, 3) {
            Ok(r) => Ok(Records { version: 3, ..r }),
            Err(e) if e.is_not_found() => Ok(fresh()),
            Err(fsutil::DocumentError::Version { found, .. }) if found < 3 => {
                // Version 1 or 2: read as before, upgraded when next written.
                let bytes = dir.read(SESSIONS).map_err(|e| fail(&e))?;
                let old = serde_json::from_slice(&bytes).map_err(|e| fail(&e))?;
                Ok(Records::upgrade(old))
            }
            Err(e) => Err(fail(&e)),
        }
    }

    fn put_records(&self, records: &Records) -> Result<(), StoreFailure> {
        self.write(SESSIONS, records)
    }

    fn append_ledger(&self, row: &serde_json::Value) -> Result<(), StoreFailure> {
        let fail =
            |e: std::io::Error| StoreFailure(format!("cannot append to {DIR}/{LEDGER}: {e}"));
        let mut file = fsutil::open_append(&self.dir()?, LEDGER).map_err(fail)?;
        cut_torn_tail(&mut file).map_err(fail)?;
        let mut line = row.to_string();
        line.push('\n');
        file.write_all(line.as_bytes()).map_err(fail)?;
        fsutil::count_sync();
        file.sync_data().map_err(fail)
    }

    fn ledger(&self) -> Result<Vec<serde_json::Value>, StoreFailure> {
        let Some(dir) = self.existing() else {
            return Ok(Vec::new());
        };
        let text = match dir.read_to_string(LEDGER) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(StoreFailure(format!("{DIR}/{LEDGER}: {e}"))),
        };
        // A last line without its newline is an append a crash cut short.
        let whole = match text.rfind('\n') {
            Some(end) => &text[..end],
            None => "",
        };
        whole
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str(l)
                    .map_err(|e| StoreFailure(format!("{DIR}/{LEDGER}:{}: {e}", i + 1)))
            })
            .collect()
    }
}

/// The record of a worker made (or found) for `row`'s key.
pub(crate) fn record_of(
    row: &Row,
    worker_id: cairn_runtime::ids::WorkerId,
    session: SessionId,
    identity: String,
    replayed: bool,
    transcript: Vec<TranscriptTurn>,
    reason: Option<String>,
) -> Record {
    Record {
        key: row.worker_key.clone(),
        card: row.card.clone(),
        round: row.round,
        workspace: row.workspace.clone(),
        worker_id,
        session_id: session,
        worktree: identity,
        status: RecordStatus::Active,
        resumed_by_replay: replayed,
        last_run: None,
        pending_decision: None,
        ended_run: None,
        transcript,
        reason,
        created_ms: cairn_runtime::fsutil::now_ms(),
    }
}
