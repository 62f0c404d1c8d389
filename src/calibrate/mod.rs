//! The nightly recalibration: reads the daemon's daily scores and the labels that follow them,
//! and measures whether the scores predict paid-call failure. `labels.rs` is the one type the
//! simulator writes and the recalibration reads; `read.rs` turns the store into the compact
//! `table.rs` (through the `Store` trait, read only); `fit.rs`, `gates.rs` and `job.rs` are pure (the fit,
//! the gates the evidence asks for, the figures, the proposal); `html.rs` renders the report. The command is `cmd/recalibrate.rs`.

pub mod fit;
pub mod gates;
pub mod html;
pub mod job;
pub mod labels;
pub mod read;
pub mod table;
