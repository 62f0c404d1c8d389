//! The spend store: reservations and refusals, in one SQLite file under the state directory, or
//! in the PostgreSQL database several vantages share (`pg.rs`, the daemon's `[store] postgres`).
//!
//! The order of events for one payment, and why:
//! 1. [`SpendStore::reserve`] checks the running totals against the caps and writes the
//!    reservation, in one transaction that no other writer can come between (SQLite: `BEGIN
//!    IMMEDIATE` committed with `synchronous=FULL`; PostgreSQL: an advisory transaction lock
//!    every vantage's reservation takes, committed with `synchronous_commit = on`): when it
//!    returns, the reservation is durable and counts against the caps, and no other process
//!    could have reserved in between. The signature does not exist yet.
//! 2. The wallet signs exactly the authorization inside the returned [`Reservation`]: nothing else
//!    can be signed (see `crate::wallet`).
//! 3. After the call the reservation is marked settled (our authorization was used on chain) or
//!    released (it provably never can be), or left open when that is not known yet.
//! 4. Reconciliation (`probe::reconcile`) resolves open reservations by asking the token
//!    (`authorizationState`): used -> settled, unused after `validBefore` -> released. Every paid
//!    call does it first for the reservations past `validBefore`; the daemon's start, under the
//!    call lock, for all of them. Until then they keep counting against the caps.
//!
//! A crash at any point leaves either no reservation (nothing was signed) or an open one, which is
//! counted until reconciled: the caps can be met early, never overshot. Schema: `state/spend.sql`,
//! documented in `state/spend.md` (PostgreSQL: `state/postgres/0004-spend.sql`).

use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use alloy::primitives::{Address, B256, U256};
use rusqlite::{Connection, TransactionBehavior, params};
use serde::Serialize;

use super::pg::{PgCallLock, PgSpend};
use super::policy::{PayPolicy, assess};
use crate::evidence::paid::{Refusal, RefusalCode};
use crate::evidence::usd::Usd;
use crate::http_url::canonical_subject_url;
use crate::state_dir::{StateDirError, open_state_dir, private_store_file};
use crate::store::StoreError;
use crate::x402::Requirement;
use crate::x402::eip712::{Authorization, TokenDomain};
use crate::x402::payload::{authorization_for, token_domain_for};

/// The schema, applied on every open (idempotent).
pub const SCHEMA_SQL: &str = include_str!("../../state/spend.sql");
/// The schema identifier stored in `meta`. `/3`: a reservation has a network kind (EVM or
/// Solana), a Solana one its transfer in `svm_payment`; a `/2` store is migrated when opened
/// ([`migrate_v2`]), a `/1` store first to `/2` ([`migrate_v1`]).
pub const SCHEMA_ID: &str = "x402-probe.spend/3";
/// The second schema: every `subject` a canonical URL ([`subject_key`]), EVM reservations only.
const SCHEMA_V2: &str = "x402-probe.spend/2";
/// The first schema: the same tables, subjects as their callers spelled them.
const SCHEMA_V1: &str = "x402-probe.spend/1";
/// The store's file name inside the state directory.
pub const STORE_FILE: &str = "spend.sqlite";
/// The caps' window: the last 24 hours, rolling (not a calendar day, which would allow twice the
/// daily cap around midnight).
pub const DAY_SECONDS: i64 = 86_400;

