//! Address guard (SSRF).
