//! Feedback to an ERC-8004 reputation registry: for a subject whose operator file declares an
//! agent identity (`registrations`, `x402::operator::parse_agent_registrations`), the fields of
//! the registry's `giveFeedback(agentId, value, valueDecimals, tag1, tag2, endpoint, feedbackURI,
//! feedbackHash)`, one call per measure, each with the off-chain feedback file the ERC describes
//! (its MUST fields, then ours: the ledger entries it rests on and the signed score).
//!
//! Pure: what a feedback says is a function of the subject's latest score document, the run
//! before it, the entries' hashes and the signed envelope, so the same score gives the same files
//! byte for byte (their `createdAt` is the score's `as_of`) and `--submit` can tell a feedback it
//! already sent. Nothing is said that the score does not measure: a check held at the prior, not
//! applying, or not measured gives no feedback, and an unverified subject gets no `starred`.
//! Sending is `submit.rs`.

pub mod submit;

use alloy::primitives::{Address, B256, keccak256};
use serde::Serialize;
use serde_json::json;

use crate::evidence::{CheckId, Outcome};
use crate::ledger::record::RecordKind;
use crate::score::document::ScoreDocument;
use crate::score::tally::CheckState;
use crate::x402::operator::AgentRegistration;

/// The format of our part of a feedback file.
pub const FEEDBACK_FORMAT: &str = "x402-probe.erc8004-feedback/1";

/// `tag2` of every feedback we give: who measured it.
pub const TAG2: &str = "x402-probe";

/// What a feedback measures (`tag1`: the ERC's suggested tags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Tag {
    /// The x402-endpoint score (capped), 0 to 100 at 4 decimals.
    #[serde(rename = "starred")]
    Starred,
    /// The latest run reached it (R1): 1 or 0.
    #[serde(rename = "reachable")]
    Reachable,
    /// The decayed share of runs that reached it (R1's value), percent at 2 decimals.
    #[serde(rename = "uptime")]
    Uptime,
    /// The decayed share of paid calls that succeeded (R4's value), percent at 2 decimals.
    #[serde(rename = "successRate")]
    SuccessRate,
    /// The unpaid request's p95 latency (R3), milliseconds.
    #[serde(rename = "responseTime")]
    ResponseTime,
}

impl Tag {
    pub fn as_str(self) -> &'static str {
        match self {
            Tag::Starred => "starred",
            Tag::Reachable => "reachable",
            Tag::Uptime => "uptime",
            Tag::SuccessRate => "successRate",
            Tag::ResponseTime => "responseTime",
        }
    }
}

/// A ledger entry a feedback rests on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EvidenceRef {
    pub seq: u64,
    pub kind: RecordKind,
    /// The entry's hash in the chain (hex).
    pub hash: String,
}

/// What one subject's feedback is made from.
pub struct Rated<'a> {
    /// The subject's URL (the feedback's `endpoint`).
    pub endpoint: &'a str,
    pub agent: &'a AgentRegistration,
    /// The address that gives the feedback (our feedback wallet).
    pub client: Address,
    /// The subject's latest score.
    pub document: &'a ScoreDocument,
    /// R1's outcome in the run before it (`None`: not measured).
    pub reachable: Option<Outcome>,
    /// The entries the score and that run are (their hashes).
    pub evidence: &'a [EvidenceRef],
    /// The score's signed envelope (`/v1/subjects/{id}/score`), as JSON.
    pub signed_score: &'a serde_json::Value,
}

/// One `giveFeedback` call and its file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Feedback {
    pub agent_registry: String,
    /// Decimal.
    pub agent_id: String,
    pub value: i128,
    pub value_decimals: u8,
    pub tag1: Tag,
    pub tag2: &'static str,
    pub endpoint: String,
    /// `<feedback_hash without 0x>.json`: where the file is written, and its URI's last part.
    pub file_name: String,
    /// keccak256 of the file's bytes (the ERC's `feedbackHash`), 0x-hex.
    pub feedback_hash: B256,
    /// The feedback file (RFC 8785 JSON).
    #[serde(skip)]
    pub file: Vec<u8>,
}

/// The feedback for one subject, in a fixed order (`starred`, `reachable`, `uptime`,
/// `successRate`, `responseTime`), each measure only when the score measured it.
pub fn feedback(rated: &Rated) -> Vec<Feedback> {
    let doc = rated.document;
    let check = |id: CheckId| {
        doc.dimensions
            .iter()
            .flat_map(|d| d.checks.iter())
            .find(|c| c.id == id && c.state == CheckState::Scored)
    };
    let percent = |id: CheckId| {
        check(id)
            .and_then(|c| c.value)
            .map(|v| ((v * 100.0).round() as i128, 2))
    };
    let measures = [
        (
            Tag::Starred,
            // Never a number for a subject we have not verified: that is a lack of evidence.
            doc.grade
                .as_ref()
                .map(|_| (i128::from(doc.capped_score.0), 4)),
        ),
        (
            Tag::Reachable,
            match rated.reachable {
                Some(Outcome::Pass) => Some((1, 0)),
                Some(Outcome::Fail) => Some((0, 0)),
                _ => None,
            },
        ),
        (Tag::Uptime, percent(CheckId::R1)),
        (Tag::SuccessRate, percent(CheckId::R4)),
        (
            Tag::ResponseTime,
            check(CheckId::R3)
                .and_then(|c| c.p95_ms)
                .map(|ms| (ms.round() as i128, 0)),
        ),
    ];
    measures
        .into_iter()
        .filter_map(|(tag, measured)| measured.map(|(value, decimals)| (tag, value, decimals)))
        .map(|(tag, value, value_decimals)| one(rated, tag, value, value_decimals))
        .collect()
}

fn one(rated: &Rated, tag: Tag, value: i128, value_decimals: u8) -> Feedback {
    let agent = rated.agent;
    let file = json!({
        "agentRegistry": agent.agent_registry(),
        "agentId": agent.agent_id.to_string(),
        "clientAddress": format!("eip155:{}:{}", agent.chain_id, rated.client.to_checksum(None)),
        "createdAt": rated.document.as_of,
        "value": value.to_string(),
        "valueDecimals": value_decimals,
        "tag1": tag.as_str(),
        "tag2": TAG2,
        "endpoint": rated.endpoint,
        "x402-probe": {
            "format": FEEDBACK_FORMAT,
            "rubric_sha256": rated.document.rubric.sha256,
            "inputs_sha256": rated.document.inputs_sha256,
            "verdict": rated.document.verdict.verdict,
            "evidence": rated.evidence,
            "signed_score": rated.signed_score,
        },
    });
    let file = crate::canonical::to_canonical_bytes(&file);
    let feedback_hash = keccak256(&file);
    Feedback {
        agent_registry: agent.agent_registry(),
        agent_id: agent.agent_id.to_string(),
        value,
        value_decimals,
        tag1: tag,
        tag2: TAG2,
        endpoint: rated.endpoint.to_string(),
        file_name: format!("{}.json", hex::encode(feedback_hash)),
        feedback_hash,
        file,
    }
}

#[cfg(test)]
mod tests;