#[derive(Debug, thiserror::Error)]
pub enum SpendError {
    #[error("spend store {path}: {context}: {source}")]
    Sqlite {
        path: String,
        context: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("spend store {path} has schema {found:?}, this build writes {SCHEMA_ID:?}")]
    Schema { path: String, found: String },
    #[error("spend store {path}: reservation row {id} is unreadable: {why}")]
    Corrupt { path: String, id: i64, why: String },
    #[error("pay policy is invalid: {0}")]
    Policy(String),
    #[error("spend store lock {path}: {source}")]
    Lock {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The state directory or a store file is not private to us (see [`crate::state_dir`]).
    #[error(transparent)]
    StateDir(#[from] StateDirError),
    /// The shared spend store (PostgreSQL) failed or could not be reached: nothing of the
    /// statement that failed was written (each write is one transaction).
    #[error("shared spend store: {0}")]
    Shared(#[from] StoreError),
}

/// Why [`SpendStore::reserve`] did not reserve.
#[derive(Debug, thiserror::Error)]
pub enum ReserveError {
    /// A rule declined the payment; the refusal is recorded in the store.
    #[error("refused: {0}")]
    Refused(Refusal),
    #[error(transparent)]
    Store(#[from] SpendError),
}

/// What a reservation is about to be made for.
#[derive(Debug, Clone, Copy)]
pub struct ReserveRequest<'a> {
    /// The endpoint URL, the subject the per-subject cap counts.
    pub subject: &'a str,
    /// The `accepts` entry to pay (already checked to be the one quoted).
    pub requirement: &'a Requirement,
    /// Our wallet: the authorization's `from`.
    pub payer: Address,
    /// A block read before the call: where to start looking for the settlement later.
    pub from_block: Option<u64>,
}

/// A reservation written durably: the only thing the wallet signs. It cannot be built outside this
/// module, and it holds exactly the authorization that was reserved (amount, payee, window, nonce).
#[derive(Debug)]
pub struct Reservation {
    id: i64,
    subject: String,
    domain: TokenDomain,
    authorization: Authorization,
    cost: Usd,
}

impl Reservation {
    pub fn id(&self) -> i64 {
        self.id
    }
    pub fn subject(&self) -> &str {
        &self.subject
    }
    /// The token's EIP-712 domain the authorization is signed under.
    pub fn domain(&self) -> &TokenDomain {
        &self.domain
    }
    /// Exactly what will be signed.
    pub fn authorization(&self) -> &Authorization {
        &self.authorization
    }
    pub fn cost(&self) -> Usd {
        self.cost
    }
}

/// Where a reservation stands (the evidence model's enum: a paid call's observation names it).
pub use crate::evidence::paid::ReservationState;

/// One reservation row, as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReservationRecord {
    pub id: i64,
    pub subject: String,
    pub created_at: i64,
    pub network: String,
    pub chain_id: u64,
    pub asset: Address,
    pub payer: Address,
    pub pay_to: Address,
    pub amount: U256,
    pub cost: Usd,
    pub valid_after: u64,
    pub valid_before: u64,
    pub nonce: B256,
    pub from_block: Option<u64>,
    pub state: ReservationState,
    pub tx: Option<B256>,
    pub resolved_at: Option<i64>,
    pub resolution: Option<String>,
}

/// One refusal row, as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RefusalRecord {
    pub id: i64,
    pub subject: String,
    pub at: i64,
    pub code: String,
    pub reason: String,
    pub requirement: Option<String>,
}

/// What counts against the caps at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// All open reservations plus those settled in the last 24 hours.
    pub day: Usd,
    /// The same, for one subject.
    pub subject_day: Usd,
    /// How many reservations are open.
    pub open: usize,
}

/// A point in reconciliation, for fault-injection tests and progress reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileStep {
    /// One reservation was just resolved (committed).
    Resolved { id: i64 },
}

/// The lock file beside the store that serialises paid calls across processes.
pub const LOCK_FILE: &str = "spend.lock";

/// Held for one paid call; dropping it releases the in-process mutex and the lock across
/// processes (closing the descriptor releases the `flock`; closing the connection, PostgreSQL's
/// advisory lock).
pub struct CallLock<'a> {
    _in_process: tokio::sync::MutexGuard<'a, ()>,
    _across: Across,
}

/// What a [`CallLock`] holds across processes.
enum Across {
    File(#[allow(dead_code)] std::fs::File),
    Postgres(#[allow(dead_code)] Box<PgCallLock>),
}

/// A reservation's row as both backends write it (made before the transaction, from the quote).
#[derive(Debug)]
pub(super) struct NewReservation {
    pub subject: String,
    pub network: String,
    pub chain_id: i64,
    pub asset: String,
    pub payer: String,
    pub pay_to: String,
    pub amount: String,
    pub cost: Usd,
    pub valid_after: i64,
    pub valid_before: i64,
    pub nonce: String,
    pub from_block: Option<i64>,
    /// `evm` or `svm`.
    pub kind: &'static str,
    /// A Solana reservation's transfer, written in the same transaction.
    pub svm: Option<NewSvmPayment>,
}

/// A Solana reservation's `svm_payment` row.
#[derive(Debug)]
pub(super) struct NewSvmPayment {
    pub fee_payer: String,
    pub source: String,
    pub destination: String,
    pub token_program: String,
    pub decimals: i64,
    pub memo: String,
    pub blockhash: String,
    pub last_valid_block_height: i64,
}

/// Which reservation rows a read wants.
#[derive(Debug, Clone, Copy)]
pub(super) enum Rows {
    All,
    Id(i64),
    Open,
    /// Open, with `valid_before <= ` this.
    ExpiredBy(i64),
}

/// The spend store. Safe to share between tasks; several processes may open the same file (SQLite
/// serialises the writers, and every reservation re-reads the totals inside its transaction), and
/// several vantages the same PostgreSQL database (every reservation takes one lock first).
pub struct SpendStore {
    backend: Backend,
    /// Serialises paid calls in this process, so the transfers seen around one call belong to it.
    call_lock: tokio::sync::Mutex<()>,
}

pub(super) enum Backend {
    Sqlite(SqliteSpend),
    Postgres(PgSpend),
}

/// Calls the same method on whichever backend the store has.
macro_rules! on_backend {
    ($store:expr, $method:ident ( $($arg:expr),* )) => {
        match &$store.backend {
            Backend::Sqlite(b) => b.$method($($arg),*),
            Backend::Postgres(b) => b.$method($($arg),*),
        }
    };
}

impl std::fmt::Debug for SpendStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpendStore")
            .field("at", &self.location())
            .finish_non_exhaustive()
    }
}

