//! Reading a legacy `process-global-v0` tree — `catalog.json`,
//! `metadata/<worker_id>.json`, `sessions/<session_id>/segments/` — as a
//! read-only source. Nothing here writes; every access goes through a
//! cap-std [`Dir`] opened on the source root, and a name is built only from
//! an id that parsed (a UUID, or a session id of the safe alphabet).

use crate::file::segment::parse_line;
use crate::worker::{SegmentRef, WorkerMetadata};
use cairn_store::JournalItem;
use cairn_types::ids::{Generation, SegmentId, SessionId, WorkerId};
use cap_std::fs::Dir;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;

/// The source format this reads.
pub const SOURCE_FORMAT: &str = "process-global-v0";

/// What the catalog and metadata say, before any segment is read.
#[derive(Debug, Default)]
pub struct Survey {
    /// Each catalog worker, in catalog order: its claim, or why it cannot
    /// be migrated.
    pub workers: Vec<(String, Result<Claim, String>)>,
    /// Sessions several metadata sources name (assigned to no one).
    pub shared: Vec<(String, Vec<String>)>,
    /// Metadata files and session directories no catalog worker owns.
    pub orphans: Vec<(String, String, String)>,
}

/// A catalog worker with an unambiguous session.
#[derive(Debug, Clone)]
pub struct Claim {
    /// The worker.
    pub worker_id: WorkerId,
    /// Its workspace.
    pub workspace: String,
    /// Its component digest, if bound.
    pub component: Option<String>,
    /// Its session.
    pub session_id: SessionId,
    /// What its metadata says.
    pub metadata: WorkerMetadata,
}

/// A catalog worker read whole and validated: the files its target holds.
#[derive(Debug)]
pub struct Loaded {
    /// The claim.
    pub claim: Claim,
    /// `segments/` of the target, by name: the source files, checked, to
    /// be copied as streams (a crash-truncated final line left out).
    pub files: BTreeMap<String, super::stream::SourceFile>,
    /// The last generation the journal names.
    pub last_generation: Generation,
    /// When its first entry was written (ms), or 0.
    pub created_at_ms: u64,
    /// Journal entries.
    pub events: u64,
    /// What was tolerated, for the manifest.
    pub notes: Vec<String>,
}

/// The legacy tree at a root.
pub struct Source {
    root: Dir,
}

/// Whether `dir` holds any legacy root.
pub fn has_legacy_roots(dir: &Path) -> bool {
    ["catalog.json", "metadata", "sessions"]
        .iter()
        .any(|name| dir.join(name).symlink_metadata().is_ok())
}

impl Source {
    /// Open the tree at `path` (read-only).
    pub fn open(path: &Path) -> io::Result<Source> {
        let root = Dir::open_ambient_dir(path, cap_std::ambient_authority())?;
        Ok(Source { root })
    }

