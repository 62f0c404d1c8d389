//! `x402-probe probe URL`: a one-off probe of one URL with a readable report or `--json`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alloy::primitives::Address;
use anyhow::{Context, Result, bail};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use crate::evidence::rfc3339;
use crate::probe::free::FreeProbeConfig;
use crate::probe::http::FetchConfig;
use crate::probe::paid::{PaidContext, PaidOptions};
use crate::probe::rpc::Rpc;
use crate::report::{ProbeReport, exit};
use crate::rubric::Rubric;
use crate::runner;
use crate::spend::{AllowedAsset, PayPolicy, SpendStore, Usd};
use crate::wallet::Wallet;

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
    /// Make one real paid call after the free probe (needs --max-usd, a wallet and --rpc).
    #[arg(long, requires_all = ["max_usd", "rpc"])]
    pub pay: bool,
    /// Spending cap per call, in USD; also the cap per subject and per day unless those are given.
    #[arg(long, value_name = "USD")]
    pub max_usd: Option<String>,
    /// Cap per subject over any 24 hours, in USD (default: --max-usd).
    #[arg(long, value_name = "USD")]
    pub max_usd_per_subject_per_day: Option<String>,
    /// Cap for all paid calls together over any 24 hours, in USD (default: --max-usd).
    #[arg(long, value_name = "USD")]
    pub max_usd_per_day: Option<String>,
    /// The wallet's private key: a file readable by its owner only.
    #[arg(long, value_name = "FILE", conflicts_with = "wallet_credential")]
    pub wallet_key_file: Option<PathBuf>,
    /// The wallet's private key as a systemd credential ($CREDENTIALS_DIRECTORY/NAME).
    #[arg(long, value_name = "NAME")]
    pub wallet_credential: Option<String>,
    /// Where the spend store (reservations, refusals) lives. Default: $STATE_DIRECTORY, else
    /// $XDG_STATE_HOME/x402-probe, else ~/.local/state/x402-probe.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// What this run's evidence is: `live` (a real endpoint) or `test_harness` (a test lab); stated
    /// in the report and the score so test data never passes for observation.
    #[arg(long, default_value = "live", value_parser = ["live", "test_harness"])]
    pub provenance: String,
    /// Blocks a settlement needs before chain reads count as final (0 for a local dev chain that
    /// mines only on demand).
    #[arg(long, default_value_t = 2)]
    pub confirmations: u64,
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
    let pay = match args.pay {
        true => Some(PayArgs::from_args(&args)?),
        false => None,
    };
    crate::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let now = unix_now();
    let out = runtime.block_on(async {
        match (&pay, &cfg.rpc) {
            (Some(pay), Some(rpc)) => {
                let policy = pay.policy(rpc, &cfg.declared_assets).await?;
                let ctx = PaidContext {
                    wallet: &pay.wallet,
                    store: &pay.store,
                    policy: &policy,
                    rpc,
                    fetch: &cfg.fetch,
                    options: pay.options.clone(),
                    clock: &crate::clock::SystemClock,
                    wall: &crate::clock::SystemClock,
                    on_step: None,
                };
                anyhow::Ok(runner::run(&cfg, Some(&ctx), &rubric, &args.url, now).await)
            }
            _ => Ok(runner::run(&cfg, None, &rubric, &args.url, now).await),
        }
    })?;
    let inputs =
        runner::single_run_inputs(&rubric, &out, "uncategorised", args.provenance.parse()?);
    let score = runner::score_inputs(&rubric, &inputs);
    let paid = out.paid.as_ref().map(crate::report::PaidSummary::of);
    let mut report = ProbeReport::new(
        &args.url,
        &args.vantage,
        &rfc3339(now),
        &rubric,
        out.results,
    );
    report.score = Some(score);
    report.paid = paid;
    report.provenance = args.provenance.clone();
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

/// What `--pay` needs, checked before any traffic.
struct PayArgs {
    wallet: Wallet,
    store: SpendStore,
    per_call: Usd,
    per_subject: Usd,
    per_day: Usd,
    options: PaidOptions,
}

impl PayArgs {
    fn from_args(args: &Args) -> Result<PayArgs> {
        let usd = |flag: &str, v: &str| {
            v.parse::<Usd>()
                .map_err(|e| anyhow::anyhow!("{flag} {v:?}: {e}"))
        };
        let per_call = usd(
            "--max-usd",
            args.max_usd.as_deref().context("--pay needs --max-usd")?,
        )?;
        let per_subject = match &args.max_usd_per_subject_per_day {
            Some(v) => usd("--max-usd-per-subject-per-day", v)?,
            None => per_call,
        };
        let per_day = match &args.max_usd_per_day {
            Some(v) => usd("--max-usd-per-day", v)?,
            None => per_call,
        };
        let wallet = match (&args.wallet_key_file, &args.wallet_credential) {
            (Some(path), None) => Wallet::from_key_file(path)?,
            (None, Some(name)) => Wallet::from_credential(name)?,
            _ => bail!("--pay needs a wallet: --wallet-key-file FILE or --wallet-credential NAME"),
        };
        let state_dir = match &args.state_dir {
            Some(d) => d.clone(),
            None => default_state_dir()?,
        };
        let store = SpendStore::open(&state_dir)?;
        let options = match args.confirmations {
            0 => PaidOptions {
                confirmations: 0,
                ..PaidOptions::lab()
            },
            n => PaidOptions {
                confirmations: n,
                ..PaidOptions::default()
            },
        };
        Ok(PayArgs {
            wallet,
            store,
            per_call,
            per_subject,
            per_day,
            options,
        })
    }

    /// The caps, and the allowlist: the canonical USDC deployments, plus each `--asset` on the fixed
    /// RPC's chain as a 6-decimal dollar token (the way x402 quotes stablecoins).
    async fn policy(
        &self,
        rpc: &crate::probe::rpc::Rpc,
        declared: &[Address],
    ) -> Result<PayPolicy> {
        let mut allowlist = AllowedAsset::canonical_usdc();
        if !declared.is_empty() {
            let chain_id = rpc
                .chain_id()
                .await
                .context("reading the RPC's chain id for --asset")?;
            for asset in declared {
                allowlist.push(AllowedAsset {
                    network: format!("eip155:{chain_id}"),
                    asset: *asset,
                    decimals: 6,
                    usd_per_unit: "1".parse().map_err(|e| anyhow::anyhow!("{e}"))?,
                });
            }
        }
        let policy = PayPolicy::new(self.per_call, self.per_subject, self.per_day, allowlist);
        policy
            .validate()
            .map_err(|e| anyhow::anyhow!("pay policy: {e}"))?;
        Ok(policy)
    }
}

/// `$STATE_DIRECTORY` (systemd), else `$XDG_STATE_HOME/x402-probe`, else `~/.local/state/x402-probe`.
pub fn default_state_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("STATE_DIRECTORY").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d).join("x402-probe"));
    }
    let home = std::env::var_os("HOME")
        .context("no --state-dir, and neither STATE_DIRECTORY, XDG_STATE_HOME nor HOME")?;
    Ok(PathBuf::from(home).join(".local/state/x402-probe"))
}

#[allow(dead_code)]
const _: i32 = exit::USAGE;
