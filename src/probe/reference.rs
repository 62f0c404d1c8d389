//! The reference side of a paid call (R6), IO only: which subjects are linked to which reference
//! adapter (the configuration's word, never guessed), and the reads of the source right before
//! and right after the paid request (`paid::paid_call`), each recorded with its URL, time and the
//! SHA-256 of its bytes. What they mean is decided by `checks::reference`.

use std::collections::BTreeMap;

use crate::checks::reference::{self, Source, TOTAL_SUPPLY_CALLDATA};
use crate::clock::Clock;
use crate::evidence::chain::ChainRead;
use crate::evidence::reference::{ReferenceId, ReferenceRead, ReferenceSeen};
use crate::evidence::sha256_hex;
use crate::http_url::canonical_subject_url;
use crate::probe::http::{FetchConfig, FetchRequest, fetch};
use crate::probe::rpc::Rpc;

/// The largest reference document read (an npm version document is a few KiB).
pub const MAX_REFERENCE_BYTES: usize = 1024 * 1024;

/// Which subjects are compared with which reference, and where the sources are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReferenceConfig {
    /// The npm registry's base URL (`[probe] npm_registry`, `--npm-registry`); none: subjects
    /// linked to `npm` are `unmeasured` (not read).
    pub npm_registry: Option<String>,
    /// Subject (canonical URL) -> the adapter it is linked to.
    pub links: BTreeMap<String, ReferenceId>,
}

impl ReferenceConfig {
    /// Links `subject` (any form of its URL) to `reference`.
    pub fn link(&mut self, subject: &str, reference: ReferenceId) {
        self.links.insert(key_of(subject), reference);
    }

    /// The adapter `subject` is linked to, if any.
    pub fn linked(&self, subject: &str) -> Option<ReferenceId> {
        self.links.get(&key_of(subject)).copied()
    }
}

fn key_of(subject: &str) -> String {
    canonical_subject_url(subject).unwrap_or_else(|_| subject.to_string())
}

/// What the reads need.
pub struct ReferenceReader<'a> {
    pub config: &'a ReferenceConfig,
    pub fetch: &'a FetchConfig,
    pub rpc: &'a Rpc,
    pub clock: &'a dyn Clock,
}

/// The reference side of `subject`'s paid call for `request`, before the call: `None` when the
/// subject is linked to no reference; else the adapter, the key and the first read.
pub async fn before(
    reader: &ReferenceReader<'_>,
    subject: &str,
    request: &FetchRequest,
) -> Option<ReferenceSeen> {
    let id = reader.config.linked(subject)?;
    let mut seen = ReferenceSeen {
        adapter: id,
        key: None,
        skipped: None,
        before: None,
        after: None,
    };
    let Some(adapter) = reference::adapter(id) else {
        seen.skipped = Some(format!("{id} is not declared in probes/references.json"));
        return Some(seen);
    };
    seen.key = reference::request_key(adapter, request);
    if seen.key.is_none() {
        seen.skipped = Some(format!(
            "the request names no {} (query {:?}, body {:?})",
            adapter.key.what, adapter.key.query, adapter.key.body
        ));
        return Some(seen);
    }
    if adapter.source == Source::NpmRegistry && reader.config.npm_registry.is_none() {
        seen.skipped = Some("no npm registry is configured (npm_registry)".into());
        return Some(seen);
    }
    seen.before = read(reader, adapter.source, seen.key.as_deref()).await;
    Some(seen)
}

/// The read after the paid response, when the one before was made.
pub async fn after(reader: &ReferenceReader<'_>, seen: &mut ReferenceSeen) {
    if seen.skipped.is_some() || seen.before.is_none() {
        return;
    }
    let Some(adapter) = reference::adapter(seen.adapter) else {
        return;
    };
    seen.after = read(reader, adapter.source, seen.key.as_deref()).await;
}

async fn read(
    reader: &ReferenceReader<'_>,
    source: Source,
    key: Option<&str>,
) -> Option<ReferenceRead> {
    let key = key?;
    let at_ms = reader.clock.now_ms();
    match source {
        Source::NpmRegistry => {
            let registry = reader.config.npm_registry.as_deref()?;
            let url = reference::npm_latest_url(registry, key);
            let mut cfg = reader.fetch.clone();
            cfg.max_body_bytes = cfg.max_body_bytes.min(MAX_REFERENCE_BYTES);
            let request = FetchRequest::get(url).with_header("accept", "application/json");
            let exchange = fetch(&cfg, &request).await;
            Some(ReferenceRead::Http {
                at_ms,
                exchange: Box::new(exchange),
            })
        }
        Source::Chain => {
            let to = key.to_string();
            let data = format!("0x{}", hex::encode(TOTAL_SUPPLY_CALLDATA));
            let (block, result) = match crate::evidence::paid::address_any_case(key) {
                None => (
                    ChainRead::Skipped {
                        why: "the request's token is not an address".into(),
                    },
                    ChainRead::Skipped {
                        why: format!("{key:?} is not an address"),
                    },
                ),
                Some(token) => {
                    let (block, call) = tokio::join!(
                        reader.rpc.block_number(),
                        reader.rpc.eth_call(token, &TOTAL_SUPPLY_CALLDATA)
                    );
                    (
                        ChainRead::from_result(block),
                        ChainRead::from_result(call.map(|b| b.to_vec())),
                    )
                }
            };
            let (result, sha256) = match result {
                ChainRead::Read { value } => (
                    ChainRead::Read {
                        value: format!("0x{}", hex::encode(&value)),
                    },
                    Some(sha256_hex(&value)),
                ),
                ChainRead::Failed { error } => (ChainRead::Failed { error }, None),
                ChainRead::Skipped { why } => (ChainRead::Skipped { why }, None),
            };
            Some(ReferenceRead::Chain {
                at_ms,
                rpc_url: reader.rpc.url().to_string(),
                to,
                data,
                block,
                result,
                sha256,
            })
        }
    }
}
