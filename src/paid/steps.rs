//! The paid call's decisions, one pure function per step. Each takes what the IO before it
//! returned and says what happens next; `probe::paid` is the thin driver that does the IO between
//! them (quote, decide, reserve, sign, send, verify on chain, replay, reservation), in the sans-IO
//! spirit: every rule about money can be tested here without a socket or a chain.

use alloy::primitives::{B256, U256};
use serde_json::Value;

use crate::evidence::chain::{ChainRead, TxReceipt};
use crate::evidence::http::FetchRequest;
use crate::evidence::http::{Exchange, FetchErrorKind, Phase};
use crate::evidence::paid::{
    AuthorizationSeen, PaidChainSeen, PaidObservation, PaymentCarrier, PaymentSent, QuoteSeen,
    Refusal, RefusalCode, RequoteSeen, SettlementSeen,
};
use crate::evidence::usd::Usd;
use crate::spend::{PayPolicy, Priced, PricedSvm, assess, assess_svm};
use crate::x402::parse::parse_payment_required;
use crate::x402::parse::parse_settlement_response;
use crate::x402::solana::{SolanaAddress, SolanaNetwork};
use crate::x402::types::{Parsed402, PaymentRequired, Requirement};

/// One `accepts` entry as quoted, with the parts of its PaymentRequired the checks need.
pub fn quote_seen(required: &PaymentRequired, requirement: &Requirement) -> QuoteSeen {
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

/// A refusal with the raw JSON of the entry it declined (kept in the spend store's refusal log).
#[derive(Debug, Clone, PartialEq)]
pub struct Declined {
    pub refusal: Refusal,
    pub entry_json: Option<String>,
}

impl Declined {
    pub fn new(refusal: Refusal, entry: Option<&Requirement>) -> Declined {
        Declined {
            refusal,
            entry_json: entry.map(|e| e.entry.to_string()),
        }
    }
}

/// Step 2: which `accepts` entry to pay.
#[derive(Debug)]
pub enum Choice<'q> {
    /// The first entry the policy allows; `svm`: a Solana entry (paid by the Solana wallet).
    Pay {
        required: &'q PaymentRequired,
        requirement: &'q Requirement,
        svm: bool,
    },
    /// Nothing to pay: every entry declined (each with its own refusal), or no entries at all.
    /// `quote` is the first entry, shown in the observation.
    Refuse {
        quote: Option<Box<QuoteSeen>>,
        declined: Vec<Declined>,
    },
}

/// Whether an entry names a Solana cluster (so the exact SVM scheme's rules and wallet apply).
pub fn is_svm_entry(requirement: &Requirement) -> bool {
    requirement
        .network
        .as_deref()
        .is_some_and(|n| n.starts_with("solana"))
}

/// The first entry the policy allows. A Solana entry is judged by the Solana rules
/// (`assess_svm`), and only when a Solana wallet can pay it (`svm_wallet`).
pub fn choose<'q>(policy: &PayPolicy, quote: &'q Parsed402, svm_wallet: bool) -> Choice<'q> {
    let Some(required) = quote.required.as_ref().filter(|r| !r.accepts.is_empty()) else {
        let refusal = Refusal::new(
            RefusalCode::NoRequirements,
            "no payment requirements could be read from the 402",
        );
        return Choice::Refuse {
            quote: None,
            declined: vec![Declined::new(refusal, None)],
        };
    };
    let mut declined = Vec::new();
    for requirement in &required.accepts {
        let svm = is_svm_entry(requirement);
        let judged = match (svm, svm_wallet) {
            (false, _) => assess(policy, requirement).map(|_| ()),
            (true, true) => assess_svm(policy, requirement).map(|_| ()),
            (true, false) => Err(Refusal::new(
                RefusalCode::NetworkNotAllowed,
                format!(
                    "network {} is Solana and no Solana wallet is configured ([pay] solana_wallet)",
                    requirement.network.as_deref().unwrap_or_default()
                ),
            )),
        };
        match judged {
            Ok(()) => {
                return Choice::Pay {
                    required,
                    requirement,
                    svm,
                };
            }
            Err(refusal) => declined.push(Declined::new(refusal, Some(requirement))),
        }
    }
    Choice::Refuse {
        quote: Some(Box::new(quote_seen(required, &required.accepts[0]))),
        declined,
    }
}

/// The entry of a fresh PaymentRequired that stands for the quoted one: same scheme, network,
/// asset (any case) and transfer method.
pub fn matching_entry<'a>(
    fresh: &'a PaymentRequired,
    quoted: &Requirement,
) -> Option<&'a Requirement> {
    fresh.accepts.iter().find(|e| {
        e.scheme == quoted.scheme
            && e.network == quoted.network
            && same_address(e, quoted, e.asset_address(), quoted.asset_address(), |r| {
                r.asset.as_deref()
            })
            && e.asset_transfer_method == quoted.asset_transfer_method
    })
}

