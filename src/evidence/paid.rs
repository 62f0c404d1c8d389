//! What one paid call saw, step by step: the quote, the decision, what was signed and sent, the
//! paid response, the chain around it, the replay, the refund side and the reservation's fate.
//! Plain data, produced by the paid driver (`probe::paid`), evaluated by `checks::paid`, stored
//! in the ledger.

use alloy::primitives::{Address, B256, U256};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::chain::{ChainRead, LogEntry, TxReceipt};
use super::http::{Exchange, FetchRequest};
pub use super::usd::Usd;

/// Why we did not pay. `code` is stable (it is stored and reported); `message` is for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub code: RefusalCode,
    pub message: String,
}

impl Refusal {
    pub fn new(code: RefusalCode, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

/// The rules a payment can be refused by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalCode {
    /// Nothing to pay: no PaymentRequired, or no `accepts` entries.
    NoRequirements,
    /// `scheme` is not `exact`.
    SchemeNotExact,
    /// `extra.assetTransferMethod` asks for something other than EIP-3009 (e.g. Permit2).
    TransferMethodNotEip3009,
    /// The network is not on the allowlist (or not a network we know).
    NetworkNotAllowed,
    /// The asset is not on the allowlist for that network.
    AssetNotAllowed,
    /// The amount is missing or not a decimal integer string.
    AmountInvalid,
    /// `payTo` is missing or not an address.
    PayToInvalid,
    /// `extra.name` / `extra.version` (the token's EIP-712 domain) are missing.
    DomainMissing,
    /// `maxTimeoutSeconds` is missing, zero, or longer than the policy allows.
    TimeoutInvalid,
    OverPerCallCap,
    OverPerSubjectCap,
    OverDailyCap,
    /// The 402 fetched again just before paying differs from the quote (price, payTo, asset,
    /// network), or the entry is gone, or it could not be fetched again.
    QuoteChanged,
    /// Our fixed RPC could not be read, so a settlement could not be verified: we do not pay blind.
    RpcUnavailable,
    /// Our fixed RPC serves another chain than the quote's network.
    WrongChain,
    /// Our wallet holds less than the quoted amount.
    InsufficientFunds,
    /// The paid part's deadline passed before the payment could be made.
    DeadlinePassed,
    /// A Solana entry's transfer cannot be signed as quoted: `extra.feePayer` missing, not an
    /// address, or an account of the transfer itself; a memo past its bound; the mint's decimals
    /// on chain not the allowlist's.
    SvmTransferInvalid,
    /// An `upto` entry (a maximum, the real charge settled later) within every per-entry rule
    /// and cap: on EVM the scheme settles only through Permit2's `permitWitnessTransferFrom`,
    /// which this build's wallet does not sign.
    UptoNeedsPermit2,
    /// The shared spend store (PostgreSQL) holds an open reservation for this subject, made by
    /// this or another vantage: one payment per subject is in flight at a time.
    SubjectInFlight,
    /// The shared spend store holds a reservation for this subject (open or settled) made within
    /// the daemon's minimum interval between paid calls, by this or another vantage.
    PaidWithinInterval,
}

impl RefusalCode {
    /// A limit of ours on spending (a cap, the wallet's balance), not a fault of the quote: a
    /// paid call tried again within hours meets it again.
    pub fn is_spend_limit(self) -> bool {
        matches!(
            self,
            RefusalCode::OverPerSubjectCap
                | RefusalCode::OverDailyCap
                | RefusalCode::InsufficientFunds
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RefusalCode::NoRequirements => "no_requirements",
            RefusalCode::SchemeNotExact => "scheme_not_exact",
            RefusalCode::TransferMethodNotEip3009 => "transfer_method_not_eip3009",
            RefusalCode::NetworkNotAllowed => "network_not_allowed",
            RefusalCode::AssetNotAllowed => "asset_not_allowed",
            RefusalCode::AmountInvalid => "amount_invalid",
            RefusalCode::PayToInvalid => "pay_to_invalid",
            RefusalCode::DomainMissing => "domain_missing",
            RefusalCode::TimeoutInvalid => "timeout_invalid",
            RefusalCode::OverPerCallCap => "over_per_call_cap",
            RefusalCode::OverPerSubjectCap => "over_per_subject_cap",
            RefusalCode::OverDailyCap => "over_daily_cap",
            RefusalCode::QuoteChanged => "quote_changed",
            RefusalCode::RpcUnavailable => "rpc_unavailable",
            RefusalCode::WrongChain => "wrong_chain",
            RefusalCode::InsufficientFunds => "insufficient_funds",
            RefusalCode::DeadlinePassed => "deadline_passed",
            RefusalCode::SvmTransferInvalid => "svm_transfer_invalid",
            RefusalCode::UptoNeedsPermit2 => "upto_needs_permit2",
            RefusalCode::SubjectInFlight => "subject_in_flight",
            RefusalCode::PaidWithinInterval => "paid_within_interval",
        }
    }
}

/// What one reconciliation did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct ReconcileReport {
    pub settled: Vec<i64>,
    pub released: Vec<i64>,
    /// Reservations looked at that stay open (the chain unreadable, or not past `validBefore` on
    /// the chain's clock), with why.
    pub still_open: Vec<(i64, String)>,
}

