//! Both versions of the controller world run: a controller built against
//! `cairn:controller@0.1.0` keeps working, and under 0.2.0 a decision
//! request the host refuses comes back as a value the controller handles.

use crate::common::*;
use cairn_runtime::journal::event::{LifecycleEvent, RunStatus};
use cairn_runtime::runtime::{ComponentRef, StartRun};
use cairn_runtime::{AgentEvent, Payload};

fn texts(events: &[cairn_runtime::SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            Payload::Agent(AgentEvent::TextDelta { text, .. }) => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_built_against_0_1_0_still_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let req = StartRun::new(ComponentRef::Path(fixture("legacy-v1")), "hello");
    let (_, facts, events) =
        run_to_end(&rt, req, Some(serde_json::json!({ "approved": true }))).await;
    assert_eq!(facts.status, RunStatus::Finished, "{events:?}");
    assert_eq!(texts(&events), vec!["0.1.0 guest: hello".to_string()]);
    let Payload::Lifecycle(LifecycleEvent::Finished { text, .. }) = &events.last().unwrap().payload
    else {
        panic!("{:?}", events.last())
    };
    assert_eq!(text, "approved after 0 turns");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_decision_request_is_a_value_the_controller_handles() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let req = StartRun::new(ComponentRef::Path(fixture("hostile")), "bad-wait");
    let (_, facts, events) = run_to_end(&rt, req, None).await;
    assert_eq!(facts.status, RunStatus::Finished, "{events:?}");
    let said = texts(&events);
    assert_eq!(said.len(), 3, "{said:?}");
    assert!(
        said[1].starts_with("refused: decision details is not JSON"),
        "{said:?}"
    );
    assert!(
        said[2].contains("nests") && said[2].contains("deep"),
        "{said:?}"
    );
    // Nothing was asked of anyone.
    assert!(!events.iter().any(|e| matches!(
        e.payload,
        Payload::Lifecycle(LifecycleEvent::DecisionRequested { .. })
    )));
}

/// Shipped components carry code, not debug info: what a browser downloads
/// and a host compiles.
#[test]
fn built_in_and_test_components_carry_no_debug_info() {
    let mut checked = 0;
    let fixtures = cairn_test_programs::FIXTURES
        .iter()
        .map(|(n, p)| (*n, std::fs::read(p).unwrap()));
    let built_in = cairn_examples::BUILT_IN
        .iter()
        .map(|(n, b)| (*n, b.to_vec()));
    for (name, bytes) in built_in.chain(fixtures) {
        for payload in wasmparser::Parser::new(0).parse_all(&bytes) {
            if let Ok(wasmparser::Payload::CustomSection(c)) = payload {
                assert!(
                    !c.name().starts_with(".debug"),
                    "{name} carries {} ({} bytes)",
                    c.name(),
                    c.data().len()
                );
            }
        }
        assert!(bytes.len() < 1 << 20, "{name} is {} bytes", bytes.len());
        checked += 1;
    }
    assert!(checked >= 10, "{checked}");
}

/// Every WASI clock and random function, answered from the journal exactly
/// as `docs/replay.md` specifies (computed here independently), and the same
/// again in `cairn replay`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_wasi_clock_and_random_source_derives_from_the_journal() {
    use sha2::{Digest, Sha256};
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rt = super::common::runtime(tmp.path()).await;
    let bytes = std::fs::read(super::common::fixture("entropy")).unwrap();
    let req = cairn_runtime::StartRun::new(
        cairn_runtime::runtime::ComponentRef::Bytes(std::sync::Arc::new(bytes)),
        "",
    );
    let (started, facts, events) =
        super::common::run_to_end(&rt, req, Some(serde_json::json!({"approved": true}))).await;
    assert_eq!(facts.status, cairn_runtime::RunStatus::Finished);
    let v: Vec<serde_json::Value> = events
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    let of = |t: &str| {
        v.iter()
            .filter(|e| e["payload"]["event"]["type"] == t)
            .cloned()
            .collect::<Vec<_>>()
    };
    let start = &of("started")[0];
    let seed: u64 = start["payload"]["event"]["seed"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let start_ms = start["at_ms"].as_u64().unwrap();
    let decided_ms = of("decision_recorded")[0]["at_ms"].as_u64().unwrap();
    // The streams: SHA-256(domain || seed as 8 LE bytes || block counter as
    // 8 LE bytes), blocks concatenated.
    let stream = |domain: &[u8], n: usize| -> Vec<u8> {
        let mut out = Vec::new();
        let mut counter = 0u64;
        while out.len() < n {
            let mut h = Sha256::new();
            h.update(domain);
            h.update(seed.to_le_bytes());
            h.update(counter.to_le_bytes());
            out.extend_from_slice(&h.finalize());
            counter += 1;
        }
        out
    };
    let secure = stream(b"", 256);
    let insecure = stream(b"insecure", 256);
    let be = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap());
    // A u64 is the next 8 bytes, big-endian; each byte of a byte list
    // takes the next 4 bytes (a big-endian u32) and keeps its lowest byte.
    let bytes_at = |s: &[u8], at: usize, n: usize| -> Vec<u64> {
        (0..n).map(|i| s[at + 4 * i + 3] as u64).collect()
    };
    let readings = of("custom");
    for (i, r) in readings.iter().enumerate() {
        let d = &r["payload"]["event"]["data"];
        let now_ms = if i == 0 { start_ms } else { decided_ms };
        assert_eq!(
            d["wall"],
            serde_json::json!([(now_ms / 1000).to_string(), (now_ms % 1000) * 1_000_000]),
            "{d}"
        );
        assert_eq!(d["wall_resolution"], serde_json::json!(["0", 1_000_000]));
        assert_eq!(
            d["monotonic"],
            ((now_ms - start_ms) * 1_000_000).to_string()
        );
        assert_eq!(d["monotonic_resolution"], "1000000");
        assert_eq!(
            d["insecure_seed"],
            serde_json::json!([seed.to_string(), "0"])
        );
        // Each reading draws 8 + 5×4 bytes of the secure stream and 8 + 3×4
        // of the insecure one.
        let (s0, i0) = (i * 28, i * 20);
        assert_eq!(d["random_u64"], be(&secure[s0..s0 + 8]).to_string(), "{d}");
        assert_eq!(
            d["random_bytes"],
            serde_json::json!(bytes_at(&secure, s0 + 8, 5))
        );
        assert_eq!(d["insecure_u64"], be(&insecure[i0..i0 + 8]).to_string());
        assert_eq!(
            d["insecure_bytes"],
            serde_json::json!(bytes_at(&insecure, i0 + 8, 3))
        );
    }
    assert_eq!(readings.len(), 2);
    rt.shutdown(std::time::Duration::from_secs(5)).await;
    drop(rt);
    let out = super::common::cairn_in(&home, &["replay", started.session_id.as_str(), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The guest SDK carries the world it binds (so it packages on its own):
/// its copy is the host's `wit/`, file for file.
#[test]
fn the_sdk_carries_the_same_world_as_the_host() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let files = |dir: &std::path::Path| -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "wit"))
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read_to_string(e.path()).unwrap(),
                )
            })
            .collect();
        out.sort();
        out
    };
    let host = files(&root.join("wit"));
    let sdk = files(&root.join("guest-sdk/wit"));
    assert!(
        host.len() >= 5,
        "{:?}",
        host.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    assert_eq!(
        host.iter().map(|f| &f.0).collect::<Vec<_>>(),
        sdk.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    for ((name, a), (_, b)) in host.iter().zip(&sdk) {
        assert_eq!(
            a, b,
            "guest-sdk/wit/{name} differs from wit/{name}: copy it over"
        );
    }
}

/// `cargo package -p cairn-guest` passes: the SDK builds from its own
/// files alone (its WIT inside, no workspace-inherited fields), so a plugin
/// author can depend on it by version, git or path.
#[test]
fn the_guest_sdk_packages_on_its_own() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let manifest = std::fs::read_to_string(root.join("guest-sdk/Cargo.toml")).unwrap();
    assert!(!manifest.contains(".workspace"), "{manifest}");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .current_dir(&root)
        .args(["package", "-p", "cairn-guest", "--allow-dirty"])
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("Verifying cairn-guest"), "{err}");
    let list =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(&root)
            .args(["package", "-p", "cairn-guest", "--allow-dirty", "--list"])
            .output()
            .unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    for file in ["wit/world.wit", "wit/workers.wit", "src/lib.rs"] {
        assert!(
            list.lines().any(|l| l == file),
            "{file} not packaged: {list}"
        );
    }
}

