//! `x402-probe probe URL`: a one-off probe of one URL with a readable report or `--json`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alloy::primitives::Address;
use anyhow::{Context, Result, bail};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use crate::checks::free::evaluate_free;
use crate::evidence::rfc3339;
use crate::probe::free::{FreeProbeConfig, probe_free};
use crate::probe::http::FetchConfig;
use crate::probe::rpc::Rpc;
use crate::report::{ProbeReport, exit};
use crate::rubric::Rubric;

/// Options of `x402-probe probe`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Exit codes:
  0  no check failed
  1  at least one check failed
  2  usage or configuration error
  3  the target could not be probed at all (e.g. refused by the address guard)")]
pub struct Args {
    /// The endpoint to probe (http:// or https://).
    pub url: String,
    /// Unpaid requests to make (R1, R2 and R3 are measured on each).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub samples: u16,
    /// Pause between samples, in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub spacing_ms: u64,
    /// A discovery catalogue (`.../discovery/resources`) whose listed price H1 compares with the 402.
    #[arg(long, value_name = "URL")]
    pub listing: Option<String>,
    /// The fixed JSON-RPC node to read the chain through (C3 and every paid check).
    #[arg(long, value_name = "URL")]
    pub rpc: Option<String>,
    /// A token to accept as real besides the canonical USDC deployments (repeatable).
    #[arg(long = "asset", value_name = "ADDRESS")]
    pub assets: Vec<String>,
    /// Trust this CA certificate (PEM) in addition to the public roots.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Allow loopback, private and link-local addresses (needed for the local lab; off by default so
    /// a hostile URL cannot make the prober reach internal services).
    #[arg(long)]
    pub allow_private: bool,
    /// Name of this vantage, recorded in every receipt.
    #[arg(long, default_value = "local")]
    pub vantage: String,
    /// Score under this rubric file instead of the embedded one.
    #[arg(long, value_name = "FILE")]
    pub rubric: Option<PathBuf>,
    /// Print the versioned JSON report instead of text.
    #[arg(long)]
    pub json: bool,
    /// No colours, even on a terminal.
    #[arg(long)]
    pub no_color: bool,
}

pub fn run(args: Args) -> Result<i32> {
    let rubric = match &args.rubric {
        None => Rubric::embedded_default(),
        Some(path) => {
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            Rubric::from_bytes(&bytes).with_context(|| format!("rubric {}", path.display()))?
        }
    };
    if !(args.url.starts_with("http://") || args.url.starts_with("https://")) {
        bail!(
            "the URL must start with http:// or https://: {:?}",
            args.url
        );
    }
    let mut fetch = FetchConfig {
        allow_private: args.allow_private,
        observe_invalid_tls: true,
        ..FetchConfig::default()
    };
    if let Some(path) = &args.ca_file {
        fetch.extra_roots = read_ca_file(path)?;
    }
    let declared_assets = args
        .assets
        .iter()
        .map(|a| {
            a.parse::<Address>()
                .with_context(|| format!("--asset {a:?} is not an address"))
        })
        .collect::<Result<Vec<_>>>()?;
    let cfg = FreeProbeConfig {
        fetch,
        samples: usize::from(args.samples),
        spacing: Duration::from_millis(args.spacing_ms),
        listing: args.listing.clone(),
        rpc: args.rpc.as_deref().map(Rpc::new),
        declared_assets,
        vantage: args.vantage.clone(),
    };
    crate::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let now = unix_now();
    let observation = runtime.block_on(probe_free(&cfg, &args.url, now));
    let results = evaluate_free(&observation, &rubric);
    let score = provisional_score(&rubric, &args.url, &observation, &results, now);
    let mut report = ProbeReport::new(&args.url, &args.vantage, &rfc3339(now), &rubric, results);
    report.score = Some(score);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let color = !args.no_color
            && std::env::var_os("NO_COLOR").is_none()
            && std::io::stdout().is_terminal();
        print!("{}", report.render_text(&remediation, color));
    }
    Ok(report.exit_code)
}

fn remediation(id: &str) -> Option<String> {
    crate::definitions::definition(id)
        .map(|d| d.remediation.trim().to_string())
        .filter(|r| !r.is_empty())
}

/// The score this run's own evidence supports: one run can never establish a verdict (the rubric
/// wants probes over days and a paid call), so it is provisional and says why. A scoring error is
/// reported in its place rather than failing the probe.
pub fn provisional_score(
    rubric: &Rubric,
    url: &str,
    observation: &crate::observation::FreeObservation,
    results: &[crate::evidence::CheckResult],
    now: i64,
) -> serde_json::Value {
    use crate::history::{SubjectFacts, inputs_document, quoted_price_usd, run_entries};
    let at = rfc3339(now);
    let subject = SubjectFacts {
        id: url.to_string(),
        url: url.to_string(),
        category: "uncategorised".into(),
        price_usd: quoted_price_usd(observation).unwrap_or(0.0),
        revisions: vec![("r0".into(), at.clone())],
    };
    let history = run_entries(results, rubric, false, "r0");
    let inputs = inputs_document(rubric, &at, &subject, history, "live");
    let scored = serde_json::to_vec(&inputs)
        .map_err(anyhow::Error::from)
        .and_then(|bytes| Ok(crate::score::score_json(rubric, &bytes)?))
        .and_then(|doc| {
            Ok(serde_json::from_slice::<serde_json::Value>(
                &doc.to_bytes()?,
            )?)
        });
    scored.unwrap_or_else(|e| serde_json::json!({"error": format!("not scored: {e:#}")}))
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Every certificate in a PEM file.
pub fn read_ca_file(path: &std::path::Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{} is not a PEM certificate file", path.display()))?;
    if certs.is_empty() {
        bail!("{} holds no certificate", path.display());
    }
    Ok(certs)
}

#[allow(dead_code)]
const _: i32 = exit::USAGE;
