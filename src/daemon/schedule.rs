//! The scheduler's decisions, pure: when a subject is next due, how a failing subject backs off,
//! how a restart spreads overdue subjects, which host may be contacted now, and whether a run
//! should also make a paid call. Time is given, never read.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

use crate::evidence::free::FreeObservation;

/// The cadence settings, in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cadence {
    pub free_every_ms: i64,
    pub jitter_percent: u64,
    pub backoff_max_ms: i64,
    pub host_gap_ms: i64,
    pub paid_min_interval_ms: i64,
}

/// A number in [0, 1) from a subject and a counter, stable across restarts (no burst, and the
/// same schedule for the same history).
pub fn unit_fraction(subject: &str, n: u64) -> f64 {
    let digest = Sha256::new()
        .chain_update(subject.as_bytes())
        .chain_update(n.to_be_bytes())
        .finalize();
    let mut word = [0u8; 8];
    word.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(word) >> 11) as f64 / (1u64 << 53) as f64
}

/// When a subject is next due after a run that ended at `now_ms`. `failures` counts consecutive
/// runs that could not reach it: each doubles the wait, up to `backoff_max_ms` (never less than
/// the cadence), so a dead endpoint costs little while the 72-hour `down` gate and a recovery are
/// both still seen. `n` (the run count) varies the jitter.
pub fn next_free_ms(c: &Cadence, subject: &str, now_ms: i64, failures: u32, n: u64) -> i64 {
    let base = if failures == 0 {
        c.free_every_ms
    } else {
        let factor = 1i64 << failures.min(20);
        c.free_every_ms
            .saturating_mul(factor)
            .min(c.backoff_max_ms.max(c.free_every_ms))
    };
    let spread = base as f64 * c.jitter_percent as f64 / 100.0;
    let jitter = (unit_fraction(subject, n) * 2.0 - 1.0) * spread;
    now_ms + (base as f64 + jitter).round().max(1.0) as i64
}

/// After a restart: a subject that is overdue (or new) is spread over one cadence from now instead
/// of all of them running at once; one that is not yet due keeps its time.
pub fn due_after_restart(c: &Cadence, subject: &str, stored_due_ms: i64, now_ms: i64) -> i64 {
    if stored_due_ms > now_ms {
        return stored_due_ms;
    }
    now_ms + (unit_fraction(subject, u64::MAX) * c.free_every_ms as f64) as i64
}

/// How far apart a cycle's replicas of one subject start, first to last, at most: staggered,
/// so that the vantages do not hit the endpoint in the same instant, yet close enough that they
/// saw the same endpoint (cloaking compares terms quoted within
/// `checks::cloaking::MAX_SKEW_SECS`, 120 s, of each other; a vantage takes due work at its next
/// round, `heartbeat_ms` later at most).
pub const REPLICA_SPREAD_MS: i64 = 60_000;

/// Free runs as leased work (the daemon on PostgreSQL): time is cut into cycles of the cadence
/// (cycle `k` starts at `k * free_every_ms`), and each subject has `per_cycle` runs in each, one
/// per replica, staggered over at most `REPLICA_SPREAD_MS` from an offset of the subject's own in
/// the cycle (varied per cycle, as the jitter). Every vantage computes the same due times. Close
/// together, not spread through the cycle: the quorum for down compares what the vantages saw in
/// one cycle (an outage shorter than the cycle is seen by all of them, not only by the one whose
/// turn it was), and cloaking compares only terms quoted at about the same time.
pub fn cycle_of(c: &Cadence, now_ms: i64) -> i64 {
    now_ms.div_euclid(c.free_every_ms.max(1))
}

/// When replica `replica` of `subject`'s run in cycle `cycle` is due.
pub fn replica_due_ms(c: &Cadence, subject: &str, cycle: i64, replica: u32, per_cycle: u32) -> i64 {
    let every = c.free_every_ms.max(1);
    let per_cycle = i64::from(per_cycle.max(1));
    let step = every.min(REPLICA_SPREAD_MS) / per_cycle;
    // The offset leaves room for the last replica inside the cycle.
    let room = every - step * (per_cycle - 1);
    let offset = (unit_fraction(subject, cycle as u64) * room as f64) as i64;
    cycle * every + offset.min(room - 1) + i64::from(replica) * step
}

