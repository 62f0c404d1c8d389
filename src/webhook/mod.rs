//! Webhooks: events about a subject (its verdict changed, a gate started binding, a revision
//! changed its payTo) posted to the operator's receivers.
//!
//! Events are detected where their cause is recorded (a score, a revision), and each one is put
//! in the store's outbox by the same transaction that appends that entry: an event exists exactly
//! when its cause does, whatever crashes. A delivery task ([`deliver`]) posts the outbox, signed
//! with HMAC-SHA256, retries with exponential backoff and jitter up to a number of attempts, and
//! picks up where it was after a restart. Delivery is at least once: a receiver deduplicates by
//! the event id. The payload, the headers and how to verify a signature are in the README
//! ("Webhooks").

pub mod deliver;

// The kinds of event are the outbox's (`store::event_kind`), which keeps them.
pub use crate::store::event_kind::EventKind;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use serde_json::json;
use zeroize::Zeroizing;

use crate::clock::rfc3339_ms;
use crate::config::WebhookConfig;
use crate::evidence::declared::Declared;
use crate::ledger::chain::Broken;
use crate::rubric::Verdict;
use crate::score::document::ScoreDocument;
use crate::secret::SecretError;
use crate::store::{NewOutboxEvent, Store, StoreError};

/// The header carrying `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`.
pub const SIGNATURE_HEADER: &str = "x402-probe-signature";
/// The header carrying the event id (the same on every attempt).
pub const EVENT_ID_HEADER: &str = "x402-probe-event-id";
/// The header carrying the event type.
pub const EVENT_TYPE_HEADER: &str = "x402-probe-event-type";
/// Shortest secret accepted, in bytes.
pub const MIN_SECRET_BYTES: usize = 16;

/// One configured receiver, its secret read.
pub struct Destination {
    pub url: String,
    pub secret: Zeroizing<Vec<u8>>,
    pub events: BTreeSet<EventKind>,
    pub options: DeliveryOptions,
}

impl std::fmt::Debug for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Destination")
            .field("url", &self.url)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

/// How one receiver is tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryOptions {
    pub max_attempts: u32,
    pub retry_initial_ms: u64,
    pub retry_max_ms: u64,
    pub timeout_ms: u64,
}

/// What a subject's last recorded score published, to compare the next one with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub verdict: Verdict,
    /// Flags of the gates that bind.
    pub binding: BTreeSet<String>,
}

impl Published {
    pub fn of(doc: &ScoreDocument) -> Published {
        Published {
            verdict: doc.verdict.verdict,
            binding: doc
                .gates
                .iter()
                .filter(|g| g.binding)
                .map(|g| g.flag.clone())
                .collect(),
        }
    }

    /// From a stored score row (the document the store keeps beside entry `seq`). A document
    /// that does not read, or names a verdict this build does not know, is an error naming the
    /// row: never taken for "no earlier score", which would silently skip its events.
    fn of_stored(subject: &str, seq: u64, document: &[u8]) -> Result<Published, Broken> {
        #[derive(serde::Deserialize)]
        struct Stored {
            verdict: StoredVerdict,
            gates: Vec<StoredGate>,
        }
        #[derive(serde::Deserialize)]
        struct StoredVerdict {
            verdict: Verdict,
        }
        #[derive(serde::Deserialize)]
        struct StoredGate {
            flag: String,
            binding: bool,
        }
        let stored: Stored = serde_json::from_slice(document).map_err(|e| Broken {
            seq,
            why: format!("the score row of {subject}: its document's verdict or gates: {e}"),
        })?;
        Ok(Published {
            verdict: stored.verdict.verdict,
            binding: stored
                .gates
                .into_iter()
                .filter(|g| g.binding)
                .map(|g| g.flag)
                .collect(),
        })
    }
}

/// An event detected, before the ledger seq of its cause is known.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingEvent {
    pub kind: EventKind,
    pub subject: String,
    pub at_ms: i64,
    pub data: serde_json::Value,
}

/// Why the webhooks could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("[[webhook]] {url}: its secret: {source}")]
    Secret {
        url: String,
        #[source]
        source: SecretError,
    },
    #[error("[[webhook]] {url}: its secret is {len} bytes; at least {MIN_SECRET_BYTES} are needed")]
    ShortSecret { url: String, len: usize },
    #[error("the webhook client: {0}")]
    Client(String),
}

