//! Riding out the database going away: a restart, a failover or a network
//! blip surfaces as [`StoreError::Unavailable`] (the connection, never the
//! query, failed), and the writes of acknowledged work — journal appends,
//! which carry decision answers, run ends, checkpoints — are tried again
//! with backoff until the store's outage budget is spent, so a run whose
//! database came back within it goes on instead of failing `storage`.
//!
//! A write whose connection dropped after it was sent may have committed;
//! tried again, it meets its own rows. [`PgStore::landed`] tells that from
//! another writer's: the rows at those seqs are these lines, byte for byte.

use super::{PgStore, describe};
use cairn_store::StoreError;
use cairn_types::event::SessionEvent;
use cairn_types::ids::SessionId;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a write waits for the database to come back unless
/// `[store] outage_budget_ms` says otherwise.
pub const OUTAGE_BUDGET: Duration = Duration::from_secs(30);

/// The first wait between tries, doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Whether `e` says the database is away rather than that the statement
/// was refused: the connection closed or could not be made, the server is
/// shutting down or starting, out of connection slots, or a transaction
/// lost a serialization race (safe to run again).
pub(crate) fn away(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        return code.starts_with("08")
            || matches!(
                code,
                "57P01" | "57P02" | "57P03" | "53300" | "40001" | "40P01"
            );
    }
    // No answer from a server at all: an I/O failure on the connection.
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// `e` as a store error: [`StoreError::Unavailable`] when the database is
/// away, [`StoreError::Database`] otherwise.
pub(crate) fn store_error(context: String, e: &tokio_postgres::Error) -> StoreError {
    match away(e) {
        true => StoreError::Unavailable {
            context,
            message: describe(e),
        },
        false => StoreError::Database {
            context,
            message: describe(e),
        },
    }
}

impl PgStore {
    /// Run `op` (told whether it runs again after the database went away)
    /// until it does not fail [`StoreError::Unavailable`], or the outage
    /// budget is spent (then that error).
    pub(crate) async fn riding<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T, StoreError>
    where
        F: FnMut(bool) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let began = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        let mut again = false;
        loop {
            match op(again).await {
                Err(e @ StoreError::Unavailable { .. }) => {
                    if began.elapsed() + backoff > self.outage_budget {
                        if again {
                            tracing::warn!(
                                "{what}: the database stayed away through the outage budget ({} ms): {e}",
                                self.outage_budget.as_millis()
                            );
                        }
                        return Err(e);
                    }
                    if !again {
                        tracing::warn!(
                            "{what}: the database is away; trying again for up to {} ms: {e}",
                            self.outage_budget.as_millis()
                        );
                    }
                    again = true;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                done => {
                    if again && done.is_ok() {
                        tracing::info!(
                            "{what}: the database is back after {} ms",
                            began.elapsed().as_millis()
                        );
                    }
                    return done;
                }
            }
        }
    }

    /// Whether `events` are in `session`'s journal already, exactly: a
    /// write tried again after its connection dropped met its own rows.
    pub(crate) async fn landed(
        &self,
        session: &SessionId,
        events: &[Arc<SessionEvent>],
    ) -> Result<bool, StoreError> {
        let (Some(first), Some(last)) = (events.first(), events.last()) else {
            return Ok(true);
        };
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT line FROM cairn_entries WHERE session_id = $1 AND seq BETWEEN $2 AND $3
                 ORDER BY seq",
                &[
                    &session.as_str(),
                    &super::seq_i64(first.seq.0),
                    &super::seq_i64(last.seq.0),
                ],
            )
            .await
            .map_err(|e| store_error(format!("session {session}: reading back an append"), &e))?;
        Ok(rows.len() == events.len()
            && rows
                .iter()
                .zip(events)
                .all(|(row, event)| row.get::<_, &str>(0) == event.line()))
    }
}