impl SpendStore {
    /// Opens (creating if needed) `spend.sqlite` in `state_dir`, which must be ours alone (see
    /// [`crate::state_dir`]: created 0700, refused if group or others can write it).
    pub fn open(state_dir: &Path) -> Result<SpendStore, SpendError> {
        open_state_dir(state_dir)?;
        SpendStore::open_file(&state_dir.join(STORE_FILE))
    }

    /// Opens (creating if needed) the store at exactly `path`: created 0600, an existing store file,
    /// `-wal` or `-shm` checked as [`private_store_file`] says.
    pub fn open_file(path: &Path) -> Result<SpendStore, SpendError> {
        Ok(SpendStore::with(Backend::Sqlite(SqliteSpend::open_file(
            path,
        )?)))
    }

    /// Opens the spend store every vantage of the PostgreSQL database at `url` shares (migrated
    /// first), as vantage `vantage`: its reservations and refusals name it, the caps count every
    /// vantage's, and no reservation for a subject is made while another is open or within
    /// `paid_interval` of one not released (zero: only the first rule). See `pg.rs`.
    pub fn open_postgres(
        url: &str,
        vantage: &str,
        paid_interval: Duration,
    ) -> Result<SpendStore, SpendError> {
        Ok(SpendStore::with(Backend::Postgres(PgSpend::open(
            url,
            vantage,
            paid_interval,
        )?)))
    }

    fn with(backend: Backend) -> SpendStore {
        SpendStore {
            backend,
            call_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Where the store is, for messages: its file, or the database (without its password) and
    /// the vantage.
    pub fn location(&self) -> String {
        match &self.backend {
            Backend::Sqlite(s) => s.path.display().to_string(),
            Backend::Postgres(p) => p.location(),
        }
    }

    /// The vantage this handle writes as, on the shared store (`None`: the state directory's).
    pub fn vantage(&self) -> Option<&str> {
        match &self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(p) => Some(p.vantage()),
        }
    }

    /// Held for the whole of one paid call (see `probe::paid`): one call at a time per state
    /// directory, within this process (a tokio mutex) and across processes (an exclusive `flock`
    /// on `spend.lock` beside the store), so a daemon and a CLI `--pay` run sharing a wallet and a
    /// state directory never overlap their calls, and the transfers seen around a call belong to
    /// it. The file lock is released by the kernel when its holder dies, so a `kill -9` never
    /// leaves it held. On the shared store, across every vantage of the database: a session
    /// advisory lock on a connection of its own, which the server releases when that connection
    /// ends (the guard dropped, or the vantage killed).
    pub async fn lock_for_call(&self) -> Result<CallLock<'_>, SpendError> {
        let in_process = self.call_lock.lock().await;
        let across = match &self.backend {
            Backend::Sqlite(s) => Across::File(s.lock_file().await?),
            Backend::Postgres(p) => Across::Postgres(Box::new(p.lock_for_call().await?)),
        };
        Ok(CallLock {
            _in_process: in_process,
            _across: across,
        })
    }

    /// Checks the entry against the policy and the running totals and, when everything allows it,
    /// durably reserves the payment before any signature exists. A refusal is recorded (with its
    /// reason) and returned as [`ReserveError::Refused`].
    ///
    /// The commit waits for stable storage: on a multi-threaded runtime's worker it runs off the
    /// async workers ([`off_workers`]), so the runs beside a paid call keep going meanwhile.
    pub fn reserve(
        &self,
        policy: &PayPolicy,
        request: &ReserveRequest<'_>,
        now_unix: i64,
    ) -> Result<Reservation, ReserveError> {
        off_workers(|| self.reserve_now(policy, request, now_unix))
    }

    fn reserve_now(
        &self,
        policy: &PayPolicy,
        request: &ReserveRequest<'_>,
        now_unix: i64,
    ) -> Result<Reservation, ReserveError> {
        policy.validate().map_err(SpendError::Policy)?;
        // The per-subject cap is the endpoint's, however the caller spelled it.
        let subject = subject_key(request.subject);
        let requirement_json = request.requirement.entry.to_string();
        let refuse = self.refuser(&subject, &requirement_json, now_unix);
        let priced = assess(policy, request.requirement).map_err(refuse)?;
        let domain = token_domain_for(request.requirement)
            .map_err(|e| refuse(Refusal::new(RefusalCode::DomainMissing, e.to_string())))?;
        let nonce = B256::from(rand::random::<[u8; 32]>());
        let now = u64::try_from(now_unix).unwrap_or(0);
        let authorization = authorization_for(request.requirement, request.payer, now, nonce)
            .map_err(|e| refuse(Refusal::new(RefusalCode::AmountInvalid, e.to_string())))?;
        let row = NewReservation {
            subject: subject.clone(),
            network: priced.network.clone(),
            chain_id: i64::try_from(priced.chain_id).unwrap_or(i64::MAX),
            asset: priced.asset.to_checksum(None),
            payer: request.payer.to_checksum(None),
            pay_to: priced.pay_to.to_checksum(None),
            amount: priced.amount.to_string(),
            cost: priced.cost,
            valid_after: i64::try_from(authorization.valid_after).unwrap_or(i64::MAX),
            valid_before: i64::try_from(authorization.valid_before).unwrap_or(i64::MAX),
            nonce: format!("{nonce:#x}"),
            from_block: request.from_block.and_then(|b| i64::try_from(b).ok()),
            kind: "evm",
            svm: None,
        };
        let id = self.insert_within_caps(policy, &row, &requirement_json, now_unix)?;
        Ok(Reservation {
            id,
            subject,
            domain,
            authorization,
            cost: priced.cost,
        })
    }

