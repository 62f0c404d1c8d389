//! The spend store in the PostgreSQL database several vantages share (schema:
//! `state/postgres/0004-spend.sql`, documented in `state/spend.md`, "Shared by vantages").
//!
//! What changes from the state directory's SQLite file, and why:
//! - Every reservation's transaction first takes one advisory transaction lock
//!   (`pg_advisory_xact_lock`), then reads the totals and the subject's rows and inserts: every
//!   vantage's reservations are serialised on it, so two vantages can never both fit under a cap
//!   that only one of them fits under. (The daily cap sums every subject, so a per-subject row lock
//!   would not do; a reservation is rare, so one lock costs nothing; SERIALIZABLE would need a
//!   retry loop around a transaction that also records refusals.)
//! - The commit is synchronous (`synchronous_commit = on` for the transaction, whatever the
//!   server's default): when `reserve` returns, the reservation is in the server's durable log.
//! - At most one open reservation per subject across all vantages (a partial unique index, and a
//!   refusal `subject_in_flight` checked first under the lock), and none within the daemon's
//!   minimum interval between paid calls of one not released (`paid_within_interval`).
//! - Every time the caps and the interval compare is the database's clock, never a vantage's: a
//!   vantage whose clock is wrong can neither push its rows out of the others' 24 hours nor see
//!   theirs out of its own. Authorization windows stay the caller's (they are signed, and the chain
//!   judges them).
//! - The paid call's lock is a session advisory lock on a connection of its own, across every
//!   vantage: the server drops it when that connection ends (the guard dropped, or the vantage
//!   killed), as the kernel drops a dead process's `flock`.

use std::time::Duration;

use deadpool_postgres::GenericClient;

use super::policy::PayPolicy;
use super::store::{
    NewReservation, RawRow, RefusalRecord, ReservationRecord, ReservationState, ReserveError, Rows,
    SpendError, Totals, cap_check, records, sum_totals,
};
use super::svm::{RawSvmRow, SVM_COLUMNS, SvmReservationRecord};
use crate::evidence::paid::{Refusal, RefusalCode};
use crate::evidence::usd::Usd;
use crate::store::StoreError;
use crate::store::postgres::{PgPool, block, store_runtime};

/// The advisory lock every reservation's transaction takes (any fixed number, apart from the
/// migrations' and the call lock's).
const RESERVE_LOCK: i64 = 0x7840_5e7d;
/// The advisory lock a paid call holds for its whole length, across vantages.
const CALL_LOCK: i64 = 0x7840_ca11;

/// The database's clock, read after the lock (`now()` is the transaction's start, which may be
/// before a wait on the lock), in whole unix seconds.
const DB_NOW: &str = "SELECT floor(extract(epoch FROM clock_timestamp()))::bigint";

/// One vantage's handle on the shared spend store.
pub(crate) struct PgSpend {
    pool: PgPool,
    /// The store's own runtime, on which its synchronous calls run (`None` once dropped).
    runtime: Option<tokio::runtime::Runtime>,
    vantage: String,
    paid_interval_secs: i64,
}

impl Drop for PgSpend {
    fn drop(&mut self) {
        // Without waiting: dropping a runtime may happen inside another runtime's task.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The paid-call lock held on the shared store: a connection taken out of the pool, closed when
/// dropped (which ends its session and so the advisory lock); never given back to the pool with
/// the lock held.
pub(crate) struct PgCallLock {
    client: Option<deadpool_postgres::Object>,
}

impl Drop for PgCallLock {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            drop(deadpool_postgres::Object::take(client));
        }
    }
}

impl PgSpend {
    pub(super) fn open(
        url: &str,
        vantage: &str,
        paid_interval: Duration,
    ) -> Result<PgSpend, SpendError> {
        if vantage.is_empty() || vantage.len() > 64 || vantage.chars().any(char::is_control) {
            return Err(SpendError::Shared(StoreError::Vantage {
                url: "(the configured URL)".into(),
                name: vantage.to_string(),
                why: "a vantage's name is 1 to 64 characters, none a control character".into(),
            }));
        }
        let runtime = store_runtime()?;
        let pool = match block(&runtime, PgPool::connect(url)) {
            Ok(pool) => pool,
            Err(e) => {
                runtime.shutdown_background();
                return Err(e.into());
            }
        };
        Ok(PgSpend {
            pool,
            runtime: Some(runtime),
            vantage: vantage.to_string(),
            paid_interval_secs: i64::try_from(paid_interval.as_secs()).unwrap_or(i64::MAX),
        })
    }

    pub(super) fn location(&self) -> String {
        format!("{} (vantage {})", self.pool.url(), self.vantage)
    }

