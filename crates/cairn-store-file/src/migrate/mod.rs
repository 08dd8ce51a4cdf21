//! Legacy migration (seed 000): a copy of a `process-global-v0` tree into
//! worker aggregates — serialized by the home's lock, checkpointed per
//! worker, fsynced, failing closed per worker, sources never modified.
//!
//! The state lives in `<home>/migration/`:
//! - `manifest.json` — the versioned manifest (schema below), written
//!   atomically when a migration begins and when it ends;
//! - `checkpoints.jsonl` — between the two, one fdatasynced line per worker
//!   step (a [`WorkerReport`]); a later line for a worker supersedes an
//!   earlier one, and the manifest absorbs the log when the migration ends.
//!
//! Manifest, version 1:
//! ```json
//! {"version": 1, "source_format": "process-global-v0",
//!  "target_format": "worker-aggregate-v1", "updated_at_ms": 0,
//!  "sources": [{"path": "/abs/root", "diagnostics": ["…"],
//!               "shared_references": [{"session_id": "s", "metadata": ["metadata/a.json", "…"]}],
//!               "orphans": [{"kind": "metadata|session", "path": "sessions/x", "reason": "…"}]}],
//!  "workers": [{"worker_id": "…", "session_id": "…", "source": "/abs/root",
//!               "state": "pending|migrated|failed",
//!               "checkpoint": "validated|staged|renamed|metadata_written|done",
//!               "diagnostics": ["file:line: why"], "files": 2, "bytes": 1234,
//!               "events": 10, "at_ms": 0}]}
//! ```

pub mod source;
mod stream;
mod target;

use crate::fsutil;
use crate::worker::Home;
use serde::{Deserialize, Serialize};
use source::{Source, Survey};
use std::path::{Path, PathBuf};
use target::{Outcome, Target};

pub use source::has_legacy_roots;

/// The manifest's format version.
pub const MANIFEST_VERSION: u64 = 1;

/// A worker's last durable step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Checkpoint {
    /// Source parsed whole, target checked.
    Validated,
    /// `session.staged/` written and synced.
    Staged,
    /// Renamed to `session/`.
    Renamed,
    /// `metadata.json`, `worker.json` and the index entry written.
    MetadataWritten,
    /// Published.
    Done,
}

/// Where a worker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Not finished (a rerun goes on from its checkpoint).
    Pending,
    /// In its aggregate, served like a native worker.
    Migrated,
    /// Stopped closed: nothing of it was touched (see its diagnostics).
    Failed,
}

/// One worker in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerReport {
    /// As the catalog spells it.
    pub worker_id: String,
    /// Its session, when its metadata names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The source root.
    pub source: String,
    /// Where it stands.
    pub state: State,
    /// Its last durable step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Checkpoint>,
    /// What stopped it, or what was tolerated.
    #[serde(default)]
    pub diagnostics: Vec<String>,
    /// Files copied.
    #[serde(default)]
    pub files: u64,
    /// Bytes copied.
    #[serde(default)]
    pub bytes: u64,
    /// Journal entries copied.
    #[serde(default)]
    pub events: u64,
    /// When this entry last changed.
    #[serde(default)]
    pub at_ms: u64,
}

/// Sessions several metadata sources name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedReference {
    /// The session.
    pub session_id: String,
    /// Every metadata file naming it.
    pub metadata: Vec<String>,
}

/// A source entry no catalog worker owns, left in place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Orphan {
    /// `metadata` or `session`.
    pub kind: String,
    /// Relative to the source root.
    pub path: String,
    /// Why it is an orphan.
    pub reason: String,
}

/// What one source root held beyond its workers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceReport {
    /// The root.
    pub path: String,
    /// Problems with the tree as a whole (an unreadable catalog).
    #[serde(default)]
    pub diagnostics: Vec<String>,
    /// Shared session references.
    #[serde(default)]
    pub shared_references: Vec<SharedReference>,
    /// Orphans.
    #[serde(default)]
    pub orphans: Vec<Orphan>,
}

/// `<home>/migration/manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_VERSION`].
    pub version: u64,
    /// `process-global-v0`.
    pub source_format: String,
    /// `worker-aggregate-v1`.
    pub target_format: String,
    /// When it was last written.
    pub updated_at_ms: u64,
    /// Each source root migrated from.
    pub sources: Vec<SourceReport>,
    /// Each catalog worker, in the order first seen.
    pub workers: Vec<WorkerReport>,
}

impl Default for Manifest {
    fn default() -> Self {
        Manifest {
            version: MANIFEST_VERSION,
            source_format: source::SOURCE_FORMAT.into(),
            target_format: crate::worker::FORMAT.into(),
            updated_at_ms: 0,
            sources: vec![],
            workers: vec![],
        }
    }
}