    /// Writes `row` when its cost fits under every cap, in one transaction no other reservation
    /// comes between; over a cap, the refusal is recorded and committed instead, and returned.
    pub(super) fn insert_within_caps(
        &self,
        policy: &PayPolicy,
        row: &NewReservation,
        requirement_json: &str,
        now_unix: i64,
    ) -> Result<i64, ReserveError> {
        on_backend!(
            self,
            insert_within_caps(policy, row, requirement_json, now_unix)
        )
    }

    /// What a reservation's refusal becomes: recorded (with the requirement refused) and
    /// returned, or the store's error when it cannot be recorded.
    pub(super) fn refuser<'a>(
        &'a self,
        subject: &'a str,
        requirement_json: &'a str,
        now_unix: i64,
    ) -> impl Fn(Refusal) -> ReserveError + Copy + 'a {
        move |refusal: Refusal| match self.record_refusal(
            subject,
            &refusal,
            Some(requirement_json),
            now_unix,
        ) {
            Ok(()) => ReserveError::Refused(refusal),
            Err(e) => ReserveError::Store(e),
        }
    }

    /// Records a payment we declined, with its reason.
    pub fn record_refusal(
        &self,
        subject: &str,
        refusal: &Refusal,
        requirement_json: Option<&str>,
        now_unix: i64,
    ) -> Result<(), SpendError> {
        let subject = subject_key(subject);
        off_workers(|| {
            on_backend!(
                self,
                record_refusal(&subject, refusal, requirement_json, now_unix)
            )
        })
    }

    /// Releases a reservation whose signature was never sent (so it can never be used). Consumes
    /// the reservation: it cannot be signed afterwards.
    pub fn release_unsent(
        &self,
        reservation: Reservation,
        why: &str,
        now_unix: i64,
    ) -> Result<bool, SpendError> {
        self.release_never_sent(reservation.id, why, now_unix)
    }

    /// Releases reservation `id` as never sent (the callers hold its consumed reservation).
    pub(super) fn release_never_sent(
        &self,
        id: i64,
        why: &str,
        now_unix: i64,
    ) -> Result<bool, SpendError> {
        self.resolve(
            id,
            ReservationState::Released,
            None,
            &format!("never sent: {why}"),
            now_unix,
        )
    }

    /// Marks an open reservation settled: our authorization was used on chain (`tx` when located).
    /// Returns whether the row changed (false when it was not open).
    pub fn mark_settled(
        &self,
        id: i64,
        tx: Option<B256>,
        why: &str,
        now_unix: i64,
    ) -> Result<bool, SpendError> {
        self.resolve(id, ReservationState::Settled, tx, why, now_unix)
    }

    /// Marks an open reservation released: its authorization provably can never be used (unused on
    /// chain after `validBefore`). Returns whether the row changed.
    pub fn mark_released(&self, id: i64, why: &str, now_unix: i64) -> Result<bool, SpendError> {
        self.resolve(id, ReservationState::Released, None, why, now_unix)
    }

    /// Only an open reservation moves: a resolved one is never resolved again, so nothing is
    /// counted twice and nothing settled is ever released.
    pub(super) fn resolve(
        &self,
        id: i64,
        state: ReservationState,
        tx: Option<B256>,
        why: &str,
        now_unix: i64,
    ) -> Result<bool, SpendError> {
        let tx = tx.map(|t| format!("{t:#x}"));
        off_workers(|| on_backend!(self, resolve(id, state, tx.as_deref(), why, now_unix)))
    }

    /// What counts against the caps now (`subject` in any spelling).
    pub fn totals(&self, subject: &str, now_unix: i64) -> Result<Totals, SpendError> {
        let subject = subject_key(subject);
        on_backend!(self, totals(&subject, now_unix))
    }

    /// Every EVM reservation, oldest first (Solana ones: [`SpendStore::svm_reservations`]).
    pub fn reservations(&self) -> Result<Vec<ReservationRecord>, SpendError> {
        on_backend!(self, reservations(Rows::All))
    }

    /// One EVM reservation by id.
    pub fn reservation(&self, id: i64) -> Result<Option<ReservationRecord>, SpendError> {
        Ok(on_backend!(self, reservations(Rows::Id(id)))?.pop())
    }

    /// Open EVM reservations whose authorization window has closed by `now_unix`.
    pub fn expired_open(&self, now_unix: i64) -> Result<Vec<ReservationRecord>, SpendError> {
        on_backend!(self, reservations(Rows::ExpiredBy(now_unix)))
    }

    /// Every open EVM reservation, oldest first.
    pub fn open_reservations(&self) -> Result<Vec<ReservationRecord>, SpendError> {
        on_backend!(self, reservations(Rows::Open))
    }

    /// Every refusal, oldest first.
    pub fn refusals(&self) -> Result<Vec<RefusalRecord>, SpendError> {
        on_backend!(self, refusals())
    }

    pub(super) fn backend(&self) -> &Backend {
        &self.backend
    }
}

