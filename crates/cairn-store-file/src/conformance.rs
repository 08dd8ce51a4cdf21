//! The conformance of what an instance keeps of its workers (behind the
//! `testing` feature):
//! [`crate::Workers`] and [`crate::ComponentBytes`].

use crate::worker::{WorkerRecord, WorkerStatus};
use crate::{ComponentBytes, Workers};
use cairn_store::conformance::fresh;
use cairn_types::ids::{Generation, WorkerId};

/// [`Workers`]: a creation is invisible until published, a staged one is
/// undone without a trace, an adopted one is published under its given
/// ids, a deleted one is gone; a client's session id never names a path.
pub fn workers(name: &str, workers: &dyn Workers) {
    assert!(
        workers.path().is_dir(),
        "{name}: Workers::path is a directory"
    );
    let session = fresh("workers");
    assert_eq!(
        workers.lookup(&session).expect("lookup"),
        None,
        "{name}: Workers::lookup of an unknown session is None"
    );
    assert!(
        workers.open_worker(WorkerId::new()).is_err(),
        "{name}: Workers::open_worker of an unknown worker is an error"
    );

    let made = workers
        .create_worker(&session, None, "team")
        .expect("create_worker");
    let id = made.id();
    assert_eq!(
        workers.lookup(&session).expect("lookup"),
        None,
        "{name}: a created worker is invisible until published"
    );
    assert!(
        !workers.list_workers().expect("list").contains(&id),
        "{name}: Workers::list_workers leaves out an unpublished worker"
    );
    let record = workers
        .open_worker_any(id)
        .expect("open_worker_any of a staged worker")
        .record()
        .expect("record");
    assert_eq!(
        (
            &record.session_id,
            record.workspace.as_str(),
            record.component.as_deref()
        ),
        (&session, "team", None),
        "{name}: the record of a created worker"
    );
    made.publish().expect("publish");
    assert_eq!(
        workers.lookup(&session).expect("lookup"),
        Some(id),
        "{name}: a published worker is found by its session"
    );
    assert!(
        workers.list_workers().expect("list").contains(&id),
        "{name}: Workers::list_workers holds a published worker"
    );
    assert!(
        workers.open_worker(id).is_ok(),
        "{name}: Workers::open_worker of a published worker"
    );
    assert!(
        workers.worker_entry(id).problem.is_none(),
        "{name}: Workers::worker_entry of a sound worker names no problem"
    );

    // A staged creation undone leaves nothing.
    let staged_session = fresh("staged");
    let staged = workers
        .create_worker_staged(&staged_session, Some("sha256:00"), "team")
        .expect("create_worker_staged");
    let staged_id = staged.id();
    workers.discard_staged(&staged);
    assert!(
        workers.open_worker_any(staged_id).is_err(),
        "{name}: Workers::discard_staged removes the worker"
    );
    assert_eq!(
        workers.lookup(&staged_session).expect("lookup"),
        None,
        "{name}: a discarded worker's session is not found"
    );

    // Adopted: published at once under the ids it was given.
    let adopted_session = fresh("adopted");
    let given = WorkerRecord {
        version: 1,
        worker_id: WorkerId::new(),
        session_id: adopted_session.clone(),
        workspace: "other".into(),
        component: Some("sha256:ab".into()),
        created_at_ms: 7,
        last_generation: Generation(3),
        status: WorkerStatus::Active,
        parent: None,
        request: None,
        limits: None,
    };
    workers.adopt_worker(&given).expect("adopt_worker");
    assert_eq!(
        workers.lookup(&adopted_session).expect("lookup"),
        Some(given.worker_id),
        "{name}: an adopted worker is published under its own id"
    );
    let got = workers
        .open_worker(given.worker_id)
        .expect("open the adopted worker")
        .record()
        .expect("record");
    assert_eq!(
        (
            got.workspace.as_str(),
            got.component.as_deref(),
            got.last_generation
        ),
        ("other", Some("sha256:ab"), Generation(3)),
        "{name}: an adopted worker keeps its record"
    );

    // Deleted: gone from every view.
    workers.delete_worker(id, &session).expect("delete_worker");
    assert_eq!(
        workers.lookup(&session).expect("lookup"),
        None,
        "{name}: a deleted worker's session is not found"
    );
    assert!(
        workers.open_worker_any(id).is_err()
            && !workers.list_workers().expect("list").contains(&id),
        "{name}: a deleted worker is gone"
    );

    // A session id that looks like a path stays a key.
    let hostile = cairn_types::ids::SessionId::parse("a..b").err();
    assert!(hostile.is_some(), "{name}: `..` is no session id");
    let dotted = cairn_types::ids::SessionId::parse("etc.passwd").expect("a safe id");
    let w = workers
        .create_worker(&dotted, None, "team")
        .expect("create_worker");
    w.publish().expect("publish");
    assert!(
        w.path().starts_with(workers.path()) && !w.path().ends_with("etc.passwd"),
        "{name}: a worker lives under the store, never at a name its session gives"
    );
    workers
        .delete_worker(w.id(), &dotted)
        .expect("delete_worker");
}

/// [`ComponentBytes`]: bytes by digest, kept once; a malformed digest is
/// refused; grants per workspace.
pub fn component_bytes(name: &str, bytes: &dyn ComponentBytes) {
    let digest = format!("sha256:{}", "c".repeat(64));
    assert_eq!(
        bytes.component(&digest),
        None,
        "{name}: ComponentBytes::component of an unknown digest is None"
    );
    assert_eq!(bytes.component_len(&digest), None, "{name}: component_len");
    bytes
        .put_component(&digest, b"\0asm component")
        .expect("put_component");
    bytes
        .put_component(&digest, b"\0asm component")
        .expect("put_component again is a no-op");
    assert_eq!(
        bytes.component(&digest).as_deref(),
        Some(&b"\0asm component"[..]),
        "{name}: the bytes read back"
    );
    assert_eq!(
        bytes.component_len(&digest),
        Some(14),
        "{name}: component_len"
    );
    assert!(
        bytes.component_digests().contains(&digest),
        "{name}: ComponentBytes::component_digests lists a kept digest"
    );
    for bad in ["../../etc/passwd", "sha256:../x", "sha256:zz", ""] {
        assert!(
            bytes.put_component(bad, b"x").is_err() && bytes.component(bad).is_none(),
            "{name}: the digest {bad:?} is refused"
        );
    }
    let team = format!("ws-{}", uuid::Uuid::new_v4().simple());
    assert!(bytes.granted(&team).is_empty(), "{name}: no grants yet");
    bytes.grant_component(&team, &digest).expect("grant");
    bytes.grant_component(&team, &digest).expect("grant again");
    assert_eq!(
        bytes.granted(&team),
        vec![digest.clone()],
        "{name}: ComponentBytes::granted lists a grant once"
    );
    assert!(
        !bytes.granted("someone-else").contains(&digest),
        "{name}: a grant is its workspace's only"
    );
}
