//! The store conformance suite against every store — memory, file and a
//! real PostgreSQL this test starts (initdb + pg_ctl on a Unix socket in a
//! temp dir; Debian's `postgresql` is installed with apt-get when no
//! PostgreSQL binaries are found) — and the PostgreSQL store's own rules:
//! migrations, lease fencing between instances, clear errors.

use cairn_runtime::store::DirBlobs;
use cairn_runtime::store::blob::MemoryBlobs;
use cairn_runtime::store::conformance::{self, Subject};
use cairn_runtime::store::file::FileStore;
use cairn_runtime::store::lease::MemoryLeases;
use cairn_runtime::store::memory::MemoryStore;
use cairn_runtime::store::{LeaseStore, MemoryRunIndex, Store, StoreError};
use cairn_runtime::worker::Home;
use cairn_runtime::{SegmentId, SessionId};
use cairn_store_postgres::{PgStore, migrations};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// A PostgreSQL cluster of this test's own, stopped when dropped.
pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
}

fn find_bin() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    versions.sort();
    versions.reverse();
    on_path
        .into_iter()
        .chain(versions)
        .find(|d| d.join("initdb").exists() && d.join("pg_ctl").exists())
}

/// The directory with `initdb` and `pg_ctl`, installing Debian's
/// `postgresql` when there is none.
fn postgres_bin() -> PathBuf {
    if let Some(bin) = find_bin() {
        return bin;
    }
    let lock = std::fs::File::create(super::common::target_dir().join("postgres.lock")).unwrap();
    lock.lock().expect("lock target/postgres.lock");
    if find_bin().is_none() {
        let _ = Command::new("apt-get").arg("update").output();
        let out = Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", "postgresql"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .expect("apt-get");
        assert!(
            out.status.success(),
            "the PostgreSQL tests need initdb and pg_ctl (Debian: apt-get install postgresql): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    find_bin().expect("PostgreSQL binaries after apt-get install postgresql")
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

impl Cluster {
    /// Start a fresh cluster (trust auth, a Unix socket only).
    pub fn start() -> Cluster {
        let bin = postgres_bin();
        // PostgreSQL refuses to run as root: run it as `postgres` then.
        let as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix("cairn-pg")
            .tempdir_in("/tmp")
            .unwrap();
        if as_postgres {
            let ok = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(ok.success(), "chown the cluster's directory to postgres");
        }
        let c = Cluster {
            dir,
            bin,
            as_postgres,
        };
        c.pg(
            &[
                "initdb",
                "-A",
                "trust",
                "-U",
                "cairn",
                "-E",
                "UTF8",
                "--no-sync",
                "-D",
            ],
            &[&c.data()],
        );
        c.start_server();
        c
    }

    /// Start the server (again).
    pub fn start_server(&self) {
        let opts = format!(
            "-k {} -c listen_addresses= -p 5432 -c max_connections=300 -c shared_buffers=32MB",
            self.dir.path().display()
        );
        self.pg(
            &["pg_ctl", "-w", "-t", "60", "-o", &opts, "-l"],
            &[
                &self.dir.path().join("log"),
                Path::new("-D"),
                &self.data(),
                Path::new("start"),
            ],
        );
    }

    /// Stop the server now (the database goes away under its clients).
    pub fn stop_server(&self) {
        self.pg(
            &["pg_ctl", "-m", "fast", "-D"],
            &[&self.data(), Path::new("stop")],
        );
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn pg(&self, args: &[&str], paths: &[&Path]) {
        let mut cmd = match self.as_postgres {
            true => {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(self.bin.join(args[0]));
                c
            }
            false => Command::new(self.bin.join(args[0])),
        };
        cmd.args(&args[1..]).args(paths);
        let out = cmd.output().expect("run a PostgreSQL program");
        assert!(
            out.status.success(),
            "{args:?} failed: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
        );
    }

    /// The URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!(
            "host={} port=5432 user=cairn dbname={db}",
            self.dir.path().display()
        )
    }

    /// A new, empty database; its URL.
    pub async fn database(&self) -> String {
        let name = format!("t{}", uuid::Uuid::new_v4().simple());
        let (client, conn) = tokio_postgres::connect(&self.url("postgres"), tokio_postgres::NoTls)
            .await
            .expect("connect to the cluster");
        tokio::spawn(conn);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create a database");
        self.url(&name)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut cmd = match self.as_postgres {
            true => {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"])
                    .arg(self.bin.join("pg_ctl"));
                c
            }
            false => Command::new(self.bin.join("pg_ctl")),
        };
        let _ = cmd
            .args(["-m", "immediate", "-D"])
            .arg(self.data())
            .arg("stop")
            .output();
    }
}

fn fresh_segment(
    _: SessionId,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = SegmentId> + Send>> {
    Box::pin(async { SegmentId::new() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_conformance_suite_passes_against_every_store() {
    let pg = Cluster::start();
    let url = pg.database().await;
    let a = Arc::new(PgStore::connect(&url, "instance-a").await.unwrap());
    let b = Arc::new(PgStore::connect(&url, "instance-b").await.unwrap());

    // Journals and runs.
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::open(&tmp.path().join("home")).unwrap();
    let file_home = home.clone();
    let lay_out = move |s: SessionId| -> std::pin::Pin<
        Box<dyn std::future::Future<Output = SegmentId> + Send>,
    > {
        let worker = file_home
            .create_published_worker(&s, None, "local")
            .unwrap();
        let segment = worker.metadata().unwrap().active_segment;
        Box::pin(async move { segment })
    };
    let subjects = [
        Subject {
            name: "memory",
            store: Arc::new(MemoryStore::new(1_000_000)) as Arc<dyn Store>,
            prepare: &fresh_segment,
        },
        Subject {
            name: "file",
            store: Arc::new(FileStore::new(home.clone())),
            prepare: &lay_out,
        },
        Subject {
            name: "postgres",
            store: a.clone(),
            prepare: &fresh_segment,
        },
    ];
    for s in &subjects {
        conformance::journal_and_runs(s).await;
        conformance::racing_writers_write_each_seq_once(s).await;
    }

    // Leases: two holders on one table.
    let memory = MemoryLeases::new("m1");
    conformance::leases(&memory, &memory.instance("m2")).await;
    conformance::leases(&*a, &*b).await;
    conformance::appends_are_fenced_by_the_lease(
        (&*a, a.clone() as Arc<dyn Store>),
        (&*b, b.clone() as Arc<dyn Store>),
        &fresh_segment,
    )
    .await;

    // Catalogs: the home, the shared store.
    conformance::catalog("file", &home, None).await;
    conformance::catalog("postgres", &*a, Some(&*a)).await;

    // What an instance keeps of its workers: the home.
    conformance::workers("file", &home);
    conformance::component_bytes("file", &home);

    // Run indexes: the embedded one in memory, the shared one's rows.
    conformance::run_index("memory", &MemoryRunIndex::default(), &home, None).await;
    conformance::run_index("postgres", &*a, &*a, Some(&*a)).await;

    // Blobs.
    conformance::blobs("memory", &MemoryBlobs::default()).await;
    let blobs =
        cap_std::fs::Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
    conformance::blobs("file", &DirBlobs::new(blobs)).await;
    conformance::blobs("postgres", &*a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_run_once_and_a_newer_schema_is_refused() {
    let pg = Cluster::start();
    let url = pg.database().await;
    // Five instances starting together migrate once.
    let starts: Vec<_> = (0..5)
        .map(|i| {
            let url = url.clone();
            tokio::spawn(async move { PgStore::connect(&url, &format!("i{i}")).await })
        })
        .collect();
    for s in starts {
        s.await.unwrap().expect("every instance connects");
    }
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    assert_eq!(
        migrations::version(&client).await.unwrap(),
        migrations::current()
    );
    let applied: i64 = client
        .query_one("SELECT count(*) FROM cairn_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        applied,
        migrations::MIGRATIONS.len() as i64,
        "each migration applied once"
    );
    // The journal's key makes a duplicate seq impossible, whoever writes.
    let dup = client
        .batch_execute(
            "INSERT INTO cairn_journals (session_id, active_segment) VALUES ('s-dup', 'x');
             INSERT INTO cairn_entries VALUES ('s-dup', 1, 'x', '{}');
             INSERT INTO cairn_entries VALUES ('s-dup', 1, 'x', '{}');",
        )
        .await
        .expect_err("a second row at one seq");
    assert!(
        dup.to_string().contains("duplicate") || format!("{dup:?}").contains("23505"),
        "{dup:?}"
    );

    // A newer cairn migrated this database: this one refuses it.
    client
        .execute(
            "INSERT INTO cairn_schema (version, what) VALUES (999, 'from the future')",
            &[],
        )
        .await
        .unwrap();
    match PgStore::connect(&url, "old").await {
        Err(StoreError::Schema(why)) => {
            assert!(
                why.contains("999") && why.contains("upgrade cairn"),
                "{why}"
            )
        }
        other => panic!("a newer schema must be refused: {other:?}"),
    }
}

#[tokio::test]
async fn an_unreachable_or_malformed_store_url_names_the_problem() {
    match PgStore::connect(
        "postgres://cairn@/db?host=/nonexistent-cairn-socket-dir",
        "x",
    )
    .await
    {
        // Unreachable: a retryable `Unavailable`, not a refusal.
        Err(e @ StoreError::Unavailable { .. }) => {
            let s = e.to_string();
            assert!(s.contains("a database connection"), "{s}");
            assert!(s.contains("unreachable"), "{s}");
        }
        other => panic!("{other:?}"),
    }
    match PgStore::connect("postgres://cairn@host:notaport/db", "x").await {
        Err(e @ StoreError::Database { .. }) => {
            let s = e.to_string();
            assert!(s.contains("the store URL"), "{s}");
        }
        other => panic!("{other:?}"),
    }
}

/// A lease a holder keeps renewing never moves; one it stops renewing is
/// swept and taken, and the old holder's writes are refused from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_lease_stays_and_an_abandoned_one_moves_within_its_ttl() {
    let pg = Cluster::start();
    let url = pg.database().await;
    let a = PgStore::connect(&url, "a").await.unwrap();
    let b = PgStore::connect(&url, "b").await.unwrap();
    let s = SessionId::parse("s-renewed").unwrap();
    let ttl = std::time::Duration::from_millis(300);
    let held = a.acquire(&s, ttl).await.unwrap();
    let start = std::time::Instant::now();
    // Before the last renewal was sent: the lease ran until at least a ttl
    // from then.
    let mut renewed = start;
    while start.elapsed() < std::time::Duration::from_millis(1200) {
        renewed = std::time::Instant::now();
        a.renew(&s, held.token, ttl)
            .await
            .expect("renewed well inside the ttl");
        assert!(
            matches!(b.acquire(&s, ttl).await, Err(StoreError::LeaseHeld { .. })),
            "a renewed lease is never taken"
        );
        tokio::time::sleep(std::time::Duration::from_millis(80)).await;
    }
    // a stops renewing: within the ttl (and a little) b's sweep finds it.
    let stopped = std::time::Instant::now();
    let taken = loop {
        if let Some(l) = b
            .expired(100)
            .await
            .unwrap()
            .into_iter()
            .find(|l| l.session == s)
        {
            break b.acquire(&l.session, ttl).await.unwrap();
        }
        assert!(
            stopped.elapsed() < std::time::Duration::from_secs(5),
            "the abandoned lease is swept"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    // Measured from the last renewal, not from when the loop noticed it
    // was done (a loaded machine's last check can take most of a ttl);
    // 10 ms for the database's clock against this one's.
    let lived = renewed.elapsed();
    assert!(
        lived + std::time::Duration::from_millis(10) >= ttl,
        "not before its ttl: taken {lived:?} after its last renewal (ttl {ttl:?}); \
         the sweep began {:?} after it",
        stopped.duration_since(renewed)
    );
    assert_eq!(taken.token, held.token + 1);
    assert_eq!(taken.holder, "b");
}

/// A follower on an instance that does not hold the session (the relay):
/// every committed entry once, in seq order, from any cursor, woken by
/// `NOTIFY`; what it sees is exactly what the holder's journal holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_on_another_instance_sees_every_committed_entry_once() {
    use cairn_runtime::journal::Journals;
    use cairn_runtime::store::JournalStore;
    use cairn_store_postgres::relay::Relay;
    let pg = Cluster::start();
    let url = pg.database().await;
    let a = Arc::new(PgStore::connect(&url, "holder").await.unwrap());
    let b = Arc::new(PgStore::connect(&url, "follower").await.unwrap());
    let session = SessionId::parse("s-relayed").unwrap();
    a.acquire(&session, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    let journals = Journals::new(a.clone() as Arc<dyn Store>, 1024);
    let journal = journals.create(&session, SegmentId::new()).await.unwrap();
    let relay = Relay::start(b.clone());
    let total = 1500u64;
    // Followers from the start and from a cursor (Last-Event-ID).
    let follow = |after: u64| {
        let mut f = relay.follow(&session, cairn_runtime::Seq(after));
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while seen.last().copied().unwrap_or(after) < total {
                let item = tokio::time::timeout(std::time::Duration::from_secs(30), f.next())
                    .await
                    .expect("the next entry in time")
                    .expect("a relayed entry");
                seen.push(item.seq().0);
            }
            seen
        })
    };
    let (from_start, from_cursor) = (follow(0), follow(700));
    // The holder writes: batches of every size, and emits through group
    // commit.
    let mut n = 1u64;
    let mut size = 1usize;
    while n < total {
        if size.is_multiple_of(3) {
            for _ in 0..size {
                journal
                    .append_seq(
                        None,
                        cairn_runtime::Payload::Agent(
                            cairn_runtime::journal::event::AgentEvent::TextDelta {
                                text: "e".into(),
                                by: None,
                            },
                        ),
                    )
                    .await
                    .unwrap();
            }
        } else {
            let batch = vec![
                cairn_runtime::Payload::Agent(
                    cairn_runtime::journal::event::AgentEvent::TextDelta {
                        text: "b".into(),
                        by: None
                    }
                );
                size
            ];
            journal.append_batch(None, batch).await.unwrap();
        }
        n = journal.last_seq().await.0;
        size = size % 37 + 1;
    }
    let total = n;
    let from_start = from_start.await.unwrap();
    let from_cursor = from_cursor.await.unwrap();
    assert_eq!(
        from_start,
        (1..=from_start.len() as u64).collect::<Vec<_>>(),
        "dense, once, in order"
    );
    assert!(from_start.len() as u64 >= total.min(1500));
    assert_eq!(
        from_cursor,
        (701..=700 + from_cursor.len() as u64).collect::<Vec<_>>(),
        "from the cursor on"
    );
    // What was relayed is the holder's journal, line for line.
    let held = a
        .read(&session, cairn_runtime::Seq(0), usize::MAX)
        .await
        .unwrap();
    let mut f = relay.follow(&session, cairn_runtime::Seq(0));
    for item in &held {
        assert_eq!(&f.next().await.unwrap(), item);
    }
    assert!(
        relay.heard() > 0,
        "the follower was woken by NOTIFY, not only by polling"
    );
}
