//! Session ids are one namespace per workspace (isolation round three,
//! item 8): a name another workspace holds answers as an unused one would —
//! create, fork, draft, a run, a chat or an A2A context make the caller's
//! own session of that name — on the file store and the shared store, and
//! a session made before ids were scoped keeps its id.

use crate::common::*;
use cairn_runtime::runtime::{Runtime, RuntimeConfig};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

const A: &str = "token-for-workspace-a-0123456789";
const B: &str = "token-for-workspace-b-9876543210";

fn toml() -> String {
    format!("[workspaces.a]\ntokens = [\"{A}\"]\n[workspaces.b]\ntokens = [\"{B}\"]\n")
}

/// A home in `tmp` whose config holds workspaces a and b.
fn workspaces_home(tmp: &tempfile::TempDir) -> std::path::PathBuf {
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("cairn.toml"), toml()).unwrap();
    home
}

async fn serve(home: &Path) -> (Runtime, String) {
    let rt = Runtime::open(RuntimeConfig::load(home, None).unwrap())
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let serving = rt.clone();
    tokio::spawn(async move { cairn_api::serve(listener, serving, std::future::pending()).await });
    (rt, base)
}

/// (status, body) of a request as `token`.
async fn call(
    http: &reqwest::Client,
    token: &str,
    method: &str,
    url: String,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = http
        .request(method.parse().unwrap(), url)
        .bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// A session's view, as `token` sees it.
async fn view(http: &reqwest::Client, base: &str, token: &str, id: &str) -> (u16, Value) {
    call(http, token, "GET", format!("{base}/v1/sessions/{id}"), None).await
}

/// Wait until the session's latest run has ended; its journal as text.
async fn journal(http: &reqwest::Client, base: &str, token: &str, id: &str) -> String {
    for _ in 0..200 {
        let (_, v) = view(http, base, token, id).await;
        if v["state"]["state"] != "running" && v["state"]["state"] != "preparing" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    http.get(format!("{base}/v1/sessions/{id}/journal"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_name_another_workspace_holds_is_free_for_the_caller() {
    let tmp = tempfile::tempdir().unwrap();
    let home = workspaces_home(&tmp);
    let (rt, base) = serve(&home).await;
    let http = reqwest::Client::new();
    let post = |token: &'static str, path: &str, body: Value| {
        let (http, url) = (http.clone(), format!("{base}{path}"));
        async move { call(&http, token, "POST", url, Some(body)).await }
    };

    // A holds squat-1, a draft, a fork target and an A2A context.
    assert_eq!(
        post(A, "/v1/sessions", json!({"id": "squat-1"})).await.0,
        201
    );
    assert_eq!(
        post(A, "/v1/sessions", json!({"id": "draft-1", "draft": true}))
            .await
            .0,
        201
    );
    assert_eq!(
        post(A, "/v1/sessions", json!({"id": "fork-1"})).await.0,
        201
    );
    let (code, _) = post(
        A,
        "/v1/runs",
        json!({"session": "squat-1", "component": "echo", "prompt": "a's secret"}),
    )
    .await;
    assert_eq!(code, 202);

    // B gets every one of those names as if nobody held them.
    let (code, made) = post(B, "/v1/sessions", json!({"id": "squat-1"})).await;
    assert_eq!(
        (code, made["session_id"].as_str()),
        (201, Some("squat-1")),
        "{made}"
    );
    let (code, again) = post(B, "/v1/sessions", json!({"id": "squat-1"})).await;
    assert_eq!(code, 409, "B's own name is taken: {again}");
    let (code, draft) = post(B, "/v1/sessions", json!({"id": "draft-1", "draft": true})).await;
    assert_eq!(
        (code, draft["session_id"].as_str()),
        (201, Some("draft-1")),
        "{draft}"
    );
    let (code, run) = post(
        B,
        "/v1/runs",
        json!({"session": "squat-1", "component": "echo", "prompt": "b's words"}),
    )
    .await;
    assert_eq!(code, 202, "{run}");
    let b_journal = journal(&http, &base, B, "squat-1").await;
    let a_journal = journal(&http, &base, A, "squat-1").await;
    assert!(b_journal.contains("b's words") && !b_journal.contains("a's secret"));
    assert!(a_journal.contains("a's secret") && !a_journal.contains("b's words"));
    // Journals and exports name the session by its name, never a scope.
    assert!(
        b_journal.contains("\"session_id\":\"squat-1\""),
        "{b_journal}"
    );
    assert!(!b_journal.contains("\\u001f"), "{b_journal}");
    let entries: Value = serde_json::from_str(&b_journal).unwrap();
    let b_run_at = entries["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["payload"]["event"]["type"] == "started")
        .map(|e| e["seq"].as_u64().unwrap())
        .expect("B's run started");
    let (code, forked) = post(
        B,
        "/v1/sessions/squat-1/fork",
        json!({"before_seq": b_run_at, "id": "fork-1"}),
    )
    .await;
    assert_eq!(
        (code, forked["session_id"].as_str()),
        (201, Some("fork-1")),
        "{forked}"
    );
    // An A2A context A holds, named by B, is a new context of B's.
    let send = |text: &str| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": text, "role": "ROLE_USER", "parts": [{"text": text}], "contextId": "ctx-1"}}})
    };
    let (_, a_task) = post(A, "/v1/a2a/echo", send("a in ctx")).await;
    let (_, b_task) = post(B, "/v1/a2a/echo", send("b in ctx")).await;
    assert_eq!(a_task["result"]["task"]["contextId"], "ctx-1", "{a_task}");
    assert_eq!(b_task["result"]["task"]["contextId"], "ctx-1", "{b_task}");

    // Two sessions of each name, each its workspace's.
    let mut workers = std::collections::BTreeMap::new();
    for id in ["squat-1", "fork-1", "ctx-1"] {
        let (ca, va) = view(&http, &base, A, id).await;
        let (cb, vb) = view(&http, &base, B, id).await;
        assert_eq!((ca, cb), (200, 200), "{id}: {va} {vb}");
        assert_eq!(
            (va["session_id"].as_str(), vb["session_id"].as_str()),
            (Some(id), Some(id))
        );
        assert_ne!(va["worker_id"], vb["worker_id"], "{id}");
        workers.insert(id, (va["worker_id"].clone(), vb["worker_id"].clone()));
    }
    let listed: Value = call(&http, B, "GET", format!("{base}/v1/sessions"), None)
        .await
        .1;
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 3, "B lists its own three: {listed}");

    // After a restart each name still finds its workspace's session.
    rt.shutdown(Duration::from_secs(5)).await;
    drop(rt);
    let (rt, base) = serve(&home).await;
    for (id, (a_worker, b_worker)) in &workers {
        assert_eq!(
            &view(&http, &base, A, id).await.1["worker_id"],
            a_worker,
            "{id}"
        );
        assert_eq!(
            &view(&http, &base, B, id).await.1["worker_id"],
            b_worker,
            "{id}"
        );
    }
    // B's delete takes B's session only.
    let (code, _) = call(
        &http,
        B,
        "DELETE",
        format!("{base}/v1/sessions/squat-1"),
        None,
    )
    .await;
    assert_eq!(code, 204);
    assert_eq!(view(&http, &base, B, "squat-1").await.0, 404);
    assert_eq!(view(&http, &base, A, "squat-1").await.0, 200);
    rt.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_made_before_ids_were_scoped_keeps_its_id() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    // Before ids were scoped a session of workspace b was kept under its
    // bare name: lay one out so (made in the host's workspace, then
    // attributed to b as such a home's documents say).
    let rt = runtime(tmp.path()).await;
    let (session, worker) = rt
        .create_session(Some(cairn_runtime::SessionId::parse("old-1").unwrap()))
        .await
        .unwrap();
    run_to_end(
        &rt,
        {
            let mut req = start_req("echo", "from before");
            req.session = Some(session);
            req
        },
        None,
    )
    .await;
    rt.shutdown(Duration::from_secs(5)).await;
    drop(rt);
    let aggregate = home.join("workers").join(worker.to_string());
    for doc in ["worker.json", "session/session.json"] {
        let path = aggregate.join(doc);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"local\""), "{doc}: {text}");
        std::fs::write(&path, text.replace("\"local\"", "\"b\"")).unwrap();
    }
    std::fs::write(home.join("cairn.toml"), toml()).unwrap();

    let (rt, base) = serve(&home).await;
    let http = reqwest::Client::new();
    let (code, v) = view(&http, &base, B, "old-1").await;
    assert_eq!(
        (code, v["worker_id"].as_str()),
        (200, Some(worker.to_string().as_str())),
        "{v}"
    );
    let (code, _) = call(
        &http,
        B,
        "POST",
        format!("{base}/v1/sessions"),
        Some(json!({"id": "old-1"})),
    )
    .await;
    assert_eq!(code, 409, "B still holds old-1");
    let (code, _) = call(
        &http,
        A,
        "POST",
        format!("{base}/v1/sessions"),
        Some(json!({"id": "old-1"})),
    )
    .await;
    assert_eq!(code, 201, "A may have its own old-1");
    let (code, _) = call(
        &http,
        B,
        "POST",
        format!("{base}/v1/runs"),
        Some(json!({"session": "old-1", "component": "echo", "prompt": "from after"})),
    )
    .await;
    assert_eq!(code, 202);
    let text = journal(&http, &base, B, "old-1").await;
    assert!(
        text.contains("from before") && text.contains("from after"),
        "{text}"
    );
    rt.shutdown(Duration::from_secs(5)).await;
}

#[test]
fn on_the_shared_store_names_are_per_workspace_at_every_instance() {
    use crate::scale_out::Instance;
    let (_tokio, _pg, store, dir) = crate::scale_out::shared_store();
    let nodes = [
        Instance::start_configured(dir.path(), "n0", &store, &toml(), &[], &[]),
        Instance::start_configured(dir.path(), "n1", &store, &toml(), &[], &[]),
    ];
    let http = crate::scale_out::client();
    let post = |node: &Instance, token: &str, path: &str, body: Value| {
        let r = http
            .post(format!("{}{path}", node.url))
            .bearer_auth(token)
            .json(&body)
            .send()
            .unwrap();
        (
            r.status().as_u16(),
            r.json::<Value>().unwrap_or(Value::Null),
        )
    };
    let get = |node: &Instance, token: &str, path: &str| {
        let r = http
            .get(format!("{}{path}", node.url))
            .bearer_auth(token)
            .send()
            .unwrap();
        (
            r.status().as_u16(),
            r.json::<Value>().unwrap_or(Value::Null),
        )
    };
    let (code, a_made) = post(&nodes[0], A, "/v1/sessions", json!({"id": "squat-1"}));
    assert_eq!(code, 201, "{a_made}");
    // At the other instance B's create of the same name is a new session.
    let (code, b_made) = post(&nodes[1], B, "/v1/sessions", json!({"id": "squat-1"}));
    assert_eq!(code, 201, "{b_made}; {}", nodes[1].log());
    assert_ne!(a_made["worker_id"], b_made["worker_id"]);
    let (code, _) = post(&nodes[0], B, "/v1/sessions", json!({"id": "squat-1"}));
    assert_eq!(code, 409, "B's own name, at any instance");
    // Each instance shows each workspace its own.
    for node in &nodes {
        assert_eq!(
            get(node, A, "/v1/sessions/squat-1").1["worker_id"],
            a_made["worker_id"]
        );
        assert_eq!(
            get(node, B, "/v1/sessions/squat-1").1["worker_id"],
            b_made["worker_id"]
        );
    }
    let (code, run) = post(
        &nodes[0],
        B,
        "/v1/runs",
        json!({"session": "squat-1", "component": "echo", "prompt": "b at n0"}),
    );
    assert_eq!(code, 202, "{run}");
    let runs = loop {
        let (_, runs) = get(&nodes[0], B, "/v1/runs?session=squat-1");
        if runs[0]["facts"].is_object() {
            break runs;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(runs.as_array().map(Vec::len), Some(1), "{runs}");
    let (_, a_runs) = get(&nodes[1], A, "/v1/runs?session=squat-1");
    assert_eq!(a_runs, json!([]), "A's squat-1 has no run");
}

#[test]
fn the_workers_quota_holds_across_instances() {
    use crate::scale_out::Instance;
    let (_tokio, _pg, store, dir) = crate::scale_out::shared_store();
    let config = format!("{}[workspaces.a.quota]\nworkers = 3\n", toml());
    let nodes = [
        Instance::start_configured(dir.path(), "q0", &store, &config, &[], &[]),
        Instance::start_configured(dir.path(), "q1", &store, &config, &[], &[]),
    ];
    let http = crate::scale_out::client();
    let create = |node: &Instance, token: &str| {
        let r = http
            .post(format!("{}/v1/sessions", node.url))
            .bearer_auth(token)
            .json(&json!({}))
            .send()
            .unwrap();
        (r.status().as_u16(), r.text().unwrap())
    };
    // Three of A's workers, made at two instances: the quota.
    for node in [&nodes[0], &nodes[1], &nodes[0]] {
        let (code, text) = create(node, A);
        assert_eq!(code, 201, "{text}");
    }
    // A fourth is refused at either instance (before, each instance
    // counted only the workers in its own home).
    for node in &nodes {
        let (code, text) = create(node, A);
        assert_eq!(code, 429, "{text}");
        assert!(text.contains("workers = 3"), "{text}");
    }
    // Another workspace is not held back by A's quota.
    assert_eq!(create(&nodes[1], B).0, 201);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_names_another_workspaces_session_as_workspace_slash_name() {
    let tmp = tempfile::tempdir().unwrap();
    let home = workspaces_home(&tmp);
    let rt = Runtime::open(RuntimeConfig::load(&home, None).unwrap())
        .await
        .unwrap();
    let name = cairn_runtime::SessionId::parse("squat-1").unwrap();
    let (_, b_worker) = rt.create_session_in(Some(name.clone()), "b").await.unwrap();
    let (_, local_worker) = rt.create_session(Some(name)).await.unwrap();
    rt.shutdown(Duration::from_secs(5)).await;
    drop(rt);
    let worker_of = |arg: &str| {
        let out = cairn_in(&home, &["inspect", arg, "--json"]);
        assert!(
            out.status.success(),
            "{arg}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["session"]["session_id"], "squat-1", "{v}");
        v["session"]["worker_id"].as_str().unwrap().to_string()
    };
    assert_eq!(worker_of("b/squat-1"), b_worker.to_string());
    assert_eq!(worker_of("squat-1"), local_worker.to_string());
    let out = cairn_in(&home, &["inspect", "a/squat-1"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("squat-1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cairn_in(&home, &["rm", "b/squat-1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!cairn_in(&home, &["inspect", "b/squat-1"]).status.success());
    assert_eq!(worker_of("squat-1"), local_worker.to_string());
}

/// A run started by a bare name in the host's own workspace — which that
/// name is the only key of, so it is taken without a lookup — continues
/// the session of that name when there is one, makes it when there is
/// not, and never reaches a session of that name another workspace holds.
#[tokio::test(flavor = "multi_thread")]
async fn a_bare_name_in_the_hosts_workspace_is_that_workspaces_session() {
    use crate::common::{run_to_end, start_req};
    let tmp = tempfile::tempdir().unwrap();
    let home = workspaces_home(&tmp);
    let (rt, base) = serve(&home).await;
    let http = reqwest::Client::new();
    // Workspace a holds `shared-name`, with one run.
    let (code, _) = call(
        &http,
        A,
        "POST",
        format!("{base}/v1/runs"),
        Some(json!({"session": "shared-name", "component": "echo", "prompt": "a's"})),
    )
    .await;
    assert_eq!(code, 202);
    journal(&http, &base, A, "shared-name").await;

    let name = cairn_runtime::SessionId::parse("shared-name").unwrap();
    let mut req = start_req("echo", "host one");
    req.session = Some(name.clone());
    let (first, _, _) = run_to_end(&rt, req, None).await;
    assert_eq!(
        first.session_id, name,
        "the host's own key is the bare name"
    );
    let mut req = start_req("echo", "host two");
    req.session = Some(name.clone());
    let (second, _, _) = run_to_end(&rt, req, None).await;
    assert_eq!(
        second.worker_id, first.worker_id,
        "the same session, continued"
    );
    assert_eq!(rt.session_runs(&name).await.unwrap().len(), 2);

    // a's session is another worker, untouched: one run, its own prompt.
    let (code, a_view) = view(&http, &base, A, "shared-name").await;
    assert_eq!(code, 200, "{a_view}");
    let a_journal = journal(&http, &base, A, "shared-name").await;
    assert_eq!(
        a_journal.matches("\"type\":\"started\"").count(),
        1,
        "{a_journal}"
    );
    assert!(a_journal.contains("a's") && !a_journal.contains("host one"));
    assert_eq!(std::fs::read_dir(home.join("workers")).unwrap().count(), 2);
}
