//! Session history, derived from the durable journal: each run's `Started`
//! prompt is a user turn, its `Finished` text the assistant's.

use crate::SessionId;
use crate::component::Turn;
use crate::ids::{RunId, Seq};
use crate::journal::event::{LifecycleEvent, Payload};
use crate::store::{JournalItem, Store, StoreError};

/// The most recent `limit` turns before `current`, oldest first.
pub async fn turns(
    store: &dyn Store,
    session: &SessionId,
    current: RunId,
    limit: usize,
) -> Result<Vec<Turn>, StoreError> {
    let items = store.read(session, Seq(0), usize::MAX).await?;
    let mut turns = Vec::new();
    for item in items {
        let JournalItem::Event(e) = item else {
            continue;
        };
        let Some(run) = e.run_id else { continue };
        if run == current {
            continue;
        }
        let (user, text) = match e.payload {
            Payload::Lifecycle(LifecycleEvent::Started { prompt, .. }) => (true, prompt),
            Payload::Lifecycle(LifecycleEvent::Finished { text, .. }) => (false, text),
            _ => continue,
        };
        turns.push(Turn {
            seq: e.seq.0,
            run_id: run.to_string(),
            user,
            text,
        });
    }
    let skip = turns.len().saturating_sub(limit);
    Ok(turns.split_off(skip))
}
