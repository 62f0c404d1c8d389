//! Spend safety: what we are willing to pay ([`PayPolicy`]: caps and allowlist), and the durable
//! record of every payment reserved, settled, released or refused ([`SpendStore`]: SQLite in the
//! state directory, or PostgreSQL shared by every vantage of the daemon's `[store] postgres`).
//!
//! The rules, in the order a payment meets them (details in `state/spend.md`):
//! - per entry, pure ([`assess`]): scheme `exact`; transfer method absent or `eip3009`; network and
//!   asset on the allowlist; amount a decimal integer; cost within the per-call cap; a sane timeout;
//! - against what was already committed, inside the reservation's own transaction
//!   ([`SpendStore::reserve`]): open reservations plus settled ones of the last 24 hours, plus this
//!   one, within the per-subject and the daily cap;
//! - then the reservation is on disk, and only then can the wallet sign it.
//!
//! Solana entries meet the same caps through `assess_svm` and `SpendStore::reserve_svm` (the
//! reservation names our signature, committed before anything is sent).

mod pg;
mod policy;
mod store;
mod svm;

pub use crate::evidence::paid::{ReconcileReport, Refusal, RefusalCode};
pub use crate::evidence::usd::{USD_DECIMALS, Usd, UsdParseError};
pub use policy::{
    AllowedAsset, AllowedSvmAsset, DEFAULT_MAX_TIMEOUT_SECONDS, PayPolicy, Priced, PricedSvm,
    assess, assess_svm,
};
pub use store::{
    CallLock, DAY_SECONDS, LOCK_FILE, ReconcileStep, RefusalRecord, Reservation, ReservationRecord,
    ReservationState, ReserveError, ReserveRequest, SCHEMA_ID, SCHEMA_SQL, STORE_FILE, SpendError,
    SpendStore, Totals,
};
pub use svm::{SVM_WINDOW_SECONDS, SvmReservation, SvmReservationRecord, SvmReserveRequest};
