//! The configuration of a probe run, typed and validated in one place.
//!
//! Two sources map onto these types: the command line (`probe`'s flags, see `cmd::probe`) and,
//! for the coming daemon, a TOML file whose `[probe]` and `[pay]` tables deserialise into
//! [`ProbeConfig`] and [`PayConfig`] (unknown keys are refused). Every value is checked when it is
//! read: a number outside its documented range, a URL that is not one we would fetch, a wallet
//! named twice or a payment option without payment are usage errors before any traffic (exit 2),
//! never a measurement. Files the configuration names (CA certificates, a rubric) are read by
//! [`ProbeConfig::prepare`], bounded and without blocking (`crate::files`).
//!
//! Each range is documented in the README's option tables; keep them in step.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use alloy::primitives::Address;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde::{Deserialize, Deserializer};

use crate::files::{self, FileError, caps};
use crate::probe::free::{FreeProbeConfig, ListingBudget};
use crate::probe::http::{
    FetchConfig, canonical_subject_url, parse_given_url, validate_extra_roots,
};
use crate::probe::paid::PaidOptions;
use crate::probe::rpc::Rpc;
use crate::probe::solana_rpc::SolanaRpc;
use crate::rubric::Rubric;
use crate::spend::Usd;

/// A configuration value that is not acceptable, or a file it names that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{option}: {why}")]
    Invalid { option: &'static str, why: String },
    #[error("{option}: {error}")]
    File {
        option: &'static str,
        error: FileError,
    },
}

fn invalid(option: &'static str, why: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        option,
        why: why.into(),
    }
}

/// Where a configuration came from, so that an error names what the user wrote: a flag of the
/// command line (`--max-usd`) or a key of the daemon's file (`[pay] max_usd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Flags,
    File,
}

impl Source {
    fn pick(self, flag: &'static str, key: &'static str) -> &'static str {
        match self {
            Source::Flags => flag,
            Source::File => key,
        }
    }
}

/// Money in a configuration file: a decimal string of dollars (`"0.05"`, `"10"`), or an integer
/// of atomic units of USD as x402 quotes USDC (10^-6 USD: `50000` is five cents). A float is refused, naming `key`: `0.1` in TOML or
/// JSON is a binary fraction, not the amount written, and money here is exact (`spend::Usd`).
/// `Usd` counts 10^-18 USD; an atomic unit of USDC is 10^-6.
const ATTO_PER_MICRO_USD: u128 = 1_000_000_000_000;

fn file_money<'de, D: Deserializer<'de>>(d: D, key: &'static str) -> Result<Usd, D::Error> {
    struct Money(&'static str);
    impl serde::de::Visitor<'_> for Money {
        type Value = Usd;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(
                f,
                "{}: a dollar amount as a decimal string (\"0.05\") or an integer of atomic units \
                 (10^-6 USD)",
                self.0
            )
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Usd, E> {
            text.parse()
                .map_err(|e| E::custom(format!("{}: {e}", self.0)))
        }
        fn visit_u64<E: serde::de::Error>(self, micro: u64) -> Result<Usd, E> {
            Ok(Usd::from_atto(u128::from(micro) * ATTO_PER_MICRO_USD))
        }
        fn visit_i64<E: serde::de::Error>(self, micro: i64) -> Result<Usd, E> {
            u64::try_from(micro)
                .map(|micro| Usd::from_atto(u128::from(micro) * ATTO_PER_MICRO_USD))
                .map_err(|_| E::custom(format!("{}: {micro} is negative", self.0)))
        }
        fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Usd, E> {
            Err(E::custom(format!(
                "{}: {value} is a float, and money is never a float here; write it as a decimal \
                 string (\"{value}\") or an integer of atomic units (10^-6 USD)",
                self.0
            )))
        }
    }
    d.deserialize_any(Money(key))
}

fn max_usd<'de, D: Deserializer<'de>>(d: D) -> Result<Usd, D::Error> {
    file_money(d, "[pay] max_usd")
}

fn max_usd_per_subject_per_day<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Usd>, D::Error> {
    file_money(d, "[pay] max_usd_per_subject_per_day").map(Some)
}

fn max_usd_per_day<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Usd>, D::Error> {
    file_money(d, "[pay] max_usd_per_day").map(Some)
}

/// What a bounded number is: its range, its unit and its default, named once.
pub trait Range {
    const MIN: u64;
    const MAX: u64;
    const DEFAULT: u64;
    /// `ms`, `samples`, `pages`...
    const UNIT: &'static str;
}

/// A whole number within `R`'s range. Parsing (flags) and deserialising (the file) both refuse
/// anything outside it, with a message that states the range.
pub struct Bounded<R: Range>(u64, PhantomData<R>);

impl<R: Range> Bounded<R> {
    pub fn new(value: u64) -> Result<Self, OutOfRange> {
        if (R::MIN..=R::MAX).contains(&value) {
            Ok(Bounded(value, PhantomData))
        } else {
            Err(OutOfRange {
                text: value.to_string(),
                min: R::MIN,
                max: R::MAX,
                unit: R::UNIT,
            })
        }
    }

    pub fn get(&self) -> u64 {
        self.0
    }

    /// The value as milliseconds.
    pub fn millis(&self) -> Duration {
        Duration::from_millis(self.0)
    }

    /// The value as a count (every range fits a `usize` on the platforms we build for).
    pub fn count(&self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl<R: Range> Clone for Bounded<R> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<R: Range> Copy for Bounded<R> {}
impl<R: Range> PartialEq for Bounded<R> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl<R: Range> Eq for Bounded<R> {}

impl<R: Range> fmt::Debug for Bounded<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.0, R::UNIT)
    }
}

impl<R: Range> fmt::Display for Bounded<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl<R: Range> Default for Bounded<R> {
    fn default() -> Self {
        Bounded(R::DEFAULT, PhantomData)
    }
}

/// A number outside its option's range (or not a whole number at all).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is out of range: must be a whole number from {min} to {max} ({unit})")]
pub struct OutOfRange {
    text: String,
    min: u64,
    max: u64,
    unit: &'static str,
}

impl<R: Range> FromStr for Bounded<R> {
    type Err = OutOfRange;

    fn from_str(text: &str) -> Result<Self, OutOfRange> {
        let out = || OutOfRange {
            text: text.chars().take(40).collect(),
            min: R::MIN,
            max: R::MAX,
            unit: R::UNIT,
        };
        // Digits only: no sign, no spaces, no exponent.
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(out());
        }
        let value: u64 = text.parse().map_err(|_| out())?;
        Bounded::new(value).map_err(|_| out())
    }
}

impl<'de, R: Range> Deserialize<'de> for Bounded<R> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = u64::deserialize(d)?;
        Bounded::new(value).map_err(serde::de::Error::custom)
    }
}

macro_rules! range {
    ($(#[$doc:meta])* $name:ident, $alias:ident, $min:expr, $max:expr, $default:expr, $unit:literal) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub enum $name {}
        impl Range for $name {
            const MIN: u64 = $min;
            const MAX: u64 = $max;
            const DEFAULT: u64 = $default;
            const UNIT: &'static str = $unit;
        }
        $(#[$doc])*
        pub type $alias = Bounded<$name>;
    };
}

range!(
    /// Unpaid requests per run.
    SamplesRange, Samples, 1, 100, 5, "samples"
);
range!(
    /// Pause between samples.
    SpacingRange, SpacingMs, 0, 60_000, 200, "ms"
);
range!(
    /// The free part of a run: samples, operator file, catalogue and chain reads together. Long
    /// enough by default for five samples of an endpoint that answers just inside every per-phase
    /// limit.
    FreeDeadlineRange, FreeDeadlineMs, 100, 3_600_000, 120_000, "ms"
);
range!(
    /// The paid part of a run (quote, reserve, sign, send, chain reads, replay); the refund
    /// watch is a job of its own, bounded by its own limit.
    PaidDeadlineRange, PaidDeadlineMs, 1_000, 3_600_000, 900_000, "ms"
);
range!(
    /// One name resolution.
    DnsTimeoutRange, DnsTimeoutMs, 100, 30_000, 5_000, "ms"
);
range!(
    /// Catalogue pages read at most (100 entries each).
    ListingPagesRange, ListingMaxPages, 1, 1_000, 50, "pages"
);
range!(
    /// Catalogue bytes read at most, all pages together.
    ListingBytesRange, ListingMaxBytes, 1_024, 268_435_456, 16_777_216, "bytes"
);
range!(
    /// Time for reading the catalogue (within the free deadline).
    ListingDeadlineRange, ListingDeadlineMs, 100, 3_600_000, 30_000, "ms"
);
range!(
    /// Blocks a settlement needs before chain reads count as final.
    ConfirmationsRange, Confirmations, 0, 64, 2, "blocks"
);

/// The most a spending cap may be, in USD: the probe pays cents; anything near this is a typo.
pub const MAX_CAP_USD: &str = "1000";
/// The most nameservers configured.
pub const MAX_NAMESERVERS: usize = 8;
/// The longest vantage name.
pub const MAX_VANTAGE_CHARS: usize = 64;

/// An `http://` or `https://` URL the prober accepts as given: no user info, no control
/// characters or whitespace, a valid host (see `probe::http::parse_host`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl(String);

impl HttpUrl {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for HttpUrl {
    type Err = String;

    fn from_str(text: &str) -> Result<HttpUrl, String> {
        parse_given_url(text)?;
        Ok(HttpUrl(text.to_string()))
    }
}

impl<'de> Deserialize<'de> for HttpUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// A subject's URL: as the configuration (or the command line) gives it, and in the canonical
/// form ([`canonical_subject_url`]) the subject is known by everywhere. Displays the canonical
/// form; two spellings of one endpoint are equal.
#[derive(Debug, Clone)]
pub struct SubjectUrl {
    given: String,
    canonical: String,
}

impl SubjectUrl {
    /// The canonical URL: the subject's key, and what is fetched.
    pub fn as_str(&self) -> &str {
        &self.canonical
    }

    /// The spelling the user wrote (for messages).
    pub fn given(&self) -> &str {
        &self.given
    }
}

impl PartialEq for SubjectUrl {
    fn eq(&self, other: &Self) -> bool {
        self.canonical == other.canonical
    }
}
impl Eq for SubjectUrl {}

impl fmt::Display for SubjectUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical)
    }
}

