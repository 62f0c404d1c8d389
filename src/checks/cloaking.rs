//! Cloaking (`probes/findings/cloaking.md`): an endpoint that quotes one vantage other payment
//! terms than the others at the same time. Pure: observations from several vantages in, a
//! finding with each observation's receipt out.
//!
//! Each observation's terms are read from its first usable 402 as the free checks read it, one
//! tuple per `accepts` entry, normalised so that what varies legitimately never differs: an EVM
//! address in any letter case, a network by its chain (`base-sepolia` is `eip155:84532`), an
//! amount's leading zeros, a scheme's case; a Solana `feePayer` is compared by membership in the
//! facilitator's fee payers; memos, nonces, signed offers (and their times) and the rest of
//! `extra` are per request and never compared. A field missing or malformed on one side is not
//! compared (an honest `unmeasured` when nothing is left), never a difference.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::findings::{Finding, FindingId, primary, required_of};
use crate::evidence::free::FreeObservation;
use crate::evidence::{Outcome, Receipt, rfc3339};
use crate::x402::types::{
    PaymentRequired, Requirement, is_decimal_integer, parse_address_any_case,
};

/// The most seconds apart two observations may start and still be compared: the same probe
/// cycle's vantages probe together (a price changed between two distant runs is H2's, not this).
pub const MAX_SKEW_SECS: i64 = 120;

/// The longest value shown in the receipt (compared in full).
const SHOWN_CHARS: usize = 96;

/// What cloaking needs besides the observations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloakingContext {
    /// Observations further apart than this (s) are not compared.
    pub max_skew_secs: i64,
    /// The facilitators' Solana fee payers (base58): a `feePayer` that differs between vantages
    /// is the same terms when each is one of these. Empty: differing fee payers are not compared.
    pub fee_payers: Vec<String>,
}

impl Default for CloakingContext {
    fn default() -> Self {
        CloakingContext {
            max_skew_secs: MAX_SKEW_SECS,
            fee_payers: Vec::new(),
        }
    }
}

/// A run whose terms are not the majority's (each run, when no terms hold a majority).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloakedRun {
    pub vantage: String,
    /// The run's time, RFC 3339 (as its history entries write it).
    pub at: String,
    /// The fields that differed: `scheme`, `network`, `amount`, `asset`, `pay_to`, `fee_payer`,
    /// `accepts` (the number of entries).
    pub fields: Vec<String>,
}

/// The compared fields, in the order reported.
const FIELDS: [&str; 6] = [
    "scheme",
    "network",
    "amount",
    "asset",
    "pay_to",
    "fee_payer",
];

/// One `accepts` entry's terms, normalised; `None` for a field missing or unreadable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Terms {
    pub(crate) fields: [Option<String>; 6],
}

pub(crate) fn normalise_scheme(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_ascii_lowercase())
}

/// A network by its chain: an EVM network's chain id as CAIP-2 (`eip155:<id>`), whatever name the
/// entry used (v1 names or CAIP-2); anything else (Solana's CAIP-2 is case-sensitive) as given.
pub(crate) fn normalise_network(s: &str) -> Option<String> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    match crate::x402::network::chain_id_of(s) {
        Some(id) => Some(format!("eip155:{id}")),
        None => Some(s.to_string()),
    }
}

/// An amount in atomic units: decimal digits without leading zeros. Anything else (a sign, a
/// point, an exponent, letters) is not compared.
pub(crate) fn normalise_amount(s: &str) -> Option<String> {
    let digits = s.trim_start_matches('0');
    let digits = if digits.is_empty() && !s.is_empty() {
        "0"
    } else {
        digits
    };
    is_decimal_integer(digits).then(|| digits.to_string())
}

/// An address: EVM in any letter case as lower case; otherwise (base58) as given.
pub(crate) fn normalise_address(s: &str) -> Option<String> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    match parse_address_any_case(s) {
        Some(a) => Some(format!("{a:#x}")),
        None => Some(s.to_string()),
    }
}

