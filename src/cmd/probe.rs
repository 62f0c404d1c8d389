//! `x402-probe probe URL`: a one-off probe of one URL with a readable report or `--json`.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use alloy::primitives::Address;
use anyhow::{Context, Result};

use crate::config::{
    ConfigError, Confirmations, DnsTimeoutMs, FreeDeadlineMs, HttpUrl, ListingConfig,
    ListingDeadlineMs, ListingMaxBytes, ListingMaxPages, PaidDeadlineMs, PayConfig, ProbeConfig,
    ProbeTarget, Provenance, RunConfig, Samples, SpacingMs, Vantage, WalletSource,
};
use crate::evidence::reference::ReferenceId;
use crate::evidence::rfc3339;
use crate::probe::paid::{PaidContext, PaidOptions, SvmPay};
use crate::report::ProbeReport;
use crate::runner;
use crate::solana_wallet::SolanaWallet;
use crate::spend::{AllowedAsset, AllowedSvmAsset, PayPolicy, SpendStore, Usd};
use crate::wallet::Wallet;

/// Options of `x402-probe probe`. Each maps onto `crate::config` (the daemon's file uses the same
/// types), where ranges are checked; the README's option table documents every one.
#[derive(Debug, clap::Args)]
#[command(after_help = "Exit codes:
  0  no check failed
  1  at least one check failed
  2  usage or configuration error
  3  the target could not be probed at all (e.g. refused by the address guard)")]