/// Whether two entries name the same address: both EVM addresses and equal (any case), or, on a
/// Solana cluster, both base58 addresses of 32 bytes and the same text.
fn same_address(
    a: &Requirement,
    b: &Requirement,
    a_evm: Option<alloy::primitives::Address>,
    b_evm: Option<alloy::primitives::Address>,
    field: for<'r> fn(&'r Requirement) -> Option<&'r str>,
) -> bool {
    if a_evm.is_some() {
        return a_evm == b_evm;
    }
    fn solana<'r>(
        r: &'r Requirement,
        field: fn(&'r Requirement) -> Option<&'r str>,
    ) -> Option<&'r str> {
        r.network
            .as_deref()
            .and_then(SolanaNetwork::from_network)
            .and(field(r))
            .filter(|text| SolanaAddress::parse(text).is_ok())
    }
    matches!((solana(a, field), solana(b, field)), (Some(x), Some(y)) if x == y)
}

/// What changed between the quote and the fresh entry, among what a payment depends on.
pub fn quote_changes(quoted: &Requirement, fresh: &Requirement) -> Vec<String> {
    let mut changes = Vec::new();
    let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(missing)".into());
    if quoted.amount != fresh.amount {
        changes.push(format!(
            "amount {} -> {}",
            show(&quoted.amount),
            show(&fresh.amount)
        ));
    }
    if !same_address(
        quoted,
        fresh,
        quoted.pay_to_address(),
        fresh.pay_to_address(),
        |r| r.pay_to.as_deref(),
    ) {
        changes.push(format!(
            "payTo {} -> {}",
            show(&quoted.pay_to),
            show(&fresh.pay_to)
        ));
    }
    changes
}

/// The entry that will be paid, from the 402 fetched again, priced by the policy.
#[derive(Debug)]
pub struct Fresh<'f> {
    pub required: &'f PaymentRequired,
    pub requirement: &'f Requirement,
    pub priced: Priced,
}

/// Step 3: the 402 fetched again just before paying must offer the quoted entry unchanged (price,
/// payTo), and that entry must still pass the policy. `fresh` is the parse of `exchange`'s response.
pub fn judge_requote<'f>(
    policy: &PayPolicy,
    quoted: &Requirement,
    exchange: &Exchange,
    fresh: Option<&'f Parsed402>,
) -> (RequoteSeen, Result<Fresh<'f>, Declined>) {
    let (seen, judged) = judge_requote_with(quoted, exchange, fresh, |r| assess(policy, r));
    let judged = judged.map(|(required, requirement, priced)| Fresh {
        required,
        requirement,
        priced,
    });
    (seen, judged)
}

/// Step 3 for a Solana entry: the same rule, the entry priced by the Solana rules.
#[allow(clippy::type_complexity)]
pub fn judge_requote_svm<'f>(
    policy: &PayPolicy,
    quoted: &Requirement,
    exchange: &Exchange,
    fresh: Option<&'f Parsed402>,
) -> (
    RequoteSeen,
    Result<(&'f PaymentRequired, &'f Requirement, PricedSvm), Declined>,
) {
    judge_requote_with(quoted, exchange, fresh, |r| assess_svm(policy, r))
}

#[allow(clippy::type_complexity)]
fn judge_requote_with<'f, P>(
    quoted: &Requirement,
    exchange: &Exchange,
    fresh: Option<&'f Parsed402>,
    assess: impl FnOnce(&Requirement) -> Result<P, Refusal>,
) -> (
    RequoteSeen,
    Result<(&'f PaymentRequired, &'f Requirement, P), Declined>,
) {
    let fresh_required = fresh.and_then(|p| p.required.as_ref());
    let fresh_entry = fresh_required.and_then(|r| matching_entry(r, quoted));
    let changes = match fresh_entry {
        Some(entry) => quote_changes(quoted, entry),
        None => vec![match &exchange.error {
            Some(e) if exchange.response.is_none() => {
                format!("the 402 could not be fetched again: {e}")
            }
            _ => "the 402 fetched again no longer offers this entry (same scheme, network, asset and transfer method)".to_string(),
        }],
    };
    let seen = RequoteSeen {
        exchange: exchange.clone(),
        entry: match (fresh_required, fresh_entry) {
            (Some(r), Some(e)) => Some(quote_seen(r, e)),
            _ => None,
        },
        changes: changes.clone(),
    };
    let (Some(required), Some(requirement)) = (fresh_required, fresh_entry) else {
        let refusal = Refusal::new(RefusalCode::QuoteChanged, changes.join("; "));
        return (seen, Err(Declined::new(refusal, Some(quoted))));
    };
    if !changes.is_empty() {
        let refusal = Refusal::new(
            RefusalCode::QuoteChanged,
            format!(
                "the 402 changed between the quote and the payment: {}",
                changes.join("; ")
            ),
        );
        return (seen, Err(Declined::new(refusal, Some(requirement))));
    }
    match assess(requirement) {
        Ok(priced) => (seen, Ok((required, requirement, priced))),
        Err(refusal) => (seen, Err(Declined::new(refusal, Some(requirement)))),
    }
}

