//! The daemon's configuration for a running lab, as TOML text: one builder for every caller that
//! points a daemon at the lab (`x402-probe simulate`, `x402-probe daemon --lab` and the tests), so
//! the lab's CA file, RPC URL, token and payer key are written in one place. The text is what the
//! daemon reads (`x402_probe::config::DaemonConfig::read`), nothing more: the lab does not know the
//! daemon's types.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use crate::Lab;

/// The `[pay]` caps, as the configuration spells them (USD decimal strings).
#[derive(Debug, Clone, PartialEq)]
pub struct PayCaps {
    pub per_call: String,
    pub per_subject_per_day: String,
    pub per_day: String,
}

impl Default for PayCaps {
    fn default() -> Self {
        PayCaps {
            per_call: "0.05".into(),
            per_subject_per_day: "0.50".into(),
            per_day: "5".into(),
        }
    }
}

/// What a daemon pointed at the lab is told. `Default` is the tests' usual daemon: two samples,
/// a free run every 3 hours, a paid call a day once the evidence is verdict-ready, the default
/// caps, no control endpoint and the API on a free loopback port.
#[derive(Debug, Clone, PartialEq)]
pub struct LabDaemonConfig {
    /// A first comment line saying who wrote the file (empty: none).
    pub written_by: String,
    pub state_dir: PathBuf,
    /// Default: `reporter.key` in the state directory.
    pub reporter_key: Option<PathBuf>,
    pub checkpoint_every_secs: u64,
    pub samples: u64,
    pub provenance: String,
    pub free_every_secs: u64,
    pub per_host_gap_ms: u64,
    pub paid_min_interval_secs: u64,
    /// `Some`: written (the daemon's default otherwise).
    pub pay_from_first_run: Option<bool>,
    pub backoff_max_secs: Option<u64>,
    /// Lines added to `[schedule]` as they are.
    pub schedule_extra: String,
    /// `None`: no `[pay]` table (the daemon never pays).
    pub pay: Option<PayCaps>,
    /// `(url, every_secs)` of the control endpoint.
    pub control: Option<(String, u64)>,
    /// `(url, category)` of each subject.
    pub subjects: Vec<(String, String)>,
    /// `[probe] vantage` (default `lab`).
    pub vantage: String,
    /// `[probe] source_address`: the address this vantage's probes leave from.
    pub source_address: Option<std::net::IpAddr>,
    /// `[store] postgres`: the database shared by every vantage (none: SQLite).
    pub postgres: Option<String>,
    /// Tables written last, as they are (default: `[api]` on a free loopback port, so tests
    /// never share one).
    pub tail: String,
}

impl LabDaemonConfig {
    pub fn new(state_dir: &Path) -> LabDaemonConfig {
        LabDaemonConfig {
            written_by: String::new(),
            state_dir: state_dir.to_path_buf(),
            reporter_key: None,
            checkpoint_every_secs: 3600,
            samples: 2,
            provenance: "test_harness".into(),
            free_every_secs: 3 * 3600,
            per_host_gap_ms: 1000,
            paid_min_interval_secs: 86_400,
            pay_from_first_run: None,
            backoff_max_secs: None,
            schedule_extra: String::new(),
            pay: Some(PayCaps::default()),
            control: None,
            subjects: Vec::new(),
            vantage: "lab".into(),
            source_address: None,
            postgres: None,
            tail: "[api]\nbind = \"127.0.0.1:0\"\n".into(),
        }
    }

    /// The TOML text for `lab`.
    pub fn text(&self, lab: &Lab) -> String {
        let key = self
            .reporter_key
            .clone()
            .unwrap_or_else(|| self.state_dir.join("reporter.key"));
        let mut text = String::new();
        if !self.written_by.is_empty() {
            let _ = writeln!(text, "# {}", self.written_by);
        }
        let _ = write!(
            text,
            r#"[daemon]
state_dir = "{state}"
reporter_key = {{ key_file = "{key}" }}
checkpoint_every_secs = {checkpoint}

[probe]
samples = {samples}
spacing_ms = 0
allow_private = true
ca_files = ["{ca}"]
rpc = "{rpc}"
assets = ["{token}"]
facilitators = ["{facilitator}"]
provenance = "{provenance}"
vantage = "{vantage}"
"#,
            state = self.state_dir.display(),
            key = key.display(),
            checkpoint = self.checkpoint_every_secs,
            samples = self.samples,
            ca = lab.ca_file.display(),
            rpc = lab.rpc_url(),
            token = lab.token.address().to_checksum(None),
            facilitator = lab.facilitator_signer.to_checksum(None),
            provenance = self.provenance,
            vantage = self.vantage,
        );
        // The local SVM, when a Solana scenario runs.
        if let Some(solana_rpc) = lab.solana_rpc_url() {
            let _ = writeln!(text, "solana_rpc = \"{solana_rpc}\"");
        }
        if let Some(ip) = self.source_address {
            let _ = writeln!(text, "source_address = \"{ip}\"");
        }
        let _ = write!(
            text,
            r#"
[schedule]
free_every_secs = {free_every}
jitter_percent = 10
concurrency = 8
per_host_gap_ms = {gap}
paid_min_interval_secs = {paid_every}
"#,
            free_every = self.free_every_secs,
            gap = self.per_host_gap_ms,
            paid_every = self.paid_min_interval_secs,
        );
        if let Some(secs) = self.backoff_max_secs {
            let _ = writeln!(text, "backoff_max_secs = {secs}");
        }
        if let Some(first) = self.pay_from_first_run {
            let _ = writeln!(text, "pay_from_first_run = {first}");
        }
        text.push_str(&self.schedule_extra);
        if let Some(caps) = &self.pay {
            let _ = write!(
                text,
                r#"
[pay]
max_usd = "{}"
max_usd_per_subject_per_day = "{}"
max_usd_per_day = "{}"
wallet = {{ key_file = "{}" }}
confirmations = 0
"#,
                caps.per_call,
                caps.per_subject_per_day,
                caps.per_day,
                lab.payer_key_file.display()
            );
            // Solana entries are paid from the lab's Solana payer when the SVM runs.
            if let Some(key) = &lab.solana_payer_key_file {
                let _ = writeln!(
                    text,
                    "solana_wallet = {{ key_file = \"{}\" }}",
                    key.display()
                );
            }
        }
        if let Some((url, every)) = &self.control {
            let _ = write!(
                text,
                "\n[control]\nurl = \"{url}\"\nevery_secs = {every}\nexpect_status = 402\n"
            );
        }
        for (url, category) in &self.subjects {
            let _ = write!(
                text,
                "\n[[subject]]\nurl = \"{url}\"\ncategory = \"{category}\"\n"
            );
        }
        if let Some(url) = &self.postgres {
            let _ = write!(text, "\n[store]\npostgres = \"{url}\"\n");
        }
        if !self.tail.is_empty() {
            text.push('\n');
            text.push_str(&self.tail);
        }
        text
    }
}
