//! Peers (seed 000): a worker registered as a peer answers `status` and
//! nothing else.

use super::delegation::{grant, run_parent};
use cairn_runtime::RunStatus;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_gets_status_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = super::common::runtime_with(&tmp.path().join("home"), None).await;
    let parent = grant(&rt, "parent").await;
    let (other, _, _) = run_parent(&rt, &parent, json!([])).await;
    let w = rt.home().lookup(&other).unwrap().unwrap().to_string();
    let steps = json!([{ "peer": w }, { "peer": w }, "peers", { "status": w }, { "cancel": w }, { "wait": w, "timeout_ms": 10 }, { "peer": "01a22e10-13e4-75e0-902e-3c3c6b20d5ea" }]);
    let (session, facts, r) = run_parent(&rt, &parent, steps).await;
    assert_eq!(facts.status, RunStatus::Finished, "{r:?}");
    assert_eq!(
        (r[0].as_str(), r[1].as_str()),
        (Some("registered"), Some("registered"))
    );
    assert_eq!(r[2], json!([w]), "registered once");
    assert_eq!(r[3]["state"], "finished", "{}", r[3]);
    assert!(
        r[4]["error"].as_str().unwrap().contains("not a child"),
        "{}",
        r[4]
    );
    assert!(
        r[5]["error"].as_str().unwrap().contains("not a child"),
        "{}",
        r[5]
    );
    assert!(
        r[6]["error"].as_str().unwrap().contains("no worker"),
        "{}",
        r[6]
    );
    let s = serde_json::to_value(rt.summary(&session).await.unwrap()).unwrap();
    assert_eq!(s["peers"][0]["worker_id"], w.as_str());
    assert!(s["children"].is_null() || s["children"] == json!([]));
}