pub struct Args {
    /// The endpoint to probe (http:// or https://; no user info, a valid host). It is probed,
    /// paid and reported under its canonical form (README, "Subjects: one endpoint, one URL").
    /// An MCP server is given as `mcp+https://host/path` (every paid tool it has, a report each)
    /// or `mcp+https://host/path#tool` (that tool); with --pay, each paid tool is paid once.
    pub url: ProbeTarget,
    /// Unpaid requests to make (R1, R2 and R3 are measured on each), 1-100.
    #[arg(long, default_value_t = Samples::default())]
    pub samples: Samples,
    /// Pause between samples, in milliseconds, 0-60000.
    #[arg(long, value_name = "MS", default_value_t = SpacingMs::default())]
    pub spacing_ms: SpacingMs,
    /// The whole free run (samples, operator file, catalogue, chain reads) ends by then, in
    /// milliseconds, 100-3600000; what is not measured by then is `unmeasured`.
    #[arg(long, value_name = "MS", default_value_t = FreeDeadlineMs::default())]
    pub free_deadline_ms: FreeDeadlineMs,
    /// Time for one name resolution, in milliseconds, 100-30000.
    #[arg(long, value_name = "MS", default_value_t = DnsTimeoutMs::default())]
    pub dns_timeout_ms: DnsTimeoutMs,
    /// Resolve names through this DNS server (IP:PORT; repeatable, at most 8) instead of the
    /// system's resolver configuration.
    #[arg(long = "nameserver", value_name = "IP:PORT")]
    pub nameservers: Vec<SocketAddr>,
    /// A discovery catalogue (`.../discovery/resources`) whose listed price H1 compares with the 402.
    #[arg(long, value_name = "URL")]
    pub listing: Option<HttpUrl>,
    /// Catalogue pages read at most, 1-1000.
    #[arg(long, value_name = "N", default_value_t = ListingMaxPages::default(), requires = "listing")]
    pub listing_max_pages: ListingMaxPages,
    /// Catalogue bytes read at most, all pages together, 1024-268435456.
    #[arg(long, value_name = "BYTES", default_value_t = ListingMaxBytes::default(), requires = "listing")]
    pub listing_max_bytes: ListingMaxBytes,
    /// Time for reading the catalogue, in milliseconds, 100-3600000 (within the free deadline).
    #[arg(long, value_name = "MS", default_value_t = ListingDeadlineMs::default(), requires = "listing")]
    pub listing_deadline_ms: ListingDeadlineMs,
    /// The fixed JSON-RPC node to read the chain through (C3 and every paid check).
    #[arg(long, value_name = "URL")]
    pub rpc: Option<HttpUrl>,
    /// The fixed Solana JSON-RPC node to read Solana entries' mints and payout accounts through
    /// (C3 of Solana entries).
    #[arg(long, value_name = "URL")]
    pub solana_rpc: Option<HttpUrl>,
    /// The npm registry (its base URL) R6's `npm` reference reads.
    #[arg(long, value_name = "URL")]
    pub npm_registry: Option<HttpUrl>,
    /// Compare the paid output with this reference source for R6 (`npm`, `erc20_supply`:
    /// `x402-probe explain R6`); without it R6 is `na`. Refused for an MCP tool.
    #[arg(long, value_name = "NAME")]
    pub reference: Option<ReferenceId>,
    /// A token to accept as real besides the canonical USDC deployments (repeatable).
    #[arg(long = "asset", value_name = "ADDRESS")]
    pub assets: Vec<Address>,
    /// A facilitator we know, by the address that sends its settlements (repeatable): the
    /// `known_facilitator` finding of a paid call.
    #[arg(long = "facilitator", value_name = "ADDRESS")]
    pub facilitators: Vec<Address>,
    /// Trust the CA certificates in this PEM file in addition to the public roots (repeatable).
    #[arg(long = "ca-file", value_name = "FILE")]
    pub ca_files: Vec<PathBuf>,
    /// Allow loopback, private and link-local addresses (needed for the local lab; off by default so
    /// a hostile URL cannot make the prober reach internal services).
    #[arg(long)]
    pub allow_private: bool,
    /// Name of this vantage, recorded in every receipt (1-64 letters, digits, '.', '_', '-', ':').
    #[arg(long, default_value_t = Vantage::default())]
    pub vantage: Vantage,
    /// Score under this rubric file instead of the embedded one.
    #[arg(long, value_name = "FILE")]
    pub rubric: Option<PathBuf>,
    /// Print the versioned JSON report instead of text.
    #[arg(long)]
    pub json: bool,
    /// No colours, even on a terminal.
    #[arg(long)]
    pub no_color: bool,
    /// What this run's evidence is: `live` (a real endpoint) or `test_harness` (a test lab); stated
    /// in the report and the score so test data never passes for observation.
    #[arg(long, value_enum, default_value_t = Provenance::Live)]
    pub provenance: Provenance,
    /// Make one real paid call after the free probe (needs --max-usd, a wallet and --rpc). Every
    /// option below is a payment option and is refused without --pay.
    #[arg(long)]
    pub pay: bool,
    /// Spending cap per call, in USD (more than 0, at most 1000); also the cap per subject and per
    /// day unless those are given.
    #[arg(long, value_name = "USD")]
    pub max_usd: Option<Usd>,
    /// Cap per subject over any 24 hours, in USD (default: --max-usd).
    #[arg(long, value_name = "USD")]
    pub max_usd_per_subject_per_day: Option<Usd>,
    /// Cap for all paid calls together over any 24 hours, in USD (default: --max-usd).
    #[arg(long, value_name = "USD")]
    pub max_usd_per_day: Option<Usd>,
    /// The wallet's private key: a file readable by its owner only.
    #[arg(long, value_name = "FILE", conflicts_with = "wallet_credential")]
    pub wallet_key_file: Option<PathBuf>,
    /// The wallet's private key as a systemd credential ($CREDENTIALS_DIRECTORY/NAME).
    #[arg(long, value_name = "NAME")]
    pub wallet_credential: Option<String>,
    /// The Solana key that pays Solana entries (64 hex digits of ed25519 seed, or the Solana
    /// CLI's keypair file), a file readable by its owner only; needs --solana-rpc. Without it,
    /// Solana entries are not paid.
    #[arg(long, value_name = "FILE", conflicts_with = "solana_wallet_credential")]
    pub solana_wallet: Option<PathBuf>,
    /// The Solana key as a systemd credential ($CREDENTIALS_DIRECTORY/NAME).
    #[arg(long, value_name = "NAME")]
    pub solana_wallet_credential: Option<String>,
    /// Where the spend store (reservations, refusals) lives. Default: $STATE_DIRECTORY, else
    /// $XDG_STATE_HOME/x402-probe, else ~/.local/state/x402-probe.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Blocks a settlement needs before chain reads count as final, 0-64 (default 2; 0 for a local
    /// dev chain that mines only on demand).
    #[arg(long, value_name = "N")]
    pub confirmations: Option<Confirmations>,
    /// The whole paid part (quote to refund watch) ends by then, in milliseconds, 1000-3600000
    /// (default 900000).
    #[arg(long, value_name = "MS")]
    pub paid_deadline_ms: Option<PaidDeadlineMs>,
}

