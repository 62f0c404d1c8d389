//! The operator's own evidence (seed 004): the public gets signed aggregates, never the raw
//! ledger; a subject's operator reads every entry about its endpoint, and posts dated revision
//! notes, after proving control of it.
//!
//! The proof: `POST /v1/operator/challenge {subject, action}` issues a challenge for one action
//! on one subject (kept in memory, valid for `[api] operator_challenge_ttl_secs`, single use;
//! at most [`PER_CLIENT`] not yet presented per client address, [`PER_SUBJECT`] per subject and
//! [`MAX_OUTSTANDING`] in all, so one client can fill neither another's quota nor the whole);
//! its text, which names both, is signed with
//! EIP-191 `personal_sign` by the subject's current payTo (its latest declaration) or by an
//! address its operator file lists in `operator_keys`. The signature is then presented once, with
//! the request of that action (`/v1/operator/entries` for `read_entries`, `/v1/operator/notes`
//! for `post_note`): the challenge is spent by that attempt, whatever its result, and a challenge
//! issued for the other action authorises nothing.

use std::collections::HashMap;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Mutex;

use alloy::primitives::{Address, Signature};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ApiError, ApiState, ErrorCode};
use crate::checks::history::Declared;
use crate::control::Command;
use crate::evidence::paid::address_any_case;
use crate::ledger::record::{NoteRecord, Record, RecordKind};
use crate::x402::operator::{parse_note, parse_operator_file};

/// Most challenges outstanding (issued, not yet presented, not expired) at once, all clients
/// together (a request beyond it waits for some to expire: 503).
pub const MAX_OUTSTANDING: usize = 1024;
/// Most challenges outstanding for one client address (beyond it: 429 `rate_limited`). An
/// operator paging through entries presents each challenge before asking for the next.
pub const PER_CLIENT: usize = 8;
/// Most challenges outstanding for one subject, whoever asked (beyond it: 429 `rate_limited`).
pub const PER_SUBJECT: usize = 32;
/// Presented challenges remembered until they expire (a replay is then told `challenge_used`);
/// beyond it the soonest to expire are forgotten (a replay of one is then `challenge_unknown`,
/// refused all the same).
pub const MAX_SPENT: usize = 65_536;
/// Most entries in one page of `/v1/operator/entries`.
pub const MAX_PAGE: usize = 1000;
/// Entries in a page when the request names no limit.
pub const DEFAULT_PAGE: usize = 200;
/// The first line of every challenge text (what the operator's wallet shows it is signing).
pub const CHALLENGE_DOMAIN: &str = "x402-probe operator proof";

/// What a challenge is issued for: a signature over it authorises this action and no other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OperatorAction {
    /// Read the subject's ledger entries (`POST /v1/operator/entries`).
    ReadEntries,
    /// Post a revision note (`POST /v1/operator/notes`).
    PostNote,
}

impl OperatorAction {
    fn as_str(self) -> &'static str {
        match self {
            OperatorAction::ReadEntries => "read_entries",
            OperatorAction::PostNote => "post_note",
        }
    }
}

/// One issued challenge.
#[derive(Debug, Clone)]
struct Challenge {
    subject: String,
    /// The address that asked for it (for the per-client cap).
    client: IpAddr,
    action: OperatorAction,
    text: String,
    expires_ms: i64,
    used: bool,
}

/// The challenges issued and not yet expired (used ones are kept until they expire, so a replay
/// is told apart from an unknown id).
pub(crate) struct Challenges {
    issued: Mutex<HashMap<String, Challenge>>,
    ttl_ms: i64,
}

impl Challenges {
    pub(crate) fn new(ttl_secs: u64) -> Challenges {
        Challenges {
            issued: Mutex::new(HashMap::new()),
            ttl_ms: i64::try_from(ttl_secs).unwrap_or(i64::MAX / 1000) * 1000,
        }
    }

