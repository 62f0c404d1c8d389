//! The paid call: everything that spends money and everything it takes to see where the money
//! went. IO only; the outcomes are decided by `checks::paid` from the [`PaidObservation`].
//!
//! One call, in order (each step recorded, none of them panics):
//! 1. Reconcile open reservations whose window has closed (so the caps count what is really open).
//! 2. Choose the first `accepts` entry of the quote that the policy allows; refuse otherwise.
//! 3. Fetch the 402 again and refuse if the entry changed (price, payTo, asset, network).
//! 4. Read the chain: our RPC must answer, serve the quote's chain and show our balance covers it;
//!    we do not pay what we cannot verify.
//! 5. Reserve durably (spend store), then sign exactly that reservation, then send it.
//! 6. Read the chain again: the settlement the response names, the use of our nonce
//!    (`AuthorizationUsed`), `authorizationState`, every `Transfer` from our wallet in the blocks
//!    around the call; replay the payment when our authorization is spent; watch for a refund when
//!    the operator declares a rule and we were charged without delivery.
//! 7. Mark the reservation settled, released or (when unknown) leave it open for reconciliation.
//!
//! Attribution: the transfers from our wallet seen around a call are attributed to that call, except
//! those that settle another of our own authorizations (another nonce). So paid calls from one
//! wallet must not overlap: [`paid_call`] holds the store's call lock for its whole duration.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alloy::primitives::{Address, B256, U256};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::checks::paid::{
    Delivery, TRANSFER_TOPIC, chain_facts, delivery, parse_operator_file, refund_received,
    settlement_of,
};
use crate::probe::http::{
    Exchange, FetchConfig, FetchErrorKind, FetchRequest, Phase, Target, fetch,
};
use crate::probe::rpc::{LogEntry, Rpc, RpcError, TxReceipt};
use crate::spend::{
    AUTHORIZATION_USED_TOPIC, PayPolicy, ReconcileReport, ReconcileStep, Refusal, RefusalCode,
    ReserveError, ReserveRequest, SpendStore, Usd, assess,
};
use crate::wallet::Wallet;
use crate::x402::parse::parse_payment_required;
use crate::x402::payload::build_payment_header;
use crate::x402::types::{Parsed402, PaymentRequired, Requirement, parse_address_any_case};

pub use crate::probe::free::OPERATOR_FILE_PATH;

/// How a paid call waits and what it does besides paying.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaidOptions {
    /// Time allowed for the paid request's response head (settlement happens inside it), ms.
    pub paid_timeout_ms: u64,
    /// Blocks a settlement must have (counting its own) before the chain reads are taken as final;
    /// 0 or 1 = included is enough.
    pub confirmations: u64,
    /// How long to wait for a named transaction's receipt, or for the confirmations, ms.
    pub receipt_wait_ms: u64,
    /// Pause between chain polls, ms.
    pub poll_interval_ms: u64,
    /// Longest refund watch, whatever window the operator declares, seconds.
    pub refund_watch_max_secs: u64,
    /// Replay the payment once our authorization is spent (H7).
    pub replay: bool,
    /// The whole paid part of a run (quote to refund watch) ends by then, ms (`--paid-deadline-ms`).
    pub deadline_ms: u64,
}

impl Default for PaidOptions {
    /// Production: two confirmations, a minute for receipts, ten minutes of refund watch at most.
    fn default() -> Self {
        PaidOptions {
            paid_timeout_ms: 120_000,
            confirmations: 2,
            receipt_wait_ms: 60_000,
            poll_interval_ms: 1_000,
            refund_watch_max_secs: 600,
            replay: true,
            deadline_ms: 900_000,
        }
    }
}

impl PaidOptions {
    /// The local lab: anvil mines each transaction at once and no more blocks after it, so waiting
    /// for extra confirmations would wait forever; receipts are there at once.
    pub fn lab() -> Self {
        PaidOptions {
            paid_timeout_ms: 30_000,
            confirmations: 0,
            receipt_wait_ms: 2_000,
            poll_interval_ms: 200,
            refund_watch_max_secs: 60,
            replay: true,
            deadline_ms: 120_000,
        }
    }
}

/// A point in a paid call, reported to [`PaidContext::on_step`] (fault-injection tests kill the
/// process here; a CLI may show progress).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaidStep {
    /// An expired reservation was resolved during the opening reconciliation.
    Reconciled { id: i64 },
    /// The reservation is committed; nothing is signed yet.
    Reserved { id: i64 },
    /// The authorization is signed; nothing is sent yet.
    Signed { id: i64 },
    /// The paid request is about to be sent.
    Sending { id: i64 },
    /// The paid request's exchange is complete (response or failure).
    Responded { id: i64 },
    /// Chain reads, replay and refund watch are done; the reservation is updated.
    Verified { id: i64 },
}

