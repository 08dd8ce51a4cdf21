//! The in-memory store: a bounded window of each session's newest events.
//! It serves observers; it is not complete (see [`JournalStore::is_complete`]).

use super::{Head, JournalItem, JournalStore, RunStore, StoreError, check_fence};
use async_trait::async_trait;
use cairn_types::event::{RunFacts, SessionEvent};
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
    events: VecDeque<Arc<SessionEvent>>,
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
        s.bytes = s.bytes.saturating_add(event.line().len() as u64 + 1);
        s.events.push_back(event.clone());
        while s.events.len() > self.window {
            s.events.pop_front();
        }
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
                events: VecDeque::new(),
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
        self.with(session, |s| {
            let Some(first) = s.events.front().map(|e| e.seq) else {
                return Ok(vec![]);
            };
            if after.0 + 1 < first.0 {
                return Err(StoreError::Truncated { oldest: first });
            }
            let skip = (after.0 + 1 - first.0) as usize;
            let mut bytes = 0u64;
            let mut out = Vec::new();
            for e in s.events.iter().skip(skip).take(limit) {
                if max_bytes != u64::MAX {
                    bytes += e.line().len() as u64 + 1;
                    if !out.is_empty() && bytes > max_bytes {
                        break;
                    }
                }
                out.push(JournalItem::Event(Box::new(SessionEvent::clone(e))));
            }
            Ok(out)
        })
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