impl Args {
    /// The run's configuration: the flags mapped onto `crate::config`, cross-checked.
    pub fn config(&self) -> Result<RunConfig, ConfigError> {
        let usage = |option: &'static str, why: String| ConfigError::Invalid { option, why };
        let listing = self.listing.clone().map(|url| ListingConfig {
            url,
            max_pages: self.listing_max_pages,
            max_bytes: self.listing_max_bytes,
            deadline_ms: self.listing_deadline_ms,
        });
        let probe = ProbeConfig {
            samples: self.samples,
            spacing_ms: self.spacing_ms,
            free_deadline_ms: self.free_deadline_ms,
            dns_timeout_ms: self.dns_timeout_ms,
            nameservers: self.nameservers.clone(),
            listing,
            rpc: self.rpc.clone(),
            solana_rpc: self.solana_rpc.clone(),
            npm_registry: self.npm_registry.clone(),
            assets: self.assets.clone(),
            ca_files: self.ca_files.clone(),
            allow_private: self.allow_private,
            vantage: self.vantage.clone(),
            // The daemon's key only (vantages on one machine).
            source_address: None,
            provenance: self.provenance,
            rubric: self.rubric.clone(),
            facilitators: self.facilitators.clone(),
        };
        let payment_options = [
            ("--max-usd", self.max_usd.is_some()),
            (
                "--max-usd-per-subject-per-day",
                self.max_usd_per_subject_per_day.is_some(),
            ),
            ("--max-usd-per-day", self.max_usd_per_day.is_some()),
            ("--wallet-key-file", self.wallet_key_file.is_some()),
            ("--wallet-credential", self.wallet_credential.is_some()),
            ("--solana-wallet", self.solana_wallet.is_some()),
            (
                "--solana-wallet-credential",
                self.solana_wallet_credential.is_some(),
            ),
            ("--state-dir", self.state_dir.is_some()),
            ("--confirmations", self.confirmations.is_some()),
            ("--paid-deadline-ms", self.paid_deadline_ms.is_some()),
            ("--reference", self.reference.is_some()),
        ];
        // R6's references read their key from an HTTP request (query, JSON body); an MCP tool's
        // arguments are not read for one, so the link would be silently ignored.
        if self.reference.is_some() && matches!(self.url, ProbeTarget::Mcp(_)) {
            return Err(usage(
                "--reference",
                "links an HTTP endpoint to a reference source; an MCP tool has none yet (R6 stays \
                 na): refused (drop the option)"
                    .into(),
            ));
        }
        let pay = if self.pay {
            let max_usd = self
                .max_usd
                .ok_or_else(|| usage("--pay", "needs --max-usd (the cap per call)".into()))?;
            let wallet = match (&self.wallet_key_file, &self.wallet_credential) {
                (Some(path), None) => WalletSource::KeyFile(path.clone()),
                (None, Some(name)) => WalletSource::Credential(name.clone()),
                _ => {
                    return Err(usage(
                        "--pay",
                        "needs a wallet: --wallet-key-file FILE or --wallet-credential NAME".into(),
                    ));
                }
            };
            Some(PayConfig {
                max_usd,
                max_usd_per_subject_per_day: self.max_usd_per_subject_per_day,
                max_usd_per_day: self.max_usd_per_day,
                wallet,
                solana_wallet: match (&self.solana_wallet, &self.solana_wallet_credential) {
                    (Some(path), _) => Some(WalletSource::KeyFile(path.clone())),
                    (None, Some(name)) => Some(WalletSource::Credential(name.clone())),
                    (None, None) => None,
                },
                state_dir: self.state_dir.clone(),
                confirmations: self.confirmations.unwrap_or_default(),
                paid_deadline_ms: self.paid_deadline_ms.unwrap_or_default(),
            })
        } else {
            if let Some((option, _)) = payment_options.iter().find(|(_, given)| *given) {
                return Err(usage(
                    option,
                    "a payment option, but --pay was not given: nothing would be paid and the \
                     option would be ignored; refused (add --pay, or drop the option)"
                        .into(),
                ));
            }
            None
        };
        let config = RunConfig { probe, pay };
        config.validate()?;
        Ok(config)
    }
}

