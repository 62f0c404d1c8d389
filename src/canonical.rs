//! RFC 8785 canonical JSON (JCS).