/// The free runs of `subjects` in cycles `cycles`, every replica.
pub fn free_work<'a>(
    c: &Cadence,
    subjects: impl Iterator<Item = &'a str>,
    cycles: std::ops::RangeInclusive<i64>,
    per_cycle: u32,
) -> Vec<crate::store::lease::FreeWork> {
    let mut work = Vec::new();
    for subject in subjects {
        for cycle in cycles.clone() {
            for replica in 0..per_cycle.max(1) {
                work.push(crate::store::lease::FreeWork {
                    subject: subject.to_string(),
                    cycle,
                    replica,
                    due_ms: replica_due_ms(c, subject, cycle, replica, per_cycle),
                });
            }
        }
    }
    work
}

/// The first due time after `now_ms` among `subjects`' runs of this cycle and the next.
pub fn next_replica_due<'a>(
    c: &Cadence,
    subjects: impl Iterator<Item = &'a str>,
    now_ms: i64,
    per_cycle: u32,
) -> Option<i64> {
    let cycle = cycle_of(c, now_ms);
    let mut next: Option<i64> = None;
    for subject in subjects {
        for k in cycle..=cycle + 1 {
            for replica in 0..per_cycle.max(1) {
                let due = replica_due_ms(c, subject, k, replica, per_cycle);
                if due > now_ms && next.is_none_or(|n| due < n) {
                    next = Some(due);
                }
            }
        }
    }
    next
}

/// At most one run in flight per host, a least gap between runs on the same host, and a host's
/// `Retry-After` honoured.
#[derive(Debug, Default)]
pub struct HostGate {
    busy: BTreeSet<String>,
    not_before: BTreeMap<String, i64>,
    /// `not_before`'s size at which times already past are forgotten (a time past says nothing:
    /// the host is free now either way). Without it the map would hold every host ever run: one
    /// entry per subject at scale.
    prune_at: usize,
}

/// `not_before` is never pruned below this size.
const HOST_GATE_PRUNE_MIN: usize = 1_024;

impl HostGate {
    /// When `host` may be contacted next (now when it may).
    pub fn free_at(&self, host: &str, now_ms: i64) -> i64 {
        if self.busy.contains(host) {
            return i64::MAX;
        }
        self.not_before
            .get(host)
            .copied()
            .unwrap_or(now_ms)
            .max(now_ms)
    }

    /// Takes the host for a run, when it is free now.
    pub fn try_take(&mut self, host: &str, now_ms: i64) -> bool {
        if self.free_at(host, now_ms) > now_ms {
            return false;
        }
        self.busy.insert(host.to_string());
        true
    }

    /// Gives the host back after a run that ended at `now_ms`; the next run waits the gap, or
    /// longer when the host asked (`retry_after_ms`).
    pub fn release(&mut self, host: &str, now_ms: i64, gap_ms: i64, retry_after_ms: Option<i64>) {
        self.busy.remove(host);
        let wait = gap_ms.max(retry_after_ms.unwrap_or(0));
        self.not_before.insert(host.to_string(), now_ms + wait);
        // Amortised: each prune at least halves what the next one finds to scan.
        if self.not_before.len() >= self.prune_at {
            self.not_before.retain(|_, at| *at > now_ms);
            self.prune_at = (self.not_before.len() * 2).max(HOST_GATE_PRUNE_MIN);
        }
    }

    pub fn busy_hosts(&self) -> usize {
        self.busy.len()
    }

    /// Gives the host back without a gap (taken for a run that did not start).
    pub fn abandon(&mut self, host: &str) {
        self.busy.remove(host);
    }
}

/// Due free runs waiting for their host: a FIFO per host, each host in line once (ready now, or
/// resting until its gap or `Retry-After` has passed, or held by its run in flight). A due run
/// is moved here once and taken once: nothing is popped and pushed back while its host is busy,
/// whatever the number of subjects behind one host. Pure: time is given.
#[derive(Debug, Default)]
pub struct Frontier {
    gate: HostGate,
    /// Each host's due runs, oldest first: (due, subject URL).
    waiting: std::collections::HashMap<String, std::collections::VecDeque<(i64, String)>>,
    /// Hosts with a due run that may start now, in the order they became ready.
    ready: std::collections::VecDeque<String>,
    /// Hosts with a due run, waiting out their gap: (free at, host).
    resting: std::collections::BinaryHeap<std::cmp::Reverse<(i64, String)>>,
    /// Runs waiting, in all.
    count: usize,
}

