//! x402-probe: tells paying agents which x402 endpoints they can trust, with evidence.
//!
//! See ARCHITECTURE.md for the map. IO lives in `probe` (one file per kind of IO); `checks`,
//! `x402`, `rubric` and `score` are pure: they never read the clock or touch the network.

pub mod canonical;
pub mod checks;
pub mod cmd;
pub mod definitions;
pub mod evidence;
pub mod probe;
pub mod rubric;
pub mod score;
pub mod x402;
