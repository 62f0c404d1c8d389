//! The PostgreSQL store: several vantages share one database, each with a log of its own
//! ([`PgLedger`]: its entries chained from seq 1, its Merkle tree, its checkpoints signed by its own
//! reporter key; no head that every vantage serialises on). Entries are sealed, hashed and signed by
//! `ledger/` exactly as SQLite's are (`seal_canonical`, `Frontier`, `tlog`); blobs are compressed
//! as SQLite compresses them (`KeptBlob`) and shared by every vantage. The schema is versioned:
//! `state/postgres/NNNN-*.sql`, applied in order once each, recorded in `schema_migration`
//! ([`MIGRATIONS`]). Connections come from a small pool (deadpool-postgres) whose connections run
//! on a runtime of the store's own, so the synchronous [`LedgerLog`] calls block only their caller.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use sha2::{Digest, Sha256};
use tokio_postgres::{GenericClient, NoTls};

use super::sqlite::{KeptBlob, build_dictionary, decode_blob};
use super::{
    LedgerLog, Named, NewEntry, NewRecord, Prepared, ReadEntry, Store, StoreError, check_tree_notes,
};

mod store;
use super::lease::Fence;
use crate::ledger::chain::{
    Broken, Checkpoint, StoredEntry, Trusted, Verifier, VerifySummary, checkpoint_message,
    seal_canonical,
};
use crate::ledger::key::ReporterKey;
use crate::ledger::merkle::{self, Frontier, Hash, leaf_hash};
use crate::ledger::tlog::{self, TreeNote, TreeWalk};
use crate::rubric::Rubric;

/// One versioned step of the schema.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration this build knows, in order: a database is brought to the last one when
/// opened; one that has applied a migration this build does not know is refused.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "ledger",
        sql: include_str!("../../state/postgres/0001-ledger.sql"),
    },
    Migration {
        version: 2,
        name: "lease",
        sql: include_str!("../../state/postgres/0002-lease.sql"),
    },
    Migration {
        version: 3,
        name: "store",
        sql: include_str!("../../state/postgres/0003-store.sql"),
    },
    Migration {
        version: 4,
        name: "spend",
        sql: include_str!("../../state/postgres/0004-spend.sql"),
    },
    Migration {
        version: 5,
        name: "free-work",
        sql: include_str!("../../state/postgres/0005-free-work.sql"),
    },
];

/// The schema this build reads and writes (the last migration).
pub const SCHEMA_ID: &str = "x402-probe.postgres/5";

/// Serialises migrations across processes (`pg_advisory_xact_lock`): any fixed number.
const MIGRATION_LOCK: i64 = 0x7840_2a21;

/// Connections per pool: a vantage's writer, its readers and its leases.
const POOL_SIZE: usize = 8;

/// How long connecting to the server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a caller waits for a connection of the pool.
const POOL_WAIT: Duration = Duration::from_secs(30);

/// Entries read per round trip by a scan or a verification.
const SCAN_PAGE: i64 = 1024;

/// Rows inserted per statement by `store copy`.
const COPY_BATCH: usize = 512;

/// A database URL as shown in errors and output: without its password.
pub fn shown_url(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    format!(
        "postgres://{}@{}:{}/{}",
        config.get_user().unwrap_or(""),
        hosts.join(","),
        if ports.is_empty() {
            "5432".into()
        } else {
            ports.join(",")
        },
        config.get_dbname().unwrap_or("")
    )
}

/// What a PostgreSQL error says: the server's message (with its detail), or the client's error
/// with its causes (a refused connection, a timeout).
pub(crate) fn pg_why(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return match db.detail() {
            Some(detail) => format!("{} ({detail})", db.message()),
            None => db.message().to_string(),
        };
    }
    let mut why = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        why.push_str(": ");
        why.push_str(&s.to_string());
        source = s.source();
    }
    why
}

/// A pool of connections to one database, brought to this build's schema. Its connections run
/// on the runtime that first awaited them (the store's own for a [`PgLedger`]).
#[derive(Clone)]
pub struct PgPool {
    pool: Pool,
    url: Arc<str>,
}

impl std::fmt::Debug for PgPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgPool").field("url", &self.url).finish()
    }
}

impl PgPool {
    /// Connects to `url` (a `postgres://` URL or `key=value` string) and applies the migrations
    /// it lacks. A database that cannot be reached is a clear error at once (within the connect
    /// timeout), never a wait.
    pub async fn connect(url: &str) -> Result<PgPool, StoreError> {
        let mut config: tokio_postgres::Config =
            url.parse()
                .map_err(|e: tokio_postgres::Error| StoreError::PostgresUnreachable {
                    url: "(the configured URL)".into(),
                    context: "reading the database URL",
                    why: pg_why(&e),
                })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let shown: Arc<str> = shown_url(&config).into();
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| StoreError::PostgresUnreachable {
                url: shown.to_string(),
                context: "making the connection pool",
                why: e.to_string(),
            })?;
        let pool = PgPool { pool, url: shown };
        let mut client = pool.client("connecting").await?;
        migrate(&mut client, &pool.url).await?;
        Ok(pool)
    }

    /// The database's URL without its password.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A connection of the pool.
    pub async fn client(
        &self,
        context: &'static str,
    ) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(|e| {
            let why = match &e {
                deadpool_postgres::PoolError::Backend(e) => pg_why(e),
                other => other.to_string(),
            };
            StoreError::PostgresUnreachable {
                url: self.url.to_string(),
                context,
                why,
            }
        })
    }

    /// Maps a statement's error, naming what was being done: a lost connection (the server
    /// gone, shutting down, or refusing connections) is [`StoreError::PostgresUnreachable`],
    /// what the daemon waits out; anything else [`StoreError::Postgres`].
    pub(crate) fn pg(&self, context: &'static str) -> impl Fn(tokio_postgres::Error) -> StoreError {
        let url = self.url.clone();
        move |e| {
            let (url, why) = (url.to_string(), pg_why(&e));
            if connection_lost(&e) {
                StoreError::PostgresUnreachable { url, context, why }
            } else {
                StoreError::Postgres { url, context, why }
            }
        }
    }

    /// The migrations applied to the database, in order (version, name).
    pub async fn applied_migrations(&self) -> Result<Vec<(i32, String)>, StoreError> {
        let client = self.client("reading the schema").await?;
        let rows = client
            .query(
                "SELECT version, name FROM schema_migration ORDER BY version",
                &[],
            )
            .await
            .map_err(self.pg("reading the schema"))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }
}