    /// Read the catalog and every metadata file; decide ownership.
    /// `Err`: the catalog itself cannot be read (nothing can be migrated).
    pub fn survey(&self) -> Result<Survey, String> {
        let catalog = self.catalog()?;
        let mut out = Survey::default();
        // Duplicate catalog ids: ambiguous ownership, both refused.
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for (raw, _) in &catalog {
            *seen.entry(raw.clone()).or_default() += 1;
        }
        // Every metadata file's session, catalog-owned or not.
        let mut metadata_files: BTreeSet<String> = BTreeSet::new();
        if let Ok(dir) = self.root.open_dir("metadata") {
            for entry in dir
                .entries()
                .map_err(|e| format!("cannot list metadata/: {e}"))?
            {
                let entry = entry.map_err(|e| format!("cannot list metadata/: {e}"))?;
                metadata_files.insert(entry.file_name().to_string_lossy().into_owned());
            }
        }
        let mut references: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut parsed: BTreeMap<String, Result<Value, String>> = BTreeMap::new();
        for name in &metadata_files {
            let doc = self.read_json(&format!("metadata/{name}"));
            if let Ok(v) = &doc
                && let Some(s) = v.get("session_id").and_then(Value::as_str)
            {
                references
                    .entry(s.to_string())
                    .or_default()
                    .push(format!("metadata/{name}"));
            }
            parsed.insert(name.clone(), doc);
        }
        let mut owned_metadata = BTreeSet::new();
        for (raw, entry) in catalog {
            let claim = (|| {
                let entry = entry?;
                let name = format!("{}.json", entry.0);
                owned_metadata.insert(name.clone());
                if seen[&raw] > 1 {
                    return Err(format!(
                        "catalog.json lists worker {raw} {} times: ownership is ambiguous",
                        seen[&raw]
                    ));
                }
                let doc = match parsed.get(&name) {
                    Some(doc) => doc.clone()?,
                    None => return Err(format!("metadata/{name} is missing")),
                };
                let claim = claim_of(&name, entry, &doc)?;
                let refs = &references[claim.session_id.as_str()];
                if refs.len() > 1 {
                    return Err(format!(
                        "session {} is named by {}: shared, so assigned to no worker",
                        claim.session_id,
                        refs.join(", ")
                    ));
                }
                Ok(claim)
            })();
            out.workers.push((raw, claim));
        }
        for (session, refs) in &references {
            if refs.len() > 1 {
                out.shared.push((session.clone(), refs.clone()));
            }
        }
        for name in &metadata_files {
            if !owned_metadata.contains(name) {
                out.orphans.push((
                    "metadata".into(),
                    format!("metadata/{name}"),
                    "no catalog worker owns it".into(),
                ));
            }
        }
        if let Ok(dir) = self.root.open_dir("sessions") {
            let entries = dir
                .entries()
                .map_err(|e| format!("cannot list sessions/: {e}"))?;
            let mut names: Vec<String> = entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            for name in names {
                let reason = match references.get(&name) {
                    // Shared: recorded as a shared reference instead.
                    Some(refs) if refs.len() > 1 => continue,
                    // Its catalog worker's (migrated, or stopped with a
                    // diagnostic of its own).
                    Some(refs) if owned_metadata.contains(&refs[0]["metadata/".len()..]) => {
                        continue;
                    }
                    Some(refs) => {
                        format!("only {} names it, and no catalog worker owns that", refs[0])
                    }
                    None => "no metadata names it".to_string(),
                };
                out.orphans
                    .push(("session".into(), format!("sessions/{name}"), reason));
            }
        }
        Ok(out)
    }

