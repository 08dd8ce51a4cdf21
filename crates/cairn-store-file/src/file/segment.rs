//! Reading a segment's JSONL: every line JSON with a dense seq, exactly one
//! crash-truncated final line tolerated, anything else failing closed with
//! the path and line number.

use super::LineRef;
use cairn_store::{JournalItem, StoreError};
use cairn_types::ids::{Generation, Seq};

/// What a scan of one segment found.
pub struct Scan {
    /// Its entries, in order.
    pub items: Vec<JournalItem>,
    /// Each entry's (byte offset, length without the newline).
    pub spans: Vec<(u64, u32)>,
    /// The byte length of its complete lines.
    pub good_len: u64,
    /// Set when a crash-truncated final line was dropped.
    pub truncated_line: Option<usize>,
}

/// Parse a segment's bytes. `expect_first` is the seq its first entry must
/// have, when known (dense across segments).
pub fn scan_segment(
    bytes: &[u8],
    path: &std::path::Path,
    prev: Option<Seq>,
    session: &str,
) -> Result<Scan, StoreError> {
    let (spans, items, good_len, truncated_line) = walk_segment(bytes, path, prev, |line| {
        let item = parse_line(line)?;
        if let JournalItem::Event(e) = &item {
            ours(e.session_id.name(), session)?;
        }
        Ok((item.seq(), item))
    })?;
    Ok(Scan {
        items,
        spans,
        good_len,
        truncated_line,
    })
}

/// Index a segment's bytes as [`scan_segment`] checks them — every line JSON
/// with a dense seq, corruption failing closed with its line — without
/// building the entries (what opening a session needs).
pub fn index_segment(
    bytes: &[u8],
    path: &std::path::Path,
    prev: Option<Seq>,
    last_generation: &mut Generation,
    session: &str,
) -> Result<Walked, StoreError> {
    /// Just enough of a line: its seq, its session, and the generation a
    /// `generation_reserved` entry names.
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        seq: u64,
        #[serde(borrow, default)]
        session_id: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow, default)]
        payload: Option<PayloadHead<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct PayloadHead<'a> {
        #[serde(borrow, default)]
        kind: Option<&'a str>,
        #[serde(borrow, default)]
        event: Option<EventHead<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct EventHead<'a> {
        #[serde(rename = "type", borrow, default)]
        ty: Option<&'a str>,
        #[serde(default)]
        generation: Option<serde_json::Value>,
    }
    let (spans, generations, good_len, truncated_line) = walk_segment(bytes, path, prev, |line| {
        cairn_types::event::check_line(line)?;
        match serde_json::from_slice::<Head>(line) {
            Ok(Head {
                seq,
                session_id,
                payload,
            }) if seq > 0 => {
                if let Some(named) = &session_id {
                    ours(named, session)?;
                }
                let reserved = match payload
                    .filter(|p| p.kind == Some("lifecycle"))
                    .and_then(|p| p.event)
                {
                    Some(EventHead {
                        ty: Some("generation_reserved" | "started" | "resumed_by_replay"),
                        generation: Some(g),
                    }) => g.as_u64().map(Generation),
                    _ => None,
                };
                Ok((Seq(seq), reserved))
            }
            // The slow path names what is wrong.
            _ => parse_line(line).map(|item| {
                let reserved = match &item {
                    JournalItem::Event(e) => cairn_store::reserved_generation(e),
                    JournalItem::Unknown { .. } => None,
                };
                (item.seq(), reserved)
            }),
        }
    })?;
    for g in generations.into_iter().flatten() {
        *last_generation = (*last_generation).max(g);
    }
    Ok((spans, good_len, truncated_line))
}

/// A line naming another session than the one whose segment holds it is
/// corrupt (a line copied in by hand, or from another home): never served.
fn ours(named: &str, session: &str) -> Result<(), String> {
    match named == session {
        true => Ok(()),
        false => Err(format!(
            "the entry names session {named:?}, not {session:?} whose journal this is"
        )),
    }
}

/// A segment's line spans (offset, length), the byte length of its complete
/// lines, and the line number of a crash-truncated final line.
pub type Walked = (Vec<(u64, u32)>, u64, Option<usize>);

