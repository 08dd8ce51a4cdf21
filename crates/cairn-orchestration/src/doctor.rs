//! `cairn doctor` and `GET /v1/doctor`: what in a home needs a human. A
//! reader: it takes no lock and changes nothing.
//!
//! The report (JSON, `"version": 1`): `home` (its path; absent from a
//! report scoped to one workspace, which names it in `workspace`: what
//! `GET /v1/doctor` answers a workspace token), `workers` (counts by status),
//! `queue` (rows by state, records by status, the keys `resumed_by_replay`),
//! `problems` (each `{"kind", "subject", "detail"}`; any problem means
//! exit 1) and `notes` (worth knowing, nothing to do). Problem kinds:
//! `blocked_record`, `stale_worker`, `missing_worktree`, `corrupt_session`,
//! `interrupted_run`, `missing_component`, `queue_unreadable`,
//! `unrecorded_child`, `orphan_worker`, `ending_unwritten`, `double_run`.
//! Note kinds:
//! `stale_lock`.

use super::model::{RecordStatus, RowState};
use super::{FileQueue, QueueStore};
use cairn_runtime::ids::Seq;
use cairn_runtime::journal::event::{LifecycleEvent, Payload};
use cairn_runtime::runtime::Runtime;
use cairn_runtime::worker::WorkerStatus;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// One finding.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Finding {
    /// What kind of problem.
    pub kind: String,
    /// What it is about: a key, a worker, a session, a run, a file.
    pub subject: String,
    /// For people.
    pub detail: String,
}

/// The doctor's report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// 1.
    pub version: u64,
    /// The home (absent from a report scoped to one workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
    /// The one workspace the report covers, when it is scoped to one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Whether nothing needs attention.
    pub ok: bool,
    /// Workers by status (`active`, `stale`), and the total.
    pub workers: BTreeMap<String, usize>,
    /// The work queue: rows by state, records by status, replayed keys.
    pub queue: Value,
    /// What needs a human.
    pub problems: Vec<Finding>,
    /// Worth knowing; nothing to do.
    pub notes: Vec<Finding>,
}

/// Examine the home `rt` reads (a read-only runtime: nothing restored).
/// `served` says whether a live process holds the home (its live runs are
/// then not interrupted).
pub async fn examine(rt: &Runtime, served: bool) -> Report {
    examine_in(rt, served, None).await
}

/// [`examine`], of one workspace's workers and cards when `scope` names
/// it (what a tenant's token sees: nothing of the others, not even their
/// counts, and no host path); of the whole home when it is `None`.
pub async fn examine_in(rt: &Runtime, served: bool, scope: Option<&str>) -> Report {
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let mut workers: BTreeMap<String, usize> = BTreeMap::new();
    let mut total = 0;
    for audit in rt.audit_workers() {
        let id = audit.id;
        let record = match audit.record {
            Ok(r) if scope.is_some_and(|ws| ws != r.workspace) => continue,
            Ok(r) => r,
            // A record nobody can read names no workspace: the operator's.
            Err(_) if scope.is_some() => continue,
            Err(e) => {
                problems.push(Finding {
                    kind: "corrupt_session".into(),
                    subject: format!("worker {id}"),
                    detail: e,
                });
                continue;
            }
        };
        if let (Some(parent), Some(false)) = (&record.parent, audit.listed_by_parent) {
            problems.push(Finding {
                kind: "unrecorded_child".into(),
                subject: format!("session {}", record.session_id),
                detail: format!(
                    "worker {id} names parent {} but is not among its children (a spawn cut short and never resumed): the parent's next replay adopts it; else prune or delete it",
                    parent.worker_id
                ),
            });
        }
        total += 1;
        let status = match record.status {
            WorkerStatus::Active => "active",
            WorkerStatus::Stale => "stale",
        };
        *workers.entry(status.into()).or_default() += 1;
        if record.status == WorkerStatus::Stale {
            problems.push(Finding {
                kind: "stale_worker".into(),
                subject: format!("session {}", record.session_id),
                detail: format!("worker {id} is stale (a restore or replay failed): inspect it, then delete or fork it"),
            });
        }
        if let (Some(c), Some(false)) = (&record.component, audit.component_stored) {
            problems.push(Finding {
                kind: "missing_component".into(),
                subject: c.clone(),
                detail: format!(
                    "session {} runs {c}, which this home no longer stores",
                    record.session_id
                ),
            });
        }
        match rt.read(&record.session_id, Seq(0)).await {
            Err(e) => problems.push(Finding {
                kind: "corrupt_session".into(),
                subject: format!("session {}", record.session_id),
                detail: e.to_string(),
            }),
            Ok(items) if !served => {
                if let Some(run) = interrupted(items.iter().filter_map(|i| i.event())) {
                    problems.push(Finding {
                        kind: "interrupted_run".into(),
                        subject: format!("run {run}"),
                        detail: format!("run {run} of session {} has no end: the next `cairn serve` (or `cairn run`) restores it", record.session_id),
                    });
                }
            }
            Ok(_) => {}
        }
    }
    workers.insert("total".into(), total);
    let queue = queue_report(rt, scope, served, &mut problems).await;
    if !served
        && scope.is_none()
        && let Some(holder) = rt.stale_lock()
    {
        notes.push(Finding {
            kind: "stale_lock".into(),
            subject: cairn_runtime::home_lock::LOCK_FILE.into(),
            detail: format!(
                "the lock file names pid {} ({}), which no longer holds it: harmless, the next owner overwrites it",
                holder.pid, holder.command
            ),
        });
    }
    Report {
        version: 1,
        home: scope.is_none().then(|| rt.home_label()),
        workspace: scope.map(str::to_string),
        ok: problems.is_empty(),
        workers,
        queue,
        problems,
        notes,
    }
}

