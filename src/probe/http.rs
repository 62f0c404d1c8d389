//! HTTP/TLS prober.