/// A Solana fee payer: one of the facilitators' is the facilitator's (`facilitator`), so a
/// rotation among them is no difference; another is itself; none known: not compared.
pub(crate) fn normalise_fee_payer(s: &str, known: &[String]) -> Option<String> {
    let s = s.trim();
    if s.is_empty() || known.is_empty() {
        return None;
    }
    if known.iter().any(|k| k == s) {
        Some("facilitator".to_string())
    } else {
        Some(s.to_string())
    }
}

pub(crate) fn terms_of(r: &Requirement, ctx: &CloakingContext) -> Terms {
    Terms {
        fields: [
            r.scheme.as_deref().and_then(normalise_scheme),
            r.network.as_deref().and_then(normalise_network),
            r.amount.as_deref().and_then(normalise_amount),
            r.asset.as_deref().and_then(normalise_address),
            r.pay_to.as_deref().and_then(normalise_address),
            r.extra_fee_payer
                .as_deref()
                .and_then(|f| normalise_fee_payer(f, &ctx.fee_payers)),
        ],
    }
}

/// One observation as compared.
struct Seen<'a> {
    obs: &'a FreeObservation,
    receipt: Receipt,
    terms: Option<Vec<Terms>>,
    why_not: Option<String>,
}

fn seen<'a>(obs: &'a FreeObservation, ctx: &CloakingContext) -> Seen<'a> {
    let p = primary(obs);
    let required: Option<PaymentRequired> = p.and_then(|(_, r)| required_of(obs, r));
    let mut sha256 = BTreeMap::new();
    if let Some((_, r)) = p {
        sha256.insert("response.body".to_string(), r.body_sha256.clone());
    }
    let (terms, why_not) = match (p, required) {
        (None, _) => (None, Some("no usable response".to_string())),
        (Some(_), None) => (None, Some("no readable 402".to_string())),
        (Some(_), Some(req)) if req.accepts.is_empty() => {
            (None, Some("a 402 without accepts entries".to_string()))
        }
        (Some(_), Some(req)) => (
            Some(req.accepts.iter().map(|a| terms_of(a, ctx)).collect()),
            None,
        ),
    };
    Seen {
        obs,
        receipt: Receipt {
            vantage: obs.vantage.clone(),
            at: rfc3339(obs.at),
            sha256,
            tx: None,
            detail: Value::Null,
        },
        terms,
        why_not,
    }
}

fn shown(v: &Option<String>) -> Value {
    match v {
        Some(s) => Value::String(crate::x402::types::printable_prefix(s, SHOWN_CHARS)),
        None => Value::Null,
    }
}

