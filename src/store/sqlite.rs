//! The embedded store: one SQLite file (`ledger.sqlite`) in the state directory, WAL, every commit
//! on stable storage before it returns. Schema: `state/ledger.sql`; format: `state/ledger.md`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::packed::{self, KeptCompressor, with_compressor};
use super::{
    Index, Named, NewEntry, NewOutboxEvent, NewRecord, OutboxRow, OutboxState, OutboxUpdate,
    Prepared, ReadEntry, ScoreRow, Store, StoreError, SubjectRow, SubjectShown, SubjectState,
};
use crate::ledger::chain::{
    Broken, ChainLink, Checkpoint, StoredEntry, Trusted, Verifier, VerifySummary,
    checkpoint_message, seal_canonical,
};
use crate::ledger::key::ReporterKey;
use crate::ledger::merkle::{self, FetchedNodes, Frontier, Hash, PerfectNodes, leaf_hash};
use crate::ledger::proof::{self, InclusionBundle};
use crate::ledger::record::{Record, RecordKind, StoredRecord};
use crate::ledger::stored::{self, BlobKind, NewBlob};
use crate::ledger::tlog::{self, TreeNote, TreeWalk};
use crate::rubric::Rubric;
use crate::score::headline::ScoreHeadline;
use crate::state_dir::{open_state_dir, private_store_file};
use crate::store::event_kind::EventKind;

/// The schema this build reads and writes: format 2, runs stored with their results derived and
/// repeated bytes kept once, compressed (`ledger::stored`).
pub const SCHEMA_ID: &str = "x402-probe.ledger/2";
/// Format 1: runs kept whole, results and receipts copied. Read only by `ledger migrate` and
/// `ledger verify` (which says it waits for the migration).
pub const SCHEMA_ID_1: &str = "x402-probe.ledger/1";
/// The schema file, embedded and applied on every open.
pub const SCHEMA_SQL: &str = include_str!("../../state/ledger.sql");
/// The store's file name in the state directory.
pub const STORE_FILE: &str = "ledger.sqlite";
/// Bodies at least this long are kept once, apart, addressed by their SHA-256.
pub const BLOB_MIN_BYTES: usize = stored::BODY_APART_MIN_BYTES;
/// The zstd level blobs are compressed at (fast to write; the bytes repeat little within a blob).
const BLOB_ZSTD_LEVEL: i32 = 3;
/// How a blob's bytes are kept (`blob.codec`).
const CODEC_RAW: i64 = 0;
const CODEC_ZSTD: i64 = 1;
const CODEC_ZSTD_DICTIONARY: i64 = 2;

/// The zstd dictionary a run's observation is compressed with (trained on the lab's observations:
/// `cargo bench --bench ledger -- --write-dictionary FILE`). The keys, the shape and the values
/// that every observation repeats (a run's observation is new with every run, but alike from run
/// to run) cost nothing with it. Empty: no dictionary (codec 1).
const OBSERVATION_DICTIONARY: &[u8] = include_bytes!("../ledger/observation.dict");

/// The observation dictionary ready to compress with, and its zstd id (`None`: no dictionary).
fn observation_dictionary() -> Option<&'static (zstd::dict::EncoderDictionary<'static>, u32)> {
    static DICTIONARY: std::sync::OnceLock<Option<(zstd::dict::EncoderDictionary<'static>, u32)>> =
        std::sync::OnceLock::new();
    DICTIONARY
        .get_or_init(|| {
            let id = zstd::zstd_safe::get_dict_id_from_dict(OBSERVATION_DICTIONARY)?;
            Some((
                zstd::dict::EncoderDictionary::copy(OBSERVATION_DICTIONARY, BLOB_ZSTD_LEVEL),
                id.get(),
            ))
        })
        .as_ref()
}

/// Read connections a store opened for writing keeps (WAL: readers never wait for the writer,
/// nor for another process holding the write lock).
pub const READERS: usize = 4;

/// The store: one write connection (absent in a read-only handle, [`SqliteStore::reader`]) and a
/// small pool of read connections. Every read goes to the pool, so no read waits behind a write:
/// the daemon's writer thread commits a batch while the API, the runs and the scrapes read.
pub struct SqliteStore {
    writer: Option<Arc<Mutex<Connection>>>,
    readers: Arc<Readers>,
    path: PathBuf,
    /// The rubrics a run's results may have been derived under: the writer's first (the one new
    /// runs are stored under), the embedded default always among them.
    /// Shared with the store's read-only handles ([`SqliteStore::reader`]).
    rubrics: Arc<std::sync::RwLock<Vec<Rubric>>>,
    /// The zstd dictionaries read from the ledger, by id (blobs of codec 2 name theirs).
    dictionaries: Arc<Mutex<std::collections::HashMap<u32, Arc<Vec<u8>>>>>,
    /// The stored tree's right edge and upper levels as this process knows them.
    tree: Arc<Mutex<TreeCache>>,
}

/// The pool of read connections. A read takes any free one; a read transaction held across
/// several calls ([`ReadSnapshot`]) pins one connection to its thread until it ends.
struct Readers {
    conns: Vec<Mutex<Connection>>,
    /// Which thread has pinned each connection (a read transaction open on it).
    pinned: Mutex<Vec<Option<ThreadId>>>,
    next: AtomicUsize,
}

impl Readers {
    fn new(conns: Vec<Connection>) -> Readers {
        let n = conns.len();
        Readers {
            conns: conns.into_iter().map(Mutex::new).collect(),
            pinned: Mutex::new(vec![None; n]),
            next: AtomicUsize::new(0),
        }
    }

    fn lock(&self, i: usize) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent (transactions roll back).
        self.conns[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pins(&self) -> MutexGuard<'_, Vec<Option<ThreadId>>> {
        self.pinned.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection this thread pinned, or a free unpinned one, or (all busy) one to wait for.
    fn get(&self) -> MutexGuard<'_, Connection> {
        let me = std::thread::current().id();
        let pins = self.pins();
        if let Some(i) = pins.iter().position(|p| *p == Some(me)) {
            drop(pins);
            return self.lock(i);
        }
        let n = self.conns.len();
        let start = self.start();
        let mut wait_for = None;
        let mut chosen = None;
        for k in 0..n {
            let i = (start + k) % n;
            if pins[i].is_some() {
                continue;
            }
            wait_for.get_or_insert(i);
            if let Ok(conn) = self.conns[i].try_lock() {
                chosen = Some((i, conn));
                break;
            }
        }
        drop(pins);
        if let Some((i, conn)) = chosen {
            Self::prefer(i);
            return conn;
        }
        // Every unpinned connection is busy (or, rarely, every one is pinned: a read inside
        // another thread's read transaction is still one consistent snapshot).
        self.lock(wait_for.unwrap_or(start % n))
    }

    /// Pins a connection to this thread (for a read transaction across calls).
    fn pin(&self) -> usize {
        let me = std::thread::current().id();
        let mut pins = self.pins();
        if let Some(i) = pins.iter().position(|p| *p == Some(me)) {
            return i;
        }
        let n = self.conns.len();
        let start = self.start();
        let i = (0..n)
            .map(|k| (start + k) % n)
            .find(|i| pins[*i].is_none())
            .unwrap_or(start % n);
        pins[i] = Some(me);
        Self::prefer(i);
        i
    }

    /// Where this thread's search for a connection starts: the one it used last, whose page
    /// cache holds what this thread read (measured: a thread whose reads went round the pool
    /// read each page into four caches, and single inclusion proofs paid a `pread` for pages
    /// its previous connection had). A thread's first read starts at the next in turn.
    fn start(&self) -> usize {
        READER_USED
            .with(|used| used.get())
            .unwrap_or_else(|| self.next.fetch_add(1, Ordering::Relaxed))
    }

    fn prefer(i: usize) {
        READER_USED.with(|used| used.set(Some(i)));
    }

    fn unpin(&self, i: usize) {
        self.pins()[i] = None;
    }
}

/// Opens one read connection of the pool (query-only: it can never write).
fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "query_only", "ON")?;
    stable_plans(&conn)?;
    Ok(conn)
}

/// Statements cached per connection.
const STATEMENTS_CACHED: usize = 128;

/// Plans that do not depend on the values bound to a statement: without this SQLite marks a
/// cached statement whose plan read a bound value (a `LIMIT ?`, a range on `seq`) to be prepared
/// again at every new binding, which cost a read of one subject's entries more than the read.
/// The store's statements name their indexes where it matters (and a test asserts the plans).
fn stable_plans(conn: &Connection) -> rusqlite::Result<()> {
    // Room for every statement the store caches on one connection (rusqlite keeps 16 by
    // default; past that the least recently used one is prepared again at its next use).
    conn.set_prepared_statement_cache_capacity(STATEMENTS_CACHED);
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the store in `state_dir`, which must be ours alone, as the spend
    /// store's (see [`crate::state_dir`]): the directory created 0700 and refused if group or others
    /// can write it; the store file created 0600, tightened if others can read it, refused if they
    /// can write it.
    pub fn open(state_dir: &Path) -> Result<SqliteStore, StoreError> {
        open_state_dir(state_dir)?;
        let path = state_dir.join(STORE_FILE);
        private_store_file(&path)?;
        Self::open_file(&path)
    }

    /// Opens a store file as it is (for tests and tools).
    pub fn open_file(path: &Path) -> Result<SqliteStore, StoreError> {
        let shown = path.display().to_string();
        let sql = |context: &'static str| {
            let shown = shown.clone();
            move |source| StoreError::Sqlite {
                path: shown.clone(),
                context,
                source,
            }
        };
        let conn = Connection::open(path).map_err(sql("opening"))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(sql("setting the busy timeout"))?;
        stable_plans(&conn).map_err(sql("setting the query planner"))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql("enabling WAL"))?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(sql("setting synchronous"))?;
        // Another format's file is refused before anything of ours is written into it.
        if let Some(found) = stored_format(&conn).map_err(sql("reading the schema id"))?
            && found != SCHEMA_ID
        {
            return Err(format_error(path, found));
        }
        conn.execute_batch(SCHEMA_SQL)
            .map_err(sql("applying the schema"))?;
        move_headline_column(&conn).map_err(sql("moving the score rows' headlines"))?;
        let found: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(sql("reading the schema id"))?;
        match found {
            None => {
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema', ?1)",
                    [SCHEMA_ID],
                )
                .map_err(sql("writing the schema id"))?;
            }
            Some(id) if id == SCHEMA_ID => {}
            Some(found) => return Err(format_error(path, found)),
        }
        build_missing_tree(&conn).map_err(sql("building the Merkle tree of older entries"))?;
        let mut conn = conn;
        derive_missing_headlines(&mut conn).map_err(sql("deriving the score rows' headlines"))?;
        if let Some((_, id)) = observation_dictionary() {
            conn.execute(
                "INSERT OR IGNORE INTO dictionary (id, bytes) VALUES (?1, ?2)",
                params![i64::from(*id), OBSERVATION_DICTIONARY],
            )
            .map_err(sql("writing the observation dictionary"))?;
        }
        // The WAL and shared-memory files SQLite made: private too.
        for suffix in ["-wal", "-shm"] {
            let side = PathBuf::from(format!("{}{suffix}", path.display()));
            if side.exists() {
                let _ = std::fs::set_permissions(&side, std::fs::Permissions::from_mode(0o600));
            }
        }
        let readers = (0..READERS)
            .map(|_| open_reader(path))
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql("opening a read connection"))?;
        Ok(SqliteStore {
            writer: Some(Arc::new(Mutex::new(conn))),
            readers: Arc::new(Readers::new(readers)),
            path: path.to_path_buf(),
            rubrics: Default::default(),
            dictionaries: Default::default(),
            tree: Default::default(),
        }
        .with_default_rubric())
    }

    /// A store reading through `conn` alone (a read-only open, or the old ledger a migration
    /// reads): it holds no write connection.
    fn with_connection(conn: Connection, path: &Path) -> SqliteStore {
        SqliteStore {
            writer: None,
            readers: Arc::new(Readers::new(vec![conn])),
            path: path.to_path_buf(),
            rubrics: Default::default(),
            dictionaries: Default::default(),
            tree: Default::default(),
        }
        .with_default_rubric()
    }

    /// Its rubrics start with the embedded default.
    fn with_default_rubric(self) -> SqliteStore {
        self.use_rubric(&Rubric::embedded_default());
        self
    }

    /// Stores new runs under `rubric` (their results derived under it) and reads runs derived
    /// under it, besides the embedded default and any given before.
    pub fn use_rubric(&self, rubric: &Rubric) {
        let mut rubrics = self.rubrics.write().unwrap_or_else(|p| p.into_inner());
        rubrics.retain(|r| r.sha256() != rubric.sha256());
        rubrics.insert(0, rubric.clone());
    }

    /// Reads runs derived under `rubric` too (stores nothing new under it).
    pub fn also_read_rubric(&self, rubric: &Rubric) {
        let mut rubrics = self.rubrics.write().unwrap_or_else(|p| p.into_inner());
        if !rubrics.iter().any(|r| r.sha256() == rubric.sha256()) {
            rubrics.push(rubric.clone());
        }
    }

    /// A handle on the same file that only reads, through this store's pool of read
    /// connections: it holds no write connection (every write through it is refused), so what
    /// holds it (the HTTP API) can never take the write lock nor wait for it.
    pub fn reader(&self) -> SqliteStore {
        SqliteStore {
            writer: None,
            readers: self.readers.clone(),
            path: self.path.clone(),
            rubrics: self.rubrics.clone(),
            dictionaries: self.dictionaries.clone(),
            tree: self.tree.clone(),
        }
    }

    /// Opens an existing store for reading only (the recalibration, next to a running daemon):
    /// nothing is created, no pragma or schema is written; in WAL mode it reads the last commit
    /// while the daemon writes. A WAL database whose `-wal` and `-shm` files are gone (the daemon
    /// closed it cleanly) cannot be read from a read-only directory; then, with no `-wal` file,
    /// so no writer, the file is read as immutable.
    pub fn open_read_only(path: &Path) -> Result<SqliteStore, StoreError> {
        match Self::open_read_only_with(path, false) {
            Err(e) if !PathBuf::from(format!("{}-wal", path.display())).exists() => {
                Self::open_read_only_with(path, true).map_err(|_| e)
            }
            other => other,
        }
    }

    fn open_read_only_with(path: &Path, immutable: bool) -> Result<SqliteStore, StoreError> {
        use rusqlite::OpenFlags;
        let shown = path.display().to_string();
        let sql = |context: &'static str| {
            let shown = shown.clone();
            move |source| StoreError::Sqlite {
                path: shown.clone(),
                context,
                source,
            }
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = if immutable {
            // A URI path: percent-encode what a URI gives meaning to.
            let mut uri = String::from("file:");
            for b in path.as_os_str().as_encoded_bytes() {
                if b.is_ascii() && !b"%?#".contains(b) {
                    uri.push(char::from(*b));
                } else {
                    uri.push_str(&format!("%{b:02X}"));
                }
            }
            uri.push_str("?immutable=1");
            Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI)
        } else {
            Connection::open_with_flags(path, flags)
        }
        .map_err(sql("opening read-only"))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(sql("setting the busy timeout"))?;
        stable_plans(&conn).map_err(sql("setting the query planner"))?;
        let found: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(sql("reading the schema id"))?;
        if found.as_deref() != Some(SCHEMA_ID) {
            return Err(format_error(path, found.unwrap_or_default()));
        }
        Ok(SqliteStore::with_connection(conn, path))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A read connection from the pool.
    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.readers.get()
    }

    /// The write connection (refused in a read-only handle).
    fn writer(&self) -> Result<MutexGuard<'_, Connection>, StoreError> {
        let writer = self.writer.as_ref().ok_or_else(|| StoreError::ReadOnly {
            path: self.path.display().to_string(),
        })?;
        // A panic while holding the lock cannot leave SQLite inconsistent (transactions roll back).
        Ok(writer.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The process's knowledge of the stored tree.
    fn tree_cache(&self) -> MutexGuard<'_, TreeCache> {
        // Nothing in it is left half-changed by a panic (each change is one assignment or push).
        self.tree.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sql(&self, context: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |source| StoreError::Sqlite {
            path: self.path.display().to_string(),
            context,
            source,
        }
    }

    fn corrupt(&self, why: String) -> StoreError {
        StoreError::Corrupt {
            path: self.path.display().to_string(),
            why,
        }
    }

    /// A declaration row read back (one that does not read is `Corrupt`).
    fn declaration(
        &self,
        subject: &str,
        row: &[u8],
    ) -> Result<crate::evidence::declared::Declared, StoreError> {
        serde_json::from_slice(row)
            .map_err(|e| self.corrupt(format!("a declaration of {subject} does not read: {e}")))
    }

    fn read_entries<P: rusqlite::Params>(
        &self,
        sql: &str,
        params: P,
    ) -> Result<Vec<ReadEntry>, StoreError> {
        let conn = self.conn();
        // Cached: a few statements, each read once per subject at the start.
        let mut stmt = conn
            .prepare_cached(sql)
            .map_err(self.sql("reading entries"))?;
        let rows = stmt
            .query_map(params, |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, Vec<u8>>(2)?,
                ))
            })
            .map_err(self.sql("reading entries"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("reading entries"))?;
        drop(stmt);
        drop(conn);
        rows.into_iter()
            .map(|(seq, at_ms, body)| {
                let envelope: crate::ledger::chain::Envelope = serde_json::from_slice(&body)
                    .map_err(|e| self.corrupt(format!("entry {seq} does not parse: {e}")))?;
                Ok(ReadEntry {
                    seq: seq as u64,
                    at_ms,
                    record: self.read_back(seq as u64, envelope.record)?,
                })
            })
            .collect()
    }

    /// A stored record as every reader sees it (`ledger::stored::from_stored`: blobs put back, a
    /// run's results derived and checked against its hash). An entry that does not read back is
    /// named.
    pub(crate) fn read_back(&self, seq: u64, record: StoredRecord) -> Result<Record, StoreError> {
        let rubrics = self.rubrics.read().unwrap_or_else(|p| p.into_inner());
        let mut failed = None;
        let read = stored::from_stored(record, &rubrics, &mut |sha| match self.blob(sha) {
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
}

/// The schema id a file records, when it has a `meta` table (`None`: a new file).
fn stored_format(conn: &Connection) -> rusqlite::Result<Option<String>> {
    let has_meta: i64 = conn.query_row(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
        [],
        |r| r.get(0),
    )?;
    if has_meta == 0 {
        return Ok(None);
    }
    conn.query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
        r.get(0)
    })
    .optional()
}

