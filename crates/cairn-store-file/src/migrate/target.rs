//! Copying one validated legacy worker into its aggregate, in seed 000's
//! order, each step durable before the checkpoint that names it:
//!
//! 1. `validated` — the source parsed whole, the target checked: absent, or
//!    ours and unfinished, or already holding exactly these bytes;
//! 2. `staged` — `workers/<id>/` exists (marked `migrating`, invisible to
//!    readers, left alone by recovery) and `session.staged/` holds
//!    `session.json` and every segment and trace file, each fsynced, then the
//!    directories;
//! 3. `renamed` — `session.staged/` renamed to `session/`, the parent synced;
//! 4. `metadata_written` — `metadata.json`, `worker.json` and the index entry
//!    written atomically;
//! 5. `done` — the marker removed: the worker is served like a native one.
//!
//! A rerun from any step converges: what is staged is ours to redo, what is
//! renamed is checked byte for byte before it is accepted, and anything else
//! in the way stops this worker alone, touching nothing of it.

use super::Checkpoint;
use super::source::Loaded;
use crate::fsutil;
use crate::worker::{FORMAT, Home, MIGRATING, SessionDoc, WorkerRecord, WorkerStatus, to_json};
use cap_std::fs::Dir;
use std::collections::BTreeSet;

const STAGED: &str = "session.staged";

/// What became of a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Copied by this run.
    Migrated,
    /// The target already held exactly these bytes (migrated by hand, or a
    /// run that stopped after publishing): accepted as it is.
    Adopted,
}

/// How the target stands before anything is written.
pub enum Target {
    /// No aggregate yet.
    Absent,
    /// Ours, unfinished (`migrating`); `renamed` when its `session/` is in
    /// place (and matches).
    Unfinished {
        /// Whether `session/` is in place.
        renamed: bool,
    },
    /// A published aggregate holding exactly these bytes.
    Matching,
}

/// Check the target of `loaded` without writing: `Err` names the collision.
pub fn inspect(home: &Home, loaded: &Loaded) -> Result<Target, String> {
    let claim = &loaded.claim;
    let id = claim.worker_id.to_string();
    if let Ok(Some(entry)) = home.index_entry(&claim.session_id)
        && entry.session_id == claim.session_id
        && entry.worker_id != claim.worker_id
        && home.workers_dir().exists(entry.worker_id.to_string())
    {
        return Err(format!(
            "target collision: session {} is already held by worker {} in this home",
            claim.session_id, entry.worker_id
        ));
    }
    let dir = match home.workers_dir().open_dir(&id) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Target::Absent),
        Err(e) => return Err(format!("cannot open workers/{id}: {e}")),
    };
    let ours = dir.exists(MIGRATING);
    for marker in ["deleting", "creating", "forking"] {
        if dir.exists(marker) {
            return Err(format!(
                "target collision: workers/{id} exists and is marked {marker:?}"
            ));
        }
    }
    if !dir.exists("session") {
        return match ours {
            true => Ok(Target::Unfinished { renamed: false }),
            false => Err(format!(
                "target collision: workers/{id} exists and holds no session/"
            )),
        };
    }
    verify(&dir, loaded).map_err(|why| {
        format!("target collision: workers/{id} already holds other bytes ({why}); nothing of it was changed")
    })?;
    if ours {
        return Ok(Target::Unfinished { renamed: true });
    }
    // Published: its documents must agree too.
    let record: WorkerRecord = crate::worker::read_record(&dir)
        .map_err(|e| format!("target collision: workers/{id}: {e}"))?;
    if record.worker_id != claim.worker_id || record.session_id != claim.session_id {
        return Err(format!(
            "target collision: workers/{id}/worker.json names worker {} and session {}",
            record.worker_id, record.session_id
        ));
    }
    let meta: crate::worker::WorkerMetadata = crate::worker::read_metadata(&dir)
        .map_err(|e| format!("target collision: workers/{id}: {e}"))?;
    if meta.active_segment != claim.metadata.active_segment {
        return Err(format!(
            "target collision: workers/{id}/metadata.json names active segment {}, the source {}",
            meta.active_segment, claim.metadata.active_segment
        ));
    }
    Ok(Target::Matching)
}

