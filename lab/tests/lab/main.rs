//! The lab's tests, in one binary (one link instead of six): the chain (anvil, the RPC, the
//! token, the EIP-3009 vectors), the lab's lifecycle (`lab up`/`down`) and every scenario seen
//! from outside.

mod common;

mod chain_anvil;
mod chain_rpc;
mod chain_token;
mod chain_vector;
mod lifecycle;
mod scenarios;
mod vantage_net;
