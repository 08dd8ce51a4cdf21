//! Journals and run facts in PostgreSQL: every write is one transaction,
//! fenced by the session's head and by this instance's lease token.

use super::{CHANNEL, PgStore, db, seq_i64};
use async_trait::async_trait;
use cairn_store::{Head, JournalItem, JournalStore, RunStore, StoreError, check_fence};
use cairn_types::event::{RunFacts, SessionEvent};
use cairn_types::ids::{Generation, RunId, SegmentId, Seq, SessionId};
use std::sync::Arc;
use tokio_postgres::Transaction;
use tokio_postgres::error::SqlState;

/// Where a corrupt row is, for `StoreError::Corrupt`'s path.
fn row_path(session: &SessionId) -> std::path::PathBuf {
    format!("postgres:cairn_entries/{session}").into()
}

/// An append in one statement (one round trip, its own transaction): lock
/// the head, share-lock the lease, and only when the head is `$2 - 1` and
/// the lease (if any) is this holder's token, insert the batch, move the
/// head and notify. It returns the head, the lease and how many rows went
/// in, so a refusal says why.
const APPEND: &str = "
WITH head AS (
    SELECT last_seq FROM cairn_journals WHERE session_id = $1 FOR UPDATE
), lease AS (
    SELECT holder, token FROM cairn_leases WHERE session_id = $1 FOR SHARE
), ok AS (
    SELECT 1 FROM head
    WHERE head.last_seq = $2::BIGINT - 1
      AND NOT EXISTS (SELECT 1 FROM lease WHERE NOT (lease.holder = $3::TEXT AND lease.token = $4::BIGINT))
), ins AS (
    INSERT INTO cairn_entries (session_id, seq, segment_id, line)
    SELECT $1, s, g, l FROM unnest($5::BIGINT[], $6::TEXT[], $7::TEXT[]) AS t(s, g, l)
    WHERE EXISTS (SELECT 1 FROM ok)
    RETURNING 1
), upd AS (
    UPDATE cairn_journals
    SET last_seq = $8::BIGINT, last_generation = GREATEST(last_generation, $9::BIGINT),
        bytes = bytes + $10::BIGINT
    WHERE session_id = $1 AND EXISTS (SELECT 1 FROM ok)
    RETURNING 1
), runs AS (
    INSERT INTO cairn_run_sessions (run_id, session_id, after_seq)
    SELECT r, $1, a FROM unnest($13::TEXT[], $14::BIGINT[]) AS t(r, a)
    WHERE EXISTS (SELECT 1 FROM ok)
    ON CONFLICT (run_id) DO NOTHING
    RETURNING 1
), note AS (
    SELECT pg_notify($11::TEXT, $12::TEXT) FROM upd
)
SELECT (SELECT last_seq FROM head), (SELECT holder FROM lease), (SELECT token FROM lease),
       (SELECT count(*) FROM ins), (SELECT count(*) FROM note)";

/// A batch as the entries table's columns, with what moves the head.
struct Rows<'a> {
    seqs: Vec<i64>,
    segments: Vec<String>,
    lines: Vec<&'a str>,
    /// Bytes the lines add (a newline each, as the file store counts).
    bytes: i64,
    /// The highest generation the batch reserves (0: none).
    generation: Generation,
    /// The runs the batch starts (the run index: run → session).
    started: Vec<String>,
    /// For each, the seq before its first entry in the batch (no entry
    /// of the run comes at or before it).
    started_after: Vec<i64>,
}

impl<'a> Rows<'a> {
    fn of(events: &'a [Arc<SessionEvent>]) -> Self {
        let lines: Vec<&str> = events.iter().map(|e| e.line()).collect();
        Rows {
            seqs: events.iter().map(|e| seq_i64(e.seq.0)).collect(),
            segments: events.iter().map(|e| e.segment_id.to_string()).collect(),
            bytes: lines.iter().map(|l| l.len() as i64 + 1).sum(),
            lines,
            generation: events
                .iter()
                .filter_map(|e| cairn_store::reserved_generation(e))
                .max()
                .unwrap_or(Generation(0)),
            started: Vec::new(),
            started_after: Vec::new(),
        }
        .with_started(events)
    }