pub fn run(args: Args) -> Result<i32> {
    let config = args.config()?;
    // Everything the configuration names is read and checked before any traffic.
    let prepared = config.probe.prepare()?;
    let (cfg, rubric) = (prepared.free, prepared.rubric);
    let (url, mcp) = match &args.url {
        ProbeTarget::Http(url) => (url.as_str(), None),
        ProbeTarget::Mcp(subject) => ("", Some(subject)),
    };
    let provenance = config.probe.provenance.as_str();
    let vantage = config.probe.vantage.as_str();
    let pay = match &config.pay {
        Some(pay) => Some(PayArgs::open(pay)?),
        None => None,
    };
    crate::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let now = unix_now();
    if let Some(subject) = mcp {
        let (run, outputs) = runtime.block_on(async {
            match (&pay, &cfg.rpc) {
                (Some(pay), Some(rpc)) => {
                    let policy = pay.policy(rpc, &cfg.declared_assets).await?;
                    let references = config.probe.reference_config();
                    let ctx = pay.context(&policy, rpc, &cfg, &references);
                    anyhow::Ok(runner::run_mcp(&cfg, Some(&ctx), &rubric, subject, now).await)
                }
                _ => Ok(runner::run_mcp(&cfg, None, &rubric, subject, now).await),
            }
        })?;
        return report_mcp(&args, &config, &rubric, &run, outputs, now);
    }
    let out = runtime.block_on(async {
        match (&pay, &cfg.rpc) {
            (Some(pay), Some(rpc)) => {
                let policy = pay.policy(rpc, &cfg.declared_assets).await?;
                let mut references = config.probe.reference_config();
                if let Some(reference) = args.reference {
                    references.link(url, reference);
                }
                let ctx = pay.context(&policy, rpc, &cfg, &references);
                anyhow::Ok(runner::run(&cfg, Some(&ctx), &rubric, url, now).await)
            }
            _ => Ok(runner::run(&cfg, None, &rubric, url, now).await),
        }
    })?;
    let inputs = runner::single_run_inputs(
        &rubric,
        &out,
        "uncategorised",
        config.probe.provenance.into(),
    );
    let score = runner::score_inputs(&rubric, &inputs);
    let paid = out.paid.as_ref().map(crate::report::PaidSummary::of);
    let mut report = ProbeReport::new(url, vantage, &rfc3339(now), &rubric, out.results).with_run(
        &out.free,
        out.paid.as_ref(),
        &config.probe.findings_context(),
    );
    report.score = Some(score);
    report.paid = paid;
    report.provenance = provenance.to_string();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render_text(&remediation, color(&args)));
    }
    Ok(report.exit_code)
}

