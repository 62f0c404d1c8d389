//! x402-probe: tells paying agents which x402 endpoints they can trust, with evidence.