    /// The runs the batch starts, each with the seq before its first entry
    /// in the batch (its generation's reservation comes before `started`).
    fn with_started(mut self, events: &[Arc<SessionEvent>]) -> Self {
        for e in events {
            let (
                cairn_types::event::Payload::Lifecycle(
                    cairn_types::event::LifecycleEvent::Started { .. },
                ),
                Some(run),
            ) = (&e.payload, e.run_id)
            else {
                continue;
            };
            let first = events
                .iter()
                .find(|x| x.run_id == Some(run))
                .map_or(e.seq, |x| x.seq);
            self.started.push(run.to_string());
            self.started_after.push(seq_i64(first.0.saturating_sub(1)));
        }
        self
    }
}

impl PgStore {
    /// One try of a checkpoint's upsert.
    async fn put_checkpoint_once(
        &self,
        session: &SessionId,
        key: &str,
        ctx: &str,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let ctx = ctx.to_string();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db(ctx.clone()))?;
        self.check_lease(&tx, session).await?;
        tx.execute(
            "INSERT INTO cairn_checkpoints (session_id, key, bytes) VALUES ($1, $2, $3)
             ON CONFLICT (session_id, key) DO UPDATE SET bytes = EXCLUDED.bytes",
            &[&session.as_str(), &key, &bytes],
        )
        .await
        .map_err(|e| match e.code() {
            Some(c) if *c == SqlState::FOREIGN_KEY_VIOLATION => {
                StoreError::UnknownSession(session.clone())
            }
            _ => db(ctx.clone())(e),
        })?;
        tx.commit().await.map_err(db(ctx))?;
        Ok(())
    }

    /// One try of a run's end: its last entries and its facts in one
    /// transaction.
    async fn finish_once(
        &self,
        session: &SessionId,
        all: &[Arc<SessionEvent>],
        facts: &RunFacts,
    ) -> Result<(), StoreError> {
        let (status, facts_json) = super::facts_row(facts)?;
        let ctx = format!("run {}: its end", facts.run_id);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db(ctx.clone()))?;
        self.write(&tx, session, Some(all[0].seq), all, None)
            .await?;
        tx.execute(
            "INSERT INTO cairn_runs (run_id, session_id, status, facts) VALUES ($1, $2, $3, $4)
             ON CONFLICT (run_id) DO UPDATE SET status = EXCLUDED.status, facts = EXCLUDED.facts",
            &[
                &facts.run_id.to_string(),
                &session.as_str(),
                &status,
                &facts_json,
            ],
        )
        .await
        .map_err(db(ctx.clone()))?;
        tx.commit().await.map_err(db(ctx))
    }

    /// One try of an append: one statement that checks the lease token and
    /// the head, inserts the batch and moves the head.
    async fn append_once(
        &self,
        session: &SessionId,
        expected: Seq,
        events: &[Arc<SessionEvent>],
    ) -> Result<(), StoreError> {
        // Dense from `expected` (the head is checked by the statement).
        check_fence(session, Seq(expected.0.saturating_sub(1)), expected, events)?;
        let client = self.client().await?;
        let sid = session.as_str();
        let Rows {
            seqs,
            segments,
            lines,
            bytes,
            generation,
            started,
            started_after,
        } = Rows::of(events);
        let last = seq_i64(events.last().map_or(expected, |e| e.seq).0);
        let token = self.token_of(session).map_or(0, |t| t as i64);
        let row = client
            .query_one(
                APPEND,
                &[
                    &sid,
                    &seq_i64(expected.0),
                    &self.holder,
                    &token,
                    &seqs,
                    &segments,
                    &lines,
                    &last,
                    &seq_i64(generation.0),
                    &bytes,
                    &CHANNEL,
                    &format!("{sid} {last}"),
                    &started,
                    &started_after,
                ],
            )
            .await
            .map_err(|e| match e.code() {
                // A seq that exists: another writer wrote it.
                Some(c) if *c == SqlState::UNIQUE_VIOLATION => StoreError::Conflict {
                    session: session.clone(),
                    expected,
                    head: expected,
                },
                _ => db(format!("session {session}: append"))(e),
            })?;
        let head: Option<i64> = row.get(0);
        let Some(head) = head else {
            return Err(StoreError::UnknownSession(session.clone()));
        };
        if row.get::<_, i64>(3) == events.len() as i64 {
            return Ok(());
        }
        let holder: Option<String> = row.get(1);
        if let Some(holder) = holder {
            let current = row.get::<_, Option<i64>>(2).unwrap_or(0);
            if holder != self.holder || current != token {
                return Err(StoreError::LeaseLost {
                    session: session.clone(),
                    token: token as u64,
                    now: format!("token {current} held by {holder}"),
                });
            }
        }
        Err(StoreError::Conflict {
            session: session.clone(),
            expected,
            head: Seq(head as u64),
        })
    }

    /// Refuse the write unless this instance carries the session's current
    /// lease token (a session never leased is fenced by its head alone).
    /// The lease row is share-locked: a takeover waits for this
    /// transaction, so no append lands after the lease moved.
    async fn check_lease(
        &self,
        tx: &Transaction<'_>,
        session: &SessionId,
    ) -> Result<(), StoreError> {
        let row = tx
            .query_opt(
                "SELECT holder, token,
                        GREATEST(0, (EXTRACT(EPOCH FROM (expires_at - now())) * 1000))::BIGINT
                 FROM cairn_leases WHERE session_id = $1 FOR SHARE",
                &[&session.as_str()],
            )
            .await
            .map_err(db(format!("session {session}: reading its lease")))?;
        let Some(row) = row else { return Ok(()) };
        let holder: String = row.get(0);
        let token = row.get::<_, i64>(1) as u64;
        let mine = self.token_of(session);
        if holder == self.holder && mine == Some(token) {
            return Ok(());
        }
        let lease = cairn_store::Lease {
            session: session.clone(),
            holder,
            token,
            expires_in_ms: row.get::<_, i64>(2) as u64,
        };
        Err(StoreError::LeaseLost {
            session: session.clone(),
            token: mine.unwrap_or(0),
            now: lease.to_string(),
        })
    }

    /// The fenced write every append, segment switch and run end makes:
    /// lock the head, check the lease and the seq, insert, move the head,
    /// notify.
    async fn write(
        &self,
        tx: &Transaction<'_>,
        session: &SessionId,
        expected: Option<Seq>,
        events: &[Arc<SessionEvent>],
        segment: Option<SegmentId>,
    ) -> Result<(), StoreError> {
        let sid = session.as_str();
        let ctx = || format!("session {session}: append");
        let head = tx
            .query_opt(
                "SELECT last_seq FROM cairn_journals WHERE session_id = $1 FOR UPDATE",
                &[&sid],
            )
            .await
            .map_err(db(ctx()))?
            .ok_or_else(|| StoreError::UnknownSession(session.clone()))?;
        let head = Seq(head.get::<_, i64>(0) as u64);
        self.check_lease(tx, session).await?;
        let expected = expected
            .or(events.first().map(|e| e.seq))
            .unwrap_or(head.next());
        check_fence(session, head, expected, events)?;
        if !events.is_empty() {
            let Rows {
                seqs,
                segments,
                lines,
                bytes,
                generation,
                started,
                started_after,
            } = Rows::of(events);
            tx.execute(
                "INSERT INTO cairn_entries (session_id, seq, segment_id, line)
                 SELECT $1, s, g, l FROM unnest($2::BIGINT[], $3::TEXT[], $4::TEXT[]) AS t(s, g, l)",
                &[&sid, &seqs, &segments, &lines],
            )
            .await
            .map_err(|e| match e.code() {
                // The head row's lock makes this unreachable; were it
                // reached, the seq exists: another writer wrote it.
                Some(c) if *c == SqlState::UNIQUE_VIOLATION => StoreError::Conflict {
                    session: session.clone(),
                    expected,
                    head,
                },
                _ => db(ctx())(e),
            })?;
            let last = seq_i64(events.last().map_or(head, |e| e.seq).0);
            tx.execute(
                "UPDATE cairn_journals SET last_seq = $2,
                    last_generation = GREATEST(last_generation, $3), bytes = bytes + $4
                 WHERE session_id = $1",
                &[&sid, &last, &seq_i64(generation.0), &bytes],
            )
            .await
            .map_err(db(ctx()))?;
            if !started.is_empty() {
                tx.execute(
                    "INSERT INTO cairn_run_sessions (run_id, session_id, after_seq)
                     SELECT r, $1, a FROM unnest($2::TEXT[], $3::BIGINT[]) AS t(r, a)
                     ON CONFLICT (run_id) DO NOTHING",
                    &[&sid, &started, &started_after],
                )
                .await
                .map_err(db(ctx()))?;
            }
            tx.execute(
                "SELECT pg_notify($1, $2)",
                &[&CHANNEL, &format!("{sid} {last}")],
            )
            .await
            .map_err(db(ctx()))?;
        }
        if let Some(segment) = segment {
            tx.execute(
                "UPDATE cairn_journals SET active_segment = $2 WHERE session_id = $1",
                &[&sid, &segment.to_string()],
            )
            .await
            .map_err(db(ctx()))?;
        }
        Ok(())
    }
}