    /// The catalog's workers: (raw id, (id, workspace, component) or why not).
    #[allow(clippy::type_complexity)]
    fn catalog(
        &self,
    ) -> Result<Vec<(String, Result<(WorkerId, String, Option<String>), String>)>, String> {
        let doc = self.read_json("catalog.json")?;
        match doc.get("format").and_then(Value::as_str) {
            Some(SOURCE_FORMAT) => {}
            other => {
                return Err(format!(
                    "catalog.json has format {other:?}; this cairn migrates {SOURCE_FORMAT:?}"
                ));
            }
        }
        let Some(workers) = doc.get("workers").and_then(Value::as_array) else {
            return Err("catalog.json has no \"workers\" array".into());
        };
        if workers.len() > MAX_WORKERS {
            return Err(format!(
                "catalog.json lists {} workers; at most {MAX_WORKERS} are migrated at once",
                workers.len()
            ));
        }
        Ok(workers
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let raw = w
                    .get("worker_id")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("#{i}"));
                (raw.clone(), catalog_entry(i, &raw, w))
            })
            .collect())
    }

    fn read_json(&self, rel: &str) -> Result<Value, String> {
        let max = if rel == "catalog.json" {
            MAX_CATALOG_BYTES
        } else {
            MAX_DOCUMENT_BYTES
        };
        let bytes = match rel.rsplit_once('/') {
            Some((dir, name)) => {
                let dir = self
                    .root
                    .open_dir(dir)
                    .map_err(|e| format!("cannot open {dir}/: {e}"))?;
                read_regular(&dir, name, max, rel)?
            }
            None => read_regular(&self.root, rel, max, rel)?,
        };
        serde_json::from_slice(&bytes).map_err(|e| format!("{rel} is not valid JSON: {e}"))
    }

    /// Read and validate every segment and trace file of a claim.
    pub fn load(&self, claim: Claim) -> Result<Loaded, String> {
        let rel = format!("sessions/{}/segments", claim.session_id);
        let dir = self
            .root
            .open_dir(&rel)
            .map_err(|e| format!("cannot open {rel}: {e}"))?;
        let mut names = BTreeSet::new();
        for entry in dir
            .entries()
            .map_err(|e| format!("cannot list {rel}: {e}"))?
        {
            let entry = entry.map_err(|e| format!("cannot list {rel}: {e}"))?;
            names.insert(entry.file_name().to_string_lossy().into_owned());
        }
        let meta = &claim.metadata;
        let listed: BTreeSet<String> = meta
            .segments
            .iter()
            .map(|s| format!("{}.jsonl", s.segment_id))
            .collect();
        for name in &names {
            let journal = name
                .strip_suffix(".trace.jsonl")
                .map(|s| format!("{s}.jsonl"));
            let of = journal.as_deref().unwrap_or(name);
            if !listed.contains(of) {
                return Err(format!(
                    "{rel}/{name}: the metadata names no such segment (ambiguous: not copied)"
                ));
            }
        }
        let mut out = Loaded {
            created_at_ms: 0,
            events: 0,
            files: BTreeMap::new(),
            last_generation: Generation(0),
            notes: Vec::new(),
            claim: claim.clone(),
        };
        let mut prev = Some(cairn_types::ids::Seq(0));
        for (i, segment) in meta.segments.iter().enumerate() {
            let name = format!("{}.jsonl", segment.segment_id);
            let path = Path::new(&rel).join(&name);
            let shown = path.to_string_lossy().into_owned();
            let (file, _) = open_regular(&dir, &name, MAX_SEGMENT_BYTES, &shown)?;
            let mut entries = 0u64;
            let read = super::stream::lines(file, &shown, |line, text| {
                let item =
                    parse_line(text).map_err(|reason| format!("{shown}:{line}: {reason}"))?;
                let seq = item.seq();
                if let Some(p) = prev {
                    if seq <= p {
                        return Err(format!(
                            "{shown}:{line}: duplicate seq {seq} (after seq {p})"
                        ));
                    }
                    if seq != p.next() {
                        return Err(format!("{shown}:{line}: hole: seq {seq} follows seq {p}"));
                    }
                }
                prev = Some(seq);
                entries += 1;
                let JournalItem::Event(e) = &item else {
                    return Ok(());
                };
                if line == 1
                    && let cairn_types::event::Payload::Lifecycle(
                        cairn_types::event::LifecycleEvent::SegmentCreated {
                            compacted_from,
                            forked_from,
                            ..
                        },
                    ) = &e.payload
                    && let Some(lineage) = compacted_from.as_ref().or(forked_from.as_ref())
                {
                    out.claim.metadata.segments[i].parent = Some(lineage.segment);
                }
                if e.session_id != claim.session_id {
                    return Err(format!(
                        "{shown}:{line}: the entry names session {}, not {}",
                        e.session_id, claim.session_id
                    ));
                }
                if e.segment_id != segment.segment_id {
                    return Err(format!(
                        "{shown}:{line}: the entry names segment {}, not the file's",
                        e.segment_id
                    ));
                }
                if out.created_at_ms == 0 {
                    out.created_at_ms = e.at_ms;
                }
                if let Some(g) = cairn_store::reserved_generation(e) {
                    out.last_generation = out.last_generation.max(g);
                }
                Ok(())
            })?;
            if let Some(line) = read.truncated_line {
                if i + 1 != meta.segments.len() {
                    return Err(format!(
                        "{shown}:{line}: truncated line in a segment that is not the active one"
                    ));
                }
                let len = read.source.file_len();
                out.notes.push(format!(
                    "{shown}:{line}: left out a crash-truncated final line ({} bytes)",
                    len.saturating_sub(read.good_len)
                ));
            }
            out.events += entries;
            out.files.insert(name, read.source);
            let trace = format!("{}.trace.jsonl", segment.segment_id);
            if names.contains(&trace) {
                let path = Path::new(&rel).join(&trace);
                let shown = path.to_string_lossy().into_owned();
                let (file, _) = open_regular(&dir, &trace, MAX_SEGMENT_BYTES, &shown)?;
                let read = super::stream::lines(file, &shown, |line, text| {
                    serde_json::from_slice::<serde::de::IgnoredAny>(text)
                        .map(|_| ())
                        .map_err(|e| format!("{shown}:{line}: not JSON: {e}"))
                })?;
                if read.truncated_line.is_some() {
                    out.notes.push(format!(
                        "{shown}: left out a crash-truncated final line ({} bytes)",
                        read.source.file_len().saturating_sub(read.good_len)
                    ));
                }
                out.files.insert(trace, read.source);
            }
        }
        Ok(out)
    }
}

