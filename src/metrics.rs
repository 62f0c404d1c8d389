//! The daemon's Prometheus metrics: what happened (runs, check outcomes, probe phase durations,
//! paid calls, scheduler lag, webhook deliveries) counted where it happens, and what is (subjects
//! by verdict, money spent against the caps, the ledger, our outage state, the queue) read when a
//! scrape renders the exposition.
//!
//! Names follow the Prometheus conventions: the `x402_probe_` prefix, snake_case, counters end in
//! `_total`, base units (`_seconds`, and `_usd` for money). Every label value comes from a closed
//! set (an enum here or in the evidence model), never from free text such as a URL, so the number
//! of series is bounded by the code. The series are listed in the README ("Metrics").
//!
//! The registry encodes OpenMetrics; [`Format::Prometheus`] (the classic text format 0.0.4, what
//! `promtool check metrics` reads and what a scrape without an OpenMetrics `Accept` gets) is the
//! same exposition with the two spellings that differ rewritten: a counter's family is named with
//! its `_total`, and the OpenMetrics-only `# UNIT` and `# EOF` lines are left out.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::evidence::CheckId;
use crate::evidence::Outcome;
use crate::evidence::http::{Exchange, Timings};
use crate::evidence::paid::{Decision, PaidObservation};
use crate::evidence::run::RunRecord;
use crate::evidence::usd::Usd;
use crate::rubric::Verdict;

/// Every metric's name starts with this (the registry adds the `_` after it).
pub const PREFIX: &str = "x402_probe";

/// Writes a label value from a closed set's stable spelling.
macro_rules! label_value {
    ($($t:ty),*) => {$(
        impl EncodeLabelValue for $t {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                encoder.write_str(self.as_str())
            }
        }
    )*};
}

/// Whether a finished run left its entry in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunResult {
    Recorded,
    /// A store error: the run left no entry (logged).
    NotRecorded,
}

impl RunResult {
    pub fn as_str(self) -> &'static str {
        match self {
            RunResult::Recorded => "recorded",
            RunResult::NotRecorded => "not_recorded",
        }
    }
}

/// A phase of one HTTP exchange, from the prober's timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    Dns,
    Connect,
    Tls,
    /// From the request's start on an open connection to the complete response head.
    FirstByte,
    /// From the response head to the last body byte.
    Body,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Dns => "dns",
            Phase::Connect => "connect",
            Phase::Tls => "tls",
            Phase::FirstByte => "first_byte",
            Phase::Body => "body",
        }
    }
}

/// What came of a paid call the scheduler asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PaidResult {
    /// A signed authorization was sent.
    Paid,
    /// We declined (a cap, the allowlist, the quote): nothing was signed.
    Refused,
    /// Our side failed before anything was sent.
    Failed,
}

impl PaidResult {
    pub fn as_str(self) -> &'static str {
        match self {
            PaidResult::Paid => "paid",
            PaidResult::Refused => "refused",
            PaidResult::Failed => "failed",
        }
    }

    pub fn of(paid: &PaidObservation) -> PaidResult {
        match paid.decision {
            Decision::Paid { .. } => PaidResult::Paid,
            Decision::Refused { .. } => PaidResult::Refused,
            Decision::Failed { .. } => PaidResult::Failed,
        }
    }
}

/// Which spending cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CapLabel {
    PerCall,
    PerSubjectPerDay,
    PerDay,
}

impl CapLabel {
    pub fn as_str(self) -> &'static str {
        match self {
            CapLabel::PerCall => "per_call",
            CapLabel::PerSubjectPerDay => "per_subject_per_day",
            CapLabel::PerDay => "per_day",
        }
    }
}

/// What one webhook delivery attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeliveryResult {
    /// The receiver answered 2xx.
    Delivered,
    /// It failed and will be tried again.
    Retried,
    /// It failed for the last allowed time: the event is marked dead.
    Dead,
}

impl DeliveryResult {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryResult::Delivered => "delivered",
            DeliveryResult::Retried => "retried",
            DeliveryResult::Dead => "dead",
        }
    }
}

/// Where a webhook event stands in the outbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutboxStateLabel {
    Pending,
    Dead,
}

impl OutboxStateLabel {
    pub fn as_str(self) -> &'static str {
        match self {
            OutboxStateLabel::Pending => "pending",
            OutboxStateLabel::Dead => "dead",
        }
    }
}