#[async_trait]
impl JournalStore for PgStore {
    async fn create(&self, session: &SessionId, segment: SegmentId) -> Result<(), StoreError> {
        // Fenced like an append: a creator that carries a lease token
        // creates the journal only while that token is the session's (a
        // creator paused past its lease, whose half-made session was
        // cleared, cannot bring it back).
        let token = self.token_of(session).map(|t| t as i64);
        let client = self.client().await?;
        let n = client
            .execute(
                "INSERT INTO cairn_journals (session_id, active_segment)
                 SELECT $1, $2 WHERE $3::BIGINT IS NULL OR EXISTS
                   (SELECT 1 FROM cairn_leases WHERE session_id = $1 AND holder = $4 AND token = $3)",
                &[&session.as_str(), &segment.to_string(), &token, &self.holder],
            )
            .await
            .map_err(|e| match e.code() {
                Some(c) if *c == SqlState::UNIQUE_VIOLATION => {
                    StoreError::SessionExists(session.clone())
                }
                _ => db(format!("session {session}: create"))(e),
            })?;
        if n == 0 {
            let now = match cairn_store::LeaseStore::lease(self, session).await? {
                Some(l) => l.to_string(),
                None => "no lease".to_string(),
            };
            return Err(StoreError::LeaseLost {
                session: session.clone(),
                token: token.unwrap_or(0) as u64,
                now,
            });
        }
        Ok(())
    }