/// Whether a statement failed because the connection is gone: closed, broken (an I/O error), or
/// ended by the server (SQLSTATE class 08, connection exception, and 57P, the server shutting
/// down or refusing connections).
fn connection_lost(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        let code = code.code();
        return code.starts_with("08") || code.starts_with("57P");
    }
    std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

/// Brings the database to the last migration, in one transaction under an advisory lock (two
/// processes opening a new database at once apply each migration once). A database that has
/// applied a migration this build does not know, or another one under a known number, is
/// refused before anything is written.
async fn migrate(client: &mut deadpool_postgres::Object, url: &str) -> Result<(), StoreError> {
    let pg = |context: &'static str| {
        move |e: tokio_postgres::Error| StoreError::Postgres {
            url: url.to_string(),
            context,
            why: pg_why(&e),
        }
    };
    let tx = client
        .transaction()
        .await
        .map_err(pg("starting a migration"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(pg("waiting for another migration"))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migration (
             version    integer PRIMARY KEY,
             name       text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await
    .map_err(pg("making the migrations table"))?;
    let applied = tx
        .query(
            "SELECT version, name FROM schema_migration ORDER BY version",
            &[],
        )
        .await
        .map_err(pg("reading the applied migrations"))?;
    for (i, row) in applied.iter().enumerate() {
        let (version, name): (i32, String) = (row.get(0), row.get(1));
        let known = MIGRATIONS
            .get(i)
            .filter(|m| m.version == version && m.name == name);
        if known.is_none() {
            return Err(StoreError::Schema {
                path: url.to_string(),
                found: format!("migration {version} ({name})"),
                expected: SCHEMA_ID,
            });
        }
    }
    for m in &MIGRATIONS[applied.len()..] {
        tx.batch_execute(m.sql)
            .await
            .map_err(pg("applying a migration"))?;
        tx.execute(
            "INSERT INTO schema_migration (version, name) VALUES ($1, $2)",
            &[&m.version, &m.name],
        )
        .await
        .map_err(pg("recording a migration"))?;
    }
    if let Some((id, bytes)) = build_dictionary() {
        tx.execute(
            "INSERT INTO dictionary (id, bytes) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
            &[&i64::from(id), &bytes],
        )
        .await
        .map_err(pg("writing the observation dictionary"))?;
    }
    tx.commit().await.map_err(pg("committing a migration"))
}

/// One vantage's log in a shared PostgreSQL database (see the module's text). Its synchronous
/// calls may be made from any thread, an async runtime's included (they then block it).
pub struct PgLedger {
    pool: PgPool,
    /// The store's own runtime, on which its connections run (`None` once dropped).
    runtime: Option<tokio::runtime::Runtime>,
    vantage: i32,
    name: String,
    public_key: [u8; 32],
    rubrics: RwLock<Vec<Rubric>>,
    dictionaries: Mutex<HashMap<u32, Arc<Vec<u8>>>>,
    /// The tree's right edge as of this handle's last append (read again when another handle of
    /// the same vantage appended).
    frontier: Mutex<Option<Frontier>>,
}

impl std::fmt::Debug for PgLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLedger")
            .field("url", &self.pool.url)
            .field("vantage", &self.name)
            .finish_non_exhaustive()
    }
}