/// The state directory's store: one SQLite file.
pub(super) struct SqliteSpend {
    conn: Mutex<Connection>,
    pub(super) path: PathBuf,
}

impl SqliteSpend {
    fn open_file(path: &Path) -> Result<SqliteSpend, SpendError> {
        let shown = path.display().to_string();
        let sql = |context| {
            let shown = shown.clone();
            move |source| SpendError::Sqlite {
                path: shown,
                context,
                source,
            }
        };
        private_store_file(path)?;
        let mut conn = Connection::open(path).map_err(sql("opening"))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(sql("setting the busy timeout"))?;
        // WAL with synchronous=FULL: a commit returns only after the log is on stable storage.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql("enabling WAL"))?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(sql("setting synchronous=FULL"))?;
        conn.execute_batch(SCHEMA_SQL)
            .map_err(sql("applying the schema"))?;
        let mut found: String = conn
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get(0)
            })
            .map_err(sql("reading the schema id"))?;
        if found == SCHEMA_V1 {
            migrate_v1(&mut conn).map_err(sql("migrating the store to canonical subjects"))?;
            found = SCHEMA_V2.to_string();
        }
        if found == SCHEMA_V2 {
            migrate_v2(&mut conn).map_err(sql("migrating the store to network kinds"))?;
            found = SCHEMA_ID.to_string();
        }
        if found != SCHEMA_ID {
            return Err(SpendError::Schema { path: shown, found });
        }
        Ok(SqliteSpend {
            conn: Mutex::new(conn),
            path: path.to_path_buf(),
        })
    }

    /// The exclusive `flock` on `spend.lock` beside the store, waited for without blocking the
    /// runtime.
    async fn lock_file(&self) -> Result<std::fs::File, SpendError> {
        let path = self.path.with_file_name(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|source| SpendError::Lock {
                path: path.display().to_string(),
                source,
            })?;
        loop {
            // SAFETY: flock on a descriptor this function owns; no memory is shared.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                return Ok(file);
            }
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(SpendError::Lock {
                    path: path.display().to_string(),
                    source: err,
                });
            }
            // Another process is paying: wait without blocking the runtime.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    pub(super) fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent (transactions roll back),
        // so a poisoned lock is still usable.
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn sql_err(
        &self,
        context: &'static str,
    ) -> impl Fn(rusqlite::Error) -> SpendError + '_ {
        move |source| SpendError::Sqlite {
            path: self.path.display().to_string(),
            context,
            source,
        }
    }

    /// An immediate transaction, so that no other writer comes between the running totals it
    /// reads and the reservation inserted in it.
    fn insert_within_caps(
        &self,
        policy: &PayPolicy,
        row: &NewReservation,
        requirement_json: &str,
        now_unix: i64,
    ) -> Result<i64, ReserveError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sql_err("starting the reservation transaction"))?;
        let totals = totals_in(&tx, &row.subject, now_unix)
            .map_err(self.sql_err("reading the running totals"))?;
        if let Some(refusal) = cap_check(policy, &totals, row.cost) {
            insert_refusal(
                &tx,
                &row.subject,
                &refusal,
                Some(requirement_json),
                now_unix,
            )
            .map_err(self.sql_err("recording a refusal"))?;
            tx.commit().map_err(self.sql_err("committing a refusal"))?;
            return Err(ReserveError::Refused(refusal));
        }
        tx.execute(
            "INSERT INTO reservation (subject, created_at, network, chain_id, asset, payer, pay_to,
                 amount, cost_usd, valid_after, valid_before, nonce, from_block, state, kind)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            params![
                row.subject,
                now_unix,
                row.network,
                row.chain_id,
                row.asset,
                row.payer,
                row.pay_to,
                row.amount,
                row.cost.to_string(),
                row.valid_after,
                row.valid_before,
                row.nonce,
                row.from_block,
                ReservationState::Open.as_str(),
                row.kind,
            ],
        )
        .map_err(self.sql_err("writing the reservation"))?;
        let id = tx.last_insert_rowid();
        if let Some(svm) = &row.svm {
            tx.execute(
                "INSERT INTO svm_payment (reservation_id, fee_payer, source, destination,
                     token_program, decimals, memo, blockhash, last_valid_block_height)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    id,
                    svm.fee_payer,
                    svm.source,
                    svm.destination,
                    svm.token_program,
                    svm.decimals,
                    svm.memo,
                    svm.blockhash,
                    svm.last_valid_block_height,
                ],
            )
            .map_err(self.sql_err("writing the Solana transfer"))?;
        }
        tx.commit()
            .map_err(self.sql_err("committing the reservation"))?;
        Ok(id)
    }

    fn record_refusal(
        &self,
        subject: &str,
        refusal: &Refusal,
        requirement_json: Option<&str>,
        now_unix: i64,
    ) -> Result<(), SpendError> {
        insert_refusal(&self.conn(), subject, refusal, requirement_json, now_unix)
            .map_err(self.sql_err("recording a refusal"))
    }

    fn resolve(
        &self,
        id: i64,
        state: ReservationState,
        tx: Option<&str>,
        why: &str,
        now_unix: i64,
    ) -> Result<bool, SpendError> {
        let changed = self
            .conn()
            .execute(
                "UPDATE reservation SET state = ?1, tx = ?2, resolved_at = ?3, resolution = ?4
                 WHERE id = ?5 AND state = ?6",
                params![
                    state.as_str(),
                    tx,
                    now_unix,
                    why,
                    id,
                    ReservationState::Open.as_str(),
                ],
            )
            .map_err(self.sql_err("resolving a reservation"))?;
        Ok(changed == 1)
    }

    fn totals(&self, subject: &str, now_unix: i64) -> Result<Totals, SpendError> {
        totals_in(&self.conn(), subject, now_unix)
            .map_err(self.sql_err("reading the running totals"))
    }

    fn reservations(&self, rows: Rows) -> Result<Vec<ReservationRecord>, SpendError> {
        let open = ReservationState::Open.as_str();
        match rows {
            Rows::All => self.select_reservations(
                "SELECT * FROM reservation WHERE kind = 'evm' ORDER BY id",
                [],
            ),
            Rows::Id(id) => self.select_reservations(
                "SELECT * FROM reservation WHERE id = ?1 AND kind = 'evm'",
                [id],
            ),
            Rows::Open => self.select_reservations(
                "SELECT * FROM reservation WHERE state = ?1 AND kind = 'evm' ORDER BY id",
                [open],
            ),
            Rows::ExpiredBy(now_unix) => self.select_reservations(
                "SELECT * FROM reservation WHERE state = ?1 AND valid_before <= ?2
                     AND kind = 'evm' ORDER BY id",
                params![open, now_unix],
            ),
        }
    }

    fn select_reservations<P: rusqlite::Params>(
        &self,
        sql: &str,
        params: P,
    ) -> Result<Vec<ReservationRecord>, SpendError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(sql)
            .map_err(self.sql_err("reading reservations"))?;
        let rows = stmt
            .query_map(params, RawRow::read)
            .map_err(self.sql_err("reading reservations"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql_err("reading reservations"))?;
        records(rows, &self.path.display().to_string())
    }

    fn refusals(&self) -> Result<Vec<RefusalRecord>, SpendError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT id, subject, at, code, reason, requirement FROM refusal ORDER BY id")
            .map_err(self.sql_err("reading refusals"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(RefusalRecord {
                    id: r.get(0)?,
                    subject: r.get(1)?,
                    at: r.get(2)?,
                    code: r.get(3)?,
                    reason: r.get(4)?,
                    requirement: r.get(5)?,
                })
            })
            .map_err(self.sql_err("reading refusals"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql_err("reading refusals"))?;
        Ok(rows)
    }
}

