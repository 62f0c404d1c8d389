//! Probers: one file per kind of IO. Everything here touches the network; nothing here decides.

pub mod free;
pub mod http;
pub mod mcp;
pub mod netguard;
pub mod paid;
mod paid_svm;
pub mod reconcile;
pub mod reference;
pub mod refund;
pub mod rpc;
pub mod solana_rpc;