impl Drop for PgLedger {
    fn drop(&mut self) {
        // Without waiting: dropping a runtime may happen inside another runtime's task.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl PgLedger {
    /// Opens vantage `name`'s log in the database at `url` (migrated first), registering the
    /// vantage with `public_key` (its reporter key's) when new. Refused: a name registered with
    /// another key, a key registered under another name.
    pub fn open(url: &str, name: &str, public_key: [u8; 32]) -> Result<PgLedger, StoreError> {
        let runtime = store_runtime()?;
        let connected = block(&runtime, async {
            let pool = PgPool::connect(url).await?;
            let vantage = register(&pool, name, &public_key).await?;
            Ok((pool, vantage))
        });
        match connected {
            Ok((pool, vantage)) => PgLedger::with_parts(runtime, pool, vantage, name, public_key),
            Err(e) => {
                // Without waiting: this may be inside another runtime's task (the daemon's start).
                runtime.shutdown_background();
                Err(e)
            }
        }
    }

    /// Opens the log of a vantage already in the database at `url` (to verify or read it):
    /// `name`, or the only vantage there when `None` (several: refused, naming them).
    pub fn open_existing(url: &str, name: Option<&str>) -> Result<PgLedger, StoreError> {
        let runtime = store_runtime()?;
        let connected = block(&runtime, async {
            let pool = PgPool::connect(url).await?;
            let client = pool.client("reading the vantages").await?;
            let rows = client
                .query(
                    "SELECT id, name, public_key FROM vantage ORDER BY name",
                    &[],
                )
                .await
                .map_err(pool.pg("reading the vantages"))?;
            Ok((pool, rows))
        });
        let (pool, rows) = match connected {
            Ok(connected) => connected,
            Err(e) => {
                runtime.shutdown_background();
                return Err(e);
            }
        };
        let found = match name {
            Some(name) => rows.iter().find(|r| r.get::<_, &str>(1) == name),
            None if rows.len() == 1 => rows.first(),
            None => None,
        };
        let Some(row) = found else {
            let names: Vec<&str> = rows.iter().map(|r| r.get(1)).collect();
            let there = if names.is_empty() {
                "the database has no vantage".to_string()
            } else {
                format!("the database has {}", names.join(", "))
            };
            let refused = StoreError::Vantage {
                url: pool.url.to_string(),
                name: name.unwrap_or("(none given)").to_string(),
                why: match name {
                    Some(_) => format!("no such vantage: {there}"),
                    None => format!("name one with --vantage: {there}"),
                },
            };
            runtime.shutdown_background();
            return Err(refused);
        };
        let name: String = row.get(1);
        let vantage = row.get(0);
        // The column is checked 32 bytes long by the schema.
        let public_key: [u8; 32] = row.get::<_, &[u8]>(2).try_into().unwrap_or([0; 32]);
        PgLedger::with_parts(runtime, pool, vantage, &name, public_key)
    }

    fn with_parts(
        runtime: tokio::runtime::Runtime,
        pool: PgPool,
        vantage: i32,
        name: &str,
        public_key: [u8; 32],
    ) -> Result<PgLedger, StoreError> {
        let ledger = PgLedger {
            pool,
            runtime: Some(runtime),
            vantage,
            name: name.to_string(),
            public_key,
            rubrics: RwLock::new(vec![Rubric::embedded_default()]),
            dictionaries: Mutex::new(HashMap::new()),
            frontier: Mutex::new(None),
        };
        ledger.load_dictionaries()?;
        Ok(ledger)
    }

    /// Stores new runs under `rubric` and reads runs derived under it, besides the embedded
    /// default (as `SqliteStore::use_rubric`).
    pub fn use_rubric(&self, rubric: &Rubric) {
        let mut rubrics = self.rubrics.write().unwrap_or_else(|p| p.into_inner());
        rubrics.retain(|r| r.sha256() != rubric.sha256());
        rubrics.insert(0, rubric.clone());
    }

    /// Also reads runs derived under `rubric`, stored under the one in use (as
    /// `SqliteStore::also_read_rubric`).
    pub fn also_read_rubric(&self, rubric: &Rubric) {
        let mut rubrics = self.rubrics.write().unwrap_or_else(|p| p.into_inner());
        if !rubrics.iter().any(|r| r.sha256() == rubric.sha256()) {
            rubrics.push(rubric.clone());
        }
    }

    pub fn vantage(&self) -> &str {
        &self.name
    }

    /// The public key this vantage's checkpoints are signed with.
    pub fn public_key(&self) -> [u8; 32] {
        self.public_key
    }

    /// The database's URL without its password.
    pub fn url(&self) -> &str {
        self.pool.url()
    }

    /// The pool (for the leases, which share the database).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Runs `f` to its end on the store's runtime, blocking the caller (on a thread of its own
    /// when the caller is itself on a runtime, where blocking in place is not allowed).
    fn run<T: Send>(&self, f: impl Future<Output = T> + Send) -> T {
        block(
            self.runtime.as_ref().expect("a live store has its runtime"),
            f,
        )
    }

    fn corrupt(&self, why: String) -> StoreError {
        StoreError::Corrupt {
            path: format!("{} (vantage {})", self.pool.url, self.name),
            why,
        }
    }

    fn load_dictionaries(&self) -> Result<(), StoreError> {
        let rows = self.run(async {
            let client = self.pool.client("reading dictionaries").await?;
            client
                .query("SELECT id, bytes FROM dictionary", &[])
                .await
                .map_err(self.pool.pg("reading dictionaries"))
        })?;
        let mut known = self.dictionaries.lock().unwrap_or_else(|p| p.into_inner());
        for r in rows {
            known.insert(r.get::<_, i64>(0) as u32, Arc::new(r.get(1)));
        }
        Ok(())
    }

    fn dictionary(&self, id: u32) -> Option<Arc<Vec<u8>>> {
        self.dictionaries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    /// The stored form of each entry, made before the transaction (as the SQLite writer's).
    fn prepare(&self, entries: Vec<NewEntry>) -> Result<Vec<(i64, Prepared)>, StoreError> {
        let rubrics = self.rubrics.read().unwrap_or_else(|p| p.into_inner());
        entries
            .into_iter()
            .map(|NewEntry { at_ms, record, .. }| {
                let prepared = match record {
                    NewRecord::Prepared(p) => p,
                    NewRecord::Plain(record) => Prepared::new(record, &rubrics[0], None, None)
                        .map_err(|e| self.corrupt(format!("an entry does not serialise: {e}")))?,
                    NewRecord::Unwritable(why) => {
                        return Err(self.corrupt(format!("an entry does not serialise: {why}")));
                    }
                };
                Ok((at_ms, prepared))
            })
            .collect()
    }

    fn read_rows(&self, rows: Vec<tokio_postgres::Row>) -> Result<Vec<ReadEntry>, StoreError> {
        rows.iter()
            .map(|r| self.read_entry(r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    /// An entry read back from its columns (seq, at_ms, body).
    fn read_entry(&self, seq: i64, at_ms: i64, body: &[u8]) -> Result<ReadEntry, StoreError> {
        let seq = seq as u64;
        let envelope: crate::ledger::chain::Envelope = serde_json::from_slice(body)
            .map_err(|e| self.corrupt(format!("entry {seq} does not parse: {e}")))?;
        Ok(ReadEntry {
            seq,
            at_ms,
            record: self.read_back(seq, envelope.record)?,
        })
    }

    /// A stored record as every reader sees it (`ledger::stored::from_stored`), as SQLite's.
    fn read_back(
        &self,
        seq: u64,
        record: crate::ledger::record::StoredRecord,
    ) -> Result<crate::ledger::record::Record, StoreError> {
        let rubrics = self.rubrics.read().unwrap_or_else(|p| p.into_inner());
        let mut failed = None;
        let read =
            crate::ledger::stored::from_stored(record, &rubrics, &mut |sha| match LedgerLog::blob(
                self, sha,
            ) {
                Ok(bytes) => bytes,
                Err(e) => {
                    failed = Some(e);
                    None
                }
            });
        if let Some(e) = failed {
            return Err(e);
        }
        read.map_err(|e| {
            StoreError::Broken(Broken {
                seq,
                why: e.to_string(),
            })
        })
    }

    /// The right edge of this vantage's stored tree of `size` entries, read in `tx`.
    async fn frontier_in<C: GenericClient + Sync>(
        &self,
        c: &C,
        size: u64,
    ) -> Result<Frontier, StoreError> {
        let kept = self
            .frontier
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(f) = kept.filter(|f| f.size() == size) {
            return Ok(f);
        }
        let mut stack = Vec::new();
        for (level, idx) in merkle::frontier_nodes(size) {
            let row = if level == 0 {
                c.query_opt(
                    "SELECT hash FROM entry WHERE vantage = $1 AND seq = $2",
                    &[&self.vantage, &(idx as i64 + 1)],
                )
                .await
            } else {
                c.query_opt(
                    "SELECT hash FROM tree WHERE vantage = $1 AND level = $2 AND idx = $3",
                    &[&self.vantage, &(level as i32), &(idx as i64)],
                )
                .await
            }
            .map_err(self.pool.pg("reading the tree's right edge"))?;
            let hash: Option<Hash> = row.and_then(|r| r.get::<_, Vec<u8>>(0).try_into().ok());
            match hash {
                Some(h) => stack.push(h),
                None => {
                    return Err(self.corrupt(format!(
                        "the stored Merkle tree lacks node {idx} at level {level} of its right \
                         edge at {size} entries"
                    )));
                }
            }
        }
        Frontier::from_parts(size, stack)
            .ok_or_else(|| self.corrupt(format!("the tree's right edge at {size} entries")))
    }

    /// Locks this vantage's log for the transaction (appends and checkpoints of one vantage
    /// are serialised; other vantages' are not) and reads its head.
    async fn lock_head<C: GenericClient + Sync>(&self, c: &C) -> Result<(u64, Hash), StoreError> {
        c.execute(
            "SELECT 1 FROM vantage WHERE id = $1 FOR UPDATE",
            &[&self.vantage],
        )
        .await
        .map_err(self.pool.pg("locking the vantage's log"))?;
        head_in(c, self.vantage)
            .await
            .map_err(self.pool.pg("reading the head"))
    }

    /// Copies a verified SQLite store into this vantage's empty log, in one transaction: the
    /// dictionaries and blobs as kept, the entries as stored (bytes and hashes unchanged, the
    /// tree's nodes computed from them as an append computes them), the checkpoints and tree
    /// checkpoints as signed, and the working state (subjects, score rows, folded states,
    /// declarations, run ids, the outbox). `copied(entries so far, entries in all)` tells the progress.
    pub fn import_sqlite(
        &self,
        source: &super::SqliteStore,
        copied: &mut dyn FnMut(u64, u64),
    ) -> Result<u64, StoreError> {
        let (total, _) = super::Store::head(source)?;
        let checkpoints = super::Store::checkpoints(source)?;
        let notes = super::Store::tree_notes(source)?;
        let dictionaries = source.kept_dictionaries()?;
        let working = source.working_state()?;
        let client = self.run(self.pool.client("copying a ledger"))?;
        let begun = self.run(async {
            client
                .batch_execute("BEGIN")
                .await
                .map_err(self.pool.pg("starting the copy"))?;
            let (head, _) = self.lock_head(&**client).await?;
            if head != 0 {
                return Err(self.corrupt(format!(
                    "the vantage's log already has {head} entries: a ledger is copied into an \
                     empty one only"
                )));
            }
            for (id, bytes) in &dictionaries {
                client
                    .execute(
                        "INSERT INTO dictionary (id, bytes) VALUES ($1, $2)
                         ON CONFLICT (id) DO NOTHING",
                        &[&i64::from(*id), bytes],
                    )
                    .await
                    .map_err(self.pool.pg("copying a dictionary"))?;
            }
            Ok(())
        });
        let copy = begun.and_then(|()| {
            let mut blobs = Vec::with_capacity(COPY_BATCH);
            source.each_kept_blob(&mut |blob| {
                blobs.push(blob);
                if blobs.len() == COPY_BATCH {
                    self.run(insert_blobs(&**client, &blobs))
                        .map_err(self.pool.pg("copying blobs"))?;
                    blobs.clear();
                }
                Ok(())
            })?;
            self.run(insert_blobs(&**client, &blobs))
                .map_err(self.pool.pg("copying blobs"))?;
            let mut frontier = Frontier::new();
            let mut rows = Vec::with_capacity(COPY_BATCH);
            let mut nodes = Vec::new();
            let mut failed = None;
            let mut flush = |rows: &mut Vec<StoredEntry>, nodes: &mut Vec<(u32, u64, Hash)>| {
                let done = self.run(async {
                    insert_entries(&**client, self.vantage, rows).await?;
                    insert_nodes(&**client, self.vantage, nodes).await
                });
                copied(rows.last().map_or(0, |r| r.seq), total);
                rows.clear();
                nodes.clear();
                done.map_err(self.pool.pg("copying entries"))
            };
            super::Store::scan(source, 0, &mut |row| {
                frontier
                    .push_completing(row.hash, |level, idx, hash| nodes.push((level, idx, hash)));
                rows.push(row);
                if rows.len() == COPY_BATCH
                    && let Err(e) = flush(&mut rows, &mut nodes)
                {
                    failed = Some(e);
                    return Err(Broken {
                        seq: 0,
                        why: "the copy stopped".into(),
                    });
                }
                Ok(())
            })
            .map_err(|e| failed.take().unwrap_or(e))?;
            flush(&mut rows, &mut nodes)?;
            self.run(async {
                for c in &checkpoints {
                    insert_checkpoint(&**client, self.vantage, c).await?;
                }
                for n in &notes {
                    insert_note(&**client, self.vantage, n).await?;
                }
                store::copy_working_state(&**client, self.vantage, &working).await?;
                client.batch_execute("COMMIT").await
            })
            .map_err(self.pool.pg("copying checkpoints"))?;
            *self.frontier.lock().unwrap_or_else(|p| p.into_inner()) = Some(frontier);
            Ok(total)
        });
        if copy.is_err() {
            // Nothing of a failed copy stays (and the connection goes back to the pool clean).
            let _ = self.run(client.batch_execute("ROLLBACK"));
        }
        copy
    }
}

/// The runtime a store's connections run on (one worker: the store's calls block their caller).
pub(crate) fn store_runtime() -> Result<tokio::runtime::Runtime, StoreError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("postgres-store")
        .enable_all()
        .build()
        .map_err(|e| StoreError::PostgresUnreachable {
            url: "(not connected)".into(),
            context: "starting the store's runtime",
            why: e.to_string(),
        })
}

/// Runs `f` on `runtime`, from any thread.
pub(crate) fn block<T: Send>(
    runtime: &tokio::runtime::Runtime,
    f: impl Future<Output = T> + Send,
) -> T {
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|scope| {
            scope
                .spawn(|| runtime.block_on(f))
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    } else {
        runtime.block_on(f)
    }
}

/// Registers vantage `name` with `public_key`, or finds it registered with that key.
async fn register(pool: &PgPool, name: &str, public_key: &[u8; 32]) -> Result<i32, StoreError> {
    let refused = |why: String| StoreError::Vantage {
        url: pool.url.to_string(),
        name: name.to_string(),
        why,
    };
    if name.is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
        return Err(refused(
            "a vantage's name is 1 to 64 characters, none a control character".into(),
        ));
    }
    let client = pool.client("registering the vantage").await?;
    let key: &[u8] = public_key;
    client
        .execute(
            "INSERT INTO vantage (name, public_key) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&name, &key],
        )
        .await
        .map_err(pool.pg("registering the vantage"))?;
    let by_name = client
        .query_opt(
            "SELECT id, public_key FROM vantage WHERE name = $1",
            &[&name],
        )
        .await
        .map_err(pool.pg("reading the vantage"))?;
    if let Some(row) = by_name {
        let registered: Vec<u8> = row.get(1);
        if registered != key {
            return Err(refused(format!(
                "it is registered with reporter key {}, not with {}",
                hex::encode(registered),
                hex::encode(key)
            )));
        }
        return Ok(row.get(0));
    }
    let other = client
        .query_opt("SELECT name FROM vantage WHERE public_key = $1", &[&key])
        .await
        .map_err(pool.pg("reading the vantage"))?;
    Err(refused(match other {
        Some(row) => format!(
            "its reporter key {} is vantage {:?}'s (each vantage signs with its own key)",
            hex::encode(key),
            row.get::<_, String>(0)
        ),
        None => "it could not be registered".into(),
    }))
}

async fn head_in<C: GenericClient + Sync>(
    c: &C,
    vantage: i32,
) -> Result<(u64, Hash), tokio_postgres::Error> {
    let row = c
        .query_opt(
            "SELECT seq, hash FROM entry WHERE vantage = $1 ORDER BY seq DESC LIMIT 1",
            &[&vantage],
        )
        .await?;
    Ok(match row {
        None => (0, [0; 32]),
        Some(r) => (
            r.get::<_, i64>(0) as u64,
            r.get::<_, Vec<u8>>(1).try_into().unwrap_or([0; 32]),
        ),
    })
}

async fn insert_blobs<C: GenericClient + Sync>(
    c: &C,
    blobs: &[KeptBlob],
) -> Result<(), tokio_postgres::Error> {
    if blobs.is_empty() {
        return Ok(());
    }
    let keys: Vec<&[u8]> = blobs.iter().map(|b| b.sha256().as_slice()).collect();
    let codecs: Vec<i16> = blobs.iter().map(|b| b.codec() as i16).collect();
    let bytes: Vec<&[u8]> = blobs.iter().map(KeptBlob::bytes).collect();
    c.execute(
        "INSERT INTO blob (sha256, codec, bytes)
         SELECT * FROM unnest($1::bytea[], $2::smallint[], $3::bytea[])
         ON CONFLICT (sha256) DO NOTHING",
        &[&keys, &codecs, &bytes],
    )
    .await?;
    Ok(())
}

async fn insert_entries<C: GenericClient + Sync>(
    c: &C,
    vantage: i32,
    rows: &[StoredEntry],
) -> Result<(), tokio_postgres::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let seqs: Vec<i64> = rows.iter().map(|r| r.seq as i64).collect();
    let at: Vec<i64> = rows.iter().map(|r| r.at_ms).collect();
    let kinds: Vec<&str> = rows.iter().map(|r| r.kind.as_str()).collect();
    let subjects: Vec<Option<&str>> = rows.iter().map(|r| r.subject.as_deref()).collect();
    let prevs: Vec<&[u8]> = rows.iter().map(|r| r.prev.as_slice()).collect();
    let hashes: Vec<&[u8]> = rows.iter().map(|r| r.hash.as_slice()).collect();
    let bodies: Vec<&[u8]> = rows.iter().map(|r| r.body.as_slice()).collect();
    c.execute(
        "INSERT INTO entry (vantage, seq, at_ms, kind, subject, prev, hash, body)
         SELECT $1::integer, * FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::text[],
                                           $6::bytea[], $7::bytea[], $8::bytea[])",
        &[
            &vantage, &seqs, &at, &kinds, &subjects, &prevs, &hashes, &bodies,
        ],
    )
    .await?;
    Ok(())
}

async fn insert_nodes<C: GenericClient + Sync>(
    c: &C,
    vantage: i32,
    nodes: &[(u32, u64, Hash)],
) -> Result<(), tokio_postgres::Error> {
    if nodes.is_empty() {
        return Ok(());
    }
    let levels: Vec<i32> = nodes.iter().map(|n| n.0 as i32).collect();
    let idxs: Vec<i64> = nodes.iter().map(|n| n.1 as i64).collect();
    let hashes: Vec<&[u8]> = nodes.iter().map(|n| n.2.as_slice()).collect();
    c.execute(
        "INSERT INTO tree (vantage, level, idx, hash)
         SELECT $1::integer, * FROM unnest($2::integer[], $3::bigint[], $4::bytea[])",
        &[&vantage, &levels, &idxs, &hashes],
    )
    .await?;
    Ok(())
}

async fn insert_checkpoint<C: GenericClient + Sync>(
    c: &C,
    vantage: i32,
    cp: &Checkpoint,
) -> Result<(), tokio_postgres::Error> {
    c.execute(
        "INSERT INTO checkpoint (vantage, seq, hash, at_ms, public_key, signature)
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            &vantage,
            &(cp.seq as i64),
            &cp.hash.as_slice(),
            &cp.at_ms,
            &cp.public_key.as_slice(),
            &cp.signature.as_slice(),
        ],
    )
    .await?;
    Ok(())
}

