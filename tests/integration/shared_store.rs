//! Several instances on one PostgreSQL, beyond the three-instance run in
//! `scale_out`: worktree snapshots, a database outage, a creation cut
//! short, A2A at any instance.

use super::scale_out::*;
use std::path::Path;
use std::time::Duration;
#[test]
fn a_worktree_snapshot_round_trips_and_a_hostile_one_is_refused() {
    use cairn_runtime::worktree::{Budget, pack, unpack};
    let tmp = tempfile::tempdir().unwrap();
    let open =
        |p: &Path| cap_std::fs::Dir::open_ambient_dir(p, cap_std::ambient_authority()).unwrap();
    let from = tmp.path().join("from");
    std::fs::create_dir_all(from.join("a/b")).unwrap();
    std::fs::write(from.join("top.txt"), b"top").unwrap();
    std::fs::write(from.join("a/b/deep.bin"), [0u8, 1, 2, 255]).unwrap();
    let budget = Budget::of(&cairn_runtime::limits::Limits::default());
    let packed = pack(&open(&from), &budget)
        .unwrap()
        .expect("within the budget");
    let to = tmp.path().join("to");
    std::fs::create_dir(&to).unwrap();
    unpack(&packed, &open(&to)).unwrap();
    assert_eq!(std::fs::read(to.join("top.txt")).unwrap(), b"top");
    assert_eq!(
        std::fs::read(to.join("a/b/deep.bin")).unwrap(),
        [0u8, 1, 2, 255]
    );

    // Over the budget: not packed (not carried, as locally).
    let tiny = Budget { bytes: 2, ..budget };
    assert!(pack(&open(&from), &tiny).unwrap().is_none());

    // Hostile or broken snapshots name the problem and write nothing outside.
    let hostile = |path: &str| {
        let mut b = b"cairn-worktree 1\n".to_vec();
        b.push(b'f');
        b.extend_from_slice(&(path.len() as u32).to_be_bytes());
        b.extend_from_slice(path.as_bytes());
        b.extend_from_slice(&3u64.to_be_bytes());
        b.extend_from_slice(b"bad");
        b
    };
    let victim = tmp.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    for path in ["../escaped", "a/../../escaped", "/etc/escaped", ""] {
        let e = unpack(&hostile(path), &open(&victim)).unwrap_err();
        assert!(e.to_string().contains("not a path inside"), "{path}: {e}");
    }
    assert!(!tmp.path().join("escaped").exists());
    let truncated = &packed[..packed.len() - 2];
    std::fs::create_dir(tmp.path().join("to2")).unwrap();
    let e = unpack(truncated, &open(&tmp.path().join("to2"))).unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");
    let e = unpack(b"not a snapshot", &open(&victim)).unwrap_err();
    assert!(
        e.to_string().contains("not a cairn worktree snapshot"),
        "{e}"
    );
}

#[test]
fn an_instance_outlives_its_database_going_away_and_coming_back() {
    let (tokio, pg, store, dir) = shared_store();
    // A short outage budget: a write waits this long for the database.
    let node = Instance::start_configured(
        dir.path(),
        "solo",
        &store,
        "outage_budget_ms = 1000\n",
        &["--insecure-local"],
        &[],
    );
    let http = client();
    let run = |prompt: &str| {
        http.post(format!("{}/v1/runs", node.url))
            .json(&serde_json::json!({"component": "echo", "prompt": prompt, "session": "db"}))
            .send()
            .unwrap()
    };
    let before: serde_json::Value = run("before").json().unwrap();
    let before = before["run_id"].as_str().expect("accepted").to_string();
    wait_finished(
        &node.url,
        &before,
        "the first run to end",
        Duration::from_secs(20),
    );
    pg.stop_server();
    // Refused with a code that says why once the outage budget is spent;
    // nothing panics.
    let asked = std::time::Instant::now();
    let r = run("while away");
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let body: serde_json::Value = r.json().unwrap();
    assert_eq!(body["error"]["code"], "storage", "{body}");
    pg.start_server();
    // Back: the next run is accepted (the pool reconnects) and finishes.
    let mut accepted = None;
    wait_for(
        "a run after the database is back",
        Duration::from_secs(20),
        || {
            let r = run("after");
            if r.status().is_success() {
                accepted = Some(r.json::<serde_json::Value>().unwrap());
            }
            accepted.is_some()
        },
    );
    let run_id = accepted.unwrap()["run_id"].as_str().unwrap().to_string();
    wait_finished(&node.url, &run_id, "it to finish", Duration::from_secs(20));
    // The run refused while the database was away ended, journaled once
    // the database was back; seqs stay dense.
    let stored = rows(&tokio, &store);
    let rows = &stored["db"];
    assert_eq!(
        rows.keys().copied().collect::<Vec<_>>(),
        (1..=rows.len() as u64).collect::<Vec<_>>()
    );
    let t = types(rows);
    assert_eq!(t.iter().filter(|t| *t == "finished").count(), 2, "{t:?}");
    assert!(node.log().contains("cannot renew its lease") || node.log().contains("database"));
}