    fn issue(
        &self,
        subject: &str,
        action: OperatorAction,
        client: IpAddr,
        now_ms: i64,
    ) -> Result<(String, Challenge), ApiError> {
        let mut issued = self.issued.lock().unwrap_or_else(|p| p.into_inner());
        issued.retain(|_, c| c.expires_ms > now_ms);
        let outstanding = || issued.values().filter(|c| !c.used);
        // Seconds until the soonest of these expires (when a place comes free).
        let retry = |mut of: Box<dyn Iterator<Item = &Challenge> + '_>| {
            let soonest = of.by_ref().map(|c| c.expires_ms).min().unwrap_or(now_ms);
            u64::try_from((soonest - now_ms + 999) / 1000)
                .unwrap_or(1)
                .max(1)
        };
        let over = |limit: usize, of_what: &str, secs: u64| {
            let mut e = ApiError::new(
                ErrorCode::RateLimited,
                format!(
                    "at most {limit} operator challenges outstanding {of_what}; present one, or retry in {secs} s"
                ),
            );
            e.retry_after = Some(secs);
            e
        };
        if outstanding().filter(|c| c.client == client).count() >= PER_CLIENT {
            let secs = retry(Box::new(outstanding().filter(|c| c.client == client)));
            return Err(over(PER_CLIENT, "per client address", secs));
        }
        if outstanding().filter(|c| c.subject == subject).count() >= PER_SUBJECT {
            let secs = retry(Box::new(outstanding().filter(|c| c.subject == subject)));
            return Err(over(PER_SUBJECT, "per subject", secs));
        }
        if outstanding().count() >= MAX_OUTSTANDING {
            let mut e = ApiError::new(
                ErrorCode::Unavailable,
                format!("{MAX_OUTSTANDING} operator challenges outstanding; retry shortly"),
            );
            e.retry_after = Some(retry(Box::new(outstanding())));
            return Err(e);
        }
        let spent = issued.len() - outstanding().count();
        if spent >= MAX_SPENT {
            let mut expiries: Vec<i64> = issued
                .values()
                .filter(|c| c.used)
                .map(|c| c.expires_ms)
                .collect();
            expiries.sort_unstable();
            let cut = expiries[spent - MAX_SPENT / 2];
            issued.retain(|_, c| !c.used || c.expires_ms > cut);
        }
        let id = hex::encode(rand::random::<[u8; 16]>());
        let nonce = hex::encode(rand::random::<[u8; 32]>());
        let expires_ms = now_ms.saturating_add(self.ttl_ms);
        let text = format!(
            "{CHALLENGE_DOMAIN}\nsubject: {subject}\naction: {}\nchallenge: {id}\nnonce: {nonce}\nexpires: {}",
            action.as_str(),
            crate::evidence::rfc3339(expires_ms.div_euclid(1000))
        );
        let challenge = Challenge {
            subject: subject.to_string(),
            client,
            action,
            text,
            expires_ms,
            used: false,
        };
        issued.insert(id.clone(), challenge.clone());
        Ok((id, challenge))
    }

    /// Spends the challenge `id` for `action` (single use: this attempt is its only one, even
    /// when it asks for another action than the challenge was issued for).
    fn spend(&self, id: &str, action: OperatorAction, now_ms: i64) -> Result<Challenge, ApiError> {
        let mut issued = self.issued.lock().unwrap_or_else(|p| p.into_inner());
        let Some(c) = issued.get_mut(id) else {
            return Err(ApiError::new(
                ErrorCode::ChallengeUnknown,
                "no such challenge (ask POST /v1/operator/challenge for one)",
            ));
        };
        if c.used {
            return Err(ApiError::new(
                ErrorCode::ChallengeUsed,
                "this challenge was already presented once; ask for a new one",
            ));
        }
        c.used = true;
        let presented = c.clone();
        // Only the fact that it was used is kept (the text is what took room).
        c.text = String::new();
        let c = presented;
        if c.expires_ms <= now_ms {
            return Err(ApiError::new(
                ErrorCode::ChallengeExpired,
                "this challenge expired; ask for a new one",
            ));
        }
        if c.action != action {
            return Err(ApiError::new(
                ErrorCode::ChallengeOtherAction,
                format!(
                    "this challenge was issued to {}, not to {}; ask for one with action {:?}",
                    c.action.as_str(),
                    action.as_str(),
                    action.as_str()
                ),
            ));
        }
        Ok(c)
    }
}

/// `POST /v1/operator/challenge`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChallengeRequest {
    /// The subject's URL or its API id.
    pub subject: String,
    /// What the signature will authorise (and nothing else).
    pub action: OperatorAction,
}

/// A challenge to sign with EIP-191 `personal_sign`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ChallengeIssued {
    pub challenge_id: String,
    /// The subject's URL.
    pub subject: String,
    /// What a signature over it authorises.
    pub action: OperatorAction,
    /// RFC 3339: the signature must be presented before then.
    pub expires_at: String,
    /// The exact text to sign (UTF-8, as is: no trailing newline).
    pub text: String,
    /// Who may sign: the subject's payTo or a key its operator file lists in `operator_keys`.
    pub signers: String,
}