/// One `accepts` entry as quoted, with the parts of its PaymentRequired the checks need.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuoteSeen {
    pub x402_version: u8,
    /// Position in `accepts`.
    pub index: usize,
    /// The entry as received.
    pub entry: Value,
    /// v2: the top-level `resource` object.
    pub resource: Option<Value>,
    /// v2: the `extensions` object (the bazaar declares the output there).
    pub extensions: Option<Value>,
    pub scheme: Option<String>,
    pub network: Option<String>,
    pub asset: Option<String>,
    pub pay_to: Option<String>,
    pub amount: Option<String>,
    pub max_timeout_seconds: Option<u64>,
}

impl QuoteSeen {
    pub fn asset_address(&self) -> Option<Address> {
        self.asset.as_deref().and_then(address_any_case)
    }

    pub fn pay_to_address(&self) -> Option<Address> {
        self.pay_to.as_deref().and_then(address_any_case)
    }
}

/// `0x` and 40 hex digits in any case (x402 payTo and asset fields are often not checksummed).
pub fn address_any_case(text: &str) -> Option<Address> {
    let hex_part = text.strip_prefix("0x")?;
    if hex_part.len() != 40 || !hex_part.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    hex_part.parse().ok()
}

/// The 402 fetched again just before paying.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequoteSeen {
    pub exchange: Exchange,
    /// The entry matching the quoted one (same scheme, network, asset, transfer method), if any.
    pub entry: Option<QuoteSeen>,
    /// What differs from the quote (empty when nothing that matters does).
    pub changes: Vec<String>,
}

/// Whether we paid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// A signed authorization was sent.
    Paid { reservation_id: i64 },
    /// We declined; nothing was signed. Every rule that declined is listed.
    Refused { refusals: Vec<Refusal> },
    /// Our side failed before anything was sent (store, signing); nothing was sent.
    Failed { stage: String, error: String },
}

/// The authorization as signed (public once sent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuthorizationSeen {
    pub from: Address,
    pub to: Address,
    /// Atomic units, decimal.
    pub value: String,
    pub valid_after: u64,
    pub valid_before: u64,
    pub nonce: B256,
}

impl AuthorizationSeen {
    pub fn value_u256(&self) -> Option<U256> {
        U256::from_str_radix(&self.value, 10).ok()
    }
}

/// What was signed and sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaymentSent {
    pub reservation_id: i64,
    pub cost_usd: Usd,
    pub authorization: AuthorizationSeen,
    /// The EIP-712 domain signed under.
    pub domain_name: String,
    pub domain_version: String,
    pub chain_id: u64,
    pub asset: Address,
    /// r ‖ s ‖ v, hex.
    pub signature: String,
    pub header_name: String,
    pub header_value: String,
    /// Our clock when the request was sent, unix seconds.
    pub sent_at: i64,
    /// The `payment-identifier` id the payment carries, when the 402 advertised the extension
    /// (the replay sends the same header, so the same id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_id: Option<String>,
}

/// The settlement receipt header, as decoded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettlementSeen {
    /// The header it came from, lower case.
    pub header_name: Option<String>,
    /// The decoded object, when it decoded.
    pub object: Option<Value>,
    pub success: Option<bool>,
    pub transaction: Option<String>,
    pub network: Option<String>,
    pub error_reason: Option<String>,
    /// Why it could not be read (`code: message`), when it could not.
    pub problem: Option<String>,
}

impl SettlementSeen {
    /// The named transaction, when it is a 32-byte hash.
    pub fn transaction_hash(&self) -> Option<B256> {
        let text = self.transaction.as_deref()?;
        let hex_part = text.strip_prefix("0x")?;
        (hex_part.len() == 64)
            .then(|| text.parse::<B256>().ok())
            .flatten()
    }
}

