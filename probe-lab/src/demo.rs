//! `x402-probe-lab demo`: the main job on the embedded default, the local lab. Brings the lab up,
//! probes every lab endpoint for free, pays each once under small caps on the lab chain, scores each
//! run, prints one line per endpoint (score, band, grade, verdict, binding gates, failing checks, and
//! whether the lab's promise held) and shuts the lab down.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use rustls_pki_types::pem::PemObject;
use serde_json::Value;

use x402_probe::cmd::demo::Args;
use x402_probe::config::{HttpUrl, ListingConfig, ProbeConfig, Provenance, SpacingMs};
use x402_probe::evidence::Outcome;
use x402_probe::probe::paid::{PaidContext, PaidOptions};
use x402_probe::probe::rpc::Rpc;
use x402_probe::progress::{Mode, Progress};
use x402_probe::rubric::Rubric;
use x402_probe::runner::{self, RunOutput};
use x402_probe::spend::{AllowedAsset, PayPolicy, SpendStore};
use x402_probe::wallet::Wallet;

/// The demo's caps: a cent a call is the lab's price; these leave room and nothing more.
const MAX_PER_CALL: &str = "0.05";
const MAX_PER_SUBJECT_PER_DAY: &str = "0.10";
const MAX_PER_DAY: &str = "5";

pub fn run(args: Args) -> Result<i32> {
    x402_probe::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(demo(args))
}