/// A signature over a challenge's text.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Proof {
    pub challenge_id: String,
    /// 65 bytes, hex (`0x` optional): r, s, v as `personal_sign` returns them.
    pub signature: String,
}

/// `POST /v1/operator/entries`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EntriesRequest {
    pub challenge_id: String,
    pub signature: String,
    /// Entries after this sequence number (the previous page's `next_after`).
    #[serde(default)]
    pub after: Option<u64>,
    /// At most this many (1 to 1000; default 200).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Every ledger entry about the subject, a page at a time, as stored: each entry's canonical
/// JSON with its chain fields, so they can be checked against the signed checkpoints
/// (`sha256(0x00 || entry) == hash`, its RFC 9162 leaf hash; the envelope's `prev` is the previous
/// entry's hash).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct OperatorEntries {
    pub subject: String,
    /// The address whose signature was accepted.
    pub signer: String,
    pub entries: Vec<OperatorEntry>,
    /// Present when more entries follow: ask again with `after` set to it (a new challenge).
    pub next_after: Option<u64>,
    /// The ledger's head when this page was read.
    pub head_seq: u64,
    pub head_hash: String,
    /// The latest tree checkpoint (a C2SP signed note by the reporter key) when there is one, and
    /// the inclusion proof of each entry of this page it covers: check them with the reporter key
    /// alone (`x402-probe ledger check-proof`, or any RFC 9162 verifier; leaf `seq - 1`, the
    /// entry's bytes hashed as `SHA-256(0x00 || entry)`), without anyone else's entries.
    pub tree_checkpoint: Option<String>,
    pub proofs: Vec<EntryProof>,
}

/// One entry's inclusion proof against `tree_checkpoint`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct EntryProof {
    pub seq: u64,
    /// The proof's hashes, standard base64, the leaf's sibling first.
    pub proof: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct OperatorEntry {
    pub seq: u64,
    pub at_ms: i64,
    pub kind: String,
    /// The previous entry's `hash`.
    pub prev: String,
    /// Hex SHA-256 of a zero byte then `entry`'s bytes (its leaf hash in the ledger's tree).
    pub hash: String,
    /// The entry's canonical JSON (RFC 8785), byte for byte as chained. Response bodies of a
    /// kilobyte or more are kept beside the ledger by hash and named, not inlined.
    pub entry: String,
}

/// `POST /v1/operator/notes`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoteRequest {
    pub challenge_id: String,
    pub signature: String,
    /// A revision note as the operator file writes one: `at` (RFC 3339), `kind`
    /// (`price_change` or `payto_rotation`), `amount`, `pay_to`, `text`.
    pub note: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct NotePosted {
    pub subject: String,
    pub signer: String,
    /// The ledger entry that records the note.
    pub ledger_seq: u64,
    /// The note as recorded (`at_ms` in unix milliseconds).
    pub note: Value,
}

pub(crate) async fn challenge(
    State(state): State<ApiState>,
    axum::Extension(client): axum::Extension<super::ClientAddr>,
    Json(body): Json<ChallengeRequest>,
) -> Result<(StatusCode, Json<ChallengeIssued>), ApiError> {
    let url = super::admin::subject_url(&state, &body.subject)?;
    let known = state
        .shared
        .store
        .subject(&url)
        .map_err(|e| ApiError::internal(format!("reading the subject: {e}")))?;
    if known.is_none() {
        return Err(ApiError::not_found(format!("no subject {url}")));
    }
    let now = state.shared.wall.now_ms();
    let (id, c) = state
        .challenges
        .issue(&url, body.action, client.0.ip(), now)?;
    Ok((
        StatusCode::CREATED,
        Json(ChallengeIssued {
            challenge_id: id,
            subject: c.subject,
            action: c.action,
            expires_at: crate::evidence::rfc3339(c.expires_ms.div_euclid(1000)),
            text: c.text,
            signers: "the subject's current payTo, or an address its operator file lists in operator_keys".into(),
        }),
    ))
}

/// Checks a proof: spends the challenge, recovers the signer, and accepts it only if it is the
/// subject's payTo or one of its operator keys. Returns the subject and the signer.
fn verify(
    state: &ApiState,
    proof: &Proof,
    action: OperatorAction,
) -> Result<(String, Address), ApiError> {
    let now = state.shared.wall.now_ms();
    let challenge = state.challenges.spend(&proof.challenge_id, action, now)?;
    let signature = Signature::from_str(proof.signature.trim()).map_err(|e| {
        ApiError::new(
            ErrorCode::BadSignature,
            format!("the signature is not 65 bytes of hex r, s, v: {e}"),
        )
    })?;
    let signer = signature
        .recover_address_from_msg(challenge.text.as_bytes())
        .map_err(|e| {
            ApiError::new(
                ErrorCode::BadSignature,
                format!("no signer can be recovered from the signature: {e}"),
            )
        })?;
    let allowed = operators_of(state, &challenge.subject)?;
    if !allowed.contains(&signer) {
        return Err(ApiError::new(
            ErrorCode::NotOperator,
            format!(
                "{signer} signed the challenge, which is neither the subject's payTo nor an operator key its operator file lists"
            ),
        ));
    }
    Ok((challenge.subject, signer))
}

