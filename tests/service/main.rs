//! The service against the lab, in one test binary: the daemon over simulated days and as a
//! process (signals, kill -9, systemd), its API and pages, the ledger (migration, tampering,
//! snapshots, the PostgreSQL store), paid calls and their faults, metrics and webhooks, the
//! recalibration. One binary instead of 27: one link, and its tests run side by side (most of
//! their time is spent waiting on the lab, the chain and child processes), where separate
//! binaries ran one after another.

#[path = "../api_support/mod.rs"]
mod api_support;
#[path = "../daemon_support/mod.rs"]
mod daemon_support;
#[path = "../ledger_support/mod.rs"]
mod ledger_support;
#[path = "../metrics_support/mod.rs"]
mod metrics_support;
#[path = "../paid_support/mod.rs"]
mod paid_support;
#[path = "../process_support/mod.rs"]
mod process_support;
#[path = "../recalibrate_support/mod.rs"]
mod recalibrate_support;
#[path = "../rpc_support/mod.rs"]
mod rpc_support;
#[path = "../webhook_support/mod.rs"]
mod webhook_support;

mod api;
mod api_abuse;
mod daemon_days;
mod daemon_ops;
mod daemon_process;
mod feedback;
mod ledger_migrate;
mod ledger_tamper;
mod mcp_paid;
mod metrics_and_webhooks_days;
mod metrics_http;
mod operator_api;
mod pages_chromium;
mod paid_faults;
mod paid_lab;
mod paid_safety;
mod paid_store;
mod postgres_daemon;
mod postgres_lease;
mod postgres_store;
mod preflight;
mod recalibrate;
mod snapshots;
mod spend_shared;
mod store_contract;
mod store_copy;
mod subject_state;
mod subjects_file;
mod svm_paid;
mod systemd;
mod vantage_daemons;
mod vantage_leases;
mod vantage_scores;
mod vantage_support;
mod webhook_kill;
