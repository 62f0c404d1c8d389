//! The x402 wire format (v1 and v2): lenient parsing, strict reporting. Pure.
//!
//! - [`parse`]: the unpaid 402 (`PAYMENT-REQUIRED` header, v2 body, v1 body) and the settlement
//!   receipt, every departure from the published shape recorded as a [`Deviation`].
//! - [`types`]: the normalised view over both versions; each `accepts` entry keeps its raw JSON.
//! - [`network`]: CAIP-2 and v1 network names, chain ids, canonical USDC deployments.
//! - [`eip712`]: EIP-3009 `TransferWithAuthorization` typed data, digests, signer recovery.
//! - [`payload`]: the authorization to sign and the `PAYMENT-SIGNATURE` / `X-PAYMENT` header.

pub mod eip712;
pub mod network;
pub mod parse;
pub mod payload;
pub mod types;

pub use eip712::{
    Authorization, TokenDomain, recover_signer, transfer_digest, transfer_struct_hash,
};
pub use network::{canonical_usdc, chain_id_of, is_caip2};
pub use parse::{parse_payment_required, parse_settlement_response};
pub use payload::{
    PayloadError, PaymentHeader, authorization_for, build_payment_header, decode_payment_header,
    token_domain_for,
};
pub use types::{
    Deviation, Parsed402, PaymentRequired, Requirement, Resource, SettlementResponse, Source,
};