/// A file of another format: format 1 waits for `ledger migrate`; anything else is refused.
fn format_error(path: &Path, found: String) -> StoreError {
    if found == SCHEMA_ID_1 {
        StoreError::NeedsMigration {
            path: path.display().to_string(),
            state_dir: path
                .parent()
                .map_or_else(|| ".".into(), |d| d.display().to_string()),
            found,
            expected: SCHEMA_ID,
        }
    } else {
        StoreError::Schema {
            path: path.display().to_string(),
            found,
            expected: SCHEMA_ID,
        }
    }
}

const INSERT_BLOB: &str = "INSERT OR IGNORE INTO blob (sha256, codec, bytes) VALUES (?1, ?2, ?3)";

thread_local! {
    /// The read connection this thread took last (an index into a pool of [`READERS`]; a hint
    /// only, so one shared by the stores a process opens is harmless).
    static READER_USED: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
    /// What [`KeptBlob::new`] compresses an observation with (the plain blobs use
    /// `packed::PLAIN_COMPRESSOR`).
    static OBSERVATION_COMPRESSOR: KeptCompressor = const { std::cell::RefCell::new(None) };
}

/// A blob as the store keeps it: its address, its codec and the kept bytes (compressed when
/// that is smaller). Made before the writer's transaction when the entry is prepared.
#[derive(Debug, Clone)]
pub struct KeptBlob {
    sha256: [u8; 32],
    codec: i64,
    bytes: Vec<u8>,
}

impl KeptBlob {
    /// A blob as read from a store (copied as kept, its codec and bytes unchanged).
    pub(crate) fn kept(sha256: [u8; 32], codec: i64, bytes: Vec<u8>) -> KeptBlob {
        KeptBlob {
            sha256,
            codec,
            bytes,
        }
    }

    pub(crate) fn sha256(&self) -> &[u8; 32] {
        &self.sha256
    }

    pub(crate) fn codec(&self) -> i64 {
        self.codec
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn new(blob: NewBlob) -> KeptBlob {
        let NewBlob {
            sha256,
            bytes,
            kind,
        } = blob;
        let compressed = match (kind, observation_dictionary()) {
            (BlobKind::Observation, Some((dictionary, _))) => with_compressor(
                &OBSERVATION_COMPRESSOR,
                || zstd::bulk::Compressor::with_prepared_dictionary(dictionary),
                &bytes,
            )
            .map(|c| (CODEC_ZSTD_DICTIONARY, c)),
            // What `zstd::bulk::compress` does, with the context kept.
            _ => with_compressor(
                &packed::PLAIN_COMPRESSOR,
                || zstd::bulk::Compressor::new(BLOB_ZSTD_LEVEL),
                &bytes,
            )
            .map(|c| (CODEC_ZSTD, c)),
        };
        match compressed {
            Ok((codec, c)) if c.len() < bytes.len() => KeptBlob {
                sha256,
                codec,
                bytes: c,
            },
            _ => KeptBlob {
                sha256,
                codec: CODEC_RAW,
                bytes,
            },
        }
    }

    /// Keeps it once (a blob kept before is left as it is), through a prepared statement.
    fn insert(&self, stmt: &mut rusqlite::CachedStatement<'_>) -> rusqlite::Result<()> {
        stmt.execute(params![self.sha256.as_slice(), self.codec, self.bytes])?;
        Ok(())
    }
}

/// A blob's bytes as any store keeps them (codec and kept bytes), uncompressed; `dictionary`
/// gives a zstd dictionary by its id (`None`: an unknown codec, zstd that does not decompress,
/// or a dictionary the store does not have).
pub(crate) fn decode_blob(
    codec: i64,
    kept: Vec<u8>,
    dictionary: &dyn Fn(u32) -> Option<Arc<Vec<u8>>>,
) -> Option<Vec<u8>> {
    match codec {
        CODEC_RAW => Some(kept),
        CODEC_ZSTD => zstd::stream::decode_all(kept.as_slice()).ok(),
        CODEC_ZSTD_DICTIONARY => {
            let id = zstd::zstd_safe::get_dict_id_from_frame(&kept)?;
            let dictionary = dictionary(id.get())?;
            let mut out = Vec::new();
            let mut decoder =
                zstd::stream::read::Decoder::with_dictionary(kept.as_slice(), &dictionary).ok()?;
            std::io::Read::read_to_end(&mut decoder, &mut out).ok()?;
            Some(out)
        }
        _ => None,
    }
}

/// The observation dictionary this build compresses with, as a store keeps it (its zstd id and
/// bytes): written into every store opened for writing.
pub(crate) fn build_dictionary() -> Option<(u32, &'static [u8])> {
    observation_dictionary().map(|(_, id)| (*id, OBSERVATION_DICTIONARY))
}

impl SqliteStore {
    /// A blob's bytes as kept, uncompressed (`None`: an unknown codec, zstd that does not
    /// decompress, or a dictionary the ledger does not have).
    fn blob_bytes(&self, codec: i64, kept: Vec<u8>) -> Option<Vec<u8>> {
        decode_blob(codec, kept, &|id| self.dictionary(id))
    }

    /// Every blob as kept (compressed as it is), in the order kept, to `each` (`store copy`).
    pub(crate) fn each_kept_blob(
        &self,
        each: &mut dyn FnMut(KeptBlob) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT sha256, codec, bytes FROM blob ORDER BY id")
            .map_err(self.sql("reading blobs"))?;
        let mut rows = stmt.query([]).map_err(self.sql("reading blobs"))?;
        while let Some(r) = rows.next().map_err(self.sql("reading blobs"))? {
            let key: Vec<u8> = r.get(0).map_err(self.sql("reading blobs"))?;
            let sha256 = key
                .try_into()
                .map_err(|_| self.corrupt("a blob's address is not 32 bytes".into()))?;
            each(KeptBlob::kept(
                sha256,
                r.get(1).map_err(self.sql("reading blobs"))?,
                r.get(2).map_err(self.sql("reading blobs"))?,
            ))?;
        }
        Ok(())
    }

    /// Every zstd dictionary the ledger keeps (id, bytes).
    pub(crate) fn kept_dictionaries(&self) -> Result<Vec<(u32, Vec<u8>)>, StoreError> {
        self.load_dictionaries()?;
        let known = self.dictionaries.lock().unwrap_or_else(|p| p.into_inner());
        Ok(known
            .iter()
            .map(|(id, d)| (*id, d.as_ref().clone()))
            .collect())
    }

    /// Every dictionary the ledger has, read into memory (a ledger without the table has none).
    fn load_dictionaries(&self) -> Result<(), StoreError> {
        let conn = self.conn();
        let has_table: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'dictionary'",
                [],
                |r| r.get(0),
            )
            .map_err(self.sql("reading the schema"))?;
        if has_table == 0 {
            return Ok(());
        }
        let mut stmt = conn
            .prepare("SELECT id, bytes FROM dictionary")
            .map_err(self.sql("reading dictionaries"))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)))
            .map_err(self.sql("reading dictionaries"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("reading dictionaries"))?;
        let mut known = self.dictionaries.lock().unwrap_or_else(|p| p.into_inner());
        for (id, bytes) in rows {
            known.insert(id as u32, Arc::new(bytes));
        }
        Ok(())
    }

    /// The dictionary of this id, read from the ledger once.
    fn dictionary(&self, id: u32) -> Option<Arc<Vec<u8>>> {
        let mut known = self.dictionaries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = known.get(&id) {
            return Some(d.clone());
        }
        let bytes: Vec<u8> = self
            .conn()
            .query_row(
                "SELECT bytes FROM dictionary WHERE id = ?1",
                [i64::from(id)],
                |r| r.get(0),
            )
            .ok()?;
        let d = Arc::new(bytes);
        known.insert(id, d.clone());
        Some(d)
    }
}

fn kinds_clause(kinds: &[RecordKind]) -> String {
    if kinds.is_empty() {
        return String::new();
    }
    let list: Vec<String> = kinds.iter().map(|k| format!("'{}'", k.as_str())).collect();
    format!(" AND kind IN ({})", list.join(","))
}

/// [`Store::subject_entries`]'s statement for `kinds` (subject `?1`, after seq `?2`). Kinds that
/// are neither runs nor scores are read by the index of those alone (its condition repeated,
/// which is how SQLite knows the index holds every row asked for).
fn subject_entries_sql(kinds: &[RecordKind]) -> String {
    let rare = !kinds.is_empty()
        && !kinds
            .iter()
            .any(|k| matches!(k, RecordKind::Run | RecordKind::Score));
    if rare {
        format!(
            "SELECT seq, at_ms, body FROM entry INDEXED BY entry_subject_rare
             WHERE subject = ?1 AND seq > ?2 AND kind NOT IN ('run', 'score'){}
             ORDER BY seq",
            kinds_clause(kinds)
        )
    } else {
        format!(
            "SELECT seq, at_ms, body FROM entry INDEXED BY entry_subject
             WHERE subject = ?1 AND seq > ?2{} ORDER BY seq",
            kinds_clause(kinds)
        )
    }
}

/// [`Store::declared`]'s statement (subject `?1`, since `?2`): by the time index, since ordered
/// by seq the planner would walk the primary key through every declaration the subject ever made
/// (a cost growing with age).
const DECLARED_SINCE_SQL: &str = "SELECT body FROM declared INDEXED BY declared_time
     WHERE subject = ?1 AND at_ms >= ?2 ORDER BY seq";

/// [`Store::latest_declared`]'s statement (subject `?1`).
const LATEST_DECLARED_SQL: &str =
    "SELECT body FROM declared WHERE subject = ?1 ORDER BY seq DESC LIMIT 1";

/// [`Store::subject_state`]'s statement (subject `?1`).
const SUBJECT_STATE_SQL: &str =
    "SELECT through_seq, sha256, body FROM subject_state WHERE subject = ?1";

/// An entry's `kind` column read back: text that names no record kind is a broken entry.
fn kind_column(text: &str, seq: i64) -> Result<RecordKind, StoreError> {
    RecordKind::parse(text).ok_or_else(|| {
        StoreError::from(Broken {
            seq: seq as u64,
            why: format!("its kind column {text:?} names no record kind"),
        })
    })
}

fn hash32(bytes: &[u8], what: &str, seq: i64) -> Result<[u8; 32], String> {
    bytes
        .try_into()
        .map_err(|_| format!("entry {seq}: {what} is not 32 bytes"))
}

impl Store for SqliteStore {
    fn append(&self, entries: Vec<NewEntry>) -> Result<Vec<u64>, StoreError> {
        let mut conn = self.writer()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sql("starting an append"))?;
        let (mut seq, mut prev) = head_in(&tx).map_err(self.sql("reading the head"))?;
        let mut seqs = Vec::with_capacity(entries.len());
        // The tree's right edge: kept from this process's last commit, or read (after another
        // process appended, or at the first append).
        let kept = self.tree_cache().frontier.clone();
        let mut frontier = match kept.filter(|f| f.size() == seq) {
            Some(f) => f,
            None => stored_frontier_in(&tx, seq)
                .map_err(self.sql("reading the tree's right edge"))?
                .ok_or_else(|| {
                    self.corrupt(format!(
                        "the stored Merkle tree lacks a node of its right edge at {seq} entries"
                    ))
                })?,
        };
        let mut nodes: Vec<(u32, u64, Hash)> = Vec::with_capacity(entries.len() + 64);
        {
            let mut insert_node = tx
                .prepare_cached("INSERT INTO tree (level, idx, hash) VALUES (?1, ?2, ?3)")
                .map_err(self.sql("preparing a tree node"))?;
            let mut insert_entry = tx
                .prepare_cached(
                    "INSERT INTO entry (seq, at_ms, kind, subject, prev, hash, body)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(self.sql("preparing an append"))?;
            let mut insert_blob = tx
                .prepare_cached(INSERT_BLOB)
                .map_err(self.sql("preparing a blob"))?;
            let mut insert_declared = tx
                .prepare_cached(
                    "INSERT INTO declared (subject, seq, at_ms, body) VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(self.sql("preparing a declaration"))?;
            for NewEntry {
                at_ms,
                record,
                index,
            } in entries
            {
                let unwritable = |why: String| {
                    self.corrupt(format!("entry {} does not serialise: {why}", seq + 1))
                };
                let Prepared {
                    stored: record,
                    blobs,
                    record_bytes,
                } = match record {
                    NewRecord::Prepared(p) => p,
                    NewRecord::Plain(record) => {
                        let rubrics = self.rubrics.read().unwrap_or_else(|p| p.into_inner());
                        Prepared::new(record, &rubrics[0], None, None)
                            .map_err(|e| unwritable(e.to_string()))?
                    }
                    NewRecord::Unwritable(why) => return Err(unwritable(why)),
                };
                for blob in &blobs {
                    // A blob kept before costs one lookup in its index.
                    blob.insert(&mut insert_blob)
                        .map_err(self.sql("writing a blob"))?;
                }
                seq += 1;
                let stored = seal_canonical(seq, at_ms, prev, &record, &record_bytes);
                insert_entry
                    .execute(params![
                        stored.seq as i64,
                        stored.at_ms,
                        stored.kind.as_str(),
                        stored.subject,
                        stored.prev.as_slice(),
                        stored.hash.as_slice(),
                        stored.body,
                    ])
                    .map_err(self.sql("writing an entry"))?;
                // The entry's hash is its leaf: only the interior nodes it completes are new.
                let first = nodes.len();
                frontier.push_completing(stored.hash, |level, idx, hash| {
                    nodes.push((level, idx, hash));
                });
                for (level, idx, hash) in &nodes[first..] {
                    insert_node
                        .execute(params![i64::from(*level), *idx as i64, hash.as_slice()])
                        .map_err(self.sql("writing the entry's tree nodes"))?;
                }
                if let (Some(subject), Some(index)) = (record.subject(), index) {
                    let Index {
                        declared,
                        score,
                        headline,
                        outbox,
                        state,
                        run_id,
                    } = index(seq);
                    if let Some(row) = state {
                        put_state_in(&tx, &row).map_err(self.sql("writing a subject state"))?;
                    }
                    if let Some(id) = run_id {
                        tx.prepare_cached("INSERT OR IGNORE INTO run_id (id, seq) VALUES (?1, ?2)")
                            .and_then(|mut s| s.execute(params![id, seq as i64]))
                            .map_err(self.sql("writing a run id"))?;
                    }
                    for event in &outbox {
                        insert_outbox_in(&tx, event)
                            .map_err(self.sql("writing a webhook event"))?;
                    }
                    if let Some((at, body)) = declared {
                        insert_declared
                            .execute(params![subject, seq as i64, at, body])
                            .map_err(self.sql("writing a declaration"))?;
                    }
                    if let Some(row) = score {
                        put_score_in(&tx, &ScoreRow { seq, ..row }, headline)
                            .map_err(self.sql("writing a score"))?;
                    }
                }
                prev = stored.hash;
                seqs.push(seq);
            }
        }
        tx.commit().map_err(self.sql("committing an append"))?;
        self.tree_cache().committed(frontier, &nodes);
        Ok(seqs)
    }

    fn head(&self) -> Result<(u64, [u8; 32]), StoreError> {
        head_in(&self.conn()).map_err(self.sql("reading the head"))
    }

    fn subject_entries(
        &self,
        subject: &str,
        kinds: &[RecordKind],
        after: u64,
    ) -> Result<Vec<ReadEntry>, StoreError> {
        // The subject's own entries (its index), not every entry of the kinds: SQLite would
        // otherwise walk the kind index over all subjects (every revision, every run) and look
        // each row up to compare its subject.
        // Kinds that are neither runs nor scores: by the index of those alone (its condition
        // repeated, which is how SQLite knows the index holds every row asked for).
        self.read_entries(&subject_entries_sql(kinds), params![subject, after as i64])
    }

    fn subject_stored_entries(
        &self,
        subject: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEntry>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, at_ms, kind, subject, prev, hash, body FROM entry
                 INDEXED BY entry_subject WHERE subject = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            )
            .map_err(self.sql("reading a subject's entries"))?;
        let mut rows = stmt
            .query(params![
                subject,
                after as i64,
                limit.min(i64::MAX as usize) as i64
            ])
            .map_err(self.sql("reading a subject's entries"))?;
        let mut out = Vec::new();
        while let Some(r) = rows
            .next()
            .map_err(self.sql("reading a subject's entries"))?
        {
            let seq: i64 = r.get(0).map_err(self.sql("reading a subject's entries"))?;
            let digest = |i, what| -> Result<[u8; 32], StoreError> {
                let bytes: Vec<u8> = r.get(i).map_err(self.sql("reading a subject's entries"))?;
                hash32(&bytes, what, seq).map_err(|why| {
                    StoreError::from(Broken {
                        seq: seq as u64,
                        why,
                    })
                })
            };
            let kind = r
                .get_ref(2)
                .and_then(|v| v.as_str().map_err(Into::into))
                .map_err(self.sql("reading a subject's entries"))?;
            out.push(StoredEntry {
                seq: seq as u64,
                at_ms: r.get(1).map_err(self.sql("reading a subject's entries"))?,
                kind: kind_column(kind, seq)?,
                subject: r.get(3).map_err(self.sql("reading a subject's entries"))?,
                prev: digest(4, "prev")?,
                hash: digest(5, "hash")?,
                body: r.get(6).map_err(self.sql("reading a subject's entries"))?,
            });
        }
        Ok(out)
    }

