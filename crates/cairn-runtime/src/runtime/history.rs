//! Session history, derived from the durable journal: each run's `Started`
//! prompt is a user turn, its `Finished` text the assistant's; a compaction
//! summary is an assistant turn. It follows the active lineage.

use crate::SessionId;
use crate::component::Turn;
use crate::ids::{RunId, Seq};
use crate::journal::event::{LifecycleEvent, Payload};
use crate::store::{JournalItem, Store, StoreError};

/// The most recent `limit` turns before `current`'s `Started`, in the
/// lineage as it stood then, oldest first.
pub async fn turns(
    store: &dyn Store,
    session: &SessionId,
    current: RunId,
    limit: usize,
) -> Result<Vec<Turn>, StoreError> {
    // Read a page at a time — bounded by entries and by bytes, so a few
    // huge emits make many small pages, not one huge one — and keep only
    // what history is made of (the segment entries the lineage needs,
    // prompts, final texts, summaries): the memory this takes grows with
    // the turns, not with the journal.
    const PAGE: usize = 4096;
    let mut kept: Vec<crate::SessionEvent> = Vec::new();
    let mut after = Seq(0);
    loop {
        let items = store
            .read_bytes(session, after, PAGE, super::run_index::SCAN_PAGE_BYTES)
            .await?;
        let Some(last) = items.last() else { break };
        after = last.seq();
        kept.extend(items.into_iter().filter_map(|i| match i {
            JournalItem::Event(e) if shapes_history(&e) => Some(*e),
            _ => None,
        }));
        // What the run saw is what came before its `Started`, in the
        // lineage as it stood then: a replay after later runs (offline,
        // in a restore, in a shadow replay) reads no more.
        if let Some(at) = kept.iter().position(|e| {
            e.run_id == Some(current)
                && matches!(
                    e.payload,
                    Payload::Lifecycle(LifecycleEvent::Started { .. })
                )
        }) {
            kept.truncate(at);
            break;
        }
    }
    Ok(turns_of(&kept, Some(current), limit))
}

/// Whether an entry is one history or its lineage is made of.
fn shapes_history(e: &crate::SessionEvent) -> bool {
    matches!(
        &e.payload,
        Payload::Lifecycle(
            LifecycleEvent::SegmentCreated { .. }
                | LifecycleEvent::CompactionSummary { .. }
                | LifecycleEvent::HistoryImported { .. }
                | LifecycleEvent::Started { .. }
                | LifecycleEvent::Finished { .. }
        )
    )
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
        if let Payload::Lifecycle(LifecycleEvent::HistoryImported {
            turns: imported, ..
        }) = &e.payload
        {
            // Only what the history interface can say: user and assistant.
            turns.extend(imported.iter().filter_map(|t| {
                let user = match t.role.as_str() {
                    "user" => true,
                    "assistant" => false,
                    _ => return None,
                };
                Some(Turn {
                    seq: e.seq.0,
                    run_id: String::new(),
                    user,
                    text: t.text.clone(),
                })
            }));
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
