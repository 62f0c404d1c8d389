//! The history-aware checks: what needs earlier observations of the same subject. Pure: the
//! subject's prior evidence comes in as an explicit input, the time as a number.
//!
//! - [`declared`]: what one run saw the subject declare (price, payTo, a fingerprint of its
//!   requirements), kept per run so later runs can compare.
//! - [`revision_change`]: whether what it declares changed (a new revision, which the scorer's
//!   `on_revision` rules and the 7-day watch act on).
//! - H2 (price stable) and H3 (payTo stable) over the last 30 days, with the operator's dated
//!   revision notes (`probes/operator-file.md`).
//! - [`excused`]: our own declared outages, which excuse the free outcomes inside them.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::canonical::canonical_sha256;
use crate::evidence::free::FreeObservation;
use crate::evidence::paid::{NoteKind, RevisionNote};
use crate::evidence::{CheckId, Conclusion, Outcome};
pub use crate::ledger::record::OutageOf;
use crate::x402::operator::parse_operator_file;
use crate::x402::parse::parse_payment_required;
use crate::x402::types::PaymentRequired;

/// How far back H2 and H3 look, and how long a note counts.
pub const STABILITY_WINDOW_MS: i64 = 30 * 86_400_000;

// What a run saw the subject declare is evidence (`evidence::declared`); H2 and H3 read it here.
pub use crate::evidence::declared::Declared;

/// What the subject declares in `obs` (its first usable 402), or `None` when no 402 could be read.
pub fn declared(obs: &FreeObservation, at_ms: i64) -> Option<Declared> {
    let response = obs
        .samples
        .iter()
        .filter(|s| s.exchange.tls.as_ref().is_none_or(|t| t.verified))
        .find_map(|s| s.exchange.response.as_ref())?;
    let parsed = parse_payment_required(response.status, &response.headers, &response.body);
    declared_from(parsed.required.as_ref()?, at_ms)
}

/// [`declared`] from the requirements of the run's first usable 402, parsed already (the free
/// checks parse the same response: `checks::free::evaluate_free_declared`).
pub(crate) fn declared_from(required: &PaymentRequired, at_ms: i64) -> Option<Declared> {
    let first = required.accepts.first()?;
    Some(Declared {
        at_ms,
        fingerprint: fingerprint(required),
        network: first.network.clone(),
        asset: first.asset.clone(),
        amount: first.amount.clone(),
        pay_to: first.pay_to.clone(),
        offer_signer: crate::x402::offer_receipt::offers(required.extensions.as_ref())
            .and_then(|offers| crate::x402::offer_receipt::offer_signer_for(&offers, first)),
    })
}

/// The subject's revision fingerprint: SHA-256 of the canonical JSON of the stable parts of what it
/// declares: per `accepts` entry its scheme, network, asset, payTo (lower case), amount, timeout and
/// token domain; the resource's description and MIME type; the bazaar input and output. Volatile
/// fields (an error text, a nonce in `extra`) are left out, so a fresh 402 of an unchanged
/// endpoint keeps its revision.
pub fn fingerprint(required: &PaymentRequired) -> String {
    let accepts: Vec<Value> = required
        .accepts
        .iter()
        .map(|r| {
            json!({
                "scheme": r.scheme, "network": r.network,
                "asset": r.asset.as_deref().map(str::to_ascii_lowercase),
                "payTo": r.pay_to.as_deref().map(str::to_ascii_lowercase),
                "amount": r.amount, "maxTimeoutSeconds": r.max_timeout_seconds,
                "name": r.entry.pointer("/extra/name"), "version": r.entry.pointer("/extra/version"),
                "description": r.entry.get("description"), "mimeType": r.entry.get("mimeType"),
            })
        })
        .collect();
    let resource = required.resource_raw.as_ref();
    let bazaar = required
        .extensions
        .as_ref()
        .and_then(|e| e.get("bazaar"))
        .and_then(|b| b.get("info"));
    canonical_sha256(&json!({
        "accepts": accepts,
        "description": resource.and_then(|r| r.get("description")),
        "mimeType": resource.and_then(|r| r.get("mimeType")),
        "input": bazaar.and_then(|i| i.get("input")),
        "output": bazaar.and_then(|i| i.get("output")),
    }))
}

