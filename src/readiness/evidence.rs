//! Agent-readiness evidence from what a probe run already collects: its check results (a free
//! run's, and a paid call's when there was one). Pure. Each mapping is a decision recorded in
//! `rubrics/README.md` ("Agent readiness"); a ladder step the checks cannot tell apart from its
//! neighbours is left unmeasured, never guessed.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Dimension, Evidence, Reading, SafetyFinding, SafetyKind};
use crate::checks::screen::Category;
use crate::evidence::{CheckId, CheckResult, Outcome};

/// Ladder steps by place (0 = the top), as seed 000 words them.
mod step {
    /// access: "nothing beyond HTTP".
    pub const ACCESS_NOTHING: usize = 0;
    /// payment: "x402 / on-chain / per-call crypto settlement".
    pub const PAYMENT_X402: usize = 0;
    /// payment: "genuinely free at the volume the reference task needs, with no card on file".
    pub const PAYMENT_FREE: usize = 1;
    /// interface: "REST/GraphQL with published OpenAPI or equivalent machine-readable schema".
    pub const INTERFACE_SCHEMA: usize = 1;
    /// completion: "reference task completed; no human input".
    pub const COMPLETION_DONE: usize = 0;
    /// completion: "partially completed, or completed with a workaround".
    pub const COMPLETION_PARTIAL: usize = 2;
    /// completion: "failed or blocked".
    pub const COMPLETION_FAILED: usize = 3;
    /// docs: "good docs, most of the above".
    pub const DOCS_MOST: usize = 1;
}

/// One outcome per check: a fail anywhere is a fail, else a pass anywhere a pass, else the first
/// seen (a run has one result per check; a free run and a paid call together may repeat none).
fn outcomes(results: &[CheckResult]) -> BTreeMap<CheckId, &CheckResult> {
    let mut by_id: BTreeMap<CheckId, &CheckResult> = BTreeMap::new();
    for r in results {
        let keep = match by_id.get(&r.id) {
            None => true,
            Some(old) => rank(r.outcome) > rank(old.outcome),
        };
        if keep {
            by_id.insert(r.id, r);
        }
    }
    by_id
}

fn rank(o: Outcome) -> u8 {
    match o {
        Outcome::Fail => 3,
        Outcome::Pass => 2,
        Outcome::Na => 1,
        Outcome::Unmeasured => 0,
    }
}

/// The evidence of a probe run's check results.
pub fn from_checks(results: &[CheckResult]) -> Evidence {
    let by_id = outcomes(results);
    let outcome = |id: CheckId| by_id.get(&id).map(|r| r.outcome);
    let pass = |id: CheckId| outcome(id) == Some(Outcome::Pass);
    let mut dimensions = BTreeMap::new();

    use CheckId::*;
    dimensions.insert(
        Dimension::Access,
        if pass(R2) && pass(C1) {
            Reading::decided(
                step::ACCESS_NOTHING,
                "an unpaid request without any credential was answered with a PaymentRequired \
                 that parses: payment is the only thing asked",
                &[R2, C1],
            )
        } else {
            Reading::unmeasured(
                "no parsable 402 to an unpaid request: what else access needs is not seen",
                &[R2, C1],
            )
        },
    );
    dimensions.insert(
        Dimension::Payment,
        if pass(C1) && pass(C2) {
            Reading::decided(
                step::PAYMENT_X402,
                "well-formed x402 payment requirements: per-call settlement from a wallet",
                &[C1, C2],
            )
        } else {
            Reading::unmeasured(
                "no well-formed x402 requirements: how else it is paid for is not seen",
                &[C1, C2],
            )
        },
    );
    dimensions.insert(
        Dimension::Interface,
        if pass(C5) {
            Reading::decided(
                step::INTERFACE_SCHEMA,
                "its 402 publishes a valid machine-readable input and output schema",
                &[C5],
            )
        } else {
            Reading::unmeasured(
                "no valid discovery schema in the 402; documentation outside it is not read",
                &[C5],
            )
        },
    );
    dimensions.insert(
        Dimension::Completion,
        match (outcome(R4), outcome(R5)) {
            (Some(Outcome::Pass), Some(Outcome::Fail)) => Reading::decided(
                step::COMPLETION_PARTIAL,
                "the paid call answered 2xx but its output was not valid",
                &[R4, R5],
            ),
            (Some(Outcome::Pass), _) => Reading::decided(
                step::COMPLETION_DONE,
                "a paid call from the 402 alone returned a valid answer, no human involved",
                &[R4, R5],
            ),
            (Some(Outcome::Fail), _) => Reading::decided(
                step::COMPLETION_FAILED,
                "the correctly paid call did not answer 2xx",
                &[R4],
            ),
            _ => Reading::unmeasured(
                "no paid call was made or it was not measured: the probe did not complete",
                &[R4],
            ),
        },
    );
    // Docs: llms.txt, errors, rate limits are not fetched by the free run yet: unmeasured.
    Evidence {
        dimensions,
        bonuses: BTreeMap::new(),
        findings: findings(&by_id),
    }
}