async fn insert_note<C: GenericClient + Sync>(
    c: &C,
    vantage: i32,
    note: &TreeNote,
) -> Result<(), tokio_postgres::Error> {
    c.execute(
        "INSERT INTO tree_checkpoint (vantage, size, at_ms, note) VALUES ($1, $2, $3, $4)",
        &[&vantage, &(note.size as i64), &note.at_ms, &note.note],
    )
    .await?;
    Ok(())
}

impl PgLedger {
    /// Appends entries in one transaction; with a fence, only while this vantage holds its
    /// lease (checked just before the commit, its row locked until then, and the transaction
    /// ended by the server if it idles past the fence's limit after the check: see [`Fence`]).
    pub(super) fn append_in(
        &self,
        entries: Vec<NewEntry>,
        fence: Option<&Fence>,
    ) -> Result<Vec<u64>, StoreError> {
        let mut indexes = Vec::with_capacity(entries.len());
        let entries: Vec<NewEntry> = entries
            .into_iter()
            .map(|mut e| {
                indexes.push(e.index.take());
                e
            })
            .collect();
        let prepared = self.prepare(entries)?;
        let frontier = self.run(async {
            let mut client = self.pool.client("appending").await?;
            let tx = client
                .transaction()
                .await
                .map_err(self.pool.pg("starting an append"))?;
            let (mut seq, mut prev) = self.lock_head(&*tx).await?;
            let mut frontier = self.frontier_in(&*tx, seq).await?;
            let mut rows = Vec::with_capacity(prepared.len());
            let mut nodes = Vec::new();
            let mut blobs = Vec::new();
            let mut indexed = Vec::new();
            for ((at_ms, p), index) in prepared.into_iter().zip(indexes) {
                seq += 1;
                // As SQLite's: an entry's index rows are kept when it is about a subject.
                if let (Some(subject), Some(index)) = (p.stored.subject(), index) {
                    indexed.push((subject.to_string(), seq, index(seq)));
                }
                let stored = seal_canonical(seq, at_ms, prev, &p.stored, &p.record_bytes);
                frontier.push_completing(stored.hash, |level, idx, hash| {
                    nodes.push((level, idx, hash))
                });
                prev = stored.hash;
                blobs.extend(p.blobs);
                rows.push(stored);
            }
            insert_blobs(&*tx, &blobs)
                .await
                .map_err(self.pool.pg("writing blobs"))?;
            insert_entries(&*tx, self.vantage, &rows)
                .await
                .map_err(self.pool.pg("writing entries"))?;
            insert_nodes(&*tx, self.vantage, &nodes)
                .await
                .map_err(self.pool.pg("writing the entries' tree nodes"))?;
            store::insert_indexes(&*tx, self.vantage, indexed)
                .await
                .map_err(self.pool.pg("writing the entries' index rows"))?;
            // Last, so that the lease's row is locked only until the commit that follows: the
            // holder's own heartbeat waits no longer than that.
            if let Some(fence) = fence {
                self.hold_fence(&*tx, fence).await?;
            }
            tx.commit()
                .await
                .map_err(self.pool.pg("committing an append"))?;
            Ok::<_, StoreError>((frontier, rows.iter().map(|r| r.seq).collect::<Vec<_>>()))
        })?;
        let (frontier, seqs) = frontier;
        *self.frontier.lock().unwrap_or_else(|p| p.into_inner()) = Some(frontier);
        Ok(seqs)
    }

