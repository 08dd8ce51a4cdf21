//! Session history, derived from the durable journal: each run's `Started`
//! prompt is a user turn, its `Finished` text the assistant's; a compaction
//! summary is an assistant turn. It follows the active lineage.

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
    let events: Vec<crate::SessionEvent> = items
        .into_iter()
        .filter_map(|i| match i {
            JournalItem::Event(e) => Some(*e),
            JournalItem::Unknown { .. } => None,
        })
        .collect();
    Ok(turns_of(&events, Some(current), limit))
}

/// The turns of the active lineage, the latest `limit`, oldest first; the
/// run `skip` (the current one) left out.
pub fn turns_of(events: &[crate::SessionEvent], skip: Option<RunId>, limit: usize) -> Vec<Turn> {
    let mut turns = Vec::new();
    for e in super::lineage::active_lineage(events) {
        if let Payload::Lifecycle(LifecycleEvent::CompactionSummary { text, .. }) = &e.payload {
            turns.push(Turn {
                seq: e.seq.0,
                run_id: String::new(),
                user: false,
                text: text.clone(),
            });
            continue;
        }
        let Some(run) = e.run_id else { continue };
        if Some(run) == skip {
            continue;
        }
        let (user, text) = match &e.payload {
            Payload::Lifecycle(LifecycleEvent::Started {
                prompt,
                resumes: None,
                ..
            }) => (true, prompt.clone()),
            Payload::Lifecycle(LifecycleEvent::Finished { text, .. }) => (false, text.clone()),
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
    turns.split_off(skip)
}
