//! `x402-probe demo`: the main job on the embedded default, the local lab. Brings the lab up, probes
//! every lab endpoint, prints one line per endpoint and what the lab promised, and shuts down.

use anyhow::Result;

/// Options of `x402-probe demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only these scenarios (repeatable); all by default.
    #[arg(long = "scenario", value_name = "NAME")]
    pub scenarios: Vec<String>,
    /// Unpaid samples per endpoint.
    #[arg(long, default_value_t = 3)]
    pub samples: usize,
}

#[cfg(not(feature = "lab"))]
pub fn run(_args: Args) -> Result<i32> {
    anyhow::bail!("this build has no embedded lab (built without the `lab` feature)")
}

#[cfg(feature = "lab")]
pub fn run(args: Args) -> Result<i32> {
    crate::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(demo(args))
}

#[cfg(feature = "lab")]
async fn demo(args: Args) -> Result<i32> {
    use std::collections::BTreeMap;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use anyhow::Context;
    use rustls_pki_types::pem::PemObject;

    use crate::checks::free::evaluate_free;
    use crate::evidence::{CheckResult, Outcome};
    use crate::probe::free::{FreeProbeConfig, probe_free};
    use crate::probe::http::FetchConfig;
    use crate::probe::rpc::Rpc;
    use crate::rubric::{Kind, Rubric};

    let options = x402_lab::LabOptions {
        scenarios: (!args.scenarios.is_empty()).then(|| args.scenarios.clone()),
        ..x402_lab::LabOptions::default()
    };
    let lab = x402_lab::Lab::start_with(options)
        .await
        .context("starting the lab (did `npm ci` run?)")?;
    let manifest = lab.manifest();
    println!(
        "lab up in {:?}: chain {} at {}, {} endpoints, catalogue {}",
        lab.startup_time,
        lab.chain_id,
        manifest.rpc,
        lab.endpoints.len(),
        manifest.catalogue
    );
    let rubric = Rubric::embedded_default();
    let ca = rustls_pki_types::CertificateDer::from_pem_slice(lab.ca_pem.as_bytes())
        .context("lab CA")?;
    let cfg = FreeProbeConfig {
        fetch: FetchConfig {
            allow_private: true,
            observe_invalid_tls: true,
            extra_roots: vec![ca],
            ..FetchConfig::default()
        },
        samples: args.samples.max(1),
        spacing: Duration::from_millis(50),
        listing: Some(manifest.catalogue.clone()),
        rpc: Some(Rpc::new(lab.rpc_url())),
        declared_assets: vec![lab.token.address()],
        vantage: "demo".into(),
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let mut runs = tokio::task::JoinSet::new();
    for (i, e) in lab.endpoints.iter().enumerate() {
        let (cfg, url) = (cfg.clone(), e.url.clone());
        runs.spawn(async move { (i, probe_free(&cfg, &url, now).await) });
    }
    let mut results: BTreeMap<usize, Vec<CheckResult>> = BTreeMap::new();
    while let Some(joined) = runs.join_next().await {
        let (i, obs) = joined.context("a probe task failed")?;
        results.insert(i, evaluate_free(&obs, &rubric));
    }
    let free: Vec<&str> = rubric
        .checks
        .iter()
        .filter(|c| c.kind == Kind::Free)
        .map(|c| c.id.as_str())
        .collect();
    let mut agree = 0;
    let mut differ = 0;
    println!(
        "\n{:<24} {:>4} {:>4} {:>4}  {:<32} lab promise",
        "scenario", "pass", "fail", "na", "failing checks"
    );
    for (i, e) in lab.endpoints.iter().enumerate() {
        let rs = &results[&i];
        let count = |o: Outcome| rs.iter().filter(|r| r.outcome == o).count();
        let failing: Vec<&str> = rs
            .iter()
            .filter(|r| r.outcome == Outcome::Fail)
            .map(|r| r.id.as_str())
            .collect();
        let mut kept = true;
        for (id, want) in &e.scenario.expect {
            if !free.contains(id) {
                continue;
            }
            match rs.iter().find(|r| r.id == *id) {
                Some(r) if r.outcome.as_str() == *want => agree += 1,
                _ => {
                    differ += 1;
                    kept = false;
                }
            }
        }
        println!(
            "{:<24} {:>4} {:>4} {:>4}  {:<32} {}",
            e.scenario.name,
            count(Outcome::Pass),
            count(Outcome::Fail),
            count(Outcome::Na),
            failing.join(","),
            if kept { "kept" } else { "DIFFERS" }
        );
    }
    println!("\n{agree} free-check expectations agree, {differ} differ; stopping the lab");
    drop(lab);
    Ok(if differ == 0 { 0 } else { 1 })
}