/// The configured receivers and what detection remembers.
#[derive(Debug, Default)]
pub struct Webhooks {
    destinations: Vec<Destination>,
    /// Per subject, what its last recorded score published (read from the store when unknown).
    last: Mutex<BTreeMap<String, Published>>,
    /// Woken when events were committed, so delivery starts at once.
    pub wake: tokio::sync::Notify,
}

impl Webhooks {
    /// Reads every receiver's secret (a private file, or a systemd credential).
    pub fn from_config(configs: &[WebhookConfig]) -> Result<Webhooks, WebhookError> {
        let mut destinations = Vec::with_capacity(configs.len());
        for c in configs {
            let url = c.url.to_string();
            let source = c
                .secret
                .key_source()
                .map_err(|source| WebhookError::Secret {
                    url: url.clone(),
                    source,
                })?;
            let secret =
                source
                    .read_secret("webhook secret")
                    .map_err(|source| WebhookError::Secret {
                        url: url.clone(),
                        source,
                    })?;
            if secret.len() < MIN_SECRET_BYTES {
                return Err(WebhookError::ShortSecret {
                    url,
                    len: secret.len(),
                });
            }
            destinations.push(Destination {
                url,
                secret,
                events: c.events.iter().copied().collect(),
                options: DeliveryOptions {
                    max_attempts: c.max_attempts.get() as u32,
                    retry_initial_ms: c.retry_initial_ms.get(),
                    retry_max_ms: c.retry_max_ms.get(),
                    timeout_ms: c.timeout_ms.get(),
                },
            });
        }
        Ok(Webhooks {
            destinations,
            ..Webhooks::default()
        })
    }

    pub fn is_empty(&self) -> bool {
        self.destinations.is_empty()
    }

    pub fn destinations(&self) -> &[Destination] {
        &self.destinations
    }

    fn wants(&self, kind: EventKind) -> bool {
        self.destinations.iter().any(|d| d.events.contains(&kind))
    }

    /// The events a new score of `subject` causes, compared with its last recorded score (none
    /// for a first score: nothing changed). Call under the write lock; [`Webhooks::remember`] the
    /// returned state once the score is recorded.
    pub fn score_events(
        &self,
        store: &dyn Store,
        subject: &str,
        doc: &ScoreDocument,
        at_ms: i64,
    ) -> Result<(Vec<PendingEvent>, Published), StoreError> {
        let now = Published::of(doc);
        if self.is_empty() {
            return Ok((Vec::new(), now));
        }
        let known = self
            .last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(subject)
            .cloned();
        let before = match known {
            Some(p) => Some(p),
            None => crate::store::checked_scores(store, subject)?
                .latest
                .map(|row| Published::of_stored(subject, row.seq, &row.document))
                .transpose()?,
        };
        let Some(before) = before else {
            return Ok((Vec::new(), now));
        };
        let mut events = Vec::new();
        if before.verdict != now.verdict && self.wants(EventKind::VerdictChanged) {
            events.push(PendingEvent {
                kind: EventKind::VerdictChanged,
                subject: subject.to_string(),
                at_ms,
                data: json!({
                    "from": before.verdict.as_str(),
                    "to": now.verdict.as_str(),
                    "capped_score": doc.capped_score.as_f64(),
                    "band": {"low": doc.band.low, "high": doc.band.high},
                    "grade": doc.grade,
                    "reasons": doc.verdict.reasons.iter().map(|r| json!({"code": r.code, "detail": r.detail})).collect::<Vec<_>>(),
                }),
            });
        }
        if self.wants(EventKind::GateBinding) {
            for gate in doc
                .gates
                .iter()
                .filter(|g| g.binding && !before.binding.contains(&g.flag))
            {
                events.push(PendingEvent {
                    kind: EventKind::GateBinding,
                    subject: subject.to_string(),
                    at_ms,
                    data: json!({
                        "flag": gate.flag,
                        "check": gate.check,
                        "cap": gate.cap,
                        "verdict": gate.verdict.map(Verdict::as_str),
                        "reason": gate.reason,
                    }),
                });
            }
        }
        Ok((events, now))
    }