/// The addresses that may prove control of `subject`: its payTo in its latest declaration, and
/// the operator keys of the operator file its latest run read.
fn operators_of(state: &ApiState, subject: &str) -> Result<Vec<Address>, ApiError> {
    let store = &state.shared.store;
    let internal = |e: crate::store::StoreError| ApiError::internal(format!("reading: {e}"));
    let mut allowed = Vec::new();
    let declared: Option<Declared> = store.latest_declared(subject).map_err(internal)?;
    if let Some(pay_to) = declared
        .and_then(|d| d.pay_to)
        .as_deref()
        .and_then(address_any_case)
    {
        allowed.push(pay_to);
    }
    if let Some(entry) = store
        .latest_subject_entry(subject, RecordKind::Run)
        .map_err(internal)?
    {
        let mut record = entry.record;
        store.restore_bodies(&mut record).map_err(internal)?;
        if let Record::Run(run) = record
            && let Some(file) = run
                .free
                .operator_file
                .as_ref()
                .and_then(|ex| ex.response.as_ref())
                .filter(|r| r.status == 200 && !r.body_truncated)
                .and_then(|r| parse_operator_file(&r.body).ok())
        {
            allowed.extend(file.operator_keys);
        }
    }
    Ok(allowed)
}

pub(crate) async fn entries(
    State(state): State<ApiState>,
    Json(body): Json<EntriesRequest>,
) -> Result<Json<OperatorEntries>, ApiError> {
    let limit = body.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request("limit: 1 to 1000"));
    }
    let proof = Proof {
        challenge_id: body.challenge_id,
        signature: body.signature,
    };
    let (subject, signer) = verify(&state, &proof, OperatorAction::ReadEntries)?;
    let store = state.shared.store.clone();
    let after = body.after.unwrap_or(0);
    let read = {
        let subject = subject.clone();
        tokio::task::spawn_blocking(move || {
            let head = store.head()?;
            // One more than the page, to know whether another follows.
            let rows = store.subject_stored_entries(&subject, after, limit + 1)?;
            // The proofs of the same page, against the latest tree checkpoint.
            let inclusion = store.inclusion_bundle(&subject, after, limit)?;
            Ok::<_, crate::store::StoreError>((head, rows, inclusion))
        })
        .await
    };
    let ((head_seq, head_hash), mut rows, inclusion) = match read {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Err(ApiError::internal(format!("reading entries: {e}"))),
        Err(e) => return Err(ApiError::internal(format!("reading entries: {e}"))),
    };
    let next_after = if rows.len() > limit {
        rows.truncate(limit);
        rows.last().map(|r| r.seq)
    } else {
        None
    };
    let entries = rows
        .into_iter()
        .map(|r| OperatorEntry {
            seq: r.seq,
            at_ms: r.at_ms,
            kind: r.kind.as_str().to_string(),
            prev: hex::encode(r.prev),
            hash: hex::encode(r.hash),
            // Canonical JSON is UTF-8 (written by serde_json).
            entry: String::from_utf8_lossy(&r.body).into_owned(),
        })
        .collect();
    let (tree_checkpoint, proofs) = match inclusion {
        Some(bundle) => (
            Some(bundle.checkpoint),
            bundle
                .entries
                .into_iter()
                .map(|e| EntryProof {
                    seq: e.index + 1,
                    proof: e.proof,
                })
                .collect(),
        ),
        None => (None, Vec::new()),
    };
    Ok(Json(OperatorEntries {
        subject,
        signer: signer.to_checksum(None),
        entries,
        next_after,
        head_seq,
        head_hash: hex::encode(head_hash),
        tree_checkpoint,
        proofs,
    }))
}

