//! Session history, derived from the durable journal: each run's `Started`
//! prompt is a user turn (the tool results it was given, when it answers a
//! run that ended with tool calls: a tool turn each), its `Finished` text
//! the assistant's; an imported conversation is its turns as said (system,
//! user, assistant with its tool calls, tool with its call id); a
//! compaction summary is an assistant turn. It follows the active lineage.
//! Controllers built before 0.2.1 see it through [`crate::component::legacy`].

use crate::SessionId;
use crate::component::{Turn, TurnRole};
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
                role: TurnRole::Assistant,
                text: text.clone(),
                tool_call_id: None,
                tool_calls: None,
            });
            continue;
        }
        if let Payload::Lifecycle(LifecycleEvent::HistoryImported {
            turns: imported, ..
        }) = &e.payload
        {
            turns.extend(imported.iter().filter_map(|t| {
                let role = match t.role.as_str() {
                    "user" => TurnRole::User,
                    "assistant" => TurnRole::Assistant,
                    "system" | "developer" => TurnRole::System,
                    "tool" | "function" => TurnRole::Tool,
                    _ => return None,
                };
                Some(Turn {
                    seq: e.seq.0,
                    run_id: String::new(),
                    role,
                    text: t.text.clone(),
                    tool_call_id: t.tool_call_id.clone(),
                    tool_calls: t.tool_calls.as_ref().map(|c| c.to_string()),
                })
            }));
            continue;
        }
        let Some(run) = e.run_id else { continue };
        if Some(run) == skip {
            continue;
        }
        let (role, text) = match &e.payload {
            Payload::Lifecycle(LifecycleEvent::Started {
                prompt,
                tools,
                resumes: None,
                ..
            }) => {
                let given = tool_results(tools.as_deref());
                if !given.is_empty() {
                    turns.extend(given.into_iter().map(|(id, text)| Turn {
                        seq: e.seq.0,
                        run_id: run.to_string(),
                        role: TurnRole::Tool,
                        text,
                        tool_call_id: Some(id),
                        tool_calls: None,
                    }));
                    continue;
                }
                (TurnRole::User, prompt.to_string())
            }
            Payload::Lifecycle(LifecycleEvent::Finished { text, .. }) => {
                (TurnRole::Assistant, text.clone())
            }
            _ => continue,
        };
        turns.push(Turn {
            seq: e.seq.0,
            run_id: run.to_string(),
            role,
            text,
            tool_call_id: None,
            tool_calls: None,
        });
    }
    let skip = turns.len().saturating_sub(limit);
    turns.split_off(skip)
}

/// The tool results a run was given (`Start.tools`'s `tool_results`), by
/// call id.
fn tool_results(tools: Option<&str>) -> Vec<(String, String)> {
    let Some(doc) = tools.and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok()) else {
        return Vec::new();
    };
    doc["tool_results"]
        .as_array()
        .map(|given| {
            given
                .iter()
                .filter_map(|r| {
                    Some((
                        r["tool_call_id"].as_str()?.to_string(),
                        r["content"].as_str().unwrap_or_default().to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}