/// What changed between the last revision's declaration and this one (empty: nothing that makes
/// a new revision).
pub fn revision_change(last: Option<&Declared>, current: &Declared) -> Vec<String> {
    let Some(last) = last else {
        return Vec::new();
    };
    if last.fingerprint == current.fingerprint {
        return Vec::new();
    }
    let mut changed = Vec::new();
    if last.amount != current.amount || last.priced_in() != current.priced_in() {
        changed.push("price".to_string());
    }
    if last.pay_to_address() != current.pay_to_address() {
        changed.push("payTo".to_string());
    }
    if changed.is_empty() {
        changed.push("requirements or description".to_string());
    }
    changed
}

/// The revision notes of the run's operator file (none when it has none or could not be read).
pub fn notes(obs: &FreeObservation) -> Vec<RevisionNote> {
    obs.operator_file
        .as_ref()
        .and_then(|ex| ex.response.as_ref())
        .filter(|r| r.status == 200 && !r.body_truncated)
        .and_then(|r| parse_operator_file(&r.body).ok())
        .map(|f| f.notes)
        .unwrap_or_default()
}

/// Notes that count now: dated no later than now and within the stability window.
fn current_notes(notes: &[RevisionNote], kind: NoteKind, now_ms: i64) -> Vec<&RevisionNote> {
    notes
        .iter()
        .filter(|n| n.kind == kind && n.at_ms <= now_ms && now_ms - n.at_ms <= STABILITY_WINDOW_MS)
        .collect()
}

/// Earlier declarations within the window before `now_ms` (prior runs only).
fn recent(prior: &[Declared], now_ms: i64) -> Vec<&Declared> {
    prior
        .iter()
        .filter(|d| d.at_ms < now_ms && now_ms - d.at_ms <= STABILITY_WINDOW_MS)
        .collect()
}

/// H2: no price change in 30 days; an increase without a revision note fails. A noted change
/// passes (the rule is surprise, not price); a decrease is no surprise to a payer and passes; a
/// change of network or asset cannot be ordered, so it is treated like an increase.
pub fn h2(
    current: Option<&Declared>,
    prior: &[Declared],
    notes: &[RevisionNote],
    now_ms: i64,
) -> Conclusion {
    let Some(current) = current else {
        return Conclusion::unmeasured("no price could be read in this run (C1 carries why)");
    };
    let Some(amount) = current.amount_value() else {
        return Conclusion::unmeasured("the quoted amount is not an integer (C2 carries it)");
    };
    let recent = recent(prior, now_ms);
    let compared: Vec<&&Declared> = recent.iter().filter(|d| d.amount.is_some()).collect();
    if compared.is_empty() {
        return Conclusion::unmeasured(
            "no earlier price within 30 days to compare with (the first run of this subject)",
        );
    }
    let increases: Vec<String> = compared
        .iter()
        .filter(|d| {
            d.priced_in() != current.priced_in()
                || d.amount_value().is_none_or(|before| before < amount)
        })
        .map(|d| d.amount.clone().unwrap_or_default())
        .collect();
    let changed = compared
        .iter()
        .any(|d| d.priced_in() != current.priced_in() || d.amount_value() != Some(amount));
    let detail = json!({
        "current": {"amount": current.amount, "network": current.network, "asset": current.asset},
        "compared_runs": compared.len(),
        "earlier_amounts": compared.iter().map(|d| d.amount.clone()).collect::<std::collections::BTreeSet<_>>(),
    });
    if !changed {
        return Conclusion::pass(format!(
            "price {} unchanged over {} earlier runs in 30 days",
            current.amount.as_deref().unwrap_or(""),
            compared.len()
        ))
        .with_detail(detail);
    }
    if increases.is_empty() {
        return Conclusion::pass(format!(
            "price fell to {}: a decrease surprises no payer",
            current.amount.as_deref().unwrap_or("")
        ))
        .with_detail(detail);
    }
    let noted: Vec<&RevisionNote> = current_notes(notes, NoteKind::PriceChange, now_ms)
        .into_iter()
        .filter(|n| {
            n.amount
                .as_deref()
                .is_none_or(|a| Some(a) == current.amount.as_deref())
        })
        .collect();
    if let Some(note) = noted.last() {
        return Conclusion::pass(format!(
            "price rose to {}, as the operator noted ({})",
            current.amount.as_deref().unwrap_or(""),
            note.text
        ))
        .with_detail(detail);
    }
    Conclusion::fail(format!(
        "price rose from {} to {} within 30 days without a revision note",
        increases.first().map(String::as_str).unwrap_or("?"),
        current.amount.as_deref().unwrap_or("")
    ))
    .with_detail(detail)
}