/// What a paid call needs. The caller owns everything; nothing here outlives the call.
pub struct PaidContext<'a> {
    pub wallet: &'a Wallet,
    pub store: &'a SpendStore,
    pub policy: &'a PayPolicy,
    /// The fixed RPC every chain fact is read through.
    pub rpc: &'a Rpc,
    /// How endpoints are fetched (address guard, extra roots, caps); the paid request gets a
    /// longer first-byte timeout from `options`.
    pub fetch: &'a FetchConfig,
    pub options: PaidOptions,
    pub on_step: Option<&'a (dyn Fn(PaidStep) + Send + Sync)>,
}

impl PaidContext<'_> {
    fn step(&self, step: PaidStep) {
        if let Some(hook) = self.on_step {
            hook(step);
        }
    }
}

/// A chain read: its value, or why there is none. A failed read says nothing about the subject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "read", rename_all = "snake_case")]
pub enum ChainRead<T> {
    Read {
        value: T,
    },
    /// The RPC failed or answered nonsense.
    Failed {
        error: String,
    },
    /// Not attempted, with why.
    Skipped {
        why: String,
    },
}

impl<T> ChainRead<T> {
    pub fn value(&self) -> Option<&T> {
        match self {
            ChainRead::Read { value } => Some(value),
            _ => None,
        }
    }

    /// Why there is no value (None when there is one).
    pub fn missing_because(&self) -> Option<&str> {
        match self {
            ChainRead::Read { .. } => None,
            ChainRead::Failed { error } => Some(error),
            ChainRead::Skipped { why } => Some(why),
        }
    }

    fn skipped(why: impl Into<String>) -> Self {
        ChainRead::Skipped { why: why.into() }
    }

    fn from_result(result: Result<T, RpcError>) -> Self {
        match result {
            Ok(value) => ChainRead::Read { value },
            Err(e) => ChainRead::Failed {
                error: e.to_string(),
            },
        }
    }
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
    pub fn of(required: &PaymentRequired, requirement: &Requirement) -> QuoteSeen {
        QuoteSeen {
            x402_version: required.x402_version,
            index: requirement.index,
            entry: requirement.entry.clone(),
            resource: required.resource_raw.clone(),
            extensions: required.extensions.clone().map(Value::Object),
            scheme: requirement.scheme.clone(),
            network: requirement.network.clone(),
            asset: requirement.asset.clone(),
            pay_to: requirement.pay_to.clone(),
            amount: requirement.amount.clone(),
            max_timeout_seconds: requirement.max_timeout_seconds,
        }
    }

    pub fn asset_address(&self) -> Option<Address> {
        self.asset.as_deref().and_then(parse_address_any_case)
    }

    pub fn pay_to_address(&self) -> Option<Address> {
        self.pay_to.as_deref().and_then(parse_address_any_case)
    }
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

/// The reservation after the call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReservationSeen {
    pub id: i64,
    pub state: String,
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
}

impl PaidObservation {
    fn new(
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
        }
    }
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Pays `url` once (as quoted in `quote`, the 402 the caller saw for `request`), then verifies on
/// chain where the money went. Never panics; every failure and refusal is in the observation.
/// Holds the store's call lock throughout (see the module doc on attribution).
pub async fn paid_call(
    ctx: &PaidContext<'_>,
    url: &str,
    request: &FetchRequest,
    quote: &Parsed402,
) -> PaidObservation {
    let _one_at_a_time = ctx.store.lock_for_call().await;
    let mut obs = pay(ctx, url, request, quote).await;
    verify(ctx, &mut obs).await;
    obs
}