/// A component importing what the host does not provide (here wasi:http's
/// incoming handler — a controller serves nothing — and an unknown
/// package; the outgoing handler is provided) is
/// refused before any compile, naming each import and what to do: at
/// `cairn run` and at upload.
#[tokio::test]
async fn an_import_the_host_does_not_provide_is_refused_before_compiling() {
    let bytes = wat::parse_str(
        r#"(component
            (import "wasi:http/incoming-handler@0.2.10" (instance))
            (import "wasi:http/outgoing-handler@0.2.10" (instance))
            (import "acme:thing/other@1.0.0" (instance))
            (import "wasi:clocks/monotonic-clock@0.2.6" (instance))
        )"#,
    )
    .unwrap();
    assert_eq!(
        cairn_runtime::component::imports::imports(&bytes).unwrap(),
        [
            "wasi:http/incoming-handler@0.2.10",
            "wasi:http/outgoing-handler@0.2.10",
            "acme:thing/other@1.0.0",
            "wasi:clocks/monotonic-clock@0.2.6"
        ]
    );
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("fetcher.wasm");
    std::fs::write(&file, &bytes).unwrap();
    let t = std::time::Instant::now();
    let out = crate::common::cairn_bin()
        .args(["run", file.to_str().unwrap(), "--prompt", "x", "--home"])
        .arg(tmp.path().join("home"))
        .output()
        .unwrap();
    let took = t.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("imports what this host does not provide"),
        "{stderr}"
    );
    assert!(
        stderr.contains("wasi:http/incoming-handler@0.2.10 (this host provides wasi:http's types and outgoing-handler only"),
        "{stderr}"
    );
    assert!(stderr.contains("acme:thing/other@1.0.0"), "{stderr}");
    for provided in ["monotonic-clock", "outgoing-handler@"] {
        assert!(
            !stderr.contains(provided),
            "a provided import is named: {stderr}"
        );
    }
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");

    let (_home, _rt, base) = crate::common::served_here(None).await;
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/components"))
        .header("content-type", "application/wasm")
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_component", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("wasi:http/incoming-handler@0.2.10"),
        "{body}"
    );
}