/// The chain around the call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaidChainSeen {
    pub rpc_url: String,
    pub chain_id: ChainRead<u64>,
    /// The latest block before the payment was sent.
    pub block_before: ChainRead<u64>,
    /// The latest block after the response (after waiting for confirmations, when asked).
    pub block_after: ChainRead<u64>,
    /// The receipt of the transaction the settlement response names (`None`: the node does not
    /// know it, after waiting `receipt_wait_ms`).
    pub claimed_receipt: ChainRead<Option<TxReceipt>>,
    /// `AuthorizationUsed(our wallet, *)` logs of the asset in `block_before+1 ..= block_after`.
    pub authorizations_used: ChainRead<Vec<LogEntry>>,
    /// The receipt of the transaction that used our nonce, when one did.
    pub nonce_receipt: ChainRead<Option<TxReceipt>>,
    /// `authorizationState(our wallet, our nonce)` at `block_after` or later.
    pub authorization_state: ChainRead<bool>,
    /// `Transfer(from = our wallet)` logs of the asset in `block_before+1 ..= block_after`.
    pub transfers_from_wallet: ChainRead<Vec<LogEntry>>,
    pub confirmations_required: u64,
    /// Blocks the settlement had (counting its own) when the reads above were taken.
    pub settlement_depth: Option<u64>,
}

/// An answer to the paid request whose settlement response said `settlement_pending` (a
/// non-terminal settle outcome: the transaction is broadcast, not yet confirmed), after which the
/// same payment was sent again (never a new one) to learn the final outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingSeen {
    pub exchange: Exchange,
    pub settlement: Option<SettlementSeen>,
}

/// The errorReason of a settle outcome that is not final (x402: a broadcast transaction whose
/// confirmation was not observed; the hash is in `transaction`).
pub const SETTLEMENT_PENDING: &str = "settlement_pending";

impl SettlementSeen {
    /// Whether this settle outcome is `settlement_pending` (not terminal).
    pub fn pending(&self) -> bool {
        self.success == Some(false) && self.error_reason.as_deref() == Some(SETTLEMENT_PENDING)
    }
}

/// The same payment sent again, once our authorization was spent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplaySeen {
    /// `None` when the replay was not sent (see `skipped`).
    pub exchange: Option<Exchange>,
    pub skipped: Option<String>,
    /// The latest block after the replay.
    pub block_after: ChainRead<u64>,
    /// `Transfer(from = our wallet)` logs after the first call's window, through `block_after`.
    pub transfers_after: ChainRead<Vec<LogEntry>>,
    /// `AuthorizationUsed(our wallet, *)` logs in the same range.
    pub authorizations_used_after: ChainRead<Vec<LogEntry>>,
}

/// The refund rule the operator file declares (`probes/operator-file.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundRule {
    /// When a refund is promised, e.g. `charged_without_delivery`.
    pub on: String,
    pub within_seconds: u64,
}

/// The operator file as far as refunds are concerned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorFile {
    /// Wallets the operator lists, which a refund may come from besides `payTo`.
    pub wallets: Vec<OperatorWallet>,
    pub refund: Option<RefundRule>,
    /// Dated revision notes: the owner's word that a price change or a payTo rotation is
    /// intended (H2, H3).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<RevisionNote>,
    /// Addresses besides `payTo` whose signature proves control of the subject to our API (its
    /// operator reads its ledger entries and posts notes with them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operator_keys: Vec<Address>,
}

/// What a revision note announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoteKind {
    /// The price changes (H2): `amount`, when given, is the new price in atomic units.
    PriceChange,
    /// `payTo` moves to another wallet (H3): `pay_to` names the new wallet.
    PaytoRotation,
}

/// One dated note of the operator file (`probes/operator-file.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionNote {
    /// When the change takes effect or was announced, unix ms.
    pub at_ms: i64,
    pub kind: NoteKind,
    /// The new price (atomic units, decimal), for a price change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<String>,
    /// The new wallet, for a rotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pay_to: Option<Address>,
    /// The owner's words, bounded.
    pub text: String,
}

/// One wallet of the operator file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorWallet {
    /// CAIP-2; `None` means every network.
    pub network: Option<String>,
    pub address: Address,
}

/// What became of reading the operator file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum OperatorFileSeen {
    /// 404 or 410: the operator publishes no file (no refund is promised).
    Absent {
        status: u16,
    },
    /// Another status, or no answer: we could not look.
    Unreadable {
        why: String,
    },
    /// 200 with something that breaks the format (H4 carries that failure).
    Malformed {
        why: String,
    },
    Read {
        file: OperatorFile,
    },
}