    async fn head(&self, session: &SessionId) -> Result<Head, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT last_seq, active_segment, last_generation FROM cairn_journals
                 WHERE session_id = $1",
                &[&session.as_str()],
            )
            .await
            .map_err(db(format!("session {session}: head")))?
            .ok_or_else(|| StoreError::UnknownSession(session.clone()))?;
        let segment: String = row.get(1);
        Ok(Head {
            last_seq: Seq(row.get::<_, i64>(0) as u64),
            active_segment: segment.parse().map_err(|_| StoreError::Corrupt {
                path: row_path(session),
                line: 0,
                reason: format!("the active segment {segment:?} is not a segment id"),
            })?,
            last_generation: Generation(row.get::<_, i64>(2) as u64),
        })
    }

    async fn append(
        &self,
        session: &SessionId,
        expected: Seq,
        events: &[Arc<SessionEvent>],
    ) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let what = format!("session {session}: append");
        self.riding(&what, |again| async move {
            match self.append_once(session, expected, events).await {
                Err(StoreError::Conflict { .. })
                    if again && self.landed(session, events).await? =>
                {
                    Ok(())
                }
                done => done,
            }
        })
        .await
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
        let client = self.client().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = if max_bytes == u64::MAX {
            client
                .query(
                    "SELECT seq, line FROM cairn_entries WHERE session_id = $1 AND seq > $2
                     ORDER BY seq LIMIT $3",
                    &[&session.as_str(), &seq_i64(after.0), &limit],
                )
                .await
        } else {
            // The running total of the lines' sizes (a TOASTed line's size
            // is read from its header, not by reading it): the first row
            // always, then while the lines fit.
            let max = i64::try_from(max_bytes).unwrap_or(i64::MAX);
            client
                .query(
                    "SELECT seq, line FROM (
                       SELECT seq, line, octet_length(line) + 1 AS size,
                              sum(octet_length(line) + 1) OVER (ORDER BY seq) AS total
                       FROM (SELECT seq, line FROM cairn_entries
                             WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3) page
                     ) sized
                     WHERE total - size = 0 OR total <= $4
                     ORDER BY seq",
                    &[&session.as_str(), &seq_i64(after.0), &limit, &max],
                )
                .await
        }
        .map_err(db(format!("session {session}: read")))?;
        if rows.is_empty() {
            // Empty, or no such session.
            self.head(session).await?;
        }
        let mut items = Vec::with_capacity(rows.len());
        let mut next = after.next();
        for row in rows {
            let seq = Seq(row.get::<_, i64>(0) as u64);
            let line: &str = row.get(1);
            let corrupt = |reason: String| StoreError::Corrupt {
                path: row_path(session),
                line: seq.0 as usize,
                reason,
            };
            if seq != next {
                return Err(corrupt(format!("seq {} is missing", next.0)));
            }
            let item = cairn_store::parse_line(line.as_bytes()).map_err(corrupt)?;
            if item.seq() != seq {
                return Err(corrupt(format!("the row holds seq {}", item.seq().0)));
            }
            items.push(item);
            next = next.next();
        }
        cairn_store::restamp(session, &mut items);
        Ok(items)
    }

    async fn start_segment(
        &self,
        session: &SessionId,
        segment: SegmentId,
        _parent: SegmentId,
        first: &[Arc<SessionEvent>],
    ) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db("segment switch"))?;
        self.write(&tx, session, None, first, Some(segment)).await?;
        tx.commit()
            .await
            .map_err(db(format!("session {session}: segment switch")))
    }

    async fn bytes(&self, session: &SessionId) -> Result<u64, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT bytes FROM cairn_journals WHERE session_id = $1",
                &[&session.as_str()],
            )
            .await
            .map_err(db(format!("session {session}: size")))?
            .ok_or_else(|| StoreError::UnknownSession(session.clone()))?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    fn is_complete(&self) -> bool {
        true
    }

    fn location(&self, session: &SessionId) -> Option<String> {
        Some(format!(
            "PostgreSQL, table cairn_entries, session_id {session}"
        ))
    }
}