/// Line spans, what `classify` made of each line, the byte length of the
/// complete lines, and the line number of a crash-truncated final line.
type Classified<T> = (Vec<(u64, u32)>, Vec<T>, u64, Option<usize>);

/// Walk a segment in two passes: its complete lines (a final line without
/// its newline is a write a crash cut short), then each line classified —
/// on every core for long segments — then the seqs checked dense in order,
/// failing closed with the first bad line's number.
fn walk_segment<T: Send>(
    bytes: &[u8],
    path: &std::path::Path,
    mut prev: Option<Seq>,
    classify: impl Fn(&[u8]) -> Result<(Seq, T), String> + Sync,
) -> Result<Classified<T>, StoreError> {
    let corrupt = |line: usize, reason: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        line,
        reason,
    };
    let mut spans: Vec<(u64, u32)> = Vec::with_capacity(bytes.len() / 128);
    let mut offset = 0usize;
    for end in memchr::memchr_iter(b'\n', bytes) {
        spans.push((offset as u64, (end - offset) as u32));
        offset = end + 1;
    }
    let truncated_line = (offset < bytes.len()).then_some(spans.len() + 1);
    let classified = par_map(&spans, |&(at, len)| {
        classify(&bytes[at as usize..at as usize + len as usize])
    });
    let mut values = Vec::with_capacity(classified.len());
    for (i, result) in classified.into_iter().enumerate() {
        let line_no = i + 1;
        let (seq, value) = result.map_err(|reason| corrupt(line_no, reason))?;
        if let Some(p) = prev {
            if seq <= p {
                return Err(corrupt(
                    line_no,
                    format!("duplicate seq {seq} (after seq {p})"),
                ));
            }
            if seq != p.next() {
                return Err(corrupt(line_no, format!("hole: seq {seq} follows seq {p}")));
            }
        }
        prev = Some(seq);
        values.push(value);
    }
    Ok((spans, values, offset as u64, truncated_line))
}

/// `f` over `items` in order, split across the machine's cores when there
/// are enough of them to pay for the threads.
fn par_map<I: Sync, T: Send>(items: &[I], f: impl Fn(&I) -> T + Sync) -> Vec<T> {
    const PER_THREAD: usize = 16 * 1024;
    if items.len() < 2 * PER_THREAD {
        return items.iter().map(&f).collect();
    }
    let cores = cores();
    let threads = cores.min(items.len() / PER_THREAD).max(1);
    if threads == 1 {
        return items.iter().map(&f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(f).collect::<Vec<T>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// Parse the lines `refs` locates in `buf` (which starts at byte `base`),
/// splitting long runs across the machine's cores.
pub(super) fn parse_lines(
    buf: &[u8],
    base: u64,
    refs: &[LineRef],
) -> Vec<Result<JournalItem, String>> {
    par_map(refs, |r| {
        let at = (r.offset - base) as usize;
        parse_line(&buf[at..at + r.len as usize])
    })
}

pub use cairn_store::parse_line;

/// The cores this process may use, asked once: the answer reads cgroup
/// files, which costs more than a small segment's whole scan.
pub fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    })
}

/// A segment switch a crash cut short (`metadata.json` names the segment
/// pending, not among its segments) is rolled back: its file, written for
/// the switch and never acknowledged, goes, and the pointer is cleared.
/// The note for the operator, when a file was removed.
pub(super) fn roll_back_switch(
    worker: &crate::worker::WorkerDir,
    meta: &mut crate::worker::WorkerMetadata,
    segments: &cap_std::fs::Dir,
    segments_path: &std::path::Path,
) -> Result<Option<String>, StoreError> {
    let Some(pending) = meta.pending_segment else {
        return Ok(None);
    };
    let mut note = None;
    if pending != meta.active_segment && !meta.segments.iter().any(|s| s.segment_id == pending) {
        let name = format!("{pending}.jsonl");
        let path = segments_path.join(&name);
        match segments.remove_file(&name) {
            Ok(()) => {
                note = Some(format!(
                    "{}: removed a segment whose switch a crash cut short",
                    path.display()
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(StoreError::Io {
                    context: format!("cannot remove {}", path.display()),
                    source,
                });
            }
        }
    }
    meta.pending_segment = None;
    worker.write_metadata(meta)?;
    Ok(note)
}