/// Step 4: we pay only what we can verify: the RPC answers, on the quote's chain, and our wallet
/// holds the quoted amount. Returns the block before the payment (the chain reads start after it).
pub fn judge_chain<E: std::fmt::Display>(
    priced: &Priced,
    chain_id: Result<u64, E>,
    block: Result<u64, E>,
    balance: Result<U256, E>,
) -> Result<u64, Refusal> {
    let unavailable = |what: &str, e: E| {
        Refusal::new(
            RefusalCode::RpcUnavailable,
            format!("{what}: {e}; a settlement could not be verified, so nothing is paid"),
        )
    };
    let chain_id = chain_id.map_err(|e| unavailable("reading the chain id", e))?;
    if chain_id != priced.chain_id {
        return Err(Refusal::new(
            RefusalCode::WrongChain,
            format!(
                "the RPC serves chain {chain_id}, the quote is on chain {}",
                priced.chain_id
            ),
        ));
    }
    let block = block.map_err(|e| unavailable("reading the block number", e))?;
    let balance = balance.map_err(|e| unavailable("reading our balance", e))?;
    if balance < priced.amount {
        return Err(Refusal::new(
            RefusalCode::InsufficientFunds,
            format!(
                "our wallet holds {balance} atomic units, the quote asks {}",
                priced.amount
            ),
        ));
    }
    Ok(block)
}

/// What the wallet signed, as the record of the payment.
#[derive(Debug, Clone)]
pub struct Signed<'a> {
    pub reservation_id: i64,
    pub cost: Usd,
    pub authorization: &'a crate::x402::eip712::Authorization,
    pub domain: &'a crate::x402::eip712::TokenDomain,
    pub signature: &'a [u8],
    pub header_name: &'a str,
    pub header_value: &'a str,
    pub payment_id: Option<&'a str>,
}

/// Step 5: the record of what is about to be sent (public once sent).
pub fn payment_sent(signed: &Signed<'_>, sent_at: i64) -> PaymentSent {
    let a = signed.authorization;
    PaymentSent {
        reservation_id: signed.reservation_id,
        cost_usd: signed.cost,
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
        header_name: signed.header_name.to_string(),
        header_value: signed.header_value.to_string(),
        sent_at,
        payment_id: signed.payment_id.map(str::to_string),
    }
}

/// The chain reads of a call before they are made: what is known at sending time.
pub fn chain_before(
    rpc_url: &str,
    chain_id: u64,
    block_before: u64,
    confirmations: u64,
) -> PaidChainSeen {
    const UNREAD: &str = "not read yet";
    PaidChainSeen {
        rpc_url: rpc_url.to_string(),
        chain_id: ChainRead::Read { value: chain_id },
        block_before: ChainRead::Read {
            value: block_before,
        },
        block_after: ChainRead::skipped(UNREAD),
        claimed_receipt: ChainRead::skipped(UNREAD),
        authorizations_used: ChainRead::skipped(UNREAD),
        nonce_receipt: ChainRead::skipped(UNREAD),
        authorization_state: ChainRead::skipped(UNREAD),
        transfers_from_wallet: ChainRead::skipped(UNREAD),
        confirmations_required: confirmations,
        settlement_depth: None,
    }
}

/// Whether the payment header certainly never left this process: the first hop failed before any
/// request byte could be written (name, address guard, connect, TLS), and no hop got a response.
/// Only then may the reservation be released at once.
pub fn never_sent(exchange: &Exchange) -> bool {
    let Some(error) = &exchange.error else {
        return false;
    };
    let early = matches!(
        error.phase,
        Phase::Dns | Phase::Guard | Phase::Connect | Phase::Tls
    ) || (error.phase == Phase::Request && error.kind == FetchErrorKind::BadUrl);
    early && exchange.response.is_none() && exchange.hops.iter().all(|h| h.status.is_none())
}

/// A quote fetched again (step 3) read by its carrier's rules: a 402 over HTTP, the tool's
/// PaymentRequired over MCP (`request`: the unpaid `tools/call` sent).
pub fn requote_parsed(
    carrier: PaymentCarrier,
    request: &FetchRequest,
    exchange: &Exchange,
) -> Option<Parsed402> {
    let r = exchange.response.as_ref()?;
    Some(match carrier {
        PaymentCarrier::Http => parse_payment_required(r.status, &r.headers, &r.body),
        PaymentCarrier::McpTool => crate::x402::mcp::parse_tool_response(&request.body, r),
    })
}