/// Raw rows parsed into records; an unreadable one is [`SpendError::Corrupt`], named.
pub(super) fn records(
    rows: Vec<RawRow>,
    location: &str,
) -> Result<Vec<ReservationRecord>, SpendError> {
    rows.into_iter()
        .map(|raw| {
            let id = raw.id;
            raw.into_record().map_err(|why| SpendError::Corrupt {
                path: location.to_string(),
                id,
                why,
            })
        })
        .collect()
}

/// Runs a write that waits for the disk (an fsync'd commit) off the async workers: on a worker
/// of a multi-threaded tokio runtime (the daemon's), the worker hands its other tasks to the
/// others first (`block_in_place`); anywhere else (a CLI run, a current-thread runtime, a
/// blocking thread) it just runs.
pub(crate) fn off_workers<T>(write: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(runtime) if runtime.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(write)
        }
        _ => write(),
    }
}

/// The key a subject's reservations and refusals are stored under: its canonical URL
/// ([`canonical_subject_url`]), so that the per-subject cap is the endpoint's and not a
/// spelling's. A subject that is not a URL the fetcher reads (nothing was fetched from it) is kept
/// as it is.
pub(crate) fn subject_key(subject: &str) -> String {
    canonical_subject_url(subject).unwrap_or_else(|_| subject.to_string())
}

/// `/1` -> `/2`, in one transaction at open: each row's subject rewritten as its canonical URL,
/// so reservations made under several spellings of one endpoint count against its one cap from
/// now on. Another process may be migrating the same file: the schema id is read again inside
/// the write transaction, and a store already at `/2` is left alone.
fn migrate_v1(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let schema: String = tx.query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
        r.get(0)
    })?;
    if schema == SCHEMA_V1 {
        for table in ["reservation", "refusal"] {
            let rows: Vec<(i64, String)> = tx
                .prepare(&format!("SELECT id, subject FROM {table}"))?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?;
            let mut update =
                tx.prepare(&format!("UPDATE {table} SET subject = ?1 WHERE id = ?2"))?;
            for (id, subject) in rows {
                let key = subject_key(&subject);
                if key != subject {
                    update.execute(params![key, id])?;
                }
            }
        }
        tx.execute(
            "UPDATE meta SET value = ?1 WHERE key = 'schema'",
            [SCHEMA_V2],
        )?;
    }
    tx.commit()
}

