//! C1, C2, C4, C5: conformance of the 402.