/// Safety findings: only from fails, each naming its check's receipt.
fn findings(by_id: &BTreeMap<CheckId, &CheckResult>) -> Vec<SafetyFinding> {
    let mut found = Vec::new();
    let failed = |id: CheckId| by_id.get(&id).filter(|r| r.outcome == Outcome::Fail);
    let mut add = |kind: SafetyKind, r: &CheckResult, what: String| {
        found.push(SafetyFinding {
            kind,
            check: r.id,
            receipt_sha256: crate::history::receipt_digest(&r.receipt),
            what,
        })
    };
    for id in [CheckId::S2, CheckId::S3, CheckId::S4] {
        let Some(r) = failed(id) else { continue };
        // One finding per kind per check, naming the first rule (by id) of that kind.
        let mut kinds: BTreeMap<SafetyKind, String> = BTreeMap::new();
        for (rule, category) in rules(&r.receipt.detail) {
            if let Some(kind) = screen_kind(&rule, category) {
                kinds.entry(kind).or_insert(rule);
            }
        }
        for (kind, rule) in kinds {
            add(kind, r, format!("rule {rule}"));
        }
    }
    if let Some(r) = failed(CheckId::H5) {
        add(
            SafetyKind::Overcharge,
            r,
            "charged more than the quote".into(),
        );
    }
    if let Some(r) = failed(CheckId::S1) {
        add(
            SafetyKind::Tls,
            r,
            "not HTTPS with a valid chain, or redirected off the host".into(),
        );
    }
    if let Some(r) = failed(CheckId::H1) {
        add(
            SafetyKind::Pricing,
            r,
            "the price differs from the listed one".into(),
        );
    }
    found
}

/// The rules a screen's receipt counts, with their categories.
fn rules(detail: &Value) -> Vec<(String, Category)> {
    let Some(Value::Object(by_rule)) = detail.get("findings_by_rule") else {
        return Vec::new();
    };
    by_rule
        .iter()
        .filter_map(|(rule, count)| {
            let category = serde_json::from_value(count.get("category")?.clone()).ok()?;
            Some((rule.clone(), category))
        })
        .collect()
}

/// Which seed 000 kind a screen's finding is.
fn screen_kind(rule: &str, category: Category) -> Option<SafetyKind> {
    Some(match category {
        Category::Injection => SafetyKind::PromptInjection,
        Category::HiddenText => SafetyKind::HiddenText,
        Category::Phishing | Category::Malware => SafetyKind::MaliciousPayload,
        // The wallet's own secrets are the key request seed 000 calls critical; other
        // credentials (passwords, API keys, auth headers) are a third party's.
        Category::SecretAsk => match rule {
            "secret.private-key" | "secret.seed-phrase" => SafetyKind::KeyRequest,
            _ => SafetyKind::ThirdPartyCredRequest,
        },
    })
}

/// What an agent meets on our own API, as observed from a running daemon (by the API test, whose
/// result the README publishes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnApiObservation {
    /// Every public route answered without a credential.
    pub public_routes_open: bool,
    /// `/v1/openapi.json` served an OpenAPI document.
    pub openapi_served: bool,
    /// `/llms.txt` served.
    pub llms_txt_served: bool,
    /// Errors came as JSON with a stable code and a message.
    pub errors_actionable: bool,
    /// The reference task (is this x402 URL safe to pay? preflight, then the signed score
    /// verified offline) was done from the published documents alone.
    pub reference_task_done: bool,
    /// `/.well-known/security.txt` served.
    pub security_txt_served: bool,
}

/// Our own API's evidence. Payment is "genuinely free" (no route is paid, no card asked); docs
/// stop one step short of the top: llms.txt, actionable errors and versioned schemas are there,
/// but the rate limit's figures and examples that run as written are not in llms.txt.
pub fn from_own_api(o: &OwnApiObservation) -> Evidence {
    let either = |yes: bool, step: usize, why: &str, not: &str| {
        if yes {
            Reading::decided(step, why, &[])
        } else {
            Reading::unmeasured(not, &[])
        }
    };
    let dimensions = BTreeMap::from([
        (
            Dimension::Access,
            either(
                o.public_routes_open,
                step::ACCESS_NOTHING,
                "every public route answers without a credential",
                "a public route asked for more than HTTP",
            ),
        ),
        (
            Dimension::Payment,
            either(
                o.public_routes_open,
                step::PAYMENT_FREE,
                "free to read, no card on file",
                "a public route asked for more than HTTP",
            ),
        ),
        (
            Dimension::Interface,
            either(
                o.openapi_served,
                step::INTERFACE_SCHEMA,
                "REST with a published OpenAPI 3.1 document",
                "no OpenAPI document served",
            ),
        ),
        (
            Dimension::Completion,
            if o.reference_task_done {
                Reading::decided(
                    step::COMPLETION_DONE,
                    "preflight of a URL and its signed score verified offline, from llms.txt alone",
                    &[],
                )
            } else {
                Reading::decided(step::COMPLETION_FAILED, "the reference task failed", &[])
            },
        ),
        (
            Dimension::Docs,
            either(
                o.llms_txt_served && o.errors_actionable && o.openapi_served,
                step::DOCS_MOST,
                "llms.txt, JSON errors with stable codes, a versioned OpenAPI document; the rate \
                 limit's figures and runnable examples are not in llms.txt",
                "llms.txt, actionable errors or the schema missing",
            ),
        ),
    ]);
    let bonuses = BTreeMap::from([
        (
            super::BonusId::PermissiveTos,
            super::BonusReading {
                granted: Some(o.llms_txt_served),
                because: "llms.txt served".into(),
            },
        ),
        (
            super::BonusId::SecurityPosture,
            super::BonusReading {
                granted: Some(o.security_txt_served),
                because: "security.txt with a contact".into(),
            },
        ),
    ]);
    Evidence {
        dimensions,
        bonuses,
        findings: Vec::new(),
    }
}