/// Steps 1-5: decide, reserve, sign and send. The caller must not run paid calls from the same
/// wallet at the same time ([`paid_call`] takes care of that).
pub async fn pay(
    ctx: &PaidContext<'_>,
    url: &str,
    request: &FetchRequest,
    quote: &Parsed402,
) -> PaidObservation {
    let started_at = now_unix();
    let mut obs = PaidObservation::new(
        url,
        request,
        ctx.wallet.address(),
        started_at,
        ctx.options.paid_timeout_ms,
    );

    let on_reconciled = |step: ReconcileStep| {
        let ReconcileStep::Resolved { id } = step;
        ctx.step(PaidStep::Reconciled { id });
    };
    match ctx
        .store
        .reconcile(ctx.rpc, started_at, Some(&on_reconciled))
        .await
    {
        Ok(report) => obs.reconciled = Some(report),
        Err(e) => obs
            .notes
            .push(format!("reconciling earlier reservations: {e}")),
    }

    // 2. Choose an entry the policy allows.
    let Some(required) = quote.required.as_ref().filter(|r| !r.accepts.is_empty()) else {
        let refusal = Refusal::new(
            RefusalCode::NoRequirements,
            "no payment requirements could be read from the 402",
        );
        return refuse(ctx, obs, vec![refusal], None);
    };
    let mut refusals = Vec::new();
    let mut chosen = None;
    for requirement in &required.accepts {
        match assess(ctx.policy, requirement) {
            Ok(_) => {
                chosen = Some(requirement);
                break;
            }
            Err(refusal) => refusals.push((refusal, requirement.entry.to_string())),
        }
    }
    let Some(requirement) = chosen else {
        // Every entry was declined: each refusal is recorded with the entry it declined.
        obs.quote = Some(QuoteSeen::of(required, &required.accepts[0]));
        let mut declined = Vec::with_capacity(refusals.len());
        for (refusal, entry) in refusals {
            obs = refuse(ctx, obs, vec![refusal.clone()], Some(entry));
            declined.push(refusal);
        }
        obs.decision = Decision::Refused { refusals: declined };
        return obs;
    };
    obs.quote = Some(QuoteSeen::of(required, requirement));

    // 3. The 402 again: the price must not have moved.
    let requote_exchange = fetch(&verified_fetch_config(ctx), request).await;
    let fresh = requote_exchange
        .response
        .as_ref()
        .map(|r| parse_payment_required(r.status, &r.headers, &r.body));
    let fresh_required = fresh.as_ref().and_then(|p| p.required.as_ref());
    let fresh_entry = fresh_required.and_then(|r| matching_entry(r, requirement));
    let changes = match fresh_entry {
        Some(entry) => quote_changes(requirement, entry),
        None => vec![match &requote_exchange.error {
            Some(e) if requote_exchange.response.is_none() => {
                format!("the 402 could not be fetched again: {e}")
            }
            _ => "the 402 fetched again no longer offers this entry (same scheme, network, asset and transfer method)".to_string(),
        }],
    };
    obs.requote = Some(RequoteSeen {
        exchange: requote_exchange.clone(),
        entry: match (fresh_required, fresh_entry) {
            (Some(r), Some(e)) => Some(QuoteSeen::of(r, e)),
            _ => None,
        },
        changes: changes.clone(),
    });
    let (Some(fresh_required), Some(fresh_entry)) = (fresh_required, fresh_entry) else {
        let refusal = Refusal::new(RefusalCode::QuoteChanged, changes.join("; "));
        return refuse(ctx, obs, vec![refusal], Some(requirement.entry.to_string()));
    };
    if !changes.is_empty() {
        let refusal = Refusal::new(
            RefusalCode::QuoteChanged,
            format!(
                "the 402 changed between the quote and the payment: {}",
                changes.join("; ")
            ),
        );
        return refuse(ctx, obs, vec![refusal], Some(fresh_entry.entry.to_string()));
    }
    let priced = match assess(ctx.policy, fresh_entry) {
        Ok(priced) => priced,
        Err(refusal) => {
            return refuse(ctx, obs, vec![refusal], Some(fresh_entry.entry.to_string()));
        }
    };
    obs.paid_entry = Some(QuoteSeen::of(fresh_required, fresh_entry));

    // 4. We pay only what we can verify: the RPC answers, on the quote's chain, and we can afford it.
    let rpc_refusal = |what: &str, e: RpcError| {
        Refusal::new(
            RefusalCode::RpcUnavailable,
            format!("{what}: {e}; a settlement could not be verified, so nothing is paid"),
        )
    };
    let chain_id = match ctx.rpc.chain_id().await {
        Ok(id) => id,
        Err(e) => {
            let refusal = rpc_refusal("reading the chain id", e);
            return refuse(ctx, obs, vec![refusal], Some(fresh_entry.entry.to_string()));
        }
    };
    if chain_id != priced.chain_id {
        let refusal = Refusal::new(
            RefusalCode::WrongChain,
            format!(
                "the RPC serves chain {chain_id}, the quote is on chain {}",
                priced.chain_id
            ),
        );
        return refuse(ctx, obs, vec![refusal], Some(fresh_entry.entry.to_string()));
    }
    let block_before = match ctx.rpc.block_number().await {
        Ok(block) => block,
        Err(e) => {
            let refusal = rpc_refusal("reading the block number", e);
            return refuse(ctx, obs, vec![refusal], Some(fresh_entry.entry.to_string()));
        }
    };
    match ctx.rpc.balance_of(priced.asset, ctx.wallet.address()).await {
        Ok(balance) if balance >= priced.amount => {}
        Ok(balance) => {
            let refusal = Refusal::new(
                RefusalCode::InsufficientFunds,
                format!(
                    "our wallet holds {balance} atomic units, the quote asks {}",
                    priced.amount
                ),
            );
            return refuse(ctx, obs, vec![refusal], Some(fresh_entry.entry.to_string()));
        }
        Err(e) => {
            let refusal = rpc_refusal("reading our balance", e);
            return refuse(ctx, obs, vec![refusal], Some(fresh_entry.entry.to_string()));
        }
    }

    // 5. Reserve (durably), sign that reservation, send.
    let reserve_request = ReserveRequest {
        subject: url,
        requirement: fresh_entry,
        payer: ctx.wallet.address(),
        from_block: Some(block_before),
    };
    let reservation = match ctx.store.reserve(ctx.policy, &reserve_request, now_unix()) {
        Ok(reservation) => reservation,
        Err(ReserveError::Refused(refusal)) => {
            obs.decision = Decision::Refused {
                refusals: vec![refusal],
            };
            return obs;
        }
        Err(ReserveError::Store(e)) => {
            obs.decision = Decision::Failed {
                stage: "reserve".into(),
                error: e.to_string(),
            };
            return obs;
        }
    };
    let id = reservation.id();
    ctx.step(PaidStep::Reserved { id });
    let signed = match ctx.wallet.sign(&reservation) {
        Ok(signed) => signed,
        Err(e) => {
            release_unsent(ctx, &mut obs, reservation, &format!("signing failed: {e}"));
            obs.decision = Decision::Failed {
                stage: "sign".into(),
                error: e.to_string(),
            };
            return obs;
        }
    };
    ctx.step(PaidStep::Signed { id });
    let header = match build_payment_header(
        fresh_required,
        fresh_entry,
        &signed.authorization,
        &signed.signature,
    ) {
        Ok(header) => header,
        Err(e) => {
            release_unsent(
                ctx,
                &mut obs,
                reservation,
                &format!("building the header: {e}"),
            );
            obs.decision = Decision::Failed {
                stage: "payment header".into(),
                error: e.to_string(),
            };
            return obs;
        }
    };
    let a = &signed.authorization;
    obs.payment = Some(PaymentSent {
        reservation_id: id,
        cost_usd: reservation.cost(),
        authorization: AuthorizationSeen {
            from: a.from,
            to: a.to,
            value: a.value.to_string(),
            valid_after: a.valid_after,
            valid_before: a.valid_before,
            nonce: a.nonce,
        },
        domain_name: signed.domain.name.clone(),
        domain_version: signed.domain.version.clone(),
        chain_id: signed.domain.chain_id,
        asset: signed.domain.verifying_contract,
        signature: format!("0x{}", hex::encode(signed.signature)),
        header_name: header.name.to_string(),
        header_value: header.value.clone(),
        sent_at: now_unix(),
    });
    obs.decision = Decision::Paid { reservation_id: id };
    obs.chain = Some(PaidChainSeen {
        rpc_url: ctx.rpc.url().to_string(),
        chain_id: ChainRead::Read { value: chain_id },
        block_before: ChainRead::Read {
            value: block_before,
        },
        block_after: ChainRead::skipped("not read yet"),
        claimed_receipt: ChainRead::skipped("not read yet"),
        authorizations_used: ChainRead::skipped("not read yet"),
        nonce_receipt: ChainRead::skipped("not read yet"),
        authorization_state: ChainRead::skipped("not read yet"),
        transfers_from_wallet: ChainRead::skipped("not read yet"),
        confirmations_required: ctx.options.confirmations,
        settlement_depth: None,
    });

    let paid_request = request.clone().with_header(header.name, header.value);
    ctx.step(PaidStep::Sending { id });
    let exchange = fetch(&paid_fetch_config(ctx), &paid_request).await;
    ctx.step(PaidStep::Responded { id });
    if never_sent(&exchange) {
        let why = exchange
            .error
            .as_ref()
            .map(|e| e.to_string())
            .unwrap_or_default();
        release_unsent(ctx, &mut obs, reservation, &why);
    }
    obs.settlement = settlement_of(&exchange);
    obs.paid = Some(exchange);
    obs
}