    /// Keeps what a recorded score published.
    pub fn remember(&self, subject: &str, published: Published) {
        if self.is_empty() {
            return;
        }
        self.last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(subject.to_string(), published);
    }

    /// The event a new revision causes when it declares another payTo than the one before
    /// (compared without regard to case; nothing when either is unknown).
    pub fn revision_event(
        &self,
        subject: &str,
        revision: &str,
        previous: Option<(&str, &Declared)>,
        now: &Declared,
        at_ms: i64,
    ) -> Option<PendingEvent> {
        if !self.wants(EventKind::PayToChanged) {
            return None;
        }
        let (previous_id, before) = previous?;
        let from = before.pay_to.as_deref()?;
        let to = now.pay_to.as_deref()?;
        if from.eq_ignore_ascii_case(to) {
            return None;
        }
        Some(PendingEvent {
            kind: EventKind::PayToChanged,
            subject: subject.to_string(),
            at_ms,
            data: json!({
                "revision": revision,
                "previous_revision": previous_id,
                "from": from,
                "to": to,
            }),
        })
    }

    /// Each event with the receivers that subscribed to its type (events nobody wants dropped).
    pub fn route(&self, events: Vec<PendingEvent>) -> Routed {
        Routed(
            events
                .into_iter()
                .map(|e| {
                    let to = self
                        .destinations
                        .iter()
                        .filter(|d| d.events.contains(&e.kind))
                        .map(|d| d.url.clone())
                        .collect::<Vec<_>>();
                    (e, to)
                })
                .filter(|(_, to)| !to.is_empty())
                .collect(),
        )
    }

    /// The outbox rows of `events`, caused by the ledger entry `seq`.
    pub fn outbox_rows(&self, events: Vec<PendingEvent>, seq: u64) -> Vec<NewOutboxEvent> {
        self.route(events).rows(seq)
    }
}

/// Events and their receivers, waiting for the ledger seq of their cause.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Routed(Vec<(PendingEvent, Vec<String>)>);

impl Routed {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The outbox rows, once the entry that causes them has its seq: one per receiver, all with
    /// the event's one id.
    pub fn rows(self, seq: u64) -> Vec<NewOutboxEvent> {
        let mut rows = Vec::new();
        for (i, (e, to)) in self.0.into_iter().enumerate() {
            let event_id = event_id(&e, seq, i);
            let body = serde_json::to_vec(&json!({
                "id": event_id,
                "type": e.kind.as_str(),
                "created_at": rfc3339_ms(e.at_ms),
                "subject": e.subject,
                "ledger_seq": seq,
                "data": e.data,
            }))
            .unwrap_or_default();
            for url in to {
                rows.push(NewOutboxEvent {
                    event_id: event_id.clone(),
                    webhook: url,
                    kind: e.kind,
                    created_ms: e.at_ms,
                    body: body.clone(),
                });
            }
        }
        rows
    }
}

/// An event's id: unique (a random part) and telling (its cause's ledger seq and its place).
fn event_id(e: &PendingEvent, seq: u64, i: usize) -> String {
    let nonce: [u8; 8] = rand::random();
    format!("evt_{seq}_{i}_{}_{}", e.kind.as_str(), hex::encode(nonce))
}

