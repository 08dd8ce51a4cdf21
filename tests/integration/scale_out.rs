//! Several `cairn serve` instances on one PostgreSQL (a real cluster this
//! test starts): any instance serves any session, followers on other
//! instances than the holders see every entry once, a holder killed with
//! SIGKILL loses its sessions to the others within the lease time and
//! their runs finish by replay, and a holder paused (SIGSTOP) past its
//! lease writes nothing when it wakes.

use crate::common::*;
use crate::postgres::Cluster;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The lease time the instances run with (short, so the test is).
pub(crate) const TTL_MS: u64 = 2_000;

pub(crate) struct Instance {
    pub(crate) child: Child,
    pub(crate) url: String,
    pub(crate) stderr: std::path::PathBuf,
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::CONT,
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Instance {
    pub(crate) fn start(dir: &Path, name: &str, store: &str) -> Instance {
        Instance::start_with(dir, name, store, &[])
    }

    pub(crate) fn start_with(
        dir: &Path,
        name: &str,
        store: &str,
        env: &[(&str, &str)],
    ) -> Instance {
        Instance::start_configured(dir, name, store, "", &["--insecure-local"], env)
    }

    /// An instance whose `cairn.toml` holds `toml` after its `[store]`
    /// section, served with `flags`.
    pub(crate) fn start_configured(
        dir: &Path,
        name: &str,
        store: &str,
        toml: &str,
        flags: &[&str],
        env: &[(&str, &str)],
    ) -> Instance {
        let home = dir.join(name);
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(
            home.join("cairn.toml"),
            format!("[store]\nlease_ttl_ms = {TTL_MS}\n{toml}"),
        )
        .unwrap();
        let stderr = dir.join(format!("{name}.err"));
        let mut child = cairn_bin()
            .arg("serve")
            .args(flags)
            .args(["--listen", "127.0.0.1:0"])
            .arg("--home")
            .arg(&home)
            .args(["--store", store, "--instance", name])
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| {
                panic!(
                    "{name} did not start: {}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                )
            })
            .to_string();
        Instance { child, url, stderr }
    }

    pub(crate) fn signal(&self, signal: rustix::process::Signal) {
        rustix::process::kill_process(rustix::process::Pid::from_child(&self.child), signal)
            .unwrap();
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

/// A runtime for the test's own database reads, a PostgreSQL cluster, a
/// fresh database's URL on it, and a directory for the instances' homes.
pub(crate) fn shared_store() -> (tokio::runtime::Runtime, Cluster, String, tempfile::TempDir) {
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let pg = Cluster::start();
    let store = tokio.block_on(pg.database());
    (tokio, pg, store, tempfile::tempdir().unwrap())
}

pub(crate) fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// What a follower saw: (seq, line) in order, and whether its run ended.
#[derive(Default)]
pub(crate) struct Seen {
    entries: Vec<(u64, String)>,
    ended: bool,
}

/// Follow a session's stream at `base` until its run's terminal entry.
pub(crate) fn follow(
    base: String,
    session: String,
    seen: Arc<Mutex<Seen>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let response = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap()
            .get(format!("{base}/v1/sessions/{session}/events"))
            .send()
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        let mut id = None;
        for line in std::io::BufReader::new(response).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("id: ") {
                id = n.trim().parse::<u64>().ok();
            } else if let Some(data) = line.strip_prefix("data: ") {
                let seq = id.take().expect("every entry has an id");
                let v: serde_json::Value = serde_json::from_str(data).unwrap();
                let mut s = seen.lock().unwrap();
                s.entries.push((seq, data.to_string()));
                if v.get("facts").is_some() {
                    s.ended = true;
                    return;
                }
            }
        }
    })
}

/// The decision a follower saw requested.
pub(crate) fn decision_of(seen: &Mutex<Seen>) -> Option<String> {
    let s = seen.lock().unwrap();
    s.entries.iter().find_map(|(_, line)| {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        (v["payload"]["event"]["type"] == "decision_requested").then(|| {
            v["payload"]["event"]["decision_id"]
                .as_str()
                .map(str::to_string)
        })?
    })
}

