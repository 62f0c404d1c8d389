//! The x402 wire format (v1 and v2): lenient parsing, strict reporting. Pure.
//!
//! - [`parse`]: the unpaid 402 (`PAYMENT-REQUIRED` header, v2 body, v1 body) and the settlement
//!   receipt, every departure from the published shape recorded as a [`Deviation`].
//! - [`types`]: the normalised view over both versions; each `accepts` entry keeps its raw JSON.
//! - [`network`]: CAIP-2 and v1 network names, chain ids, canonical USDC deployments.
//! - [`solana`]: the Solana clusters and USDC mints, base58 addresses, associated token accounts,
//!   the SPL mint and token account layouts.
//! - [`eip712`]: EIP-3009 `TransferWithAuthorization` typed data, digests, signer recovery.
//! - [`payload`]: the authorization to sign and the `PAYMENT-SIGNATURE` / `X-PAYMENT` header.
//! - [`catalogue`]: one page of a discovery catalogue (its items and announced total).
//! - [`mcp`]: x402 over MCP: JSON-RPC requests, answers as JSON or event streams, tool lists,
//!   which tools an unpaid probe calls, the PaymentRequired of a paid tool's answer.
//!
//! # Deviation codes
//!
//! Stable, `<where>.<problem>`, in the protocol's own field names; `i` is the `accepts` index.
//!
//! | Where | Problems |
//! |---|---|
//! | `status` | `not_402` |
//! | `header` (`PAYMENT-REQUIRED`) | `duplicate` (repeated, same object), `duplicate_disagree` (repeated, different objects: none is read), `empty`, `too_large`, `bad_base64`, `base64_url_safe`, `base64_unpadded`, `bad_json`, `not_object`, `too_deep`, `too_complex`, `version_not_2` |
//! | `body` (only when no usable header) | `bom`, `too_large`, `bad_json`, `not_object`, `too_deep`, `too_complex`, `v2_without_header` |
//! | `payment_required` | `missing` (nothing that looks like one) |
//! | `x402Version` | `missing`, `string`, `not_integer`, `unsupported` |
//! | `error` | `not_string` |
//! | `resource` (v2), `resource.url`, `resource.description`, `resource.mimeType` | `missing`, `not_object`, `not_string` |
//! | `accepts` | `missing`, `not_array`, `empty`, `too_many` (more than `budget::MAX_ACCEPTS_ENTRIES`: the rest counted, not read) |
//! | `accepts[i]` | `not_object` |
//! | `accepts[i].scheme` | `missing`, `not_string`, `unknown` |
//! | `accepts[i].network` | `missing`, `not_string`, `not_caip2` (v2), `unknown` (v1), `unknown_solana` (a Solana network that is none of the three clusters) |
//! | `accepts[i].amount` (v2 `amount` / v1 `maxAmountRequired`) | `missing`, `wrong_field`, `not_string`, `not_integer_string`, `too_large` |
//! | `accepts[i].asset`, `accepts[i].payTo` | `missing`, `not_string`, `not_address`, `not_checksummed` |
//! | `accepts[i].maxTimeoutSeconds` | `missing`, `not_integer`, `out_of_range` |
//! | `accepts[i].extra`, `.extra.name`, `.extra.version`, `.extra.assetTransferMethod` | `not_object`, `missing`, `not_string`, `unknown` |
//! | `accepts[i].extra.feePayer`, `.extra.memo` (Solana) | `missing` (feePayer, scheme `exact`), `not_string`, `not_address`, `too_long` (memo past 256 bytes) |
//! | `accepts[i].description`, `.mimeType`, `.resource`, `.outputSchema` | `missing` (v1 resource), `not_string`, `not_object` |
//! | `extensions` | `not_object` |
//! | `payment_response` (receipt) | `missing`, `duplicate`, `both_headers`, `duplicate_disagree` (repeated headers, either name, that differ: no receipt), `empty`, `too_large`, `bad_base64`, `base64_url_safe`, `base64_unpadded`, `bad_json`, `not_object`, `too_deep`, `too_complex`, `success.missing`, `success.not_bool`, `transaction.not_hash`, `<field>.not_string` |
//!
//! The checks add their own: C4 `header_body.differ`; C5 `extensions.bazaar.{missing, not_object,
//! info.missing, info.not_object, info.input.missing, info.output.missing, schema.missing,
//! schema.not_object, schema.invalid, schema.too_complex, info.does_not_validate}` and (v1)
//! `accepts.outputSchema.missing`, `accepts[i].outputSchema.{not_object, input.missing,
//! output.missing, ...}`; C3 `accepts[i].asset.{not_address, not_recognised}`,
//! `accepts[i].extra.{name, version, domain_separator}.mismatch`, `token.{name, version,
//! domain_separator}.unreadable`. Which codes fail which check is written in
//! `checks::conformance`.

mod bounded;
pub mod catalogue;
pub mod eip712;
pub mod mcp;
pub mod network;
pub mod offer_receipt;
pub mod operator;
pub mod parse;
pub mod payload;
pub mod solana;
pub mod solana_payment;
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