impl FromStr for SubjectUrl {
    type Err = String;

    /// An `http(s)` endpoint, or one tool of an MCP server (`mcp+https://host/path#tool`: a
    /// subject is one tool, so the tool must be named).
    fn from_str(text: &str) -> Result<SubjectUrl, String> {
        let canonical = match crate::http_url::McpSubject::parse(text) {
            Some(mcp) => {
                let mcp = mcp?;
                if mcp.tool.is_none() {
                    return Err(format!(
                        "{text:?} names an MCP server but no tool: a subject is one tool \
                         (mcp+https://host/path#tool)"
                    ));
                }
                mcp.key()
            }
            None => canonical_subject_url(text)?,
        };
        Ok(SubjectUrl {
            given: text.to_string(),
            canonical,
        })
    }
}

impl<'de> Deserialize<'de> for SubjectUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// What `probe` is given: an HTTP endpoint, or an MCP server or one of its tools
/// (`mcp+https://host/path[#tool]`, `http_url::McpSubject`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeTarget {
    Http(SubjectUrl),
    Mcp(crate::http_url::McpSubject),
}

impl FromStr for ProbeTarget {
    type Err = String;

    fn from_str(text: &str) -> Result<ProbeTarget, String> {
        match crate::http_url::McpSubject::parse(text) {
            Some(mcp) => mcp.map(ProbeTarget::Mcp),
            None => text.parse().map(ProbeTarget::Http),
        }
    }
}

/// Where the probe runs from, recorded in every receipt: 1-64 letters, digits, `.`, `_`, `-`, `:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vantage(String);

impl Vantage {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Vantage {
    fn default() -> Self {
        Vantage("local".into())
    }
}

impl fmt::Display for Vantage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Vantage {
    type Err = String;

    fn from_str(text: &str) -> Result<Vantage, String> {
        let ok = !text.is_empty()
            && text.chars().count() <= MAX_VANTAGE_CHARS
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'));
        if ok {
            Ok(Vantage(text.to_string()))
        } else {
            Err(format!(
                "{:?} is not a vantage name: 1 to {MAX_VANTAGE_CHARS} letters, digits, '.', '_', '-' or ':'",
                text.chars().take(80).collect::<String>()
            ))
        }
    }
}

impl<'de> Deserialize<'de> for Vantage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// What a run's evidence is, stated in the report and the score document.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Provenance {
    /// A real endpoint.
    #[default]
    Live,
    /// A test lab: test data never passes for observation.
    TestHarness,
    /// A simulated population (`x402-probe simulate`): endpoints following a hidden truth.
    /// Written by the simulator into the daemon's configuration; not a `probe` flag.
    #[value(skip)]
    SyntheticFixture,
}

impl Provenance {
    pub fn as_str(self) -> &'static str {
        crate::evidence::run::Provenance::from(self).as_str()
    }
}

/// What a run states (the evidence model's provenance).
impl From<Provenance> for crate::evidence::run::Provenance {
    fn from(p: Provenance) -> Self {
        match p {
            Provenance::Live => crate::evidence::run::Provenance::Live,
            Provenance::TestHarness => crate::evidence::run::Provenance::TestHarness,
            Provenance::SyntheticFixture => crate::evidence::run::Provenance::SyntheticFixture,
        }
    }
}

/// The catalogue read for H1 and its budget.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListingConfig {
    /// The catalogue (`.../discovery/resources`, paged).
    pub url: HttpUrl,
    #[serde(default)]
    pub max_pages: ListingMaxPages,
    #[serde(default)]
    pub max_bytes: ListingMaxBytes,
    #[serde(default)]
    pub deadline_ms: ListingDeadlineMs,
}

/// The free probe of one subject: everything but payment. The file form's `[probe]` table.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeConfig {
    #[serde(default)]
    pub samples: Samples,
    #[serde(default)]
    pub spacing_ms: SpacingMs,
    #[serde(default)]
    pub free_deadline_ms: FreeDeadlineMs,
    #[serde(default)]
    pub dns_timeout_ms: DnsTimeoutMs,
    /// DNS servers (`IP:PORT`) to resolve names through; empty: the system's.
    #[serde(default)]
    pub nameservers: Vec<SocketAddr>,
    #[serde(default)]
    pub listing: Option<ListingConfig>,
    /// The fixed JSON-RPC node every chain fact is read from.
    #[serde(default)]
    pub rpc: Option<HttpUrl>,
    /// The fixed Solana JSON-RPC node every Solana fact is read from.
    #[serde(default)]
    pub solana_rpc: Option<HttpUrl>,
    /// The npm registry R6's `npm` reference reads (its base URL); none: subjects linked to
    /// `npm` are `unmeasured` for R6.
    #[serde(default)]
    pub npm_registry: Option<HttpUrl>,
    /// Tokens accepted as real besides the canonical USDC deployments.
    #[serde(default)]
    pub assets: Vec<Address>,
    /// PEM files of CA certificates trusted besides the public roots.
    #[serde(default)]
    pub ca_files: Vec<PathBuf>,
    /// Allow loopback, private and link-local destinations (the lab only).
    #[serde(default)]
    pub allow_private: bool,
    #[serde(default)]
    pub vantage: Vantage,
    /// The address the probes' connections leave from (one of this machine's: several vantages
    /// on one machine, each its own); none: the system's choice.
    #[serde(default)]
    pub source_address: Option<IpAddr>,
    #[serde(default)]
    pub provenance: Provenance,
    /// A rubric file to score under instead of the embedded one.
    #[serde(default)]
    pub rubric: Option<PathBuf>,
    /// The facilitators we know, by the address that sends their settlements: the
    /// `known_facilitator` finding (`probes/findings/known_facilitator.md`). Empty: that
    /// finding is `unmeasured`.
    #[serde(default)]
    pub facilitators: Vec<Address>,
}

/// Which key pays.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum WalletSource {
    /// A file owned by us with no group or other permissions.
    KeyFile(PathBuf),
    /// A systemd credential name (`$CREDENTIALS_DIRECTORY/NAME`).
    Credential(String),
}

/// Paying: the file form's `[pay]` table; its presence is what `--pay` says.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayConfig {
    /// The most one paid call may cost. In the file, money is a decimal string or an integer of
    /// atomic units (10^-6 USD), never a float ([`file_money`]).
    #[serde(deserialize_with = "max_usd")]
    pub max_usd: Usd,
    /// The most one subject may cost in any 24 hours (default: `max_usd`).
    #[serde(default, deserialize_with = "max_usd_per_subject_per_day")]
    pub max_usd_per_subject_per_day: Option<Usd>,
    /// The most all paid calls may cost in any 24 hours (default: `max_usd`).
    #[serde(default, deserialize_with = "max_usd_per_day")]
    pub max_usd_per_day: Option<Usd>,
    pub wallet: WalletSource,
    /// The Solana key that pays Solana entries (ed25519: 64 hex digits of seed, or the Solana
    /// CLI's keypair file), under the same caps; none: Solana entries are not paid.
    #[serde(default)]
    pub solana_wallet: Option<WalletSource>,
    /// Where the spend store lives (default: see [`default_state_dir`]).
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    #[serde(default)]
    pub confirmations: Confirmations,
    #[serde(default)]
    pub paid_deadline_ms: PaidDeadlineMs,
}

/// One probe run's whole configuration: the file form, top level.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    #[serde(default)]
    pub probe: ProbeConfig,
    #[serde(default)]
    pub pay: Option<PayConfig>,
}

impl RunConfig {
    /// The checks that span several values (each value checked its own range when it was read).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.probe.validate(Source::Flags)?;
        if let Some(pay) = &self.pay {
            pay.validate(Source::Flags)?;
            if self.probe.rpc.is_none() {
                return Err(invalid(
                    "--pay",
                    "paying needs --rpc (every payment is verified on chain through it)",
                ));
            }
            if pay.solana_wallet.is_some() && self.probe.solana_rpc.is_none() {
                return Err(invalid(
                    "--solana-wallet",
                    "paying Solana entries needs --solana-rpc (every Solana payment is verified on chain through it)",
                ));
            }
        }
        Ok(())
    }
}