    fn latest_subject_entry(
        &self,
        subject: &str,
        kind: RecordKind,
    ) -> Result<Option<ReadEntry>, StoreError> {
        let sql = format!(
            "SELECT seq, at_ms, body FROM entry INDEXED BY entry_subject
             WHERE subject = ?1{} ORDER BY seq DESC LIMIT 1",
            kinds_clause(&[kind])
        );
        Ok(self
            .read_entries(&sql, params![subject])?
            .into_iter()
            .next())
    }

    fn entries_at(&self, seqs: &[u64]) -> Result<Vec<ReadEntry>, StoreError> {
        let mut out = Vec::with_capacity(seqs.len());
        // At most a few hundred per statement (SQLite's bound on parameters is far above).
        for chunk in seqs.chunks(256) {
            // One statement whatever the seqs (a JSON array of them), prepared once.
            let list: Vec<String> = chunk.iter().map(u64::to_string).collect();
            out.extend(self.read_entries(
                "SELECT seq, at_ms, body FROM entry
                 WHERE seq IN (SELECT value FROM json_each(?1)) ORDER BY seq",
                [format!("[{}]", list.join(","))],
            )?);
        }
        out.sort_by_key(|e| e.seq);
        Ok(out)
    }

    fn entries_of_kind(
        &self,
        kinds: &[RecordKind],
        after: u64,
    ) -> Result<Vec<ReadEntry>, StoreError> {
        let sql = format!(
            "SELECT seq, at_ms, body FROM entry WHERE seq > ?1{} ORDER BY seq",
            kinds_clause(kinds)
        );
        self.read_entries(&sql, params![after as i64])
    }

    fn latest_entry_of_kind(&self, kind: RecordKind) -> Result<Option<ReadEntry>, StoreError> {
        let sql = format!(
            "SELECT seq, at_ms, body FROM entry INDEXED BY entry_kind WHERE 1{}
             ORDER BY seq DESC LIMIT 1",
            kinds_clause(&[kind])
        );
        Ok(self.read_entries(&sql, [])?.into_iter().next())
    }

    fn entries_page(&self, after: u64, limit: usize) -> Result<Vec<ReadEntry>, StoreError> {
        self.read_entries(
            "SELECT seq, at_ms, body FROM entry WHERE seq > ?1 ORDER BY seq LIMIT ?2",
            params![after as i64, limit.min(i64::MAX as usize) as i64],
        )
    }

    fn scan(
        &self,
        after: u64,
        f: &mut dyn FnMut(StoredEntry) -> Result<(), Broken>,
    ) -> Result<(), StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(
                "SELECT seq, at_ms, kind, subject, prev, hash, body FROM entry
                 WHERE seq > ?1 ORDER BY seq",
            )
            .map_err(self.sql("scanning entries"))?;
        let mut rows = stmt
            .query([after as i64])
            .map_err(self.sql("scanning entries"))?;
        while let Some(r) = rows.next().map_err(self.sql("scanning entries"))? {
            let seq: i64 = r.get(0).map_err(self.sql("scanning entries"))?;
            // The hashes are read in place (no copy per row): a verification reads every row.
            let digest = |i, what| {
                let bytes = r
                    .get_ref(i)
                    .and_then(|v| v.as_blob().map_err(Into::into))
                    .map_err(self.sql("scanning entries"))?;
                hash32(bytes, what, seq).map_err(|why| {
                    StoreError::from(Broken {
                        seq: seq as u64,
                        why,
                    })
                })
            };
            let prev = digest(4, "prev")?;
            let hash = digest(5, "hash")?;
            let kind = r
                .get_ref(2)
                .and_then(|v| v.as_str().map_err(Into::into))
                .map_err(self.sql("scanning entries"))?;
            let entry = StoredEntry {
                seq: seq as u64,
                at_ms: r.get(1).map_err(self.sql("scanning entries"))?,
                kind: kind_column(kind, seq)?,
                subject: r.get(3).map_err(self.sql("scanning entries"))?,
                prev,
                hash,
                body: r.get(6).map_err(self.sql("scanning entries"))?,
            };
            f(entry)?;
        }
        Ok(())
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<String, StoreError> {
        let hash: [u8; 32] = Sha256::digest(bytes).into();
        let kept = KeptBlob::new(NewBlob {
            sha256: hash,
            bytes: bytes.to_vec(),
            kind: BlobKind::Repeated,
        });
        let conn = self.writer()?;
        let mut stmt = conn
            .prepare_cached(INSERT_BLOB)
            .map_err(self.sql("writing a blob"))?;
        kept.insert(&mut stmt).map_err(self.sql("writing a blob"))?;
        Ok(hex::encode(hash))
    }

    fn blob(&self, sha256: &[u8; 32]) -> Result<Option<Vec<u8>>, StoreError> {
        let kept: Option<(i64, Vec<u8>)> = self
            .conn()
            .prepare_cached("SELECT codec, bytes FROM blob WHERE sha256 = ?1")
            .and_then(|mut stmt| {
                stmt.query_row([sha256.as_slice()], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .map_err(self.sql("reading a blob"))?;
        let Some((codec, kept)) = kept else {
            return Ok(None);
        };
        self.blob_bytes(codec, kept).map(Some).ok_or_else(|| {
            self.corrupt(format!(
                "blob {} does not decompress (codec {codec})",
                hex::encode(sha256)
            ))
        })
    }

    fn checkpoint(&self, key: &ReporterKey, at_ms: i64) -> Result<Option<Checkpoint>, StoreError> {
        let (seq, hash) = self.head()?;
        if seq == 0 {
            return Ok(None);
        }
        let signed: Option<i64> = self
            .conn()
            .query_row("SELECT MAX(seq) FROM checkpoint", [], |r| r.get(0))
            .map_err(self.sql("reading checkpoints"))?;
        if signed.is_some_and(|s| s as u64 >= seq) {
            return Ok(None);
        }
        let signature = key
            .sign(&checkpoint_message(seq, &hash))
            .map_err(|e| StoreError::Sign(e.to_string()))?;
        let checkpoint = Checkpoint {
            seq,
            hash,
            at_ms,
            public_key: key.public_key(),
            signature,
        };
        let mut conn = self.writer()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sql("beginning a checkpoint"))?;
        tx.execute(
            "INSERT INTO checkpoint (seq, hash, at_ms, public_key, signature)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                seq as i64,
                hash.as_slice(),
                at_ms,
                checkpoint.public_key.as_slice(),
                checkpoint.signature.as_slice()
            ],
        )
        .map_err(self.sql("writing a checkpoint"))?;
        // The tree checkpoint of the same entries: a signed note over their Merkle root.
        let root = merkle::root_at(&SqliteNodes::cached(&tx, seq, &self.tree), seq)
            .map_err(|e| self.corrupt(format!("the Merkle tree at size {seq}: {e}")))?;
        let note = tlog::sign_tree_note(&key.public_key(), seq, root, at_ms, |m| key.sign(m))
            .map_err(|e| StoreError::Sign(e.to_string()))?;
        tx.execute(
            "INSERT OR IGNORE INTO tree_checkpoint (size, at_ms, note) VALUES (?1, ?2, ?3)",
            params![seq as i64, at_ms, note],
        )
        .map_err(self.sql("writing a tree checkpoint"))?;
        tx.commit().map_err(self.sql("committing a checkpoint"))?;
        Ok(Some(checkpoint))
    }

    fn checkpoints(&self) -> Result<Vec<Checkpoint>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT seq, hash, at_ms, public_key, signature FROM checkpoint ORDER BY seq")
            .map_err(self.sql("reading checkpoints"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Vec<u8>>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Vec<u8>>(3)?,
                    r.get::<_, Vec<u8>>(4)?,
                ))
            })
            .map_err(self.sql("reading checkpoints"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("reading checkpoints"))?;
        rows.into_iter()
            .map(|(seq, hash, at_ms, public_key, signature)| {
                let bad = |what: &str| self.corrupt(format!("checkpoint {seq}: bad {what}"));
                Ok(Checkpoint {
                    seq: seq as u64,
                    hash: hash.try_into().map_err(|_| bad("hash"))?,
                    at_ms,
                    public_key: public_key.try_into().map_err(|_| bad("public key"))?,
                    signature: signature.try_into().map_err(|_| bad("signature"))?,
                })
            })
            .collect()
    }

    fn tree_notes(&self) -> Result<Vec<TreeNote>, StoreError> {
        if !self.has_tree()? {
            return Ok(Vec::new());
        }
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT size, at_ms, note FROM tree_checkpoint ORDER BY size")
            .map_err(self.sql("reading tree checkpoints"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(TreeNote {
                    size: r.get::<_, i64>(0)? as u64,
                    at_ms: r.get(1)?,
                    note: r.get(2)?,
                })
            })
            .map_err(self.sql("reading tree checkpoints"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("reading tree checkpoints"))?;
        Ok(rows)
    }

    fn latest_tree_note(&self) -> Result<Option<TreeNote>, StoreError> {
        if !self.has_tree()? {
            return Ok(None);
        }
        self.conn()
            .prepare_cached(
                "SELECT size, at_ms, note FROM tree_checkpoint ORDER BY size DESC LIMIT 1",
            )
            .map_err(self.sql("reading tree checkpoints"))?
            .query_row([], |r| {
                Ok(TreeNote {
                    size: r.get::<_, i64>(0)? as u64,
                    at_ms: r.get(1)?,
                    note: r.get(2)?,
                })
            })
            .optional()
            .map_err(self.sql("reading tree checkpoints"))
    }

    fn inclusion_bundle(
        &self,
        subject: &str,
        after: u64,
        limit: usize,
    ) -> Result<Option<InclusionBundle>, StoreError> {
        // One read transaction: the checkpoint, the entries and the tree as of one moment.
        let _snapshot = ReadSnapshot::begin(self)?;
        let Some(head) = self.proof_head()? else {
            return Ok(None);
        };
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, body FROM entry INDEXED BY entry_subject
                 WHERE subject = ?1 AND seq > ?2 AND seq <= ?3 ORDER BY seq LIMIT ?4",
            )
            .map_err(self.sql("reading a subject's entries"))?;
        let entries = stmt
            .query_map(
                params![subject, after as i64, head.tree_size as i64, limit as i64],
                |r| Ok((r.get::<_, i64>(0)? as u64 - 1, r.get::<_, Vec<u8>>(1)?)),
            )
            .map_err(self.sql("reading a subject's entries"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("reading a subject's entries"))?;
        // Every node the proofs read, fetched together (a proof asks for one at a time).
        let mut wanted: Vec<(u32, u64)> = entries
            .iter()
            .flat_map(|(index, _)| merkle::inclusion_nodes(*index, head.tree_size))
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        let nodes = FetchedNodes::read(&conn, head.tree_size, &wanted, &self.tree)
            .map_err(self.sql("reading the Merkle tree"))?;
        proof::build(
            &nodes,
            head.note,
            head.verifier_key,
            head.tree_size,
            entries,
        )
        .map(Some)
        .map_err(|e| self.corrupt(format!("an inclusion proof: {e}")))
    }

    fn consistency_proof(&self, old: u64, new: u64) -> Result<Vec<Hash>, StoreError> {
        if !self.has_tree()? {
            return Err(self.corrupt("the ledger has no Merkle tree yet".into()));
        }
        let conn = self.conn();
        let (head, _) = head_in(&conn).map_err(self.sql("reading the head"))?;
        if new > head {
            return Err(self.corrupt(format!("no tree of {new} entries: the log has {head}")));
        }
        merkle::consistency_proof(&SqliteNodes::cached(&conn, new, &self.tree), old, new)
            .map_err(|e| self.corrupt(format!("a consistency proof {old} -> {new}: {e}")))
    }

    fn verify(&self, trusted: Option<&Trusted>, deep: bool) -> Result<VerifySummary, StoreError> {
        self.verify_reporting(trusted, deep, &mut |_, _| {})
    }

    fn subject_state(&self, subject: &str) -> Result<Option<super::StateRow>, StoreError> {
        let row: Option<(i64, Vec<u8>, Vec<u8>)> = self
            .conn()
            .prepare_cached(SUBJECT_STATE_SQL)
            .map_err(self.sql("reading a subject state"))?
            .query_row([subject], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()
            .map_err(self.sql("reading a subject state"))?;
        let Some((through_seq, sha256, body)) = row else {
            return Ok(None);
        };
        let days = self
            .conn()
            .prepare_cached(
                "SELECT day, sha256, body FROM subject_days WHERE subject = ?1 ORDER BY day",
            )
            .map_err(self.sql("reading a subject's days"))?
            .query_map([subject], |r| {
                let sha256: Vec<u8> = r.get(1)?;
                Ok(super::DayRow {
                    day: r.get(0)?,
                    // A digest of the wrong length matches no body: the state is rebuilt.
                    sha256: sha256.try_into().unwrap_or([0; 32]),
                    body: r.get(2)?,
                })
            })
            .map_err(self.sql("reading a subject's days"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("reading a subject's days"))?;
        Ok(Some(super::StateRow {
            subject: subject.to_string(),
            through_seq: through_seq.max(0) as u64,
            // A digest of the wrong length matches no body: the state is rebuilt.
            sha256: sha256.try_into().unwrap_or([0; 32]),
            body,
            days,
            days_from: i64::MIN,
        }))
    }

    fn run_by_id(&self, run_id: &str) -> Result<Option<ReadEntry>, StoreError> {
        let seq: Option<i64> = self
            .conn()
            .prepare_cached("SELECT seq FROM run_id WHERE id = ?1")
            .map_err(self.sql("reading a run id"))?
            .query_row([run_id], |r| r.get(0))
            .optional()
            .map_err(self.sql("reading a run id"))?;
        let Some(seq) = seq else { return Ok(None) };
        let Some(mut entry) = self.entries_at(&[seq as u64])?.into_iter().next() else {
            return Ok(None);
        };
        self.restore_bodies(&mut entry.record)?;
        Ok(Some(entry))
    }

    fn declared(
        &self,
        subject: &str,
        since_ms: i64,
    ) -> Result<Vec<crate::evidence::declared::Declared>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(DECLARED_SINCE_SQL)
            .map_err(self.sql("reading declarations"))?;
        let rows = stmt
            .query_map(params![subject, since_ms], |r| r.get(0))
            .map_err(self.sql("reading declarations"))?
            .collect::<Result<Vec<Vec<u8>>, _>>()
            .map_err(self.sql("reading declarations"))?;
        rows.iter()
            .map(|row| self.declaration(subject, row))
            .collect()
    }

    fn latest_declared(
        &self,
        subject: &str,
    ) -> Result<Option<crate::evidence::declared::Declared>, StoreError> {
        let row: Option<Vec<u8>> = self
            .conn()
            .prepare_cached(LATEST_DECLARED_SQL)
            .map_err(self.sql("reading declarations"))?
            .query_row([subject], |r| r.get(0))
            .optional()
            .map_err(self.sql("reading declarations"))?;
        row.map(|row| self.declaration(subject, &row)).transpose()
    }

    fn declared_before(
        &self,
        subject: &str,
        seq: u64,
    ) -> Result<Option<crate::evidence::declared::Declared>, StoreError> {
        let row: Option<Vec<u8>> = self
            .conn()
            .prepare_cached(
                "SELECT body FROM declared WHERE subject = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT 1",
            )
            .map_err(self.sql("reading declarations"))?
            .query_row(params![subject, i64::try_from(seq).unwrap_or(i64::MAX)], |r| r.get(0))
            .optional()
            .map_err(self.sql("reading declarations"))?;
        row.map(|row| self.declaration(subject, &row)).transpose()
    }

    fn subjects(&self) -> Result<Vec<SubjectRow>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(&format!("{SELECT_SUBJECT} ORDER BY url"))
            .map_err(self.sql("reading subjects"))?;
        let rows = stmt
            .query_map([], read_subject)
            .map_err(self.sql("reading subjects"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("reading subjects"))?;
        rows.into_iter()
            .map(|r| r.map_err(|why| self.corrupt(why)))
            .collect()
    }

    fn each_subject_shown(&self, each: &mut dyn FnMut(SubjectShown<'_>)) -> Result<(), StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached("SELECT url, category, state, revision FROM subject ORDER BY url")
            .map_err(self.sql("reading subjects"))?;
        let mut rows = stmt.query([]).map_err(self.sql("reading subjects"))?;
        while let Some(r) = rows.next().map_err(self.sql("reading subjects"))? {
            let text = |i: usize| -> Result<Option<&str>, StoreError> {
                match r.get_ref(i).map_err(self.sql("reading subjects"))? {
                    rusqlite::types::ValueRef::Null => Ok(None),
                    v => v
                        .as_str()
                        .map(Some)
                        .map_err(|e| self.corrupt(format!("a subject's column {i}: {e}"))),
                }
            };
            let url = text(0)?.ok_or_else(|| self.corrupt("a subject without a url".into()))?;
            let category = text(1)?.unwrap_or_default();
            let state = text(2)?.unwrap_or_default();
            let Some(state) = SubjectState::parse(state) else {
                return Err(self.corrupt(format!("subject {url}: unknown state {state:?}")));
            };
            each(SubjectShown {
                url,
                category,
                state,
                revision: text(3)?,
            });
        }
        Ok(())
    }

    fn subject(&self, url: &str) -> Result<Option<SubjectRow>, StoreError> {
        let row = self
            .conn()
            .query_row(
                &format!("{SELECT_SUBJECT} WHERE url = ?1"),
                [url],
                read_subject,
            )
            .optional()
            .map_err(self.sql("reading a subject"))?;
        row.transpose().map_err(|why| self.corrupt(why))
    }

    fn put_subject(&self, row: &SubjectRow) -> Result<(), StoreError> {
        put_subject_in(&*self.writer()?, row).map_err(self.sql("writing a subject"))
    }

    fn put_subjects(&self, rows: &[SubjectRow]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut conn = self.writer()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sql("starting to write subjects"))?;
        for row in rows {
            put_subject_in(&tx, row).map_err(self.sql("writing a subject"))?;
        }
        tx.commit().map_err(self.sql("committing subjects"))
    }

    fn put_score(&self, row: &ScoreRow) -> Result<(), StoreError> {
        put_score_in(&*self.writer()?, row, None).map_err(self.sql("writing a score"))
    }

    fn latest_score(&self, subject: &str) -> Result<Option<ScoreRow>, StoreError> {
        self.conn()
            .prepare_cached(
                "SELECT subject, day, as_of_ms, seq, document FROM score WHERE subject = ?1
                 ORDER BY day DESC LIMIT 1",
            )
            .map_err(self.sql("reading a score"))?
            .query_row([subject], read_score)
            .optional()
            .map_err(self.sql("reading a score"))
    }

    fn latest_score_with_headline(
        &self,
        subject: &str,
    ) -> Result<Option<super::RowWithHeadline>, StoreError> {
        self.conn()
            .prepare_cached(
                "SELECT s.subject, s.day, s.as_of_ms, s.seq, s.document, h.headline FROM score s
                 LEFT JOIN score_headline h ON h.subject = s.subject AND h.day = s.day
                 WHERE s.subject = ?1 ORDER BY s.day DESC LIMIT 1",
            )
            .map_err(self.sql("reading a score"))?
            .query_row([subject], |r| Ok((read_score(r)?, r.get(5)?)))
            .optional()
            .map_err(self.sql("reading a score"))
    }

    fn start_rows(&self, each: &mut dyn FnMut(super::StartRow)) -> Result<(), StoreError> {
        // One statement for every subject: each subject's newest score row by its index (never
        // the row's document: the headline is a table of its own), the newest score entry by
        // the subject's index of entries, the latest declaration by its key.
        type Raw = (
            String,
            Option<i64>,
            Option<i64>,
            Option<Vec<u8>>,
            Option<i64>,
            Option<i64>,
            Option<Vec<u8>>,
            Option<Vec<u8>>,
        );
        let conn = self.conn();
        let mut stmt = conn
            .prepare(
                "SELECT x.url, s.seq, s.as_of_ms, h.headline, e.seq, e.at_ms, e.body,
                        (SELECT d.body FROM declared d WHERE d.subject = x.url
                         ORDER BY d.seq DESC LIMIT 1)
                 FROM subject x
                 LEFT JOIN score s ON s.rowid = (SELECT rowid FROM score
                     WHERE subject = x.url ORDER BY day DESC LIMIT 1)
                 LEFT JOIN score_headline h ON h.subject = s.subject AND h.day = s.day
                 LEFT JOIN entry e ON e.seq = (SELECT seq FROM entry INDEXED BY entry_subject
                     WHERE subject = x.url AND kind = 'score' ORDER BY seq DESC LIMIT 1)",
            )
            .map_err(self.sql("reading every subject's latest score"))?;
        let mut rows = stmt
            .query([])
            .map_err(self.sql("reading every subject's latest score"))?;
        while let Some(r) = rows
            .next()
            .map_err(self.sql("reading every subject's latest score"))?
        {
            let raw: Raw = (|| {
                Ok::<_, rusqlite::Error>((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                ))
            })()
            .map_err(self.sql("reading every subject's latest score"))?;
            let (subject, row_seq, as_of_ms, headline, entry_seq, at_ms, body, declared) = raw;
            let newest = match (entry_seq, at_ms, body) {
                (Some(seq), Some(at_ms), Some(body)) => {
                    let envelope: crate::ledger::chain::Envelope = serde_json::from_slice(&body)
                        .map_err(|e| self.corrupt(format!("entry {seq} does not parse: {e}")))?;
                    Some(ReadEntry {
                        seq: seq as u64,
                        at_ms,
                        record: self.read_back(seq as u64, envelope.record)?,
                    })
                }
                _ => None,
            };
            let declared = declared
                .map(|row| self.declaration(&subject, &row))
                .transpose()?;
            each(super::StartRow {
                row: row_seq.zip(as_of_ms).map(|(seq, at)| (seq as u64, at)),
                subject,
                headline,
                newest,
                declared,
            });
        }
        Ok(())
    }

    fn daily_scores(&self, subject: &str) -> Result<Vec<ScoreRow>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(
                "SELECT subject, day, as_of_ms, seq, document FROM score WHERE subject = ?1
                 ORDER BY day",
            )
            .map_err(self.sql("reading scores"))?;
        let rows = stmt
            .query_map([subject], read_score)
            .map_err(self.sql("reading scores"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("reading scores"))?;
        Ok(rows)
    }
    fn last_checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        let row: Option<CheckpointRow> = self
            .conn()
            .prepare_cached(
                "SELECT seq, hash, at_ms, public_key, signature FROM checkpoint
                 ORDER BY seq DESC LIMIT 1",
            )
            .and_then(|mut stmt| {
                stmt.query_row([], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })
            })
            .optional()
            .map_err(self.sql("reading the last checkpoint"))?;
        let Some((seq, hash, at_ms, public_key, signature)) = row else {
            return Ok(None);
        };
        let bad = |what: &str| self.corrupt(format!("checkpoint {seq}: bad {what}"));
        Ok(Some(Checkpoint {
            seq: seq as u64,
            hash: hash.try_into().map_err(|_| bad("hash"))?,
            at_ms,
            public_key: public_key.try_into().map_err(|_| bad("public key"))?,
            signature: signature.try_into().map_err(|_| bad("signature"))?,
        }))
    }

    fn outbox_due(&self, now_ms: i64, limit: usize) -> Result<Vec<OutboxRow>, StoreError> {
        self.read_outbox(
            &format!(
                "{SELECT_OUTBOX} WHERE state = 'pending' AND next_attempt_ms <= ?1
                 ORDER BY id LIMIT ?2"
            ),
            params![now_ms, limit.min(i64::MAX as usize) as i64],
        )
    }

    fn outbox_next_due(&self) -> Result<Option<i64>, StoreError> {
        self.conn()
            .query_row(
                "SELECT MIN(next_attempt_ms) FROM webhook_outbox WHERE state = 'pending'",
                [],
                |r| r.get(0),
            )
            .map_err(self.sql("reading the outbox"))
    }

    fn outbox_update(&self, id: i64, update: &OutboxUpdate) -> Result<(), StoreError> {
        let (state, attempts, next, error, done) = update.columns();
        self.writer()?
            .prepare_cached(
                "UPDATE webhook_outbox SET state = ?1, attempts = ?2, next_attempt_ms = ?3,
                     last_error = COALESCE(?4, last_error), done_ms = ?5
                 WHERE id = ?6 AND state = 'pending'",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![state.as_str(), attempts, next, error, done, id])
            })
            .map_err(self.sql("updating the outbox"))?;
        Ok(())
    }

    fn outbox_counts(&self) -> Result<(u64, u64), StoreError> {
        self.conn()
            .query_row(
                "SELECT COALESCE(SUM(state = 'pending'), 0), COALESCE(SUM(state = 'dead'), 0)
                 FROM webhook_outbox",
                [],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
            )
            .map_err(self.sql("counting the outbox"))
    }

    fn outbox_rows(&self) -> Result<Vec<OutboxRow>, StoreError> {
        self.read_outbox(&format!("{SELECT_OUTBOX} ORDER BY id"), [])
    }

    fn latest_subject_entry_before(
        &self,
        subject: &str,
        kind: RecordKind,
        before_ms: i64,
    ) -> Result<Option<ReadEntry>, StoreError> {
        // Newest first along the subject's index: a day's end is at most a day of the subject's
        // entries back from its newest.
        let sql = format!(
            "SELECT seq, at_ms, body FROM entry INDEXED BY entry_subject
             WHERE subject = ?1{} AND at_ms < ?2 ORDER BY seq DESC LIMIT 1",
            kinds_clause(&[kind])
        );
        Ok(self
            .read_entries(&sql, params![subject, before_ms])?
            .into_iter()
            .next())
    }

    fn declared_through(
        &self,
        subject: &str,
        seq: u64,
    ) -> Result<Option<crate::evidence::declared::Declared>, StoreError> {
        let row: Option<Vec<u8>> = self
            .conn()
            .prepare_cached(
                "SELECT body FROM declared WHERE subject = ?1 AND seq <= ?2
                 ORDER BY seq DESC LIMIT 1",
            )
            .map_err(self.sql("reading declarations"))?
            .query_row(params![subject, seq as i64], |r| r.get(0))
            .optional()
            .map_err(self.sql("reading declarations"))?;
        row.map(|row| self.declaration(subject, &row)).transpose()
    }
}

