//! Whose was it: each failed paid check and each `unmeasured` result of a run, attributed to the
//! party whose doing the evidence shows (`probes/attribution.md`): the seller (the endpoint and
//! its operator), the facilitator (who settles), the chain, or us (our RPC, our network, our caps
//! and choices). Pure: derived from the run's stored observations on every read, never stored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::checks::paid::PAID_CHECKS;
use crate::evidence::chain::ChainRead;
use crate::evidence::free::{ChainSeen, FreeObservation};
use crate::evidence::http::{FetchErrorKind, Phase};
use crate::evidence::paid::{Decision, PaidObservation, RefusalCode};
use crate::evidence::{CheckId, CheckResult, Outcome};
use crate::paid::chain::chain_facts;

/// Who a failure or a gap in the evidence belongs to. A closed set, written as these names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Party {
    /// The endpoint and its operator: what it answered, quoted, delivered or kept.
    Seller,
    /// Who settles the payment: what the settling transaction did, a settlement refused.
    Facilitator,
    /// The chain: a settlement not yet final.
    Chain,
    /// This tool: our RPC, our network and resolver, our address guard, our caps, allowlist and
    /// deadlines, a run that did not pay.
    Us,
}

impl Party {
    pub const ALL: [Party; 4] = [Party::Seller, Party::Facilitator, Party::Chain, Party::Us];

    pub fn as_str(self) -> &'static str {
        match self {
            Party::Seller => "seller",
            Party::Facilitator => "facilitator",
            Party::Chain => "chain",
            Party::Us => "us",
        }
    }
}

impl std::fmt::Display for Party {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A result's party, with the evidence that decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribution {
    pub party: Party,
    pub why: String,
}

fn to(party: Party, why: impl Into<String>) -> Option<Attribution> {
    Some(Attribution {
        party,
        why: why.into(),
    })
}

/// The party of one result of a run: every `unmeasured`, and every failed paid check; `None`
/// for the rest (a pass, an `na`, a free check's fail: the subject's own by definition).
pub fn attribute(
    result: &CheckResult,
    free: &FreeObservation,
    paid: Option<&PaidObservation>,
) -> Option<Attribution> {
    let is_paid = PAID_CHECKS.contains(&result.id);
    match (result.outcome, is_paid) {
        (Outcome::Unmeasured, true) => unmeasured_paid(result.id, paid),
        (Outcome::Unmeasured, false) => unmeasured_free(result.id, free),
        (Outcome::Fail, true) => paid.and_then(|p| failed_paid(result.id, p)),
        _ => None,
    }
}

/// Every result's party, by check (only those [`attribute`] gives one).
pub fn attribute_all(
    results: &[CheckResult],
    free: &FreeObservation,
    paid: Option<&PaidObservation>,
) -> BTreeMap<CheckId, Attribution> {
    results
        .iter()
        .filter_map(|r| attribute(r, free, paid).map(|a| (r.id, a)))
        .collect()
}

/// How many of a run's failed paid checks and `unmeasured` results each party has, every party
/// named (zero included) so a document's shape never depends on the run.
pub fn count_by_party(
    attributions: &BTreeMap<CheckId, Attribution>,
    results: &[CheckResult],
) -> BTreeMap<Party, PartyCount> {
    let mut counts: BTreeMap<Party, PartyCount> = Party::ALL
        .into_iter()
        .map(|p| (p, PartyCount::default()))
        .collect();
    for r in results {
        if let Some(a) = attributions.get(&r.id) {
            let c = counts.entry(a.party).or_default();
            match r.outcome {
                Outcome::Fail => c.failed += 1,
                _ => c.unmeasured += 1,
            }
        }
    }
    counts
}

/// One party's share of a run's gaps and failures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartyCount {
    /// Failed paid checks.
    pub failed: usize,
    /// Results `unmeasured`.
    pub unmeasured: usize,
}

/// A refusal the seller's quote caused (it cannot be paid as published), rather than our rules.
fn sellers_refusal(code: RefusalCode) -> bool {
    matches!(
        code,
        RefusalCode::NoRequirements
            | RefusalCode::AmountInvalid
            | RefusalCode::PayToInvalid
            | RefusalCode::DomainMissing
            | RefusalCode::TimeoutInvalid
            | RefusalCode::QuoteChanged
            | RefusalCode::SvmTransferInvalid
    )
}