impl ProbeConfig {
    /// The checks across values; errors name the flag or the file's key, as `source` says.
    pub fn validate(&self, source: Source) -> Result<(), ConfigError> {
        let option = source.pick("--nameserver", "[probe] nameservers");
        if self.nameservers.len() > MAX_NAMESERVERS {
            return Err(invalid(
                option,
                format!("at most {MAX_NAMESERVERS} nameservers"),
            ));
        }
        if let Some(ns) = self.nameservers.iter().find(|ns| ns.port() == 0) {
            return Err(invalid(option, format!("{ns}: port 0 is not a port")));
        }
        if let Some(ip) = self.source_address {
            let broadcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
            if ip.is_unspecified() || ip.is_multicast() || broadcast {
                // Only the daemon's file sets it (no flag).
                return Err(invalid(
                    "[probe] source_address",
                    format!("{ip} is not an address connections can leave from"),
                ));
            }
        }
        Ok(())
    }

    /// Reads what the configuration names (CA files, the rubric), bounded and checked, and builds
    /// what the prober and the scorer run with. All of it before any traffic.
    pub fn prepare(&self) -> Result<Prepared, ConfigError> {
        self.validate(Source::Flags)?;
        if let Some(ip) = self.source_address {
            // One of this machine's: refused here rather than by every connection later.
            std::net::UdpSocket::bind((ip, 0)).map_err(|e| {
                invalid(
                    "[probe] source_address",
                    format!("{ip} is not an address of this machine ({e})"),
                )
            })?;
        }
        let mut roots = Vec::new();
        for path in &self.ca_files {
            roots.extend(read_ca_file(path)?);
        }
        let rubric = match &self.rubric {
            None => Rubric::embedded_default(),
            Some(path) => read_rubric(path).map_err(|e| match e {
                RubricFileError::File(error) => ConfigError::File {
                    option: "--rubric",
                    error,
                },
                RubricFileError::Invalid(why) => invalid("--rubric", why),
            })?,
        };
        Ok(Prepared {
            free: self.free_probe_config(roots),
            rubric,
        })
    }

    /// What the findings read besides a run: the facilitators we know.
    pub fn findings_context(&self) -> crate::checks::findings::FindingsContext {
        crate::checks::findings::FindingsContext {
            facilitators: self.facilitators.clone(),
        }
    }

    /// Where R6's reference sources are, with no subject linked yet.
    pub fn reference_config(&self) -> crate::probe::reference::ReferenceConfig {
        crate::probe::reference::ReferenceConfig {
            npm_registry: self.npm_registry.as_ref().map(|u| u.as_str().to_string()),
            links: Default::default(),
        }
    }

    /// The prober's configuration, with the CA certificates already read.
    pub fn free_probe_config(&self, extra_roots: Vec<CertificateDer<'static>>) -> FreeProbeConfig {
        let mut fetch = FetchConfig {
            allow_private: self.allow_private,
            observe_invalid_tls: true,
            extra_roots,
            nameservers: self.nameservers.clone(),
            source_address: self.source_address,
            ..FetchConfig::default()
        };
        fetch.timeouts.dns_ms = self.dns_timeout_ms.get();
        let defaults = ListingBudget::default();
        let listing_budget = match &self.listing {
            None => defaults,
            Some(l) => ListingBudget {
                max_pages: l.max_pages.count(),
                max_bytes: l.max_bytes.count(),
                deadline: l.deadline_ms.millis(),
            },
        };
        FreeProbeConfig {
            fetch,
            samples: self.samples.count(),
            spacing: self.spacing_ms.millis(),
            deadline: self.free_deadline_ms.millis(),
            listing: self.listing.as_ref().map(|l| l.url.to_string()),
            listing_budget,
            rpc: self.rpc.as_ref().map(|u| Rpc::new(u.as_str())),
            solana_rpc: self.solana_rpc.as_ref().map(|u| SolanaRpc::new(u.as_str())),
            declared_assets: self.assets.clone(),
            vantage: self.vantage.to_string(),
            facilitators: self.facilitators.clone(),
        }
    }
}

/// A probe configuration with its files read.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub free: FreeProbeConfig,
    pub rubric: Rubric,
}

impl PayConfig {
    /// The caps' ranges and the wallet's name; errors name the flag or the file's key, as
    /// `source` says.
    pub fn validate(&self, source: Source) -> Result<(), ConfigError> {
        let per_call = source.pick("--max-usd", "[pay] max_usd");
        let max: Usd = MAX_CAP_USD
            .parse()
            .map_err(|e| invalid(per_call, format!("{e}")))?;
        for (option, cap) in [
            (per_call, Some(self.max_usd)),
            (
                source.pick(
                    "--max-usd-per-subject-per-day",
                    "[pay] max_usd_per_subject_per_day",
                ),
                self.max_usd_per_subject_per_day,
            ),
            (
                source.pick("--max-usd-per-day", "[pay] max_usd_per_day"),
                self.max_usd_per_day,
            ),
        ] {
            match cap {
                Some(cap) if cap == Usd::ZERO || cap > max => {
                    return Err(invalid(
                        option,
                        format!(
                            "{cap} USD is out of range: a cap is more than 0 and at most {MAX_CAP_USD} USD"
                        ),
                    ));
                }
                _ => {}
            }
        }
        for (option, wallet) in [
            (
                source.pick("--wallet-credential", "[pay] wallet"),
                Some(&self.wallet),
            ),
            ("[pay] solana_wallet", self.solana_wallet.as_ref()),
        ] {
            let Some(WalletSource::Credential(name)) = wallet else {
                continue;
            };
            let plain = !name.is_empty()
                && name != "."
                && name != ".."
                && !name.contains('/')
                && !name.chars().any(char::is_control);
            if !plain {
                return Err(invalid(option, "a credential name is a plain file name"));
            }
        }
        Ok(())
    }

    /// Per call, per subject per day, per day.
    pub fn caps(&self) -> (Usd, Usd, Usd) {
        (
            self.max_usd,
            self.max_usd_per_subject_per_day.unwrap_or(self.max_usd),
            self.max_usd_per_day.unwrap_or(self.max_usd),
        )
    }

    /// The paid prober's options: production timings, or the local lab's when `confirmations` is
    /// 0 (a dev chain that mines only on demand).
    pub fn paid_options(&self) -> PaidOptions {
        let base = match self.confirmations.get() {
            0 => PaidOptions::lab(),
            _ => PaidOptions::default(),
        };
        PaidOptions {
            confirmations: self.confirmations.get(),
            deadline_ms: self.paid_deadline_ms.get(),
            ..base
        }
    }
}

/// Where state lives when no directory is given: `$STATE_DIRECTORY` (systemd), else
/// `$XDG_STATE_HOME/x402-probe`, else `~/.local/state/x402-probe`.
pub fn default_state_dir() -> Result<PathBuf, ConfigError> {
    if let Some(d) = std::env::var_os("STATE_DIRECTORY").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d).join("x402-probe"));
    }
    let home = std::env::var_os("HOME")
        .filter(|d| !d.is_empty())
        .ok_or_else(|| {
            invalid(
                "--state-dir",
                "none given, and neither STATE_DIRECTORY, XDG_STATE_HOME nor HOME is set",
            )
        })?;
    Ok(PathBuf::from(home).join(".local/state/x402-probe"))
}

/// Every certificate in a PEM file, each one checked the way the TLS handshakes will use it.
pub fn read_ca_file(path: &std::path::Path) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let bytes = files::read_regular(path, caps::CA_FILE, "a CA file").map_err(|error| {
        ConfigError::File {
            option: "--ca-file",
            error,
        }
    })?;
    let shown = path.display();
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            invalid(
                "--ca-file",
                format!("{shown} is not a PEM certificate file: {e}"),
            )
        })?;
    if certs.is_empty() {
        return Err(invalid(
            "--ca-file",
            format!("{shown} holds no certificate"),
        ));
    }
    for (i, cert) in certs.iter().enumerate() {
        validate_extra_roots(std::slice::from_ref(cert)).map_err(|why| {
            invalid(
                "--ca-file",
                format!("{shown}: certificate #{} cannot be used: {why}", i + 1),
            )
        })?;
    }
    Ok(certs)
}

/// Why a rubric file was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum RubricFileError {
    #[error(transparent)]
    File(FileError),
    #[error("{0}")]
    Invalid(String),
}

/// A rubric file, read bounded and without blocking, then validated.
pub fn read_rubric(path: &std::path::Path) -> Result<Rubric, RubricFileError> {
    let bytes =
        files::read_regular(path, caps::RUBRIC, "a rubric file").map_err(RubricFileError::File)?;
    Rubric::from_bytes(&bytes)
        .map_err(|e| RubricFileError::Invalid(format!("rubric {}: {e}", path.display())))
}

// ---------------------------------------------------------------------------------------------
// The daemon's file (`x402-probe daemon --config FILE`): the same `[probe]` and `[pay]` tables,
// plus its own. An example with every field: `deploy/x402-probe.toml`.