/// How many rows of `table` name `session`.
fn count(rt: &tokio::runtime::Runtime, url: &str, table: &str, session: &str) -> i64 {
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
            .query_one(
                &format!("SELECT count(*) FROM {table} WHERE session_id = $1"),
                &[&session],
            )
            .await
            .unwrap()
            .get(0)
    })
}

#[test]
fn a_creation_that_dies_before_its_catalog_row_is_cleared_and_its_name_reusable() {
    let (tokio, _pg, store, dir) = shared_store();
    let http = client();
    let create = |base: &str, session: &str| {
        http.post(format!("{base}/v1/runs"))
            .json(&serde_json::json!({"component": "echo", "prompt": "hi", "session": session}))
            .send()
    };
    // Two creations die between the journal and the catalog row, at an
    // instance that crashes there; each leaves a journal nobody lists.
    for (name, session) in [("c1", "swept"), ("c2", "retried")] {
        let doomed = Instance::start_with(
            dir.path(),
            name,
            &store,
            &[("CAIRN_CRASH_AT", "create-before-catalog")],
        );
        assert!(
            create(&doomed.url, session).is_err(),
            "{name} dies creating {session}"
        );
        assert_eq!(count(&tokio, &store, "cairn_journals", session), 1);
        assert_eq!(count(&tokio, &store, "cairn_workers", session), 0);
    }
    let node = Instance::start(dir.path(), "n1", &store);
    let listed: Vec<serde_json::Value> = http
        .get(format!("{}/v1/sessions", node.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert!(
        listed.is_empty(),
        "a half-made session is not listed: {listed:?}"
    );
    // Once the dead creator's lease expires a retry takes the name (its
    // orphan goes, by the retry or by the sweep, whichever comes first).
    std::thread::sleep(Duration::from_millis(TTL_MS + 200));
    let r = create(&node.url, "retried").unwrap();
    assert!(r.status().is_success(), "{}", r.text().unwrap());
    let run: serde_json::Value = r.json().unwrap();
    wait_finished(
        &node.url,
        run["run_id"].as_str().unwrap(),
        "the retried creation's run",
        Duration::from_secs(20),
    );
    // The other is swept: its journal and lease go, nothing is listed.
    wait_for(
        "the sweep to clear the orphan",
        Duration::from_secs(20),
        || {
            count(&tokio, &store, "cairn_journals", "swept") == 0
                && count(&tokio, &store, "cairn_leases", "swept") == 0
        },
    );
    let listed: Vec<serde_json::Value> = http
        .get(format!("{}/v1/sessions", node.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let names: Vec<&str> = listed
        .iter()
        .filter_map(|l| l["session_id"].as_str())
        .collect();
    assert_eq!(names, vec!["retried"]);
    assert!(
        node.log()
            .contains("cleared a creation that never finished session_id=swept"),
        "{}",
        node.log()
    );
    // And its name is free.
    let r = create(&node.url, "swept").unwrap();
    assert!(r.status().is_success(), "{}", r.text().unwrap());
}

#[test]
fn an_a2a_call_at_any_instance_is_served_where_its_context_is_held() {
    let (_tokio, _pg, store, dir) = shared_store();
    let nodes = [
        Instance::start(dir.path(), "a0", &store),
        Instance::start(dir.path(), "a1", &store),
    ];
    let http = client();
    let rpc = |base: &str, method: &str, params: serde_json::Value| {
        let r = http
            .post(format!("{base}/v1/a2a/echo"))
            .json(
                &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
            )
            .send()
            .unwrap();
        let served = r
            .headers()
            .get("x-cairn-served-by")
            .map(|v| v.to_str().unwrap().to_string());
        (served, r.json::<serde_json::Value>().unwrap())
    };
    let message = |id: &str, extra: serde_json::Value| {
        let mut m =
            serde_json::json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": id}]});
        m.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::json!({ "message": m })
    };
    // A new context, made (and so held) at a0.
    let (_, first) = rpc(
        &nodes[0].url,
        "SendMessage",
        message("one", serde_json::json!({})),
    );
    let task = first["result"]["task"]["id"]
        .as_str()
        .expect("a task")
        .to_string();
    let context = first["result"]["task"]["contextId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        first["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{first}"
    );
    // At a1: the task, read where its context is held.
    let (served, got) = rpc(&nodes[1].url, "GetTask", serde_json::json!({ "id": task }));
    assert_eq!(got["result"]["id"], task.as_str(), "{got}");
    assert_eq!(served.as_deref(), Some(nodes[0].url.as_str()));
    // At a1: a second message in the same context runs at its holder.
    let (served, second) = rpc(
        &nodes[1].url,
        "SendMessage",
        message("two", serde_json::json!({ "contextId": context })),
    );
    assert_eq!(
        (
            second["result"]["task"]["contextId"].as_str(),
            second["result"]["task"]["status"]["state"].as_str()
        ),
        (Some(context.as_str()), Some("TASK_STATE_COMPLETED")),
        "{second}"
    );
    assert_eq!(served.as_deref(), Some(nodes[0].url.as_str()));
    // At a1: both tasks of the context, and of the workspace.
    let (_, listed) = rpc(
        &nodes[1].url,
        "ListTasks",
        serde_json::json!({ "contextId": context }),
    );
    assert_eq!(
        listed["result"]["tasks"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
    let (_, all) = rpc(&nodes[1].url, "ListTasks", serde_json::json!({}));
    assert_eq!(
        all["result"]["tasks"].as_array().map(Vec::len),
        Some(2),
        "{all}"
    );
}

/// `GET /v1/decisions?session=S` at an instance that does not hold S
/// answers S's pending decisions, as the unfiltered listing there does
/// (before: `404 no session S`).
#[test]
fn a_sessions_decisions_are_listed_at_any_instance() {
    let (_tokio, _pg, store, dir) = shared_store();
    let nodes = [
        Instance::start(dir.path(), "d0", &store),
        Instance::start(dir.path(), "d1", &store),
    ];
    let http = client();
    let r = http
        .post(format!("{}/v1/runs", nodes[0].url))
        .json(&serde_json::json!({"component": "approval", "prompt": "ask", "session": "d"}))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().unwrap());
    let list = |node: &Instance, query: &str| {
        let r = http
            .get(format!("{}/v1/decisions{query}", node.url))
            .send()
            .unwrap();
        (r.status().as_u16(), r.json::<serde_json::Value>().unwrap())
    };
    let t = std::time::Instant::now();
    let asked = loop {
        let (_, all) = list(&nodes[0], "?session=d");
        if let Some(id) = all[0]["decision_id"].as_str() {
            break id.to_string();
        }
        assert!(t.elapsed() < std::time::Duration::from_secs(20), "{all}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let (code, everywhere) = list(&nodes[1], "");
    assert_eq!(
        (code, everywhere[0]["decision_id"].as_str()),
        (200, Some(asked.as_str()))
    );
    let (code, filtered) = list(&nodes[1], "?session=d");
    assert_eq!(code, 200, "{filtered}");
    assert_eq!(filtered.as_array().map(Vec::len), Some(1), "{filtered}");
    assert_eq!(filtered[0]["decision_id"], asked.as_str(), "{filtered}");
}

/// A component update on a shared store: asked at an instance that does
/// not hold the session, it is done at the one that does (a shadow replay
/// there, the journal entry, the catalog's binding); after that holder is
/// killed, the instance that takes the session over runs the new component.
#[test]
fn a_session_updates_at_whichever_instance_holds_it() {
    let (_tokio, _pg, store, dir) = shared_store();
    let mut nodes = vec![
        Instance::start(dir.path(), "u0", &store),
        Instance::start(dir.path(), "u1", &store),
    ];
    let http = client();
    let post = |base: &str, path: &str, body: serde_json::Value| {
        let r = http
            .post(format!("{base}{path}"))
            .json(&body)
            .send()
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json::<serde_json::Value>().unwrap_or_default())
    };
    let ended = |base: &str, run: &str| -> serde_json::Value {
        let t = std::time::Instant::now();
        loop {
            let v: serde_json::Value = http
                .get(format!("{base}/v1/runs/{run}"))
                .send()
                .unwrap()
                .json()
                .unwrap();
            if v["state"] == "finished" || v["state"] == "failed" {
                return v;
            }
            assert!(t.elapsed() < Duration::from_secs(30), "{v}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let (code, first) = post(
        &nodes[0].url,
        "/v1/runs",
        serde_json::json!({"component": "echo", "prompt": "calm words", "session": "u"}),
    );
    assert_eq!(code, 202, "{first}");
    ended(&nodes[0].url, first["run_id"].as_str().unwrap());
    let uploaded: serde_json::Value = http
        .post(format!("{}/v1/components", nodes[0].url))
        .header("content-type", "application/wasm")
        .body(std::fs::read(crate::common::fixture("echo-v2")).unwrap())
        .send()
        .unwrap()
        .json()
        .unwrap();
    let v2 = uploaded["digest"].as_str().unwrap().to_string();
    // Asked at u1; done where the session is held.
    let (code, report) = post(
        &nodes[1].url,
        "/v1/sessions/u/update",
        serde_json::json!({"component": v2}),
    );
    assert_eq!(code, 200, "{report}");
    assert_eq!(report["switched"], true, "{report}");
    assert_eq!(report["runs"][0]["result"], "matched", "{report}");
    let summary: serde_json::Value = http
        .get(format!("{}/v1/sessions/u", nodes[1].url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(summary["component"], v2.as_str(), "{summary}");
    // The holder dies; the next run, at u1, takes the session over and
    // runs v2 (the catalog's binding).
    drop(nodes.remove(0));
    std::thread::sleep(Duration::from_millis(TTL_MS + 500));
    let t = std::time::Instant::now();
    let second = loop {
        let (code, r) = post(
            &nodes[0].url,
            "/v1/runs",
            serde_json::json!({"prompt": "v2 after the takeover", "session": "u"}),
        );
        if code == 202 {
            break r;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{code} {r}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let run = second["run_id"].as_str().unwrap();
    let end = ended(&nodes[0].url, run);
    assert_eq!(end["state"], "finished", "{end}");
    let journal = http
        .get(format!("{}/v1/sessions/u/journal", nodes[0].url))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        journal.contains("version 2 thinks before it echoes"),
        "the run after the takeover did not run v2"
    );
}

/// A session deleted at one instance leaves no copy listed at another
/// (issue 40, item 4): before, an instance that had listed it kept its copy
/// and listed it forever while every instance answered 404 for it.
#[test]
fn a_session_deleted_at_one_instance_is_listed_at_none() {
    let (_tokio, _pg, store, dir) = shared_store();
    let nodes = [
        Instance::start(dir.path(), "x0", &store),
        Instance::start(dir.path(), "x1", &store),
    ];
    let http = client();
    let r = http
        .post(format!("{}/v1/runs", nodes[0].url))
        .json(&serde_json::json!({"component": "echo", "prompt": "hi", "session": "doomed"}))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().unwrap());
    let run = r.json::<serde_json::Value>().unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_finished(&nodes[0].url, &run, "the run", Duration::from_secs(20));
    let listed = |node: &Instance| -> Vec<String> {
        let v: serde_json::Value = http
            .get(format!("{}/v1/sessions", node.url))
            .send()
            .unwrap()
            .json()
            .unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["session_id"].as_str().map(str::to_string))
            .collect()
    };
    // The other instance lists it (its copy is made for the listing).
    assert!(listed(&nodes[1]).contains(&"doomed".to_string()));
    // Past the window in which a fresh copy may be a creation under way.
    std::thread::sleep(Duration::from_millis(2 * super::scale_out::TTL_MS + 200));
    let r = http
        .delete(format!("{}/v1/sessions/doomed", nodes[0].url))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    for node in &nodes {
        assert!(
            !listed(node).contains(&"doomed".to_string()),
            "{} still lists the deleted session",
            node.url
        );
        let r = http
            .get(format!("{}/v1/sessions/doomed", node.url))
            .send()
            .unwrap();
        assert_eq!(r.status(), 404, "{}", node.url);
    }
}