/// The run that started and has no end, if any.
fn interrupted<'a>(
    events: impl Iterator<Item = &'a cairn_runtime::SessionEvent>,
) -> Option<cairn_runtime::RunId> {
    let mut open = None;
    for e in events {
        if let Payload::Lifecycle(l) = &e.payload {
            match l {
                LifecycleEvent::Started { .. } => open = e.run_id,
                l if l.is_terminal() && e.run_id == open => open = None,
                _ => {}
            }
        }
    }
    open
}

async fn queue_report(
    rt: &Runtime,
    scope: Option<&str>,
    served: bool,
    problems: &mut Vec<crate::doctor::Finding>,
) -> Value {
    let store = match FileQueue::open(rt.state_root(), false) {
        Ok(s) => s,
        Err(e) => {
            problems.push(Finding {
                kind: "queue_unreadable".into(),
                subject: "queue/".into(),
                detail: e.to_string(),
            });
            return Value::Null;
        }
    };
    let (cards, records) = match (store.cards(), store.records()) {
        (Ok(c), Ok(r)) => (c, r),
        (Err(e), _) | (_, Err(e)) => {
            problems.push(Finding {
                kind: "queue_unreadable".into(),
                subject: "queue/".into(),
                detail: e.to_string(),
            });
            return Value::Null;
        }
    };
    let mut rows: BTreeMap<String, usize> = BTreeMap::new();
    let ours = |ws: &str| scope.is_none_or(|s| s == ws);
    for r in cards.rows.iter().filter(|r| ours(&r.workspace)) {
        let name = serde_json::to_value(r.state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        *rows.entry(name).or_default() += 1;
        if r.state == RowState::Blocked {
            problems.push(Finding {
                kind: "blocked_record".into(),
                subject: r.worker_key.clone(),
                detail: r.last_reason.clone().unwrap_or_default(),
            });
        }
    }
    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    let mut replayed = Vec::new();
    for (key, record) in records.sessions.iter().filter(|(_, r)| ours(&r.workspace)) {
        let name = serde_json::to_value(record.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        *by_status.entry(name).or_default() += 1;
        if record.resumed_by_replay {
            replayed.push(key.clone());
        }
        match record.status {
            RecordStatus::Blocked => problems.push(Finding {
                kind: "blocked_record".into(),
                subject: key.clone(),
                detail: record.reason.clone().unwrap_or_default(),
            }),
            RecordStatus::Active => {
                let marker = rt.worktree_identity(record.worker_id).ok().flatten();
                if marker != Some((record.key.clone(), record.worktree.clone())) {
                    problems.push(Finding {
                        kind: "missing_worktree".into(),
                        subject: key.clone(),
                        detail: format!("worker {} of {key} has no matching worktree: the next dispatch replays the card into a fresh worker", record.worker_id),
                    });
                }
            }
            RecordStatus::Retired => {}
        }
    }
    // The records against the journals: a row left processing whose run
    // ended (its ending not written: the next start writes it), and a key
    // the ledger says ended done by two runs (a card run twice).
    if !served {
        for row in cards.rows.iter().filter(|r| ours(&r.workspace)) {
            if row.state != RowState::Processing {
                continue;
            }
            let Some(record) = records.sessions.get(&row.worker_key) else {
                continue;
            };
            let ended = rt
                .session_runs(&record.session_id)
                .await
                .ok()
                .and_then(|mut runs| runs.pop())
                .and_then(|r| r.facts)
                .filter(|f| f.started_at_ms >= row.updated_ms);
            if let Some(f) = ended {
                problems.push(Finding {
                    kind: "ending_unwritten".into(),
                    subject: row.worker_key.clone(),
                    detail: format!(
                        "card {} is processing but its run {} ended (a crash while its ending was written): the next start writes the ending from the journal",
                        row.card, f.run_id
                    ),
                });
            }
        }
    }
    let mut done_by: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for l in store.ledger().unwrap_or_default() {
        if l["outcome"] == "done"
            && let (Some(key), Some(run)) = (l["key"].as_str(), l["run_id"].as_str())
            && l["workspace"].as_str().is_none_or(ours)
        {
            done_by
                .entry(key.to_string())
                .or_default()
                .insert(run.to_string());
        }
    }
    for (key, runs) in done_by.into_iter().filter(|(_, r)| r.len() > 1) {
        problems.push(Finding {
            kind: "double_run".into(),
            subject: key.clone(),
            detail: format!(
                "the ledger says {key} ended done {} times, by runs {}: its work was done more than once",
                runs.len(),
                runs.into_iter().collect::<Vec<_>>().join(", ")
            ),
        });
    }
    // A worker made for a key no record names: a dispatch cut short
    // between making the worker and recording it.
    for (worker, session, key, _) in rt.worktree_marks() {
        if records.sessions.contains_key(&key) {
            continue;
        }
        let Some(row) = cards.rows.iter().find(|r| r.worker_key == key) else {
            continue;
        };
        if !ours(&row.workspace) {
            continue;
        }
        problems.push(Finding {
            kind: "orphan_worker".into(),
            subject: key.clone(),
            detail: format!(
                "worker {worker} (session {session}) was made for {key} but no record names it (a dispatch cut short): the next start adopts it"
            ),
        });
    }
    json!({ "rows": rows, "records": by_status, "resumed_by_replay": replayed })
}

impl Report {
    /// The report for people.
    pub fn render(&self) -> String {
        let mut out = match (&self.home, &self.workspace) {
            (Some(home), _) => format!("home {home}\n"),
            (None, Some(ws)) => format!("workspace {ws}\n"),
            (None, None) => String::new(),
        };
        let counts = |m: &BTreeMap<String, usize>| {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push_str(&format!("workers: {}\n", counts(&self.workers)));
        if let Some(rows) = self.queue["rows"].as_object().filter(|r| !r.is_empty()) {
            let rows: Vec<String> = rows.iter().map(|(k, v)| format!("{k} {v}")).collect();
            out.push_str(&format!("queue: {}\n", rows.join(", ")));
        }
        if let Some(keys) = self.queue["resumed_by_replay"]
            .as_array()
            .filter(|k| !k.is_empty())
        {
            let keys: Vec<&str> = keys.iter().filter_map(Value::as_str).collect();
            out.push_str(&format!("resumed by replay: {}\n", keys.join(", ")));
        }
        for p in &self.problems {
            out.push_str(&format!(
                "problem {}: {} — {}\n",
                p.kind, p.subject, p.detail
            ));
        }
        for n in &self.notes {
            out.push_str(&format!("note {}: {} — {}\n", n.kind, n.subject, n.detail));
        }
        out.push_str(match self.ok {
            true => "ok: nothing needs attention\n",
            false => "attention: the problems above need a human\n",
        });
        out
    }
}