async fn demo(args: Args) -> Result<i32> {
    let started = Instant::now();
    let options = x402_lab::LabOptions {
        scenarios: (!args.scenarios.is_empty()).then(|| args.scenarios.clone()),
        ..x402_lab::LabOptions::default()
    };
    let lab = x402_lab::Lab::start_with(options)
        .await
        .context("starting the lab (did `npm ci` run?)")?;
    let manifest = lab.manifest();
    println!(
        "lab up in {:.2} s: anvil chain {} at {}, token {}, {} endpoints, catalogue {}",
        lab.startup_time.as_secs_f64(),
        lab.chain_id,
        manifest.rpc,
        manifest.token,
        lab.endpoints.len(),
        manifest.catalogue
    );
    let rubric = Rubric::embedded_default();
    let rpc = Rpc::new(lab.rpc_url());
    let ca = rustls_pki_types::CertificateDer::from_pem_slice(lab.ca_pem.as_bytes())
        .context("lab CA")?;
    let url = |u: &str| {
        u.parse::<HttpUrl>()
            .map_err(|e| anyhow::anyhow!("lab URL: {e}"))
    };
    let probe = ProbeConfig {
        samples: args.samples,
        spacing_ms: SpacingMs::new(50)?,
        listing: Some(ListingConfig {
            url: url(&manifest.catalogue)?,
            max_pages: Default::default(),
            max_bytes: Default::default(),
            deadline_ms: Default::default(),
        }),
        rpc: Some(url(lab.rpc_url())?),
        solana_rpc: lab.solana_rpc_url().map(url).transpose()?,
        npm_registry: Some(url(&lab.npm_registry_url)?),
        assets: vec![lab.token.address()],
        facilitators: vec![lab.facilitator_signer],
        allow_private: true,
        vantage: "demo".parse().map_err(|e: String| anyhow::anyhow!(e))?,
        provenance: Provenance::TestHarness,
        ..ProbeConfig::default()
    };
    let cfg = probe.free_probe_config(vec![ca]);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);

    // Free runs of every endpoint at once; the paid calls one by one after them (one wallet).
    println!("probing {} endpoints for free...", lab.endpoints.len());
    let mut runs = tokio::task::JoinSet::new();
    for (i, e) in lab.endpoints.iter().enumerate() {
        let (cfg, rubric, url) = (cfg.clone(), rubric.clone(), e.url.clone());
        runs.spawn(async move { (i, runner::free_run(&cfg, &rubric, &url, now).await) });
    }
    let mode = Mode::for_stderr(args.quiet);
    let mut progress = Progress::new("free runs", lab.endpoints.len() as u64, mode);
    let mut outs: Vec<Option<RunOutput>> = (0..lab.endpoints.len()).map(|_| None).collect();
    while let Some(joined) = runs.join_next().await {
        let (i, out) = joined.context("a probe task failed")?;
        outs[i] = Some(out);
        progress.advance(1);
    }
    progress.finish();
    let mut outs: Vec<RunOutput> = outs
        .into_iter()
        .map(|o| o.expect("every run finished"))
        .collect();

    if !args.no_pay {
        let wallet = Wallet::from_key_file(&lab.payer_key_file)?;
        let store = SpendStore::open(&lab.dir().join("spend"))?;
        let usd = |v: &str| v.parse().map_err(|e| anyhow::anyhow!("{e}"));
        let mut allowlist = AllowedAsset::canonical_usdc();
        allowlist.push(AllowedAsset {
            network: format!("eip155:{}", lab.chain_id),
            asset: lab.token.address(),
            decimals: 6,
            usd_per_unit: usd("1")?,
        });
        let mut policy = PayPolicy::new(
            usd(MAX_PER_CALL)?,
            usd(MAX_PER_SUBJECT_PER_DAY)?,
            usd(MAX_PER_DAY)?,
            allowlist,
        );
        // Solana entries are paid from the lab's Solana payer, in devnet USDC, when the SVM runs.
        let solana = match (&lab.solana_payer_key_file, lab.solana_rpc_url()) {
            (Some(key), Some(url)) => Some((
                x402_probe::solana_wallet::SolanaWallet::from_key_file(key)?,
                x402_probe::probe::solana_rpc::SolanaRpc::new(url),
            )),
            _ => None,
        };
        if solana.is_some() {
            policy.svm_allowlist = x402_probe::spend::AllowedSvmAsset::canonical_usdc();
        }
        // R6: the reference endpoints linked to their sources, as `[[subject]] reference` does.
        let mut references = probe.reference_config();
        for e in &lab.endpoints {
            if let Some(r) = e.scenario.reference {
                references.link(&e.url, r.adapter().parse()?);
            }
        }
        let ctx = PaidContext {
            wallet: &wallet,
            svm: solana
                .as_ref()
                .map(|(wallet, rpc)| x402_probe::probe::paid::SvmPay { wallet, rpc }),
            store: &store,
            policy: &policy,
            rpc: &rpc,
            fetch: &cfg.fetch,
            options: PaidOptions::lab(),
            clock: &x402_probe::clock::SystemClock,
            wall: &x402_probe::clock::SystemClock,
            on_step: None,
            references: &references,
        };
        println!(
            "paying each endpoint once from {} (caps: {MAX_PER_CALL} USD a call, {MAX_PER_SUBJECT_PER_DAY} an endpoint, {MAX_PER_DAY} a day)...",
            manifest.payer
        );
        let mut progress = Progress::new("paid calls", outs.len() as u64, mode);
        for out in outs.iter_mut() {
            let paid = runner::pay_and_merge(&ctx, &rubric, out).await;
            progress.advance(1);
            if let Some(plan) = paid {
                let refund = x402_probe::probe::refund::watch_refund(
                    ctx.fetch,
                    ctx.rpc,
                    &ctx.options,
                    ctx.wall,
                    &plan,
                )
                .await;
                runner::merge_refund(&rubric, out, refund);
            }
        }
        progress.finish();
    }

    // The scenario column as wide as the longest name.
    let w = lab
        .endpoints
        .iter()
        .map(|e| e.scenario.name.len())
        .max()
        .unwrap_or(0)
        .max("scenario".len());
    println!(
        "\n{:<w$} {:>5} {:>13} {:>5} {:<10} {:<26} {:<24} promise",
        "scenario", "score", "band", "grade", "verdict", "binding gates", "failing checks"
    );
    let (mut kept, mut broken, mut spent_atomic) = (0usize, 0usize, 0u128);
    for (e, out) in lab.endpoints.iter().zip(&outs) {
        let inputs = runner::single_run_inputs(
            &rubric,
            out,
            "weather",
            x402_probe::score::input::Provenance::TestHarness,
        );
        let score = runner::score_inputs(&rubric, &inputs);
        let mut differs = Vec::new();
        for (id, want) in &e.scenario.expect {
            let got = out.results.iter().find(|r| r.id == *id).map(|r| r.outcome);
            if got.map(Outcome::as_str) != Some(*want) {
                differs.push(format!("{id}={}", got.map_or("missing", Outcome::as_str)));
            }
        }
        // The findings peers publish; the paid ones only when the demo paid.
        let findings = x402_probe::checks::findings::evaluate(
            &out.free,
            out.paid.as_ref(),
            &probe.findings_context(),
        );
        for f in findings {
            let paid_finding = matches!(
                f.id,
                x402_probe::checks::findings::FindingId::KnownFacilitator
                    | x402_probe::checks::findings::FindingId::PayThenRefused
            );
            if paid_finding && args.no_pay {
                continue;
            }
            if let Some(want) = e.scenario.findings.get(f.id.as_str())
                && f.outcome.as_str() != *want
            {
                differs.push(format!("{}={}", f.id, f.outcome));
            }
        }
        if differs.is_empty() {
            kept += 1
        } else {
            broken += 1
        }
        if let Some(p) = out.paid.as_ref().and_then(|p| p.payment.as_ref()) {
            spent_atomic += p.authorization.value.parse::<u128>().unwrap_or(0);
        }
        if let Some(s) = out.paid.as_ref().and_then(|p| p.svm.as_ref()) {
            spent_atomic += u128::from(s.payment.amount);
        }
        let failing: Vec<&str> = out
            .results
            .iter()
            .filter(|r| r.outcome == Outcome::Fail)
            .map(|r| r.id.as_str())
            .collect();
        println!(
            "{:<w$} {:>5} {:>13} {:>5} {:<10} {:<26} {:<24} {}",
            e.scenario.name,
            fmt_num(&score, "/capped_score"),
            band(&score),
            score
                .pointer("/grade")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| {
                    score
                        .pointer("/provisional_grade")
                        .and_then(Value::as_str)
                        .map(|g| format!("({g})"))
                        .unwrap_or("-".into())
                }),
            score
                .pointer("/verdict/verdict")
                .and_then(Value::as_str)
                .unwrap_or("-"),
            binding_gates(&score),
            failing.join(","),
            if differs.is_empty() {
                "kept".to_string()
            } else {
                format!("DIFFERS {}", differs.join(" "))
            }
        );
    }
    println!(
        "\n(grade) is provisional: one run is not enough evidence to establish a verdict (8 probes over 3 days).\n\
         {kept} endpoints behaved as the lab promised, {broken} did not; {:.2} USDC paid in total; {:.1} s; stopping the lab.",
        spent_atomic as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    drop(lab);
    Ok(if broken == 0 { 0 } else { 1 })
}

fn fmt_num(doc: &Value, pointer: &str) -> String {
    doc.pointer(pointer)
        .and_then(Value::as_f64)
        .map_or("-".into(), |v| format!("{v:.1}"))
}

fn band(doc: &Value) -> String {
    match (
        doc.pointer("/band/low").and_then(Value::as_f64),
        doc.pointer("/band/high").and_then(Value::as_f64),
    ) {
        (Some(lo), Some(hi)) => format!("[{lo:.0}-{hi:.0}]"),
        _ => "-".into(),
    }
}

fn binding_gates(doc: &Value) -> String {
    let gates = doc
        .pointer("/gates")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let names: Vec<String> = gates
        .iter()
        .filter(|g| g.get("binding").and_then(Value::as_bool) == Some(true))
        .filter_map(|g| g.get("flag").and_then(Value::as_str).map(str::to_string))
        .collect();
    if names.is_empty() {
        "-".into()
    } else {
        names.join(",")
    }
}
