//! The in-memory store: a bounded window of each session's newest events.
//! It serves observers; it is not complete (see [`JournalStore::is_complete`]).

use super::{Head, JournalItem, JournalStore, RunStore, StoreError, check_fence};
use async_trait::async_trait;
use cairn_types::event::{LineCache, RunFacts, SessionEvent};
use cairn_types::ids::{Generation, RunId, SegmentId, Seq, SessionId};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// The default window per session.
pub const DEFAULT_WINDOW: usize = 100_000;

struct Session {
    segment: SegmentId,
    last_seq: Seq,
    last_generation: Generation,
    bytes: u64,
    /// The window's entries as their journal lines, parsed when read: a
    /// line is a third of what its parsed entry holds, and an entry kept
    /// here outlived the live tail — every entry of a session that emits
    /// without end took memory the system had never handed out (a page
    /// fault each dozen entries, on the emitting guest's thread), where a
    /// line lets it go and its memory serve the next.
    lines: VecDeque<Box<str>>,
    runs: HashMap<RunId, RunFacts>,
    checkpoints: HashMap<String, Vec<u8>>,
}

/// Keeps at most `window` events per session in memory.
pub struct MemoryStore {
    window: usize,
    sessions: Mutex<HashMap<SessionId, Session>>,
}

impl MemoryStore {
    /// A store keeping the newest `window` events of each session.
    pub fn new(window: usize) -> Self {
        MemoryStore {
            window: window.max(1),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    fn with<T>(
        &self,
        session: &SessionId,
        f: impl FnOnce(&mut Session) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let s = sessions
            .get_mut(session)
            .ok_or_else(|| StoreError::UnknownSession(session.clone()))?;
        f(s)
    }

    /// Append `events` after the fence let them through.
    fn push(
        &self,
        s: &mut Session,
        session: &SessionId,
        expected: Seq,
        events: &[Arc<SessionEvent>],
    ) -> Result<(), StoreError> {
        check_fence(session, s.last_seq, expected, events)?;
        for event in events {
            self.push_one(s, event);
        }
        Ok(())
    }

    fn push_one(&self, s: &mut Session, event: &Arc<SessionEvent>) {
        if let Some(g) = super::reserved_generation(event) {
            s.last_generation = s.last_generation.max(g);
        }
        s.last_seq = event.seq;
        let line = event.line();
        s.bytes = s.bytes.saturating_add(line.len() as u64 + 1);
        s.lines.push_back(line.into());
        while s.lines.len() > self.window {
            s.lines.pop_front();
        }
    }
}

impl Session {
    /// The seq of the oldest line held (seqs are dense: the fence
    /// checked every append).
    fn first_seq(&self) -> Option<Seq> {
        (!self.lines.is_empty()).then(|| Seq(self.last_seq.0 + 1 - self.lines.len() as u64))
    }
}

/// A line this store keeps, parsed back: the entry as it was appended
/// (its session's id as the store keys it, workspace and all; its line
/// cached, as it was).
fn parse(session: &SessionId, seq: Seq, line: Box<str>) -> Result<JournalItem, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        path: format!("memory:{session}").into(),
        line: seq.0 as usize,
        reason,
    };
    let mut item = [super::line::parse_line(line.as_bytes()).map_err(corrupt)?];
    super::restamp(session, &mut item);
    match item {
        [JournalItem::Event(mut event)] if event.seq == seq => {
            event.line = LineCache::built(line);
            Ok(JournalItem::Event(event))
        }
        [item] => Err(corrupt(format!(
            "the line held for seq {seq} is entry {}",
            item.seq()
        ))),
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new(DEFAULT_WINDOW)
    }
}