/// A read transaction across several calls, ended when dropped (nothing is written in it): one
/// read connection of the pool is pinned to this thread meanwhile, so every read the calls make
/// sees the same moment, whatever the writer commits.
struct ReadSnapshot<'a> {
    store: &'a SqliteStore,
    pinned: usize,
}

impl<'a> ReadSnapshot<'a> {
    /// A whole-ledger read (a verification) reads the file through SQLite's page reads, not a
    /// mapping of it: measured (`cargo bench --bench ledger`), mapping the file for the walk and
    /// unmapping it after cost more than the copies it saved (a fault per page, the unmap).
    fn begin(store: &'a SqliteStore) -> Result<ReadSnapshot<'a>, StoreError> {
        let pinned = store.readers.pin();
        let snapshot = ReadSnapshot { store, pinned };
        let conn = store.conn();
        conn.prepare_cached("BEGIN DEFERRED")
            .and_then(|mut begin| begin.execute([]))
            .map_err(store.sql("starting a read"))?;
        drop(conn);
        Ok(snapshot)
    }
}

impl Drop for ReadSnapshot<'_> {
    fn drop(&mut self) {
        let conn = self.store.conn();
        if !conn.is_autocommit() {
            let _ = conn
                .prepare_cached("ROLLBACK")
                .and_then(|mut rollback| rollback.execute([]));
        }
        drop(conn);
        self.store.readers.unpin(self.pinned);
    }
}

/// Score rows checked per page of a verification.
const SCORE_ROWS_PAGE: i64 = 512;

/// Entries handed from the reading thread to the hashing one at a time, during a verification.
const VERIFY_BATCH: usize = 512;

/// A verification's batch of rows, from the reading thread to the checking one, with the stored
/// interior nodes they complete (`nodes[level]`: index and hash, in index order).
struct WalkBatch {
    rows: WalkRows,
    nodes: StoredLevels,
}

/// Stored interior nodes by level: each one's index and hash, in index order (`None`: a stored
/// value that is not 32 bytes, which no computed node matches).
type StoredLevels = Vec<Vec<(u64, Option<Hash>)>>;

/// The rows of a batch: the chain's columns with the bytes one after another (chain only), or
/// whole rows (deep: the bytes are parsed and compared with the columns).
enum WalkRows {
    Links {
        links: Vec<ChainLink>,
        bytes: Vec<u8>,
    },
    Whole(Vec<StoredEntry>),
}

impl WalkRows {
    fn new(deep: bool) -> WalkRows {
        if deep {
            WalkRows::Whole(Vec::with_capacity(VERIFY_BATCH))
        } else {
            WalkRows::Links {
                links: Vec::with_capacity(VERIFY_BATCH),
                bytes: Vec::new(),
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            WalkRows::Links { links, .. } => links.len(),
            WalkRows::Whole(rows) => rows.len(),
        }
    }
}

/// A batch's stored interior nodes, compared one by one with those the walk computes, in the
/// order it completes them (each level's in index order).
struct StoredNodes {
    levels: StoredLevels,
    next: Vec<usize>,
    failed: Option<(u32, u64, &'static str)>,
}

impl StoredNodes {
    fn new(levels: StoredLevels) -> StoredNodes {
        StoredNodes {
            next: vec![0; levels.len()],
            levels,
            failed: None,
        }
    }

    /// The node the walk computed at (`level`, `idx`) against the stored one.
    fn compare(&mut self, level: u32, idx: u64, hash: &Hash) {
        if self.failed.is_some() {
            return;
        }
        let l = level as usize;
        let stored = self.levels.get(l).and_then(|nodes| nodes.get(self.next[l]));
        self.failed = match stored {
            Some((i, h)) if *i == idx => {
                self.next[l] += 1;
                (h.as_ref() != Some(hash)).then_some((
                    level,
                    idx,
                    "is not the hash its entries give",
                ))
            }
            _ => Some((level, idx, "is missing")),
        };
    }

    /// The first node that differed, as the break it is.
    fn failed(&mut self) -> Result<(), Broken> {
        match self.failed.take() {
            None => Ok(()),
            Some((level, idx, why)) => Err(Broken {
                // The first entry under the node.
                seq: (idx << level) + 1,
                why: format!("the stored Merkle tree's node {idx} at level {level} {why}"),
            }),
        }
    }
}

impl SqliteStore {
    /// A verification's walk over every entry: this thread reads the rows (in the caller's read
    /// snapshot), another hashes and checks them (the chain, the Merkle tree, and when `deep` each
    /// entry's bytes against its columns), so that reading and hashing use a core each. With
    /// `stored_tree`, every interior node the entries complete is compared with the stored one as
    /// the walk computes it (the reading thread hands the stored nodes over with the rows that
    /// complete them): the proofs the store hands out are read from that tree.
    /// [`Store::verify`], telling `walked(entries read, entries in all)` as the walk over the
    /// entries goes (a batch at a time; what `ledger verify` and `recompute --ledger` show as
    /// progress).
    pub fn verify_reporting(
        &self,
        trusted: Option<&Trusted>,
        deep: bool,
        walked: &mut dyn FnMut(u64, u64),
    ) -> Result<VerifySummary, StoreError> {
        // One read transaction: entries, checkpoints, blobs and score rows as of one moment, even
        // while the daemon appends.
        let _snapshot = ReadSnapshot::begin(self)?;
        let checkpoints = self.checkpoints()?;
        let notes = self.tree_notes()?;
        let stored_tree = self.has_stored_tree(&notes)?;
        let (verifier, walk, named) =
            self.walk_entries(&checkpoints, &notes, deep, stored_tree, walked)?;
        let mut summary = verifier.finish(&checkpoints, trusted)?;
        self.verify_tree(walk, &notes, trusted, &mut summary)?;
        if deep {
            // The blobs (each run's observation among them) are checked deep only: the chain
            // and the tree cover them through the digests the entries name.
            self.verify_stored_blobs()?;
            summary.blobs_referenced = self.verify_named_blobs(&named)?;
            self.verify_derived(&named)?;
            summary.score_rows = self.verify_score_rows(&named)?;
        }
        Ok(summary)
    }

    fn walk_entries(
        &self,
        checkpoints: &[Checkpoint],
        notes: &[TreeNote],
        deep: bool,
        stored_tree: bool,
        walked: &mut dyn FnMut(u64, u64),
    ) -> Result<(Verifier, TreeWalk, Named), StoreError> {
        let (to_checker, batches) = std::sync::mpsc::sync_channel::<WalkBatch>(8);
        let mut verifier = Verifier::new(checkpoints);
        let mut walk = TreeWalk::new(notes);
        let mut named = Named::default();
        std::thread::scope(|scope| {
            let checker = scope.spawn(move || -> Result<_, Broken> {
                for batch in batches {
                    let mut nodes = StoredNodes::new(batch.nodes);
                    let mut check = |leaf: Hash| -> Result<(), Broken> {
                        walk.feed_leaf_completing(leaf, |level, idx, hash| {
                            if stored_tree {
                                nodes.compare(level, idx, &hash);
                            }
                        });
                        nodes.failed()
                    };
                    match batch.rows {
                        WalkRows::Links { links, bytes } => {
                            let mut at = 0usize;
                            for link in links {
                                let end = at + link.bytes as usize;
                                // One hash for both: an entry's chain hash is its leaf hash.
                                let leaf = leaf_hash(&bytes[at..end]);
                                at = end;
                                verifier.feed_link(&link, leaf)?;
                                check(leaf)?;
                            }
                        }
                        WalkRows::Whole(rows) => {
                            for row in rows {
                                let leaf = leaf_hash(&row.body);
                                if let Some(envelope) = verifier.feed_hashed(&row, leaf, deep)? {
                                    named.note(row.seq, envelope.record)?;
                                }
                                check(leaf)?;
                            }
                        }
                    }
                }
                Ok((verifier, walk, named))
            });
            let read = self.read_walk(deep, stored_tree, &to_checker, walked);
            drop(to_checker);
            let checked = checker.join().unwrap_or_else(|panic| {
                std::panic::resume_unwind(panic);
            });
            // The checker's error first: a read stops when the checker has stopped at a broken
            // entry.
            let checked = checked?;
            read?;
            Ok(checked)
        })
    }