/// Steps 6-7: read the chain, replay, watch for a refund, and update the reservation. Does nothing
/// when nothing was paid.
pub async fn verify(ctx: &PaidContext<'_>, obs: &mut PaidObservation) {
    let Some(payment) = obs.payment.clone() else {
        return;
    };
    read_chain(ctx, obs, &payment).await;
    replay(ctx, obs, &payment).await;
    watch_refund(ctx, obs, &payment).await;
    update_reservation(ctx, obs, &payment).await;
    ctx.step(PaidStep::Verified {
        id: payment.reservation_id,
    });
}

fn refuse(
    ctx: &PaidContext<'_>,
    mut obs: PaidObservation,
    refusals: Vec<Refusal>,
    requirement_json: Option<String>,
) -> PaidObservation {
    let now = now_unix();
    for refusal in &refusals {
        if let Err(e) =
            ctx.store
                .record_refusal(&obs.subject, refusal, requirement_json.as_deref(), now)
        {
            obs.notes.push(format!("recording a refusal: {e}"));
        }
    }
    obs.decision = Decision::Refused { refusals };
    obs
}

fn release_unsent(
    ctx: &PaidContext<'_>,
    obs: &mut PaidObservation,
    reservation: crate::spend::Reservation,
    why: &str,
) {
    if let Err(e) = ctx.store.release_unsent(reservation, why, now_unix()) {
        obs.notes.push(format!(
            "releasing an unsent reservation failed (it stays open and counted): {e}"
        ));
    }
}