#[async_trait]
impl JournalStore for MemoryStore {
    async fn create(&self, session: &SessionId, segment: SegmentId) -> Result<(), StoreError> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sessions.contains_key(session) {
            return Err(StoreError::SessionExists(session.clone()));
        }
        sessions.insert(
            session.clone(),
            Session {
                segment,
                last_seq: Seq(0),
                last_generation: Generation(0),
                bytes: 0,
                lines: VecDeque::new(),
                runs: HashMap::new(),
                checkpoints: HashMap::new(),
            },
        );
        Ok(())
    }

    async fn head(&self, session: &SessionId) -> Result<Head, StoreError> {
        self.with(session, |s| {
            Ok(Head {
                last_seq: s.last_seq,
                active_segment: s.segment,
                last_generation: s.last_generation,
            })
        })
    }

    async fn append(
        &self,
        session: &SessionId,
        expected: Seq,
        events: &[Arc<SessionEvent>],
    ) -> Result<(), StoreError> {
        self.with(session, |s| self.push(s, session, expected, events))
    }

    async fn read(
        &self,
        session: &SessionId,
        after: Seq,
        limit: usize,
    ) -> Result<Vec<JournalItem>, StoreError> {
        self.read_bytes(session, after, limit, u64::MAX).await
    }

    async fn read_bytes(
        &self,
        session: &SessionId,
        after: Seq,
        limit: usize,
        max_bytes: u64,
    ) -> Result<Vec<JournalItem>, StoreError> {
        // The lines under the lock, parsed outside it.
        let lines = self.with(session, |s| {
            let Some(first) = s.first_seq() else {
                return Ok(vec![]);
            };
            if after.0 + 1 < first.0 {
                return Err(StoreError::Truncated { oldest: first });
            }
            let skip = (after.0 + 1 - first.0) as usize;
            let mut bytes = 0u64;
            let mut lines = Vec::new();
            for line in s.lines.iter().skip(skip).take(limit) {
                bytes += line.len() as u64 + 1;
                if !lines.is_empty() && bytes > max_bytes {
                    break;
                }
                lines.push(line.clone());
            }
            Ok(lines)
        })?;
        lines
            .into_iter()
            .zip(after.0 + 1..)
            .map(|(line, seq)| parse(session, Seq(seq), line))
            .collect()
    }

    async fn start_segment(
        &self,
        session: &SessionId,
        segment: SegmentId,
        _parent: SegmentId,
        first: &[Arc<SessionEvent>],
    ) -> Result<(), StoreError> {
        self.with(session, |s| {
            let expected = first.first().map_or(s.last_seq.next(), |e| e.seq);
            check_fence(session, s.last_seq, expected, first)?;
            s.segment = segment;
            for event in first {
                self.push_one(s, event);
            }
            Ok(())
        })
    }

    async fn bytes(&self, session: &SessionId) -> Result<u64, StoreError> {
        self.with(session, |s| Ok(s.bytes))
    }

    fn is_complete(&self) -> bool {
        false
    }
}

#[async_trait]
impl RunStore for MemoryStore {
    async fn finish(
        &self,
        before: &[Arc<SessionEvent>],
        terminal: &Arc<SessionEvent>,
        after: &[Arc<SessionEvent>],
        facts: &RunFacts,
    ) -> Result<(), StoreError> {
        let session = &terminal.session_id;
        let mut all = before.to_vec();
        all.push(terminal.clone());
        all.extend_from_slice(after);
        self.with(session, |s| {
            self.push(s, session, all[0].seq, &all)?;
            s.runs.insert(facts.run_id, facts.clone());
            Ok(())
        })
    }

    async fn run_facts(
        &self,
        session: &SessionId,
        run: RunId,
    ) -> Result<Option<RunFacts>, StoreError> {
        self.with(session, |s| Ok(s.runs.get(&run).cloned()))
    }

    async fn put_checkpoint(
        &self,
        session: &SessionId,
        run: RunId,
        bytes: &[u8],
    ) -> Result<String, StoreError> {
        self.with(session, |s| {
            let key = run.to_string();
            s.checkpoints.insert(key.clone(), bytes.to_vec());
            Ok(key)
        })
    }

