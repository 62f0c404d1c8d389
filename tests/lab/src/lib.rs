//! The lab: a real local x402 world for tests and the demo.