/// The signature header's value for `body` sent at `unix_seconds`.
pub fn signature(secret: &[u8], unix_seconds: i64, body: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac =
        Hmac::<sha2::Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(unix_seconds.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!(
        "t={unix_seconds},v1={}",
        hex::encode(mac.finalize().into_bytes())
    )
}

/// Checks a signature header as a receiver would: the HMAC over the timestamp and the body, in
/// constant time, and a timestamp within `tolerance_s` of `now_s`.
pub fn verify_signature(
    secret: &[u8],
    header: &str,
    body: &[u8],
    now_s: i64,
    tolerance_s: i64,
) -> bool {
    use hmac::{Hmac, Mac};
    let mut t = None;
    let mut v1 = None;
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", value)) => t = value.parse::<i64>().ok(),
            Some(("v1", value)) => v1 = hex::decode(value).ok(),
            _ => {}
        }
    }
    let (Some(t), Some(v1)) = (t, v1) else {
        return false;
    };
    if (now_s - t).abs() > tolerance_s {
        return false;
    }
    let mut mac =
        Hmac::<sha2::Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(&v1).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_and_any_change_breaks_it() {
        let secret = b"0123456789abcdef-secret";
        let body = br#"{"id":"evt_1"}"#;
        let header = signature(secret, 1_700_000_000, body);
        assert!(header.starts_with("t=1700000000,v1="));
        assert!(verify_signature(secret, &header, body, 1_700_000_100, 300));
        assert!(!verify_signature(
            secret,
            &header,
            b"{\"id\":\"evt_2\"}",
            1_700_000_100,
            300
        ));
        assert!(!verify_signature(
            b"another secret!!",
            &header,
            body,
            1_700_000_100,
            300
        ));
        assert!(
            !verify_signature(secret, &header, body, 1_700_001_000, 300),
            "stale"
        );
        let moved = header.replace("t=1700000000", "t=1700000001");
        assert!(!verify_signature(secret, &moved, body, 1_700_000_100, 300));
        assert!(!verify_signature(secret, "v1=zz", body, 1_700_000_100, 300));
    }

    #[test]
    fn a_pay_to_change_is_an_event_and_a_case_change_is_not() {
        let hooks = Webhooks {
            destinations: vec![Destination {
                url: "http://127.0.0.1:9/hook".into(),
                secret: Zeroizing::new(b"0123456789abcdef".to_vec()),
                events: EventKind::ALL.into_iter().collect(),
                options: DeliveryOptions {
                    max_attempts: 3,
                    retry_initial_ms: 100,
                    retry_max_ms: 1000,
                    timeout_ms: 1000,
                },
            }],
            ..Webhooks::default()
        };
        let declared = |pay_to: &str| Declared {
            at_ms: 0,
            fingerprint: "f".into(),
            network: None,
            asset: None,
            amount: None,
            pay_to: Some(pay_to.into()),
            offer_signer: None,
        };
        let a = declared("0xAbC0000000000000000000000000000000000001");
        let a_lower = declared("0xabc0000000000000000000000000000000000001");
        let b = declared("0x0000000000000000000000000000000000000002");
        assert!(
            hooks
                .revision_event("s", "r1", Some(("r0", &a)), &a_lower, 5)
                .is_none()
        );
        assert!(hooks.revision_event("s", "r0", None, &a, 5).is_none());
        let e = hooks
            .revision_event("s", "r1", Some(("r0", &a)), &b, 5)
            .unwrap();
        assert_eq!(e.kind, EventKind::PayToChanged);
        let rows = hooks.outbox_rows(vec![e], 42);
        assert_eq!(rows.len(), 1);
        let body: serde_json::Value = serde_json::from_slice(&rows[0].body).unwrap();
        assert_eq!(body["type"], "pay_to_changed");
        assert_eq!(body["ledger_seq"], 42);
        assert_eq!(body["id"], rows[0].event_id.as_str());
        assert_eq!(
            body["data"]["to"],
            "0x0000000000000000000000000000000000000002"
        );
    }

    /// A stored score's verdict that this build does not know is an error naming the score's
    /// entry: before, it read as "no earlier score", and the verdict change went unannounced.
    #[test]
    fn a_stored_score_is_read_with_its_verdict_or_refused_by_its_row() {
        let doc = |verdict: &str| {
            serde_json::to_vec(&serde_json::json!({
                "verdict": {"verdict": verdict, "reasons": []},
                "gates": [
                    {"flag": "down", "check": "R1", "binding": true},
                    {"flag": "overcharge", "check": "H5", "binding": false}
                ],
            }))
            .unwrap()
        };
        for verdict in Verdict::ALL {
            let read = Published::of_stored("s", 7, &doc(verdict.as_str())).unwrap();
            assert_eq!(read.verdict, verdict);
            assert_eq!(read.binding, BTreeSet::from(["down".to_string()]));
        }
        let err = Published::of_stored("https://a.example/x", 7, &doc("fine")).unwrap_err();
        assert_eq!(err.seq, 7);
        assert!(
            err.why.contains("the score row of https://a.example/x")
                && err.why.contains("unknown variant `fine`"),
            "{err}"
        );
        assert!(Published::of_stored("s", 8, b"{\"gates\": []}").is_err());
    }
}