/// The largest `catalog.json` read (a 3 M-worker catalog took 4.3 GiB).
pub const MAX_CATALOG_BYTES: u64 = 64 << 20;
/// The largest metadata document read.
pub const MAX_DOCUMENT_BYTES: u64 = 4 << 20;
/// The largest segment or trace file read (each is streamed, a line at a
/// time, never held whole; a file claiming more, such as a sparse one, is
/// refused by its length before anything is read).
pub const MAX_SEGMENT_BYTES: u64 = 64 << 30;
/// The most workers one catalog may list.
pub const MAX_WORKERS: usize = 200_000;

/// Read `name` of `dir` only when it is a regular file of at most `max`
/// bytes (by its length: a sparse file is as large as it claims): a FIFO, a device or a socket is refused by `fstat`
/// before anything is read, and it is opened non-blocking, so opening a
/// FIFO never waits; a link is not followed. `shown` names it in errors.
fn read_regular(dir: &Dir, name: &str, max: u64, shown: &str) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let (file, size) = open_regular(dir, name, max, shown)?;
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if bytes.len() as u64 > max {
        return Err(format!(
            "{shown} grew past {max} bytes while it was read: refused"
        ));
    }
    Ok(bytes)
}

/// Open `name` of `dir` only when it is a regular file of at most `max`
/// bytes (see [`read_regular`]); the file and its length.
fn open_regular(
    dir: &Dir,
    name: &str,
    max: u64,
    shown: &str,
) -> Result<(std::fs::File, u64), String> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP => format!("{shown} is a symbolic link: refused"),
        e => format!("cannot read {shown}: {}", std::io::Error::from(e)),
    })?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let kind = rustix::fs::FileType::from_raw_mode(stat.st_mode);
    if kind != rustix::fs::FileType::RegularFile {
        return Err(format!(
            "{shown} is not a regular file (a {}): refused, nothing read",
            match kind {
                rustix::fs::FileType::Fifo => "FIFO",
                rustix::fs::FileType::CharacterDevice => "character device",
                rustix::fs::FileType::BlockDevice => "block device",
                rustix::fs::FileType::Socket => "socket",
                rustix::fs::FileType::Directory => "directory",
                _ => "special file",
            }
        ));
    }
    let size = u64::try_from(stat.st_size).unwrap_or(u64::MAX);
    if size > max {
        return Err(format!(
            "{shown} has {size} bytes; at most {max} are read from a legacy tree"
        ));
    }
    Ok((std::fs::File::from(fd), size))
}