impl Frontier {
    /// A run of `url` on `host` is due (since `due_ms`): it waits behind the host's earlier ones.
    pub fn push_due(&mut self, host: &str, url: String, due_ms: i64, now_ms: i64) {
        let line = self.waiting.entry(host.to_string()).or_default();
        line.push_back((due_ms, url));
        self.count += 1;
        if line.len() == 1 {
            self.place(host, now_ms);
        }
    }

    /// Puts a host with due runs in line: ready, resting, or (busy) nowhere until released.
    fn place(&mut self, host: &str, now_ms: i64) {
        let at = self.gate.free_at(host, now_ms);
        if at == i64::MAX {
            return;
        }
        if at <= now_ms {
            self.ready.push_back(host.to_string());
        } else {
            self.resting.push(std::cmp::Reverse((at, host.to_string())));
        }
    }

    /// The next run that may start now, its host taken: (host, due, url). Hosts whose gap has
    /// passed join the ready line first.
    pub fn take(&mut self, now_ms: i64) -> Option<(String, i64, String)> {
        while let Some(std::cmp::Reverse((at, _))) = self.resting.peek() {
            if *at > now_ms {
                break;
            }
            let Some(std::cmp::Reverse((_, host))) = self.resting.pop() else {
                break;
            };
            self.ready.push_back(host);
        }
        while let Some(host) = self.ready.pop_front() {
            let Some(line) = self.waiting.get_mut(&host) else {
                continue;
            };
            let Some((due, url)) = line.pop_front() else {
                self.waiting.remove(&host);
                continue;
            };
            if line.is_empty() {
                self.waiting.remove(&host);
            }
            if !self.gate.try_take(&host, now_ms) {
                // Cannot happen (a host is in line only when free); keep the run, not lose it.
                self.waiting
                    .entry(host.clone())
                    .or_default()
                    .push_front((due, url));
                continue;
            }
            self.count -= 1;
            return Some((host, due, url));
        }
        None
    }

    /// The host's run ended at `now_ms`: its next run waits the gap (or the host's
    /// `Retry-After`).
    pub fn release(&mut self, host: &str, now_ms: i64, gap_ms: i64, retry_after_ms: Option<i64>) {
        self.gate.release(host, now_ms, gap_ms, retry_after_ms);
        if self.waiting.contains_key(host) {
            self.place(host, now_ms);
        }
    }

    /// A run taken but not started (its subject no longer active): the host is free again at
    /// once, no gap.
    pub fn abandon(&mut self, host: &str, now_ms: i64) {
        self.gate.abandon(host);
        if self.waiting.contains_key(host) {
            self.place(host, now_ms);
        }
    }

    /// Drops `url`'s waiting runs (a subject paused, or queued again elsewhere).
    pub fn remove(&mut self, host: &str, url: &str) {
        if let Some(line) = self.waiting.get_mut(host) {
            let before = line.len();
            line.retain(|(_, u)| u != url);
            self.count -= before - line.len();
            if line.is_empty() {
                self.waiting.remove(host);
            }
        }
    }

    /// When the next run may start: now when one is ready (waiting for a slot), else when the
    /// first resting host's gap ends. `None`: nothing waits, or only behind runs in flight.
    pub fn next_at(&self, now_ms: i64) -> Option<i64> {
        if !self.ready.is_empty() {
            return Some(now_ms);
        }
        self.resting.peek().map(|std::cmp::Reverse((at, _))| *at)
    }