/// The exact session identity, the complete file set of `segments/`, and
/// every file's bytes.
fn verify(worker: &Dir, loaded: &Loaded) -> Result<(), String> {
    let session = worker
        .open_dir("session")
        .map_err(|e| format!("cannot open session/: {e}"))?;
    let doc: SessionDoc =
        fsutil::read_document(&session, "session.json", 1).map_err(|e| format!("session/{e}"))?;
    if doc.session_id != loaded.claim.session_id || doc.worker_id != loaded.claim.worker_id {
        return Err(format!(
            "session.json names session {} of worker {}",
            doc.session_id, doc.worker_id
        ));
    }
    let segments = session
        .open_dir("segments")
        .map_err(|e| format!("cannot open session/segments/: {e}"))?;
    let mut names = BTreeSet::new();
    for entry in segments
        .entries()
        .map_err(|e| format!("cannot list session/segments/: {e}"))?
    {
        let entry = entry.map_err(|e| format!("cannot list session/segments/: {e}"))?;
        names.insert(entry.file_name().to_string_lossy().into_owned());
    }
    let want: BTreeSet<String> = loaded.files.keys().cloned().collect();
    if names != want {
        let extra: Vec<_> = names.difference(&want).collect();
        let missing: Vec<_> = want.difference(&names).collect();
        return Err(format!(
            "session/segments/ differs in its files: extra {extra:?}, missing {missing:?}"
        ));
    }
    for (name, source) in &loaded.files {
        let held = segments
            .open(name)
            .map_err(|e| format!("cannot read session/segments/{name}: {e}"))?
            .into_std();
        let same = source
            .same_as(&held)
            .map_err(|e| format!("cannot read session/segments/{name}: {e}"))?;
        if !same {
            return Err(format!("session/segments/{name} differs from the source"));
        }
    }
    Ok(())
}

/// Carry `loaded` into its aggregate from wherever `target` says it
/// stands, calling `checkpoint` after each durable step.
pub fn copy(
    home: &Home,
    loaded: &Loaded,
    target: Target,
    checkpoint: &mut dyn FnMut(Checkpoint) -> Result<(), String>,
) -> Result<Outcome, String> {
    let claim = &loaded.claim;
    let id = claim.worker_id.to_string();
    let io = |what: &str| {
        let what = format!("workers/{id}: {what}");
        move |e: std::io::Error| format!("{what}: {e}")
    };
    let workers = home.workers_dir();
    let renamed = match target {
        Target::Matching => {
            finish_documents(home, loaded, None)?;
            return Ok(Outcome::Adopted);
        }
        Target::Unfinished { renamed } => renamed,
        Target::Absent => {
            // The aggregate appears whole with its marker: laid out under
            // a name no walk takes for a worker, then renamed into place.
            let temp = format!(".migrating-{id}");
            fsutil::remove_tree(workers, &temp).map_err(io("cannot clear a half-made copy"))?;
            let dir = fsutil::create_dir_new(workers, &temp).map_err(io("cannot create"))?;
            // The marker's presence is what counts: the sync of the
            // directory below makes it durable with the rest.
            fsutil::create_file_new(&dir, MIGRATING)
                .and_then(|mut f| std::io::Write::write_all(&mut f, b"{\"version\": 1}\n"))
                .map_err(io("cannot write its marker"))?;
            fsutil::create_dir_new(&dir, "runs").map_err(io("cannot create runs/"))?;
            fsutil::sync_dir(&dir).map_err(io("cannot sync"))?;
            workers
                .rename(&temp, workers, &id)
                .map_err(io("cannot rename into place"))?;
            fsutil::sync_dir(workers).map_err(io("cannot sync workers/"))?;
            false
        }
    };
    let dir = workers.open_dir(&id).map_err(io("cannot open"))?;
    if !renamed {
        fsutil::remove_tree(&dir, STAGED).map_err(io("cannot clear session.staged/"))?;
        stage(&dir, loaded).map_err(io("cannot stage session/"))?;
        checkpoint(Checkpoint::Staged)?;
        fsutil::crash_point("migrate-staged");
        dir.rename(STAGED, &dir, "session")
            .map_err(io("cannot rename session.staged/ to session/"))?;
        fsutil::sync_dir(&dir).map_err(io("cannot sync"))?;
        checkpoint(Checkpoint::Renamed)?;
        fsutil::crash_point("migrate-renamed");
    }
    finish_documents(home, loaded, Some(&dir))?;
    checkpoint(Checkpoint::MetadataWritten)?;
    fsutil::crash_point("migrate-metadata-written");
    dir.remove_file(MIGRATING)
        .map_err(io("cannot remove its migrating marker"))?;
    fsutil::sync_dir(&dir).map_err(io("cannot sync"))?;
    fsutil::crash_point("migrate-published");
    Ok(Outcome::Migrated)
}

