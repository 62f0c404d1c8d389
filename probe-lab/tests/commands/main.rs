//! The lab's binary as a user runs it, in one test binary whose tests run side by side (each
//! spends most of its time waiting on the binary it runs): `daemon --lab`, progress on a terminal
//! and in a pipe, `simulate`.

#[path = "../../../tests/process_support/mod.rs"]
mod process_support;

mod daemon_lab;
mod progress;
mod simulate;
