//! The lab: a real local x402 world for tests and the demo.
//!
//! `Lab::start` brings up, in about a second: an anvil chain (`chain`, `rpc`), the EIP-3009 token and a
//! fake twin (`token`), a facilitator with honest and dishonest kinds (`facilitator`), one resource
//! server per named scenario (`scenarios`, `quote`, `server`, `tls`) and a discovery catalogue
//! (`catalogue`), and MCP servers with paid tools on demand (`mcp`). `population` draws simulated endpoints with hidden truths that lab endpoints
//! follow over time (`dynamic`). Dropping the `Lab` stops all of it, anvil included.

pub mod agent_registry;
pub mod catalogue;
pub mod chain;
pub mod daemon_config;
pub mod dynamic;
pub mod facilitator;
pub mod forward;
pub mod mcp;
pub mod offers;
pub mod population;
pub mod postgres;
pub mod quote;
pub mod reference;
pub mod rpc;
pub mod scenarios;
pub mod server;
pub mod svm;
pub mod svm_facilitator;
pub mod tls;
pub mod token;
pub mod vantage_net;

mod lab;

pub use lab::{Lab, LabEndpoint, LabOptions, Manifest, ManifestEndpoint};

/// Install rustls' ring provider as the process default (once; later calls are no-ops).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