/// The fetch settings for the quote we pay from: the endpoint's own, except that an unverified TLS
/// chain always stops the exchange (a caller observing invalid TLS for S1 must not pay through it:
/// whoever sits in the middle could take the signed authorization and never deliver).
fn verified_fetch_config(ctx: &PaidContext<'_>) -> FetchConfig {
    let mut cfg = ctx.fetch.clone();
    cfg.observe_invalid_tls = false;
    cfg
}

/// The fetch settings for the paid request: as for the quote, with room for settlement.
fn paid_fetch_config(ctx: &PaidContext<'_>) -> FetchConfig {
    let mut cfg = verified_fetch_config(ctx);
    cfg.timeouts.first_byte_ms = ctx.options.paid_timeout_ms;
    cfg.timeouts.overall_ms = ctx
        .options
        .paid_timeout_ms
        .saturating_add(cfg.timeouts.body_ms)
        .saturating_add(cfg.timeouts.connect_ms)
        .saturating_add(cfg.timeouts.tls_ms)
        .saturating_add(cfg.timeouts.dns_ms);
    cfg
}

/// Whether the payment header certainly never left this process: the first hop failed before any
/// request byte could be written (name, address guard, connect, TLS), and no hop got a response.
fn never_sent(exchange: &Exchange) -> bool {
    let Some(error) = &exchange.error else {
        return false;
    };
    let early = matches!(
        error.phase,
        Phase::Dns | Phase::Guard | Phase::Connect | Phase::Tls
    ) || (error.phase == Phase::Request && error.kind == FetchErrorKind::BadUrl);
    early && exchange.response.is_none() && exchange.hops.iter().all(|h| h.status.is_none())
}

/// The entry of a fresh PaymentRequired that stands for the quoted one: same scheme, network,
/// asset (any case) and transfer method.
fn matching_entry<'a>(fresh: &'a PaymentRequired, quoted: &Requirement) -> Option<&'a Requirement> {
    fresh.accepts.iter().find(|e| {
        e.scheme == quoted.scheme
            && e.network == quoted.network
            && e.asset_address().is_some()
            && e.asset_address() == quoted.asset_address()
            && e.asset_transfer_method == quoted.asset_transfer_method
    })
}

/// What changed between the quote and the fresh entry, among what a payment depends on.
fn quote_changes(quoted: &Requirement, fresh: &Requirement) -> Vec<String> {
    let mut changes = Vec::new();
    let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(missing)".into());
    if quoted.amount != fresh.amount {
        changes.push(format!(
            "amount {} -> {}",
            show(&quoted.amount),
            show(&fresh.amount)
        ));
    }
    if quoted.pay_to_address() != fresh.pay_to_address() || quoted.pay_to_address().is_none() {
        changes.push(format!(
            "payTo {} -> {}",
            show(&quoted.pay_to),
            show(&fresh.pay_to)
        ));
    }
    changes
}

/// Polls for a receipt until it appears or `wait_ms` passes.
async fn wait_receipt(ctx: &PaidContext<'_>, tx: B256) -> Result<Option<TxReceipt>, RpcError> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(ctx.options.receipt_wait_ms);
    loop {
        if let Some(receipt) = ctx.rpc.receipt(tx).await? {
            return Ok(Some(receipt));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(ctx.options.poll_interval_ms)).await;
    }
}

/// Logs over an inclusive block range; an empty range reads nothing.
async fn logs_between(
    rpc: &Rpc,
    asset: Address,
    topics: &[Option<B256>],
    from_block: u64,
    to_block: u64,
) -> Result<Vec<LogEntry>, RpcError> {
    if from_block > to_block {
        return Ok(Vec::new());
    }
    rpc.logs(asset, topics, from_block, to_block).await
}