/// What a refund watch needs, decided from a paid call that charged without delivering: whose
/// transfers count as a refund, of what, from which block. Kept with the watch, which runs as its
/// own job after the paid call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundPlan {
    pub subject: String,
    /// Our wallet: refunds are transfers to it.
    pub wallet: Address,
    /// The token charged (and refunded).
    pub asset: Address,
    pub chain_id: u64,
    /// The block of the charge: the watch reads from here, and its time starts the window.
    pub charge_block: u64,
    /// What we were charged in `asset`, atomic units: a refund must add up to this.
    pub charge_amount: U256,
    /// Who a refund may come from besides the operator file's wallets: the quoted payee and
    /// whoever received our charge.
    pub senders: Vec<Address>,
    /// When the payment was sent (our clock): the window's start when the charge block's time
    /// cannot be read.
    pub sent_at: i64,
}

/// One transfer to our wallet seen during a refund watch, with its block's time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefundTransfer {
    pub log: LogEntry,
    pub block_timestamp: ChainRead<u64>,
}

/// The refund side of a paid call (H9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefundSeen {
    /// Why no watch happened, when none did.
    pub skipped: Option<String>,
    /// `GET /.well-known/x402-operator.json` at the subject's origin.
    pub operator_exchange: Option<Exchange>,
    /// What the operator file says, when it was fetched.
    pub operator: Option<OperatorFileSeen>,
    pub watch: Option<RefundWatch>,
}

impl RefundSeen {
    /// No watch, with why (nothing to refund, or the refund side could not be looked at).
    pub fn skipped(why: impl Into<String>) -> RefundSeen {
        RefundSeen {
            skipped: Some(why.into()),
            operator_exchange: None,
            operator: None,
            watch: None,
        }
    }
}

/// Watching the chain for a refund.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefundWatch {
    /// The block of the charge.
    pub charge_block: u64,
    /// Its timestamp: the refund window starts here.
    pub charge_time: ChainRead<u64>,
    /// The end of the declared window (charge time + `within_seconds`), unix seconds.
    pub window_end: i64,
    /// Our clock when watching started and ended.
    pub started_at: i64,
    pub ended_at: i64,
    /// The latest block read at the end.
    pub last_block: ChainRead<u64>,
    /// Every `Transfer(to = our wallet)` of the asset from the charge block on.
    pub transfers_to_wallet: ChainRead<Vec<RefundTransfer>>,
    /// Whether the watch lasted until the window ended (or a full refund arrived first).
    pub complete: bool,
}

/// Where a reservation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReservationState {
    /// Not known to be settled or unusable: counts against the caps.
    Open,
    /// Our authorization was used on chain: money moved. Counts for 24 hours.
    Settled,
    /// Provably never charged (never sent, or unused after `validBefore`). Counts for nothing.
    Released,
}

impl ReservationState {
    pub fn as_str(self) -> &'static str {
        match self {
            ReservationState::Open => "open",
            ReservationState::Settled => "settled",
            ReservationState::Released => "released",
        }
    }
}

impl std::str::FromStr for ReservationState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "open" => Ok(ReservationState::Open),
            "settled" => Ok(ReservationState::Settled),
            "released" => Ok(ReservationState::Released),
            other => Err(format!("unknown reservation state {other:?}")),
        }
    }
}

/// The reservation after the call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReservationSeen {
    pub id: i64,
    pub state: ReservationState,
    pub resolution: Option<String>,
}

/// Everything one paid call saw. Serialisable for the ledger; evaluated by `checks::paid`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaidObservation {
    /// The subject (endpoint URL).
    pub subject: String,
    /// The request as given (without payment); the paid request and the replay add the header.
    pub request: FetchRequest,
    pub wallet: Address,
    /// Our clock at the start, unix seconds.
    pub started_at: i64,
    /// The entry chosen from the caller's quote (the first one, when none was acceptable).
    pub quote: Option<QuoteSeen>,
    pub requote: Option<RequoteSeen>,
    pub decision: Decision,
    /// The entry actually paid (from the 402 fetched again; equal to `quote` where it matters).
    pub paid_entry: Option<QuoteSeen>,
    pub payment: Option<PaymentSent>,
    /// The paid request's time limit (R7 records it when no response came).
    pub paid_timeout_ms: u64,
    pub paid: Option<Exchange>,
    pub settlement: Option<SettlementSeen>,
    pub chain: Option<PaidChainSeen>,
    pub replay: Option<ReplaySeen>,
    pub refund: Option<RefundSeen>,
    pub reservation: Option<ReservationSeen>,
    /// The opening reconciliation of earlier reservations.
    pub reconciled: Option<ReconcileReport>,
    /// Problems on our side worth keeping (a store write that failed after sending...).
    pub notes: Vec<String>,
    /// A payment on Solana (then `payment` and `chain` stay empty): what was sent and what the
    /// chain showed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub svm: Option<super::svm::SvmPaidSeen>,
    /// Earlier answers to the paid request that said `settlement_pending`, in order; `paid` and
    /// `settlement` are the last answer (the final outcome, or still pending at the deadline).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingSeen>,
    /// How the payment travels and the answer is read: an HTTP header (the default, not written,
    /// so an HTTP observation stores the bytes it always did) or an MCP tool call.
    #[serde(default, skip_serializing_if = "PaymentCarrier::is_http")]
    pub carrier: PaymentCarrier,
    /// The reference source read around the paid request (R6), when the subject is linked to
    /// one (`probes/references.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<super::reference::ReferenceSeen>,
}

