//! Checks: pure functions from observations to outcomes with receipts.

pub mod attribution;
pub mod cloaking;
pub mod conformance;
pub mod findings;
pub mod free;
pub mod history;
pub mod paid;
pub mod reference;
pub mod screen;
pub mod sniff;
pub mod solana;