range!(
    /// How often each subject gets a free run.
    FreeEveryRange, FreeEverySecs, 1, 604_800, 10_800, "s"
);
range!(
    /// Random spread of each due time, in percent of the cadence (both ways).
    JitterRange, JitterPercent, 0, 50, 10, "%"
);
range!(
    /// `[schedule] down_quorum`: how many of the vantages that probed a cycle must fail it for
    /// the cycle to count as failed (absent: a majority of them; `rubrics/README.md`).
    DownQuorumRange, DownQuorum, 1, 64, 2, "vantages"
);
range!(
    /// Runs in flight at once, all subjects together.
    ConcurrencyRange, Concurrency, 1, 4_096, 32, "runs"
);
range!(
    /// Least time between two runs on the same host.
    HostGapRange, HostGapMs, 0, 3_600_000, 1_000, "ms"
);
range!(
    /// The longest a failing subject's next run is put off (kept under the `down` gate's 72 h so
    /// the gate and a recovery are both seen).
    BackoffMaxRange, BackoffMaxSecs, 60, 86_400, 21_600, "s"
);
range!(
    /// Least time between two paid calls to one subject.
    PaidMinIntervalRange, PaidMinIntervalSecs, 60, 31_536_000, 604_800, "s"
);
range!(
    /// Distinct vantages that probe each subject per cycle (PostgreSQL).
    VantagesPerCycleRange, VantagesPerCycle, 1, 16, 1, "vantages"
);
range!(
    /// How long leased work is held without a heartbeat (PostgreSQL).
    LeaseRange, LeaseMs, 1_000, 3_600_000, 60_000, "ms"
);
range!(
    /// How often held leases are heart-beaten and due work looked for (PostgreSQL).
    HeartbeatRange, HeartbeatMs, 100, 600_000, 10_000, "ms"
);
range!(
    /// How often the control endpoint is probed.
    ControlEveryRange, ControlEverySecs, 10, 86_400, 300, "s"
);
range!(
    /// How often a catalogue is read.
    CatalogueEveryRange, CatalogueEverySecs, 60, 604_800, 86_400, "s"
);
range!(
    /// Subjects taken from one catalogue at most.
    CatalogueItemsRange, CatalogueMaxItems, 1, 1_000_000, 1_000, "subjects"
);
range!(
    /// Time between signed checkpoints of the ledger.
    CheckpointEveryRange, CheckpointEverySecs, 1, 86_400, 300, "s"
);
range!(
    /// How much history a score reads.
    HistoryDaysRange, HistoryDays, 30, 3_650, 180, "days"
);
range!(
    /// Subjects configured and discovered together, at most.
    MaxSubjectsRange, MaxSubjects, 1, 1_000_000, 100_000, "subjects"
);

range!(
    /// The longest one API request may take, from its head read to its response.
    ApiTimeoutRange, ApiRequestTimeoutMs, 100, 120_000, 10_000, "ms"
);
range!(
    /// The longest a client may take to send a request's head (slow clients hold no slot).
    ApiHeaderTimeoutRange, ApiHeaderTimeoutMs, 100, 60_000, 5_000, "ms"
);
range!(
    /// The largest request body the API reads (the public routes take none).
    ApiBodyRange, ApiMaxBodyBytes, 0, 1_048_576, 65_536, "bytes"
);
range!(
    /// Connections served at once; further ones wait to be accepted.
    ApiConnectionsRange, ApiMaxConnections, 1, 100_000, 1_024, "connections"
);
range!(
    /// Connections one client (IP address) may hold at once; further ones are closed at once
    /// (429), so one address cannot take every slot.
    ApiConnectionsPerClientRange, ApiMaxConnectionsPerClient, 1, 100_000, 64, "connections"
);
range!(
    /// The longest a connection may make no progress (nothing read or written) while no request
    /// on it is being answered: a stalled head or answer, or an idle keep-alive.
    ApiIdleTimeoutRange, ApiIdleTimeoutMs, 100, 600_000, 30_000, "ms"
);
range!(
    /// Requests one client (IP address) may make per second on the public routes, sustained.
    ApiRateRange, ApiRatePerSecond, 1, 1_000_000, 20, "requests/s"
);
range!(
    /// Requests one client may make at once above its sustained rate.
    ApiBurstRange, ApiRateBurst, 1, 1_000_000, 60, "requests"
);
range!(
    /// How long an operator's challenge may be answered (`POST /v1/operator/challenge`).
    ChallengeTtlRange, ChallengeTtlSecs, 1, 3_600, 300, "s"
);

/// The API's default address: loopback, port 8402 (402 for the status code x402 is built on).
pub const DEFAULT_API_BIND: &str = "127.0.0.1:8402";

fn default_api_bind() -> SocketAddr {
    DEFAULT_API_BIND.parse().expect("a socket address")
}

fn default_true() -> bool {
    true
}

/// `[store]`: where the daemon keeps its ledger and working state. Without it, SQLite in
/// `[daemon] state_dir` (the embedded default); `postgres` names a PostgreSQL database instead,
/// in which this daemon is the vantage `[probe] vantage` with its own log (README, "PostgreSQL").
/// The spend store, the keys and the API's files stay in the state directory either way.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// A `postgres://user@host:port/db` URL (or libpq's `key=value` form).
    #[serde(default)]
    pub postgres: Option<PostgresUrl>,
}

/// A PostgreSQL URL as configured: never printed whole (it may hold a password).
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct PostgresUrl(String);

impl PostgresUrl {
    pub fn new(url: impl Into<String>) -> PostgresUrl {
        PostgresUrl(url.into())
    }

    /// The URL itself, password included (to connect with).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PostgresUrl(..)")
    }
}

/// `[api]`: the HTTP server inside the daemon (the JSON API and what others mount beside it).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// Serve the API at all.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Where to listen; port 0 takes any free port (tests).
    #[serde(default = "default_api_bind")]
    pub bind: SocketAddr,
    #[serde(default)]
    pub request_timeout_ms: ApiRequestTimeoutMs,
    #[serde(default)]
    pub header_timeout_ms: ApiHeaderTimeoutMs,
    #[serde(default)]
    pub max_body_bytes: ApiMaxBodyBytes,
    #[serde(default)]
    pub max_connections: ApiMaxConnections,
    #[serde(default)]
    pub max_connections_per_client: ApiMaxConnectionsPerClient,
    #[serde(default)]
    pub idle_timeout_ms: ApiIdleTimeoutMs,
    #[serde(default)]
    pub rate_per_second: ApiRatePerSecond,
    #[serde(default)]
    pub rate_burst: ApiRateBurst,
    /// The admin token's file (a private file like a key: 0600, ours). Without it, and without
    /// a systemd credential `admin-token`, the admin routes refuse every request.
    #[serde(default)]
    pub admin_token_file: Option<PathBuf>,
    #[serde(default)]
    pub operator_challenge_ttl_secs: ChallengeTtlSecs,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            enabled: true,
            bind: default_api_bind(),
            request_timeout_ms: Default::default(),
            header_timeout_ms: Default::default(),
            max_body_bytes: Default::default(),
            max_connections: Default::default(),
            max_connections_per_client: Default::default(),
            idle_timeout_ms: Default::default(),
            rate_per_second: Default::default(),
            rate_burst: Default::default(),
            admin_token_file: None,
            operator_challenge_ttl_secs: Default::default(),
        }
    }
}

/// The reporter key that signs the ledger's checkpoints.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum KeySourceConfig {
    KeyFile(PathBuf),
    Credential(String),
}

/// `[daemon]`: where state lives and how the ledger is kept.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonSection {
    /// The ledger, the spend store and the schedule (default: `$STATE_DIRECTORY`, then
    /// `$XDG_STATE_HOME/x402-probe`, then `~/.local/state/x402-probe`).
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    pub reporter_key: KeySourceConfig,
    #[serde(default)]
    pub checkpoint_every_secs: CheckpointEverySecs,
    #[serde(default)]
    pub history_days: HistoryDays,
    #[serde(default)]
    pub max_subjects: MaxSubjects,
}

/// `[schedule]`: cadence, politeness, paid sampling.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleConfig {
    #[serde(default)]
    pub free_every_secs: FreeEverySecs,
    #[serde(default)]
    pub jitter_percent: JitterPercent,
    #[serde(default)]
    pub concurrency: Concurrency,
    #[serde(default)]
    pub per_host_gap_ms: HostGapMs,
    #[serde(default)]
    pub backoff_max_secs: BackoffMaxSecs,
    #[serde(default)]
    pub paid_min_interval_secs: PaidMinIntervalSecs,
    /// Pay on a subject's first run already (a verdict needs a paid call within 30 days anyway);
    /// by default a subject is first paid once its free evidence is verdict-ready.
    #[serde(default)]
    pub pay_from_first_run: bool,
    /// On PostgreSQL: how many distinct vantages probe each subject per cycle (`free_every_secs`),
    /// staggered within a minute at the subject's time in the cycle. Needs `[store] postgres` above 1.
    #[serde(default)]
    pub vantages_per_cycle: VantagesPerCycle,
    /// On PostgreSQL: how long a vantage holds leased work without a heartbeat (by the
    /// database's clock); a vantage killed or cut off loses its work to the others this long
    /// after its last heartbeat.
    #[serde(default)]
    pub lease_ms: LeaseMs,
    /// On PostgreSQL: how often a vantage heart-beats what it holds and looks for due work (at
    /// most half of `lease_ms`).
    #[serde(default)]
    pub heartbeat_ms: HeartbeatMs,
    /// With several vantages: R1 and R2 count a cycle as failed only when this many of the
    /// vantages that probed it failed it (absent: a majority of them). One vantage: unused.
    #[serde(default)]
    pub down_quorum: Option<DownQuorum>,
}