/// A block's timestamp (unix seconds).
pub async fn block_timestamp(rpc: &Rpc, block: u64) -> Result<u64, RpcError> {
    let v = rpc
        .call(
            "eth_getBlockByNumber",
            json!([format!("0x{block:x}"), false]),
        )
        .await?;
    v.get("timestamp")
        .and_then(Value::as_str)
        .and_then(|s| u64::from_str_radix(s.strip_prefix("0x")?, 16).ok())
        .ok_or_else(|| RpcError::BadResponse {
            method: "eth_getBlockByNumber".into(),
            message: format!("block {block} has no readable timestamp"),
        })
}

/// Step 6a: where did the money go.
async fn read_chain(ctx: &PaidContext<'_>, obs: &mut PaidObservation, payment: &PaymentSent) {
    let Some(mut chain) = obs.chain.take() else {
        return;
    };
    let wallet = obs.wallet;
    let asset = payment.asset;
    let nonce = payment.authorization.nonce;
    let Some(block_before) = chain.block_before.value().copied() else {
        obs.chain = Some(chain);
        return;
    };

    chain.claimed_receipt = match obs.settlement.as_ref().and_then(|s| s.transaction_hash()) {
        Some(tx) => ChainRead::from_result(wait_receipt(ctx, tx).await),
        None => ChainRead::skipped("the settlement response names no transaction"),
    };

    let mut depth_waited = false;
    loop {
        let block_after = ctx.rpc.block_number().await;
        chain.block_after = ChainRead::from_result(block_after.clone());
        let Ok(block_after) = block_after else {
            let why = "the block number after the call could not be read";
            chain.authorizations_used = ChainRead::skipped(why);
            chain.nonce_receipt = ChainRead::skipped(why);
            chain.transfers_from_wallet = ChainRead::skipped(why);
            chain.authorization_state =
                ChainRead::from_result(ctx.rpc.authorization_state(asset, wallet, nonce).await);
            break;
        };
        let used_topics = [Some(AUTHORIZATION_USED_TOPIC), Some(wallet.into_word())];
        chain.authorizations_used = ChainRead::from_result(
            logs_between(ctx.rpc, asset, &used_topics, block_before + 1, block_after).await,
        );
        let nonce_tx = chain.authorizations_used.value().and_then(|logs| {
            logs.iter()
                .find(|l| l.topics.get(2) == Some(&nonce))
                .and_then(|l| l.transaction_hash)
        });
        chain.nonce_receipt = match (&chain.authorizations_used, nonce_tx) {
            (ChainRead::Read { .. }, Some(tx)) => ChainRead::from_result(ctx.rpc.receipt(tx).await),
            (ChainRead::Read { .. }, None) => ChainRead::Read { value: None },
            (other, _) => ChainRead::skipped(format!(
                "AuthorizationUsed logs unread: {}",
                other.missing_because().unwrap_or("")
            )),
        };
        chain.authorization_state =
            ChainRead::from_result(ctx.rpc.authorization_state(asset, wallet, nonce).await);
        let transfer_topics = [Some(TRANSFER_TOPIC), Some(wallet.into_word())];
        chain.transfers_from_wallet = ChainRead::from_result(
            logs_between(
                ctx.rpc,
                asset,
                &transfer_topics,
                block_before + 1,
                block_after,
            )
            .await,
        );

        // The settlement's block, by the strongest evidence available.
        let settlement_block = chain
            .nonce_receipt
            .value()
            .and_then(|r| r.as_ref().map(|r| r.block_number))
            .or_else(|| {
                chain
                    .claimed_receipt
                    .value()
                    .and_then(|r| r.as_ref().map(|r| r.block_number))
            });
        chain.settlement_depth =
            settlement_block.map(|b| block_after.saturating_sub(b).saturating_add(1));
        let needed = ctx.options.confirmations;
        let shallow = matches!(chain.settlement_depth, Some(depth) if depth < needed);
        if !shallow || depth_waited {
            break;
        }
        // Wait for the confirmations, then read everything again at that depth.
        depth_waited = true;
        if let Some(block) = settlement_block {
            let target = block.saturating_add(needed.saturating_sub(1));
            let deadline =
                tokio::time::Instant::now() + Duration::from_millis(ctx.options.receipt_wait_ms);
            while tokio::time::Instant::now() < deadline {
                match ctx.rpc.block_number().await {
                    Ok(latest) if latest >= target => break,
                    Ok(_) => {}
                    Err(_) => break,
                }
                tokio::time::sleep(Duration::from_millis(ctx.options.poll_interval_ms)).await;
            }
        }
    }
    obs.chain = Some(chain);
}