/// `/2` -> `/3`, in one transaction at open: every reservation so far is an EVM one (the
/// column's default); `svm_payment` was created by the schema itself. Read again inside the
/// write transaction, as [`migrate_v1`] does.
fn migrate_v2(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let schema: String = tx.query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
        r.get(0)
    })?;
    if schema == SCHEMA_V2 {
        tx.execute_batch(
            "ALTER TABLE reservation ADD COLUMN kind TEXT NOT NULL DEFAULT 'evm'
                 CHECK (kind IN ('evm', 'svm'))",
        )?;
        tx.execute(
            "UPDATE meta SET value = ?1 WHERE key = 'schema'",
            [SCHEMA_ID],
        )?;
    }
    tx.commit()
}

pub(super) fn cap_check(policy: &PayPolicy, totals: &Totals, cost: Usd) -> Option<Refusal> {
    let over = |total: Usd, cap: Usd| total.checked_add(cost).is_none_or(|sum| sum > cap);
    if over(totals.subject_day, policy.max_per_subject_per_day_usd) {
        return Some(Refusal::new(
            RefusalCode::OverPerSubjectCap,
            format!(
                "{} USD already committed to this subject in 24 h (open included); {} more would pass the cap of {} USD",
                totals.subject_day, cost, policy.max_per_subject_per_day_usd
            ),
        ));
    }
    if over(totals.day, policy.max_per_day_usd) {
        return Some(Refusal::new(
            RefusalCode::OverDailyCap,
            format!(
                "{} USD already committed in 24 h (open included); {} more would pass the daily cap of {} USD",
                totals.day, cost, policy.max_per_day_usd
            ),
        ));
    }
    None
}

pub(super) fn insert_refusal(
    conn: &Connection,
    subject: &str,
    refusal: &Refusal,
    requirement_json: Option<&str>,
    now_unix: i64,
) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO refusal (subject, at, code, reason, requirement) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            subject,
            now_unix,
            refusal.code.as_str(),
            refusal.message,
            requirement_json
        ],
    )?;
    Ok(())
}

/// Open reservations (any age) plus settled ones reserved in the last 24 hours.
pub(super) fn totals_in(
    conn: &Connection,
    subject: &str,
    now_unix: i64,
) -> rusqlite::Result<Totals> {
    let mut stmt = conn.prepare(
        "SELECT subject, cost_usd, state FROM reservation
         WHERE state = ?2 OR (state = ?3 AND created_at > ?1)",
    )?;
    let rows = stmt
        .query_map(
            params![
                now_unix - DAY_SECONDS,
                ReservationState::Open.as_str(),
                ReservationState::Settled.as_str()
            ],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            },
        )?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(sum_totals(rows, subject))
}

/// The running totals of `rows` (subject, cost, state) for `subject`: an unreadable cost counts
/// as infinite, so it can only block payments, never allow one.
pub(super) fn sum_totals(rows: Vec<(String, String, String)>, subject: &str) -> Totals {
    let mut totals = Totals {
        day: Usd::ZERO,
        subject_day: Usd::ZERO,
        open: 0,
    };
    for (row_subject, cost, state) in rows {
        let cost = cost.parse::<Usd>().unwrap_or(Usd::from_atto(u128::MAX));
        totals.day = totals
            .day
            .checked_add(cost)
            .unwrap_or(Usd::from_atto(u128::MAX));
        if row_subject == subject {
            totals.subject_day = totals
                .subject_day
                .checked_add(cost)
                .unwrap_or(Usd::from_atto(u128::MAX));
        }
        if state == ReservationState::Open.as_str() {
            totals.open += 1;
        }
    }
    totals
}

/// A reservation row with its text columns not yet parsed.
pub(super) struct RawRow {
    pub id: i64,
    pub subject: String,
    pub created_at: i64,
    pub network: String,
    pub chain_id: i64,
    pub asset: String,
    pub payer: String,
    pub pay_to: String,
    pub amount: String,
    pub cost: String,
    pub valid_after: i64,
    pub valid_before: i64,
    pub nonce: String,
    pub from_block: Option<i64>,
    pub state: String,
    pub tx: Option<String>,
    pub resolved_at: Option<i64>,
    pub resolution: Option<String>,
}