    /// [`super::lease::hold_fence`] in an append's transaction.
    async fn hold_fence<C: GenericClient + Sync>(
        &self,
        c: &C,
        fence: &Fence,
    ) -> Result<(), StoreError> {
        let held = super::lease::hold_fence(c, fence, &self.name)
            .await
            .map_err(self.pool.pg("checking the append's lease"))?;
        if held {
            Ok(())
        } else {
            Err(StoreError::LeaseLost {
                work: fence.lease.work.0.clone(),
                generation: fence.lease.generation,
            })
        }
    }
}

impl LedgerLog for PgLedger {
    fn append(&self, entries: Vec<NewEntry>) -> Result<Vec<u64>, StoreError> {
        self.append_in(entries, None)
    }

    fn head(&self) -> Result<(u64, [u8; 32]), StoreError> {
        self.run(async {
            let client = self.pool.client("reading the head").await?;
            head_in(&**client, self.vantage)
                .await
                .map_err(self.pool.pg("reading the head"))
        })
    }

    fn entries_page(&self, after: u64, limit: usize) -> Result<Vec<ReadEntry>, StoreError> {
        let rows = self.run(async {
            let client = self.pool.client("reading entries").await?;
            client
                .query(
                    "SELECT seq, at_ms, body FROM entry WHERE vantage = $1 AND seq > $2
                     ORDER BY seq LIMIT $3",
                    &[
                        &self.vantage,
                        &(after as i64),
                        &(limit.min(i64::MAX as usize) as i64),
                    ],
                )
                .await
                .map_err(self.pool.pg("reading entries"))
        })?;
        self.read_rows(rows)
    }

