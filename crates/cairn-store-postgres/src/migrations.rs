//! The shared store's schema, as numbered migrations applied in order at
//! connect, each in its own transaction, under an advisory lock so several
//! instances starting together apply each once. `cairn_schema` records
//! what was applied; a database at a version this cairn does not know (a
//! newer cairn migrated it) is refused.

use super::db;
use cairn_store::StoreError;

/// The advisory lock key migrations hold (`cairn` in ASCII).
const LOCK: i64 = 0x0063_6169_726e;

/// Every migration, in order: (version, what it does, SQL).
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "journals, entries, runs, checkpoints, leases, blobs, instances",
        r#"
CREATE TABLE cairn_journals (
    session_id      TEXT PRIMARY KEY,
    active_segment  TEXT NOT NULL,
    last_seq        BIGINT NOT NULL DEFAULT 0,
    last_generation BIGINT NOT NULL DEFAULT 0,
    bytes           BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE cairn_entries (
    session_id TEXT NOT NULL REFERENCES cairn_journals (session_id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL CHECK (seq > 0),
    segment_id TEXT NOT NULL,
    line       TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE cairn_runs (
    run_id     TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES cairn_journals (session_id) ON DELETE CASCADE,
    status     TEXT NOT NULL,
    facts      TEXT NOT NULL
);
CREATE INDEX cairn_runs_session ON cairn_runs (session_id);
CREATE TABLE cairn_checkpoints (
    session_id TEXT NOT NULL REFERENCES cairn_journals (session_id) ON DELETE CASCADE,
    key        TEXT NOT NULL,
    bytes      BYTEA NOT NULL,
    PRIMARY KEY (session_id, key)
);
CREATE TABLE cairn_leases (
    session_id TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    token      BIGINT NOT NULL CHECK (token > 0),
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX cairn_leases_expiry ON cairn_leases (expires_at);
CREATE TABLE cairn_blobs (
    key   TEXT PRIMARY KEY,
    bytes BYTEA NOT NULL
);
CREATE TABLE cairn_instances (
    instance_id TEXT PRIMARY KEY,
    url         TEXT NOT NULL,
    seen_at     TIMESTAMPTZ NOT NULL
);
"#,
    ),
    (
        2,
        "the catalog of workers, the run index",
        r#"
CREATE TABLE cairn_workers (
    session_id TEXT PRIMARY KEY REFERENCES cairn_journals (session_id) ON DELETE CASCADE,
    worker_id  TEXT NOT NULL UNIQUE,
    workspace  TEXT NOT NULL,
    record     TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX cairn_workers_workspace ON cairn_workers (workspace, session_id);
CREATE TABLE cairn_run_sessions (
    run_id     TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES cairn_journals (session_id) ON DELETE CASCADE
);
CREATE INDEX cairn_run_sessions_session ON cairn_run_sessions (session_id);
"#,
    ),
    (
        3,
        "where each run's entries begin",
        r#"
ALTER TABLE cairn_run_sessions ADD COLUMN after_seq BIGINT;
"#,
    ),
];

/// The schema version this cairn writes.
pub fn current() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.0)
}

/// Bring the database to [`current`]; refuse one that is ahead of it.
pub async fn migrate(client: &mut tokio_postgres::Client) -> Result<(), StoreError> {
    let ctx = "migrating the store's schema";
    let tx = client.transaction().await.map_err(db(ctx))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])
        .await
        .map_err(db(ctx))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS cairn_schema (
            version    INTEGER PRIMARY KEY,
            what       TEXT NOT NULL,
            applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )",
    )
    .await
    .map_err(db(ctx))?;
    let at: i32 = tx
        .query_one("SELECT COALESCE(MAX(version), 0) FROM cairn_schema", &[])
        .await
        .map_err(db(ctx))?
        .get(0);
    if at > current() {
        return Err(StoreError::Schema(format!(
            "the store's schema is at version {at}; this cairn knows versions up to {}: upgrade cairn (it never writes a newer schema)",
            current()
        )));
    }
    for (version, what, sql) in MIGRATIONS.iter().filter(|m| m.0 > at) {
        tx.batch_execute(sql)
            .await
            .map_err(db(format!("schema migration {version} ({what})")))?;
        tx.execute(
            "INSERT INTO cairn_schema (version, what) VALUES ($1, $2)",
            &[version, what],
        )
        .await
        .map_err(db(ctx))?;
    }
    tx.commit().await.map_err(db(ctx))?;
    Ok(())
}

/// The version the database is at.
pub async fn version(client: &tokio_postgres::Client) -> Result<i32, StoreError> {
    Ok(client
        .query_one("SELECT COALESCE(MAX(version), 0) FROM cairn_schema", &[])
        .await
        .map_err(db("reading the store's schema version"))?
        .get(0))
}