    pub(super) fn vantage(&self) -> &str {
        &self.vantage
    }

    fn run<T: Send>(&self, f: impl Future<Output = T> + Send) -> T {
        block(
            self.runtime.as_ref().expect("a live store has its runtime"),
            f,
        )
    }

    fn pg(&self, context: &'static str) -> impl Fn(tokio_postgres::Error) -> SpendError {
        let pg = self.pool.pg(context);
        move |e| SpendError::Shared(pg(e))
    }

    pub(super) async fn lock_for_call(&self) -> Result<PgCallLock, SpendError> {
        let context = "taking the paid-call lock";
        // Wrapped at once: however this future ends, the connection is closed, never pooled.
        let held = PgCallLock {
            client: Some(self.pool.client(context).await?),
        };
        let client = held.client.as_ref().expect("just taken");
        loop {
            let got: bool = client
                .query_one("SELECT pg_try_advisory_lock($1)", &[&CALL_LOCK])
                .await
                .map_err(self.pg(context))?
                .get(0);
            if got {
                return Ok(held);
            }
            // Another vantage is paying: wait without blocking the runtime.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(super) fn insert_within_caps(
        &self,
        policy: &PayPolicy,
        row: &NewReservation,
        requirement_json: &str,
        _now_unix: i64,
    ) -> Result<i64, ReserveError> {
        self.run(self.reserve_in_database(policy, row, requirement_json))
    }

    async fn reserve_in_database(
        &self,
        policy: &PayPolicy,
        row: &NewReservation,
        requirement_json: &str,
    ) -> Result<i64, ReserveError> {
        let mut client = self
            .pool
            .client("reserving")
            .await
            .map_err(SpendError::from)?;
        let tx = client
            .transaction()
            .await
            .map_err(self.pg("starting the reservation transaction"))?;
        tx.batch_execute("SET LOCAL synchronous_commit = on")
            .await
            .map_err(self.pg("asking for a durable commit"))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&RESERVE_LOCK])
            .await
            .map_err(self.pg("waiting for another vantage's reservation"))?;
        let now: i64 = tx
            .query_one(DB_NOW, &[])
            .await
            .map_err(self.pg("reading the database's clock"))?
            .get(0);
        let refusal = match self.subject_refusal(&tx, &row.subject, now).await? {
            Some(refusal) => Some(refusal),
            None => {
                let totals = totals_in(&tx, &row.subject, now)
                    .await
                    .map_err(self.pg("reading the running totals"))?;
                cap_check(policy, &totals, row.cost)
            }
        };
        if let Some(refusal) = refusal {
            insert_refusal(
                &tx,
                &self.vantage,
                &row.subject,
                &refusal,
                Some(requirement_json),
                now,
            )
            .await
            .map_err(self.pg("recording a refusal"))?;
            tx.commit().await.map_err(self.pg("committing a refusal"))?;
            return Err(ReserveError::Refused(refusal));
        }
        let id: i64 = tx
            .query_one(
                "INSERT INTO spend_reservation (vantage, subject, created_at, network, chain_id,
                     asset, payer, pay_to, amount, cost_usd, valid_after, valid_before, nonce,
                     from_block, state, kind)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
                 RETURNING id",
                &[
                    &self.vantage,
                    &row.subject,
                    &now,
                    &row.network,
                    &row.chain_id,
                    &row.asset,
                    &row.payer,
                    &row.pay_to,
                    &row.amount,
                    &row.cost.to_string(),
                    &row.valid_after,
                    &row.valid_before,
                    &row.nonce,
                    &row.from_block,
                    &ReservationState::Open.as_str(),
                    &row.kind,
                ],
            )
            .await
            .map_err(self.pg("writing the reservation"))?
            .get(0);
        if let Some(svm) = &row.svm {
            tx.execute(
                "INSERT INTO spend_svm_payment (reservation_id, fee_payer, source, destination,
                     token_program, decimals, memo, blockhash, last_valid_block_height)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                &[
                    &id,
                    &svm.fee_payer,
                    &svm.source,
                    &svm.destination,
                    &svm.token_program,
                    &svm.decimals,
                    &svm.memo,
                    &svm.blockhash,
                    &svm.last_valid_block_height,
                ],
            )
            .await
            .map_err(self.pg("writing the Solana transfer"))?;
        }
        tx.commit()
            .await
            .map_err(self.pg("committing the reservation"))?;
        Ok(id)
    }

    /// Why `subject` may not be reserved now whatever the caps: a reservation of it still open
    /// (any vantage's, any age), or one not released within the paid interval.
    async fn subject_refusal<C: GenericClient + Sync>(
        &self,
        c: &C,
        subject: &str,
        now: i64,
    ) -> Result<Option<Refusal>, SpendError> {
        let since = now.saturating_sub(self.paid_interval_secs);
        let row = c
            .query_opt(
                "SELECT id, vantage, state, created_at FROM spend_reservation
                 WHERE subject = $1 AND (state = 'open' OR (state = 'settled' AND created_at > $2))
                 ORDER BY state = 'open' DESC, id DESC LIMIT 1",
                &[&subject, &since],
            )
            .await
            .map_err(self.pg("reading the subject's reservations"))?;
        Ok(row.map(|r| {
            let (id, vantage, state, at): (i64, String, String, i64) =
                (r.get(0), r.get(1), r.get(2), r.get(3));
            if state == ReservationState::Open.as_str() {
                Refusal::new(
                    RefusalCode::SubjectInFlight,
                    format!(
                        "reservation {id} of this subject (vantage {vantage}) is still open: one payment per subject at a time"
                    ),
                )
            } else {
                Refusal::new(
                    RefusalCode::PaidWithinInterval,
                    format!(
                        "reservation {id} of this subject (vantage {vantage}) settled {} s ago; the interval between paid calls is {} s",
                        now - at,
                        self.paid_interval_secs
                    ),
                )
            }
        }))
    }

    pub(super) fn record_refusal(
        &self,
        subject: &str,
        refusal: &Refusal,
        requirement_json: Option<&str>,
        _now_unix: i64,
    ) -> Result<(), SpendError> {
        self.run(async {
            let client = self.pool.client("recording a refusal").await?;
            let now: i64 = client
                .query_one(DB_NOW, &[])
                .await
                .map_err(self.pg("reading the database's clock"))?
                .get(0);
            insert_refusal(
                &client,
                &self.vantage,
                subject,
                refusal,
                requirement_json,
                now,
            )
            .await
            .map_err(self.pg("recording a refusal"))
        })
    }

    pub(super) fn resolve(
        &self,
        id: i64,
        state: ReservationState,
        tx: Option<&str>,
        why: &str,
        _now_unix: i64,
    ) -> Result<bool, SpendError> {
        self.run(async {
            let client = self.pool.client("resolving a reservation").await?;
            let changed = client
                .execute(
                    &format!(
                        "UPDATE spend_reservation SET state = $1, tx = $2, resolution = $3,
                             resolved_by = $4, resolved_at = ({DB_NOW})
                         WHERE id = $5 AND state = $6"
                    ),
                    &[
                        &state.as_str(),
                        &tx,
                        &why,
                        &self.vantage,
                        &id,
                        &ReservationState::Open.as_str(),
                    ],
                )
                .await
                .map_err(self.pg("resolving a reservation"))?;
            Ok(changed == 1)
        })
    }

    pub(super) fn totals(&self, subject: &str, _now_unix: i64) -> Result<Totals, SpendError> {
        self.run(async {
            let client = self.pool.client("reading the running totals").await?;
            let now: i64 = client
                .query_one(DB_NOW, &[])
                .await
                .map_err(self.pg("reading the database's clock"))?
                .get(0);
            totals_in(&client, subject, now)
                .await
                .map_err(self.pg("reading the running totals"))
        })
    }

    pub(super) fn reservations(&self, rows: Rows) -> Result<Vec<ReservationRecord>, SpendError> {
        let filter = filter(rows, "");
        let sql = format!(
            "SELECT id, subject, created_at, network, chain_id, asset, payer, pay_to, amount,
                 cost_usd, valid_after, valid_before, nonce, from_block, state, tx, resolved_at,
                 resolution
             FROM spend_reservation WHERE kind = 'evm' {filter} ORDER BY id"
        );
        let rows = self.query(&sql, &[], "reading reservations")?;
        let raw = rows
            .iter()
            .map(|r| RawRow {
                id: r.get(0),
                subject: r.get(1),
                created_at: r.get(2),
                network: r.get(3),
                chain_id: r.get(4),
                asset: r.get(5),
                payer: r.get(6),
                pay_to: r.get(7),
                amount: r.get(8),
                cost: r.get(9),
                valid_after: r.get(10),
                valid_before: r.get(11),
                nonce: r.get(12),
                from_block: r.get(13),
                state: r.get(14),
                tx: r.get(15),
                resolved_at: r.get(16),
                resolution: r.get(17),
            })
            .collect();
        records(raw, &self.location())
    }

    pub(super) fn select_svm(&self, rows: Rows) -> Result<Vec<SvmReservationRecord>, SpendError> {
        let filter = filter(rows, "r.");
        let sql = format!(
            "SELECT {SVM_COLUMNS}
             FROM spend_reservation r JOIN spend_svm_payment s ON s.reservation_id = r.id
             WHERE r.kind = 'svm' {filter} ORDER BY r.id"
        );
        let rows = self.query(&sql, &[], "reading Solana reservations")?;
        let location = self.location();
        rows.iter()
            .map(|r| {
                RawSvmRow {
                    cost: r.get(8),
                    state: r.get(11),
                    last_valid_block_height: r.get(17),
                    record: SvmReservationRecord {
                        id: r.get(0),
                        subject: r.get(1),
                        created_at: r.get(2),
                        network: r.get(3),
                        mint: r.get(4),
                        payer: r.get(5),
                        pay_to: r.get(6),
                        amount: r.get(7),
                        cost: Usd::ZERO,
                        valid_before: r.get(9),
                        block_height: r.get(10),
                        state: ReservationState::Open,
                        resolution: r.get(12),
                        fee_payer: r.get(13),
                        source: r.get(14),
                        destination: r.get(15),
                        blockhash: r.get(16),
                        last_valid_block_height: 0,
                        signature: r.get(18),
                        transaction_id: r.get(19),
                    },
                }
                .into_record(&location)
            })
            .collect()
    }

    pub(super) fn record_svm_signature(&self, id: i64, text: &str) -> Result<(), SpendError> {
        let changed = self.execute(
            "UPDATE spend_svm_payment SET signature = $1
             WHERE reservation_id = $2 AND signature IS NULL",
            &[&text, &id],
            "recording our signature",
        )?;
        if changed == 1 {
            Ok(())
        } else {
            Err(SpendError::Corrupt {
                path: self.location(),
                id,
                why: "no unsigned Solana reservation with this id".into(),
            })
        }
    }

    pub(super) fn record_svm_transaction(
        &self,
        id: i64,
        transaction_id: &str,
    ) -> Result<(), SpendError> {
        self.execute(
            "UPDATE spend_svm_payment SET transaction_id = $1 WHERE reservation_id = $2",
            &[&transaction_id, &id],
            "recording the landed transaction",
        )?;
        Ok(())
    }

    pub(super) fn refusals(&self) -> Result<Vec<RefusalRecord>, SpendError> {
        let rows = self.query(
            "SELECT id, subject, at, code, reason, requirement FROM spend_refusal ORDER BY id",
            &[],
            "reading refusals",
        )?;
        Ok(rows
            .iter()
            .map(|r| RefusalRecord {
                id: r.get(0),
                subject: r.get(1),
                at: r.get(2),
                code: r.get(3),
                reason: r.get(4),
                requirement: r.get(5),
            })
            .collect())
    }

    fn query(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        context: &'static str,
    ) -> Result<Vec<tokio_postgres::Row>, SpendError> {
        self.run(async {
            let client = self.pool.client(context).await?;
            client.query(sql, params).await.map_err(self.pg(context))
        })
    }

    fn execute(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        context: &'static str,
    ) -> Result<u64, SpendError> {
        self.run(async {
            let client = self.pool.client(context).await?;
            client.execute(sql, params).await.map_err(self.pg(context))
        })
    }
}