    fn scan(
        &self,
        after: u64,
        f: &mut dyn FnMut(StoredEntry) -> Result<(), Broken>,
    ) -> Result<(), StoreError> {
        let mut after = after as i64;
        loop {
            let rows = self.run(async {
                let client = self.pool.client("scanning entries").await?;
                client
                    .query(
                        "SELECT seq, at_ms, kind, subject, prev, hash, body FROM entry
                         WHERE vantage = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                        &[&self.vantage, &after, &SCAN_PAGE],
                    )
                    .await
                    .map_err(self.pool.pg("scanning entries"))
            })?;
            let full = rows.len() as i64 == SCAN_PAGE;
            for r in rows {
                let entry = store::stored_entry(&r)?;
                let seq = entry.seq as i64;
                after = seq;
                f(entry)?;
            }
            if !full {
                return Ok(());
            }
        }
    }

    fn blob(&self, sha256: &[u8; 32]) -> Result<Option<Vec<u8>>, StoreError> {
        let key: &[u8] = sha256;
        let row = self.run(async {
            let client = self.pool.client("reading a blob").await?;
            client
                .query_opt("SELECT codec, bytes FROM blob WHERE sha256 = $1", &[&key])
                .await
                .map_err(self.pool.pg("reading a blob"))
        })?;
        let Some(row) = row else {
            return Ok(None);
        };
        let codec = i64::from(row.get::<_, i16>(0));
        decode_blob(codec, row.get(1), &|id| self.dictionary(id))
            .map(Some)
            .ok_or_else(|| {
                self.corrupt(format!(
                    "blob {} does not decompress (codec {codec})",
                    hex::encode(sha256)
                ))
            })
    }