/// Wait until run `run` (asked at `base`) has finished; one that does not
/// in time fails the test with what the server last said of it and the
/// kinds of its session's journal entries.
pub(crate) fn wait_finished(base: &str, run: &str, what: &str, deadline: Duration) {
    let until = Instant::now() + deadline;
    loop {
        let v: serde_json::Value = client()
            .get(format!("{base}/v1/runs/{run}"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        if v["state"] == "finished" {
            return;
        }
        if Instant::now() >= until {
            let kinds: Vec<String> = v["session_id"]
                .as_str()
                .map(|s| journal_entries(base, s).iter().map(entry_kind).collect())
                .unwrap_or_default();
            panic!("timed out waiting for {what}: the run is {v}; its journal: {kinds:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A session's journal entries (the first 1,000) as served at `base`.
pub(crate) fn journal_entries(base: &str, session: &str) -> Vec<serde_json::Value> {
    let page: serde_json::Value = client()
        .get(format!(
            "{base}/v1/sessions/{session}/journal?after=0&limit=1000"
        ))
        .send()
        .unwrap()
        .json()
        .unwrap();
    page["entries"].as_array().cloned().unwrap_or_default()
}

/// A journal entry's event type (`timer_set`, `decision_recorded`, …).
pub(crate) fn entry_kind(e: &serde_json::Value) -> String {
    e["payload"]["event"]["type"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// `GET /v1/runs/{run}` at `base`.
pub(crate) fn run_state(base: &str, run: &str) -> serde_json::Value {
    client()
        .get(format!("{base}/v1/runs/{run}"))
        .send()
        .unwrap()
        .json()
        .unwrap()
}

/// The instance that answered `GET /v1/sessions/{session}` asked at `base`.
pub(crate) fn served_by(base: &str, session: &str) -> String {
    let r = client()
        .get(format!("{base}/v1/sessions/{session}"))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    r.headers()["x-cairn-served-by"]
        .to_str()
        .unwrap()
        .to_string()
}

pub(crate) fn wait_for(what: &str, deadline: Duration, mut ok: impl FnMut() -> bool) {
    let until = Instant::now() + deadline;
    while !ok() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Answer a decision at `base`, retrying while nobody holds it yet (its
/// run is being taken over).
pub(crate) fn approve(base: &str, decision: &str, deadline: Duration) {
    let http = client();
    let until = Instant::now() + deadline;
    loop {
        let r = http
            .post(format!("{base}/v1/decisions/{decision}"))
            .json(&serde_json::json!({"value": {"approved": true}}))
            .send()
            .unwrap();
        if r.status().is_success() {
            return;
        }
        let status = r.status();
        let body = r.text().unwrap_or_default();
        assert!(
            Instant::now() < until,
            "decision {decision} not answered at {base}: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every session's rows in the store: seq → line.
pub(crate) fn rows(
    rt: &tokio::runtime::Runtime,
    url: &str,
) -> BTreeMap<String, BTreeMap<u64, String>> {
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let mut out: BTreeMap<String, BTreeMap<u64, String>> = BTreeMap::new();
        for row in client
            .query("SELECT session_id, seq, line FROM cairn_entries", &[])
            .await
            .unwrap()
        {
            out.entry(row.get(0))
                .or_default()
                .insert(row.get::<_, i64>(1) as u64, row.get(2));
        }
        out
    })
}

pub(crate) fn types(rows: &BTreeMap<u64, String>) -> Vec<String> {
    rows.values()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["payload"]["event"]["type"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[test]
fn three_instances_share_sessions_survive_a_killed_holder_and_fence_a_paused_one() {
    let (tokio, _pg, store, dir) = shared_store();
    let nodes: Vec<Instance> = (0..3)
        .map(|i| Instance::start(dir.path(), &format!("n{i}"), &store))
        .collect();
    let http = client();
    // A second process under a name in use is refused, naming the holder.
    let out = cairn_bin()
        .args(["serve", "--insecure-local", "--listen", "127.0.0.1:0"])
        .arg("--home")
        .arg(dir.path().join("twin"))
        .args(["--store", &store, "--instance", "n1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a twin of n1 must not serve");
    assert!(
        err.contains("instance name \"n1\" is in use") && err.contains(&nodes[1].url),
        "{err}"
    );

    // 20 sessions, each made (and so held) by instance k % 3; each run
    // waits on an approval.
    let sessions: Vec<String> = (0..20).map(|k| format!("s{k}")).collect();
    for (k, s) in sessions.iter().enumerate() {
        let r = http
            .post(format!("{}/v1/runs", nodes[k % 3].url))
            .json(&serde_json::json!({"component": "approval", "prompt": format!("p{k}"), "session": s}))
            .send()
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().unwrap());
    }
    // Followers on another instance than the holder (and never on n0,
    // which is killed): n0's sessions on n1, n1's on n2, n2's on n1.
    let follower_of = |k: usize| match k % 3 {
        0 | 2 => 1,
        _ => 2,
    };
    let seen: Vec<Arc<Mutex<Seen>>> = sessions.iter().map(|_| Default::default()).collect();
    let followers: Vec<_> = sessions
        .iter()
        .enumerate()
        .map(|(k, s)| {
            follow(
                nodes[follower_of(k)].url.clone(),
                s.clone(),
                seen[k].clone(),
            )
        })
        .collect();
    wait_for("every run to ask", Duration::from_secs(60), || {
        seen.iter().all(|s| decision_of(s).is_some())
    });
    // Every instance lists every run, session and pending decision.
    for node in &nodes {
        // Every run, from the shared run index, in pages (asked first: a
        // listing of sessions brings their workers here).
        let mut runs: Vec<serde_json::Value> = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut req = http.get(format!("{}/v1/runs?limit=7", node.url));
            if let Some(c) = &cursor {
                req = req.query(&[("cursor", c)]);
            }
            let r = req.send().unwrap();
            cursor = r
                .headers()
                .get("x-next-cursor")
                .map(|v| v.to_str().unwrap().to_string());
            runs.extend(r.json::<Vec<serde_json::Value>>().unwrap());
            if cursor.is_none() {
                break;
            }
        }
        let mut run_sessions: Vec<&str> = runs
            .iter()
            .map(|r| r["session_id"].as_str().unwrap())
            .collect();
        run_sessions.sort();
        let mut want: Vec<&str> = sessions.iter().map(String::as_str).collect();
        want.sort();
        assert_eq!(
            run_sessions, want,
            "{} lists every instance's runs",
            node.url
        );
        let listed: Vec<serde_json::Value> = http
            .get(format!("{}/v1/sessions", node.url))
            .send()
            .unwrap()
            .json()
            .unwrap();
        for s in &sessions {
            assert!(
                listed.iter().any(|l| l["session_id"] == **s),
                "{} lists {s}",
                node.url
            );
        }
        let pending: Vec<serde_json::Value> = http
            .get(format!("{}/v1/decisions", node.url))
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(
            pending.len(),
            20,
            "{} lists every pending decision",
            node.url
        );
    }
    // A request at any instance is served by the holder.
    assert_eq!(
        served_by(&nodes[2].url, "s0"),
        nodes[0].url,
        "forwarded to the holder"
    );

    // Kill n0 while its runs wait: its sessions are taken over by n1 or
    // n2 once the lease expires, and their runs restored by replay.
    let killed = Instant::now();
    nodes[0].signal(rustix::process::Signal::KILL);
    for (k, s) in seen.iter().enumerate() {
        let decision = decision_of(s).unwrap();
        // Answered through the survivors, whoever holds the session.
        approve(
            &nodes[1 + k % 2].url,
            &decision,
            Duration::from_millis(TTL_MS) + Duration::from_secs(20),
        );
    }
    wait_for("every run to end", Duration::from_secs(30), || {
        seen.iter().all(|s| s.lock().unwrap().ended)
    });
    let failover = killed.elapsed();
    assert!(
        failover < Duration::from_millis(TTL_MS) + Duration::from_secs(20),
        "failover took {failover:?}"
    );
    for f in followers {
        f.join().unwrap();
    }
    let stored = rows(&tokio, &store);
    for (k, s) in sessions.iter().enumerate() {
        let rows = &stored[s];
        // Dense from 1: no seq twice (the key) and none missing.
        assert_eq!(
            rows.keys().copied().collect::<Vec<_>>(),
            (1..=rows.len() as u64).collect::<Vec<_>>(),
            "{s}: seqs are dense"
        );
        // Everything a follower saw is stored, once, as it saw it.
        let s_seen = seen[k].lock().unwrap();
        let mut last = 0;
        for (seq, line) in &s_seen.entries {
            assert!(*seq > last, "{s}: a follower saw seq {seq} after {last}");
            last = *seq;
            assert_eq!(rows.get(seq), Some(line), "{s}: seq {seq} as stored");
        }
        let t = types(rows);
        assert_eq!(
            t.iter().filter(|t| *t == "finished").count(),
            1,
            "{s}: one run, one end: {t:?}"
        );
        if k % 3 == 0 {
            assert!(
                t.iter().any(|t| t == "resumed_by_replay"),
                "{s} (held by the killed instance) went on by replay: {t:?}"
            );
        }
    }

    // A paused holder: n1 holds three waiting runs, stops; n2 takes them
    // over and finishes them; n1 wakes and writes nothing.
    let paused: Vec<String> = (0..3).map(|k| format!("p{k}")).collect();
    for s in &paused {
        let r = http
            .post(format!("{}/v1/runs", nodes[1].url))
            .json(&serde_json::json!({"component": "approval", "prompt": "pause", "session": s}))
            .send()
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().unwrap());
    }
    let pending = |node: &Instance| -> Vec<(String, String)> {
        let list: Vec<serde_json::Value> = client()
            .get(format!("{}/v1/decisions", node.url))
            .send()
            .unwrap()
            .json()
            .unwrap();
        list.iter()
            .filter(|d| paused.iter().any(|p| d["session_id"] == **p))
            .map(|d| {
                (
                    d["session_id"].as_str().unwrap().to_string(),
                    d["decision_id"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    wait_for("n1's runs to ask", Duration::from_secs(30), || {
        pending(&nodes[1]).len() == 3
    });
    // And a worktree n1 leaves: the next generation starts from it
    // wherever it runs.
    let r: serde_json::Value = http
        .post(format!("{}/v1/runs", nodes[1].url))
        .json(&serde_json::json!({"component": "sandbox-probe", "prompt": "", "session": "w"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let probe_run = r["run_id"].as_str().unwrap().to_string();
    wait_finished(
        &nodes[1].url,
        &probe_run,
        "the probe to end",
        Duration::from_secs(30),
    );
    nodes[1].signal(rustix::process::Signal::STOP);
    wait_for(
        "n2 to take n1's sessions",
        Duration::from_millis(TTL_MS) + Duration::from_secs(20),
        || pending(&nodes[2]).len() == 3,
    );
    // n2 never ran the probe's generation 1; it has its worktree.
    let carried = |node: &str, generation: u64| -> Option<String> {
        let workers = dir.path().join(node).join("workers");
        std::fs::read_dir(&workers).ok()?.find_map(|w| {
            let path = w
                .ok()?
                .path()
                .join(format!("runs/{generation}/artifacts/probe.txt"));
            std::fs::read_to_string(path).ok()
        })
    };
    let r = http
        .post(format!("{}/v1/runs", nodes[2].url))
        .json(&serde_json::json!({"prompt": "", "session": "w"}))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().unwrap());
    assert_eq!(
        carried("n2", 1).as_deref(),
        Some("written by sandbox-probe\n"),
        "generation 1's worktree came to n2 from the blob store"
    );
    for (_, decision) in pending(&nodes[2]) {
        approve(&nodes[2].url, &decision, Duration::from_secs(10));
    }
    let ended = |s: &str| {
        types(rows(&tokio, &store).get(s).unwrap_or(&BTreeMap::new()))
            .iter()
            .any(|t| t == "finished")
    };
    wait_for(
        "the taken-over runs to end",
        Duration::from_secs(20),
        || paused.iter().all(|s| ended(s)),
    );
    // A fork asked at one instance is made by the holder and published
    // to all: it carries generation 1's worktree as its generation 0.
    wait_for("w's second run to end", Duration::from_secs(20), || {
        types(rows(&tokio, &store).get("w").unwrap_or(&BTreeMap::new()))
            .iter()
            .filter(|t| *t == "finished")
            .count()
            == 2
    });
    let w = rows(&tokio, &store)["w"].clone();
    let second = w
        .iter()
        .filter(|(_, l)| l.contains("\"type\":\"started\""))
        .nth(1)
        .map(|(seq, _)| *seq)
        .expect("w's second start");
    let r = http
        .post(format!("{}/v1/sessions/w/fork", nodes[2].url))
        .json(&serde_json::json!({"before_seq": second, "id": "w-fork"}))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().unwrap());
    let fork: serde_json::Value = http
        .get(format!("{}/v1/sessions/w-fork", nodes[2].url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let worker = fork["worker_id"]
        .as_str()
        .expect("the fork is served")
        .to_string();
    let snapshot: Option<Vec<u8>> = tokio.block_on(async {
        let (client, conn) = tokio_postgres::connect(&store, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
            .query_opt(
                "SELECT bytes FROM cairn_blobs WHERE key = $1",
                &[&format!("worktree/{worker}")],
            )
            .await
            .unwrap()
            .map(|r| r.get(0))
    });
    let snapshot = snapshot.expect("the fork's generation 0 is in the blob store");
    assert_eq!(&snapshot[..8], &0u64.to_be_bytes(), "generation 0");
    assert!(
        snapshot.windows(9).any(|w| w == b"probe.txt"),
        "it carries generation 1's worktree"
    );
    let before = rows(&tokio, &store);
    nodes[1].signal(rustix::process::Signal::CONT);
    wait_for(
        "n1 to learn its leases moved",
        Duration::from_secs(20),
        || nodes[1].log().matches("moved to another instance").count() >= 3,
    );
    std::thread::sleep(Duration::from_millis(TTL_MS));
    let after = rows(&tokio, &store);
    for s in &paused {
        assert_eq!(
            before[s], after[s],
            "{s}: the woken holder wrote nothing after its lease moved"
        );
        assert!(
            types(&after[s]).iter().any(|t| t == "resumed_by_replay"),
            "{s}: n2 went on by replay"
        );
    }
    assert!(
        nodes[1].log().contains("ends here"),
        "n1 ended its runs with a clear note: {}",
        nodes[1].log()
    );
    // A component uploaded at one instance runs at another; a session
    // deleted at one is gone at every one.
    let uploaded: serde_json::Value = http
        .post(format!("{}/v1/components", nodes[2].url))
        .header("content-type", "application/wasm")
        .body(std::fs::read(fixture("counter")).unwrap())
        .send()
        .unwrap()
        .json()
        .unwrap();
    let digest = uploaded["digest"].as_str().expect("uploaded").to_string();
    let r = http
        .post(format!("{}/v1/runs", nodes[1].url))
        .json(&serde_json::json!({"component": digest, "prompt": "3", "session": "uploaded"}))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().unwrap());
    let listed: Vec<serde_json::Value> = http
        .get(format!("{}/v1/components", nodes[1].url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert!(listed.iter().any(|c| c["digest"] == digest.as_str()));
    let r = http
        .delete(format!("{}/v1/sessions/s1", nodes[2].url))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    for node in &nodes[1..] {
        let r = http
            .get(format!("{}/v1/sessions/s1", node.url))
            .send()
            .unwrap();
        assert_eq!(r.status(), 404, "{} forgot the deleted session", node.url);
    }
    // And n1 still serves: a request for a session it lost is forwarded.
    assert_eq!(served_by(&nodes[1].url, "p0"), nodes[2].url);
    // The survivor holds what it took over, and says so.
    let metrics = http
        .get(format!("{}/metrics", nodes[2].url))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let held: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("cairn_leases_held "))
        .and_then(|v| v.trim().parse().ok())
        .expect("cairn_leases_held");
    assert!(held >= 5, "n2 holds p0..p2, w and w-fork at least: {held}");

    // A clean stop hands the sessions over: a run waiting at n2 when it
    // gets SIGTERM is not cancelled; it goes on at n1 by replay.
    let r = http
        .post(format!("{}/v1/runs", nodes[2].url))
        .json(&serde_json::json!({"component": "approval", "prompt": "rolling", "session": "t"}))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().unwrap());
    let asked = |node: &Instance| -> Option<String> {
        let list: Vec<serde_json::Value> = client()
            .get(format!("{}/v1/decisions?session=t", node.url))
            .send()
            .ok()?
            .json()
            .ok()?;
        list.first()
            .and_then(|d| d["decision_id"].as_str().map(str::to_string))
    };
    wait_for("t's run to ask at n2", Duration::from_secs(20), || {
        asked(&nodes[2]).is_some()
    });
    nodes[2].signal(rustix::process::Signal::TERM);
    let mut decision = None;
    wait_for("n1 to take t over", Duration::from_secs(20), || {
        decision = asked(&nodes[1]);
        decision.is_some()
    });
    approve(&nodes[1].url, &decision.unwrap(), Duration::from_secs(10));
    wait_for("t's run to end", Duration::from_secs(20), || ended("t"));
    let t = types(&rows(&tokio, &store)["t"]);
    assert!(
        !t.iter().any(|t| t == "cancelled") && t.iter().any(|t| t == "resumed_by_replay"),
        "handed over, not cancelled: {t:?}"
    );
}
