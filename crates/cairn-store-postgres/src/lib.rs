//! The shared store: several `cairn serve` instances on one PostgreSQL.
//!
//! Journal rows are keyed `(session_id, seq)` — a duplicate seq is
//! impossible by construction — and every append is one transaction that
//! locks the session's head row, checks the writer's lease token against
//! the session's lease row and the expected seq against the head, inserts
//! the batch and moves the head, then notifies `cairn_journal` (the relay's
//! wake-up). Run facts, checkpoints, blobs, leases and instances are rows
//! too. The schema is cairn's own, created and migrated by cairn at connect
//! ([`migrations`]); a database whose schema is newer than this cairn knows
//! is refused, never written.
//!
//! ```
//! use cairn_store_postgres::PgStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // `PgStore::connect("postgres://cairn@localhost:5432/cairn", "instance-a")`
//! // opens the store (migrating its schema) as instance `instance-a`; a
//! // URL that is not PostgreSQL's is refused, naming the form expected.
//! let refused = PgStore::connect("host=/nowhere port=banana", "instance-a").await;
//! let why = refused.err().map(|e| e.to_string()).unwrap_or_default();
//! assert!(why.contains("postgres://"), "{why}");
//! # }
//! ```

#![deny(missing_docs)]

mod catalog;
mod journal;
mod lease;
pub mod migrations;
pub mod relay;
mod ride;
mod run_index;
mod shared;

use cairn_store::StoreError;
use cairn_types::ids::SessionId;
pub use catalog::Instance;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
pub use ride::OUTAGE_BUDGET;
pub use shared::Postgres;
use std::collections::HashMap;
use std::sync::Mutex;

/// The channel appends notify on: the payload is `<session_id> <last_seq>`.
pub const CHANNEL: &str = "cairn_journal";

/// Connections per instance unless the URL's pool size says otherwise.
pub const POOL_SIZE: usize = 16;

/// A PostgreSQL store, as one instance (`holder`) sees it.
pub struct PgStore {
    pool: Pool,
    config: tokio_postgres::Config,
    holder: String,
    /// The lease token this instance holds per session: every append
    /// carries it.
    tokens: Mutex<HashMap<SessionId, u64>>,
    /// How long a write of acknowledged work waits for the database to
    /// come back (see [`ride`]).
    outage_budget: std::time::Duration,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("holder", &self.holder)
            .finish()
    }
}

/// A database error as a store error, naming what was being done:
/// [`StoreError::Unavailable`] when the database is away.
pub(crate) fn db(context: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> StoreError {
    let context = context.into();
    move |e| ride::store_error(context, &e)
}

/// A run's facts as `cairn_runs` keeps them: (status, facts JSON).
pub(crate) fn facts_row(
    facts: &cairn_types::event::RunFacts,
) -> Result<(String, String), StoreError> {
    let json = serde_json::to_string(facts).map_err(|e| StoreError::Database {
        context: format!("run {}: its facts", facts.run_id),
        message: e.to_string(),
    })?;
    let status = serde_json::to_value(facts.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    Ok((status, json))
}

/// A database error as people read it: the server's message and detail
/// when there is one, the client's otherwise.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => match d.detail() {
            Some(detail) => format!("{} ({detail})", d.message()),
            None => d.message().to_string(),
        },
        None => {
            let mut s = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(cause) = source {
                s.push_str(": ");
                s.push_str(&cause.to_string());
                source = cause.source();
            }
            s
        }
    }
}

impl PgStore {
    /// Connect to `url` (`postgres://…` or a libpq key=value string) as
    /// instance `holder`, and bring the schema to this cairn's version.
    pub async fn connect(url: &str, holder: &str) -> Result<PgStore, StoreError> {
        let config: tokio_postgres::Config =
            url.parse()
                .map_err(|e: tokio_postgres::Error| StoreError::Database {
                    context: "the store URL".into(),
                    message: format!("{} (expected postgres://user@host:port/db)", describe(&e)),
                })?;
        let manager = Manager::from_config(
            config.clone(),
            tokio_postgres::NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .build()
            .map_err(|e| StoreError::Database {
                context: "the connection pool".into(),
                message: e.to_string(),
            })?;
        let store = PgStore {
            pool,
            config,
            holder: holder.to_string(),
            tokens: Mutex::new(HashMap::new()),
            outage_budget: OUTAGE_BUDGET,
        };
        let mut client = store.client().await?;
        migrations::migrate(&mut client).await?;
        Ok(store)
    }

    /// Wait up to `budget` for the database to come back before a write of
    /// acknowledged work fails (default [`OUTAGE_BUDGET`]).
    pub fn with_outage_budget(mut self, budget: std::time::Duration) -> Self {
        self.outage_budget = budget;
        self
    }

    /// The connection settings (the relay opens its own connection to
    /// `LISTEN`).
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(e) => {
                ride::store_error("a database connection".into(), &e)
            }
            deadpool_postgres::PoolError::Timeout(_) => StoreError::Unavailable {
                context: "a database connection".into(),
                message: e.to_string(),
            },
            other => StoreError::Database {
                context: "a database connection".into(),
                message: other.to_string(),
            },
        })
    }

    fn token_of(&self, session: &SessionId) -> Option<u64> {
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
            .copied()
    }

    fn set_token(&self, session: &SessionId, token: Option<u64>) {
        let mut tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        match token {
            Some(t) => tokens.insert(session.clone(), t),
            None => tokens.remove(session),
        };
    }

    /// Register this instance's URL (other instances forward to it).
    pub async fn register_instance(&self, url: &str) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO cairn_instances (instance_id, url, seen_at) VALUES ($1, $2, now())
                 ON CONFLICT (instance_id) DO UPDATE SET url = EXCLUDED.url, seen_at = now()",
                &[&self.holder, &url],
            )
            .await
            .map_err(db("registering this instance"))?;
        Ok(())
    }

    /// Register this instance's URL when no other live process uses its
    /// name: one seen within `within` at another URL refuses it (two
    /// processes with one name would share every lease token).
    pub async fn claim_instance(
        &self,
        url: &str,
        within: std::time::Duration,
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "INSERT INTO cairn_instances AS i (instance_id, url, seen_at) VALUES ($1, $2, now())
                 ON CONFLICT (instance_id) DO UPDATE SET url = EXCLUDED.url, seen_at = now()
                 WHERE i.url = EXCLUDED.url OR i.seen_at <= now() - $3 * interval '1 millisecond'
                 RETURNING 1",
                &[&self.holder, &url, &(within.as_secs_f64() * 1000.0)],
            )
            .await
            .map_err(db("registering this instance"))?;
        if row.is_some() {
            return Ok(());
        }
        let other = self.instance_url(&self.holder).await?.unwrap_or_default();
        Err(StoreError::Database {
            context: "registering this instance".into(),
            message: format!(
                "instance name {:?} is in use by a running instance at {other}: give this one another name (--instance), or wait until that one has been gone for the lease time",
                self.holder
            ),
        })
    }

    /// The URL instance `holder` registered.
    pub async fn instance_url(&self, holder: &str) -> Result<Option<String>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT url FROM cairn_instances WHERE instance_id = $1",
                &[&holder],
            )
            .await
            .map_err(db("reading an instance's URL"))?;
        Ok(row.map(|r| r.get(0)))
    }
}

fn seq_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