/// What a configuration reload (SIGHUP) came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReloadOutcome {
    /// Every change was applied.
    Applied,
    /// Some change needs a restart: nothing was applied (the log names each key).
    RestartNeeded,
    /// The file does not read or is not valid, or applying it failed: nothing was applied.
    Failed,
}

impl ReloadOutcome {
    pub const ALL: [ReloadOutcome; 3] = [
        ReloadOutcome::Applied,
        ReloadOutcome::RestartNeeded,
        ReloadOutcome::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ReloadOutcome::Applied => "applied",
            ReloadOutcome::RestartNeeded => "restart_needed",
            ReloadOutcome::Failed => "failed",
        }
    }
}

label_value!(
    ReloadOutcome,
    CheckId,
    Outcome,
    RunResult,
    Phase,
    PaidResult,
    CapLabel,
    Verdict,
    DeliveryResult,
    OutboxStateLabel
);

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RunLabels {
    result: RunResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CheckLabels {
    /// The rubric's checks (the ids of `probes/`): a closed set, so nothing else becomes a series.
    check: CheckId,
    outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PhaseLabels {
    phase: Phase,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PaidLabels {
    result: PaidResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CapLabels {
    cap: CapLabel,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct VerdictLabels {
    verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DeliveryLabels {
    result: DeliveryResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReloadLabels {
    outcome: ReloadOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutboxLabels {
    state: OutboxStateLabel,
}

type GaugeF64 = Gauge<f64, AtomicU64>;

const VERDICTS: [Verdict; 5] = [
    Verdict::Ok,
    Verdict::Unverified,
    Verdict::Caution,
    Verdict::Avoid,
    Verdict::Down,
];

/// The exposition formats a scrape may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The classic text format (version 0.0.4).
    Prometheus,
    /// OpenMetrics 1.0.0 text.
    OpenMetrics,
}

impl Format {
    /// OpenMetrics when the scraper's `Accept` header asks for it, the classic text format
    /// otherwise.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Prometheus,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The daemon's metrics, held in its shared state.
pub struct Metrics {
    registry: Registry,
    runs: Family<RunLabels, Counter>,
    check_outcomes: Family<CheckLabels, Counter>,
    phases: Family<PhaseLabels, Histogram>,
    paid_calls: Family<PaidLabels, Counter>,
    spent_usd: GaugeF64,
    caps_usd: Family<CapLabels, GaugeF64>,
    scheduler_lag: Histogram,
    queued_jobs: Gauge,
    jobs_in_flight: Gauge,
    subjects: Family<VerdictLabels, Gauge>,
    ledger_entries: Gauge,
    checkpoint_age: GaugeF64,
    outage: Gauge,
    deliveries: Family<DeliveryLabels, Counter>,
    outbox: Family<OutboxLabels, Gauge>,
    reloads: Family<ReloadLabels, Counter>,
    last_reload_applied: Gauge,
    storage_full: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix(PREFIX);
        let runs = Family::<RunLabels, Counter>::default();
        registry.register(
            "runs",
            "Free runs finished, by whether they were recorded in the ledger",
            runs.clone(),
        );
        let check_outcomes = Family::<CheckLabels, Counter>::default();
        registry.register(
            "check_outcomes",
            "Check outcomes of recorded runs, by check and outcome",
            check_outcomes.clone(),
        );
        let phases = Family::<PhaseLabels, Histogram>::new_with_constructor(|| {
            // 1 ms to about 65 s.
            Histogram::new(exponential_buckets(0.001, 2.0, 17))
        });
        registry.register(
            "http_phase_duration_seconds",
            "Duration of each phase of the probes' HTTP exchanges (every hop of recorded runs)",
            phases.clone(),
        );
        let paid_calls = Family::<PaidLabels, Counter>::default();
        registry.register(
            "paid_calls",
            "Paid calls the scheduler asked for, by what came of them",
            paid_calls.clone(),
        );
        let spent_usd = GaugeF64::default();
        registry.register(
            "spent_last_24h_usd",
            "USD counted against the daily cap now: open reservations and calls settled in the last 24 hours",
            spent_usd.clone(),
        );
        let caps_usd = Family::<CapLabels, GaugeF64>::default();
        registry.register(
            "spend_cap_usd",
            "The configured spending caps in USD",
            caps_usd.clone(),
        );
        // 10 ms to about 5.8 days.
        let scheduler_lag = Histogram::new(exponential_buckets(0.01, 4.0, 12));
        registry.register(
            "scheduler_lag_seconds",
            "How late a free run started after its due time",
            scheduler_lag.clone(),
        );
        let queued_jobs = Gauge::default();
        registry.register(
            "scheduler_queued_jobs",
            "Jobs in the scheduler's queue (due or not)",
            queued_jobs.clone(),
        );
        let jobs_in_flight = Gauge::default();
        registry.register(
            "scheduler_jobs_in_flight",
            "Jobs running now (runs, control probes, catalogue reads, refund watches)",
            jobs_in_flight.clone(),
        );
        let subjects = Family::<VerdictLabels, Gauge>::default();
        registry.register(
            "subjects",
            "Subjects with a published score, by the verdict of their latest score",
            subjects.clone(),
        );
        let ledger_entries = Gauge::default();
        registry.register(
            "ledger_entries",
            "Entries in the ledger",
            ledger_entries.clone(),
        );
        let checkpoint_age = GaugeF64::default();
        registry.register(
            "ledger_seconds_since_checkpoint",
            "Seconds since the last signed checkpoint of the ledger (since the first entry when none is signed yet)",
            checkpoint_age.clone(),
        );
        let outage = Gauge::default();
        registry.register(
            "outage_active",
            "1 while one of our own outage windows (control failing, RPC failing, or declared) covers now",
            outage.clone(),
        );
        let deliveries = Family::<DeliveryLabels, Counter>::default();
        registry.register(
            "webhook_deliveries",
            "Webhook delivery attempts, by result",
            deliveries.clone(),
        );
        let outbox = Family::<OutboxLabels, Gauge>::default();
        registry.register(
            "webhook_outbox_events",
            "Webhook events in the outbox not delivered: pending, or dead after the last attempt",
            outbox.clone(),
        );
        let reloads = Family::<ReloadLabels, Counter>::default();
        registry.register(
            "config_reloads",
            "Configuration reloads (SIGHUP), by outcome: applied, restart_needed (nothing applied), failed (nothing applied)",
            reloads.clone(),
        );
        for outcome in ReloadOutcome::ALL {
            let _ = reloads.get_or_create(&ReloadLabels { outcome });
        }
        let last_reload_applied = Gauge::default();
        last_reload_applied.set(1);
        registry.register(
            "config_last_reload_applied",
            "1 when the configuration file as last read is the one in force (1 at the start), 0 when the last reload was refused",
            last_reload_applied.clone(),
        );
        let storage_full = Gauge::default();
        registry.register(
            "storage_full",
            "1 while the state directory's disk is full: no new runs, the API serves, runs resume when a write succeeds again",
            storage_full.clone(),
        );
        for verdict in VERDICTS {
            let _ = subjects.get_or_create(&VerdictLabels { verdict });
        }
        for state in [OutboxStateLabel::Pending, OutboxStateLabel::Dead] {
            let _ = outbox.get_or_create(&OutboxLabels { state });
        }
        for result in [RunResult::Recorded, RunResult::NotRecorded] {
            let _ = runs.get_or_create(&RunLabels { result });
        }
        Metrics {
            registry,
            runs,
            check_outcomes,
            phases,
            paid_calls,
            spent_usd,
            caps_usd,
            scheduler_lag,
            queued_jobs,
            jobs_in_flight,
            subjects,
            ledger_entries,
            checkpoint_age,
            outage,
            deliveries,
            outbox,
            reloads,
            last_reload_applied,
            storage_full,
        }
    }

    /// A configuration reload and what it came to.
    pub fn reload(&self, outcome: ReloadOutcome) {
        self.reloads.get_or_create(&ReloadLabels { outcome }).inc();
        self.last_reload_applied
            .set(i64::from(outcome == ReloadOutcome::Applied));
    }

    /// Whether the state directory's disk is full (runs paused).
    pub fn storage_full(&self, full: bool) {
        self.storage_full.set(i64::from(full));
    }

    /// A run that was recorded: its outcomes by check, its HTTP phases, its paid call.
    pub fn run_recorded(&self, tally: &RunTally) {
        self.runs
            .get_or_create(&RunLabels {
                result: RunResult::Recorded,
            })
            .inc();
        for (check, outcome) in &tally.outcomes {
            self.check_outcomes
                .get_or_create(&CheckLabels {
                    check: *check,
                    outcome: *outcome,
                })
                .inc();
        }
        for (phase, seconds) in &tally.phases {
            self.phases
                .get_or_create(&PhaseLabels { phase: *phase })
                .observe(*seconds);
        }
        if let Some(result) = tally.paid {
            self.paid_calls.get_or_create(&PaidLabels { result }).inc();
        }
    }

    /// A run that left no entry.
    pub fn run_not_recorded(&self) {
        self.runs
            .get_or_create(&RunLabels {
                result: RunResult::NotRecorded,
            })
            .inc();
    }

    /// A free run started `lag_ms` after its due time.
    pub fn run_started(&self, lag_ms: i64) {
        self.scheduler_lag.observe(lag_ms.max(0) as f64 / 1000.0);
    }

    /// The scheduler's queue and what runs now.
    pub fn scheduler(&self, queued: usize, in_flight: usize) {
        self.queued_jobs.set(queued.min(i64::MAX as usize) as i64);
        self.jobs_in_flight
            .set(in_flight.min(i64::MAX as usize) as i64);
    }

    /// One webhook delivery attempt.
    pub fn delivery(&self, result: DeliveryResult) {
        self.deliveries
            .get_or_create(&DeliveryLabels { result })
            .inc();
    }

    /// Sets the gauges from what is now (`scrape`) and encodes every series.
    pub fn render(&self, scrape: &Scrape, format: Format) -> Result<String, MetricsError> {
        self.refresh(scrape);
        let mut open_metrics = String::new();
        prometheus_client::encoding::text::encode(&mut open_metrics, &self.registry)
            .map_err(|_| MetricsError::Encode)?;
        Ok(match format {
            Format::OpenMetrics => open_metrics,
            Format::Prometheus => to_prometheus_text(&open_metrics),
        })
    }

    fn refresh(&self, scrape: &Scrape) {
        let mut counts = [0i64; VERDICTS.len()];
        for verdict in &scrape.verdicts {
            if let Some(i) = VERDICTS.iter().position(|v| v == verdict) {
                counts[i] += 1;
            }
        }
        for (verdict, count) in VERDICTS.into_iter().zip(counts) {
            self.subjects
                .get_or_create(&VerdictLabels { verdict })
                .set(count);
        }
        self.ledger_entries
            .set(scrape.ledger_head.min(i64::MAX as u64) as i64);
        self.checkpoint_age.set(
            scrape
                .checkpoint_since_ms
                .map_or(0.0, |t| (scrape.now_ms - t).max(0) as f64 / 1000.0),
        );
        self.outage.set(i64::from(scrape.outage_active));
        if let Some(spend) = &scrape.spend {
            self.spent_usd.set(usd_f64(spend.spent_today));
            for (cap, usd) in [
                (CapLabel::PerCall, spend.per_call),
                (CapLabel::PerSubjectPerDay, spend.per_subject_per_day),
                (CapLabel::PerDay, spend.per_day),
            ] {
                self.caps_usd
                    .get_or_create(&CapLabels { cap })
                    .set(usd_f64(usd));
            }
        }
        for (state, n) in [
            (OutboxStateLabel::Pending, scrape.outbox_pending),
            (OutboxStateLabel::Dead, scrape.outbox_dead),
        ] {
            self.outbox
                .get_or_create(&OutboxLabels { state })
                .set(n.min(i64::MAX as u64) as i64);
        }
    }
}

/// What the gauges show, read from the daemon's state when a scrape comes (by
/// `daemon::pipeline::scrape`): the metrics module reads nothing itself, so it sits below the
/// daemon it is updated from.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    pub now_ms: i64,
    /// Each scored subject's published verdict.
    pub verdicts: Vec<Verdict>,
    pub ledger_head: u64,
    /// The last checkpoint's time (or the first entry's when none was signed yet).
    pub checkpoint_since_ms: Option<i64>,
    pub outage_active: bool,
    pub spend: Option<SpendScrape>,
    pub outbox_pending: u64,
    pub outbox_dead: u64,
}

/// Money spent today against the caps (only with paid calls configured).
#[derive(Debug, Clone, Copy)]
pub struct SpendScrape {
    pub spent_today: Usd,
    pub per_call: Usd,
    pub per_subject_per_day: Usd,
    pub per_day: Usd,
}

/// What the metrics take from one run, computed before its record moves into the ledger.
#[derive(Debug, Clone, Default)]
pub struct RunTally {
    outcomes: Vec<(CheckId, Outcome)>,
    phases: Vec<(Phase, f64)>,
    paid: Option<PaidResult>,
}

impl RunTally {
    pub fn of(record: &RunRecord) -> RunTally {
        let outcomes = record.results.iter().map(|r| (r.id, r.outcome)).collect();
        let mut phases = Vec::new();
        let mut exchanges: Vec<&Exchange> =
            record.free.samples.iter().map(|s| &s.exchange).collect();
        exchanges.extend(record.free.operator_file.iter());
        if let Some(paid) = &record.paid {
            exchanges.extend(paid.requote.iter().map(|r| &r.exchange));
            exchanges.extend(paid.paid.iter());
            exchanges.extend(paid.replay.iter().filter_map(|r| r.exchange.as_ref()));
        }
        for exchange in exchanges {
            for hop in &exchange.hops {
                phases.extend(phases_of(&hop.timings));
            }
        }
        RunTally {
            outcomes,
            phases,
            paid: record.paid.as_ref().map(PaidResult::of),
        }
    }
}

/// One hop's phase durations in seconds. The prober's first-byte and last-byte times count from
/// the hop's start; the phases here are apart: the first byte's wait excludes name resolution,
/// connect and TLS, the body starts at the head.
pub fn phases_of(t: &Timings) -> Vec<(Phase, f64)> {
    let mut out = Vec::with_capacity(5);
    let seconds = |ms: f64| (ms.max(0.0)) / 1000.0;
    for (phase, ms) in [
        (Phase::Dns, t.dns_ms),
        (Phase::Connect, t.connect_ms),
        (Phase::Tls, t.tls_ms),
    ] {
        if let Some(ms) = ms.filter(|v| v.is_finite()) {
            out.push((phase, seconds(ms)));
        }
    }
    let setup: f64 = [t.dns_ms, t.connect_ms, t.tls_ms]
        .iter()
        .flatten()
        .filter(|v| v.is_finite())
        .sum();
    if let Some(ttfb) = t.ttfb_ms.filter(|v| v.is_finite()) {
        out.push((Phase::FirstByte, seconds(ttfb - setup)));
        if let Some(last) = t.last_byte_ms.filter(|v| v.is_finite()) {
            out.push((Phase::Body, seconds(last - ttfb)));
        }
    }
    out
}

fn usd_f64(usd: Usd) -> f64 {
    usd.atto() as f64 / 1e18
}

/// Why the exposition could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("reading the store for the metrics: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("reading the spend store for the metrics: {0}")]
    Spend(String),
    #[error("encoding the metrics")]
    Encode,
}

/// The classic text format from the registry's OpenMetrics: a counter family's `# HELP` and
/// `# TYPE` name its samples' `_total` name, and `# UNIT` and `# EOF` (OpenMetrics only) go.
pub fn to_prometheus_text(open_metrics: &str) -> String {
    let counters: BTreeSet<&str> = open_metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(open_metrics.len() + 16 * counters.len());
    for line in open_metrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let descriptor = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        if let Some((p, rest)) = descriptor {
            let name = rest.split(' ').next().unwrap_or("");
            if counters.contains(name) {
                let _ = writeln!(out, "{p}{name}_total{}", &rest[name.len()..]);
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_apart_and_in_seconds() {
        let t = Timings {
            dns_ms: Some(2.0),
            connect_ms: Some(3.0),
            tls_ms: Some(5.0),
            ttfb_ms: Some(30.0),
            last_byte_ms: Some(45.0),
            total_ms: Some(45.0),
        };
        let phases = phases_of(&t);
        let get = |p| phases.iter().find(|(q, _)| *q == p).map(|(_, s)| *s);
        assert_eq!(get(Phase::Dns), Some(0.002));
        assert_eq!(get(Phase::FirstByte), Some(0.020));
        assert_eq!(get(Phase::Body), Some(0.015));
        // A refused connection: no first byte, no body.
        let refused = Timings {
            connect_ms: Some(1.0),
            ..Timings::default()
        };
        assert_eq!(phases_of(&refused), vec![(Phase::Connect, 0.001)]);
    }

    #[test]
    fn counters_are_named_with_total_in_the_classic_format() {
        let m = Metrics::new();
        m.run_not_recorded();
        let mut om = String::new();
        prometheus_client::encoding::text::encode(&mut om, &m.registry).unwrap();
        assert!(om.contains("# TYPE x402_probe_runs counter"), "{om}");
        let text = to_prometheus_text(&om);
        assert!(
            text.contains("# TYPE x402_probe_runs_total counter"),
            "{text}"
        );
        assert!(
            text.contains("# HELP x402_probe_runs_total Free runs"),
            "{text}"
        );
        assert!(text.contains("x402_probe_runs_total{result=\"not_recorded\"} 1"));
        assert!(!text.contains("# EOF") && !text.contains("# UNIT"));
        assert!(text.contains("# TYPE x402_probe_scheduler_lag_seconds histogram"));
    }
}