/// H3: no payTo change in 30 days. A rotation fails until the owner notes it (a `payto_rotation`
/// note naming the new wallet).
pub fn h3(
    current: Option<&Declared>,
    prior: &[Declared],
    notes: &[RevisionNote],
    now_ms: i64,
) -> Conclusion {
    let Some(current) = current else {
        return Conclusion::unmeasured("no payTo could be read in this run (C1 carries why)");
    };
    let Some(pay_to) = current.pay_to_address() else {
        return Conclusion::unmeasured("the quoted payTo is not an address (C2 carries it)");
    };
    let recent = recent(prior, now_ms);
    let compared: Vec<&&Declared> = recent.iter().filter(|d| d.pay_to.is_some()).collect();
    if compared.is_empty() {
        return Conclusion::unmeasured(
            "no earlier payTo within 30 days to compare with (the first run of this subject)",
        );
    }
    let earlier: std::collections::BTreeSet<String> = compared
        .iter()
        .filter(|d| d.pay_to_address() != Some(pay_to))
        .filter_map(|d| d.pay_to_address().map(|a| a.to_checksum(None)))
        .collect();
    let detail = json!({
        "current": pay_to.to_checksum(None),
        "compared_runs": compared.len(),
        "other_pay_to": earlier,
    });
    if earlier.is_empty() {
        return Conclusion::pass(format!(
            "payTo {} unchanged over {} earlier runs in 30 days",
            pay_to.to_checksum(None),
            compared.len()
        ))
        .with_detail(detail);
    }
    let noted = current_notes(notes, NoteKind::PaytoRotation, now_ms)
        .into_iter()
        .rfind(|n| n.pay_to == Some(pay_to));
    if let Some(note) = noted {
        return Conclusion::pass(format!(
            "payTo rotated to {}, as the operator noted ({})",
            pay_to.to_checksum(None),
            note.text
        ))
        .with_detail(detail);
    }
    // Signed offers: when every earlier run that quoted another payTo had its offer signed by
    // the key that signs this run's offer for the new payTo, the seller who committed to the old
    // terms commits to the new ones: continuity, not a stranger's payee.
    if let Some(signer) = current.offer_signer.as_deref() {
        let changed: Vec<&&&Declared> = compared
            .iter()
            .filter(|d| d.pay_to_address() != Some(pay_to))
            .collect();
        if changed
            .iter()
            .all(|d| d.offer_signer.as_deref() == Some(signer))
        {
            let mut detail = detail;
            detail["offer_signer"] = json!(signer);
            return Conclusion::pass(format!(
                "payTo changed to {}, in an offer signed by {signer}, the key that signed the \
                 earlier offers for {}",
                pay_to.to_checksum(None),
                earlier.iter().cloned().collect::<Vec<_>>().join(", ")
            ))
            .with_detail(detail);
        }
    }
    Conclusion::fail(format!(
        "payTo changed from {} to {} within 30 days without a revision note",
        earlier.iter().next().map(String::as_str).unwrap_or("?"),
        pay_to.to_checksum(None)
    ))
    .with_detail(detail)
}

/// A window in which a part of ours was out (the control failing, our RPC failing run after run,
/// or declared by hand), ms. An open window (`to_ms` None) lasts until now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutageWindow {
    pub from_ms: i64,
    pub to_ms: Option<i64>,
    /// What was out: the control's (and declared) windows are our whole vantage; an RPC window is
    /// only the chain reads.
    #[serde(default, skip_serializing_if = "OutageOf::is_vantage")]
    pub of: OutageOf,
}

