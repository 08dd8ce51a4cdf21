//! The conformance of the catalogs: [`crate::Catalog`] and
//! [`crate::RunIndex`].

use super::{facts, fresh};
use crate::records::{WorkerRecord, WorkerStatus};
use cairn_types::ids::SessionId;
use cairn_types::ids::{Generation, RunId, SegmentId, Seq, WorkerId};
use std::time::Duration;

/// A new session's worker record, in `workspace`.
fn new_record(session: &SessionId, workspace: &str) -> WorkerRecord {
    WorkerRecord {
        version: 1,
        worker_id: WorkerId::new(),
        session_id: session.clone(),
        workspace: workspace.into(),
        component: None,
        created_at_ms: 1,
        last_generation: Generation(0),
        status: WorkerStatus::Active,
        parent: None,
        request: None,
        limits: None,
    }
}

/// [`crate::Catalog`]: publish once, read back, bind once, list, forget.
/// `journals`: the store whose journal a session needs before it is
/// published (a shared store's catalog rows name the journal).
pub async fn catalog(
    name: &str,
    catalog: &dyn crate::Catalog,
    journals: Option<&dyn crate::JournalStore>,
) {
    let session = fresh("catalog");
    assert!(
        catalog.record(&session).await.expect("record").is_none(),
        "{name}: Catalog::record of an unknown session is None"
    );
    if let Some(j) = journals {
        j.create(&session, SegmentId::new()).await.expect("create");
    }
    let record = new_record(&session, "team");
    assert!(
        catalog.publish(&record).await.expect("publish"),
        "{name}: Catalog::publish of a new session says it published"
    );
    let mut other = record.clone();
    other.worker_id = WorkerId::new();
    assert!(
        !catalog.publish(&other).await.expect("publish again"),
        "{name}: Catalog::publish of a session already there changes nothing"
    );
    let got = catalog
        .record(&session)
        .await
        .expect("record")
        .expect("published");
    assert_eq!(
        (
            got.worker_id,
            got.workspace.as_str(),
            got.component.as_deref()
        ),
        (record.worker_id, "team", None),
        "{name}: Catalog::record returns what was published first"
    );
    let (a, b) = (
        format!("sha256:{}", "a".repeat(64)),
        format!("sha256:{}", "b".repeat(64)),
    );
    catalog.bind(&session, &a).await.expect("bind");
    catalog.bind(&session, &b).await.expect("bind again");
    assert_eq!(
        catalog
            .record(&session)
            .await
            .expect("record")
            .and_then(|r| r.component),
        Some(a),
        "{name}: Catalog::bind binds an unbound worker once; a bound one keeps its binding"
    );
    catalog.rebind(&session, &b).await.expect("rebind");
    assert_eq!(
        catalog
            .record(&session)
            .await
            .expect("record")
            .and_then(|r| r.component),
        Some(b),
        "{name}: Catalog::rebind moves a bound worker to another component"
    );
    assert!(
        catalog
            .sessions()
            .await
            .expect("sessions")
            .contains(&session),
        "{name}: Catalog::sessions lists a published session"
    );
    catalog.forget(&session).await.expect("forget");
    assert!(
        catalog.record(&session).await.expect("record").is_none()
            && !catalog
                .sessions()
                .await
                .expect("sessions")
                .contains(&session),
        "{name}: Catalog::forget removes the session"
    );
    catalog
        .forget(&session)
        .await
        .expect("forgetting again is not an error");
}

/// [`crate::RunIndex`]: runs are indexed once, found by id, paged newest
/// first by workspace with a cursor, get their facts when they end, and
/// leave with their session. `catalog` (and `journals`, when the index's
/// rows name a journal) make the sessions the runs belong to exist.
pub async fn run_index(
    name: &str,
    index: &dyn crate::RunIndex,
    catalog: &dyn crate::Catalog,
    journals: Option<&dyn crate::JournalStore>,
) {
    let mut sessions = Vec::new();
    for ws in ["alpha", "beta"] {
        let session = fresh("runindex");
        if let Some(j) = journals {
            j.create(&session, SegmentId::new()).await.expect("create");
        }
        let record = new_record(&session, ws);
        catalog.publish(&record).await.expect("publish");
        sessions.push((session, ws));
    }
    // Five runs, alternating sessions, oldest first.
    let mut runs = Vec::new();
    for i in 0..5 {
        let run = RunId::new();
        let (session, ws) = &sessions[i % 2];
        index
            .started(run, session, ws, Seq(10 + i as u64))
            .await
            .expect("started");
        index
            .started(run, session, ws, Seq(10 + i as u64))
            .await
            .expect("indexing a run twice is not an error");
        runs.push(run);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let unknown = RunId::new();
    assert!(
        index.get(unknown).await.expect("get").is_none(),
        "{name}: RunIndex::get of an unknown run is None"
    );
    let got = index.get(runs[1]).await.expect("get").expect("indexed");
    assert_eq!(
        (&got.session, got.workspace.as_str(), &got.facts, got.after),
        (&sessions[1].0, "beta", &None, Some(Seq(11))),
        "{name}: RunIndex::get returns the run's session, workspace and where its entries begin, no facts before its end"
    );
    let ours = |page: &[(RunId, crate::IndexedRun)]| -> Vec<RunId> {
        page.iter()
            .map(|(r, _)| *r)
            .filter(|r| runs.contains(r))
            .collect()
    };
    // The index may hold other runs (a shared store's other tests): page
    // by workspace, which only ours use... and check order and cursor.
    let (page, more) = index.page(Some("alpha"), None, 2).await.expect("page");
    assert_eq!(
        (ours(&page), more),
        (vec![runs[4], runs[2]], true),
        "{name}: RunIndex::page is newest first, at most `limit`, and says more remain"
    );
    let (page, more) = index
        .page(Some("alpha"), Some(runs[2]), 2)
        .await
        .expect("page");
    assert_eq!(
        (ours(&page), more),
        (vec![runs[0]], false),
        "{name}: RunIndex::page continues after the cursor, and says when none remain"
    );
    let (page, _) = index.page(None, None, 1000).await.expect("page");
    assert_eq!(
        ours(&page),
        runs.iter().rev().copied().collect::<Vec<_>>(),
        "{name}: RunIndex::page without a workspace lists every run"
    );
    let f = facts(runs[3], &sessions[1].0, Seq(9));
    index.ended(&f).await.expect("ended");
    assert_eq!(
        index.get(runs[3]).await.expect("get").and_then(|r| r.facts),
        Some(f),
        "{name}: RunIndex::ended records the run's facts"
    );
    for (session, _) in &sessions {
        index.forget_session(session).await.expect("forget");
    }
    assert!(
        index.get(runs[0]).await.expect("get").is_none()
            && ours(&index.page(None, None, 1000).await.expect("page").0).is_empty(),
        "{name}: RunIndex::forget_session removes its runs"
    );
    for (session, _) in &sessions {
        catalog.forget(session).await.expect("forget");
    }
}