impl ScheduleConfig {
    /// The quorum the scorer reads several vantages' R1 and R2 under: `down_quorum`, a cycle
    /// being one free interval (`free_every_secs`).
    pub fn quorum(&self) -> crate::score::quorum::QuorumConfig {
        crate::score::quorum::QuorumConfig::new(
            self.down_quorum.as_ref().map(|k| k.get() as u32),
            self.free_every_secs.get(),
        )
    }
}

/// `[control]`: an endpoint we run ourselves with a known answer. While it fails, our vantage is
/// declared out and the subjects' free outcomes in that window count against nobody.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlConfig {
    pub url: HttpUrl,
    #[serde(default)]
    pub every_secs: ControlEverySecs,
    /// The status the known answer has (an x402 control answers 402).
    #[serde(default = "default_control_status")]
    pub expect_status: u16,
    /// Text the answer's body or headers must contain, when given.
    #[serde(default)]
    pub expect_contains: Option<String>,
}

fn default_control_status() -> u16 {
    402
}

/// `[[subject]]`: one endpoint to probe.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubjectConfig {
    /// Its URL; the subject is known by the canonical form.
    pub url: SubjectUrl,
    /// Its category, for value (price percentile among peers); default `uncategorised`.
    #[serde(default)]
    pub category: Option<String>,
    /// The reference source R6 compares its paid output with (`probes/references.json`:
    /// `npm`, `erc20_supply`); none: R6 is `na`.
    #[serde(default)]
    pub reference: Option<crate::evidence::reference::ReferenceId>,
}

/// `[[subjects_file]]`: a file of subjects, one URL a line, for more subjects than `[[subject]]`
/// tables fit in the configuration file's 4 MiB (about 60,000 realistic URLs). Read with the
/// configuration (again on SIGHUP): bounded ([`MAX_SUBJECTS_FILE_BYTES`],
/// [`MAX_SUBJECTS_FILE_LINES`], [`MAX_SUBJECTS_FILE_LINE_BYTES`]); blank lines and lines starting
/// with `#` are skipped; a URL that is not valid is refused with the file and its line.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubjectsFileConfig {
    pub path: PathBuf,
    /// The category its subjects get; default `uncategorised`.
    #[serde(default)]
    pub category: Option<String>,
}

/// The most bytes a subjects file may have (a million URLs of 130 bytes).
pub const MAX_SUBJECTS_FILE_BYTES: u64 = 128 * 1024 * 1024;
/// The most lines a subjects file may have, comments and blank lines included (the most subjects
/// `max_subjects` allows).
pub const MAX_SUBJECTS_FILE_LINES: usize = 1_000_000;
/// The longest line of a subjects file.
pub const MAX_SUBJECTS_FILE_LINE_BYTES: usize = 8 * 1024;

impl SubjectsFileConfig {
    /// The file's subjects, read line by line (never more than one line in memory besides them).
    pub fn read(&self) -> Result<Vec<SubjectConfig>, ConfigError> {
        use std::io::{BufRead, Read};
        const OPTION: &str = "[[subjects_file]]";
        let path = &self.path;
        let file = files::open_regular(path, MAX_SUBJECTS_FILE_BYTES, "a subjects file").map_err(
            |error| ConfigError::File {
                option: OPTION,
                error,
            },
        )?;
        let at =
            |n: usize, why: String| invalid(OPTION, format!("{} line {n}: {why}", path.display()));
        let mut reader = std::io::BufReader::new(file.reader());
        let mut subjects = Vec::new();
        let mut line = Vec::new();
        let mut total = 0u64;
        for n in 1.. {
            line.clear();
            let read = (&mut reader)
                .take(MAX_SUBJECTS_FILE_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut line)
                .map_err(|error| ConfigError::File {
                    option: OPTION,
                    error: FileError::Read {
                        path: path.clone(),
                        error,
                    },
                })?;
            if read == 0 {
                break;
            }
            // A file that grew past the cap since it was opened.
            total += read as u64;
            if total > MAX_SUBJECTS_FILE_BYTES {
                return Err(ConfigError::File {
                    option: OPTION,
                    error: FileError::TooLarge {
                        path: path.clone(),
                        size: total,
                        max: MAX_SUBJECTS_FILE_BYTES,
                        purpose: "a subjects file",
                    },
                });
            }
            if n > MAX_SUBJECTS_FILE_LINES {
                return Err(at(n, format!("more than {MAX_SUBJECTS_FILE_LINES} lines")));
            }
            if line.last() == Some(&b'\n') {
                line.pop();
            } else if line.len() > MAX_SUBJECTS_FILE_LINE_BYTES {
                return Err(at(
                    n,
                    format!("longer than {MAX_SUBJECTS_FILE_LINE_BYTES} bytes"),
                ));
            }
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let text = std::str::from_utf8(&line).map_err(|_| at(n, "not UTF-8".into()))?;
            let text = text.trim();
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            let url: SubjectUrl = text.parse().map_err(|why| at(n, why))?;
            subjects.push(SubjectConfig {
                url,
                category: self.category.clone(),
                reference: None,
            });
        }
        Ok(subjects)
    }
}

/// `[[catalogue]]`: a discovery catalogue whose listed endpoints become subjects.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogueConfig {
    /// The catalogue's `.../discovery/resources` URL (paged).
    pub url: HttpUrl,
    #[serde(default)]
    pub every_secs: CatalogueEverySecs,
    #[serde(default)]
    pub max_items: CatalogueMaxItems,
    #[serde(default)]
    pub max_pages: ListingMaxPages,
    #[serde(default)]
    pub max_bytes: ListingMaxBytes,
    #[serde(default)]
    pub deadline_ms: ListingDeadlineMs,
    /// Only items quoting on one of these networks (CAIP-2); empty: all.
    #[serde(default)]
    pub networks: Vec<String>,
    /// The category its subjects get; default `uncategorised`.
    #[serde(default)]
    pub category: Option<String>,
}

range!(
    /// Delivery attempts of one webhook event before it is marked dead.
    WebhookAttemptsRange, WebhookAttempts, 1, 100, 12, "attempts"
);
range!(
    /// The wait before a webhook event's second attempt (doubled at each further one).
    WebhookRetryInitialRange, WebhookRetryInitialMs, 100, 3_600_000, 10_000, "ms"
);
range!(
    /// The longest wait between two attempts of a webhook event.
    WebhookRetryMaxRange, WebhookRetryMaxMs, 100, 86_400_000, 3_600_000, "ms"
);
range!(
    /// One webhook POST, connect to last byte of the answer.
    WebhookTimeoutRange, WebhookTimeoutMs, 100, 60_000, 10_000, "ms"
);

/// Where a webhook's shared secret is read from (its bytes, surrounding whitespace dropped).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum WebhookSecret {
    /// A file owned by us with no group or other permissions.
    File(PathBuf),
    /// A systemd credential name (`$CREDENTIALS_DIRECTORY/NAME`).
    Credential(String),
}

impl WebhookSecret {
    pub fn key_source(&self) -> Result<crate::secret::KeySource, crate::secret::SecretError> {
        match self {
            WebhookSecret::File(path) => Ok(crate::secret::KeySource::File(path.clone())),
            WebhookSecret::Credential(name) => crate::secret::KeySource::credential(name),
        }
    }
}

fn all_webhook_events() -> Vec<crate::store::event_kind::EventKind> {
    crate::store::event_kind::EventKind::ALL.to_vec()
}

/// `[[webhook]]`: a receiver of events about subjects (README, "Webhooks").
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    pub url: HttpUrl,
    pub secret: WebhookSecret,
    /// Which events it gets; default all.
    #[serde(default = "all_webhook_events")]
    pub events: Vec<crate::store::event_kind::EventKind>,
    #[serde(default)]
    pub max_attempts: WebhookAttempts,
    #[serde(default)]
    pub retry_initial_ms: WebhookRetryInitialMs,
    #[serde(default)]
    pub retry_max_ms: WebhookRetryMaxMs,
    #[serde(default)]
    pub timeout_ms: WebhookTimeoutMs,
}