fn catalog_entry(
    i: usize,
    raw: &str,
    w: &Value,
) -> Result<(WorkerId, String, Option<String>), String> {
    let at = format!("catalog.json workers[{i}]");
    let id: WorkerId = raw.parse().map_err(|e| format!("{at}: {e}"))?;
    let workspace = w
        .get("workspace")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= 128 && !s.chars().any(char::is_control))
        .ok_or_else(|| format!("{at}: \"workspace\" is missing or not a plain name"))?;
    let component = match w.get("component") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) if is_digest(d) => Some(d.clone()),
        Some(other) => {
            return Err(format!(
                "{at}: \"component\" {other} is not a digest sha256:<64 hex digits>"
            ));
        }
    };
    Ok((id, workspace.to_string(), component))
}

fn is_digest(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// A catalog worker's claim from its metadata document.
fn claim_of(
    name: &str,
    (worker_id, workspace, component): (WorkerId, String, Option<String>),
    doc: &Value,
) -> Result<Claim, String> {
    let at = format!("metadata/{name}");
    let named = doc.get("worker_id").and_then(Value::as_str);
    if named != Some(worker_id.to_string().as_str()) {
        return Err(format!(
            "{at} names worker {}, not {worker_id}: identity does not match",
            named.unwrap_or("(none)")
        ));
    }
    let session = doc
        .get("session_id")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{at} has no \"session_id\""))?;
    let session_id = SessionId::parse(session).map_err(|e| format!("{at}: {e}"))?;
    let ids = |field: &str| -> Result<Vec<WorkerId>, String> {
        match doc.get(field) {
            None | Some(Value::Null) => Ok(vec![]),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(|| format!("{at}: {field} holds {v}, not a worker id"))
                })
                .collect(),
            Some(v) => Err(format!("{at}: {field} is {v}, not an array")),
        }
    };
    let mut segments = Vec::new();
    for v in doc
        .get("segments")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{at} has no \"segments\" array"))?
    {
        let (id, parent) = match v {
            Value::String(s) => (Some(s.as_str()), None),
            Value::Object(o) => (
                o.get("segment_id").and_then(Value::as_str),
                o.get("parent").and_then(Value::as_str),
            ),
            _ => (None, None),
        };
        let segment_id: SegmentId = id
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("{at}: segments holds {v}, not a segment id"))?;
        let parent = match parent {
            Some(p) => Some(
                p.parse()
                    .map_err(|e| format!("{at}: segment {segment_id}: {e}"))?,
            ),
            None => segments.last().map(|s: &SegmentRef| s.segment_id),
        };
        if segments.iter().any(|s| s.segment_id == segment_id) {
            return Err(format!("{at}: segment {segment_id} is listed twice"));
        }
        segments.push(SegmentRef { segment_id, parent });
    }
    let active: SegmentId = doc
        .get("active_segment")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{at}: \"active_segment\" is missing or not a segment id"))?;
    if segments.last().map(|s| s.segment_id) != Some(active) {
        return Err(format!(
            "{at}: the active segment {active} is not the last one listed (appends go only to the newest segment)"
        ));
    }
    Ok(Claim {
        worker_id,
        workspace,
        component,
        session_id,
        metadata: WorkerMetadata {
            version: crate::worker::METADATA_VERSION,
            active_segment: active,
            pending_segment: None,
            segments,
            children: no_links(ids("children")?, "children")?,
            forked_from: None,
            peers: no_links(ids("peers")?, "peers")?,
            manifest: None,
        },
    })
}

/// Legacy `children`/`peers` hold bare worker ids; today's links carry the
/// session, scope and status a bare id does not say. The legacy layout
/// always wrote them empty: a tree that does not is refused, not guessed.
fn no_links<T>(ids: Vec<WorkerId>, field: &str) -> Result<Vec<T>, String> {
    match ids.first() {
        None => Ok(Vec::new()),
        Some(id) => Err(format!(
            "{field} names worker {id}: legacy {field} links cannot be carried (they name no session, scope or status)"
        )),
    }
}