    /// The reading side of [`SqliteStore::walk_entries`]: every row in `seq` order, in batches,
    /// each with the stored interior nodes its rows complete. Chain-only reads the chain's
    /// columns and the bytes alone, copied into one buffer per batch. Stops early when the
    /// checker has (its error is the one to report). Then, with `stored_tree`, that the tree holds
    /// no node past the entries (an append would fail on it).
    fn read_walk(
        &self,
        deep: bool,
        stored_tree: bool,
        to_checker: &std::sync::mpsc::SyncSender<WalkBatch>,
        walked: &mut dyn FnMut(u64, u64),
    ) -> Result<(), StoreError> {
        let conn = self.conn();
        let context = "reading entries to verify";
        // Inside the walk's read transaction: the entries it will read.
        let total = head_in(&conn).map_err(self.sql(context))?.0;
        walked(0, total);
        let sql = if deep {
            "SELECT seq, at_ms, prev, hash, body, kind, subject FROM entry ORDER BY seq"
        } else {
            "SELECT seq, at_ms, prev, hash, body FROM entry ORDER BY seq"
        };
        let mut stmt = conn.prepare(sql).map_err(self.sql(context))?;
        // (A ledger written before the tree, opened read-only, has no table to read.)
        let mut node_rows = stored_tree
            .then(|| {
                conn.prepare(
                    "SELECT idx, hash FROM tree WHERE level = ?1 AND idx >= ?2 AND idx < ?3
                     ORDER BY idx",
                )
            })
            .transpose()
            .map_err(self.sql(context))?;
        // The stored nodes leaves `[from, to)` complete: at level l, indexes `[from >> l, to >> l)`.
        let mut nodes_of = |from: u64, to: u64| -> Result<StoredLevels, StoreError> {
            let mut levels = vec![Vec::new()];
            let Some(node_rows) = node_rows.as_mut() else {
                return Ok(levels);
            };
            for level in 1..64u32 {
                let (lo, hi) = (from >> level, to >> level);
                if hi == 0 {
                    break;
                }
                let mut found = Vec::new();
                if lo < hi {
                    let mut rows = node_rows
                        .query(params![i64::from(level), lo as i64, hi as i64])
                        .map_err(self.sql(context))?;
                    while let Some(r) = rows.next().map_err(self.sql(context))? {
                        let hash = r
                            .get_ref(1)
                            .and_then(|v| v.as_blob().map_err(Into::into))
                            .map_err(self.sql(context))?;
                        found.push((
                            r.get::<_, i64>(0).map_err(self.sql(context))? as u64,
                            Hash::try_from(hash).ok(),
                        ));
                    }
                }
                levels.push(found);
            }
            Ok(levels)
        };
        let mut rows = stmt.query([]).map_err(self.sql(context))?;
        let mut batch = WalkRows::new(deep);
        let mut leaves = 0u64;
        while let Some(r) = rows.next().map_err(self.sql(context))? {
            let seq: i64 = r.get(0).map_err(self.sql(context))?;
            // The hashes and bytes are read in place (no copy per row but the batch's).
            let digest = |i, what| -> Result<[u8; 32], StoreError> {
                let bytes = r
                    .get_ref(i)
                    .and_then(|v| v.as_blob().map_err(Into::into))
                    .map_err(self.sql(context))?;
                hash32(bytes, what, seq).map_err(|why| {
                    StoreError::from(Broken {
                        seq: seq as u64,
                        why,
                    })
                })
            };
            let link = ChainLink {
                seq: seq as u64,
                at_ms: r.get(1).map_err(self.sql(context))?,
                prev: digest(2, "prev")?,
                hash: digest(3, "hash")?,
                bytes: 0,
            };
            let body = r
                .get_ref(4)
                .and_then(|v| v.as_blob().map_err(Into::into))
                .map_err(self.sql(context))?;
            match &mut batch {
                WalkRows::Links { links, bytes } => {
                    links.push(ChainLink {
                        bytes: body.len() as u64,
                        ..link
                    });
                    bytes.extend_from_slice(body);
                }
                WalkRows::Whole(whole) => {
                    let kind = r
                        .get_ref(5)
                        .and_then(|v| v.as_str().map_err(Into::into))
                        .map_err(self.sql(context))?;
                    whole.push(StoredEntry {
                        seq: link.seq,
                        at_ms: link.at_ms,
                        kind: kind_column(kind, seq)?,
                        subject: r.get(6).map_err(self.sql(context))?,
                        prev: link.prev,
                        hash: link.hash,
                        body: body.to_vec(),
                    });
                }
            }
            if batch.len() == VERIFY_BATCH {
                let to = leaves + VERIFY_BATCH as u64;
                let full = WalkBatch {
                    rows: std::mem::replace(&mut batch, WalkRows::new(deep)),
                    nodes: nodes_of(leaves, to)?,
                };
                leaves = to;
                walked(leaves, total);
                if to_checker.send(full).is_err() {
                    // The checker stopped at a broken entry: its error is the one to report.
                    return Ok(());
                }
            }
        }
        if batch.len() > 0 {
            let to = leaves + batch.len() as u64;
            let last = WalkBatch {
                rows: batch,
                nodes: nodes_of(leaves, to)?,
            };
            leaves = to;
            walked(leaves, total);
            if to_checker.send(last).is_err() {
                return Ok(());
            }
        }
        drop(rows);
        if !stored_tree {
            return Ok(());
        }
        // No stored node past the entries.
        let top: i64 = conn
            .query_row("SELECT COALESCE(MAX(level), 0) FROM tree", [], |r| r.get(0))
            .map_err(self.sql(context))?;
        for level in 1..=top.clamp(0, 63) as u32 {
            let past: Option<i64> = conn
                .query_row(
                    "SELECT idx FROM tree WHERE level = ?1 AND idx >= ?2 ORDER BY idx LIMIT 1",
                    params![i64::from(level), (leaves >> level) as i64],
                    |r| r.get(0),
                )
                .optional()
                .map_err(self.sql(context))?;
            if let Some(idx) = past {
                return Err(Broken {
                    seq: leaves,
                    why: format!(
                        "the stored Merkle tree has a node {idx} at level {level}, past the \
                         {leaves} entries (the next append would fail on it)"
                    ),
                }
                .into());
            }
        }
        Ok(())
    }

    /// The tree checkpoints against the entries' Merkle root (signed by the trusted key, or by
    /// the key of the chain's checkpoints). The stored tree was compared node by node in the
    /// walk.
    fn verify_tree(
        &self,
        walk: TreeWalk,
        notes: &[TreeNote],
        trusted: Option<&Trusted>,
        summary: &mut VerifySummary,
    ) -> Result<(), StoreError> {
        Ok(super::check_tree_notes(walk, notes, trusted, summary)?)
    }

    /// Whether the file has the tree's tables: a ledger written before them, opened read-only,
    /// has not (a writer adds and fills them when it opens the file). Once seen, known: they are
    /// never dropped.
    fn has_tree(&self) -> Result<bool, StoreError> {
        if self.tree_cache().has_tables {
            return Ok(true);
        }
        let has = self
            .conn()
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'
                 AND name IN ('tree', 'tree_checkpoint')",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n == 2)
            .map_err(self.sql("reading the schema"))?;
        self.tree_cache().has_tables |= has;
        Ok(has)
    }

    /// What an inclusion proof is made against, in the caller's read transaction: the latest
    /// tree checkpoint and the key of the latest chain checkpoint (`None`: not signed yet). A
    /// checkpoint never changes once written, so the last one read is kept while it is still
    /// the latest (two maxima read per call instead of the note, the checkpoint and the key).
    fn proof_head(&self) -> Result<Option<ProofHead>, StoreError> {
        if !self.has_tree()? {
            return Ok(None);
        }
        let latest: (Option<i64>, Option<i64>) = self
            .conn()
            .prepare_cached(
                "SELECT (SELECT MAX(size) FROM tree_checkpoint), (SELECT MAX(seq) FROM checkpoint)",
            )
            .and_then(|mut stmt| stmt.query_row([], |r| Ok((r.get(0)?, r.get(1)?))))
            .map_err(self.sql("reading the latest checkpoints"))?;
        let (Some(size), Some(seq)) = latest else {
            return Ok(None);
        };
        if let Some(head) = &self.tree_cache().head
            && head.tree_size == size as u64
            && head.chain_seq == seq as u64
        {
            return Ok(Some(head.clone()));
        }
        let Some(note) = self.latest_tree_note()? else {
            return Ok(None);
        };
        let Some(signer) = self.last_checkpoint()? else {
            return Ok(None);
        };
        let head = ProofHead {
            tree_size: note.size,
            chain_seq: signer.seq,
            note: note.note,
            verifier_key: tlog::note_key(&signer.public_key).verifier_key(),
        };
        self.tree_cache().head = Some(head.clone());
        Ok(Some(head))
    }

    /// Whether a verification compares a stored tree: the file has its tables, and it is built
    /// (some node stored) or should be (a tree checkpoint signed). A ledger written before the
    /// tree, opened read-only, has none until the daemon opens it for writing.
    fn has_stored_tree(&self, notes: &[TreeNote]) -> Result<bool, StoreError> {
        if !self.has_tree()? {
            return Ok(false);
        }
        if !notes.is_empty() {
            return Ok(true);
        }
        self.conn()
            .query_row("SELECT EXISTS (SELECT 1 FROM tree)", [], |r| {
                r.get::<_, bool>(0)
            })
            .map_err(self.sql("reading the tree"))
    }

    /// Every run and refund watch reads back: its blobs put back and, for a run, its results
    /// derived again and hashing to what it stored (`ledger::stored`). Pages of entries at a time.
    fn verify_derived(&self, named: &Named) -> Result<(), StoreError> {
        for page in named.derived.chunks(SCORE_ROWS_PAGE as usize) {
            // Each entry is read through the one way back every reader takes; a failure names it.
            self.entries_at(page)?;
        }
        Ok(())
    }

    fn verify_stored_blobs(&self) -> Result<(), StoreError> {
        // Read before the walk holds the connection (decompressing a blob may need them).
        self.load_dictionaries()?;
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT sha256, codec, bytes FROM blob")
            .map_err(self.sql("reading blobs"))?;
        let mut rows = stmt.query([]).map_err(self.sql("reading blobs"))?;
        while let Some(r) = rows.next().map_err(self.sql("reading blobs"))? {
            let key: Vec<u8> = r.get(0).map_err(self.sql("reading blobs"))?;
            let codec: i64 = r.get(1).map_err(self.sql("reading blobs"))?;
            let kept: Vec<u8> = r.get(2).map_err(self.sql("reading blobs"))?;
            let Some(bytes) = self.blob_bytes(codec, kept) else {
                return Err(self.corrupt(format!(
                    "blob {} does not decompress (codec {codec})",
                    hex::encode(&key)
                )));
            };
            let digest: [u8; 32] = Sha256::digest(&bytes).into();
            if digest[..] != key[..] {
                return Err(self.corrupt(format!(
                    "blob {} does not hash to its address",
                    hex::encode(&key)
                )));
            }
        }
        Ok(())
    }

    /// Every blob an entry names is there (its bytes were re-hashed with every stored blob).
    /// Returns how many distinct blobs are named.
    fn verify_named_blobs(&self, named: &Named) -> Result<u64, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached("SELECT 1 FROM blob WHERE sha256 = ?1")
            .map_err(self.sql("reading blobs"))?;
        for (sha, seq) in &named.blobs {
            let found = stmt
                .query_row([sha.as_slice()], |_| Ok(()))
                .optional()
                .map_err(self.sql("reading blobs"))?;
            if found.is_none() {
                return Err(Broken {
                    seq: *seq,
                    why: format!(
                        "it names blob {}, which the store does not have",
                        hex::encode(sha)
                    ),
                }
                .into());
            }
        }
        Ok(named.blobs.len() as u64)
    }

    /// Every score row holds what the score entry it names published, and each subject's newest
    /// row is its newest score entry's. Returns how many rows were checked.
    fn verify_score_rows(&self, named: &Named) -> Result<u64, StoreError> {
        let mut checked = 0u64;
        let mut after = 0i64;
        loop {
            let page: Vec<(i64, ScoreRow, Option<Vec<u8>>)> = {
                let conn = self.conn();
                let mut stmt = conn
                    .prepare_cached(
                        "SELECT s.rowid, s.subject, s.day, s.as_of_ms, s.seq, s.document, h.headline
                         FROM score s
                         LEFT JOIN score_headline h ON h.subject = s.subject AND h.day = s.day
                         WHERE s.rowid > ?1 ORDER BY s.rowid LIMIT ?2",
                    )
                    .map_err(self.sql("reading scores"))?;
                stmt.query_map(params![after, SCORE_ROWS_PAGE], |r| {
                    Ok((
                        r.get(0)?,
                        ScoreRow {
                            subject: r.get(1)?,
                            day: r.get(2)?,
                            as_of_ms: r.get(3)?,
                            seq: r.get::<_, i64>(4)? as u64,
                            document: score_document_read(r.get(5)?)?,
                        },
                        r.get(6)?,
                    ))
                })
                .map_err(self.sql("reading scores"))?
                .collect::<Result<_, _>>()
                .map_err(self.sql("reading scores"))?
            };
            let Some((last, _, _)) = page.last() else {
                break;
            };
            after = *last;
            let seqs: Vec<u64> = page.iter().map(|(_, r, _)| r.seq).collect();
            let entries: std::collections::BTreeMap<u64, ReadEntry> = self
                .entries_at(&seqs)?
                .into_iter()
                .map(|e| (e.seq, e))
                .collect();
            for (_, row, headline) in &page {
                super::check_score_row(row, headline.as_deref(), &entries)?;
                checked += 1;
            }
        }
        // Each subject's newest row (by day): its newest score entry, not an older one.
        let newest_rows: std::collections::BTreeMap<String, u64> = {
            let conn = self.conn();
            let mut stmt = conn
                .prepare("SELECT subject, seq, MAX(day) FROM score GROUP BY subject")
                .map_err(self.sql("reading scores"))?;
            stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))
                .map_err(self.sql("reading scores"))?
                .collect::<Result<_, _>>()
                .map_err(self.sql("reading scores"))?
        };
        super::check_newest_rows(named, &newest_rows)?;
        // A headline kept for a day with no score row (its row deleted, or the headline added).
        let orphan: Option<(String, String)> = self
            .conn()
            .query_row(
                "SELECT h.subject, h.day FROM score_headline h WHERE NOT EXISTS
                 (SELECT 1 FROM score s WHERE s.subject = h.subject AND s.day = h.day) LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(self.sql("reading scores"))?;
        if let Some((subject, day)) = orphan {
            return Err(super::orphan_headline(&subject, &day).into());
        }
        Ok(checked)
    }
}

/// The file a migration writes beside the ledger before it takes the ledger's name.
pub const MIGRATING_FILE: &str = "ledger.sqlite.migrating";
/// Where a migration keeps the format 1 ledger it replaced (a hard link: no copy).
pub const FORMAT_1_KEPT_FILE: &str = "ledger-format-1.sqlite";
/// The working state a migration copies as it is (the same seqs name the same entries).
const WORKING_STATE: [(&str, &str); 4] = [
    ("declared", "subject, seq, at_ms, body"),
    (
        "subject",
        "url, category, source, state, added_ms, next_free_ms, next_paid_ms, failures, \
         last_run_ms, last_paid_ms, revision",
    ),
    ("score", "subject, day, as_of_ms, seq, document"),
    (
        "webhook_outbox",
        "id, event_id, webhook, kind, created_ms, body, state, attempts, next_attempt_ms, \
         last_error, done_ms",
    ),
];
/// Entries read and appended per transaction of a migration.
const MIGRATE_PAGE: i64 = 512;

/// What a format 1 ledger was when it was migrated, recorded in the new ledger's `meta` table
/// (`migrated_from`) so that its continuity with the old ledger's signatures can be checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigratedFrom {
    /// The old ledger's schema id.
    pub format: String,
    pub head_seq: u64,
    /// The old head's hash (hex).
    pub head_hash: String,
    /// The old ledger's last signed checkpoint: `seq`, `hash`, `at_ms`, `public_key` and
    /// `signature` (hex), as its chain verifier checked it.
    pub checkpoint: Option<MigratedCheckpoint>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigratedCheckpoint {
    pub seq: u64,
    pub hash: String,
    pub at_ms: i64,
    pub public_key: String,
    pub signature: String,
}

/// What `ledger migrate` did.
#[derive(Debug, Clone)]
pub struct Migration {
    pub from: MigratedFrom,
    /// The old ledger's verification, before.
    pub before: VerifySummary,
    /// The new ledger's verification (deep, against the reporter key), after.
    pub after: VerifySummary,
    /// The old file's size and the new one's.
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Where the old ledger is kept.
    pub kept: PathBuf,
}