impl OutageWindow {
    pub fn contains(&self, at_ms: i64) -> bool {
        at_ms >= self.from_ms && self.to_ms.is_none_or(|to| at_ms <= to)
    }

    /// Whether this window excuses `check`: our vantage being out says nothing about any free
    /// outcome; our RPC being out says nothing about the free checks that read the chain through
    /// it, and leaves every other check (the subject's own HTTP answers) standing.
    pub fn excuses(&self, check: &str) -> bool {
        match self.of {
            OutageOf::Vantage => true,
            OutageOf::Rpc => CHECKS_READING_OUR_RPC.iter().any(|c| c == check),
        }
    }
}

/// The free checks whose evidence comes through our RPC (C3 reads the token's EIP-712 fields).
pub const CHECKS_READING_OUR_RPC: &[CheckId] = &[CheckId::C3];

/// Whether a free outcome of `check` at `at_ms` is excused by one of our outages, and by which:
/// free outcomes inside a window that excuses the check count against nobody (they become
/// `unmeasured`). `na` and `unmeasured` need no excuse.
pub fn excused(
    check: &str,
    outcome: Outcome,
    at_ms: i64,
    windows: &[OutageWindow],
) -> Option<OutageWindow> {
    if matches!(outcome, Outcome::Na | Outcome::Unmeasured) {
        return None;
    }
    windows
        .iter()
        .copied()
        .find(|w| w.contains(at_ms) && w.excuses(check))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
    const B: &str = "0x0000000000000000000000000000000000000001";
    const DAY: i64 = 86_400_000;

    fn d(at_day: i64, amount: &str, pay_to: &str) -> Declared {
        Declared {
            at_ms: at_day * DAY,
            fingerprint: format!("{amount}{pay_to}"),
            network: Some("eip155:8453".into()),
            asset: Some("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913".into()),
            amount: Some(amount.into()),
            pay_to: Some(pay_to.into()),
            offer_signer: None,
        }
    }

    fn note(
        at_day: i64,
        kind: NoteKind,
        amount: Option<&str>,
        pay_to: Option<&str>,
    ) -> RevisionNote {
        RevisionNote {
            at_ms: at_day * DAY,
            kind,
            amount: amount.map(str::to_string),
            pay_to: pay_to.map(|p| p.parse().unwrap()),
            text: "planned".into(),
        }
    }

    #[test]
    fn h2_passes_stable_and_falling_prices_and_noted_rises_and_fails_unnoted_rises() {
        let prior = vec![d(1, "10000", A), d(2, "10000", A)];
        let now = 3 * DAY;
        assert_eq!(
            h2(Some(&d(3, "10000", A)), &prior, &[], now).outcome,
            Outcome::Pass
        );
        assert_eq!(
            h2(Some(&d(3, "5000", A)), &prior, &[], now).outcome,
            Outcome::Pass
        );
        assert_eq!(
            h2(Some(&d(3, "30000", A)), &prior, &[], now).outcome,
            Outcome::Fail
        );
        let noted = [note(2, NoteKind::PriceChange, Some("30000"), None)];
        assert_eq!(
            h2(Some(&d(3, "30000", A)), &prior, &noted, now).outcome,
            Outcome::Pass
        );
        // A note for another amount, a future note, or a rotation note does not cover it.
        for wrong in [
            note(2, NoteKind::PriceChange, Some("20000"), None),
            note(4, NoteKind::PriceChange, None, None),
            note(2, NoteKind::PaytoRotation, None, Some(B)),
        ] {
            assert_eq!(
                h2(Some(&d(3, "30000", A)), &prior, &[wrong], now).outcome,
                Outcome::Fail
            );
        }
        // Nothing to compare with: unmeasured, never a fail.
        assert_eq!(
            h2(Some(&d(3, "30000", A)), &[], &[], now).outcome,
            Outcome::Unmeasured
        );
        // A rise older than 30 days is forgotten.
        let old = vec![d(1, "10000", A)];
        assert_eq!(
            h2(Some(&d(40, "30000", A)), &old, &[], 40 * DAY).outcome,
            Outcome::Unmeasured
        );
    }

    #[test]
    fn h3_fails_an_unnoted_rotation_until_the_owner_notes_it() {
        let prior = vec![d(1, "10000", A), d(2, "10000", A)];
        let now = 3 * DAY;
        assert_eq!(
            h3(Some(&d(3, "10000", A)), &prior, &[], now).outcome,
            Outcome::Pass
        );
        assert_eq!(
            h3(Some(&d(3, "10000", B)), &prior, &[], now).outcome,
            Outcome::Fail
        );
        let noted = [note(3, NoteKind::PaytoRotation, None, Some(B))];
        assert_eq!(
            h3(Some(&d(3, "10000", B)), &prior, &noted, now).outcome,
            Outcome::Pass
        );
        let other = [note(3, NoteKind::PaytoRotation, None, Some(A))];
        assert_eq!(
            h3(Some(&d(3, "10000", B)), &prior, &other, now).outcome,
            Outcome::Fail
        );
        // Case alone is no rotation.
        let lower = d(3, "10000", &A.to_lowercase());
        assert_eq!(h3(Some(&lower), &prior, &[], now).outcome, Outcome::Pass);
    }

    #[test]
    fn h3_reads_a_rotation_signed_by_the_same_offer_key_as_continuity() {
        let signed = |at, pay_to, signer: Option<&str>| Declared {
            offer_signer: signer.map(str::to_string),
            ..d(at, "10000", pay_to)
        };
        let (k, other) = ("0x857b06519E91e3A54538791bDbb0E22373e36b66", "did:key:z6Mk");
        let now = 3 * DAY;
        let prior = vec![signed(1, A, Some(k)), signed(2, A, Some(k))];
        let same = h3(Some(&signed(3, B, Some(k))), &prior, &[], now);
        assert_eq!(same.outcome, Outcome::Pass, "{}", same.evidence);
        assert!(same.evidence.contains(k), "{}", same.evidence);
        // Another key, no key now, or an earlier offer unsigned: a change like any other.
        for (current, prior) in [
            (signed(3, B, Some(other)), prior.clone()),
            (signed(3, B, None), prior.clone()),
            (
                signed(3, B, Some(k)),
                vec![signed(1, A, None), signed(2, A, Some(k))],
            ),
        ] {
            assert_eq!(h3(Some(&current), &prior, &[], now).outcome, Outcome::Fail);
        }
    }

    #[test]
    fn a_revision_names_what_changed() {
        assert!(revision_change(None, &d(1, "1", A)).is_empty());
        assert!(revision_change(Some(&d(1, "1", A)), &d(2, "1", A)).is_empty());
        assert_eq!(
            revision_change(Some(&d(1, "1", A)), &d(2, "2", A)),
            vec!["price"]
        );
        assert_eq!(
            revision_change(Some(&d(1, "1", A)), &d(2, "2", B)),
            vec!["price", "payTo"]
        );
    }

    #[test]
    fn outages_excuse_passes_and_fails_inside_their_window_only() {
        let windows = [
            OutageWindow {
                from_ms: 100,
                to_ms: Some(200),
                of: OutageOf::Vantage,
            },
            OutageWindow {
                from_ms: 500,
                to_ms: None,
                of: OutageOf::Vantage,
            },
        ];
        assert!(excused("R1", Outcome::Fail, 150, &windows).is_some());
        assert!(excused("R1", Outcome::Pass, 200, &windows).is_some());
        assert!(excused("R1", Outcome::Fail, 201, &windows).is_none());
        assert!(excused("R1", Outcome::Fail, 10_000, &windows).is_some());
        assert!(excused("R1", Outcome::Unmeasured, 150, &windows).is_none());
    }

    #[test]
    fn an_rpc_outage_excuses_the_chain_reads_only() {
        let windows = [OutageWindow {
            from_ms: 100,
            to_ms: Some(200),
            of: OutageOf::Rpc,
        }];
        assert!(excused("C3", Outcome::Fail, 150, &windows).is_some());
        assert!(excused("C3", Outcome::Fail, 250, &windows).is_none());
        assert!(excused("R1", Outcome::Fail, 150, &windows).is_none());
        assert!(excused("S2", Outcome::Fail, 150, &windows).is_none());
    }
}
