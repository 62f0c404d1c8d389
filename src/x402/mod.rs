//! The x402 wire format (v1 and v2): lenient parsing, strict reporting. Pure.