/// `session.staged/`: `session.json`, `segments/` and its files, all synced.
fn stage(dir: &Dir, loaded: &Loaded) -> std::io::Result<()> {
    use std::io::Write;
    let claim = &loaded.claim;
    let staged = fsutil::create_dir_new(dir, STAGED)?;
    let doc = SessionDoc {
        version: 1,
        format: FORMAT.to_string(),
        session_id: claim.session_id.clone(),
        worker_id: claim.worker_id,
        created_at_ms: created_at(loaded),
        workspace: Some(claim.workspace.clone()),
    };
    // Everything under session.staged/ is new and synced one by one, then
    // the directories: no temp-and-rename is needed inside scratch.
    let files = std::iter::once(("session.json", to_json(&doc)));
    for (name, bytes) in files {
        let mut file = fsutil::create_file_new(&staged, name)?;
        file.write_all(&bytes)?;
        fsutil::count_sync();
        file.sync_all()?;
    }
    let segments = fsutil::create_dir_new(&staged, "segments")?;
    for (name, source) in &loaded.files {
        let mut file = fsutil::create_file_new(&segments, name)?;
        source.copy_to(&mut file)?;
        fsutil::count_sync();
        file.sync_all()?;
    }
    fsutil::sync_dir(&segments)?;
    fsutil::sync_dir(&staged)?;
    fsutil::sync_dir(dir)
}

fn created_at(loaded: &Loaded) -> u64 {
    match loaded.created_at_ms {
        0 => fsutil::now_ms(),
        t => t,
    }
}

/// `metadata.json`, `worker.json` and the index entry. Into our own
/// unfinished aggregate (`dir`) they are written whole; into a published
/// one that matched, only what is missing is added.
fn finish_documents(home: &Home, loaded: &Loaded, ours: Option<&Dir>) -> Result<(), String> {
    let claim = &loaded.claim;
    let id = claim.worker_id.to_string();
    let opened;
    let dir = match ours {
        Some(d) => d,
        None => {
            opened = home
                .workers_dir()
                .open_dir(&id)
                .map_err(|e| format!("workers/{id}: cannot open: {e}"))?;
            &opened
        }
    };
    let write = |name: &str, bytes: Vec<u8>| -> Result<(), String> {
        if ours.is_none() && dir.exists(name) {
            return Ok(());
        }
        fsutil::write_document(dir, name, &bytes)
            .map_err(|e| format!("workers/{id}: cannot write {name}: {e}"))
    };
    write("metadata.json", to_json(&claim.metadata))?;
    let record = WorkerRecord {
        version: crate::worker::WORKER_VERSION,
        worker_id: claim.worker_id,
        session_id: claim.session_id.clone(),
        workspace: claim.workspace.clone(),
        component: claim.component.clone(),
        created_at_ms: created_at(loaded),
        last_generation: loaded.last_generation,
        status: WorkerStatus::Active,
        parent: None,
        request: Some(crate::worker::WorkerRequest {
            kind: crate::worker::WorkerRequestKind::Migrate,
            at_ms: crate::fsutil::now_ms(),
            run: None,
        }),
        limits: None,
    };
    write("worker.json", to_json(&record))?;
    if !dir.exists("runs") {
        fsutil::ensure_dir(dir, "runs")
            .and_then(|_| fsutil::sync_dir(dir))
            .map_err(|e| format!("workers/{id}: cannot create runs/: {e}"))?;
    }
    match home.index_entry(&claim.session_id) {
        Ok(Some(e)) if e.worker_id == claim.worker_id => {}
        _ => home
            .write_index_entry(&claim.session_id, claim.worker_id)
            .map_err(|e| {
                format!(
                    "cannot write the index entry of session {}: {e}",
                    claim.session_id
                )
            })?,
    }
    home.known()
        .insert(claim.session_id.clone(), claim.worker_id);
    Ok(())
}