#[async_trait]
impl RunStore for PgStore {
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
        let all = &all;
        let what = format!("run {}: its end", facts.run_id);
        self.riding(&what, |again| async move {
            match self.finish_once(session, all, facts).await {
                // The entries and the facts are one transaction: the
                // entries there mean the facts are too.
                Err(StoreError::Conflict { .. }) if again && self.landed(session, all).await? => {
                    Ok(())
                }
                done => done,
            }
        })
        .await
    }

    async fn run_facts(
        &self,
        session: &SessionId,
        run: RunId,
    ) -> Result<Option<RunFacts>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT facts FROM cairn_runs WHERE run_id = $1 AND session_id = $2",
                &[&run.to_string(), &session.as_str()],
            )
            .await
            .map_err(db(format!("run {run}: its facts")))?;
        row.map(|r| {
            serde_json::from_str(r.get::<_, &str>(0)).map_err(|e| StoreError::Corrupt {
                path: format!("postgres:cairn_runs/{run}").into(),
                line: 1,
                reason: e.to_string(),
            })
        })
        .transpose()
    }

    async fn put_checkpoint(
        &self,
        session: &SessionId,
        run: RunId,
        bytes: &[u8],
    ) -> Result<String, StoreError> {
        let key = run.to_string();
        let ctx = format!("run {run}: its checkpoint");
        // An upsert of the same bytes: safe to try again.
        self.riding(&ctx, |_| {
            self.put_checkpoint_once(session, &key, &ctx, bytes)
        })
        .await?;
        Ok(key)
    }

    async fn checkpoint(&self, session: &SessionId, key: &str) -> Result<Vec<u8>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT bytes FROM cairn_checkpoints WHERE session_id = $1 AND key = $2",
                &[&session.as_str(), &key],
            )
            .await
            .map_err(db(format!("session {session}: checkpoint {key}")))?;
        row.map(|r| r.get::<_, Vec<u8>>(0))
            .ok_or_else(|| StoreError::NoCheckpoint(key.to_string()))
    }
}