/// Why a migration did not happen (the ledger is then as it was).
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("{0} is already a ledger of format {SCHEMA_ID}: nothing to migrate")]
    AlreadyCurrent(String),
    #[error("{path} has schema {found:?}: only {SCHEMA_ID_1} ledgers are migrated")]
    UnknownFormat { path: String, found: String },
    #[error(
        "{0} is in use (is the daemon running? stop it first): the migration needs the ledger alone"
    )]
    InUse(String),
    #[error("the ledger does not verify before the migration (nothing changed): {0}")]
    BrokenBefore(StoreError),
    #[error("the migrated ledger does not verify (the old one is left in place): {0}")]
    BrokenAfter(StoreError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{context} {path}: {source}")]
    Io {
        context: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
}

fn io_error(context: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> MigrateError {
    let path = path.display().to_string();
    move |source| MigrateError::Io {
        context,
        path,
        source,
    }
}

/// Migrates the format 1 ledger of `state_dir` to format 2: verifies it, writes every entry in
/// the stored form of format 2 (same seqs, new hashes) to [`MIGRATING_FILE`] beside it, signing
/// a checkpoint with `key` at every seq the old ledger had one (at its time), copies the working
/// state (declarations, subjects, scores, the webhook outbox), records what it was
/// migrated from, verifies the new file against `key`, then makes it the ledger by an atomic
/// rename (the old one kept as [`FORMAT_1_KEPT_FILE`]). Killed at any point, the state directory
/// holds the old ledger or the new one, each whole.
pub fn migrate_format_1(
    state_dir: &Path,
    key: &ReporterKey,
    rubrics: &[Rubric],
    copied: &mut dyn FnMut(u64, u64),
) -> Result<Migration, MigrateError> {
    let path = state_dir.join(STORE_FILE);
    let shown = path.display().to_string();
    let sql = |context: &'static str| {
        let shown = shown.clone();
        move |source| {
            MigrateError::Store(StoreError::Sqlite {
                path: shown.clone(),
                context,
                source,
            })
        }
    };
    // The old ledger, ours alone for the whole migration (a daemon writing meanwhile would write
    // entries the new file does not have).
    let conn = Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
        .map_err(sql("opening"))?;
    conn.busy_timeout(std::time::Duration::from_secs(2))
        .map_err(sql("setting the busy timeout"))?;
    match stored_format(&conn).map_err(sql("reading the schema id"))? {
        Some(f) if f == SCHEMA_ID_1 => {}
        Some(f) if f == SCHEMA_ID => return Err(MigrateError::AlreadyCurrent(shown)),
        found => {
            return Err(MigrateError::UnknownFormat {
                path: shown,
                found: found.unwrap_or_default(),
            });
        }
    }
    conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
        .map_err(sql("locking"))?;
    if conn.execute_batch("BEGIN EXCLUSIVE; COMMIT;").is_err() {
        return Err(MigrateError::InUse(shown));
    }
    // Everything in the main file, so that the old ledger is one file (kept by a link below).
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .map_err(sql("checkpointing the WAL"))?;
    let old = SqliteStore::with_connection(conn, &path);
    let before = old.verify_format_1().map_err(MigrateError::BrokenBefore)?;
    let old_checkpoints = old.checkpoints()?;
    let from = MigratedFrom {
        format: SCHEMA_ID_1.to_string(),
        head_seq: before.head_seq,
        head_hash: before.head_hash.clone(),
        checkpoint: old_checkpoints.last().map(|c| MigratedCheckpoint {
            seq: c.seq,
            hash: hex::encode(c.hash),
            at_ms: c.at_ms,
            public_key: hex::encode(c.public_key),
            signature: hex::encode(c.signature),
        }),
    };

    // The new ledger, beside; a file a killed migration left is not trusted.
    let new_path = state_dir.join(MIGRATING_FILE);
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let side = PathBuf::from(format!("{}{suffix}", new_path.display()));
        match std::fs::remove_file(&side) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("removing", &side)(e)),
        }
    }
    private_store_file(&new_path).map_err(StoreError::from)?;
    let new = SqliteStore::open_file(&new_path)?;
    if let Some((first, rest)) = rubrics.split_first() {
        new.use_rubric(first);
        for r in rest {
            new.also_read_rubric(r);
        }
    }
    old.copy_blobs_format_1(&new)?;
    let mut signed_at = old_checkpoints.iter().peekable();
    let mut after = 0i64;
    let mut last_at_ms = 0;
    loop {
        let page = old.rows_format_1(after, MIGRATE_PAGE)?;
        let Some((last, _, _)) = page.last() else {
            break;
        };
        after = *last;
        copied(after as u64, before.head_seq);
        let mut batch = Vec::with_capacity(page.len());
        for (seq, at_ms, body) in page {
            let envelope: crate::ledger::chain::Envelope<Box<crate::evidence::run::RunRecord>> =
                serde_json::from_slice(&body).map_err(|e| {
                    old.corrupt(format!("entry {seq} is not a format 1 entry: {e}"))
                })?;
            let mut record = envelope.record;
            old.restore_bodies_format_1(&mut record)?;
            batch.push(NewEntry::plain(at_ms, record));
            last_at_ms = at_ms;
            // A checkpoint where the old ledger had one, at its time.
            if let Some(c) = signed_at.next_if(|c| c.seq == seq as u64) {
                new.append(std::mem::take(&mut batch))?;
                new.checkpoint(key, c.at_ms)?;
            }
        }
        new.append(batch)?;
    }
    new.checkpoint(key, last_at_ms)?;
    new.finish_migration(&old, &from)?;
    drop(new);
    let file = std::fs::File::open(&new_path).map_err(io_error("opening", &new_path))?;
    file.sync_all().map_err(io_error("syncing", &new_path))?;
    drop(file);

    // Verified before it takes the ledger's name.
    let checked = SqliteStore::open_read_only(&new_path).map_err(MigrateError::BrokenAfter)?;
    for r in rubrics {
        checked.also_read_rubric(r);
    }
    let trusted = Trusted {
        public_key: key.public_key(),
        max_unsigned_ms: 0,
    };
    let after_summary = checked
        .verify(Some(&trusted), true)
        .map_err(MigrateError::BrokenAfter)?;
    drop(checked);
    // The read's WAL files (empty: the writer folded its WAL into the file) go with it.
    for suffix in ["-wal", "-shm"] {
        let side = PathBuf::from(format!("{}{suffix}", new_path.display()));
        let _ = std::fs::remove_file(&side);
    }
    if after_summary.head_seq != before.head_seq {
        return Err(MigrateError::BrokenAfter(old.corrupt(format!(
            "the migrated ledger has {} entries, the old one {}",
            after_summary.head_seq, before.head_seq
        ))));
    }
    let bytes_before = std::fs::metadata(&path).map_or(0, |m| m.len());
    let bytes_after = std::fs::metadata(&new_path).map_or(0, |m| m.len());
    drop(old);

    let kept = state_dir.join(FORMAT_1_KEPT_FILE);
    match std::fs::remove_file(&kept) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error("removing", &kept)(e)),
    }
    std::fs::hard_link(&path, &kept).map_err(io_error("keeping the old ledger as", &kept))?;
    // The old ledger's WAL files, emptied by the checkpoint above, must not meet the new file.
    for suffix in ["-wal", "-shm"] {
        let side = PathBuf::from(format!("{}{suffix}", path.display()));
        match std::fs::remove_file(&side) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("removing", &side)(e)),
        }
    }
    std::fs::rename(&new_path, &path)
        .map_err(io_error("renaming the migrated ledger to", &path))?;
    std::fs::File::open(state_dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error("syncing", state_dir))?;
    Ok(Migration {
        from,
        before,
        after: after_summary,
        bytes_before,
        bytes_after,
        kept,
    })
}

impl SqliteStore {
    /// Verifies a format 1 ledger (what `ledger migrate` checks first, and what `ledger verify`
    /// says of one waiting for it): every entry's hash and link, its columns against its bytes
    /// (a format 1 envelope), every checkpoint and tree checkpoint, every blob against its name.
    pub fn verify_format_1(&self) -> Result<VerifySummary, StoreError> {
        let checkpoints = self.checkpoints()?;
        let notes = self.tree_notes()?;
        let mut verifier = Verifier::new_format_1(&checkpoints);
        let mut walk = TreeWalk::new(&notes);
        self.scan(0, &mut |row| {
            walk.feed(&row.body);
            verifier.feed(&row, true)?;
            Ok(())
        })?;
        let mut summary = verifier.finish(&checkpoints, None)?;
        summary.tree_root = hex::encode(walk.root());
        if !notes.is_empty() {
            let key = checkpoints.first().map(|c| c.public_key);
            summary.tree_signed_through = walk.finish(&notes, key.as_ref())?;
            summary.tree_checkpoints = notes.len() as u64;
        }
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT sha256, bytes FROM blob")
            .map_err(self.sql("reading blobs"))?;
        let mut rows = stmt.query([]).map_err(self.sql("reading blobs"))?;
        while let Some(r) = rows.next().map_err(self.sql("reading blobs"))? {
            let key: Vec<u8> = r.get(0).map_err(self.sql("reading blobs"))?;
            let bytes = r
                .get_ref(1)
                .and_then(|v| v.as_blob().map_err(Into::into))
                .map_err(self.sql("reading blobs"))?;
            let digest: [u8; 32] = Sha256::digest(bytes).into();
            if digest[..] != key[..] {
                return Err(self.corrupt(format!(
                    "blob {} does not hash to its address",
                    hex::encode(&key)
                )));
            }
        }
        Ok(summary)
    }

    /// Opens a format 1 ledger read-only, to verify it (`ledger verify` of a ledger waiting for
    /// `ledger migrate`).
    pub fn open_format_1(path: &Path) -> Result<SqliteStore, StoreError> {
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|source| StoreError::Sqlite {
                path: path.display().to_string(),
                context: "opening read-only",
                source,
            })?;
        let store = SqliteStore::with_connection(conn, path);
        match stored_format(&store.conn()).map_err(store.sql("reading the schema id"))? {
            Some(f) if f == SCHEMA_ID_1 => {}
            found => return Err(format_error(path, found.unwrap_or_default())),
        }
        Ok(store)
    }

    /// A format 1 ledger's rows after `after`: seq, time and bytes.
    fn rows_format_1(
        &self,
        after: i64,
        limit: i64,
    ) -> Result<Vec<(i64, i64, Vec<u8>)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, at_ms, body FROM entry WHERE seq > ?1 ORDER BY seq LIMIT ?2",
            )
            .map_err(self.sql("reading entries"))?;
        stmt.query_map(params![after, limit], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .map_err(self.sql("reading entries"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(self.sql("reading entries"))
    }

    /// Puts the bodies a format 1 entry kept apart back (its blobs are kept as they are).
    fn restore_bodies_format_1(&self, record: &mut Record) -> Result<(), StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached("SELECT bytes FROM blob WHERE sha256 = ?1")
            .map_err(self.sql("reading a blob"))?;
        for ex in record.exchanges_mut() {
            for response in ex.responses_mut() {
                if !response.body_stored_apart {
                    continue;
                }
                let key = hex::decode(&response.body_sha256).unwrap_or_default();
                let bytes: Option<Vec<u8>> = stmt
                    .query_row([key], |r| r.get(0))
                    .optional()
                    .map_err(self.sql("reading a blob"))?;
                let Some(bytes) = bytes else {
                    return Err(self.corrupt(format!("blob {} is missing", response.body_sha256)));
                };
                response.body = bytes;
                response.body_stored_apart = false;
            }
        }
        Ok(())
    }

    /// Every blob of a format 1 ledger into `new` (a score's value population is one; bodies
    /// come again with their runs and are kept once).
    fn copy_blobs_format_1(&self, new: &SqliteStore) -> Result<(), StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT bytes FROM blob")
            .map_err(self.sql("reading blobs"))?;
        let mut rows = stmt.query([]).map_err(self.sql("reading blobs"))?;
        while let Some(r) = rows.next().map_err(self.sql("reading blobs"))? {
            let bytes = r
                .get_ref(0)
                .and_then(|v| v.as_blob().map_err(Into::into))
                .map_err(self.sql("reading blobs"))?;
            new.put_blob(bytes)?;
        }
        Ok(())
    }

    /// The last step of writing a migrated ledger: the working state copied from the old file
    /// (the same seqs name the same entries), what it was migrated from, and the WAL folded into
    /// the file.
    fn finish_migration(&self, old: &SqliteStore, from: &MigratedFrom) -> Result<(), StoreError> {
        let old_conn = old.conn();
        let mut conn = self.writer()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sql("copying the working state"))?;
        for (table, columns) in WORKING_STATE {
            let mut read = old_conn
                .prepare(&format!("SELECT {columns} FROM {table}"))
                .map_err(old.sql("reading the working state"))?;
            let width = read.column_count();
            let places = vec!["?"; width].join(", ");
            let mut write = tx
                .prepare(&format!(
                    "INSERT INTO {table} ({columns}) VALUES ({places})"
                ))
                .map_err(self.sql("copying the working state"))?;
            let mut rows = read
                .query([])
                .map_err(old.sql("reading the working state"))?;
            while let Some(r) = rows.next().map_err(old.sql("reading the working state"))? {
                let values = (0..width)
                    .map(|i| r.get::<_, rusqlite::types::Value>(i))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(old.sql("reading the working state"))?;
                write
                    .execute(rusqlite::params_from_iter(values))
                    .map_err(self.sql("copying the working state"))?;
            }
        }
        tx.commit().map_err(self.sql("copying the working state"))?;
        // The score rows copied keep no headline yet: derived now, as for any older row.
        conn.execute("DELETE FROM meta WHERE key = 'score_headlines'", [])
            .map_err(self.sql("deriving the score rows' headlines"))?;
        derive_missing_headlines(&mut conn)
            .map_err(self.sql("deriving the score rows' headlines"))?;
        let from = serde_json::to_string(from).unwrap_or_default();
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('migrated_from', ?1)",
            [from],
        )
        .map_err(self.sql("recording the migration"))?;
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(self.sql("checkpointing the WAL"))?;
        Ok(())
    }

    /// What this ledger was migrated from, when it was (`meta.migrated_from`).
    pub fn migrated_from(&self) -> Result<Option<MigratedFrom>, StoreError> {
        let text: Option<String> = self
            .conn()
            .query_row(
                "SELECT value FROM meta WHERE key = 'migrated_from'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.sql("reading the migration's record"))?;
        text.map(|t| {
            serde_json::from_str(&t)
                .map_err(|e| self.corrupt(format!("meta.migrated_from does not parse: {e}")))
        })
        .transpose()
    }
}

/// A checkpoint's columns as read: seq, hash, time, public key, signature.
type CheckpointRow = (i64, Vec<u8>, i64, Vec<u8>, Vec<u8>);

/// A store's working state beside its log, read whole (what `store copy` moves): subjects, score
/// rows with their headlines, folded states with their days, declarations, run ids, the outbox.
#[derive(Debug, Default)]
pub(crate) struct WorkingState {
    pub(crate) subjects: Vec<SubjectRow>,
    pub(crate) scores: Vec<(ScoreRow, Option<Vec<u8>>)>,
    pub(crate) states: Vec<super::StateRow>,
    /// (subject, seq, at_ms, body)
    pub(crate) declared: Vec<(String, u64, i64, Vec<u8>)>,
    /// (run id, seq)
    pub(crate) run_ids: Vec<(String, u64)>,
    pub(crate) outbox: Vec<OutboxRow>,
}

impl SqliteStore {
    /// The working state, read whole in one read transaction.
    pub(crate) fn working_state(&self) -> Result<WorkingState, StoreError> {
        let _snapshot = ReadSnapshot::begin(self)?;
        let mut state = WorkingState {
            subjects: self.subjects()?,
            outbox: self.outbox_rows()?,
            ..WorkingState::default()
        };
        let conn = self.conn();
        let read = self.sql("reading the working state");
        state.scores = conn
            .prepare(
                "SELECT s.subject, s.day, s.as_of_ms, s.seq, s.document, h.headline FROM score s
                 LEFT JOIN score_headline h ON h.subject = s.subject AND h.day = s.day
                 ORDER BY s.subject, s.day",
            )
            .and_then(|mut stmt| {
                stmt.query_map([], |r| Ok((read_score(r)?, r.get(5)?)))?
                    .collect::<Result<_, _>>()
            })
            .map_err(&read)?;
        state.declared = conn
            .prepare("SELECT subject, seq, at_ms, body FROM declared ORDER BY subject, seq")
            .and_then(|mut stmt| {
                stmt.query_map([], |r| {
                    Ok((r.get(0)?, r.get::<_, i64>(1)? as u64, r.get(2)?, r.get(3)?))
                })?
                .collect::<Result<_, _>>()
            })
            .map_err(&read)?;
        state.run_ids = conn
            .prepare("SELECT id, seq FROM run_id ORDER BY id")
            .and_then(|mut stmt| {
                stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?
                    .collect::<Result<_, _>>()
            })
            .map_err(&read)?;
        let subjects: Vec<String> = conn
            .prepare("SELECT subject FROM subject_state ORDER BY subject")
            .and_then(|mut stmt| stmt.query_map([], |r| r.get(0))?.collect())
            .map_err(&read)?;
        drop(conn);
        for subject in subjects {
            state.states.extend(self.subject_state(&subject)?);
        }
        Ok(state)
    }
}

const SELECT_OUTBOX: &str = "SELECT id, event_id, webhook, kind, created_ms, body, state,
    attempts, next_attempt_ms, last_error, done_ms FROM webhook_outbox";

impl SqliteStore {
    fn read_outbox<P: rusqlite::Params>(
        &self,
        sql: &str,
        params: P,
    ) -> Result<Vec<OutboxRow>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(sql)
            .map_err(self.sql("reading the outbox"))?;
        let rows = stmt
            .query_map(params, |r| {
                let id: i64 = r.get(0)?;
                let (kind, state): (String, String) = (r.get(3)?, r.get(6)?);
                let Some(kind) = EventKind::parse(&kind) else {
                    return Ok(Err(format!("outbox row {id}: unknown event kind {kind:?}")));
                };
                let Some(state) = OutboxState::parse(&state) else {
                    return Ok(Err(format!("outbox row {id}: unknown state {state:?}")));
                };
                Ok(Ok(OutboxRow {
                    id,
                    event: NewOutboxEvent {
                        event_id: r.get(1)?,
                        webhook: r.get(2)?,
                        kind,
                        created_ms: r.get(4)?,
                        body: r.get(5)?,
                    },
                    state,
                    attempts: r.get(7)?,
                    next_attempt_ms: r.get(8)?,
                    last_error: r.get(9)?,
                    done_ms: r.get(10)?,
                }))
            })
            .map_err(self.sql("reading the outbox"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("reading the outbox"))?;
        rows.into_iter()
            .map(|row| row.map_err(|why| self.corrupt(why)))
            .collect()
    }
}

fn insert_outbox_in(conn: &Connection, e: &NewOutboxEvent) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO webhook_outbox (event_id, webhook, kind, created_ms, body, state, attempts,
             next_attempt_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, 'pending', 0, 0)",
    )?
    .execute(params![
        e.event_id,
        e.webhook,
        e.kind.as_str(),
        e.created_ms,
        e.body
    ])?;
    Ok(())
}

const SELECT_SUBJECT: &str = "SELECT url, category, source, state, added_ms, next_free_ms,
    next_paid_ms, failures, last_run_ms, last_paid_ms, revision FROM subject";

fn read_subject(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<SubjectRow, String>> {
    let state: String = r.get(3)?;
    let url: String = r.get(0)?;
    let Some(state) = SubjectState::parse(&state) else {
        return Ok(Err(format!("subject {url}: unknown state {state:?}")));
    };
    Ok(Ok(SubjectRow {
        url,
        category: r.get(1)?,
        source: r.get(2)?,
        state,
        added_ms: r.get(4)?,
        next_free_ms: r.get(5)?,
        next_paid_ms: r.get(6)?,
        failures: r.get(7)?,
        last_run_ms: r.get(8)?,
        last_paid_ms: r.get(9)?,
        revision: r.get(10)?,
    }))
}

fn read_score(r: &rusqlite::Row<'_>) -> rusqlite::Result<ScoreRow> {
    Ok(ScoreRow {
        subject: r.get(0)?,
        day: r.get(1)?,
        as_of_ms: r.get(2)?,
        seq: r.get::<_, i64>(3)? as u64,
        document: score_document_read(r.get(4)?)?,
    })
}

fn put_subject_in(conn: &Connection, row: &SubjectRow) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO subject (url, category, source, state, added_ms, next_free_ms,
             next_paid_ms, failures, last_run_ms, last_paid_ms, revision)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
         ON CONFLICT (url) DO UPDATE SET category = ?2, source = ?3, state = ?4,
             added_ms = ?5, next_free_ms = ?6, next_paid_ms = ?7, failures = ?8,
             last_run_ms = ?9, last_paid_ms = ?10, revision = ?11",
    )?
    .execute(params![
        row.url,
        row.category,
        row.source,
        row.state.as_str(),
        row.added_ms,
        row.next_free_ms,
        row.next_paid_ms,
        row.failures,
        row.last_run_ms,
        row.last_paid_ms,
        row.revision,
    ])?;
    Ok(())
}

