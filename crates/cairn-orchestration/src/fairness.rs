//! Which pending cards the dispatcher starts: round robin over the
//! workspaces, each held to its share of `[queue] max_concurrency`.

use super::model::{Row, RowState};

/// Which pending rows to start, at most `room`: round robin over the
/// workspaces with pending rows, the one processing fewest first (ties:
/// the oldest row), each held to its share of `max` — `max` split evenly
/// between the workspaces that have rows pending or processing — so one
/// workspace's long cards never hold every slot while another's wait.
pub(super) fn fair_picks(rows: &[Row], max: usize, room: usize) -> Vec<usize> {
    use std::collections::BTreeMap;
    let mut busy: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rows {
        if matches!(r.state, RowState::Pending | RowState::Processing) {
            let n = busy.entry(r.workspace.as_str()).or_default();
            *n += usize::from(r.state == RowState::Processing);
        }
    }
    let share = max.div_ceil(busy.len().max(1)).max(1);
    let mut pending: Vec<usize> = (0..rows.len())
        .filter(|&i| rows[i].state == RowState::Pending)
        .collect();
    let mut picks = Vec::new();
    while picks.len() < room {
        let best = pending
            .iter()
            .enumerate()
            .filter(|(_, i)| busy[rows[**i].workspace.as_str()] < share)
            .min_by_key(|(_, i)| (busy[rows[**i].workspace.as_str()], **i));
        let Some((at, &i)) = best else { break };
        pending.remove(at);
        *busy.get_mut(rows[i].workspace.as_str()).expect("counted") += 1;
        picks.push(i);
    }
    picks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ws: &str, card: &str, state: RowState) -> Row {
        Row {
            card: card.into(),
            workspace: ws.into(),
            round: 1,
            component: "echo".into(),
            prompt: "p".into(),
            worker_key: format!("worker:{ws}/{card}:r1"),
            state,
            attempts: 0,
            last_reason: None,
            resume: None,
            next: None,
            updated_ms: 0,
        }
    }

    #[test]
    fn workspaces_take_turns_and_none_takes_more_than_its_share() {
        use RowState::Pending as P;
        // a queued five cards before b's one: b still gets a slot at once.
        let rows: Vec<Row> = ["a1", "a2", "a3", "a4", "a5"]
            .iter()
            .map(|c| row("a", c, P))
            .chain([row("b", "b1", P)])
            .collect();
        let picks = fair_picks(&rows, 4, 4);
        let names: Vec<&str> = picks.iter().map(|&i| rows[i].card.as_str()).collect();
        assert_eq!(names, ["a1", "b1", "a2"], "a holds at most its share of 2");
        // Alone, a workspace takes every slot.
        let alone: Vec<Row> = rows[..5].to_vec();
        assert_eq!(fair_picks(&alone, 4, 4).len(), 4);
        // a already processes two: the freed slot goes to b.
        let mut busy = rows.clone();
        busy[0].state = RowState::Processing;
        busy[1].state = RowState::Processing;
        let picks = fair_picks(&busy, 4, 1);
        assert_eq!(busy[picks[0]].card, "b1");
    }
}