/// The paid request: `request` with the payment (the header we built, `header_name:
/// header_value`) where its carrier puts it: the header itself over HTTP; over MCP the header's
/// JSON in `params._meta["x402/payment"]` of the `tools/call`. `Err` when it cannot be built
/// (then nothing is sent).
pub fn paid_request(
    carrier: PaymentCarrier,
    request: &FetchRequest,
    header_name: &str,
    header_value: &str,
) -> Result<FetchRequest, String> {
    match carrier {
        PaymentCarrier::Http => Ok(request
            .clone()
            .with_header(header_name.to_string(), header_value.to_string())),
        PaymentCarrier::McpTool => {
            let payload = crate::x402::payload::decode_payment_header(header_value)
                .map_err(|d| format!("our own payment did not decode: {d}"))?;
            let body = crate::x402::mcp::with_payment(&request.body, &payload)
                .ok_or("the tools/call request has no params to carry the payment")?;
            let mut paid = request.clone();
            paid.body = body;
            Ok(paid)
        }
    }
}

/// The settlement response of a paid answer by its carrier's rules (`request`: the request
/// that was answered): `None` when it carries none.
pub fn settlement_by(
    carrier: PaymentCarrier,
    request: &FetchRequest,
    exchange: &Exchange,
) -> Option<SettlementSeen> {
    match carrier {
        PaymentCarrier::Http => settlement_of(exchange),
        PaymentCarrier::McpTool => {
            let response = exchange.response.as_ref()?;
            let (_, settlement) = crate::x402::mcp::read_paid_answer(&request.body, response);
            Some(match settlement? {
                Ok(s) => settlement_seen(&s),
                Err(d) => {
                    settlement_problem(Some(crate::x402::mcp::PAYMENT_RESPONSE_CARRIER.into()), &d)
                }
            })
        }
    }
}

/// A settlement response as read.
fn settlement_seen(s: &crate::x402::types::SettlementResponse) -> SettlementSeen {
    SettlementSeen {
        header_name: Some(s.header_name.clone()),
        object: Some(s.object.clone()),
        success: Some(s.success),
        transaction: s.transaction.clone(),
        network: s.network.clone(),
        error_reason: s.error_reason.clone(),
        problem: None,
    }
}

/// A settlement response that could not be read (`carrier`: where it was).
fn settlement_problem(
    carrier: Option<String>,
    d: &crate::x402::types::Deviation,
) -> SettlementSeen {
    SettlementSeen {
        header_name: carrier,
        object: None,
        success: None,
        transaction: None,
        network: None,
        error_reason: None,
        problem: Some(d.to_string()),
    }
}

/// The settlement receipt header of a paid response: `None` when there is no such header.
pub fn settlement_of(exchange: &Exchange) -> Option<SettlementSeen> {
    let response = exchange.response.as_ref()?;
    match parse_settlement_response(&response.headers) {
        Ok(s) => Some(settlement_seen(&s)),
        Err(d) if d.code == "payment_response.missing" => None,
        Err(d) => {
            let header_name = ["payment-response", "x-payment-response"]
                .into_iter()
                .find(|n| response.header(n).is_some())
                .map(str::to_string);
            Some(settlement_problem(header_name, &d))
        }
    }
}

/// The transaction that used our nonce, from the `AuthorizationUsed` logs read.
pub fn nonce_transaction(chain: &PaidChainSeen, nonce: B256) -> Option<B256> {
    chain.authorizations_used.value().and_then(|logs| {
        logs.iter()
            .find(|l| l.topics.get(2) == Some(&nonce))
            .and_then(|l| l.transaction_hash)
    })
}

/// The settlement's block, by the strongest evidence available: the transaction that used our
/// nonce, else the one the settlement response names.
pub fn settlement_block(chain: &PaidChainSeen) -> Option<u64> {
    let block_of = |read: &ChainRead<Option<TxReceipt>>| {
        read.value()
            .and_then(|r| r.as_ref().map(|r| r.block_number))
    };
    block_of(&chain.nonce_receipt).or_else(|| block_of(&chain.claimed_receipt))
}

/// Step 6a: after reading the chain at `block_after`, whether to wait for more confirmations and
/// read again: `Some(target block)` when the settlement is shallower than asked (once only).
pub fn confirmation_target(chain: &PaidChainSeen, already_waited: bool) -> Option<u64> {
    let needed = chain.confirmations_required;
    let shallow = matches!(chain.settlement_depth, Some(depth) if depth < needed);
    if !shallow || already_waited {
        return None;
    }
    settlement_block(chain).map(|block| block.saturating_add(needed.saturating_sub(1)))
}