/// History under 0.2.1 has system and tool turns (with call ids and an
/// assistant's tool calls); controllers built before it — 0.2.0 and 0.1.0
/// — still see user and assistant turns only, as they did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_grows_system_and_tool_turns_and_older_controllers_see_what_they_did() {
    use cairn_runtime::component::TurnRole;
    use cairn_runtime::journal::event::ImportedTurn;
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(tmp.path()).await;
    let imported = |rt: cairn_runtime::runtime::Runtime| async move {
        let (session, worker) = rt
            .create_session_first(None, rt.default_workspace())
            .await
            .unwrap();
        let turn = |role: &str, text: &str| ImportedTurn {
            role: role.into(),
            text: text.into(),
            tool_calls: None,
            tool_call_id: None,
        };
        let call = serde_json::json!([{"id": "c1", "type": "function",
            "function": {"name": "lookup", "arguments": "{}"}}]);
        rt.import_history(
            &session,
            vec![
                turn("system", "be brief"),
                turn("user", "q"),
                ImportedTurn {
                    tool_calls: Some(call.clone()),
                    ..turn("assistant", "")
                },
                ImportedTurn {
                    tool_call_id: Some("c1".into()),
                    ..turn("tool", "r")
                },
                turn("assistant", "a"),
            ],
            None,
        )
        .await
        .unwrap();
        (session, worker, call)
    };
    let (session, worker, call) = imported(rt.clone()).await;
    let rich = rt.history(&session, 16).await.unwrap();
    let roles: Vec<TurnRole> = rich.iter().map(|t| t.role).collect();
    use TurnRole::*;
    assert_eq!(roles, [System, User, Assistant, Tool, Assistant]);
    assert_eq!(rich[3].tool_call_id.as_deref(), Some("c1"));
    assert_eq!(
        rich[2].tool_calls.as_deref(),
        Some(call.to_string().as_str())
    );

    // 0.2.0: user and assistant only.
    let mut req = StartRun::new(ComponentRef::Path(fixture("legacy-v2")), "what was said?");
    req.session = Some(session.clone());
    req.worker = Some(worker);
    let (_, facts, events) = run_to_end(&rt, req, None).await;
    assert_eq!(facts.status, RunStatus::Finished, "{events:?}");
    assert_eq!(texts(&events), ["user=q; assistant=; assistant=a"]);
    // 0.1.0 likewise (the user and the two assistant turns).
    let (session, worker, _) = imported(rt.clone()).await;
    let mut req = StartRun::new(ComponentRef::Path(fixture("legacy-v1")), "and now?");
    req.session = Some(session);
    req.worker = Some(worker);
    let (_, _, events) = run_to_end(&rt, req, Some(serde_json::json!({ "approved": true }))).await;
    let Payload::Lifecycle(LifecycleEvent::Finished { text, .. }) = &events.last().unwrap().payload
    else {
        panic!("{:?}", events.last())
    };
    assert_eq!(text, "approved after 3 turns");
}