/// The cloaking finding over observations of one subject from several vantages, and the runs
/// whose terms are not the majority's (empty unless it fails).
///
/// Each vantage's latest observation is compared with the others that started within
/// `max_skew_secs` of the latest one. The receipt's `detail.observations` holds each compared
/// observation's receipt (its vantage, time and body hash) with its terms; its `sha256` each
/// body's hash as `<vantage>/response.body`.
pub fn cloaking(
    observations: &[&FreeObservation],
    ctx: &CloakingContext,
) -> (Finding, Vec<CloakedRun>) {
    // Each vantage's latest observation.
    let mut latest: BTreeMap<&str, &FreeObservation> = BTreeMap::new();
    for o in observations {
        let slot = latest.entry(o.vantage.as_str()).or_insert(o);
        if o.at > slot.at {
            *slot = o;
        }
    }
    let newest = latest.values().map(|o| o.at).max().unwrap_or(0);
    let skew = ctx.max_skew_secs.max(0);
    let together: Vec<Seen<'_>> = latest
        .values()
        .filter(|o| newest.saturating_sub(o.at) <= skew)
        .map(|o| seen(o, ctx))
        .collect();
    let at = rfc3339(newest);
    let vantage = together
        .iter()
        .map(|s| s.obs.vantage.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let finish = |outcome: Outcome,
                  evidence: String,
                  together: &[Seen<'_>],
                  differs: &[(usize, &str)],
                  terms_shown: bool| {
        let mut sha256 = BTreeMap::new();
        let mut observations = Vec::new();
        for s in together {
            for (label, hash) in &s.receipt.sha256 {
                sha256.insert(format!("{}/{label}", s.obs.vantage), hash.clone());
            }
            let mut r = serde_json::to_value(&s.receipt).unwrap_or(Value::Null);
            if let Value::Object(map) = &mut r {
                if let Some(why) = &s.why_not {
                    map.insert("unread".into(), Value::String(why.clone()));
                }
                if terms_shown && let Some(terms) = &s.terms {
                    let entries: Vec<Value> = terms
                        .iter()
                        .map(|t| {
                            Value::Object(
                                FIELDS
                                    .iter()
                                    .zip(&t.fields)
                                    .map(|(f, v)| (f.to_string(), shown(v)))
                                    .collect(),
                            )
                        })
                        .collect();
                    map.insert("accepts".into(), Value::Array(entries));
                }
            }
            observations.push(r);
        }
        let differs: Vec<Value> = differs
            .iter()
            .map(|(i, f)| json!({"entry": i, "field": f}))
            .collect();
        Finding {
            id: FindingId::Cloaking,
            outcome,
            evidence,
            receipt: Receipt {
                vantage: vantage.clone(),
                at: at.clone(),
                sha256,
                tx: None,
                detail: json!({"observations": observations, "differs": differs,
                               "max_skew_secs": skew}),
            },
        }
    };
    if latest.len() < 2 {
        let f = finish(
            Outcome::Unmeasured,
            "needs observations from at least two vantages".into(),
            &together,
            &[],
            false,
        );
        return (f, Vec::new());
    }
    if together.len() < 2 {
        let f = finish(
            Outcome::Unmeasured,
            format!("no two vantages' observations within {skew} s of each other"),
            &together,
            &[],
            false,
        );
        return (f, Vec::new());
    }
    let read: Vec<&Seen<'_>> = together.iter().filter(|s| s.terms.is_some()).collect();
    if read.len() < 2 {
        let f = finish(
            Outcome::Unmeasured,
            format!(
                "fewer than two vantages read a 402 ({} of {})",
                read.len(),
                together.len()
            ),
            &together,
            &[],
            false,
        );
        return (f, Vec::new());
    }
    let terms: Vec<&Vec<Terms>> = read.iter().filter_map(|s| s.terms.as_ref()).collect();
    // Per entry and field: the values seen (where the field was read).
    let mut differs: Vec<(usize, &str)> = Vec::new();
    let mut compared = 0usize;
    let entries = terms.iter().map(|t| t.len()).max().unwrap_or(0);
    let same_count = terms.iter().all(|t| t.len() == entries);
    for e in 0..terms.iter().map(|t| t.len()).min().unwrap_or(0) {
        for (f, name) in FIELDS.iter().enumerate() {
            let values: BTreeSet<&str> = terms
                .iter()
                .filter_map(|t| t[e].fields[f].as_deref())
                .collect();
            let read_by = terms.iter().filter(|t| t[e].fields[f].is_some()).count();
            if read_by >= 2 {
                compared += 1;
            }
            if values.len() > 1 {
                differs.push((e, name));
            }
        }
    }
    if !same_count {
        differs.push((entries, "accepts"));
    }
    if differs.is_empty() {
        let (outcome, evidence) = if compared == 0 {
            (
                Outcome::Unmeasured,
                "no term was read by two vantages alike".to_string(),
            )
        } else {
            (
                Outcome::Pass,
                format!(
                    "{} vantages were quoted the same terms within {skew} s",
                    read.len()
                ),
            )
        };
        return (finish(outcome, evidence, &together, &[], true), Vec::new());
    }
    // The majority's terms: the largest group of vantages quoted alike; every other (all, on a tie)
    // is marked.
    let mut groups: Vec<(&Vec<Terms>, Vec<usize>)> = Vec::new();
    for (i, t) in terms.iter().enumerate() {
        match groups.iter_mut().find(|(g, _)| *g == *t) {
            Some((_, members)) => members.push(i),
            None => groups.push((t, vec![i])),
        }
    }
    let largest = groups.iter().map(|(_, m)| m.len()).max().unwrap_or(0);
    let majority = groups.iter().filter(|(_, m)| m.len() == largest).count() == 1;
    let mut fields: Vec<String> = differs.iter().map(|(_, f)| f.to_string()).collect();
    let mut fields_seen = BTreeSet::new();
    fields.retain(|f| fields_seen.insert(f.clone()));
    let cloaked: Vec<CloakedRun> = groups
        .iter()
        .filter(|(_, m)| !majority || m.len() != largest)
        .flat_map(|(_, m)| m.iter())
        .map(|&i| CloakedRun {
            vantage: read[i].obs.vantage.clone(),
            at: rfc3339(read[i].obs.at),
            fields: fields.clone(),
        })
        .collect();
    let names: Vec<&str> = cloaked.iter().map(|c| c.vantage.as_str()).collect();
    let evidence = format!(
        "quoted other terms ({}) to {} than to the other vantages within {skew} s",
        fields.join(", "),
        names.join(", ")
    );
    (
        finish(Outcome::Fail, evidence, &together, &differs, true),
        cloaked,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_compare_in_any_case_and_base58_as_given() {
        let lower = "0x2222222222222222222222222222222222222222";
        let mixed = "0x2222222222222222222222222222222222222222".to_uppercase();
        let mixed = format!("0x{}", &mixed[2..]);
        assert_eq!(normalise_address(lower), normalise_address(&mixed));
        assert_eq!(
            normalise_address(" So11111111111111111111111111111111111111112 "),
            Some("So11111111111111111111111111111111111111112".into())
        );
        assert_ne!(
            normalise_address("So11111111111111111111111111111111111111112"),
            normalise_address("so11111111111111111111111111111111111111112")
        );
        assert_eq!(normalise_address(""), None);
        assert_eq!(normalise_address("   "), None);
    }

    #[test]
    fn networks_compare_by_their_chain() {
        assert_eq!(
            normalise_network("base-sepolia"),
            normalise_network("eip155:84532")
        );
        assert_eq!(normalise_network("base"), normalise_network("eip155:8453"));
        assert_ne!(normalise_network("base"), normalise_network("base-sepolia"));
        // Solana's CAIP-2 reference is base58: case matters.
        let sol = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
        assert_eq!(normalise_network(sol), Some(sol.to_string()));
        assert_eq!(normalise_network(""), None);
    }

    #[test]
    fn amounts_compare_without_leading_zeros_and_malformed_ones_not_at_all() {
        assert_eq!(normalise_amount("010000"), Some("10000".into()));
        assert_eq!(normalise_amount("0"), Some("0".into()));
        assert_eq!(normalise_amount("000"), Some("0".into()));
        for bad in ["", "-1", "1.5", "1e6", "0x10", " 10", "ten", "１０"] {
            assert_eq!(normalise_amount(bad), None, "{bad:?}");
        }
        // Huge: compared as text, never parsed into a number.
        let huge = format!("{}1", "0".repeat(1 << 20));
        assert_eq!(normalise_amount(&huge), Some("1".into()));
        let long = "9".repeat(1 << 20);
        assert_eq!(normalise_amount(&long).map(|s| s.len()), Some(1 << 20));
    }

    #[test]
    fn schemes_compare_in_any_case() {
        assert_eq!(normalise_scheme("Exact"), normalise_scheme("exact"));
        assert_ne!(normalise_scheme("upto"), normalise_scheme("exact"));
        assert_eq!(normalise_scheme(" "), None);
    }

    #[test]
    fn a_fee_payer_is_compared_by_membership_in_the_facilitators_set() {
        let known = vec![
            "FeePayerA1111111111111111111111111111111111".to_string(),
            "FeePayerB1111111111111111111111111111111111".to_string(),
        ];
        // A rotation among the facilitator's fee payers is the same terms.
        assert_eq!(
            normalise_fee_payer(&known[0], &known),
            normalise_fee_payer(&known[1], &known)
        );
        // A fee payer outside the set differs from the facilitator's.
        assert_ne!(
            normalise_fee_payer("Stranger11111111111111111111111111111111111", &known),
            normalise_fee_payer(&known[0], &known)
        );
        // No set known: not compared.
        assert_eq!(normalise_fee_payer(&known[0], &[]), None);
        assert_eq!(normalise_fee_payer("", &known), None);
    }
}