fn our_chain_failure<T>(read: &ChainRead<T>) -> Option<&str> {
    match read {
        ChainRead::Failed { error } => Some(error),
        _ => None,
    }
}

fn unmeasured_paid(id: CheckId, paid: Option<&PaidObservation>) -> Option<Attribution> {
    let Some(obs) = paid else {
        return to(Party::Us, "this run made no paid call");
    };
    match &obs.decision {
        Decision::Refused { refusals } => {
            let seller = !refusals.is_empty() && refusals.iter().all(|r| sellers_refusal(r.code));
            let codes: Vec<&str> = refusals.iter().map(|r| r.code.as_str()).collect();
            return if seller {
                to(
                    Party::Seller,
                    format!(
                        "its quote cannot be paid as published ({})",
                        codes.join(", ")
                    ),
                )
            } else if codes.is_empty() {
                to(Party::Seller, "nothing to pay: no usable requirements")
            } else {
                to(
                    Party::Us,
                    format!("our rules declined to pay ({})", codes.join(", ")),
                )
            };
        }
        Decision::Failed { stage, .. } => {
            return to(
                Party::Us,
                format!("our side failed before paying ({stage})"),
            );
        }
        Decision::Paid { .. } => {}
    }
    if let Some(e) = obs.paid.as_ref().and_then(|e| e.error.as_ref())
        && obs.paid.as_ref().is_some_and(|e| e.response.is_none())
        && (e.phase == Phase::Guard || e.kind == FetchErrorKind::ResolverFailed)
    {
        return to(
            Party::Us,
            "our address guard or resolver stopped the paid request",
        );
    }
    if let Some(chain) = obs.chain.as_ref() {
        let failed = [
            our_chain_failure(&chain.chain_id),
            our_chain_failure(&chain.block_before),
            our_chain_failure(&chain.block_after),
            our_chain_failure(&chain.claimed_receipt),
            our_chain_failure(&chain.authorizations_used),
            our_chain_failure(&chain.nonce_receipt),
            our_chain_failure(&chain.authorization_state),
            our_chain_failure(&chain.transfers_from_wallet),
        ]
        .into_iter()
        .flatten()
        .next();
        if let Some(error) = failed {
            return to(Party::Us, format!("our RPC failed: {error}"));
        }
        if let Some(why) = chain_facts(obs).not_final {
            return to(Party::Chain, why);
        }
    }
    if obs.settlement.as_ref().is_some_and(|s| s.pending()) {
        let facts = chain_facts(obs);
        return match facts.nonce_used {
            Ok(true) => to(
                Party::Seller,
                "still answered settlement_pending while our authorization was spent on chain",
            ),
            _ => to(
                Party::Chain,
                "the settlement was still pending (broadcast, not confirmed) at our deadline",
            ),
        };
    }
    let _ = id;
    to(
        Party::Us,
        "we could not judge it (a read bound, a deadline or a reference of ours)",
    )
}

fn unmeasured_free(id: CheckId, free: &FreeObservation) -> Option<Attribution> {
    let ours = |e: &crate::evidence::http::FetchError| {
        e.phase == Phase::Guard
            || (e.phase == Phase::Dns && e.kind == FetchErrorKind::ResolverFailed)
    };
    if !free.samples.is_empty()
        && free
            .samples
            .iter()
            .all(|s| s.exchange.error.as_ref().is_some_and(ours) && s.exchange.response.is_none())
    {
        return to(
            Party::Us,
            "our address guard or resolver stopped every request",
        );
    }
    match id {
        CheckId::H2 | CheckId::H3 => {
            return to(
                Party::Us,
                "needs earlier runs, which this reading does not have",
            );
        }
        CheckId::C3 => {
            if let ChainSeen::RpcDown { error, .. } = &free.chain {
                return to(Party::Us, format!("our RPC failed: {error}"));
            }
            if matches!(free.chain, ChainSeen::NoRpc) {
                return to(Party::Us, "no RPC configured");
            }
        }
        CheckId::H1 => return to(Party::Us, "the listing we read for it was not available"),
        _ => {}
    }
    if let Some(cut) = &free.cut_short {
        return to(Party::Us, cut.reason());
    }
    let answered = free.samples.iter().any(|s| s.exchange.response.is_some());
    if !answered {
        return to(Party::Seller, "the endpoint gave no response to read");
    }
    if needs_requirements(id) {
        return to(
            Party::Seller,
            "its answer carried no payment requirements to read (C1 or R2 carries that)",
        );
    }
    to(Party::Us, "we could not judge it")
}