/// The daemon's whole file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    pub daemon: DaemonSection,
    #[serde(default)]
    pub probe: ProbeConfig,
    #[serde(default)]
    pub pay: Option<PayConfig>,
    #[serde(default)]
    pub schedule: ScheduleConfig,
    #[serde(default)]
    pub control: Option<ControlConfig>,
    /// The `[[subject]]` tables, then (once read) every subjects file's subjects.
    #[serde(default, rename = "subject")]
    pub subjects: Vec<SubjectConfig>,
    #[serde(default, rename = "subjects_file")]
    pub subjects_files: Vec<SubjectsFileConfig>,
    #[serde(default, rename = "catalogue")]
    pub catalogues: Vec<CatalogueConfig>,
    #[serde(default, rename = "webhook")]
    pub webhooks: Vec<WebhookConfig>,
    #[serde(default)]
    pub api: ApiConfig,
    #[serde(default)]
    pub store: StoreConfig,
    /// Feedback to an ERC-8004 reputation registry (`ledger feedback`); the daemon itself never
    /// reads it.
    #[serde(default)]
    pub feedback: Option<FeedbackConfig>,
}

/// `[feedback]`: the ERC-8004 reputation registry `ledger feedback --submit` writes to, with a
/// wallet and gas caps of its own (never the payment wallet: `validate` refuses the same key).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedbackConfig {
    /// The reputation registry's address.
    pub registry: String,
    /// The chain it is on (the RPC must answer this chain id).
    pub chain_id: u64,
    /// The JSON-RPC node the transactions go to (http or https).
    pub rpc: String,
    /// The key that signs the feedback transactions and pays their gas.
    pub wallet: WalletSource,
    /// Where the feedback files are published: each file's URI is this followed by its name
    /// (`<keccak256>.json`). Without it the feedback carries no URI (the hash still binds it).
    #[serde(default)]
    pub uri_base: Option<String>,
    /// The most gas one feedback transaction may use.
    #[serde(default = "default_feedback_gas")]
    pub max_gas_per_feedback: u64,
    /// The most wei per gas a feedback transaction may offer.
    pub max_fee_per_gas_wei: u64,
    /// The most wei one `ledger feedback --submit` may spend on gas, counting each transaction at
    /// its limit times its fee cap.
    pub max_wei_per_run: u64,
}

fn default_feedback_gas() -> u64 {
    500_000
}

impl FeedbackConfig {
    /// The registry's address, the RPC's form, the caps' ranges; and never the payment wallet.
    pub fn validate(
        &self,
        pay: Option<&PayConfig>,
    ) -> Result<alloy::primitives::Address, ConfigError> {
        let registry = crate::x402::types::parse_address_any_case(&self.registry)
            .ok_or_else(|| invalid("[feedback] registry", "not a 0x-prefixed 20-byte address"))?;
        if !(self.rpc.starts_with("http://") || self.rpc.starts_with("https://")) {
            return Err(invalid("[feedback] rpc", "an http or https URL"));
        }
        if let Some(base) = &self.uri_base
            && !(base.starts_with("https://")
                || base.starts_with("http://")
                || base.starts_with("ipfs://"))
        {
            return Err(invalid("[feedback] uri_base", "an https, http or ipfs URI"));
        }
        for (option, value) in [
            ("[feedback] chain_id", self.chain_id),
            ("[feedback] max_gas_per_feedback", self.max_gas_per_feedback),
            ("[feedback] max_fee_per_gas_wei", self.max_fee_per_gas_wei),
            ("[feedback] max_wei_per_run", self.max_wei_per_run),
        ] {
            if value == 0 {
                return Err(invalid(option, "must be at least 1"));
            }
        }
        if pay.is_some_and(|pay| pay.wallet == self.wallet) {
            return Err(invalid(
                "[feedback] wallet",
                "is the [pay] wallet: feedback has a wallet of its own, so its gas never spends \
                 what paid calls may",
            ));
        }
        Ok(registry)
    }
}

/// The most bytes a daemon configuration file may have.
pub const MAX_DAEMON_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

impl DaemonConfig {
    /// Reads and checks a daemon file: bounded, every value in range, unknown fields refused.
    pub fn read(path: &std::path::Path) -> Result<DaemonConfig, ConfigError> {
        Self::read_with_table(path).map(|(config, _)| config)
    }

    /// [`DaemonConfig::read`], with the file's TOML table as written (what a reload compares
    /// key by key to name what changed).
    pub fn read_with_table(
        path: &std::path::Path,
    ) -> Result<(DaemonConfig, toml::Table), ConfigError> {
        let bytes = files::read_regular(path, MAX_DAEMON_CONFIG_BYTES, "a daemon configuration")
            .map_err(|error| ConfigError::File {
                option: "--config",
                error,
            })?;
        let text = std::str::from_utf8(&bytes).map_err(|e| invalid("--config", e.to_string()))?;
        let mut config: DaemonConfig =
            toml::from_str(text).map_err(|e| invalid("--config", e.to_string()))?;
        for file in &config.subjects_files {
            config.subjects.extend(file.read()?);
        }
        config.validate()?;
        let table: toml::Table =
            toml::from_str(text).map_err(|e| invalid("--config", e.to_string()))?;
        Ok((config, table))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.probe.validate(Source::File)?;
        if let Some(pay) = &self.pay {
            pay.validate(Source::File)?;
            if pay.state_dir.is_some() {
                return Err(invalid(
                    "[pay] state_dir",
                    "the daemon keeps the spend store in [daemon] state_dir",
                ));
            }
            if self.probe.rpc.is_none() {
                return Err(invalid("[pay]", "paying needs [probe] rpc (the fixed RPC)"));
            }
            if pay.solana_wallet.is_some() && self.probe.solana_rpc.is_none() {
                return Err(invalid(
                    "[pay] solana_wallet",
                    "paying Solana entries needs [probe] solana_rpc (the fixed Solana RPC)",
                ));
            }
        }
        let s = &self.schedule;
        if s.heartbeat_ms.get() * 2 > s.lease_ms.get() {
            return Err(invalid(
                "[schedule] heartbeat_ms",
                format!(
                    "{} ms is more than half of lease_ms ({} ms): a lease would expire between \
                     two heartbeats",
                    s.heartbeat_ms.get(),
                    s.lease_ms.get()
                ),
            ));
        }
        let per_cycle = s.vantages_per_cycle.get();
        if per_cycle > 1 && self.store.postgres.is_none() {
            return Err(invalid(
                "[schedule] vantages_per_cycle",
                format!(
                    "{per_cycle} vantages per cycle need a store they share: set [store] \
                     postgres (on SQLite the daemon is the only vantage)"
                ),
            ));
        }
        if s.free_every_secs.get() < per_cycle {
            return Err(invalid(
                "[schedule] vantages_per_cycle",
                format!(
                    "{per_cycle} runs per cycle of {} s would be less than a second apart",
                    s.free_every_secs.get()
                ),
            ));
        }
        if let Some(url) = &self.store.postgres {
            url.expose()
                .parse::<tokio_postgres::Config>()
                .map_err(|e| invalid("[store] postgres", format!("not a PostgreSQL URL: {e}")))?;
        }
        if let KeySourceConfig::Credential(name) = &self.daemon.reporter_key
            && (name.is_empty() || name.contains('/') || name == "." || name == "..")
        {
            return Err(invalid(
                "[daemon] reporter_key",
                "a credential name is a plain file name",
            ));
        }
        let mut seen = BTreeMap::new();
        for s in &self.subjects {
            // R6's references read their key from an HTTP request; an MCP tool's link would be
            // silently ignored.
            if s.reference.is_some() && s.url.as_str().starts_with("mcp+") {
                return Err(invalid(
                    "[[subject]] reference",
                    format!(
                        "{}: an MCP tool has no reference source yet (R6 stays na); drop the key",
                        s.url.given()
                    ),
                ));
            }
            if let Some(first) = seen.insert(s.url.as_str(), s.url.given()) {
                let why = if first == s.url.given() {
                    format!("{first} is listed twice")
                } else {
                    format!(
                        "{first} and {} are one endpoint, {}: list it once (its caps are per endpoint)",
                        s.url.given(),
                        s.url
                    )
                };
                return Err(invalid("[[subject]]", why));
            }
            if let Some(c) = &s.category {
                check_category(c)?;
            }
        }
        // The daemon knows a catalogue by its URL (its reads, a reload's changes).
        let mut catalogues = std::collections::BTreeSet::new();
        for c in &self.catalogues {
            if !catalogues.insert(c.url.as_str()) {
                return Err(invalid(
                    "[[catalogue]]",
                    format!("{} is listed twice", c.url),
                ));
            }
            if let Some(cat) = &c.category {
                check_category(cat)?;
            }
        }
        let mut hooks = std::collections::BTreeSet::new();
        for w in &self.webhooks {
            if !hooks.insert(w.url.as_str()) {
                return Err(invalid("[[webhook]]", format!("{} is listed twice", w.url)));
            }
            if w.events.is_empty() {
                return Err(invalid(
                    "[[webhook]] events",
                    format!("{}: no event chosen (leave events out for all)", w.url),
                ));
            }
            if w.retry_max_ms.get() < w.retry_initial_ms.get() {
                return Err(invalid(
                    "[[webhook]] retry_max_ms",
                    format!("{}: less than retry_initial_ms", w.url),
                ));
            }
            if let WebhookSecret::Credential(name) = &w.secret
                && (name.is_empty() || name.contains('/') || name == "." || name == "..")
            {
                return Err(invalid(
                    "[[webhook]] secret",
                    "a credential name is a plain file name",
                ));
            }
        }
        if self.subjects.len() as u64 > self.daemon.max_subjects.get() {
            return Err(invalid(
                "[[subject]]",
                format!(
                    "{} subjects ([[subject]] tables and subjects files) is more than [daemon] max_subjects ({})",
                    self.subjects.len(),
                    self.daemon.max_subjects
                ),
            ));
        }
        Ok(())
    }
}