    fn checkpoint(&self, key: &ReporterKey, at_ms: i64) -> Result<Option<Checkpoint>, StoreError> {
        if key.public_key() != self.public_key {
            return Err(StoreError::Vantage {
                url: self.pool.url.to_string(),
                name: self.name.clone(),
                why: format!(
                    "its log is signed by {}, not by the key {} offered",
                    hex::encode(self.public_key),
                    hex::encode(key.public_key())
                ),
            });
        }
        self.run(async {
            let mut client = self.pool.client("signing a checkpoint").await?;
            let tx = client
                .transaction()
                .await
                .map_err(self.pool.pg("starting a checkpoint"))?;
            let (seq, hash) = self.lock_head(&*tx).await?;
            if seq == 0 {
                return Ok(None);
            }
            let signed: Option<i64> = tx
                .query_one(
                    "SELECT MAX(seq) FROM checkpoint WHERE vantage = $1",
                    &[&self.vantage],
                )
                .await
                .map_err(self.pool.pg("reading checkpoints"))?
                .get(0);
            if signed.is_some_and(|s| s as u64 >= seq) {
                return Ok(None);
            }
            let root = self.frontier_in(&*tx, seq).await?.root();
            let signature = key
                .sign(&checkpoint_message(seq, &hash))
                .map_err(|e| StoreError::Sign(e.to_string()))?;
            let checkpoint = Checkpoint {
                seq,
                hash,
                at_ms,
                public_key: self.public_key,
                signature,
            };
            let note = tlog::sign_tree_note(&self.public_key, seq, root, at_ms, |m| key.sign(m))
                .map_err(|e| StoreError::Sign(e.to_string()))?;
            insert_checkpoint(&*tx, self.vantage, &checkpoint)
                .await
                .map_err(self.pool.pg("writing a checkpoint"))?;
            insert_note(
                &*tx,
                self.vantage,
                &TreeNote {
                    size: seq,
                    at_ms,
                    note,
                },
            )
            .await
            .map_err(self.pool.pg("writing a tree checkpoint"))?;
            tx.commit()
                .await
                .map_err(self.pool.pg("committing a checkpoint"))?;
            Ok(Some(checkpoint))
        })
    }