fn put_state_in(conn: &rusqlite::Connection, row: &super::StateRow) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO subject_state (subject, through_seq, sha256, body) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (subject) DO UPDATE SET through_seq = excluded.through_seq,
         sha256 = excluded.sha256, body = excluded.body",
    )?
    .execute(params![
        row.subject,
        row.through_seq.min(i64::MAX as u64) as i64,
        row.sha256.as_slice(),
        row.body
    ])?;
    for day in &row.days {
        conn.prepare_cached(
            "INSERT INTO subject_days (subject, day, sha256, body) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (subject, day) DO UPDATE SET sha256 = excluded.sha256,
             body = excluded.body",
        )?
        .execute(params![
            row.subject,
            day.day,
            day.sha256.as_slice(),
            day.body
        ])?;
    }
    conn.prepare_cached("DELETE FROM subject_days WHERE subject = ?1 AND day < ?2")?
        .execute(params![row.subject, row.days_from])?;
    Ok(())
}

/// A score document as its row keeps it: packed (a document of the day is rewritten with every
/// score; its JSON repeats its keys and names).
fn score_document_kept(document: &[u8]) -> Vec<u8> {
    packed::pack(document)
}

/// A score row's document as the readers see it: JSON as kept, or unpacked.
fn score_document_read(kept: Vec<u8>) -> rusqlite::Result<Vec<u8>> {
    if !kept.starts_with(&packed::ZSTD_MAGIC) {
        return Ok(kept);
    }
    match packed::unpack(&kept, MAX_SCORE_DOCUMENT_BYTES) {
        Ok(document) => Ok(document.into_owned()),
        Err(e) => Err(rusqlite::Error::FromSqlConversionFailure(
            4,
            rusqlite::types::Type::Blob,
            Box::new(e),
        )),
    }
}

/// The most a score row's document may unpack to (a score document without its inputs is a few
/// kilobytes).
const MAX_SCORE_DOCUMENT_BYTES: usize = 64 << 20;

/// Keeps `row` with its headline (`headline`, or derived from the document when not given;
/// none for a document that does not read back, whose readers name it).
fn put_score_in(
    conn: &Connection,
    row: &ScoreRow,
    headline: Option<Vec<u8>>,
) -> rusqlite::Result<()> {
    let headline = headline.or_else(|| {
        ScoreHeadline::of_stored(&row.document)
            .ok()
            .map(|h| h.to_bytes())
    });
    conn.prepare_cached(
        "INSERT INTO score (subject, day, as_of_ms, seq, document)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (subject, day) DO UPDATE SET as_of_ms = ?3, seq = ?4, document = ?5",
    )?
    .execute(params![
        row.subject,
        row.day,
        row.as_of_ms,
        row.seq as i64,
        score_document_kept(&row.document),
    ])?;
    match headline {
        Some(headline) => conn
            .prepare_cached(
                "INSERT INTO score_headline (subject, day, headline) VALUES (?1, ?2, ?3)
                 ON CONFLICT (subject, day) DO UPDATE SET headline = ?3",
            )?
            .execute(params![row.subject, row.day, headline])?,
        // The day's earlier headline is not this document's.
        None => conn
            .prepare_cached("DELETE FROM score_headline WHERE subject = ?1 AND day = ?2")?
            .execute(params![row.subject, row.day])?,
    };
    Ok(())
}

/// A ledger whose score rows kept their headline in a column of `score` (an earlier build of
/// format 2, which is not released; this spares rebuilding a large working ledger) has them moved
/// to `score_headline`, and the column dropped, once.
fn move_headline_column(conn: &Connection) -> rusqlite::Result<()> {
    let has_headline: bool = conn.query_row(
        "SELECT COUNT(*) FROM pragma_table_info('score') WHERE name = 'headline'",
        [],
        |r| r.get::<_, i64>(0).map(|n| n > 0),
    )?;
    if has_headline {
        conn.execute_batch(
            "BEGIN IMMEDIATE;
             INSERT OR IGNORE INTO score_headline (subject, day, headline)
                 SELECT subject, day, headline FROM score WHERE headline IS NOT NULL;
             ALTER TABLE score DROP COLUMN headline;
             COMMIT;",
        )?;
    }
    Ok(())
}

/// Derives the headline of every score row without one (rows of an older build, or copied by
/// a migration) in one transaction, once: `meta.score_headlines` records that it was done, so a
/// later open reads one row (every score written since keeps its headline). A document that
/// does not read back keeps no headline (its readers name it).
fn derive_missing_headlines(conn: &mut Connection) -> rusqlite::Result<u64> {
    let done: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'score_headlines'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    if done.is_some() {
        return Ok(0);
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut derived = 0;
    {
        let mut rows = tx.prepare(
            "SELECT s.subject, s.day, s.document FROM score s
             WHERE NOT EXISTS (SELECT 1 FROM score_headline h
                               WHERE h.subject = s.subject AND h.day = s.day)",
        )?;
        let mut insert =
            tx.prepare("INSERT INTO score_headline (subject, day, headline) VALUES (?1, ?2, ?3)")?;
        let mut read = rows.query([])?;
        while let Some(r) = read.next()? {
            let (subject, day): (String, String) = (r.get(0)?, r.get(1)?);
            let document = score_document_read(r.get(2)?)?;
            if let Ok(headline) = ScoreHeadline::of_stored(&document) {
                insert.execute(params![subject, day, headline.to_bytes()])?;
                derived += 1;
            }
        }
    }
    tx.execute(
        "INSERT OR REPLACE INTO meta (key, value) VALUES ('score_headlines', 'derived')",
        [],
    )?;
    tx.commit()?;
    Ok(derived)
}

fn head_in(conn: &Connection) -> rusqlite::Result<(u64, [u8; 32])> {
    // Cached: every score reads the head (preparing the statement each time cost more than the
    // read).
    let row: Option<(i64, Vec<u8>)> = conn
        .prepare_cached("SELECT seq, hash FROM entry ORDER BY seq DESC LIMIT 1")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(match row {
        None => (0, [0u8; 32]),
        Some((seq, hash)) => (seq as u64, hash.try_into().unwrap_or([0u8; 32])),
    })
}

/// Interior nodes of the tree one process keeps in memory (32 bytes each, 32 MB): every level
/// of a log of up to this many entries, the upper levels of a larger one.
const TREE_CACHE_NODES: u64 = 1 << 20;

/// The stored tree as this process knows it, shared by a store's handles: the right edge its
/// writer appends to, and the upper levels of interior nodes read or written so far. Nodes never
/// change once written, so what is kept here is never stale: a node not known yet is read from
/// the file (with every later one of its level). A proof then reads from the file only the
/// entry hash beside its leaf and the nodes below the levels kept. Verification never reads it.
#[derive(Debug)]
struct TreeCache {
    /// The right edge as of `frontier.size()` entries, as this process last committed it.
    frontier: Option<Frontier>,
    /// `levels[l]`: nodes `0..` of level `l`, a prefix of the stored level (empty below
    /// `from_level`).
    levels: Vec<Vec<Hash>>,
    /// The lowest level kept.
    from_level: u32,
    /// The file has the tree's tables (seen once; never dropped).
    has_tables: bool,
    /// The checkpoints the last proof was made against.
    head: Option<ProofHead>,
}

impl Default for TreeCache {
    fn default() -> TreeCache {
        TreeCache {
            frontier: None,
            levels: Vec::new(),
            from_level: 1,
            has_tables: false,
            head: None,
        }
    }
}

/// The latest tree checkpoint (its size and signed note) and the key of the latest chain
/// checkpoint (at `chain_seq`), as read: what [`SqliteStore::proof_head`] keeps.
#[derive(Debug, Clone)]
struct ProofHead {
    tree_size: u64,
    chain_seq: u64,
    note: String,
    /// The key's text form, made once (its id is a hash).
    verifier_key: String,
}

impl TreeCache {
    /// The lowest level kept for a log of `size` entries: level 1 up to [`TREE_CACHE_NODES`]
    /// entries, one level higher for every doubling past it (about that many nodes kept).
    fn lowest_level(size: u64) -> u32 {
        1 + (64 - (size / TREE_CACHE_NODES).leading_zeros())
    }

    /// Lets the levels below what a log of `size` entries keeps go.
    fn fit(&mut self, size: u64) {
        let from = Self::lowest_level(size);
        if from > self.from_level {
            for level in self.levels.iter_mut().take(from as usize) {
                *level = Vec::new();
            }
            self.from_level = from;
        }
    }

    /// Whether nodes of `level` are kept for a log of `size` entries.
    fn keeps(&self, level: u32, size: u64) -> bool {
        level >= self.from_level.max(Self::lowest_level(size))
    }

    /// Node `index` of a kept level: known, or read from the file with every later node of
    /// its level (`None`: the file does not have it).
    fn node(
        &mut self,
        conn: &Connection,
        level: u32,
        index: u64,
    ) -> rusqlite::Result<Option<Hash>> {
        let l = level as usize;
        if self.levels.len() <= l {
            self.levels.resize_with(l + 1, Vec::new);
        }
        let known = &mut self.levels[l];
        if index >= known.len() as u64 {
            let mut stmt = conn.prepare_cached(
                "SELECT idx, hash FROM tree WHERE level = ?1 AND idx >= ?2 ORDER BY idx",
            )?;
            let mut rows = stmt.query(params![i64::from(level), known.len() as i64])?;
            while let Some(r) = rows.next()? {
                let idx: i64 = r.get(0)?;
                let Ok(hash) = Hash::try_from(r.get_ref(1)?.as_blob()?) else {
                    break;
                };
                if idx != known.len() as i64 {
                    break;
                }
                known.push(hash);
            }
        }
        Ok(usize::try_from(index)
            .ok()
            .and_then(|i| known.get(i))
            .copied())
    }

    /// Nodes of kept levels, as [`TreeCache::node`] gives them one by one: every level read
    /// far enough first, then the hashes copied in one tight loop. A proof's nodes lie far
    /// apart in the kept levels (tens of MB for a log of a million entries), each a cache miss;
    /// with nothing between the loads the processor waits for them together, not in turn
    /// (measured: reading them one by one was a tenth of a single proof's time).
    fn gather(
        &mut self,
        conn: &Connection,
        wanted: &[(u32, u64)],
    ) -> rusqlite::Result<Vec<Option<Hash>>> {
        for &(level, index) in wanted {
            let known = self.levels.get(level as usize).map_or(0, Vec::len) as u64;
            if index >= known {
                self.node(conn, level, index)?;
            }
        }
        let levels = &self.levels;
        Ok(wanted
            .iter()
            .map(|&(level, index)| {
                let level = levels.get(level as usize)?;
                level.get(usize::try_from(index).ok()?).copied()
            })
            .collect())
    }

    /// What this process has just committed: the right edge after it, and the nodes written.
    fn committed(&mut self, frontier: Frontier, nodes: &[(u32, u64, Hash)]) {
        self.fit(frontier.size());
        for &(level, index, hash) in nodes {
            if level < self.from_level {
                continue;
            }
            if let Some(known) = self.levels.get_mut(level as usize)
                && known.len() as u64 == index
            {
                known.push(hash);
            }
        }
        self.frontier = Some(frontier);
    }
}

/// The hash of entry `seq` (its leaf hash: level 0 of the tree), as stored.
fn entry_hash_in(conn: &Connection, seq: u64) -> rusqlite::Result<Option<Hash>> {
    let mut stmt = conn.prepare_cached("SELECT hash FROM entry WHERE seq = ?1")?;
    let bytes: Option<Vec<u8>> = stmt.query_row([seq as i64], |r| r.get(0)).optional()?;
    Ok(bytes.and_then(|b| b.try_into().ok()))
}

/// An interior node as stored.
fn tree_node_in(conn: &Connection, level: u32, index: u64) -> rusqlite::Result<Option<Hash>> {
    let mut stmt = conn.prepare_cached("SELECT hash FROM tree WHERE level = ?1 AND idx = ?2")?;
    let bytes: Option<Vec<u8>> = stmt
        .query_row(params![i64::from(level), index as i64], |r| r.get(0))
        .optional()?;
    Ok(bytes.and_then(|b| b.try_into().ok()))
}

/// The right edge of the stored tree of `size` entries, read from the file (`None`: a node of it
/// is missing).
fn stored_frontier_in(conn: &Connection, size: u64) -> rusqlite::Result<Option<Frontier>> {
    let mut stack = Vec::new();
    for (level, index) in merkle::frontier_nodes(size) {
        let node = if level == 0 {
            entry_hash_in(conn, index + 1)?
        } else {
            tree_node_in(conn, level, index)?
        };
        match node {
            Some(hash) => stack.push(hash),
            None => return Ok(None),
        }
    }
    Ok(Frontier::from_parts(size, stack))
}

/// The stored tree's perfect subtrees as of `size` entries, read through one connection: the
/// leaves are the entries' own hashes (`entry.hash`), the interior nodes the `tree` table's,
/// its upper levels through the process's cache when one is given (a root or a proof reads
/// O(log^2 n) of them, whatever the log's age).
struct SqliteNodes<'c> {
    conn: &'c Connection,
    size: u64,
    cache: Option<&'c Mutex<TreeCache>>,
}

impl<'c> SqliteNodes<'c> {
    /// The nodes as the file has them.
    #[cfg(test)]
    fn new(conn: &'c Connection, size: u64) -> SqliteNodes<'c> {
        SqliteNodes {
            conn,
            size,
            cache: None,
        }
    }

    /// The nodes, the upper levels through the process's cache.
    fn cached(conn: &'c Connection, size: u64, cache: &'c Mutex<TreeCache>) -> SqliteNodes<'c> {
        SqliteNodes {
            conn,
            size,
            cache: Some(cache),
        }
    }
}

impl PerfectNodes for SqliteNodes<'_> {
    fn size(&self) -> u64 {
        self.size
    }

    fn perfect(&self, level: u32, index: u64) -> Option<Hash> {
        // Only subtrees complete within `size` (a later one may exist, but is not this tree's).
        if (index + 1).checked_shl(level)? > self.size {
            return None;
        }
        if level == 0 {
            return entry_hash_in(self.conn, index + 1).ok()?;
        }
        if let Some(cache) = self.cache {
            let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache.keeps(level, self.size) {
                return cache.node(self.conn, level, index).ok()?;
            }
        }
        tree_node_in(self.conn, level, index).ok()?
    }
}

/// Nodes fetched per statement at most (unused places repeat the first).
const FETCH_NODES: usize = 32;

/// The statements' sizes: a fetch binds the smallest that holds its nodes, since SQLite builds
/// an `IN` list's values into a table at each step (a proof of one entry wants one leaf: binding
/// 32 places for it cost more than reading the leaf).
const FETCH_SIZES: [usize; 6] = [1, 2, 4, 8, 16, FETCH_NODES];

/// The smallest of [`FETCH_SIZES`] that holds `n` nodes (`n` at most [`FETCH_NODES`]).
fn fetch_size(n: usize) -> usize {
    FETCH_SIZES
        .iter()
        .copied()
        .find(|&size| size >= n)
        .unwrap_or(FETCH_NODES)
}

/// Entries' hashes by seq, one statement per size of [`FETCH_SIZES`].
static FETCH_LEAVES_SQL: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    FETCH_SIZES
        .iter()
        .map(|&n| {
            let seqs: Vec<String> = (1..=n).map(|i| format!("?{i}")).collect();
            format!(
                "SELECT seq, hash FROM entry WHERE seq IN ({})",
                seqs.join(", ")
            )
        })
        .collect()
});

/// Interior nodes by level and index, one statement per size of [`FETCH_SIZES`].
static FETCH_NODES_SQL: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    FETCH_SIZES
        .iter()
        .map(|&n| {
            let places: Vec<String> = (0..n)
                .map(|i| format!("(?{}, ?{})", 2 * i + 1, 2 * i + 2))
                .collect();
            format!(
                "SELECT level, idx, hash FROM tree WHERE (level, idx) IN (VALUES {})",
                places.join(", ")
            )
        })
        .collect()
});

/// The statement of `sqls` (one per size of [`FETCH_SIZES`]) that holds `n` nodes, and its size.
fn fetch_sql(sqls: &[String], n: usize) -> (&str, usize) {
    let size = fetch_size(n);
    let i = FETCH_SIZES.iter().position(|&s| s == size).unwrap_or(0);
    (&sqls[i], size)
}

