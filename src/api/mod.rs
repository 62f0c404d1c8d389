//! The daemon's HTTP side. The pages live in `pages/`.

pub mod pages;