impl RawRow {
    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
        Ok(RawRow {
            id: r.get("id")?,
            subject: r.get("subject")?,
            created_at: r.get("created_at")?,
            network: r.get("network")?,
            chain_id: r.get("chain_id")?,
            asset: r.get("asset")?,
            payer: r.get("payer")?,
            pay_to: r.get("pay_to")?,
            amount: r.get("amount")?,
            cost: r.get("cost_usd")?,
            valid_after: r.get("valid_after")?,
            valid_before: r.get("valid_before")?,
            nonce: r.get("nonce")?,
            from_block: r.get("from_block")?,
            state: r.get("state")?,
            tx: r.get("tx")?,
            resolved_at: r.get("resolved_at")?,
            resolution: r.get("resolution")?,
        })
    }

    fn into_record(self) -> Result<ReservationRecord, String> {
        let address = |what: &str, s: &str| {
            s.parse::<Address>()
                .map_err(|e| format!("{what} {s:?}: {e}"))
        };
        let unsigned =
            |what: &str, v: i64| u64::try_from(v).map_err(|_| format!("{what} {v} is negative"));
        Ok(ReservationRecord {
            id: self.id,
            subject: self.subject,
            created_at: self.created_at,
            network: self.network,
            chain_id: unsigned("chain_id", self.chain_id)?,
            asset: address("asset", &self.asset)?,
            payer: address("payer", &self.payer)?,
            pay_to: address("pay_to", &self.pay_to)?,
            amount: U256::from_str_radix(&self.amount, 10)
                .map_err(|e| format!("amount {:?}: {e}", self.amount))?,
            cost: self.cost.parse().map_err(|e| format!("cost_usd: {e}"))?,
            valid_after: unsigned("valid_after", self.valid_after)?,
            valid_before: unsigned("valid_before", self.valid_before)?,
            nonce: self
                .nonce
                .parse()
                .map_err(|e| format!("nonce {:?}: {e}", self.nonce))?,
            from_block: self
                .from_block
                .map(|b| unsigned("from_block", b))
                .transpose()?,
            state: self.state.parse()?,
            tx: self
                .tx
                .map(|t| t.parse::<B256>().map_err(|e| format!("tx {t:?}: {e}")))
                .transpose()?,
            resolved_at: self.resolved_at,
            resolution: self.resolution,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn the_store_and_its_wal_and_shm_files_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let store = SpendStore::open(&state).unwrap();
        assert_eq!(mode(&state), 0o700);
        // The schema was applied at open: in WAL mode the -wal and -shm files exist while open.
        for file in ["spend.sqlite", "spend.sqlite-wal", "spend.sqlite-shm"] {
            assert_eq!(mode(&state.join(file)), 0o600, "{file}");
        }
        drop(store);
    }

    #[test]
    fn loose_state_directories_and_store_files_are_refused_or_tightened() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o757)).unwrap();
        let err = SpendStore::open(&state).unwrap_err();
        assert!(
            matches!(err, SpendError::StateDir(StateDirError::NotPrivate { .. })),
            "{err}"
        );
        assert!(!state.join(STORE_FILE).exists(), "nothing created in it");
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
        drop(SpendStore::open(&state).unwrap());
        let file = state.join(STORE_FILE);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        drop(SpendStore::open(&state).unwrap());
        assert_eq!(mode(&file), 0o600, "read bits for others are removed");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o620)).unwrap();
        let err = SpendStore::open(&state).unwrap_err();
        assert!(err.to_string().contains("may have been altered"), "{err}");
        let not_a_dir = dir.path().join("file");
        std::fs::write(&not_a_dir, b"").unwrap();
        assert!(SpendStore::open(&not_a_dir).is_err());
    }

    #[test]
    fn every_reservation_state_reads_back_as_written() {
        for state in [
            ReservationState::Open,
            ReservationState::Settled,
            ReservationState::Released,
        ] {
            assert_eq!(state.as_str().parse::<ReservationState>(), Ok(state));
            let json = serde_json::to_string(&state).unwrap();
            assert_eq!(json, format!("\"{}\"", state.as_str()));
            assert_eq!(
                serde_json::from_str::<ReservationState>(&json).unwrap(),
                state
            );
        }
    }

    #[test]
    fn a_reservation_row_with_an_unknown_state_is_corrupt_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let store = SpendStore::open(&state).unwrap();
        {
            // Written around the schema's CHECK (an older build, a hand edit): the reader must
            // still refuse it rather than count it as some state.
            let Backend::Sqlite(sqlite) = store.backend() else {
                unreachable!("opened from a directory")
            };
            let conn = sqlite.conn();
            conn.execute_batch("PRAGMA ignore_check_constraints = ON")
                .unwrap();
            conn.execute(
                "INSERT INTO reservation (subject, created_at, network, chain_id, asset, payer,
                     pay_to, amount, cost_usd, valid_after, valid_before, nonce, state)
                 VALUES ('https://a.example/x', 1, 'eip155:8453', 8453, ?1, ?1, ?1, '10000',
                     '0.01', 0, 100, ?2, 'refunded')",
                params![
                    Address::ZERO.to_checksum(None),
                    format!("{:#x}", B256::ZERO)
                ],
            )
            .unwrap();
        }
        let err = store.reservations().unwrap_err();
        assert!(
            matches!(&err, SpendError::Corrupt { id: 1, why, .. } if why.contains("unknown reservation state \"refunded\"")),
            "{err}"
        );
        assert!(err.to_string().contains("reservation row 1"), "{err}");
        assert!(store.reservation(1).is_err());
    }
}
