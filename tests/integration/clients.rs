//! The seams driven by their protocols' official clients, as their users
//! write them: the `openai` Python client and LangChain on the chat seam
//! (`tests/clients/chat_clients.py`). The Python side asserts what a client
//! sees; this side checks what the journal then holds. The clients come
//! from the pinned environment under `target/py-tools`.

use cairn_runtime::SessionId;
use cairn_runtime::runtime::Runtime;
use serde_json::Value;

async fn served() -> (tempfile::TempDir, Runtime, String) {
    super::common::served_here(None).await
}

/// Run a client script from `tests/clients`; its stdout's last line is JSON.
pub(crate) async fn client_script(script: &str, args: &[&str]) -> Value {
    let python = tokio::task::spawn_blocking(super::common::py_tools)
        .await
        .unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/clients")
        .join(script);
    let out = tokio::process::Command::new(python)
        .arg(&path)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("{script} printed no JSON ({e}): {stdout}"))
}

pub(crate) fn session(ids: &Value, key: &str) -> SessionId {
    SessionId::parse(
        ids[key]
            .as_str()
            .unwrap_or_else(|| panic!("no {key} in {ids}")),
    )
    .unwrap()
}

pub(crate) async fn entries(rt: &Runtime, s: &SessionId) -> Vec<Value> {
    super::common::entries_json(rt, s).await
}

