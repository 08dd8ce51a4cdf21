//! A run's facts and park checkpoints in the file store: the facts ride on
//! the run's terminal journal line (one batch, one sync), and a checkpoint
//! is `session/checkpoints/<run_id>.bin`, keyed by the run id.

use super::{FileStore, blocking, io};
use crate::fsutil;
use async_trait::async_trait;
use cairn_store::{JournalItem, JournalStore, RunStore, StoreError};
use cairn_types::event::{RunFacts, SessionEvent};
use cairn_types::ids::{RunId, Seq, SessionId};
use std::sync::Arc;

#[async_trait]
impl RunStore for FileStore {
    async fn finish(
        &self,
        before: &[Arc<SessionEvent>],
        terminal: &Arc<SessionEvent>,
        after: &[Arc<SessionEvent>],
        _facts: &RunFacts,
    ) -> Result<(), StoreError> {
        // The facts ride on the terminal line itself: one batch, one sync.
        debug_assert!(terminal.facts.is_some());
        let mut all = before.to_vec();
        all.push(terminal.clone());
        all.extend_from_slice(after);
        self.append(&terminal.session_id, all[0].seq, &all).await
    }

    async fn run_facts(
        &self,
        session: &SessionId,
        run: RunId,
    ) -> Result<Option<RunFacts>, StoreError> {
        let items = self.read(session, Seq(0), usize::MAX).await?;
        Ok(items.into_iter().rev().find_map(|item| match item {
            JournalItem::Event(e) if e.run_id == Some(run) => e.facts.map(|f| *f),
            _ => None,
        }))
    }

    async fn put_checkpoint(
        &self,
        session: &SessionId,
        run: RunId,
        bytes: &[u8],
    ) -> Result<String, StoreError> {
        self.writable(session)?;
        let files = self.open(session)?;
        let bytes = bytes.to_vec();
        blocking(move || {
            let dir = fsutil::ensure_dir(files.worker.session_dir(), "checkpoints")
                .map_err(io("cannot open session/checkpoints"))?;
            fsutil::write_document(&dir, &format!("{run}.bin"), &bytes)
                .map_err(io(format!("cannot write checkpoint of run {run}")))?;
            Ok(run.to_string())
        })
        .await
    }

    async fn checkpoint(&self, session: &SessionId, key: &str) -> Result<Vec<u8>, StoreError> {
        let run: RunId = key
            .parse()
            .map_err(|_| StoreError::NoCheckpoint(key.to_string()))?;
        let files = self.open(session)?;
        let key = key.to_string();
        blocking(move || {
            files
                .worker
                .session_dir()
                .open_dir("checkpoints")
                .and_then(|d| d.read(format!("{run}.bin")))
                .map_err(|_| StoreError::NoCheckpoint(key))
        })
        .await
    }
}