/// `probe mcp+URL`'s report: every paid tool of the server (or the one named), a report each,
/// scored as a single run like an HTTP endpoint (with its paid call under `--pay`).
fn report_mcp(
    args: &Args,
    config: &RunConfig,
    rubric: &crate::rubric::Rubric,
    run: &crate::probe::mcp::McpRun,
    outputs: Vec<runner::RunOutput>,
    now: i64,
) -> Result<i32> {
    let vantage = config.probe.vantage.as_str();
    let reports = outputs
        .into_iter()
        .map(|out| {
            let inputs = runner::single_run_inputs(
                rubric,
                &out,
                "uncategorised",
                config.probe.provenance.into(),
            );
            let paid = out.paid.as_ref().map(crate::report::PaidSummary::of);
            let mut report = ProbeReport::new(
                &out.free.subject,
                vantage,
                &rfc3339(now),
                rubric,
                out.results,
            )
            .with_run(
                &out.free,
                out.paid.as_ref(),
                &config.probe.findings_context(),
            );
            report.score = Some(runner::score_inputs(rubric, &inputs));
            report.paid = paid;
            report.provenance = config.probe.provenance.as_str().to_string();
            report
        })
        .collect();
    let report = crate::report::McpReport::new(run, reports);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render_text(&remediation, color(args)));
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

/// What `--pay` needs, checked before any traffic.
struct PayArgs {
    wallet: Wallet,
    solana_wallet: Option<SolanaWallet>,
    store: SpendStore,
    per_call: Usd,
    per_subject: Usd,
    per_day: Usd,
    options: PaidOptions,
}

impl PayArgs {
    fn open(pay: &PayConfig) -> Result<PayArgs> {
        let (per_call, per_subject, per_day) = pay.caps();
        let wallet = match &pay.wallet {
            WalletSource::KeyFile(path) => Wallet::from_key_file(path)?,
            WalletSource::Credential(name) => Wallet::from_credential(name)?,
        };
        let solana_wallet = match &pay.solana_wallet {
            None => None,
            Some(WalletSource::KeyFile(path)) => Some(SolanaWallet::from_key_file(path)?),
            Some(WalletSource::Credential(name)) => Some(SolanaWallet::from_credential(name)?),
        };
        let state_dir = match &pay.state_dir {
            Some(d) => d.clone(),
            None => crate::config::default_state_dir()?,
        };
        let store = SpendStore::open(&state_dir)?;
        Ok(PayArgs {
            wallet,
            solana_wallet,
            store,
            per_call,
            per_subject,
            per_day,
            options: pay.paid_options(),
        })
    }

    /// The paid call's context for this run (the Solana wallet with the Solana RPC when both are
    /// given).
    fn context<'a>(
        &'a self,
        policy: &'a PayPolicy,
        rpc: &'a crate::probe::rpc::Rpc,
        cfg: &'a crate::probe::free::FreeProbeConfig,
        references: &'a crate::probe::reference::ReferenceConfig,
    ) -> PaidContext<'a> {
        PaidContext {
            wallet: &self.wallet,
            svm: self
                .solana_wallet
                .as_ref()
                .zip(cfg.solana_rpc.as_ref())
                .map(|(wallet, rpc)| SvmPay { wallet, rpc }),
            store: &self.store,
            policy,
            rpc,
            fetch: &cfg.fetch,
            options: self.options.clone(),
            clock: &crate::clock::SystemClock,
            wall: &crate::clock::SystemClock,
            on_step: None,
            references,
        }
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
        let mut policy = PayPolicy::new(self.per_call, self.per_subject, self.per_day, allowlist);
        if self.solana_wallet.is_some() {
            // Circle's USDC of the three clusters, under the same caps.
            policy.svm_allowlist = AllowedSvmAsset::canonical_usdc();
        }
        policy
            .validate()
            .map_err(|e| anyhow::anyhow!("pay policy: {e}"))?;
        Ok(policy)
    }
}

/// Whether the text report is coloured: stdout is a terminal, and neither `--no-color` nor
/// `NO_COLOR` says otherwise.
fn color(args: &Args) -> bool {
    !args.no_color && std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
}
