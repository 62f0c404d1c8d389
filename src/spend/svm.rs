//! Solana reservations: the same store, caps and order of events as EVM ones (see `store.rs`),
//! with what a Solana payment needs beside its reservation row (`svm_payment`).
//!
//! The order, and why each step is durable before the next:
//! 1. [`SpendStore::reserve_svm`] checks the entry (`assess_svm`) and the running totals (EVM and
//!    Solana reservations counted together) and writes the reservation with the exact transfer
//!    (mint, both token accounts, amount, fee payer, memo, blockhash): nothing is signed yet.
//! 2. The Solana wallet signs exactly that transfer ([`SvmReservation`], which only this module
//!    makes).
//! 3. [`SpendStore::record_svm_signature`] commits our signature before anything is sent: a
//!    reservation without one was provably never sent (reconciliation releases it at once); one
//!    with it is looked for on chain by that signature until its blockhash has expired.

use rusqlite::params;

use serde::Serialize;

use super::policy::{PayPolicy, assess_svm};
use super::store::{
    Backend, NewReservation, NewSvmPayment, ReservationState, ReserveError, Rows, SpendError,
    SpendStore, SqliteSpend, subject_key,
};
use crate::evidence::paid::{Refusal, RefusalCode};
use crate::evidence::usd::Usd;
use crate::x402::Requirement;
use crate::x402::solana::SolanaAddress;
use crate::x402::solana_payment::SvmTransfer;

/// How long a Solana reservation's window lasts on the wall clock: a blockhash lives 150 blocks
/// (about a minute); past twice that, reconciliation may ask the chain whether it landed.
pub const SVM_WINDOW_SECONDS: i64 = 120;

/// What a Solana reservation is about to be made for: the entry, and what our RPC read.
#[derive(Debug, Clone, Copy)]
pub struct SvmReserveRequest<'a> {
    /// The endpoint URL (the per-subject cap's key).
    pub subject: &'a str,
    pub requirement: &'a Requirement,
    /// Our wallet: the token authority.
    pub payer: SolanaAddress,
    /// The program that owns the mint, and the mint's decimals, as our RPC read them.
    pub token_program: SolanaAddress,
    pub mint_decimals: u8,
    /// From our RPC's `getLatestBlockhash`.
    pub recent_blockhash: [u8; 32],
    pub last_valid_block_height: u64,
    /// The block height read before sending: where reconciliation starts looking.
    pub block_height: u64,
}

/// A Solana reservation written durably: the only thing the Solana wallet signs. It cannot be
/// built outside this module, and holds exactly the transfer that was reserved.
#[derive(Debug)]
pub struct SvmReservation {
    id: i64,
    subject: String,
    transfer: SvmTransfer,
    cost: Usd,
}

impl SvmReservation {
    pub fn id(&self) -> i64 {
        self.id
    }
    pub fn subject(&self) -> &str {
        &self.subject
    }
    /// Exactly what will be signed.
    pub fn transfer(&self) -> &SvmTransfer {
        &self.transfer
    }
    pub fn cost(&self) -> Usd {
        self.cost
    }
}

/// One Solana reservation, as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SvmReservationRecord {
    pub id: i64,
    pub subject: String,
    pub created_at: i64,
    pub network: String,
    pub mint: String,
    pub payer: String,
    pub pay_to: String,
    pub amount: String,
    pub cost: Usd,
    /// The wall-clock end of the window (`created_at` + [`SVM_WINDOW_SECONDS`]).
    pub valid_before: i64,
    pub block_height: Option<i64>,
    pub state: ReservationState,
    pub resolution: Option<String>,
    pub fee_payer: String,
    pub source: String,
    pub destination: String,
    pub blockhash: String,
    pub last_valid_block_height: u64,
    /// Ours, base58: present once it was committed, which is before anything was sent.
    pub signature: Option<String>,
    /// The landed transaction's id, once found.
    pub transaction_id: Option<String>,
}

impl SpendStore {
    /// Checks the Solana entry against the policy and the running totals and, when everything
    /// allows it, durably reserves the exact transfer before any signature exists. A refusal is
    /// recorded and returned as [`ReserveError::Refused`].
    pub fn reserve_svm(
        &self,
        policy: &PayPolicy,
        request: &SvmReserveRequest<'_>,
        now_unix: i64,
    ) -> Result<SvmReservation, ReserveError> {
        super::store::off_workers(|| self.reserve_svm_now(policy, request, now_unix))
    }