    /// Every waiting run: (due, url), in no particular order.
    pub fn waiting(&self) -> impl Iterator<Item = (i64, &str)> {
        self.waiting
            .values()
            .flatten()
            .map(|(due, url)| (*due, url.as_str()))
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    pub fn busy_hosts(&self) -> usize {
        self.gate.busy_hosts()
    }
}

/// The longest `Retry-After` we honour: a host cannot park itself out of view for longer than the
/// `down` gate needs to see it.
pub const MAX_RETRY_AFTER_MS: i64 = 6 * 3_600_000;

/// The longest `Retry-After` (delta seconds) among the run's 429 and 503 answers, capped.
pub fn retry_after_ms(obs: &FreeObservation) -> Option<i64> {
    obs.samples
        .iter()
        .filter_map(|s| s.exchange.response.as_ref())
        .filter(|r| r.status == 429 || r.status == 503)
        .filter_map(|r| r.header("retry-after"))
        .filter_map(|v| v.trim().parse::<i64>().ok())
        .map(|secs| secs.saturating_mul(1000).clamp(0, MAX_RETRY_AFTER_MS))
        .max()
}

/// What the scheduler knows of a subject's latest score, for paid sampling.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreSummary {
    pub verified: bool,
    pub verdict: crate::rubric::Verdict,
    pub probes: u32,
    pub probes_needed: u32,
    pub span_days: f64,
    pub span_days_needed: f64,
    pub paid_days_ago: Option<f64>,
    pub paid_within_days: f64,
    pub band: (f64, f64),
    pub capped_score: f64,
    /// The grade boundaries of the rubric (minimum scores of each grade above the lowest).
    pub grade_edges: Vec<f64>,
    /// R4 and R5 values (0..1), for the value population.
    pub r4: f64,
    pub r5: f64,
    pub price_usd: crate::evidence::usd::Usd,
    pub category: String,
}

/// Why a run should also pay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaidReason {
    /// The free evidence is enough for a verdict, but no paid call is recent enough.
    VerdictReady,
    /// The band straddles a grade boundary: one more paid call is most likely to move it.
    BandStraddles,
    /// Configured to pay from a subject's first run (`pay_from_first_run`).
    FirstRun,
}

/// How long a subject's paid calls wait after one was declined by a spend limit of ours (a cap,
/// the wallet's balance). The caps are daily: tried on every run, each attempt would fetch the 402
/// again, read the chain and write a refusal, and meet the same cap. A cap raised by a reload
/// ends the wait at once.
pub const SPEND_LIMIT_WAIT_MS: i64 = 86_400_000;

/// Whether this run should make a paid call: never more often than the minimum interval, nor
/// before `held_until_ms` (a spend limit's wait, [`SPEND_LIMIT_WAIT_MS`]); first for subjects
/// whose free evidence is verdict-ready without a recent paid call, then where the band
/// straddles a grade boundary.
pub fn paid_wanted(
    summary: Option<&ScoreSummary>,
    last_paid_ms: Option<i64>,
    held_until_ms: Option<i64>,
    now_ms: i64,
    min_interval_ms: i64,
    from_first_run: bool,
) -> Option<PaidReason> {
    if last_paid_ms.is_some_and(|t| now_ms - t < min_interval_ms) {
        return None;
    }
    if held_until_ms.is_some_and(|t| now_ms < t) {
        return None;
    }
    if from_first_run && last_paid_ms.is_none() {
        return Some(PaidReason::FirstRun);
    }
    let s = summary?;
    let free_ready = s.probes >= s.probes_needed && s.span_days >= s.span_days_needed;
    let paid_recent = s.paid_days_ago.is_some_and(|d| d <= s.paid_within_days);
    if free_ready && !paid_recent {
        return Some(PaidReason::VerdictReady);
    }
    let (low, high) = s.band;
    if free_ready && s.grade_edges.iter().any(|e| low < *e && *e < high) {
        return Some(PaidReason::BandStraddles);
    }
    None
}

/// The loop's state when a simulated clock decides where to go next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimulatedLoop {
    /// The simulated clock's instant (when the runs just dispatched started).
    pub now_ms: i64,
    /// The earliest due time in the queue, if any.
    pub next_due_ms: Option<i64>,
    /// The simulation's end: nothing due after it runs.
    pub until_ms: i64,
    /// How far past the start of the oldest run in flight the clock may jump (0: never while a
    /// run is in flight).
    pub lookahead_ms: i64,
    /// Runs in flight, paid calls among them, and how many may run at once.
    pub in_flight: usize,
    pub paid_in_flight: usize,
    pub concurrency: usize,
    /// When the runs in flight began overlapping: the start of the oldest of them.
    pub overlap_from_ms: i64,
}

