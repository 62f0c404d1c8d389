//! The nightly recalibration: reads the daemon's daily scores and the labels that follow them,
//! and measures whether the scores predict paid-call failure. `labels.rs` is the one type the
//! simulator writes and the recalibration reads.

pub mod labels;