    fn reserve_svm_now(
        &self,
        policy: &PayPolicy,
        request: &SvmReserveRequest<'_>,
        now_unix: i64,
    ) -> Result<SvmReservation, ReserveError> {
        policy.validate().map_err(SpendError::Policy)?;
        let subject = subject_key(request.subject);
        let requirement_json = request.requirement.entry.to_string();
        let refuse = self.refuser(&subject, &requirement_json, now_unix);
        let priced = assess_svm(policy, request.requirement).map_err(refuse)?;
        if request.mint_decimals != priced.decimals {
            return Err(refuse(Refusal::new(
                RefusalCode::SvmTransferInvalid,
                format!(
                    "the mint has {} decimals on chain; the allowlist prices it at {}",
                    request.mint_decimals, priced.decimals
                ),
            )));
        }
        let nonce: [u8; 16] = rand::random();
        let transfer = SvmTransfer::new(
            &priced.quote,
            request.payer,
            request.token_program,
            request.mint_decimals,
            request.recent_blockhash,
            nonce,
        )
        .map_err(|e| refuse(Refusal::new(RefusalCode::SvmTransferInvalid, e.to_string())))?;

        let height = |h: u64| i64::try_from(h).unwrap_or(i64::MAX);
        let row = NewReservation {
            subject: subject.clone(),
            network: transfer.network.to_string(),
            chain_id: 0,
            asset: transfer.mint.to_string(),
            payer: transfer.payer.to_string(),
            pay_to: transfer.pay_to.to_string(),
            amount: transfer.amount.to_string(),
            cost: priced.cost,
            valid_after: now_unix,
            valid_before: now_unix.saturating_add(SVM_WINDOW_SECONDS),
            nonce: format!("svm:{}", hex::encode(nonce)),
            from_block: Some(height(request.block_height)),
            kind: "svm",
            svm: Some(NewSvmPayment {
                fee_payer: transfer.fee_payer.to_string(),
                source: transfer.source.to_string(),
                destination: transfer.destination.to_string(),
                token_program: transfer.token_program.to_string(),
                decimals: i64::from(transfer.decimals),
                memo: hex::encode(&transfer.memo),
                blockhash: bs58::encode(transfer.recent_blockhash).into_string(),
                last_valid_block_height: height(request.last_valid_block_height),
            }),
        };
        let id = self.insert_within_caps(policy, &row, &requirement_json, now_unix)?;
        Ok(SvmReservation {
            id,
            subject,
            transfer,
            cost: priced.cost,
        })
    }

    /// Commits our signature of reservation `id`, before the transaction is sent: from here on
    /// the payment may exist on chain, and is looked for by this signature.
    pub fn record_svm_signature(&self, id: i64, signature: &[u8; 64]) -> Result<(), SpendError> {
        let text = bs58::encode(signature).into_string();
        super::store::off_workers(|| match self.backend() {
            Backend::Sqlite(b) => b.record_svm_signature(id, &text),
            Backend::Postgres(b) => b.record_svm_signature(id, &text),
        })
    }

    /// Releases a Solana reservation that was never sent (so its transaction can never land).
    /// Consumes the reservation: it cannot be signed afterwards.
    pub fn release_unsent_svm(
        &self,
        reservation: SvmReservation,
        why: &str,
        now_unix: i64,
    ) -> Result<bool, SpendError> {
        self.release_never_sent(reservation.id, why, now_unix)
    }

    /// Marks an open Solana reservation settled: the transaction carrying our signature landed
    /// and succeeded (`transaction_id` its id, when read). Returns whether the row changed.
    pub fn mark_svm_settled(
        &self,
        id: i64,
        transaction_id: Option<&str>,
        why: &str,
        now_unix: i64,
    ) -> Result<bool, SpendError> {
        if let Some(transaction_id) = transaction_id {
            super::store::off_workers(|| match self.backend() {
                Backend::Sqlite(b) => b.record_svm_transaction(id, transaction_id),
                Backend::Postgres(b) => b.record_svm_transaction(id, transaction_id),
            })?;
        }
        self.resolve(id, ReservationState::Settled, None, why, now_unix)
    }

    /// Every Solana reservation, oldest first.
    pub fn svm_reservations(&self) -> Result<Vec<SvmReservationRecord>, SpendError> {
        self.select_svm(Rows::All)
    }

    /// One Solana reservation by id.
    pub fn svm_reservation(&self, id: i64) -> Result<Option<SvmReservationRecord>, SpendError> {
        Ok(self.select_svm(Rows::Id(id))?.pop())
    }

    /// Every open Solana reservation, oldest first.
    pub fn svm_open_reservations(&self) -> Result<Vec<SvmReservationRecord>, SpendError> {
        self.select_svm(Rows::Open)
    }

    fn select_svm(&self, rows: Rows) -> Result<Vec<SvmReservationRecord>, SpendError> {
        match self.backend() {
            Backend::Sqlite(b) => b.select_svm(rows),
            Backend::Postgres(b) => b.select_svm(rows),
        }
    }
}