/// The perfect subtrees a proof reads: the kept levels from the process's cache, the leaves
/// from `entry` and the lower interior nodes from `tree`, each a few at a time.
impl FetchedNodes {
    fn read(
        conn: &Connection,
        size: u64,
        wanted: &[(u32, u64)],
        cache: &Mutex<TreeCache>,
    ) -> rusqlite::Result<FetchedNodes> {
        let mut hashes =
            merkle::NodeMap::with_capacity_and_hasher(wanted.len(), Default::default());
        let (mut leaves, mut lower) = (Vec::new(), Vec::new());
        {
            let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
            let mut kept = Vec::with_capacity(wanted.len());
            for &(level, index) in wanted {
                if level == 0 {
                    leaves.push(index + 1);
                } else if cache.keeps(level, size) {
                    kept.push((level, index));
                } else {
                    lower.push((level, index));
                }
            }
            for (at, hash) in kept.iter().zip(cache.gather(conn, &kept)?) {
                if let Some(hash) = hash {
                    hashes.insert(*at, hash);
                }
            }
        }
        for chunk in leaves.chunks(FETCH_NODES) {
            let (sql, places) = fetch_sql(&FETCH_LEAVES_SQL, chunk.len());
            let mut stmt = conn.prepare_cached(sql)?;
            let params = (0..places).map(|i| *chunk.get(i).unwrap_or(&chunk[0]) as i64);
            let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
            while let Some(r) = rows.next()? {
                let seq: i64 = r.get(0)?;
                if let Ok(hash) = Hash::try_from(r.get_ref(1)?.as_blob()?) {
                    hashes.insert((0, seq as u64 - 1), hash);
                }
            }
        }
        for chunk in lower.chunks(FETCH_NODES) {
            let (sql, places) = fetch_sql(&FETCH_NODES_SQL, chunk.len());
            let mut stmt = conn.prepare_cached(sql)?;
            let mut params: Vec<i64> = Vec::with_capacity(2 * places);
            for i in 0..places {
                let (level, idx) = chunk.get(i).unwrap_or(&chunk[0]);
                params.push(i64::from(*level));
                params.push(*idx as i64);
            }
            let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
            while let Some(r) = rows.next()? {
                let level: i64 = r.get(0)?;
                let idx: i64 = r.get(1)?;
                if let Ok(hash) = Hash::try_from(r.get_ref(2)?.as_blob()?) {
                    hashes.insert((level as u32, idx as u64), hash);
                }
            }
        }
        Ok(FetchedNodes { size, hashes })
    }
}

/// Builds the stored tree of a ledger whose tree is missing or incomplete (written before the
/// tree), once, when the store is opened for writing; and drops the leaf rows a ledger written
/// before the leaves were the entries' own hashes kept. Its entries are not trusted for this:
/// `ledger verify` still compares every stored node with what the entries' bytes give.
fn build_missing_tree(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute("DELETE FROM tree WHERE level = 0", [])?;
    let entries: i64 =
        conn.query_row("SELECT COALESCE(MAX(seq), 0) FROM entry", [], |r| r.get(0))?;
    // Built through the head: its right edge is there, and level 1 ends where the entries do
    // (a point read or two, whatever the log's size).
    let pairs = entries as u64 / 2;
    let built = stored_frontier_in(conn, entries as u64)?.is_some()
        && (pairs == 0 || tree_node_in(conn, 1, pairs - 1)?.is_some())
        && tree_node_in(conn, 1, pairs)?.is_none();
    if built {
        return Ok(());
    }
    let tx = conn.unchecked_transaction()?;
    tx.execute("DELETE FROM tree", [])?;
    {
        let mut insert =
            tx.prepare_cached("INSERT INTO tree (level, idx, hash) VALUES (?1, ?2, ?3)")?;
        let mut frontier = Frontier::new();
        let mut stmt = tx.prepare("SELECT body FROM entry ORDER BY seq")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let mut failed = Ok(());
            frontier.push_completing(leaf_hash(r.get_ref(0)?.as_blob()?), |level, idx, hash| {
                if failed.is_ok() {
                    failed = insert
                        .execute(params![i64::from(level), idx as i64, hash.as_slice()])
                        .map(drop);
                }
            });
            failed?;
        }
    }
    tx.commit()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state_dir::StateDirError;

    fn control(at_ms: i64) -> NewEntry {
        NewEntry::plain(
            at_ms,
            Record::Control(crate::ledger::record::ControlRecord {
                url: "https://control.example/".into(),
                at_ms,
                ok: true,
                detail: format!("probe at {at_ms}"),
            }),
        )
    }

    /// A thread's reads keep to one connection of the pool (its page cache holds what the
    /// thread read), and two threads reading at once still take two.
    #[test]
    fn a_threads_reads_keep_to_the_connection_it_used_last() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("state")).unwrap();
        let address = |conn: &MutexGuard<'_, Connection>| &**conn as *const Connection as usize;
        std::thread::scope(|s| {
            s.spawn(|| {
                let first = address(&store.conn());
                for _ in 0..2 * READERS {
                    assert_eq!(
                        address(&store.conn()),
                        first,
                        "a read moved to another connection"
                    );
                }
                let pinned = ReadSnapshot::begin(&store).unwrap();
                assert_eq!(address(&store.conn()), first, "a read transaction moved");
                drop(pinned);
                let held = store.conn();
                let other =
                    std::thread::scope(|s| s.spawn(|| address(&store.conn())).join().unwrap());
                assert_ne!(address(&held), other, "a busy connection was shared");
            });
        });
    }

    /// The plan SQLite makes for a statement, as `EXPLAIN QUERY PLAN` details joined by `; `.
    fn plan(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let details: Vec<String> = stmt
            .query_map(params, |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        details.join("; ")
    }

    /// The reads every run makes search their indexes (a change of the schema or of a statement
    /// that left them walking a table, or every entry of a subject, fails here): a subject's
    /// entries other than runs and scores by the partial index of those, a subject's runs by the
    /// subject index, the declarations of the scoring window by the time index, the latest
    /// declaration and the subject's state by their primary keys. On the store's own
    /// connection, with entries of several subjects and kinds in it.
    #[test]
    fn the_reads_of_a_run_search_their_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("state")).unwrap();
        store
            .append((0..50).map(|i| control(i * 1_000)).collect())
            .unwrap();
        let conn = store.conn();
        let rare = plan(
            &conn,
            &subject_entries_sql(&[RecordKind::Revision, RecordKind::Note]),
            params!["https://a.example/", 0],
        );
        assert_eq!(
            rare,
            "SEARCH entry USING INDEX entry_subject_rare (subject=? AND seq>?)",
        );
        for kinds in [&[RecordKind::Run][..], &[]] {
            let runs = plan(
                &conn,
                &subject_entries_sql(kinds),
                params!["https://a.example/", 0],
            );
            assert_eq!(
                runs, "SEARCH entry USING INDEX entry_subject (subject=? AND seq>?)",
                "{kinds:?}"
            );
        }
        let declared = plan(&conn, DECLARED_SINCE_SQL, params!["https://a.example/", 0]);
        assert!(
            declared
                .starts_with("SEARCH declared USING INDEX declared_time (subject=? AND at_ms>?)"),
            "{declared}"
        );
        let latest = plan(&conn, LATEST_DECLARED_SQL, params!["https://a.example/"]);
        assert_eq!(latest, "SEARCH declared USING PRIMARY KEY (subject=?)");
        let state = plan(&conn, SUBJECT_STATE_SQL, params!["https://a.example/"]);
        assert!(
            state.starts_with(
                "SEARCH subject_state USING INDEX sqlite_autoindex_subject_state_1 (subject=?)"
            ),
            "{state}"
        );
    }

    /// The tree is written with the entries, proofs from it verify against the root the entries
    /// give, and a ledger written before the tree (its tables dropped here) gets it built when
    /// opened for writing, the same tree to the byte; read-only, it is reported as not built.
    #[test]
    fn the_tree_is_kept_with_the_entries_and_built_for_an_older_ledger() {
        use crate::ledger::merkle::{Frontier, verify_consistency, verify_inclusion};
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let store = SqliteStore::open(&state).unwrap();
        for batch in 0..7 {
            store
                .append(
                    (0..(batch * 3 + 1))
                        .map(|i| control(batch * 100 + i))
                        .collect(),
                )
                .unwrap();
        }
        let mut frontier = Frontier::new();
        let mut bodies = Vec::new();
        store
            .scan(0, &mut |row| {
                frontier.push(leaf_hash(&row.body));
                bodies.push(row.body);
                Ok(())
            })
            .unwrap();
        let size = frontier.size();
        assert_eq!(size, 70);
        let dump = |store: &SqliteStore| -> Vec<(i64, i64, Vec<u8>)> {
            let conn = store.conn();
            let mut stmt = conn
                .prepare("SELECT level, idx, hash FROM tree ORDER BY level, idx")
                .unwrap();
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        let written = dump(&store);
        {
            let conn = store.conn();
            let nodes = SqliteNodes::new(&conn, size);
            assert_eq!(merkle::root_at(&nodes, size).unwrap(), frontier.root());
            for index in [0, 1, 33, 69] {
                let proof = merkle::inclusion_proof(&nodes, index, size).unwrap();
                let leaf = leaf_hash(&bodies[index as usize]);
                verify_inclusion(index, size, &leaf, &proof, &frontier.root()).unwrap();
            }
            let old_root = merkle::root_at(&nodes, 29).unwrap();
            let proof = merkle::consistency_proof(&nodes, 29, size).unwrap();
            verify_consistency(29, size, &old_root, &frontier.root(), &proof).unwrap();
        }
        drop(store);

        // A ledger of the format before the tree: no tree tables.
        let file = state.join(STORE_FILE);
        Connection::open(&file)
            .unwrap()
            .execute_batch("DROP TABLE tree; DROP TABLE tree_checkpoint;")
            .unwrap();
        let read_only = SqliteStore::open_read_only(&file).unwrap();
        let summary = read_only.verify(None, true).unwrap();
        assert_eq!(summary.tree_root, hex::encode(frontier.root()));
        assert_eq!(summary.tree_checkpoints, 0);
        assert!(read_only.inclusion_bundle("x", 0, 10).unwrap().is_none());
        drop(read_only);
        let reopened = SqliteStore::open(&state).unwrap();
        assert_eq!(
            dump(&reopened),
            written,
            "the same tree, built from the entries"
        );
        reopened.append(vec![control(9_999)]).unwrap();
        assert_eq!(reopened.verify(None, true).unwrap().entries, 71);
    }

    /// Nodes fetched from the file (the levels a process does not keep: a log past
    /// [`TREE_CACHE_NODES`] entries) are the stored nodes, whatever the number fetched at once:
    /// every statement size and a chunk past the largest, leaves and interior nodes, against
    /// the nodes read one at a time. A fetch of nodes the file does not have returns none.
    #[test]
    fn nodes_fetched_together_are_the_stored_nodes_at_every_statement_size() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("state")).unwrap();
        store.append((0..150).map(control).collect()).unwrap();
        let size = 150;
        let conn = store.conn();
        let one_by_one = SqliteNodes::new(&conn, size);
        // A cache that keeps no level: every node wanted is fetched.
        let keeps_nothing = Mutex::new(TreeCache {
            from_level: 64,
            ..TreeCache::default()
        });
        let all: Vec<(u32, u64)> = (0..8u32)
            .flat_map(|level| (0..(size >> level)).map(move |index| (level, index)))
            .collect();
        for n in [1, 2, 3, 4, 7, 8, 16, 17, 32, 33, 70, all.len()] {
            let wanted: Vec<(u32, u64)> =
                all.iter().copied().step_by(all.len() / n).take(n).collect();
            let fetched = FetchedNodes::read(&conn, size, &wanted, &keeps_nothing).unwrap();
            assert_eq!(fetched.hashes.len(), wanted.len(), "{n} wanted");
            for (level, index) in wanted {
                assert_eq!(
                    fetched.perfect(level, index),
                    one_by_one.perfect(level, index),
                    "node ({level}, {index}) of {n} fetched together"
                );
                assert!(fetched.perfect(level, index).is_some());
            }
        }
        let missing = [(0, 500), (3, 900), (1, 75)];
        let fetched = FetchedNodes::read(&conn, size, &missing, &keeps_nothing).unwrap();
        assert!(fetched.hashes.is_empty());
        // Through a cache that keeps every interior level (`TreeCache::gather`, what a proof
        // of a log this size takes), cold and then warm: the same nodes, the missing ones absent.
        let keeps_all = Mutex::new(TreeCache::default());
        for round in ["cold", "warm"] {
            let fetched = FetchedNodes::read(&conn, size, &all, &keeps_all).unwrap();
            assert_eq!(fetched.hashes.len(), all.len(), "{round}");
            for &(level, index) in &all {
                assert_eq!(
                    fetched.perfect(level, index),
                    one_by_one.perfect(level, index),
                    "node ({level}, {index}) through the cache, {round}"
                );
            }
            let fetched = FetchedNodes::read(&conn, size, &missing, &keeps_all).unwrap();
            assert!(fetched.hashes.is_empty(), "{round}");
        }
        assert!(
            keeps_all
                .lock()
                .unwrap()
                .levels
                .get(1)
                .is_some_and(|l| l.len() == 75),
            "the kept levels were read into the cache"
        );
        assert_eq!(fetch_size(1), 1);
        assert_eq!(fetch_size(3), 4);
        assert_eq!(fetch_size(32), 32);
    }

    /// The leaves are the entries' own hashes (no leaf row is stored), every interior node is
    /// written once by whichever process appends (each picks the tree's right edge up from the
    /// file when another appended meanwhile), and the proofs a store hands out from the upper
    /// levels it keeps in memory still verify once another process has appended. A stored node
    /// edited, deleted, or stored past the entries fails verification, chain-only and deep.
    #[test]
    fn two_writers_share_one_tree_and_its_proofs_and_a_bad_node_fails_verify() {
        use crate::ledger::merkle::{Frontier, verify_consistency, verify_inclusion};
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let key = ReporterKey::generate(&dir.path().join("reporter.key")).unwrap();
        let first = SqliteStore::open(&state).unwrap();
        first.append((0..11).map(control).collect()).unwrap();
        first.checkpoint(&key, 1_000).unwrap();
        // Proofs read now: the upper levels of an 11-entry tree kept in `first`'s memory.
        assert!(first.inclusion_bundle("x", 0, 10).unwrap().is_some());
        let subject_less = first.consistency_proof(3, 11).unwrap();
        assert!(!subject_less.is_empty());
        let second = SqliteStore::open(&state).unwrap();
        for batch in 0..5 {
            second
                .append((0..13).map(|i| control(100 + batch * 13 + i)).collect())
                .unwrap();
        }
        first
            .append((0..7).map(|i| control(1_000 + i)).collect())
            .unwrap();
        first.checkpoint(&key, 2_000).unwrap();
        let mut frontier = Frontier::new();
        let mut bodies = Vec::new();
        first
            .scan(0, &mut |row| {
                frontier.push(leaf_hash(&row.body));
                bodies.push(row.body);
                Ok(())
            })
            .unwrap();
        let size = frontier.size();
        assert_eq!(size, 11 + 65 + 7);
        let leaf_rows: i64 = first
            .conn()
            .query_row("SELECT COUNT(*) FROM tree WHERE level = 0", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(leaf_rows, 0, "the leaves are the entries' hashes");
        let note = first.latest_tree_note().unwrap().unwrap();
        assert_eq!(note.size, size);
        let checkpoint =
            crate::ledger::note::open_checkpoint(&note.note, &tlog::note_key(&key.public_key()))
                .unwrap();
        assert_eq!(
            checkpoint.root,
            frontier.root(),
            "signed over the entries' root"
        );
        for store in [&first, &second] {
            let conn = store.conn();
            let nodes = SqliteNodes::cached(&conn, size, &store.tree);
            for index in [0, 1, 10, 11, 40, 75, 82] {
                let proof = merkle::inclusion_proof(&nodes, index, size).unwrap();
                let leaf = leaf_hash(&bodies[index as usize]);
                verify_inclusion(index, size, &leaf, &proof, &frontier.root()).unwrap();
            }
            drop(conn);
            let mut old = Frontier::new();
            for body in &bodies[..29] {
                old.push(leaf_hash(body));
            }
            let proof = store.consistency_proof(29, size).unwrap();
            verify_consistency(29, size, &old.root(), &frontier.root(), &proof).unwrap();
        }
        assert_eq!(first.verify(None, false).unwrap().entries, size);
        drop((first, second));

        let file = state.join(STORE_FILE);
        let tamper = |sql: &str| -> (String, String) {
            let copy = dir.path().join("copy.sqlite");
            std::fs::copy(&file, &copy).unwrap();
            Connection::open(&copy).unwrap().execute_batch(sql).unwrap();
            let store = SqliteStore::open_read_only(&copy).unwrap();
            let chain = store.verify(None, false).unwrap_err().to_string();
            let deep = store.verify(None, true).unwrap_err().to_string();
            drop(store);
            std::fs::remove_file(&copy).unwrap();
            (chain, deep)
        };
        for (sql, says) in [
            (
                "UPDATE tree SET hash = zeroblob(32) WHERE level = 2 AND idx = 3",
                "node 3 at level 2 is not the hash its entries give",
            ),
            (
                "DELETE FROM tree WHERE level = 1 AND idx = 30",
                "node 30 at level 1 is missing",
            ),
            (
                "INSERT INTO tree (level, idx, hash) VALUES (3, 10, zeroblob(32))",
                "node 10 at level 3, past the 83 entries",
            ),
        ] {
            let (chain, deep) = tamper(sql);
            assert!(chain.contains(says), "{sql}: {chain}");
            assert!(deep.contains(says), "{sql}: {deep}");
        }
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    /// The ledger is as private as the spend store: before `state_dir`, the ledger's directory was
    /// never checked and an existing 0644 `ledger.sqlite` was left as it was.
    #[test]
    fn the_ledger_is_made_private_tightened_or_refused() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        drop(SqliteStore::open(&state).unwrap());
        let file = state.join(STORE_FILE);
        assert_eq!((mode(&state), mode(&file)), (0o700, 0o600));

        // A ledger others can read (as earlier versions could leave it): tightened.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        drop(SqliteStore::open(&state).unwrap());
        assert_eq!(mode(&file), 0o600);

        // One others can write: refused, and left for the operator to look at.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o662)).unwrap();
        let err = SqliteStore::open(&state).unwrap_err();
        assert!(err.to_string().contains("may have been altered"), "{err}");
        assert_eq!(mode(&file), 0o662);

        // A state directory others can write: refused before anything is made in it.
        let loose = dir.path().join("loose");
        std::fs::create_dir(&loose).unwrap();
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = SqliteStore::open(&loose).unwrap_err();
        assert!(
            matches!(err, StoreError::StateDir(StateDirError::NotPrivate { .. })),
            "{err}"
        );
        assert!(err.to_string().contains("chmod 700"), "{err}");
        assert!(!loose.join(STORE_FILE).exists(), "nothing made in it");
    }
}
