//! The active lineage of a session: the active segment's own entries, then
//! for a branch its parent's entries up to the branch point (and so on up);
//! a compaction cuts its parent off, its summary standing for it. History
//! and forks follow the lineage; subscribers and export see every entry.

use crate::SessionEvent;
use crate::ids::{SegmentId, Seq};
use crate::journal::event::{LifecycleEvent, Payload};
use std::collections::HashMap;

/// The entries of the active lineage, in seq order.
pub fn active_lineage(events: &[SessionEvent]) -> Vec<&SessionEvent> {
    let mut parents: HashMap<SegmentId, (Option<SegmentId>, Seq, bool)> = HashMap::new();
    let mut active = None;
    for e in events {
        if let Payload::Lifecycle(LifecycleEvent::SegmentCreated {
            segment_id,
            compacted_from,
            forked_from,
        }) = &e.payload
        {
            let entry = match (compacted_from, forked_from) {
                (Some(c), _) => (Some(c.segment), c.through_seq, true),
                (None, Some(f)) => (Some(f.segment), f.through_seq, false),
                (None, None) => (None, Seq(0), false),
            };
            parents.insert(*segment_id, entry);
            active = Some(*segment_id);
        }
    }
    let Some(mut current) = active.or_else(|| events.last().map(|e| e.segment_id)) else {
        return Vec::new();
    };
    let mut included: Vec<(SegmentId, Seq)> = vec![(current, Seq(u64::MAX))];
    let mut guard = 0;
    while let Some(&(Some(parent), cutoff, compacted)) = parents.get(&current) {
        guard += 1;
        if compacted || guard > 10_000 {
            break;
        }
        let limit = included
            .last()
            .map(|(_, c)| (*c).min(cutoff))
            .unwrap_or(cutoff);
        included.push((parent, limit));
        current = parent;
    }
    events
        .iter()
        .filter(|e| {
            included
                .iter()
                .any(|(s, cutoff)| *s == e.segment_id && e.seq <= *cutoff)
        })
        .collect()
}
