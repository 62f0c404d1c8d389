//! The paid call without IO: its steps as pure decisions ([`steps`]), what its chain reads
//! establish ([`chain`]), and what counts as a refund ([`refund`]).
//!
//! `probe::paid` drives a call through these steps (quote, decide, reserve, sign, send, verify on
//! chain, replay, settle the reservation), `probe::refund` watches for a promised refund as a job
//! of its own, and `checks::paid` judges the resulting observation. None of them calls back into
//! another: the data flows one way, driver -> observation -> checks.

pub mod chain;
pub mod refund;
pub mod steps;
pub mod svm_chain;
pub mod svm_steps;
