//! The lab: a real local x402 world for tests and the demo.
//!
//! `chain` starts anvil, `rpc` talks JSON-RPC to it, `token` deploys and drives the EIP-3009 token.

pub mod chain;
pub mod rpc;
pub mod token;