pub(crate) async fn notes(
    State(state): State<ApiState>,
    Json(body): Json<NoteRequest>,
) -> Result<(StatusCode, Json<NotePosted>), ApiError> {
    // The note is checked before the proof is spent: a malformed note costs no challenge.
    let note = parse_note(&body.note).map_err(|e| ApiError::bad_request(format!("note{e}")))?;
    let proof = Proof {
        challenge_id: body.challenge_id,
        signature: body.signature,
    };
    let (subject, signer) = verify(&state, &proof, OperatorAction::PostNote)?;
    let record = NoteRecord {
        subject: subject.clone(),
        at_ms: state.shared.clock.now_ms(),
        note: note.clone(),
        signer: signer.to_checksum(None),
        challenge_id: proof.challenge_id,
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    super::admin::send(&state, Command::Note(Box::new(record), tx)).await?;
    let seq = super::admin::receive(rx)
        .await?
        .map_err(super::admin::refused)?;
    Ok((
        StatusCode::CREATED,
        Json(NotePosted {
            subject,
            signer: signer.to_checksum(None),
            ledger_seq: seq,
            note: serde_json::to_value(&note).unwrap_or(Value::Null),
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn a_challenge_is_single_use_expires_and_is_capped() {
        let c = Challenges::new(60);
        let read = OperatorAction::ReadEntries;
        let (id, issued) = c.issue("https://a.example/x", read, A, 1_000).unwrap();
        assert!(issued.text.starts_with(CHALLENGE_DOMAIN));
        assert!(issued.text.contains("subject: https://a.example/x"));
        assert!(issued.text.contains("action: read_entries"));
        assert!(issued.text.contains(&id));
        assert_eq!(
            c.spend(&id, read, 2_000).unwrap().subject,
            "https://a.example/x"
        );
        assert_eq!(
            c.spend(&id, read, 2_000).unwrap_err().code,
            ErrorCode::ChallengeUsed
        );
        assert_eq!(
            c.spend("nope", read, 2_000).unwrap_err().code,
            ErrorCode::ChallengeUnknown
        );
        let (late, _) = c.issue("https://a.example/x", read, A, 1_000).unwrap();
        assert_eq!(
            c.spend(&late, read, 61_000).unwrap_err().code,
            ErrorCode::ChallengeExpired
        );
        // Bound to its action, either way, and spent by the refused attempt.
        for (issued_for, used_for) in [
            (read, OperatorAction::PostNote),
            (OperatorAction::PostNote, read),
        ] {
            let (id, _) = c
                .issue("https://a.example/x", issued_for, A, 1_000)
                .unwrap();
            assert_eq!(
                c.spend(&id, used_for, 2_000).unwrap_err().code,
                ErrorCode::ChallengeOtherAction
            );
            assert_eq!(
                c.spend(&id, issued_for, 2_000).unwrap_err().code,
                ErrorCode::ChallengeUsed
            );
        }
        // The caps: per client, per subject, in all; each full until its challenges are
        // presented or expire, and never filled by another client.
        let c = Challenges::new(60);
        for _ in 0..PER_CLIENT {
            c.issue("s", read, A, 0).unwrap();
        }
        let over = c.issue("s", read, A, 1).unwrap_err();
        assert_eq!(over.code, ErrorCode::RateLimited);
        assert!(over.message.contains("per client"), "{}", over.message);
        assert_eq!(over.retry_after, Some(60));
        assert!(c.issue("s", read, B, 1).is_ok(), "another client is apart");
        assert!(
            c.issue("s", read, A, 60_000).is_ok(),
            "expired ones make room"
        );
        let c = Challenges::new(60);
        let (id, _) = c.issue("s", read, A, 0).unwrap();
        for _ in 1..PER_CLIENT {
            c.issue("s", read, A, 0).unwrap();
        }
        c.spend(&id, read, 1).unwrap();
        assert!(
            c.issue("s", read, A, 1).is_ok(),
            "a presented one makes room"
        );
        let c = Challenges::new(60);
        let client = |i: usize| IpAddr::from([10, 0, (i >> 8) as u8, i as u8]);
        for i in 0..PER_SUBJECT {
            c.issue("s", read, client(i), 0).unwrap();
        }
        let over = c.issue("s", read, client(PER_SUBJECT), 1).unwrap_err();
        assert_eq!(over.code, ErrorCode::RateLimited);
        assert!(over.message.contains("per subject"), "{}", over.message);
        assert!(c.issue("t", read, client(PER_SUBJECT), 1).is_ok());
        let c = Challenges::new(60);
        for i in 0..MAX_OUTSTANDING {
            c.issue(&format!("s{i}"), read, client(i), 0).unwrap();
        }
        assert_eq!(
            c.issue("t", read, B, 1).unwrap_err().code,
            ErrorCode::Unavailable
        );
    }
}