/// Step 6b: send the same payment again, only once our authorization is spent on chain (so an
/// honest token cannot move money for it again), and see whether any more money left.
async fn replay(ctx: &PaidContext<'_>, obs: &mut PaidObservation, payment: &PaymentSent) {
    let Some(chain) = obs.chain.as_ref() else {
        return;
    };
    let skip = |why: &str| ReplaySeen {
        exchange: None,
        skipped: Some(why.to_string()),
        block_after: ChainRead::skipped(why),
        transfers_after: ChainRead::skipped(why),
        authorizations_used_after: ChainRead::skipped(why),
    };
    let why_not = if !ctx.options.replay {
        Some("replay disabled")
    } else if obs.paid.is_none() {
        Some("the paid request was not sent")
    } else {
        match chain.authorization_state.value() {
            Some(true) => None,
            Some(false) => Some(
                "our authorization is not spent on chain: a replay could be its first use, so it is not sent",
            ),
            None => Some("authorizationState could not be read"),
        }
    };
    let first_window_end = chain.block_after.value().copied();
    let (None, Some(first_window_end)) = (why_not, first_window_end) else {
        obs.replay = Some(skip(
            why_not.unwrap_or("the chain could not be read after the call"),
        ));
        return;
    };
    let request = obs
        .request
        .clone()
        .with_header(payment.header_name.clone(), payment.header_value.clone());
    let exchange = fetch(&paid_fetch_config(ctx), &request).await;
    let block_after = ctx.rpc.block_number().await;
    let (transfers_after, authorizations_used_after) = match &block_after {
        Ok(to) => {
            let wallet = obs.wallet.into_word();
            let transfers = logs_between(
                ctx.rpc,
                payment.asset,
                &[Some(TRANSFER_TOPIC), Some(wallet)],
                first_window_end + 1,
                *to,
            )
            .await;
            let used = logs_between(
                ctx.rpc,
                payment.asset,
                &[Some(AUTHORIZATION_USED_TOPIC), Some(wallet)],
                first_window_end + 1,
                *to,
            )
            .await;
            (
                ChainRead::from_result(transfers),
                ChainRead::from_result(used),
            )
        }
        Err(e) => (
            ChainRead::skipped(format!("block number unread: {e}")),
            ChainRead::skipped(format!("block number unread: {e}")),
        ),
    };
    obs.replay = Some(ReplaySeen {
        exchange: Some(exchange),
        skipped: None,
        block_after: ChainRead::from_result(block_after),
        transfers_after,
        authorizations_used_after,
    });
}