impl Manifest {
    /// Record `report`, replacing the entry of the same worker and source.
    fn worker_mut(&mut self, report: WorkerReport) -> &mut WorkerReport {
        let at = match self
            .workers
            .iter()
            .position(|w| w.worker_id == report.worker_id && w.source == report.source)
        {
            Some(i) => {
                self.workers[i] = report;
                i
            }
            None => {
                self.workers.push(report);
                self.workers.len() - 1
            }
        };
        &mut self.workers[at]
    }

    fn worker(&self, id: &str, source: &str) -> Option<&WorkerReport> {
        self.workers
            .iter()
            .find(|w| w.worker_id == id && w.source == source)
    }
}

/// What a migration did (also the `--json` output, with `version` 1).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// 1.
    pub version: u64,
    /// Whether nothing was written.
    pub dry_run: bool,
    /// The home.
    pub home: String,
    /// The source root.
    pub source: String,
    /// The manifest's path.
    pub manifest: String,
    /// Workers copied by this run.
    pub migrated: usize,
    /// Workers whose target already held their bytes, accepted by this run.
    pub adopted: usize,
    /// Workers migrated before (skipped).
    pub already_migrated: usize,
    /// Workers stopped closed.
    pub failed: usize,
    /// This run's workers, each with what was done (`migrated`, `adopted`,
    /// `skipped`, `failed`, or with `--dry-run` `would_migrate`,
    /// `would_adopt`, `would_resume`).
    pub workers: Vec<ReportRow>,
    /// Shared references and orphans of this source.
    pub source_report: SourceReport,
}

/// One worker in a [`Report`].
#[derive(Debug, Clone, Serialize)]
pub struct ReportRow {
    /// The worker.
    pub worker_id: String,
    /// Its session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// What was done.
    pub action: &'static str,
    /// Its manifest diagnostics.
    pub diagnostics: Vec<String>,
}

impl Report {
    /// Whether anything was written (or, dry, would be).
    pub fn changed(&self) -> bool {
        self.migrated + self.adopted > 0
    }

    /// One line for people.
    pub fn summary(&self) -> String {
        let orphans = self.source_report.orphans.len();
        let shared = self.source_report.shared_references.len();
        let verb = if self.dry_run {
            "would migrate"
        } else {
            "migrated"
        };
        let mut s = format!(
            "{verb} {} legacy worker{} from {}",
            self.migrated + self.adopted,
            plural(self.migrated + self.adopted),
            self.source
        );
        if self.adopted > 0 {
            s += &format!(
                " ({} already in place, checked byte for byte)",
                self.adopted
            );
        }
        if self.already_migrated > 0 {
            s += &format!("; {} migrated before", self.already_migrated);
        }
        if self.failed > 0 {
            s += &format!("; {} stopped closed", self.failed);
        }
        if shared > 0 {
            s += &format!("; {shared} shared session reference{}", plural(shared));
        }
        if orphans > 0 {
            s += &format!("; {orphans} orphan{} left in place", plural(orphans));
        }
        s + &format!(" (manifest: {})", self.manifest)
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The manifest's path in a home.
pub fn manifest_path(home: &Path) -> PathBuf {
    home.join("migration").join("manifest.json")
}

/// Read a home's manifest, if it has one.
pub fn read_manifest(home: &Home) -> Result<Option<Manifest>, String> {
    let Ok(dir) = home.root().open_dir("migration") else {
        return Ok(None);
    };
    let mut manifest =
        match fsutil::read_document::<Manifest>(&dir, "manifest.json", MANIFEST_VERSION) {
            Ok(m) => m,
            Err(e) if e.is_not_found() => Manifest::default(),
            Err(e) => return Err(format!("migration/{e}")),
        };
    // Steps logged since the manifest was last written.
    if let Ok(log) = dir.read("checkpoints.jsonl") {
        for line in log.split(|&b| b == b'\n') {
            // A torn final line is a step not recorded (it is redone).
            if let Ok(report) = serde_json::from_slice::<WorkerReport>(line) {
                manifest.worker_mut(report);
            }
        }
    } else if !dir.exists("manifest.json") {
        return Ok(None);
    }
    Ok(Some(manifest))
}

/// The append-only checkpoint log.
struct Log {
    dir: cap_std::fs::Dir,
    file: cap_std::fs::File,
}

impl Log {
    fn open(home: &Home) -> Result<Log, String> {
        let dir = fsutil::ensure_dir(home.root(), "migration")
            .map_err(|e| format!("cannot create migration/: {e}"))?;
        let file = fsutil::open_append(&dir, "checkpoints.jsonl")
            .map_err(|e| format!("cannot open migration/checkpoints.jsonl: {e}"))?;
        fsutil::sync_dir(&dir).map_err(|e| format!("cannot sync migration/: {e}"))?;
        Ok(Log { dir, file })
    }

    fn append(&mut self, report: &WorkerReport) -> Result<(), String> {
        use std::io::Write;
        let mut line = serde_json::to_vec(report).expect("reports serialize");
        line.push(b'\n');
        fsutil::count_sync();
        self.file
            .write_all(&line)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| format!("cannot write migration/checkpoints.jsonl: {e}"))
    }

    /// Write the manifest whole, then drop the log it absorbed.
    fn seal(&self, manifest: &mut Manifest) -> Result<(), String> {
        manifest.updated_at_ms = fsutil::now_ms();
        write_manifest(&self.dir, manifest)?;
        self.file
            .set_len(0)
            .and_then(|()| self.file.sync_all())
            .map_err(|e| format!("cannot reset migration/checkpoints.jsonl: {e}"))
    }
}

fn write_manifest(dir: &cap_std::fs::Dir, manifest: &Manifest) -> Result<(), String> {
    fsutil::write_document(dir, "manifest.json", &crate::worker::to_json(manifest))
        .map_err(|e| format!("cannot write migration/manifest.json: {e}"))
}

/// How many workers are copied at once.
const PARALLEL_WORKERS: usize = 4;

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Options of one migration.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Check and report, write nothing.
    pub dry_run: bool,
}