/// How a paid call carries the payment and its settlement response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaymentCarrier {
    /// `PAYMENT-SIGNATURE`/`X-PAYMENT` on the request, `PAYMENT-RESPONSE`/`X-PAYMENT-RESPONSE`
    /// on the response; the status says whether it delivered.
    #[default]
    Http,
    /// x402 over MCP: the request is a `tools/call` whose `params._meta["x402/payment"]` carries
    /// the PaymentPayload, the answer a JSON-RPC result whose `_meta["x402/payment-response"]`
    /// carries the settlement response; a result not marked `isError` is the delivery.
    McpTool,
}

impl PaymentCarrier {
    pub fn is_http(&self) -> bool {
        *self == PaymentCarrier::Http
    }

    /// The carrier of a subject's paid calls: an MCP tool's key (`mcp+...#tool`), else HTTP.
    pub fn of_subject(subject: &str) -> PaymentCarrier {
        if subject.starts_with("mcp+") {
            PaymentCarrier::McpTool
        } else {
            PaymentCarrier::Http
        }
    }
}

impl PaidObservation {
    /// Every exchange of the call (re-quote, paid request, replay, operator file of the refund
    /// side), for storage that keeps bodies apart.
    pub fn exchanges_mut(&mut self) -> impl Iterator<Item = &mut Exchange> {
        let requote = self.requote.as_mut().map(|r| &mut r.exchange);
        let pending = self.pending.iter_mut().map(|p| &mut p.exchange);
        let replay = self.replay.as_mut().and_then(|r| r.exchange.as_mut());
        let operator = self
            .refund
            .as_mut()
            .and_then(|r| r.operator_exchange.as_mut());
        let reference = self.reference.iter_mut().flat_map(|r| r.exchanges_mut());
        requote
            .into_iter()
            .chain(pending)
            .chain(self.paid.iter_mut())
            .chain(replay)
            .chain(operator)
            .chain(reference)
    }

    pub fn new(
        subject: &str,
        request: &FetchRequest,
        wallet: Address,
        started_at: i64,
        paid_timeout_ms: u64,
    ) -> Self {
        PaidObservation {
            subject: subject.to_string(),
            request: request.clone(),
            wallet,
            started_at,
            quote: None,
            requote: None,
            decision: Decision::Refused {
                refusals: Vec::new(),
            },
            paid_entry: None,
            payment: None,
            paid_timeout_ms,
            paid: None,
            settlement: None,
            chain: None,
            replay: None,
            refund: None,
            reservation: None,
            reconciled: None,
            notes: Vec::new(),
            svm: None,
            pending: Vec::new(),
            carrier: PaymentCarrier::of_subject(subject),
            reference: None,
        }
    }

    /// Whether we declined to pay because of a spend limit of ours ([`RefusalCode::is_spend_limit`]).
    pub fn refused_by_spend_limit(&self) -> bool {
        matches!(&self.decision, Decision::Refused { refusals }
            if refusals.iter().any(|r| r.code.is_spend_limit()))
    }

    /// Whether a payment was sent (signed and handed to the endpoint), on either network.
    pub fn payment_sent(&self) -> bool {
        self.payment.is_some() || self.svm.is_some()
    }

    /// The header value sent with the payment, on either network.
    pub fn payment_header(&self) -> Option<&str> {
        match (&self.payment, &self.svm) {
            (Some(p), _) => Some(&p.header_value),
            (None, Some(s)) => Some(&s.payment.header_value),
            (None, None) => None,
        }
    }
}