fn check_category(c: &str) -> Result<(), ConfigError> {
    let ok = !c.is_empty()
        && c.len() <= 64
        && c.chars()
            .all(|ch| ch.is_ascii_alphanumeric() || "-_.".contains(ch));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "category",
            format!("{c:?}: 1 to 64 characters from [A-Za-z0-9._-]"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_outside_their_range_are_refused_with_the_range() {
        let err = "18446744073709551615".parse::<SpacingMs>().unwrap_err();
        assert!(err.to_string().contains("from 0 to 60000 (ms)"), "{err}");
        for bad in [
            "",
            "-1",
            "+5",
            "1e3",
            " 5",
            "60001",
            "99999999999999999999999",
        ] {
            assert!(bad.parse::<SpacingMs>().is_err(), "{bad:?}");
        }
        assert_eq!("60000".parse::<SpacingMs>().unwrap().get(), 60_000);
        assert!("0".parse::<Samples>().is_err());
        assert_eq!(Samples::default().get(), 5);
        assert_eq!(FreeDeadlineMs::default().millis(), Duration::from_secs(120));
    }

    #[test]
    fn the_file_form_refuses_unknown_keys_and_out_of_range_values() {
        let ok: RunConfig = serde_json::from_value(serde_json::json!({
            "probe": {"samples": 3, "listing": {"url": "https://catalogue.example/discovery/resources"},
                      "vantage": "eu-west-1", "provenance": "test_harness"},
            "pay": {"max_usd": "0.05", "wallet": {"key_file": "/secret/key"}, "confirmations": 0}
        }))
        .unwrap();
        assert_eq!(ok.probe.samples.get(), 3);
        assert_eq!(ok.probe.spacing_ms, SpacingMs::default());
        assert_eq!(ok.probe.provenance, Provenance::TestHarness);
        let synthetic: Provenance =
            serde_json::from_value(serde_json::json!("synthetic_fixture")).unwrap();
        assert_eq!(synthetic.as_str(), "synthetic_fixture");
        let pay = ok.pay.as_ref().unwrap();
        assert_eq!(pay.paid_options().confirmations, 0);
        assert_eq!(pay.paid_options().deadline_ms, 900_000);
        assert_eq!(pay.caps().2, "0.05".parse().unwrap());
        let err = ok.validate().unwrap_err();
        assert!(err.to_string().contains("--rpc"), "{err}");

        for (bad, want) in [
            (
                serde_json::json!({"probe": {"sampels": 3}}),
                "unknown field",
            ),
            (
                serde_json::json!({"probe": {"spacing_ms": 1u64 << 63}}),
                "from 0 to 60000",
            ),
            (
                serde_json::json!({"probe": {"rpc": "http://user:pw@node.example/"}}),
                "user info",
            ),
            (serde_json::json!({"probe": {"vantage": "a b"}}), "vantage"),
            (
                serde_json::json!({"pay": {"max_usd": "1", "wallet": {"key_file": "k"}, "cap": 1}}),
                "unknown field",
            ),
        ] {
            let err = serde_json::from_value::<RunConfig>(bad.clone()).unwrap_err();
            assert!(err.to_string().contains(want), "{bad}: {err}");
        }
    }

    #[test]
    fn the_daemons_toml_tables_map_onto_the_same_types() {
        let text = r#"
            [probe]
            samples = 3
            free_deadline_ms = 60000
            nameservers = ["127.0.0.1:5353"]
            rpc = "https://node.example/"
            [probe.listing]
            url = "https://catalogue.example/discovery/resources"
            max_pages = 10
            [pay]
            max_usd = "0.05"
            max_usd_per_day = "1"
            wallet = { credential = "wallet-key" }
        "#;
        let config: RunConfig = toml::from_str(text).unwrap();
        config.validate().unwrap();
        assert_eq!(config.probe.free_deadline_ms.get(), 60_000);
        assert_eq!(config.probe.listing.as_ref().unwrap().max_pages.get(), 10);
        let pay = config.pay.unwrap();
        assert_eq!(pay.wallet, WalletSource::Credential("wallet-key".into()));
        assert_eq!(pay.caps().1, "0.05".parse().unwrap());
        let free = config.probe.free_probe_config(Vec::new());
        assert_eq!(free.listing_budget.max_pages, 10);
        assert_eq!(free.fetch.nameservers.len(), 1);

        for (bad, want) in [
            ("[probe]\nspacing_ms = 60001\n", "from 0 to 60000"),
            ("[probe]\nsampels = 3\n", "unknown field"),
            ("[daemon]\n", "unknown field"),
            ("[probe.listing]\nurl = \"http://a..b/\"\n", "empty label"),
        ] {
            let err = toml::from_str::<RunConfig>(bad).unwrap_err();
            assert!(err.to_string().contains(want), "{bad}: {err}");
        }
    }

    #[test]
    fn a_source_address_must_be_one_connections_can_leave_from_and_this_machines() {
        let probe = |text: &str| toml::from_str::<RunConfig>(text).map(|c| c.probe);
        let ok = probe("[probe]\nsource_address = \"127.0.0.2\"\n").unwrap();
        ok.validate(Source::File).unwrap();
        let prepared = ok.prepare().unwrap();
        assert_eq!(
            prepared.free.fetch.source_address,
            Some(IpAddr::from([127, 0, 0, 2]))
        );
        for bad in ["0.0.0.0", "::", "224.0.0.1", "255.255.255.255"] {
            let p = probe(&format!("[probe]\nsource_address = \"{bad}\"\n")).unwrap();
            let err = p.validate(Source::File).unwrap_err().to_string();
            assert!(err.contains("[probe] source_address"), "{bad}: {err}");
        }
        // Not an IP: refused as it is read.
        assert!(probe("[probe]\nsource_address = \"lab\"\n").is_err());
        // An address this machine does not have (TEST-NET-3): refused before any traffic.
        let elsewhere = probe("[probe]\nsource_address = \"203.0.113.7\"\n").unwrap();
        elsewhere.validate(Source::File).unwrap();
        let err = elsewhere.prepare().unwrap_err().to_string();
        assert!(
            err.contains("[probe] source_address")
                && err.contains("not an address of this machine"),
            "{err}"
        );
    }

    #[test]
    fn caps_must_be_positive_and_modest() {
        let pay = |usd: &str| PayConfig {
            max_usd: usd.parse().unwrap(),
            max_usd_per_subject_per_day: None,
            max_usd_per_day: None,
            wallet: WalletSource::Credential("wallet-key".into()),
            solana_wallet: None,
            state_dir: None,
            confirmations: Confirmations::default(),
            paid_deadline_ms: PaidDeadlineMs::default(),
        };
        assert!(pay("0.05").validate(Source::Flags).is_ok());
        assert!(pay("0").validate(Source::Flags).is_err());
        let err = pay("1000.000001").validate(Source::Flags).unwrap_err();
        assert!(err.to_string().starts_with("--max-usd:"), "{err}");
        let err = pay("1000.000001").validate(Source::File).unwrap_err();
        assert!(err.to_string().starts_with("[pay] max_usd:"), "{err}");
        let mut bad_name = pay("1");
        bad_name.wallet = WalletSource::Credential("../key".into());
        assert!(bad_name.validate(Source::Flags).is_err());
    }

    #[test]
    fn money_in_a_file_is_a_decimal_string_or_an_integer_of_atomic_units_never_a_float() {
        let read = |pay: &str| {
            toml::from_str::<RunConfig>(&format!(
                "[pay]\nwallet = {{ credential = \"k\" }}\n{pay}\n"
            ))
            .map(|c| c.pay.unwrap().caps())
        };
        let (per_call, per_subject, per_day) =
            read("max_usd = \"0.1\"\nmax_usd_per_day = 300000").unwrap();
        assert_eq!(per_call.to_string(), "0.1");
        assert_eq!(per_subject, per_call);
        assert_eq!(per_day.to_string(), "0.3", "an integer counts 10^-6 USD");
        for (bad, says) in [
            ("max_usd = 0.1", "[pay] max_usd: 0.1 is a float"),
            (
                "max_usd = \"1\"\nmax_usd_per_subject_per_day = 2.0",
                "[pay] max_usd_per_subject_per_day: 2 is a float",
            ),
            (
                "max_usd = \"1e2\"",
                "[pay] max_usd: \"1e2\" is not a dollar amount",
            ),
            ("max_usd = -1", "[pay] max_usd: -1 is negative"),
            ("max_usd = true", "[pay] max_usd"),
        ] {
            let err = read(bad).unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
        // JSON alike (the file form's other spelling).
        let err = serde_json::from_value::<RunConfig>(serde_json::json!(
            {"pay": {"max_usd": 0.05, "wallet": {"credential": "k"}}}
        ))
        .unwrap_err();
        assert!(
            err.to_string().contains("[pay] max_usd: 0.05 is a float"),
            "{err}"
        );
    }

    #[test]
    fn subjects_are_known_by_their_canonical_url_and_listed_once() {
        let read = |urls: &[&str]| {
            let subjects: String = urls
                .iter()
                .map(|u| format!("[[subject]]\nurl = \"{u}\"\n"))
                .collect();
            let text = format!("[daemon]\nreporter_key = {{ credential = \"k\" }}\n{subjects}");
            toml::from_str::<DaemonConfig>(&text)
                .map_err(|e| e.to_string())
                .and_then(|c| c.validate().map(|()| c).map_err(|e| e.to_string()))
        };
        let config = read(&[
            "HTTPS://Api.Example.COM.:443/v1/../pay",
            "http://127.1:8080/x",
        ])
        .unwrap();
        let urls: Vec<String> = config.subjects.iter().map(|s| s.url.to_string()).collect();
        assert_eq!(
            urls,
            ["https://api.example.com/pay", "http://127.0.0.1:8080/x"]
        );
        assert_eq!(config.subjects[1].url.given(), "http://127.1:8080/x");
        let err = read(&["http://127.0.0.1:8080/x", "http://0x7f000001:8080/x"]).unwrap_err();
        assert!(
            err.contains("http://127.0.0.1:8080/x and http://0x7f000001:8080/x are one endpoint"),
            "{err}"
        );
        let err = read(&["http://a.example/x", "http://a.example/x"]).unwrap_err();
        assert!(err.contains("http://a.example/x is listed twice"), "{err}");
        // Another query is another endpoint.
        assert!(read(&["http://a.example/x?a=1", "http://a.example/x?a=2"]).is_ok());
    }

    /// An MCP tool linked to a reference source is refused: its link would be ignored.
    #[test]
    fn a_reference_on_an_mcp_tool_is_refused() {
        let read = |url: &str| {
            let text = format!(
                "[daemon]\nreporter_key = {{ credential = \"k\" }}\n\
                 [[subject]]\nurl = \"{url}\"\nreference = \"npm\"\n"
            );
            toml::from_str::<DaemonConfig>(&text)
                .map_err(|e| e.to_string())
                .and_then(|c| c.validate().map_err(|e| e.to_string()))
        };
        assert_eq!(read("https://a.example/pkg"), Ok(()));
        let err = read("mcp+https://a.example/mcp#lookup").unwrap_err();
        assert!(err.contains("[[subject]] reference"), "{err}");
        assert!(err.contains("MCP tool"), "{err}");
    }

    /// The documented example in `deploy/` is a valid file, and every default it shows in a
    /// comment is the default the code has (uncommenting a line changes nothing).
    #[test]
    fn the_deploy_example_reads_and_its_commented_defaults_are_the_defaults() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/x402-probe.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let config = DaemonConfig::read(&path).unwrap();
        assert_eq!(
            config.daemon.reporter_key,
            KeySourceConfig::Credential("reporter-key".into())
        );
        assert!(config.pay.is_some() && config.control.is_some());
        assert_eq!(config.subjects.len(), 3);
        assert_eq!(
            config.subjects[2].reference,
            Some(crate::evidence::reference::ReferenceId::Npm)
        );
        assert_eq!(config.catalogues.len(), 1);
        // The webhook table is there, disabled (its secret file must exist before it is
        // enabled): removing one `#` from its lines enables it, defaults and all.
        assert!(
            config.webhooks.is_empty() && config.subjects_files.is_empty(),
            "the example starts as is"
        );
        let enabled: String = text
            .lines()
            .map(|l| match l.strip_prefix('#') {
                Some(rest)
                    if rest.starts_with(['[', '#']) || rest.starts_with(char::is_alphabetic) =>
                {
                    rest
                }
                _ => l,
            })
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(
            text.contains("\n#[[webhook]]\n"),
            "the disabled webhook table"
        );

        // Uncomment every `# key = value` line inside its table; the values must equal the
        // defaults just read (sections whose only lines are commented alternatives are skipped).
        let mut uncommented = String::new();
        for line in enabled.lines() {
            let plain = line.strip_prefix("# ").unwrap_or(line);
            let is_default_line = line.starts_with("# ")
                && plain.contains(" = ")
                && !plain.contains('{')
                && !plain.starts_with("state_dir")
                && !plain.starts_with("admin_token_file")
                && !plain.starts_with("nameservers")
                && !plain.starts_with("rubric");
            uncommented.push_str(if is_default_line { plain } else { line });
            uncommented.push('\n');
        }
        let explicit: DaemonConfig = toml::from_str(&uncommented).unwrap();
        explicit.validate().unwrap();
        assert_eq!(explicit.webhooks.len(), 1, "the enabled webhook table");
        assert_eq!(
            explicit.subjects_files,
            [SubjectsFileConfig {
                path: "/etc/x402-probe/subjects.txt".into(),
                category: Some("weather".into()),
            }],
            "the enabled subjects file table"
        );
        let enabled: DaemonConfig = toml::from_str(&enabled).unwrap();
        assert_eq!(
            explicit, enabled,
            "a commented default differs from the code's"
        );
        let mut without_webhooks = explicit;
        without_webhooks.webhooks.clear();
        without_webhooks.subjects_files.clear();
        assert!(
            without_webhooks.feedback.take().is_some(),
            "the enabled feedback table"
        );
        assert_eq!(without_webhooks, config);
    }

    /// `[[subjects_file]]`: one URL a line, blank lines and `#` comments skipped, read with the
    /// configuration; every refusal (too large, too many lines, a line too long, a bad URL) is a
    /// configuration error naming the file, and the line when one is at fault.
    #[test]
    fn subjects_files_are_read_bounded_and_refused_by_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let config_with = |files: &[(&std::path::Path, Option<&str>)]| {
            let mut text = String::from(
                "[daemon]\nreporter_key = { credential = \"k\" }\nmax_subjects = 4\n\n[[subject]]\nurl = \"https://a.example/x\"\n",
            );
            for (path, category) in files {
                text.push_str(&format!(
                    "\n[[subjects_file]]\npath = {:?}\n",
                    path.display().to_string()
                ));
                if let Some(c) = category {
                    text.push_str(&format!("category = \"{c}\"\n"));
                }
            }
            let config = dir.path().join("daemon.toml");
            std::fs::write(&config, text).unwrap();
            DaemonConfig::read(&config)
        };
        let file = |name: &str, text: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };

        let good = file(
            "good.txt",
            b"# weather endpoints\n\nhttps://b.example/w\r\n  https://c.example/w  \n   # indented comment\nhttp://127.0.0.1:8080/x",
        );
        let config = config_with(&[(&good, Some("weather"))]).unwrap();
        let got: Vec<(&str, Option<&str>)> = config
            .subjects
            .iter()
            .map(|s| (s.url.as_str(), s.category.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("https://a.example/x", None),
                ("https://b.example/w", Some("weather")),
                ("https://c.example/w", Some("weather")),
                ("http://127.0.0.1:8080/x", Some("weather")),
            ]
        );

        let refused = |path: &std::path::Path, want: &str| {
            let err = config_with(&[(path, None)]).unwrap_err().to_string();
            assert!(
                err.contains(&path.display().to_string()) && err.contains(want),
                "{want}: {err}"
            );
        };
        refused(
            &file("bad.txt", b"# ok\nhttps://b.example/\n\nftp://c.example/\n"),
            "line 4:",
        );
        refused(&file("space.txt", b"https://b.example/a b\n"), "line 1:");
        refused(
            &file("latin1.txt", b"\n\nhttps://b.example/\xe9\n"),
            "line 3: not UTF-8",
        );
        let long = format!("#\n#{}\n", "x".repeat(MAX_SUBJECTS_FILE_LINE_BYTES));
        refused(
            &file("long.txt", long.as_bytes()),
            "line 2: longer than 8192 bytes",
        );
        let lines = "#\n".repeat(MAX_SUBJECTS_FILE_LINES) + "https://b.example/\n";
        refused(
            &file("lines.txt", lines.as_bytes()),
            "line 1000001: more than 1000000 lines",
        );
        // Too large: refused from its size alone, before a byte is read (a sparse file).
        let large = dir.path().join("large.txt");
        std::fs::File::create(&large)
            .unwrap()
            .set_len(MAX_SUBJECTS_FILE_BYTES + 1)
            .unwrap();
        refused(
            &large,
            "is more than the 134217728 bytes allowed for a subjects file",
        );
        refused(&dir.path().join("missing.txt"), "cannot open it");

        // Files count with the tables against max_subjects, and a URL listed twice is refused
        // wherever it is listed.
        let more = file("more.txt", b"https://d.example/\n");
        let err = config_with(&[(&good, None), (&more, None)]).unwrap_err();
        assert!(
            err.to_string()
                .contains("more than [daemon] max_subjects (4)"),
            "{err}"
        );
        let twice = file("twice.txt", b"https://a.example/x\n");
        let err = config_with(&[(&twice, None)]).unwrap_err();
        assert!(err.to_string().contains("listed twice"), "{err}");
        let err = config_with(&[(&good, Some("no spaces"))]).unwrap_err();
        assert!(err.to_string().contains("category"), "{err}");
    }
}
