//! `x402-probe ledger feedback`: ERC-8004 feedback for the subjects that declare an agent
//! identity, read from the ledger (`feedback/` makes it; `feedback/submit.rs` sends it).

use std::path::Path;

use anyhow::{Context, Result};

use crate::api::signed::envelope_parts;
use crate::config::{DaemonConfig, KeySourceConfig, WalletSource};
use crate::evidence::CheckId;
use crate::feedback::submit::{Submitter, feedback_uri};
use crate::feedback::{EvidenceRef, Feedback, Rated, feedback};
use crate::ledger::key::ReporterKey;
use crate::ledger::record::{Record, RecordKind};
use crate::probe::rpc::Rpc;
use crate::score::document::ScoreDocument;
use crate::secret::KeySource;
use crate::store::{SqliteStore, Store, checked_latest_score};
use crate::wallet::Wallet;
use crate::x402::operator::parse_agent_registrations;

pub(crate) fn run(config_path: &Path, out: &Path, submit: bool) -> Result<i32> {
    let config = match DaemonConfig::read(config_path).and_then(|c| c.validate().map(|()| c)) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(2);
        }
    };
    let Some(settings) = config.feedback.clone() else {
        eprintln!("error: {} has no [feedback] table", config_path.display());
        return Ok(2);
    };
    let registry = match settings.validate(config.pay.as_ref()) {
        Ok(registry) => registry,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(2);
        }
    };
    let key = match &settings.wallet {
        WalletSource::KeyFile(path) => KeySource::File(path.clone()),
        WalletSource::Credential(name) => KeySource::credential(name)?,
    };
    let submitter = Submitter {
        rpc: Rpc::new(settings.rpc.as_str()),
        registry,
        chain_id: settings.chain_id,
        key,
        uri_base: settings.uri_base.clone(),
        max_gas_per_feedback: settings.max_gas_per_feedback,
        max_fee_per_gas_wei: settings.max_fee_per_gas_wei,
        max_wei_per_run: settings.max_wei_per_run,
    };
    let client = submitter.address()?;
    // The same key under another name is still the payment wallet.
    if let Some(pay) = &config.pay {
        let paying = match &pay.wallet {
            WalletSource::KeyFile(path) => Wallet::from_key_file(path)?,
            WalletSource::Credential(name) => Wallet::from_credential(name)?,
        };
        if paying.address() == client {
            eprintln!(
                "error: [feedback] wallet is the [pay] wallet's key ({client}): feedback needs a wallet of its own"
            );
            return Ok(2);
        }
    }
    let state_dir = match &config.daemon.state_dir {
        Some(dir) => dir.clone(),
        None => crate::config::default_state_dir()?,
    };
    let reporter = match &config.daemon.reporter_key {
        KeySourceConfig::KeyFile(path) => ReporterKey::from_key_file(path)?,
        KeySourceConfig::Credential(name) => ReporterKey::from_credential(name)?,
    };
    let store = SqliteStore::open(&state_dir)
        .with_context(|| format!("opening the ledger in {}", state_dir.display()))?;
    // Runs are read back with their results derived under the daemon's rubric.
    store.use_rubric(&config.probe.prepare()?.rubric);

    let mut all = Vec::new();
    for subject in store.subjects()? {
        all.extend(subject_feedback(
            &store,
            &subject.url,
            &reporter,
            client,
            &settings,
            registry,
        )?);
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for item in &all {
        let path = out.join(&item.file_name);
        std::fs::write(&path, &item.file).with_context(|| format!("writing {}", path.display()))?;
        let mut line = serde_json::to_value(item)?;
        line["feedback_uri"] = feedback_uri(settings.uri_base.as_deref(), item).into();
        println!("{line}");
    }
    eprintln!(
        "{} feedback for {} agents written to {}",
        all.len(),
        all.iter()
            .map(|f| (&f.agent_registry, &f.agent_id))
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        out.display()
    );
    if !submit {
        return Ok(0);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match runtime.block_on(submitter.submit(&all, out)) {
        Ok(given) => {
            for (item, given) in all.iter().zip(&given) {
                println!(
                    "{}",
                    serde_json::json!({"feedback_hash": item.feedback_hash, "given": given})
                );
            }
            Ok(0)
        }
        Err(e) => {
            eprintln!("error: sending stopped: {e:#}");
            Ok(1)
        }
    }
}

/// The feedback for one subject: none unless it has a score and the run before it read an
/// operator file that declares an agent in the configured registry.
fn subject_feedback(
    store: &SqliteStore,
    url: &str,
    reporter: &ReporterKey,
    client: alloy::primitives::Address,
    settings: &crate::config::FeedbackConfig,
    registry: alloy::primitives::Address,
) -> Result<Vec<Feedback>> {
    let Some(row) = checked_latest_score(store, url)?.latest else {
        return Ok(Vec::new());
    };
    let document = ScoreDocument::from_slice(&row.document)
        .with_context(|| format!("the latest score of {url} does not read back"))?;
    let Some(mut run) =
        store.latest_subject_entry_before(url, RecordKind::Run, row.as_of_ms + 1)?
    else {
        return Ok(Vec::new());
    };
    store.restore_bodies(&mut run.record)?;
    let Record::Run(observed) = &run.record else {
        return Ok(Vec::new());
    };
    let Some(file) = observed
        .free
        .operator_file
        .as_ref()
        .and_then(|exchange| exchange.response.as_ref())
        .filter(|response| response.status == 200 && !response.body_truncated)
    else {
        return Ok(Vec::new());
    };
    let registrations = match parse_agent_registrations(&file.body) {
        Ok(registrations) => registrations,
        Err(why) => {
            eprintln!("{url}: its operator file's registrations are not read: {why}");
            return Ok(Vec::new());
        }
    };
    let reachable = observed
        .results
        .iter()
        .find(|c| c.id == CheckId::R1)
        .map(|c| c.outcome);
    let evidence: Vec<EvidenceRef> = store
        .subject_stored_entries(url, run.seq - 1, 10_000)?
        .into_iter()
        .filter(|e| e.seq == run.seq || e.seq == row.seq)
        .map(|e| EvidenceRef {
            seq: e.seq,
            kind: e.kind,
            hash: hex::encode(e.hash),
        })
        .collect();
    let (mut envelope, message) = envelope_parts(&row.document, row.seq, &reporter.public_key())?;
    envelope.signature = hex::encode(reporter.sign(&message)?);
    let signed_score = serde_json::to_value(&envelope)?;
    Ok(registrations
        .iter()
        .filter(|agent| agent.chain_id == settings.chain_id && agent.registry == registry)
        .flat_map(|agent| {
            feedback(&Rated {
                endpoint: url,
                agent,
                client,
                document: &document,
                reachable,
                evidence: &evidence,
                signed_score: &signed_score,
            })
        })
        .collect())
}