/// Step 6c: when the operator declares a refund rule and we were charged without delivery, watch
/// the chain for the refund until the declared window ends (at most `refund_watch_max_secs`).
async fn watch_refund(ctx: &PaidContext<'_>, obs: &mut PaidObservation, payment: &PaymentSent) {
    let facts = chain_facts(obs);
    let skipped = |why: String| RefundSeen {
        skipped: Some(why),
        operator_exchange: None,
        operator: None,
        watch: None,
    };
    let delivered = delivery(obs);
    let charge = match (&facts.charge, &delivered) {
        (_, Delivery::Delivered(_)) => {
            obs.refund = Some(skipped(
                "the output was delivered: nothing to refund".into(),
            ));
            return;
        }
        (Err(why), _) => {
            obs.refund = Some(skipped(format!(
                "whether we were charged is unknown: {why}"
            )));
            return;
        }
        (Ok(None), _) => {
            obs.refund = Some(skipped("we were not charged: nothing to refund".into()));
            return;
        }
        (Ok(Some(charge)), _) => charge.clone(),
    };

    let mut seen = RefundSeen {
        skipped: None,
        operator_exchange: None,
        operator: None,
        watch: None,
    };
    let origin = match Target::parse(&obs.subject) {
        Ok(target) => target.origin(),
        Err(e) => {
            seen.operator = Some(OperatorFileSeen::Unreadable {
                why: format!("the subject URL has no origin: {e}"),
            });
            obs.refund = Some(seen);
            return;
        }
    };
    let exchange = fetch(
        ctx.fetch,
        &FetchRequest::get(format!("{origin}{OPERATOR_FILE_PATH}")),
    )
    .await;
    let operator = match exchange.response.as_ref() {
        Some(r) if r.status == 200 && !r.body_truncated => match parse_operator_file(&r.body) {
            Ok(file) => OperatorFileSeen::Read { file },
            Err(why) => OperatorFileSeen::Malformed { why },
        },
        Some(r) if r.status == 404 || r.status == 410 => {
            OperatorFileSeen::Absent { status: r.status }
        }
        Some(r) => OperatorFileSeen::Unreadable {
            why: format!("HTTP {}", r.status),
        },
        None => OperatorFileSeen::Unreadable {
            why: exchange
                .error
                .as_ref()
                .map(|e| e.to_string())
                .unwrap_or_else(|| "no response".into()),
        },
    };
    seen.operator_exchange = Some(exchange);
    seen.operator = Some(operator.clone());
    let OperatorFileSeen::Read { file } = operator else {
        obs.refund = Some(seen);
        return;
    };
    let rule = file.refund.clone();
    let Some(rule) = rule else {
        seen.skipped = Some("the operator file declares no refund rule".into());
        obs.refund = Some(seen);
        return;
    };

    let wallet = obs.wallet.into_word();
    let charge_time = ChainRead::from_result(block_timestamp(ctx.rpc, charge.block).await);
    let start = charge_time
        .value()
        .and_then(|t| i64::try_from(*t).ok())
        .unwrap_or(payment.sent_at);
    let window_end = start.saturating_add(i64::try_from(rule.within_seconds).unwrap_or(i64::MAX));
    let started_at = now_unix();
    let bound = started_at
        .saturating_add(i64::try_from(ctx.options.refund_watch_max_secs).unwrap_or(i64::MAX));
    let until = window_end.min(bound);
    let mut transfers: ChainRead<Vec<LogEntry>> = ChainRead::skipped("not read");
    let mut refunded = false;
    let last_block = loop {
        let latest = ctx.rpc.block_number().await;
        let last_block = ChainRead::from_result(latest.clone());
        if let Ok(latest) = latest {
            let read = logs_between(
                ctx.rpc,
                payment.asset,
                &[Some(TRANSFER_TOPIC), None, Some(wallet)],
                charge.block,
                latest,
            )
            .await;
            transfers = ChainRead::from_result(read);
            if let Some(logs) = transfers.value() {
                refunded = refund_received(logs, obs, &file, &charge, payment.asset);
            }
        }
        if refunded || now_unix() >= until {
            break last_block;
        }
        tokio::time::sleep(Duration::from_millis(ctx.options.poll_interval_ms)).await;
    };
    let ended_at = now_unix();
    let transfers_to_wallet = match transfers {
        ChainRead::Read { value } => {
            let mut with_times = Vec::with_capacity(value.len());
            for log in value {
                let block_timestamp = match log.block_number {
                    Some(b) => ChainRead::from_result(block_timestamp(ctx.rpc, b).await),
                    None => ChainRead::skipped("the log has no block number"),
                };
                with_times.push(RefundTransfer {
                    log,
                    block_timestamp,
                });
            }
            ChainRead::Read { value: with_times }
        }
        ChainRead::Failed { error } => ChainRead::Failed { error },
        ChainRead::Skipped { why } => ChainRead::Skipped { why },
    };
    seen.watch = Some(RefundWatch {
        charge_block: charge.block,
        charge_time,
        window_end,
        started_at,
        ended_at,
        last_block,
        transfers_to_wallet,
        complete: refunded || ended_at >= window_end,
    });
    obs.refund = Some(seen);
}

/// Step 7: the reservation's fate, from what the chain showed. Settled when our authorization is
/// spent; released only when it provably never can be (unused after `validBefore` by our clock and
/// the chain's); otherwise left open for a later reconciliation.
async fn update_reservation(
    ctx: &PaidContext<'_>,
    obs: &mut PaidObservation,
    payment: &PaymentSent,
) {
    let id = payment.reservation_id;
    let now = now_unix();
    let state = obs
        .chain
        .as_ref()
        .and_then(|c| c.authorization_state.value().copied());
    let nonce_tx = obs.chain.as_ref().and_then(|c| {
        c.nonce_receipt
            .value()
            .and_then(|r| r.as_ref().map(|r| r.transaction_hash))
    });
    let result = match state {
        Some(true) => {
            let why = match nonce_tx {
                Some(_) => "our authorization was used on chain (AuthorizationUsed located)",
                None => "authorizationState is used; the transaction was not located",
            };
            ctx.store.mark_settled(id, nonce_tx, why, now).map(|_| ())
        }
        Some(false)
            if now >= i64::try_from(payment.authorization.valid_before).unwrap_or(i64::MAX) =>
        {
            match ctx.rpc.latest_timestamp().await {
                Ok(chain_time) if chain_time >= payment.authorization.valid_before => ctx
                    .store
                    .mark_released(
                        id,
                        "unused on chain after validBefore: it can never be used",
                        now,
                    )
                    .map(|_| ()),
                _ => Ok(()),
            }
        }
        _ => Ok(()),
    };
    if let Err(e) = result {
        obs.notes.push(format!("updating reservation {id}: {e}"));
    }
    match ctx.store.reservation(id) {
        Ok(Some(row)) => {
            obs.reservation = Some(ReservationSeen {
                id,
                state: row.state.as_str().to_string(),
                resolution: row.resolution,
            });
        }
        Ok(None) => obs
            .notes
            .push(format!("reservation {id} is missing from the store")),
        Err(e) => obs.notes.push(format!("reading reservation {id}: {e}")),
    }
}