/// The columns a Solana reservation is read from, both backends alike.
pub(super) const SVM_COLUMNS: &str = "r.id, r.subject, r.created_at, r.network, r.asset, r.payer,
    r.pay_to, r.amount, r.cost_usd, r.valid_before, r.from_block, r.state, r.resolution,
    s.fee_payer, s.source, s.destination, s.blockhash, s.last_valid_block_height, s.signature,
    s.transaction_id";

/// A Solana reservation's row with its text columns not yet parsed.
pub(super) struct RawSvmRow {
    pub record: SvmReservationRecord,
    pub cost: String,
    pub state: String,
    pub last_valid_block_height: i64,
}

impl RawSvmRow {
    pub(super) fn into_record(self, location: &str) -> Result<SvmReservationRecord, SpendError> {
        let RawSvmRow {
            mut record,
            cost,
            state,
            last_valid_block_height,
        } = self;
        let id = record.id;
        let corrupt = |why: String| SpendError::Corrupt {
            path: location.to_string(),
            id,
            why,
        };
        record.cost = cost
            .parse()
            .map_err(|e| corrupt(format!("cost_usd: {e}")))?;
        record.state = state.parse().map_err(corrupt)?;
        record.last_valid_block_height = u64::try_from(last_valid_block_height)
            .map_err(|_| corrupt(format!("last_valid_block_height {last_valid_block_height}")))?;
        Ok(record)
    }
}

impl SqliteSpend {
    fn record_svm_signature(&self, id: i64, text: &str) -> Result<(), SpendError> {
        let changed = self
            .conn()
            .execute(
                "UPDATE svm_payment SET signature = ?1
                 WHERE reservation_id = ?2 AND signature IS NULL",
                params![text, id],
            )
            .map_err(self.sql_err("recording our signature"))?;
        if changed == 1 {
            Ok(())
        } else {
            Err(SpendError::Corrupt {
                path: self.path.display().to_string(),
                id,
                why: "no unsigned Solana reservation with this id".into(),
            })
        }
    }

    fn record_svm_transaction(&self, id: i64, transaction_id: &str) -> Result<(), SpendError> {
        self.conn()
            .execute(
                "UPDATE svm_payment SET transaction_id = ?1 WHERE reservation_id = ?2",
                params![transaction_id, id],
            )
            .map_err(self.sql_err("recording the landed transaction"))?;
        Ok(())
    }

    fn select_svm(&self, rows: Rows) -> Result<Vec<SvmReservationRecord>, SpendError> {
        let open = ReservationState::Open.as_str();
        let (filter, id) = match rows {
            Rows::All => ("", None),
            Rows::Id(id) => ("AND r.id = ?1", Some(id)),
            Rows::Open | Rows::ExpiredBy(_) => ("AND r.state = ?1", None),
        };
        let conn = self.conn();
        let sql = format!(
            "SELECT {SVM_COLUMNS}
             FROM reservation r JOIN svm_payment s ON s.reservation_id = r.id
             WHERE r.kind = 'svm' {filter} ORDER BY r.id"
        );
        let mut stmt = conn
            .prepare(&sql)
            .map_err(self.sql_err("reading Solana reservations"))?;
        let read = |r: &rusqlite::Row<'_>| {
            Ok(RawSvmRow {
                cost: r.get(8)?,
                state: r.get(11)?,
                last_valid_block_height: r.get(17)?,
                record: SvmReservationRecord {
                    id: r.get(0)?,
                    subject: r.get(1)?,
                    created_at: r.get(2)?,
                    network: r.get(3)?,
                    mint: r.get(4)?,
                    payer: r.get(5)?,
                    pay_to: r.get(6)?,
                    amount: r.get(7)?,
                    cost: Usd::ZERO,
                    valid_before: r.get(9)?,
                    block_height: r.get(10)?,
                    state: ReservationState::Open,
                    resolution: r.get(12)?,
                    fee_payer: r.get(13)?,
                    source: r.get(14)?,
                    destination: r.get(15)?,
                    blockhash: r.get(16)?,
                    last_valid_block_height: 0,
                    signature: r.get(18)?,
                    transaction_id: r.get(19)?,
                },
            })
        };
        let raw = match (id, filter.is_empty()) {
            (Some(id), _) => stmt.query_map([id], read),
            (None, true) => stmt.query_map([], read),
            (None, false) => stmt.query_map([open], read),
        }
        .map_err(self.sql_err("reading Solana reservations"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(self.sql_err("reading Solana reservations"))?;
        let location = self.path.display().to_string();
        raw.into_iter().map(|r| r.into_record(&location)).collect()
    }
}