    fn checkpoints(&self) -> Result<Vec<Checkpoint>, StoreError> {
        let rows = self.run(async {
            let client = self.pool.client("reading checkpoints").await?;
            client
                .query(
                    "SELECT seq, hash, at_ms, public_key, signature FROM checkpoint
                     WHERE vantage = $1 ORDER BY seq",
                    &[&self.vantage],
                )
                .await
                .map_err(self.pool.pg("reading checkpoints"))
        })?;
        rows.iter()
            .map(|r| store::read_checkpoint(r).map_err(|why| self.corrupt(why)))
            .collect()
    }

    fn tree_notes(&self) -> Result<Vec<TreeNote>, StoreError> {
        let rows = self.run(async {
            let client = self.pool.client("reading tree checkpoints").await?;
            client
                .query(
                    "SELECT size, at_ms, note FROM tree_checkpoint WHERE vantage = $1
                     ORDER BY size",
                    &[&self.vantage],
                )
                .await
                .map_err(self.pool.pg("reading tree checkpoints"))
        })?;
        Ok(rows
            .into_iter()
            .map(|r| TreeNote {
                size: r.get::<_, i64>(0) as u64,
                at_ms: r.get(1),
                note: r.get(2),
            })
            .collect())
    }

    /// Checkpoints first, then every entry in order (a checkpoint names only entries that exist
    /// by then: the log is append-only). The stored tree's nodes are not compared one by one,
    /// as SQLite's are: this store reads only its right edge, to append and sign, and a wrong node
    /// there gives a tree checkpoint whose root the entries do not give, which fails here.
    fn verify(&self, trusted: Option<&Trusted>, deep: bool) -> Result<VerifySummary, StoreError> {
        let checkpoints = LedgerLog::checkpoints(self)?;
        let notes = LedgerLog::tree_notes(self)?;
        let mut verifier = Verifier::new(&checkpoints);
        let mut walk = TreeWalk::new(&notes);
        let mut named = Named::default();
        LedgerLog::scan(self, 0, &mut |row| {
            let leaf = leaf_hash(&row.body);
            if let Some(envelope) = verifier.feed_hashed(&row, leaf, deep)? {
                named.note(row.seq, envelope.record)?;
            }
            walk.feed_leaf(leaf);
            Ok(())
        })?;
        let mut summary = verifier.finish(&checkpoints, trusted)?;
        check_tree_notes(walk, &notes, trusted, &mut summary)?;
        if deep {
            for (sha, seq) in &named.blobs {
                let broken = |why: String| StoreError::from(Broken { seq: *seq, why });
                match LedgerLog::blob(self, sha)? {
                    None => {
                        return Err(broken(format!(
                            "it names blob {}, which the store does not have",
                            hex::encode(sha)
                        )));
                    }
                    Some(bytes) if <[u8; 32]>::from(Sha256::digest(&bytes)) != *sha => {
                        return Err(broken(format!(
                            "blob {} does not hash to its address",
                            hex::encode(sha)
                        )));
                    }
                    Some(_) => {}
                }
            }
            summary.blobs_referenced = named.blobs.len() as u64;
            for page in named.derived.chunks(SCAN_PAGE as usize) {
                Store::entries_at(self, page)?;
            }
            summary.score_rows = self.verify_score_rows(&named)?;
        }
        Ok(summary)
    }
}