/// What a simulated clock does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimulatedStep {
    /// Move the clock to this instant (never back) and dispatch what is due.
    AdvanceTo(i64),
    /// Wait for a run in flight to finish; the clock stays.
    AwaitRun,
    /// Nothing in flight and nothing due before the end: the simulation is over.
    End,
}

/// A simulated clock's next step. With nothing in flight it jumps to the next due time (or ends).
/// With runs in flight it may jump to the next due time when that is at most `lookahead_ms` past
/// the start of the oldest of them, so runs overlap as they would on the wall clock; never while a
/// paid call is in flight (the next run could want to pay, and only one pays at a time), never
/// with every slot taken, never past the end. A run in flight thus sees the clock move by at most
/// the lookahead.
pub fn simulated_step(s: &SimulatedLoop) -> SimulatedStep {
    let due = s.next_due_ms.filter(|due| *due <= s.until_ms);
    if s.in_flight == 0 {
        return due.map_or(SimulatedStep::End, |due| {
            SimulatedStep::AdvanceTo(due.max(s.now_ms))
        });
    }
    match due {
        Some(due)
            if s.lookahead_ms > 0
                && s.paid_in_flight == 0
                && s.in_flight < s.concurrency
                && due <= s.overlap_from_ms.saturating_add(s.lookahead_ms) =>
        {
            SimulatedStep::AdvanceTo(due.max(s.now_ms))
        }
        _ => SimulatedStep::AwaitRun,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: Cadence = Cadence {
        free_every_ms: 3_600_000,
        jitter_percent: 10,
        backoff_max_ms: 6 * 3_600_000,
        host_gap_ms: 1_000,
        paid_min_interval_ms: 7 * 86_400_000,
    };

    #[test]
    fn a_cycles_replicas_are_staggered_close_together_and_alike_for_every_vantage() {
        for per_cycle in 1..=16u32 {
            for cycle in [0i64, 1, 17, 500_000] {
                let start = cycle * C.free_every_ms;
                let due: Vec<i64> = (0..per_cycle)
                    .map(|r| replica_due_ms(&C, "https://a.example/x", cycle, r, per_cycle))
                    .collect();
                for (r, d) in due.iter().enumerate() {
                    assert!(
                        (start..start + C.free_every_ms).contains(d),
                        "{per_cycle} {cycle} {r}: {d}"
                    );
                    assert_eq!(cycle_of(&C, *d), cycle);
                }
                // Staggered, in replica order, and all inside the spread: the vantages' runs
                // of one cycle are compared with each other (cloaking's 120 s).
                assert!(due.windows(2).all(|w| w[1] > w[0]), "{due:?}");
                assert!(due[due.len() - 1] - due[0] < REPLICA_SPREAD_MS, "{due:?}");
            }
        }
        // A cadence shorter than the spread: the replicas still fit in their cycle.
        let short = Cadence {
            free_every_ms: 10_000,
            ..C
        };
        for cycle in 0..50 {
            let due: Vec<i64> = (0..4)
                .map(|r| replica_due_ms(&short, "https://a.example/x", cycle, r, 4))
                .collect();
            assert!(due.iter().all(|d| cycle_of(&short, *d) == cycle), "{due:?}");
            assert!(due.windows(2).all(|w| w[1] > w[0]), "{due:?}");
        }
        // The offset differs by subject and by cycle (the subjects' runs spread over the cycle).
        let offsets: std::collections::BTreeSet<i64> = (0..20)
            .map(|k| replica_due_ms(&C, "https://a.example/x", k, 0, 3) - k * C.free_every_ms)
            .chain((0..20).map(|i| replica_due_ms(&C, &format!("https://{i}.example/"), 3, 0, 3)))
            .collect();
        assert!(offsets.len() > 30, "{offsets:?}");
        let work = free_work(&C, ["a", "b"].into_iter(), 3..=4, 2);
        assert_eq!(work.len(), 8);
        let keys: std::collections::BTreeSet<_> = work.iter().map(|w| w.key()).collect();
        assert_eq!(keys.len(), 8, "a key per subject, cycle and replica");
        let now = 3 * C.free_every_ms;
        let next = next_replica_due(&C, ["a", "b"].into_iter(), now, 2).unwrap();
        let first_after = work
            .iter()
            .map(|w| w.due_ms)
            .filter(|d| *d > now)
            .min()
            .unwrap();
        assert_eq!(next, first_after);
    }

    #[test]
    fn cadence_jitters_within_its_spread_and_backs_off_to_a_cap() {
        for n in 0..200 {
            let due = next_free_ms(&C, "https://a.example/x", 0, 0, n);
            assert!((3_240_000..=3_960_000).contains(&due), "{due}");
        }
        let after = |f| {
            next_free_ms(
                &Cadence {
                    jitter_percent: 0,
                    ..C
                },
                "s",
                0,
                f,
                0,
            )
        };
        assert_eq!(after(1), 7_200_000);
        assert_eq!(after(2), 14_400_000);
        assert_eq!(after(3), 21_600_000);
        assert_eq!(
            after(30),
            21_600_000,
            "capped, and well under the 72 h gate"
        );
    }

    #[test]
    fn a_restart_spreads_overdue_subjects_over_one_cadence() {
        let now = 1_000_000_000;
        let dues: Vec<i64> = (0..1000)
            .map(|i| due_after_restart(&C, &format!("https://s{i}.example/"), now - 5, now))
            .collect();
        assert!(dues.iter().all(|d| *d >= now && *d < now + C.free_every_ms));
        let first_tenth = dues
            .iter()
            .filter(|d| **d < now + C.free_every_ms / 10)
            .count();
        assert!(
            first_tenth < 200,
            "{first_tenth} of 1000 in the first tenth: a burst"
        );
        assert_eq!(due_after_restart(&C, "s", now + 7, now), now + 7);
    }

    #[test]
    fn one_run_per_host_a_gap_between_and_retry_after_honoured() {
        let mut g = HostGate::default();
        assert!(g.try_take("a", 0));
        assert!(!g.try_take("a", 0));
        assert!(g.try_take("b", 0));
        g.release("a", 100, 1_000, None);
        assert!(!g.try_take("a", 1_099));
        assert!(g.try_take("a", 1_100));
        g.release("a", 2_000, 1_000, Some(60_000));
        assert_eq!(g.free_at("a", 2_000), 62_000);
    }

    /// Politeness through the frontier: one run per host at once, the gap between two, and a
    /// host's runs in the order they became due; other hosts go meanwhile; a host's runs are
    /// taken once each, however long its line.
    #[test]
    fn the_frontier_keeps_one_run_per_host_the_gap_and_each_hosts_order() {
        let mut f = Frontier::default();
        for (i, url) in ["a/1", "a/2", "a/3"].into_iter().enumerate() {
            f.push_due("a", url.into(), i as i64, 10);
        }
        f.push_due("b", "b/1".into(), 5, 10);
        assert_eq!(f.len(), 4);
        assert_eq!(f.take(10), Some(("a".into(), 0, "a/1".into())));
        assert_eq!(f.take(10), Some(("b".into(), 5, "b/1".into())));
        // a is busy: its line waits, nothing else is ready.
        assert_eq!(f.take(10), None);
        assert_eq!(
            f.next_at(10),
            None,
            "nothing due but behind a run in flight"
        );
        f.release("a", 20, 1_000, None);
        assert_eq!(f.take(20), None, "the gap");
        assert_eq!(f.next_at(20), Some(1_020));
        assert_eq!(f.take(1_020), Some(("a".into(), 1, "a/2".into())));
        assert_eq!(f.take(1_020), None);
        // A host's Retry-After holds its line longer than the gap.
        f.release("a", 1_100, 1_000, Some(60_000));
        assert_eq!(f.take(2_100), None);
        assert_eq!(f.take(61_100), Some(("a".into(), 2, "a/3".into())));
        assert!(f.is_empty());
        // A run taken but not started gives the host back at once.
        f.push_due("c", "c/1".into(), 0, 0);
        f.push_due("c", "c/2".into(), 0, 0);
        let (host, _, _) = f.take(0).unwrap();
        f.abandon(&host, 0);
        assert_eq!(f.take(0), Some(("c".into(), 0, "c/2".into())));
        // A subject removed from its host's line is never taken.
        f.push_due("d", "d/1".into(), 0, 0);
        f.push_due("d", "d/2".into(), 0, 0);
        f.remove("d", "d/1");
        assert_eq!(f.take(0), Some(("d".into(), 0, "d/2".into())));
        assert_eq!(f.len(), 0);
    }

    /// 10,000 subjects behind one host: dispatching them one by one touches each once (the old
    /// queue popped and pushed back every waiting run of a busy host at every turn).
    #[test]
    fn a_long_line_behind_one_host_is_taken_in_order_without_requeueing() {
        let mut f = Frontier::default();
        for i in 0..10_000 {
            f.push_due("h", format!("h/{i}"), i, 0);
        }
        let mut now = 0;
        for i in 0..10_000 {
            assert_eq!(f.take(now), Some(("h".into(), i, format!("h/{i}"))));
            assert_eq!(f.take(now), None, "one run of a host at once");
            now += 10;
            f.release("h", now, 10, None);
            now += 10;
        }
        assert!(f.is_empty());
    }

    /// A run on each of 100,000 hosts leaves the gate remembering only the hosts still waiting
    /// out a gap or a `Retry-After`, not every host it ever saw; those it keeps, it honours.
    #[test]
    fn the_host_gate_forgets_times_already_past() {
        let mut g = HostGate::default();
        for i in 0..100_000i64 {
            let host = format!("h{i}");
            assert!(g.try_take(&host, i * 10));
            // One host in a thousand asks for an hour.
            let retry = (i % 1_000 == 0).then_some(3_600_000);
            g.release(&host, i * 10, 1_000, retry);
        }
        assert!(
            g.not_before.len() < 2 * HOST_GATE_PRUNE_MIN,
            "{} hosts remembered",
            g.not_before.len()
        );
        let now = 100_000 * 10;
        assert_eq!(
            g.free_at("h0", now),
            3_600_000,
            "a Retry-After outlives pruning"
        );
        assert_eq!(g.free_at("h99999", now), 99_999 * 10 + 1_000, "a gap too");
        assert_eq!(g.free_at("h5", now), now, "a time past: free now");
    }

    fn summary(probes: u32, span: f64, paid: Option<f64>, band: (f64, f64)) -> ScoreSummary {
        ScoreSummary {
            verified: false,
            verdict: crate::rubric::Verdict::Unverified,
            probes,
            probes_needed: 8,
            span_days: span,
            span_days_needed: 3.0,
            paid_days_ago: paid,
            paid_within_days: 30.0,
            band,
            capped_score: 80.0,
            grade_edges: vec![90.0, 80.0, 70.0, 60.0],
            r4: 1.0,
            r5: 1.0,
            price_usd: crate::evidence::usd::Usd::of_micros(10_000).unwrap(),
            category: "x".into(),
        }
    }

    #[test]
    fn paid_calls_go_first_where_they_settle_a_verdict() {
        let week = 7 * 86_400_000;
        assert_eq!(
            paid_wanted(
                Some(&summary(8, 3.0, None, (91.0, 95.0))),
                None,
                None,
                0,
                week,
                false
            ),
            Some(PaidReason::VerdictReady)
        );
        assert_eq!(
            paid_wanted(
                Some(&summary(7, 3.0, None, (91.0, 95.0))),
                None,
                None,
                0,
                week,
                false
            ),
            None,
            "not verdict-ready yet"
        );
        assert_eq!(
            paid_wanted(
                Some(&summary(8, 3.0, Some(2.0), (91.0, 95.0))),
                None,
                None,
                0,
                week,
                false
            ),
            None,
            "a recent paid call and a band inside one grade"
        );
        assert_eq!(
            paid_wanted(
                Some(&summary(8, 3.0, Some(2.0), (78.0, 84.0))),
                None,
                None,
                0,
                week,
                false
            ),
            Some(PaidReason::BandStraddles)
        );
        assert_eq!(
            paid_wanted(
                Some(&summary(8, 3.0, None, (1.0, 99.0))),
                Some(0),
                None,
                week - 1,
                week,
                false
            ),
            None,
            "never more often than the minimum interval"
        );
        assert_eq!(paid_wanted(None, None, None, 0, week, false), None);
    }

    #[test]
    fn a_spend_limit_holds_paid_calls_until_its_wait_ends() {
        let week = 7 * 86_400_000;
        let ready = summary(8, 3.0, None, (91.0, 95.0));
        let held = Some(SPEND_LIMIT_WAIT_MS);
        assert_eq!(
            paid_wanted(
                Some(&ready),
                None,
                held,
                SPEND_LIMIT_WAIT_MS - 1,
                week,
                false
            ),
            None,
            "held"
        );
        assert_eq!(
            paid_wanted(Some(&ready), None, held, SPEND_LIMIT_WAIT_MS, week, false),
            Some(PaidReason::VerdictReady),
            "the wait is over"
        );
        assert_eq!(
            paid_wanted(None, None, held, 0, week, true),
            None,
            "a first run's paid call waits too"
        );
    }

    /// One run in flight since 0, the clock at 100, the next run due at 500, a lookahead of 600.
    fn overlapping() -> SimulatedLoop {
        SimulatedLoop {
            now_ms: 100,
            next_due_ms: Some(500),
            until_ms: 10_000,
            lookahead_ms: 600,
            in_flight: 1,
            paid_in_flight: 0,
            concurrency: 4,
            overlap_from_ms: 0,
        }
    }

    #[test]
    fn a_simulated_clock_alone_jumps_to_the_next_due_run_and_ends_after_the_last() {
        let idle = SimulatedLoop {
            in_flight: 0,
            ..overlapping()
        };
        assert_eq!(simulated_step(&idle), SimulatedStep::AdvanceTo(500));
        let after_end = SimulatedLoop {
            next_due_ms: Some(10_001),
            ..idle
        };
        assert_eq!(simulated_step(&after_end), SimulatedStep::End);
        let empty = SimulatedLoop {
            next_due_ms: None,
            ..idle
        };
        assert_eq!(simulated_step(&empty), SimulatedStep::End);
        // Without a lookahead the idle case is unchanged.
        let no_lookahead = SimulatedLoop {
            lookahead_ms: 0,
            ..idle
        };
        assert_eq!(simulated_step(&no_lookahead), SimulatedStep::AdvanceTo(500));
    }

    #[test]
    fn runs_overlap_within_the_lookahead_of_the_oldest_run_in_flight() {
        // The next run starts while the first is in flight: the clock jumps 400 ms ahead.
        assert_eq!(
            simulated_step(&overlapping()),
            SimulatedStep::AdvanceTo(500)
        );
        // At the lookahead's edge, counted from the oldest run's start (0), not from now (100).
        let edge = SimulatedLoop {
            next_due_ms: Some(600),
            ..overlapping()
        };
        assert_eq!(simulated_step(&edge), SimulatedStep::AdvanceTo(600));
        let past = SimulatedLoop {
            next_due_ms: Some(601),
            ..overlapping()
        };
        assert_eq!(simulated_step(&past), SimulatedStep::AwaitRun);
        // An overdue run (held back by its host's gap) never moves the clock back.
        let overdue = SimulatedLoop {
            next_due_ms: Some(50),
            ..overlapping()
        };
        assert_eq!(simulated_step(&overdue), SimulatedStep::AdvanceTo(100));
    }

    #[test]
    fn the_clock_waits_for_runs_in_flight_when_it_may_not_jump() {
        let cases = [
            (
                "no lookahead",
                SimulatedLoop {
                    lookahead_ms: 0,
                    ..overlapping()
                },
            ),
            (
                "a paid call in flight",
                SimulatedLoop {
                    paid_in_flight: 1,
                    ..overlapping()
                },
            ),
            (
                "every slot taken",
                SimulatedLoop {
                    in_flight: 4,
                    ..overlapping()
                },
            ),
            (
                "due after the end",
                SimulatedLoop {
                    until_ms: 499,
                    ..overlapping()
                },
            ),
            (
                "nothing due",
                SimulatedLoop {
                    next_due_ms: None,
                    ..overlapping()
                },
            ),
        ];
        for (why, state) in cases {
            assert_eq!(simulated_step(&state), SimulatedStep::AwaitRun, "{why}");
        }
    }
}