/// Step 6b: whether to replay the payment. Only once our authorization is spent on chain (so an
/// honest token cannot move money for it again): `Ok(last block of the first call's window)`, or
/// `Err(why not)`.
pub fn replay_plan(replay_enabled: bool, obs: &PaidObservation) -> Result<u64, String> {
    let Some(chain) = obs.chain.as_ref() else {
        return Err("nothing was paid".into());
    };
    if !replay_enabled {
        return Err("replay disabled".into());
    }
    if obs.paid.is_none() {
        return Err("the paid request was not sent".into());
    }
    match chain.authorization_state.value() {
        Some(true) => {}
        Some(false) => {
            return Err("our authorization is not spent on chain: a replay could be its first use, so it is not sent".into());
        }
        None => return Err("authorizationState could not be read".into()),
    }
    chain
        .block_after
        .value()
        .copied()
        .ok_or_else(|| "the chain could not be read after the call".into())
}

/// Step 7: what becomes of the reservation, from what the chain showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Our authorization is spent: settled (with the transaction, when located).
    Settled { tx: Option<B256>, why: &'static str },
    /// Unused, and `validBefore` has passed by our wall clock: released once the chain's own clock
    /// has passed it too (then the token refuses it forever). The driver reads the chain's time.
    ReleaseIfChainPast { valid_before: u64 },
    /// Unknown, or still usable: stays open and counted until a later reconciliation.
    KeepOpen,
}

pub fn reservation_fate(obs: &PaidObservation, payment: &PaymentSent, wall_now: i64) -> Fate {
    let chain = obs.chain.as_ref();
    let state = chain.and_then(|c| c.authorization_state.value().copied());
    let nonce_tx = chain.and_then(|c| {
        c.nonce_receipt
            .value()
            .and_then(|r| r.as_ref().map(|r| r.transaction_hash))
    });
    let valid_before = payment.authorization.valid_before;
    match state {
        Some(true) => Fate::Settled {
            tx: nonce_tx,
            why: match nonce_tx {
                Some(_) => "our authorization was used on chain (AuthorizationUsed located)",
                None => "authorizationState is used; the transaction was not located",
            },
        },
        Some(false) if wall_now >= i64::try_from(valid_before).unwrap_or(i64::MAX) => {
            Fate::ReleaseIfChainPast { valid_before }
        }
        _ => Fate::KeepOpen,
    }
}

/// Reconciling one open reservation after its window closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    Settled { tx: Option<B256>, why: String },
    Released(String),
    Open(String),
}

/// What the chain looks like for reconciliation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainView {
    pub chain_id: u64,
    pub latest_block: u64,
    pub latest_timestamp: u64,
}