pub(crate) fn of_type<'a>(entries: &'a [Value], t: &str) -> Vec<&'a Value> {
    entries
        .iter()
        .filter(|e| e["payload"]["event"]["type"] == t)
        .map(|e| &e["payload"]["event"])
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_and_langchain_clients_work_unchanged() {
    let (_tmp, rt, base) = served().await;
    let bytes = std::fs::read(super::common::fixture("panicker")).unwrap();
    let uploaded: Value = reqwest::Client::new()
        .post(format!("{base}/v1/components"))
        .body(bytes)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let digest = uploaded["digest"].as_str().unwrap().to_string();
    let caller: Value = reqwest::Client::new()
        .post(format!("{base}/v1/components"))
        .body(std::fs::read(super::common::fixture("toolcaller")).unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let toolcaller = caller["digest"].as_str().unwrap().to_string();
    let ids = client_script("chat_clients.py", &[&base, &digest, &toolcaller]).await;

    // History import: the new session starts with the earlier messages,
    // and the history a controller reads holds them (the system prompt too).
    let imported = session(&ids, "import_session");
    let e = entries(&rt, &imported).await;
    let import = of_type(&e, "history_imported");
    assert_eq!(import.len(), 1, "{e:?}");
    let roles: Vec<&str> = import[0]["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant"]);
    let turns = rt.history(&imported, 16).await.unwrap();
    use cairn_runtime::component::TurnRole::*;
    let said: Vec<_> = turns.iter().map(|t| (t.role, t.text.as_str())).collect();
    assert_eq!(
        said,
        [
            (System, "be brief"),
            (User, "one"),
            (Assistant, "one"),
            (User, "two"),
            (Assistant, "two")
        ]
    );

    // On a named session, messages passed back are not imported again.
    let once = entries(&rt, &session(&ids, "once_session")).await;
    assert!(of_type(&once, "history_imported").is_empty());
    assert_eq!(of_type(&once, "started").len(), 2);

    // Tools reach the controller (echo emits what it was offered).
    let tools = entries(&rt, &session(&ids, "tools_session")).await;
    let started = of_type(&tools, "started");
    let offered: Value = serde_json::from_str(started[0]["tools"].as_str().unwrap()).unwrap();
    assert_eq!(offered["tool_choice"], "auto");
    assert_eq!(offered["tools"][0]["function"]["name"], "lookup");
    let custom = of_type(&tools, "custom");
    assert_eq!(custom[0]["name"], "offered_tools", "{tools:?}");
    assert_eq!(
        of_type(&tools, "history_imported")[0]["turns"][2]["tool_calls"][0]["id"],
        "call_1"
    );

    // A non-streamed call that waited on a decision handed its run over:
    // the run was not cancelled when the response went out.
    let handed = entries(&rt, &session(&ids, "approval_once_session")).await;
    let decided = of_type(&handed, "liveness_decided");
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0]["policy"], "continue");
    assert!(of_type(&handed, "cancelled").is_empty());

    // One call to a trapping controller is one run, despite the SDK's
    // retries (each retry would have made a session of its own).
    let trap = entries(&rt, &session(&ids, "trap_session")).await;
    assert_eq!(of_type(&trap, "failed").len(), 1, "{trap:?}");
    let mut trapped_runs = 0;
    for s in rt.list_sessions().await.unwrap() {
        let e = entries(&rt, &s).await;
        trapped_runs += of_type(&e, "started")
            .iter()
            .filter(|st| st["component"] == digest.as_str())
            .count();
    }
    assert_eq!(trapped_runs, 1, "one chat call, one run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_a2a_sdk_client_sends_streams_decides_cancels_and_resubscribes_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let served = super::common::serve(&home);
    let before = client_script("a2a_client.py", &["before", &served.url]).await;
    let task = before["pending_task"].as_str().unwrap().to_string();
    // Kill the server (no shutdown), start another on the same home: the
    // waiting task is restored by replay and still answers.
    drop(served);
    let served = super::common::serve(&home);
    let after = client_script("a2a_client.py", &["after", &served.url, &task]).await;
    assert!(after["subscribed_events"].as_u64().unwrap() >= 4, "{after}");
    drop(served);

    // The journal: the task claimed its run (a claiming observer that is
    // not present), and the run finished with the answer given after the
    // restart.
    let out = super::common::cairn_in(
        &home,
        &["export", before["pending_context"].as_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let claim = of_type(&lines, "observer_attached");
    assert_eq!(claim[0]["observer"]["role"], "claiming");
    assert_eq!(claim[0]["observer"]["present"], false);
    let recorded = of_type(&lines, "decision_recorded");
    assert_eq!(recorded[0]["value"], serde_json::json!({"approved": true}));
    let finished = of_type(&lines, "finished");
    assert_eq!(finished[0]["text"], "approved");
}

/// A client generated from `/openapi.json` by openapi-python-client reads
/// `GET /v1/runs` and `GET /v1/sessions` into its typed models (the
/// document's enums are `enum`s, which generators read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_python_client_reads_runs_and_sessions() {
    let (_tmp, rt, base) = served().await;
    let (started, _, _) =
        crate::common::run_to_end(&rt, crate::common::start_req("echo", "typed"), None).await;
    let work = tempfile::tempdir().unwrap();
    let read = client_script(
        "openapi_generated.py",
        &[&base, work.path().to_str().unwrap()],
    )
    .await;
    assert_eq!(
        read["runs"],
        serde_json::json!([started.run_id.to_string()]),
        "{read}"
    );
    assert_eq!(read["states"], serde_json::json!(["finished"]), "{read}");
    assert_eq!(
        read["sessions"],
        serde_json::json!([started.session_id.to_string()]),
        "{read}"
    );
}

/// Upload a fixture to a served home; its digest.
pub(crate) async fn upload(base: &str, component: std::path::PathBuf) -> String {
    let uploaded: Value = reqwest::Client::new()
        .post(format!("{base}/v1/components"))
        .body(std::fs::read(component).unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    uploaded["digest"].as_str().unwrap().to_string()
}

/// The `openai` client's tool loop (`tests/clients/agent_loop.py`): calls
/// the controller makes mid-run are answered by the client's `tool`
/// messages on the same run (streamed on the named session, or not
/// streamed with no session header: the call ids find the run), and calls
/// a run ends with are answered by a run that continues it, given the
/// results by call id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_clients_tool_loop_goes_on_mid_run_and_at_the_end() {
    let (_tmp, rt, base) = served().await;
    let agent = upload(&base, super::common::fixture("agentloop")).await;
    let ids = client_script("agent_loop.py", &[&base, &agent]).await;

    // Mid-run: one run, its two waits answered by the client (each names
    // its call), then finished.
    let e = entries(&rt, &session(&ids, "streamed_session")).await;
    assert_eq!(of_type(&e, "started").len(), 1, "{e:?}");
    let asked = of_type(&e, "decision_requested");
    let calls: Vec<&str> = of_type(&e, "tool_call")
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(asked.len(), 2);
    for (a, call) in asked.iter().zip(&calls) {
        assert_eq!(a["request_kind"], "tool_result");
        assert_eq!(a["details"]["tool_call_id"], *call);
    }
    let recorded = of_type(&e, "decision_recorded");
    assert_eq!(recorded[0]["value"], format!("lookup(oslo)"));
    assert_eq!(recorded[1]["value"], format!("weather(oslo)"));
    assert_eq!(of_type(&e, "finished").len(), 1);
    assert!(of_type(&e, "cancelled").is_empty());
    let once = entries(&rt, &session(&ids, "once_session")).await;
    assert_eq!(of_type(&once, "started").len(), 1, "{once:?}");
    assert_eq!(of_type(&once, "decision_recorded").len(), 2);

    // The client went on: the waiting run cancelled `client_tool`, naming
    // the calls it abandoned.
    let gone = entries(&rt, &session(&ids, "abandoned_session")).await;
    let cancelled = of_type(&gone, "cancelled");
    assert_eq!(cancelled.len(), 1, "{gone:?}");
    assert_eq!(cancelled[0]["reason"], "client_tool");
    assert!(
        cancelled[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("the client went on without the results of call_"),
        "{cancelled:?}"
    );
    assert_eq!(of_type(&gone, "finished").len(), 1);

    // End of run: the second run continues the first, the results in its
    // Start by call id.
    let end = entries(&rt, &session(&ids, "end_session")).await;
    let started = of_type(&end, "started");
    // (A third run then read the session's history.)
    assert_eq!(started.len(), 3, "{end:?}");
    assert_eq!(started[1]["continues"], ids["end_first_run"]);
    let given: Value = serde_json::from_str(started[1]["tools"].as_str().unwrap()).unwrap();
    assert_eq!(
        given["tool_results"],
        serde_json::json!([
            {"tool_call_id": "end_1", "content": "lookup(stavanger)"},
            {"tool_call_id": "end_2", "content": "weather(stavanger)"},
        ])
    );
}

/// The Responses API with the `openai` client's `responses` resource and
/// the OpenAI Agents SDK (`tests/clients/responses_clients.py`): once,
/// streamed, chained by `previous_response_id`, in the background (polled,
/// cancelled), and an agent loop over function tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_responses_api_serves_the_openai_client_and_the_agents_sdk() {
    let (_tmp, rt, base) = served().await;
    let agent = upload(&base, super::common::fixture("agentloop")).await;
    let ids = client_script("responses_clients.py", &[&base, &agent]).await;

    // previous_response_id: the second run continues the first, in one session.
    let chained = entries(&rt, &session(&ids, "chained_session")).await;
    let started = of_type(&chained, "started");
    assert_eq!(started.len(), 2, "{chained:?}");
    assert!(started[1]["continues"].is_string(), "{:?}", started[1]);
    // instructions and earlier input: the new session's imported history.
    let imported = entries(&rt, &session(&ids, "imported_session")).await;
    let turns = &of_type(&imported, "history_imported")[0]["turns"];
    let roles: Vec<&str> = turns
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant"]);
    assert_eq!(turns[0]["text"], "be brief");

    // The function-tool response and its follow-up are one run: its waits
    // answered by the function_call_output items.
    let run = |key: &str| -> cairn_runtime::ids::RunId {
        let id = ids[key].as_str().unwrap();
        let (run, _) = id.strip_prefix("resp_").unwrap().rsplit_once('_').unwrap();
        run.parse().unwrap()
    };
    assert_eq!(run("tools_response"), run("tools_followup"));
    let (s, facts) = rt.find_run(run("tools_response")).await.unwrap();
    assert_eq!(
        facts.status,
        cairn_runtime::journal::event::RunStatus::Finished
    );
    let e = entries(&rt, &s).await;
    assert_eq!(of_type(&e, "decision_recorded").len(), 2, "{e:?}");
    assert_eq!(of_type(&e, "started").len(), 1);

    // The cancelled background response's run ended cancelled.
    let (_, facts) = rt.find_run(run("cancelled_run")).await.unwrap();
    assert_eq!(
        facts.status,
        cairn_runtime::journal::event::RunStatus::Cancelled
    );
    assert_eq!(ids["agents_runs"], 4);
    // One call, one run: the retried call started nothing.
    let retried = entries(&rt, &session(&ids, "retried_session")).await;
    assert_eq!(of_type(&retried, "started").len(), 1, "{retried:?}");
}

/// The official JavaScript clients (`tests/clients/js_clients.mjs`, their
/// packages locked in `tests/clients/package-lock.json`): `openai`'s chat
/// tool loop and Responses API, `@a2a-js/sdk`'s client made from the
/// agent's URL, paging ListTasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_javascript_clients_loop_tools_stream_responses_and_page_tasks() {
    use super::browser::{locked_node_modules, node_bin, run, with_node};
    let (_tmp, rt, base) = served().await;
    let agent = upload(&base, super::common::fixture("agentloop")).await;
    let clients = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients");
    let printed = tokio::task::spawn_blocking(move || {
        let bin = node_bin();
        let modules = locked_node_modules(&bin, "client-tools", &clients);
        // The script beside its packages, as a user's project has them.
        let ws = tempfile::tempdir().unwrap();
        std::fs::copy(
            clients.join("js_clients.mjs"),
            ws.path().join("js_clients.mjs"),
        )
        .unwrap();
        std::fs::copy(clients.join("package.json"), ws.path().join("package.json")).unwrap();
        std::os::unix::fs::symlink(&modules, ws.path().join("node_modules")).unwrap();
        run(
            with_node(&mut std::process::Command::new(bin.join("node")), &bin)
                .arg(ws.path().join("js_clients.mjs"))
                .args([&base, &agent]),
            "the JavaScript clients",
        )
    })
    .await
    .unwrap();
    let ids: Value = serde_json::from_str(printed.lines().last().unwrap_or("")).unwrap();
    assert_eq!(ids["a2a_tasks"], 5, "{ids}");
    // The chat loop was one run, its two waits answered by the client.
    let e = entries(&rt, &session(&ids, "chat_session")).await;
    assert_eq!(of_type(&e, "started").len(), 1, "{e:?}");
    assert_eq!(of_type(&e, "decision_recorded").len(), 2);
}
