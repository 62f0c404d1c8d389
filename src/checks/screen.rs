//! Screens (S2, S3, S4): deterministic rules with receipts.