/// The free checks that read the 402's requirements, `unmeasured` when there are none.
fn needs_requirements(id: CheckId) -> bool {
    matches!(
        id,
        CheckId::C2
            | CheckId::C3
            | CheckId::C4
            | CheckId::C5
            | CheckId::H1
            | CheckId::H4
            | CheckId::S2
            | CheckId::S4
    )
}

fn failed_paid(id: CheckId, obs: &PaidObservation) -> Option<Attribution> {
    match id {
        CheckId::R4 => Some(undelivered(obs)),
        CheckId::H5 | CheckId::H6 | CheckId::H7 => {
            let facts = chain_facts(obs);
            let sender = obs.chain.as_ref().and_then(|c| {
                let tx = facts.charge.as_ref().ok()?.as_ref()?.tx;
                [c.claimed_receipt.value(), c.nonce_receipt.value()]
                    .into_iter()
                    .flatten()
                    .flatten()
                    .find(|r| Some(r.transaction_hash) == tx)
                    .and_then(|r| r.from)
            });
            let what = match id {
                CheckId::H5 => "moved another amount than quoted",
                CheckId::H6 => "paid another wallet than quoted",
                _ => "pulled from our wallet more than once",
            };
            to(
                Party::Facilitator,
                match sender {
                    Some(s) => format!("the settling transaction (sent by {s:#x}) {what}"),
                    None => format!("the settlement {what}"),
                },
            )
        }
        _ => to(
            Party::Seller,
            match id {
                CheckId::C6 => "its settlement response does not match the chain",
                CheckId::H8 => "it charged and did not deliver",
                CheckId::H9 => "it did not keep its refund promise",
                CheckId::R6 => "its output differs from the reference",
                _ => "its paid answer or output",
            },
        ),
    }
}

/// Whose an undelivered paid call is: the answer's own evidence.
fn undelivered(obs: &PaidObservation) -> Attribution {
    let at = |party, why: String| Attribution { party, why };
    let Some(exchange) = obs.paid.as_ref() else {
        return at(Party::Us, "the paid request was not sent".into());
    };
    let Some(response) = exchange.response.as_ref() else {
        let (kind, message) = exchange
            .error
            .as_ref()
            .map_or((FetchErrorKind::Other, "no response".to_string()), |e| {
                (e.kind, e.message.clone())
            });
        return match kind {
            FetchErrorKind::ResolverFailed | FetchErrorKind::Blocked => {
                at(Party::Us, format!("our network: {message}"))
            }
            _ => at(
                Party::Seller,
                format!("no answer from the endpoint: {message}"),
            ),
        };
    };
    if let Some(s) = obs.settlement.as_ref() {
        if s.success == Some(false) && !s.pending() {
            let reason = s.error_reason.clone().unwrap_or_else(|| "no reason".into());
            return if reason.contains("insufficient_funds") {
                at(
                    Party::Us,
                    format!("the settlement failed for our funds ({reason})"),
                )
            } else {
                at(
                    Party::Facilitator,
                    format!("the settlement failed ({reason})"),
                )
            };
        }
        if s.pending() {
            return match chain_facts(obs).nonce_used {
                Ok(true) => at(
                    Party::Seller,
                    "settlement_pending to the end, though our authorization was spent".into(),
                ),
                _ => at(
                    Party::Chain,
                    "the settlement stayed pending (not confirmed) to our deadline".into(),
                ),
            };
        }
    }
    let body_names_facilitator =
        String::from_utf8_lossy(&response.body[..response.body.len().min(4096)])
            .to_ascii_lowercase()
            .contains("facilitator");
    if matches!(response.status, 502 | 504) && body_names_facilitator {
        return at(
            Party::Facilitator,
            format!("HTTP {} naming its facilitator", response.status),
        );
    }
    at(
        Party::Seller,
        format!("the endpoint answered HTTP {}", response.status),
    )
}