    async fn checkpoint(&self, session: &SessionId, key: &str) -> Result<Vec<u8>, StoreError> {
        self.with(session, |s| {
            s.checkpoints
                .get(key)
                .cloned()
                .ok_or_else(|| StoreError::NoCheckpoint(key.to_string()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_types::event::{AgentEvent, LifecycleEvent, Payload, RunStatus, Usage};

    fn entry(session: &SessionId, segment: SegmentId, seq: u64, run: RunId) -> Arc<SessionEvent> {
        let payload = match seq % 3 {
            0 => Payload::Agent(AgentEvent::TextDelta {
                text: format!("delta \"{seq}\"\n"),
                by: None,
            }),
            1 => Payload::Lifecycle(LifecycleEvent::GenerationReserved {
                worker_id: cairn_types::ids::WorkerId::new(),
                generation: Generation(seq),
            }),
            _ => Payload::Lifecycle(LifecycleEvent::Failed {
                error: cairn_types::event::ErrorInfo {
                    code: cairn_types::failure::FailureCode::ControllerError,
                    message: format!("entry {seq}"),
                    details: Some(serde_json::json!({ "seq": seq })),
                },
            }),
        };
        let facts = seq.is_multiple_of(5).then(|| {
            Box::new(RunFacts {
                run_id: run,
                session_id: session.clone(),
                component: "sha256:test".into(),
                status: RunStatus::Failed,
                outcome: None,
                usage: Usage::default(),
                started_at_ms: 1,
                ended_at_ms: 2,
                first_seq: Seq(1),
                last_seq: Seq(seq),
                generation: Generation(1),
                checkpoint: None,
                pending_decisions: vec![],
                continues: None,
                resumes: None,
            })
        });
        Arc::new(SessionEvent {
            session_id: session.clone(),
            segment_id: segment,
            run_id: Some(run),
            seq: Seq(seq),
            at_ms: 1_700_000_000_000 + seq,
            payload,
            facts,
            line: Default::default(),
        })
    }

    /// Kept as lines, entries read back as they were appended: their
    /// session's id with its workspace, their facts, their lines; the
    /// window, the byte bound and the oldest held as before.
    #[tokio::test]
    async fn entries_kept_as_lines_read_back_as_appended() {
        let store = MemoryStore::new(20);
        let session = SessionId::parse("s-1")
            .unwrap()
            .in_workspace("team-a", "local");
        assert!(session.is_scoped());
        let segment = SegmentId::new();
        let run = RunId::new();
        store.create(&session, segment).await.unwrap();
        assert!(store.read(&session, Seq(0), 10).await.unwrap().is_empty());
        let appended: Vec<_> = (1..=50).map(|s| entry(&session, segment, s, run)).collect();
        for batch in appended.chunks(7) {
            store.append(&session, batch[0].seq, batch).await.unwrap();
        }
        let lines: u64 = appended.iter().map(|e| e.line().len() as u64 + 1).sum();
        assert_eq!(store.bytes(&session).await.unwrap(), lines);
        assert_eq!(store.head(&session).await.unwrap().last_seq, Seq(50));
        // The newest 20 are held: 31..=50.
        match store.read(&session, Seq(29), 5).await {
            Err(StoreError::Truncated { oldest }) => assert_eq!(oldest, Seq(31)),
            other => panic!("expected a truncated read, got {other:?}"),
        }
        let read = store.read(&session, Seq(30), 100).await.unwrap();
        assert_eq!(read.len(), 20);
        for (item, original) in read.iter().zip(&appended[30..]) {
            let JournalItem::Event(e) = item else {
                panic!("an entry of ours reads as {item:?}")
            };
            assert_eq!(e.session_id, session, "the id keeps its workspace");
            assert_eq!(e.seq, original.seq);
            assert_eq!(e.run_id, original.run_id);
            assert_eq!(e.at_ms, original.at_ms);
            assert_eq!(e.payload, original.payload);
            assert_eq!(e.facts, original.facts);
            if let Some(facts) = &e.facts {
                assert_eq!(facts.session_id, session);
            }
            assert!(e.has_line(), "read with its line");
            assert_eq!(e.line(), original.line());
        }
        // A limit, a start past the oldest, a byte bound (at least one).
        let some = store.read(&session, Seq(44), 3).await.unwrap();
        let seqs: Vec<u64> = some.iter().map(|i| i.seq().0).collect();
        assert_eq!(seqs, vec![45, 46, 47]);
        let first_two = appended[40].line().len() as u64 + appended[41].line().len() as u64 + 2;
        let bounded = store
            .read_bytes(&session, Seq(40), 10, first_two)
            .await
            .unwrap();
        assert_eq!(bounded.len(), 2);
        let one = store.read_bytes(&session, Seq(40), 10, 1).await.unwrap();
        assert_eq!(one.len(), 1);
        assert!(store.read(&session, Seq(50), 10).await.unwrap().is_empty());
    }
}