/// Migrate the legacy tree at `from` into `home`. The caller holds the
/// home's lock (a dry run needs none: it writes nothing). `progress` is
/// called with (workers handled, workers in the catalog).
pub fn migrate(
    home: &Home,
    from: &Path,
    options: &Options,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Report, String> {
    let from = std::fs::canonicalize(from)
        .map_err(|e| format!("cannot open the legacy tree {}: {e}", from.display()))?;
    let source_path = from.display().to_string();
    let src = Source::open(&from)
        .map_err(|e| format!("cannot open the legacy tree {source_path}: {e}"))?;
    let survey = src
        .survey()
        .map_err(|e| format!("{source_path}: {e}; nothing was migrated"))?;
    let mut manifest = read_manifest(home)?.unwrap_or_default();
    let before = manifest.clone();
    let source_report = source_report(&source_path, &survey);
    match manifest.sources.iter_mut().find(|s| s.path == source_path) {
        Some(s) => *s = source_report.clone(),
        None => manifest.sources.push(source_report.clone()),
    }
    let mut report = Report {
        version: 1,
        dry_run: options.dry_run,
        home: home.path().display().to_string(),
        source: source_path.clone(),
        manifest: manifest_path(home.path()).display().to_string(),
        migrated: 0,
        adopted: 0,
        already_migrated: 0,
        failed: 0,
        workers: vec![],
        source_report,
    };
    let total = survey.workers.len();
    // Workers migrated before are not read again: their aggregates may
    // have moved on since (new runs), and the source is history.
    let todo: Vec<_> = survey
        .workers
        .into_iter()
        .filter(|(id, _)| {
            let done = manifest
                .worker(id, &source_path)
                .is_some_and(|w| w.state == State::Migrated);
            if done {
                report.already_migrated += 1;
            }
            !done
        })
        .collect();
    let mut log = None;
    if !options.dry_run && (!todo.is_empty() || manifest != before) {
        let opened = Log::open(home)?;
        // The plan first: orphans and shared references are on record
        // before any worker is touched.
        opened.seal(&mut manifest)?;
        log = Some(opened);
    }
    let mut handled = report.already_migrated;
    progress(handled, total);
    let entries: Vec<_> = todo
        .into_iter()
        .map(|(raw, claim)| {
            let entry = WorkerReport {
                worker_id: raw.clone(),
                session_id: claim.as_ref().ok().map(|c| c.session_id.to_string()),
                source: source_path.clone(),
                state: State::Pending,
                checkpoint: manifest
                    .worker(&raw, &source_path)
                    .and_then(|w| w.checkpoint),
                diagnostics: vec![],
                files: 0,
                bytes: 0,
                events: 0,
                at_ms: fsutil::now_ms(),
            };
            (entry, claim)
        })
        .collect();
    // Workers are independent (ownership was settled by the survey), so a
    // few are copied at once: their fsyncs overlap on the disk. Each
    // worker's own steps stay in order, each checkpoint after its step.
    let log = log.map(std::sync::Mutex::new);
    let queue = std::sync::Mutex::new(entries.into_iter().enumerate());
    let (tx, rx) = std::sync::mpsc::channel();
    let mut done = Vec::new();
    let mut log_error = None;
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL_WORKERS {
            let tx = tx.clone();
            let (queue, log, src) = (&queue, log.as_ref(), &src);
            scope.spawn(move || {
                loop {
                    let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
                    let Some((i, (mut entry, claim))) = next else {
                        break;
                    };
                    let action = match one_worker(home, src, claim, &mut entry, log, options) {
                        Ok(a) => Ok(a),
                        Err(why) => {
                            entry.state = State::Failed;
                            entry.diagnostics.push(why);
                            match log.map(|l| lock(l).append(&entry)) {
                                Some(Err(e)) => Err(e),
                                _ => Ok("failed"),
                            }
                        }
                    };
                    if tx.send((i, entry, action)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for (i, entry, action) in rx {
            handled += 1;
            progress(handled, total);
            match action {
                Ok(action) => done.push((i, entry, action)),
                Err(e) => log_error = Some(e),
            }
        }
    });
    if let Some(e) = log_error {
        return Err(e);
    }
    done.sort_by_key(|(i, _, _)| *i);
    for (_, entry, action) in done {
        match action {
            "migrated" | "would_migrate" | "would_resume" => report.migrated += 1,
            "adopted" | "would_adopt" => report.adopted += 1,
            _ => report.failed += 1,
        }
        report.workers.push(ReportRow {
            worker_id: entry.worker_id.clone(),
            session_id: entry.session_id.clone(),
            action,
            diagnostics: entry.diagnostics.clone(),
        });
        manifest.worker_mut(entry);
    }
    let log = log.map(|l| l.into_inner().unwrap_or_else(|p| p.into_inner()));
    if let Some(log) = log {
        log.seal(&mut manifest)?;
    }
    Ok(report)
}

fn source_report(path: &str, survey: &Survey) -> SourceReport {
    SourceReport {
        path: path.to_string(),
        diagnostics: vec![],
        shared_references: survey
            .shared
            .iter()
            .map(|(s, m)| SharedReference {
                session_id: s.clone(),
                metadata: m.clone(),
            })
            .collect(),
        orphans: survey
            .orphans
            .iter()
            .map(|(kind, path, reason)| Orphan {
                kind: kind.clone(),
                path: path.clone(),
                reason: reason.clone(),
            })
            .collect(),
    }
}

/// Validate, then copy, one worker; its action.
fn one_worker(
    home: &Home,
    src: &Source,
    claim: Result<source::Claim, String>,
    entry: &mut WorkerReport,
    log: Option<&std::sync::Mutex<Log>>,
    options: &Options,
) -> Result<&'static str, String> {
    let loaded = src.load(claim?)?;
    entry.files = loaded.files.len() as u64;
    entry.bytes = loaded.files.values().map(|f| f.len).sum();
    entry.events = loaded.events;
    entry.diagnostics = loaded.notes.clone();
    let target = target::inspect(home, &loaded)?;
    if options.dry_run {
        return Ok(match target {
            Target::Absent => "would_migrate",
            Target::Unfinished { .. } => "would_resume",
            Target::Matching => "would_adopt",
        });
    }
    let Some(log) = log else {
        return Err("internal: no checkpoint log".into());
    };
    let step = |entry: &mut WorkerReport, log: &std::sync::Mutex<Log>, c: Checkpoint| {
        entry.checkpoint = Some(c);
        entry.at_ms = fsutil::now_ms();
        lock(log).append(entry)
    };
    if entry.checkpoint.is_none() {
        step(entry, log, Checkpoint::Validated)?;
    }
    let outcome = {
        let mut on_step = |c: Checkpoint| step(entry, log, c);
        target::copy(home, &loaded, target, &mut on_step)?
    };
    if outcome == Outcome::Adopted {
        entry
            .diagnostics
            .push("the target already held these bytes (session, file set and contents checked): accepted as it is".into());
    }
    entry.state = State::Migrated;
    step(entry, log, Checkpoint::Done)?;
    Ok(match outcome {
        Outcome::Migrated => "migrated",
        Outcome::Adopted => "adopted",
    })
}

/// Startup migration: when `home` holds legacy roots, migrate them (the
/// caller holds the home's lock). Lines for people; nothing when there was
/// nothing to do.
pub fn at_startup(home: &Home) -> Vec<String> {
    if !has_legacy_roots(home.path()) {
        return vec![];
    }
    match migrate(home, home.path(), &Options::default(), &mut |_, _| {}) {
        Ok(report) if report.changed() || report.failed > 0 => vec![report.summary()],
        Ok(_) => vec![],
        Err(e) => vec![format!(
            "legacy migration of {} did not run: {e}",
            home.path().display()
        )],
    }
}