/// Decides one reservation's fate from `authorizationState` (and the transaction that used it,
/// when located): used -> settled; unused after `validBefore` by the chain's clock -> released;
/// anything unknown stays open and keeps counting.
pub fn reconcile_verdict<E: std::fmt::Display>(
    reservation_chain: u64,
    valid_before: u64,
    view: &ChainView,
    used: Result<bool, E>,
    tx: Option<B256>,
) -> Reconciled {
    if reservation_chain != view.chain_id {
        return Reconciled::Open(format!(
            "the RPC serves chain {}, this reservation is on chain {reservation_chain}",
            view.chain_id
        ));
    }
    match used {
        Err(e) => Reconciled::Open(format!("authorizationState unreadable: {e}")),
        Ok(true) => Reconciled::Settled {
            tx,
            why: match tx {
                Some(_) => "authorizationState is used; AuthorizationUsed log located".to_string(),
                None => "authorizationState is used; the transaction was not located".to_string(),
            },
        },
        Ok(false) if view.latest_timestamp >= valid_before => Reconciled::Released(format!(
            "unused on chain at block {} (time {}), after validBefore {valid_before}: it can never be used",
            view.latest_block, view.latest_timestamp
        )),
        Ok(false) => Reconciled::Open(format!(
            "unused so far, but the chain's time {} has not passed validBefore {valid_before}",
            view.latest_timestamp
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::http::{FetchError, HttpResponse};
    use crate::evidence::paid::{Decision, ReconcileReport};
    use crate::spend::AllowedAsset;
    use crate::x402::parse::parse_payment_required;
    use alloy::primitives::Address;

    const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
    const ASSET: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";

    fn policy() -> PayPolicy {
        let cap: Usd = "0.05".parse().unwrap();
        PayPolicy::new(
            cap,
            cap,
            cap,
            vec![AllowedAsset {
                network: "eip155:84532".into(),
                asset: ASSET.parse().unwrap(),
                decimals: 6,
                usd_per_unit: "1".parse().unwrap(),
            }],
        )
    }

    fn quote(amount: &str, pay_to: &str, scheme: &str) -> Parsed402 {
        let body = serde_json::json!({
            "x402Version": 1,
            "error": "payment required",
            "accepts": [{
                "scheme": scheme, "network": "base-sepolia", "maxAmountRequired": amount,
                "resource": "https://api.example/x", "description": "d", "mimeType": "application/json",
                "payTo": pay_to, "maxTimeoutSeconds": 60, "asset": ASSET,
                "extra": {"name": "USDC", "version": "2"}
            }]
        });
        parse_payment_required(402, &[], body.to_string().as_bytes())
    }

    fn exchange_of(parsed_from: &Parsed402) -> Exchange {
        // The judge reads only the parse it is given and the exchange's error; a response is enough.
        let _ = parsed_from;
        Exchange {
            response: Some(HttpResponse::new(402, vec![], vec![], false, 0)),
            ..Exchange::default()
        }
    }

    #[test]
    fn choose_pays_the_first_allowed_entry_and_explains_each_refusal() {
        let p = policy();
        let ok = quote("10000", PAY_TO, "exact");
        assert!(matches!(choose(&p, &ok, false), Choice::Pay { .. }));
        let too_dear = quote("60000", PAY_TO, "exact");
        let Choice::Refuse {
            quote: shown,
            declined,
        } = choose(&p, &too_dear, false)
        else {
            panic!("a quote over the per-call cap must be refused");
        };
        assert!(shown.is_some());
        assert_eq!(declined.len(), 1);
        assert_eq!(declined[0].refusal.code, RefusalCode::OverPerCallCap);
        assert!(declined[0].entry_json.as_deref().unwrap().contains("60000"));
        let stream = quote("10000", PAY_TO, "stream");
        let Choice::Refuse { declined, .. } = choose(&p, &stream, false) else {
            panic!("an unknown scheme is not paid");
        };
        assert_eq!(declined[0].refusal.code, RefusalCode::SchemeNotExact);
        let nothing = parse_payment_required(402, &[], b"{}");
        let Choice::Refuse {
            quote: shown,
            declined,
        } = choose(&p, &nothing, false)
        else {
            panic!("nothing to pay");
        };
        assert!(shown.is_none());
        assert_eq!(declined[0].refusal.code, RefusalCode::NoRequirements);
    }

    /// `upto` is judged by every rule on its maximum, the caps first among them, and then
    /// refused whatever it asks: on EVM it settles only through Permit2, which we never sign.
    #[test]
    fn upto_is_held_to_the_caps_on_its_maximum_and_never_signed() {
        let p = policy();
        let refusal_of = |q: &Parsed402| match choose(&p, q, false) {
            Choice::Refuse { declined, .. } => declined[0].refusal.clone(),
            Choice::Pay { .. } => panic!("an upto entry was chosen to pay"),
        };
        // Within the caps: refused for Permit2, naming the maximum.
        let within = refusal_of(&quote("10000", PAY_TO, "upto"));
        assert_eq!(within.code, RefusalCode::UptoNeedsPermit2);
        assert!(within.message.contains("10000"), "{}", within.message);
        // A maximum over the per-call cap is refused by the cap, as an exact price would be.
        let dear = refusal_of(&quote("60000", PAY_TO, "upto"));
        assert_eq!(dear.code, RefusalCode::OverPerCallCap);
        // A maximum too large to price, and one that is not an integer.
        let huge = refusal_of(&quote(&"9".repeat(80), PAY_TO, "upto"));
        assert!(matches!(
            huge.code,
            RefusalCode::OverPerCallCap | RefusalCode::AmountInvalid
        ));
        assert_eq!(
            refusal_of(&quote("0.01", PAY_TO, "upto")).code,
            RefusalCode::AmountInvalid
        );
        // The allowlist and payTo rules hold for upto too.
        assert_eq!(
            refusal_of(&quote("10000", "not-an-address", "upto")).code,
            RefusalCode::PayToInvalid
        );
        // An `upto` entry beside an exact one: the exact one is paid.
        let mut both = quote("10000", PAY_TO, "upto");
        let mut exact = quote("10000", PAY_TO, "exact");
        let required = both.required.as_mut().unwrap();
        let mut second = exact.required.as_mut().unwrap().accepts.remove(0);
        second.index = 1;
        required.accepts.push(second);
        match choose(&p, &both, false) {
            Choice::Pay { requirement, .. } => {
                assert_eq!(requirement.scheme.as_deref(), Some("exact"))
            }
            Choice::Refuse { declined, .. } => panic!("refused {declined:?}"),
        }
    }

    fn solana_first(amount: &str, pay_to: &str) -> Parsed402 {
        let body = serde_json::json!({"x402Version": 2, "resource": {"url": "https://api.example/x"},
        "accepts": [
            {"scheme": "exact", "network": "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1",
             "amount": amount, "asset": "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU",
             "payTo": pay_to, "maxTimeoutSeconds": 60,
             "extra": {"feePayer": "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4"}},
            {"scheme": "exact", "network": "eip155:84532", "amount": "10000", "asset": ASSET,
             "payTo": PAY_TO, "maxTimeoutSeconds": 60, "extra": {"name": "USDC", "version": "2"}}
        ]});
        parse_payment_required(402, &[], body.to_string().as_bytes())
    }

    const SVM_PAY_TO: &str = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin";

    #[test]
    fn a_solana_entry_is_paid_only_with_a_solana_wallet_and_by_its_own_rules() {
        let mut p = policy();
        p.svm_allowlist = crate::spend::AllowedSvmAsset::canonical_usdc();
        let q = solana_first("10000", SVM_PAY_TO);
        // Without a Solana wallet the EVM entry is chosen, the Solana one declined.
        let Choice::Pay {
            requirement, svm, ..
        } = choose(&p, &q, false)
        else {
            panic!("the EVM entry is payable");
        };
        assert_eq!((requirement.index, svm), (1, false));
        let Choice::Pay {
            requirement, svm, ..
        } = choose(&p, &q, true)
        else {
            panic!("the Solana entry is payable");
        };
        assert_eq!((requirement.index, svm), (0, true));
        // Over the per-call cap: declined by the Solana rules, the EVM entry paid instead.
        let dear = solana_first("60000", SVM_PAY_TO);
        let Choice::Pay { requirement, .. } = choose(&p, &dear, true) else {
            panic!("the EVM entry is payable");
        };
        assert_eq!(requirement.index, 1);
        // Off the Solana allowlist: nothing on Solana is paid.
        p.svm_allowlist.clear();
        let Choice::Pay { svm, .. } = choose(&p, &q, true) else {
            panic!("the EVM entry is payable");
        };
        assert!(!svm);
    }

    #[test]
    fn a_solana_requote_that_moved_price_or_payee_is_refused() {
        let mut p = policy();
        p.svm_allowlist = crate::spend::AllowedSvmAsset::canonical_usdc();
        let quoted = solana_first("10000", SVM_PAY_TO);
        let quoted_entry = &quoted.required.as_ref().unwrap().accepts[0];
        for (amount, pay_to, should_pay) in [
            ("10000", SVM_PAY_TO, true),
            ("10001", SVM_PAY_TO, false),
            (
                "10000",
                "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg5",
                false,
            ),
            ("10000", "not base58 0OIl", false),
        ] {
            let fresh = solana_first(amount, pay_to);
            let (seen, judged) =
                judge_requote_svm(&p, quoted_entry, &exchange_of(&fresh), Some(&fresh));
            assert_eq!(judged.is_ok(), should_pay, "{amount} {pay_to}");
            assert_eq!(seen.changes.is_empty(), should_pay, "{:?}", seen.changes);
            if let Err(d) = judged {
                assert_eq!(d.refusal.code, RefusalCode::QuoteChanged);
            }
        }
    }

    #[test]
    fn a_requote_that_moved_price_or_payee_is_refused() {
        let p = policy();
        let quoted = quote("10000", PAY_TO, "exact");
        let quoted_entry = &quoted.required.as_ref().unwrap().accepts[0];
        for (amount, pay_to, should_pay) in [
            ("10000", PAY_TO, true),
            ("10001", PAY_TO, false),
            ("10000", "0x0000000000000000000000000000000000000001", false),
        ] {
            let fresh = quote(amount, pay_to, "exact");
            let (seen, judged) =
                judge_requote(&p, quoted_entry, &exchange_of(&fresh), Some(&fresh));
            assert_eq!(judged.is_ok(), should_pay, "{amount} {pay_to}");
            assert_eq!(seen.changes.is_empty(), should_pay);
            if let Err(d) = judged {
                assert_eq!(d.refusal.code, RefusalCode::QuoteChanged);
            }
        }
        // The 402 could not be fetched again: refused, saying so.
        let failed = Exchange {
            error: Some(FetchError::new(
                Phase::Connect,
                FetchErrorKind::Refused,
                "connection refused",
            )),
            ..Exchange::default()
        };
        let (seen, judged) = judge_requote(&p, quoted_entry, &failed, None);
        assert!(judged.is_err());
        assert!(seen.changes[0].contains("could not be fetched again"));
    }

    #[test]
    fn the_chain_must_answer_on_the_right_chain_and_cover_the_amount() {
        let p = policy();
        let q = quote("10000", PAY_TO, "exact");
        let priced = assess(&p, &q.required.unwrap().accepts[0]).unwrap();
        let ok: Result<u64, String> = Ok(84532);
        assert_eq!(
            judge_chain(&priced, ok.clone(), Ok(7), Ok(U256::from(10_000u64))),
            Ok(7)
        );
        let code = |r: Result<u64, Refusal>| r.unwrap_err().code;
        assert_eq!(
            code(judge_chain(
                &priced,
                Ok::<u64, String>(1),
                Ok(7),
                Ok(U256::from(10_000u64))
            )),
            RefusalCode::WrongChain
        );
        assert_eq!(
            code(judge_chain(
                &priced,
                ok.clone(),
                Ok(7),
                Ok(U256::from(9_999u64))
            )),
            RefusalCode::InsufficientFunds
        );
        assert_eq!(
            code(judge_chain(
                &priced,
                Err("down".to_string()),
                Ok(7),
                Ok(U256::from(10_000u64))
            )),
            RefusalCode::RpcUnavailable
        );
        assert_eq!(
            code(judge_chain(
                &priced,
                ok,
                Ok(7),
                Err("balance unreadable".to_string())
            )),
            RefusalCode::RpcUnavailable
        );
    }

    #[test]
    fn only_an_early_failure_proves_a_payment_never_left() {
        let early = Exchange {
            error: Some(FetchError::new(
                Phase::Connect,
                FetchErrorKind::Refused,
                "refused",
            )),
            ..Exchange::default()
        };
        assert!(never_sent(&early));
        let late = Exchange {
            error: Some(FetchError::new(
                Phase::Head,
                FetchErrorKind::Timeout,
                "no head",
            )),
            ..Exchange::default()
        };
        assert!(
            !never_sent(&late),
            "a request that may have been sent keeps its reservation open"
        );
        assert!(!never_sent(&Exchange::default()));
    }

    fn paid_obs(state: Option<bool>) -> (PaidObservation, PaymentSent) {
        let mut obs = PaidObservation::new(
            "https://api.example/x",
            &crate::evidence::http::FetchRequest::get("https://api.example/x"),
            Address::ZERO,
            1_000,
            1_000,
        );
        let mut chain = chain_before("rpc", 84532, 10, 1);
        if let Some(s) = state {
            chain.authorization_state = ChainRead::Read { value: s };
        }
        chain.block_after = ChainRead::Read { value: 12 };
        obs.chain = Some(chain);
        obs.paid = Some(Exchange::default());
        obs.decision = Decision::Paid { reservation_id: 1 };
        obs.reconciled = Some(ReconcileReport::default());
        let payment = PaymentSent {
            reservation_id: 1,
            cost_usd: "0.01".parse().unwrap(),
            authorization: AuthorizationSeen {
                from: Address::ZERO,
                to: Address::ZERO,
                value: "10000".into(),
                valid_after: 400,
                valid_before: 2_000,
                nonce: B256::ZERO,
            },
            domain_name: "USDC".into(),
            domain_version: "2".into(),
            chain_id: 84532,
            asset: Address::ZERO,
            signature: String::new(),
            header_name: "X-PAYMENT".into(),
            header_value: String::new(),
            sent_at: 1_000,
            payment_id: None,
        };
        (obs, payment)
    }

    #[test]
    fn a_reservation_is_settled_when_used_and_released_only_after_its_window() {
        let (obs, payment) = paid_obs(Some(true));
        assert!(matches!(
            reservation_fate(&obs, &payment, 1_500),
            Fate::Settled { tx: None, .. }
        ));
        let (obs, payment) = paid_obs(Some(false));
        assert_eq!(reservation_fate(&obs, &payment, 1_999), Fate::KeepOpen);
        assert_eq!(
            reservation_fate(&obs, &payment, 2_000),
            Fate::ReleaseIfChainPast {
                valid_before: 2_000
            }
        );
        let (obs, payment) = paid_obs(None);
        assert_eq!(
            reservation_fate(&obs, &payment, 9_999),
            Fate::KeepOpen,
            "an unreadable state never releases"
        );
    }

    #[test]
    fn replay_only_after_our_authorization_is_spent() {
        let (obs, _) = paid_obs(Some(true));
        assert_eq!(replay_plan(true, &obs), Ok(12));
        assert!(replay_plan(false, &obs).is_err());
        let (obs, _) = paid_obs(Some(false));
        assert!(replay_plan(true, &obs).unwrap_err().contains("not spent"));
        let (obs, _) = paid_obs(None);
        assert!(replay_plan(true, &obs).is_err());
    }

    #[test]
    fn reconciliation_releases_only_past_the_chains_own_clock() {
        let view = ChainView {
            chain_id: 84532,
            latest_block: 50,
            latest_timestamp: 2_000,
        };
        let used: Result<bool, String> = Ok(true);
        assert!(matches!(
            reconcile_verdict(84532, 2_000, &view, used, None),
            Reconciled::Settled { .. }
        ));
        let unused: Result<bool, String> = Ok(false);
        assert!(matches!(
            reconcile_verdict(84532, 2_000, &view, unused.clone(), None),
            Reconciled::Released(_)
        ));
        assert!(matches!(
            reconcile_verdict(84532, 2_001, &view, unused.clone(), None),
            Reconciled::Open(_)
        ));
        assert!(matches!(
            reconcile_verdict(1, 2_000, &view, unused, None),
            Reconciled::Open(_)
        ));
        let unknown: Result<bool, String> = Err("timeout".into());
        assert!(matches!(
            reconcile_verdict(84532, 0, &view, unknown, None),
            Reconciled::Open(_)
        ));
    }
}