/// The `WHERE` clause's tail for `rows` (`prefix` the table's alias and a dot; the numbers are
/// ours, written as numbers).
fn filter(rows: Rows, prefix: &str) -> String {
    match rows {
        Rows::All => String::new(),
        Rows::Id(id) => format!("AND {prefix}id = {id}"),
        Rows::Open => format!("AND {prefix}state = 'open'"),
        Rows::ExpiredBy(now) => {
            format!("AND {prefix}state = 'open' AND {prefix}valid_before <= {now}")
        }
    }
}

/// Open reservations (any age, any vantage) plus settled ones reserved in the 24 hours before
/// `now` (the database's clock).
async fn totals_in<C: GenericClient + Sync>(
    c: &C,
    subject: &str,
    now: i64,
) -> Result<Totals, tokio_postgres::Error> {
    let rows = c
        .query(
            "SELECT subject, cost_usd, state FROM spend_reservation
             WHERE state = 'open' OR (state = 'settled' AND created_at > $1)",
            &[&(now - super::store::DAY_SECONDS)],
        )
        .await?;
    Ok(sum_totals(
        rows.iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect(),
        subject,
    ))
}

async fn insert_refusal<C: GenericClient + Sync>(
    c: &C,
    vantage: &str,
    subject: &str,
    refusal: &Refusal,
    requirement_json: Option<&str>,
    now: i64,
) -> Result<(), tokio_postgres::Error> {
    c.execute(
        "INSERT INTO spend_refusal (vantage, subject, at, code, reason, requirement)
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            &vantage,
            &subject,
            &now,
            &refusal.code.as_str(),
            &refusal.message,
            &requirement_json,
        ],
    )
    .await?;
    Ok(())
}
