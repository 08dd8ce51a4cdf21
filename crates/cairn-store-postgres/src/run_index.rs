//! The shared run index: `cairn_run_sessions` (written by the append of a
//! run's `started` entry) joined with the catalog's workspace and the run's
//! facts (written with its terminal entry), so every instance pages through
//! the runs of all of them.

use super::{PgStore, db};
use async_trait::async_trait;
use cairn_store::StoreError;
use cairn_store::run_index::{IndexedRun, RunIndex, RunPage};
use cairn_types::event::RunFacts;
use cairn_types::ids::{RunId, SessionId};

/// One row of the index as selected: run, session, workspace, facts.
const SELECT: &str = "SELECT rs.run_id, rs.session_id, COALESCE(w.workspace, ''), r.facts,
           rs.after_seq
    FROM cairn_run_sessions rs
    LEFT JOIN cairn_workers w ON w.session_id = rs.session_id
    LEFT JOIN cairn_runs r ON r.run_id = rs.run_id";

fn row(r: &tokio_postgres::Row) -> Result<Option<(RunId, IndexedRun)>, StoreError> {
    let (Ok(run), Ok(session)) = (
        r.get::<_, &str>(0).parse::<RunId>(),
        SessionId::from_key(r.get::<_, &str>(1)),
    ) else {
        // A row no cairn wrote: not a run of ours.
        return Ok(None);
    };
    let facts = r
        .get::<_, Option<&str>>(3)
        .map(|f| {
            serde_json::from_str::<RunFacts>(f).map_err(|e| StoreError::Corrupt {
                path: format!("postgres:cairn_runs/{run}").into(),
                line: 1,
                reason: e.to_string(),
            })
        })
        .transpose()?;
    Ok(Some((
        run,
        IndexedRun {
            session,
            workspace: r.get::<_, String>(2),
            facts,
            after: r
                .get::<_, Option<i64>>(4)
                .and_then(|a| u64::try_from(a).ok())
                .map(cairn_types::ids::Seq),
        },
    )))
}

#[async_trait]
impl RunIndex for PgStore {
    async fn started(
        &self,
        run: RunId,
        session: &SessionId,
        _workspace: &str,
        after: cairn_types::ids::Seq,
    ) -> Result<(), StoreError> {
        // Already there when the append of its `started` entry went
        // through; this makes it so when that entry was written elsewhere.
        let client = self.client().await?;
        let after = i64::try_from(after.0).unwrap_or(i64::MAX);
        client
            .execute(
                "INSERT INTO cairn_run_sessions (run_id, session_id, after_seq) VALUES ($1, $2, $3)
                 ON CONFLICT (run_id) DO NOTHING",
                &[&run.to_string(), &session.as_str(), &after],
            )
            .await
            .map_err(db(format!("run {run}: indexing it")))?;
        Ok(())
    }

    async fn ended(&self, facts: &RunFacts) -> Result<(), StoreError> {
        // The end wrote the facts with the terminal entry; this only fills
        // them in for a run whose end was recorded some other way.
        let run = facts.run_id;
        let (status, json) = super::facts_row(facts)?;
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO cairn_runs (run_id, session_id, status, facts)
                 SELECT $1, $2, $3, $4 WHERE EXISTS
                   (SELECT 1 FROM cairn_run_sessions WHERE run_id = $1)
                 ON CONFLICT (run_id) DO NOTHING",
                &[&run.to_string(), &facts.session_id.as_str(), &status, &json],
            )
            .await
            .map_err(db(format!("run {run}: indexing its end")))?;
        Ok(())
    }

    fn kept_by_appends(&self) -> bool {
        true
    }

    async fn forget_session(&self, session: &SessionId) -> Result<(), StoreError> {
        let client = self.client().await?;
        for sql in [
            "DELETE FROM cairn_runs WHERE session_id = $1",
            "DELETE FROM cairn_run_sessions WHERE session_id = $1",
        ] {
            client
                .execute(sql, &[&session.as_str()])
                .await
                .map_err(db(format!("session {session}: forgetting its runs")))?;
        }
        Ok(())
    }

    async fn get(&self, run: RunId) -> Result<Option<IndexedRun>, StoreError> {
        let client = self.client().await?;
        let found = client
            .query_opt(
                &format!("{SELECT} WHERE rs.run_id = $1"),
                &[&run.to_string()],
            )
            .await
            .map_err(db(format!("run {run}: reading the run index")))?;
        Ok(match found {
            Some(r) => row(&r)?.map(|(_, r)| r),
            None => None,
        })
    }

    async fn page(
        &self,
        workspace: Option<&str>,
        before: Option<RunId>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
        // Run ids are UUIDv7 in their lowercase hyphenated form: their text
        // order is their time order.
        let before = before.map(|b| b.to_string());
        let take = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "{SELECT} WHERE ($1::TEXT IS NULL OR w.workspace = $1)
                       AND ($2::TEXT IS NULL OR rs.run_id < $2)
                     ORDER BY rs.run_id DESC LIMIT $3"
                ),
                &[&workspace, &before, &take],
            )
            .await
            .map_err(db("reading a page of the run index"))?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            if let Some(item) = row(r)? {
                out.push(item);
            }
        }
        let more = out.len() > limit;
        out.truncate(limit);
        Ok((out, more))
    }
}
