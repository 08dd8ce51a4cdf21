//! The client's tools called mid-run from the Python and JavaScript SDKs
//! (`client_tools`): each SDK's `tools` example, built with its README's
//! command, driven through the `openai` client's tool loop
//! (`tests/clients/agent_loop.py mid-run`: streamed on the named session,
//! and not streamed with no session header). One run per loop, each wait
//! answered by the client.

use super::clients::{client_script, entries, of_type, session, upload};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_javascript_controllers_call_the_clients_tools_mid_run() {
    let (_tmp, rt, base) = super::common::served_here(None).await;
    let built = tokio::task::spawn_blocking(|| {
        (
            super::python_sdk::build("tools"),
            super::js_sdk::build("tools"),
        )
    })
    .await
    .unwrap();
    for component in [built.0, built.1] {
        let digest = upload(&base, component.clone()).await;
        let ids = client_script("agent_loop.py", &[&base, &digest, "mid-run"]).await;
        for key in ["streamed_session", "once_session"] {
            let e = entries(&rt, &session(&ids, key)).await;
            assert_eq!(
                of_type(&e, "started").len(),
                1,
                "{component:?} {key}: {e:?}"
            );
            let asked = of_type(&e, "decision_requested");
            assert_eq!(asked.len(), 2, "{component:?} {key}");
            assert!(
                asked.iter().all(|a| a["details"]["tool_call_id"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("call_"))),
                "{asked:?}"
            );
            assert_eq!(of_type(&e, "decision_recorded").len(), 2);
            assert_eq!(of_type(&e, "finished").len(), 1);
        }
    }
}
