//! A simulated population of endpoints with hidden truths (`x402-probe simulate`).
//!
//! `Population::generate(seed, size, days)` draws, for each endpoint, what it really is: a class
//! from a realistic mixture (most honest, a tail of flaky and dishonest ones, and the hard cases a
//! scorer can get wrong), its failure share over time, its latency, its price and payee over time,
//! its paid-path misbehaviours with their onsets, an injected description and its outages. Pure
//! and seeded: the same seed, size and days give the same population byte for byte, and each
//! endpoint's truth depends only on the seed and its index (a larger population keeps the smaller
//! one as its prefix).
//!
//! The truth serves two readers that never meet: the lab endpoint that behaves by it
//! ([`Truth::timeline`], read by `server.rs`), and the labels ([`Population::labels`]), which say
//! for each day whether a paid call in the following 14 days would fail. The daemon under test sees
//! only what the endpoint serves.
//!
//! Times are in ms since the simulation's start (day 0 begins at 0); onsets fall on whole days.

use alloy::primitives::Address;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::dynamic::{Delay, Timeline, rfc3339_ms};
use crate::scenarios::{FacilitatorKind, Paid, TextFault};

pub const DAY_MS: i64 = 86_400_000;

/// The label's horizon: a paid call in the 14 days after a day.
pub const HORIZON_DAYS: u32 = 14;

/// The day the `turns_bad` hard case turns bad (the day 20), when the run is long enough.
pub const TURNS_BAD_DAY: u32 = 20;

/// What an endpoint really is. Each class is one archetype; its details (shares, onsets, notes)
/// are drawn per endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Never fails; latency varies between endpoints.
    Honest,
    /// Never fails, but answers slowly (seconds).
    Slow,
    /// Fails a share of calls (5 to 40%), sometimes changing at an onset.
    Flaky,
    /// Honest, with one to three outages of one to four days (down for everyone).
    Outages,
    /// Honest; the price rises at an onset, with or without a note in the operator file.
    RaisesPrice,
    /// Honest; the payTo rotates at an onset, with or without a note.
    RotatesPayto,
    /// Honest calls; the description carries a prompt injection from an onset.
    InjectsDescription,
    /// The facilitator pulls three times the quote from an onset.
    Overcharges,
    /// The facilitator pays another address from an onset.
    PaysWrongPayee,
    /// The facilitator pulls the amount a second time from an onset.
    PullsTwice,
    /// Settles, then answers 500, from an onset.
    ChargesWithoutDelivery,
    /// Settles and answers output that does not validate, from an onset.
    ServesInvalidOutput,
    /// Hard case: perfect until day 20, then half its requests fail and paid calls are charged
    /// without delivery.
    TurnsBad,
    /// Hard case: free probes are perfect; every paid call is charged without delivery.
    PaidPathBroken,
    /// Hard case: down for our vantage only for four days (other callers are served).
    VantageOnlyOutage,
}

impl Class {
    pub const ALL: [Class; 15] = [
        Class::Honest,
        Class::Slow,
        Class::Flaky,
        Class::Outages,
        Class::RaisesPrice,
        Class::RotatesPayto,
        Class::InjectsDescription,
        Class::Overcharges,
        Class::PaysWrongPayee,
        Class::PullsTwice,
        Class::ChargesWithoutDelivery,
        Class::ServesInvalidOutput,
        Class::TurnsBad,
        Class::PaidPathBroken,
        Class::VantageOnlyOutage,
    ];

    /// The class's share of the mixture, per mille (the weights sum to 1000).
    pub fn per_mille(self) -> u32 {
        match self {
            Class::Honest => 380,
            Class::Slow => 80,
            Class::Flaky => 140,
            Class::Outages => 60,
            Class::RaisesPrice => 50,
            Class::RotatesPayto => 50,
            Class::InjectsDescription => 30,
            Class::Overcharges
            | Class::PaysWrongPayee
            | Class::PullsTwice
            | Class::ChargesWithoutDelivery
            | Class::ServesInvalidOutput => 30,
            Class::TurnsBad | Class::PaidPathBroken | Class::VantageOnlyOutage => 20,
        }
    }

    /// The snake_case name truth.json uses.
    pub fn name(self) -> &'static str {
        match self {
            Class::Honest => "honest",
            Class::Slow => "slow",
            Class::Flaky => "flaky",
            Class::Outages => "outages",
            Class::RaisesPrice => "raises_price",
            Class::RotatesPayto => "rotates_payto",
            Class::InjectsDescription => "injects_description",
            Class::Overcharges => "overcharges",
            Class::PaysWrongPayee => "pays_wrong_payee",
            Class::PullsTwice => "pulls_twice",
            Class::ChargesWithoutDelivery => "charges_without_delivery",
            Class::ServesInvalidOutput => "serves_invalid_output",
            Class::TurnsBad => "turns_bad",
            Class::PaidPathBroken => "paid_path_broken",
            Class::VantageOnlyOutage => "vantage_only_outage",
        }
    }
}

/// The classes every population of at least this many endpoints starts with, in this order: an
/// honest one and the three hard cases. The rest are drawn from the mixture.
pub const ANCHORS: [Class; 4] = [
    Class::Honest,
    Class::TurnsBad,
    Class::PaidPathBroken,
    Class::VantageOnlyOutage,
];

/// A misbehaviour of the paid path (the lab's dishonest scenarios, switched on at an onset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PaidFault {
    Overcharge,
    WrongPayee,
    DoublePull,
    ChargeWithoutDelivery,
    InvalidOutput,
}

impl PaidFault {
    /// How a paid call fails while this is active.
    pub fn failures(self) -> Vec<CallFailure> {
        match self {
            PaidFault::Overcharge => vec![CallFailure::Overcharged],
            PaidFault::WrongPayee => vec![CallFailure::WrongPayee],
            PaidFault::DoublePull => vec![CallFailure::ChargedTwice],
            PaidFault::ChargeWithoutDelivery => {
                vec![CallFailure::NotOk, CallFailure::ChargedWithoutDelivery]
            }
            PaidFault::InvalidOutput => {
                vec![
                    CallFailure::InvalidOutput,
                    CallFailure::ChargedWithoutDelivery,
                ]
            }
        }
    }
}

/// How one paid call fails (the same list, in the same order, as the main crate's label kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallFailure {
    /// No 2xx (down, or the request failed).
    NotOk,
    InvalidOutput,
    Overcharged,
    WrongPayee,
    ChargedTwice,
    ChargedWithoutDelivery,
}

/// A latency distribution: log-normal with this median (ms) and sigma (of the log).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    pub median_ms: f64,
    pub sigma: f64,
}

/// A failure share from a day on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ShareFrom {
    pub from_day: u32,
    pub share: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FaultFrom {
    pub onset_day: u32,
    pub fault: PaidFault,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PriceChange {
    pub onset_day: u32,
    /// The new price, in the token's base units (6 decimals).
    pub amount: u64,
    /// Whether the operator file announces it (a dated note).
    pub noted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PaytoRotation {
    pub onset_day: u32,
    pub pay_to: Address,
    pub noted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Outage {
    pub onset_day: u32,
    pub days: u32,
    /// Down for our vantage only: other callers are served, so a paid call does not fail.
    pub vantage_only: bool,
}

impl Outage {
    fn covers(&self, at_ms: i64) -> bool {
        let from = i64::from(self.onset_day) * DAY_MS;
        at_ms >= from && at_ms < from + i64::from(self.days) * DAY_MS
    }
}

/// One endpoint's hidden truth.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Truth {
    /// Its place in the population.
    pub index: u32,
    pub class: Class,
    /// The category the daemon's configuration gives it (what a catalogue would say).
    pub category: Category,
    /// Which lab scenario it is served as before its truth applies.
    pub base: Base,
    /// The price at day 0, in the token's base units.
    pub price: u64,
    /// Unpaid answers (the 402) and paid answers.
    pub latency_free: Latency,
    pub latency_paid: Latency,
    /// The failure share (calls answered 503), from day 0 on and at each change; sorted.
    pub reliability: Vec<ShareFrom>,
    pub paid_faults: Vec<FaultFrom>,
    pub price_changes: Vec<PriceChange>,
    pub payto_rotations: Vec<PaytoRotation>,
    /// The description carries a prompt injection from this day on.
    pub injection_from_day: Option<u32>,
    pub outages: Vec<Outage>,
}

/// The categories endpoints are listed under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Weather,
    Search,
    Finance,
    Images,
}

impl Category {
    pub const ALL: [Category; 4] = [
        Category::Weather,
        Category::Search,
        Category::Finance,
        Category::Images,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Category::Weather => "weather",
            Category::Search => "search",
            Category::Finance => "finance",
            Category::Images => "images",
        }
    }
}

/// The lab scenario an endpoint is served as: an honest x402 v2 or v1 endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Base {
    #[serde(rename = "honest-v2")]
    HonestV2,
    #[serde(rename = "honest-v1")]
    HonestV1,
}

impl Base {
    /// The scenario's name in `scenarios::all()`.
    pub fn scenario(self) -> &'static str {
        match self {
            Base::HonestV2 => "honest-v2",
            Base::HonestV1 => "honest-v1",
        }
    }
}

impl Truth {
    /// The failure share at a time.
    pub fn share_at(&self, at_ms: i64) -> f64 {
        self.reliability
            .iter()
            .rev()
            .find(|s| i64::from(s.from_day) * DAY_MS <= at_ms)
            .map_or(0.0, |s| s.share)
    }

    /// The paid-path misbehaviour active at a time (the latest onset wins).
    pub fn fault_at(&self, at_ms: i64) -> Option<PaidFault> {
        self.paid_faults
            .iter()
            .rev()
            .find(|f| i64::from(f.onset_day) * DAY_MS <= at_ms)
            .map(|f| f.fault)
    }

    /// Down for everyone at a time (an outage for our vantage only does not count).
    pub fn down_at(&self, at_ms: i64) -> bool {
        self.outages
            .iter()
            .any(|o| !o.vantage_only && o.covers(at_ms))
    }

    /// The chance that a paid call at this time fails.
    pub fn failure_probability(&self, at_ms: i64) -> f64 {
        if self.down_at(at_ms) || self.fault_at(at_ms).is_some() {
            1.0
        } else {
            self.share_at(at_ms)
        }
    }

    /// How a paid call at this time fails (empty: it succeeds), given a uniform draw in [0, 1)
    /// for its luck: a call that draws below the failure share is answered 503 before paying.
    pub fn judge_call(&self, at_ms: i64, draw: f64) -> Vec<CallFailure> {
        if self.down_at(at_ms) || draw < self.share_at(at_ms) {
            return vec![CallFailure::NotOk];
        }
        self.fault_at(at_ms)
            .map(PaidFault::failures)
            .unwrap_or_default()
    }

    /// The lab timeline that serves this truth, for a simulation that starts at `start_ms` (wall
    /// or simulated epoch ms). `latency_scale` multiplies every served delay (0 serves none):
    /// the daemon measures real time, and a simulation runs its probes one after another.
    pub fn timeline(&self, start_ms: i64, latency_scale: f64) -> Timeline {
        let at = |day: u32| start_ms + i64::from(day) * DAY_MS;
        let mut price = vec![(start_ms, self.price)];
        let mut notes = Vec::new();
        for c in &self.price_changes {
            price.push((at(c.onset_day), c.amount));
            if c.noted {
                notes.push((
                    at(c.onset_day),
                    json!({
                        "at": rfc3339_ms(at(c.onset_day)),
                        "kind": "price_change",
                        "amount": c.amount.to_string(),
                        "text": format!("New price from {}: {} base units per call.",
                                        rfc3339_ms(at(c.onset_day)), c.amount),
                    }),
                ));
            }
        }
        let mut pay_to = Vec::new();
        for r in &self.payto_rotations {
            pay_to.push((at(r.onset_day), r.pay_to));
            if r.noted {
                notes.push((
                    at(r.onset_day),
                    json!({
                        "at": rfc3339_ms(at(r.onset_day)),
                        "kind": "payto_rotation",
                        "pay_to": r.pay_to.to_checksum(None),
                        "text": "We moved to a new wallet.",
                    }),
                ));
            }
        }
        notes.sort_by_key(|(t, _)| *t);
        let mut facilitator = Vec::new();
        let mut paid = Vec::new();
        for f in &self.paid_faults {
            let t = at(f.onset_day);
            let (kind, mode) = match f.fault {
                PaidFault::Overcharge => (FacilitatorKind::Overcharge, Paid::Honest),
                PaidFault::WrongPayee => (FacilitatorKind::WrongPayee, Paid::Honest),
                PaidFault::DoublePull => (FacilitatorKind::DoublePull, Paid::Honest),
                PaidFault::ChargeWithoutDelivery => (FacilitatorKind::Honest, Paid::SettleThen500),
                PaidFault::InvalidOutput => (FacilitatorKind::Honest, Paid::InvalidOutput),
            };
            facilitator.push((t, kind));
            paid.push((t, mode));
        }
        let scaled = |l: Latency| Delay {
            median_ms: l.median_ms * latency_scale,
            sigma: l.sigma,
        };
        Timeline {
            price,
            pay_to,
            notes,
            down: self
                .outages
                .iter()
                .map(|o| (at(o.onset_day), at(o.onset_day + o.days)))
                .collect(),
            fail_share: 0.0,
            independent_failures: true,
            fail_shares: self
                .reliability
                .iter()
                .map(|s| (at(s.from_day), s.share))
                .collect(),
            facilitator,
            paid,
            text: self
                .injection_from_day
                .map(|d| vec![(at(d), TextFault::Injection)])
                .unwrap_or_default(),
            free_delay: (latency_scale > 0.0).then(|| scaled(self.latency_free)),
            paid_delay: (latency_scale > 0.0).then(|| scaled(self.latency_paid)),
        }
    }
}

/// One hypothetical paid call the labels rest on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HypotheticalCall {
    pub day: u32,
    /// When, in ms since the start (a seeded moment of the day).
    pub at_ms: i64,
    /// The truth's chance that a call then fails.
    pub failure_probability: f64,
    /// How this call fails, judged by the truth with a seeded draw (empty: it succeeds).
    pub failures: Vec<CallFailure>,
}

/// The label of one day: whether a paid call in the horizon after it fails.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DayTruth {
    pub day: u32,
    pub fails: bool,
    /// The calls in the window (one per day of the horizon).
    pub calls: u32,
    /// The mean failure probability at those calls' moments.
    pub failure_rate: f64,
    /// Each way a call of the window failed, once, in order.
    pub failures: Vec<CallFailure>,
}

/// A seeded population of endpoints with hidden truths.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Population {
    pub seed: u64,
    pub days: u32,
    pub subjects: Vec<Truth>,
}

/// An independent random stream for one purpose of one endpoint.
fn stream(seed: u64, index: u32, purpose: &str) -> StdRng {
    let digest = Sha256::new()
        .chain_update(b"x402-lab.population/1")
        .chain_update(seed.to_be_bytes())
        .chain_update(index.to_be_bytes())
        .chain_update(purpose.as_bytes())
        .finalize();
    let mut key = [0u8; 32];
    key.copy_from_slice(&digest);
    StdRng::from_seed(key)
}

fn draw_class(rng: &mut StdRng) -> Class {
    let mut ticket = rng.random_range(0..1000u32);
    for class in Class::ALL {
        if ticket < class.per_mille() {
            return class;
        }
        ticket -= class.per_mille();
    }
    Class::Honest
}

fn latency(rng: &mut StdRng, low_ms: f64, high_ms: f64) -> Latency {
    Latency {
        median_ms: (rng.random_range(low_ms..high_ms)).round(),
        sigma: (rng.random_range(0.2..0.8f64) * 100.0).round() / 100.0,
    }
}

impl Population {
    /// Draws `size` endpoints for a simulation of `days` days (at least 15: one label needs a
    /// day and the 14 after it).
    pub fn generate(seed: u64, size: u32, days: u32) -> Population {
        let subjects = (0..size).map(|i| Self::truth(seed, i, days)).collect();
        Population {
            seed,
            days,
            subjects,
        }
    }

    fn truth(seed: u64, index: u32, days: u32) -> Truth {
        let days = days.max(2);
        let mut rng = stream(seed, index, "truth");
        let class = match ANCHORS.get(index as usize) {
            Some(c) => *c,
            None => draw_class(&mut rng),
        };
        let category = Category::ALL[rng.random_range(0..Category::ALL.len())];
        let base = if rng.random_bool(0.2) {
            Base::HonestV1
        } else {
            Base::HonestV2
        };
        // 0.001 to 0.02 USDC, in whole thousandths of a cent.
        let price = rng.random_range(1..=20u64) * 1_000;
        let latency_free = latency(&mut rng, 40.0, 400.0);
        let latency_paid = Latency {
            median_ms: latency_free.median_ms + rng.random_range(50.0..800.0f64).round(),
            sigma: latency_free.sigma,
        };
        let mut truth = Truth {
            index,
            class,
            category,
            base,
            price,
            latency_free,
            latency_paid,
            reliability: vec![ShareFrom {
                from_day: 0,
                share: 0.0,
            }],
            paid_faults: vec![],
            price_changes: vec![],
            payto_rotations: vec![],
            injection_from_day: None,
            outages: vec![],
        };
        let onset = |rng: &mut StdRng| rng.random_range(1..days);
        // Dishonest from the start half the time, else from a day of the run.
        let fault_onset = |rng: &mut StdRng| {
            if rng.random_bool(0.5) {
                0
            } else {
                rng.random_range(1..days)
            }
        };
        let share = |rng: &mut StdRng, low: f64, high: f64| {
            (rng.random_range(low..high) * 100.0).round() / 100.0
        };
        match class {
            Class::Honest => {}
            Class::Slow => {
                truth.latency_free = latency(&mut rng, 1_200.0, 4_000.0);
                truth.latency_paid = Latency {
                    median_ms: truth.latency_free.median_ms * 1.5,
                    sigma: truth.latency_free.sigma,
                };
            }
            Class::Flaky => {
                truth.reliability[0].share = share(&mut rng, 0.05, 0.4);
                if rng.random_bool(0.4) {
                    let from_day = onset(&mut rng);
                    let share = share(&mut rng, 0.0, 0.6);
                    truth.reliability.push(ShareFrom { from_day, share });
                }
            }
            Class::Outages => {
                let n = rng.random_range(1..=3u32);
                for _ in 0..n {
                    let onset_day = onset(&mut rng);
                    let length = rng.random_range(1..=4u32).min(days - onset_day);
                    truth.outages.push(Outage {
                        onset_day,
                        days: length,
                        vantage_only: false,
                    });
                }
                truth.outages.sort_by_key(|o| o.onset_day);
            }
            Class::RaisesPrice => {
                let factor = [3u64, 4, 6][rng.random_range(0..3)];
                truth.price_changes.push(PriceChange {
                    onset_day: onset(&mut rng),
                    amount: price * factor / 2,
                    noted: rng.random_bool(0.5),
                });
            }
            Class::RotatesPayto => {
                let mut address = [0u8; 20];
                rng.fill(&mut address[..]);
                truth.payto_rotations.push(PaytoRotation {
                    onset_day: onset(&mut rng),
                    pay_to: Address::from(address),
                    noted: rng.random_bool(0.5),
                });
            }
            Class::InjectsDescription => truth.injection_from_day = Some(fault_onset(&mut rng)),
            Class::Overcharges => truth.paid_faults.push(FaultFrom {
                onset_day: fault_onset(&mut rng),
                fault: PaidFault::Overcharge,
            }),
            Class::PaysWrongPayee => truth.paid_faults.push(FaultFrom {
                onset_day: fault_onset(&mut rng),
                fault: PaidFault::WrongPayee,
            }),
            Class::PullsTwice => truth.paid_faults.push(FaultFrom {
                onset_day: fault_onset(&mut rng),
                fault: PaidFault::DoublePull,
            }),
            Class::ChargesWithoutDelivery => truth.paid_faults.push(FaultFrom {
                onset_day: fault_onset(&mut rng),
                fault: PaidFault::ChargeWithoutDelivery,
            }),
            Class::ServesInvalidOutput => truth.paid_faults.push(FaultFrom {
                onset_day: fault_onset(&mut rng),
                fault: PaidFault::InvalidOutput,
            }),
            Class::TurnsBad => {
                let onset_day = turns_bad_day(days);
                truth.reliability.push(ShareFrom {
                    from_day: onset_day,
                    share: 0.5,
                });
                truth.paid_faults.push(FaultFrom {
                    onset_day,
                    fault: PaidFault::ChargeWithoutDelivery,
                });
            }
            Class::PaidPathBroken => truth.paid_faults.push(FaultFrom {
                onset_day: 0,
                fault: PaidFault::ChargeWithoutDelivery,
            }),
            Class::VantageOnlyOutage => {
                let length = 4.min(days - 1);
                truth.outages.push(Outage {
                    onset_day: rng.random_range(1..=days - length),
                    days: length,
                    vantage_only: true,
                });
            }
        }
        truth
    }

    /// One hypothetical paid call per day of the run, at a seeded moment of the day, judged by the
    /// truth with a seeded draw.
    pub fn calls(&self, index: u32) -> Vec<HypotheticalCall> {
        let Some(truth) = self.subjects.get(index as usize) else {
            return Vec::new();
        };
        let mut rng = stream(self.seed, index, "calls");
        (0..self.days)
            .map(|day| {
                let at_ms = i64::from(day) * DAY_MS + rng.random_range(0..DAY_MS);
                let draw: f64 = rng.random();
                HypotheticalCall {
                    day,
                    at_ms,
                    failure_probability: truth.failure_probability(at_ms),
                    failures: truth.judge_call(at_ms, draw),
                }
            })
            .collect()
    }

    /// The labels of one endpoint: for each day D whose window D+1..=D+`horizon` lies inside the
    /// run, whether one of the window's hypothetical calls fails.
    pub fn labels(&self, index: u32, horizon: u32) -> Vec<DayTruth> {
        window_labels(&self.calls(index), horizon)
    }
}

/// The window rule over one call per day (`calls[d]` is day d's): day D is labelled from the calls
/// of days D+1 to D+horizon, and only when all of them exist.
pub fn window_labels(calls: &[HypotheticalCall], horizon: u32) -> Vec<DayTruth> {
    let horizon = horizon.max(1) as usize;
    if calls.len() <= horizon {
        return Vec::new();
    }
    (0..calls.len() - horizon)
        .map(|d| {
            let window = &calls[d + 1..=d + horizon];
            let mut failures: Vec<CallFailure> =
                window.iter().flat_map(|c| c.failures.clone()).collect();
            failures.sort();
            failures.dedup();
            DayTruth {
                day: d as u32,
                fails: window.iter().any(|c| !c.failures.is_empty()),
                calls: window.len() as u32,
                failure_rate: window.iter().map(|c| c.failure_probability).sum::<f64>()
                    / window.len() as f64,
                failures,
            }
        })
        .collect()
}

/// The day `turns_bad` turns bad in a run of `days` days: day 20, or half-way in a shorter run.
pub fn turns_bad_day(days: u32) -> u32 {
    if days > TURNS_BAD_DAY + 1 {
        TURNS_BAD_DAY
    } else {
        (days / 2).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_population_and_another_seed_another() {
        let a = serde_json::to_vec(&Population::generate(7, 300, 60)).unwrap();
        let b = serde_json::to_vec(&Population::generate(7, 300, 60)).unwrap();
        assert_eq!(a, b);
        let c = serde_json::to_vec(&Population::generate(8, 300, 60)).unwrap();
        assert_ne!(a, c);
        // The labels too.
        let p = Population::generate(7, 50, 60);
        let q = Population::generate(7, 50, 60);
        for i in 0..50 {
            assert_eq!(p.labels(i, HORIZON_DAYS), q.labels(i, HORIZON_DAYS));
        }
        // A larger population keeps the smaller as its prefix.
        let big = Population::generate(7, 400, 60);
        assert_eq!(
            big.subjects[..300],
            Population::generate(7, 300, 60).subjects[..]
        );
    }

    #[test]
    fn the_mixture_has_its_shares_and_the_hard_cases() {
        let p = Population::generate(1, 5000, 60);
        assert_eq!(
            &p.subjects[..4].iter().map(|t| t.class).collect::<Vec<_>>(),
            &ANCHORS
        );
        for class in Class::ALL {
            let n = p.subjects[4..].iter().filter(|t| t.class == class).count() as f64;
            let share = n / 4996.0;
            let want = f64::from(class.per_mille()) / 1000.0;
            // Binomial: within four standard deviations.
            let sd = (want * (1.0 - want) / 4996.0).sqrt();
            assert!(
                (share - want).abs() < 4.0 * sd,
                "{}: {share:.4}, want {want}",
                class.name()
            );
        }
        assert_eq!(Class::ALL.iter().map(|c| c.per_mille()).sum::<u32>(), 1000);
        let honest = p
            .subjects
            .iter()
            .filter(|t| t.class == Class::Honest)
            .count();
        assert!(honest * 3 > p.subjects.len(), "most are honest: {honest}");
        let turns_bad = &p.subjects[1];
        assert_eq!(turns_bad.fault_at(19 * DAY_MS + DAY_MS - 1), None);
        assert!(turns_bad.fault_at(20 * DAY_MS).is_some());
        let broken = &p.subjects[2];
        assert_eq!(broken.share_at(0), 0.0, "its free probes look perfect");
        assert_eq!(broken.failure_probability(0), 1.0);
        let vantage = &p.subjects[3];
        let o = vantage.outages[0];
        let inside = i64::from(o.onset_day) * DAY_MS + 1;
        assert!(o.vantage_only && !vantage.down_at(inside));
        assert_eq!(vantage.failure_probability(inside), 0.0);
        assert!(
            vantage.labels_all_false(),
            "a vantage-only outage fails nobody's call"
        );
        // Honest endpoints never fail; latency varies between them.
        let honest: Vec<&Truth> = p
            .subjects
            .iter()
            .filter(|t| t.class == Class::Honest)
            .collect();
        assert!(honest.iter().all(|t| t.labels_all_false()));
        let medians: std::collections::BTreeSet<u64> = honest
            .iter()
            .map(|t| t.latency_free.median_ms as u64)
            .collect();
        assert!(medians.len() > 100);
    }

    impl Truth {
        fn labels_all_false(&self) -> bool {
            (0..60 * 24).all(|h| self.failure_probability(h * 3_600_000) == 0.0)
        }
    }

    fn call(day: u32, failures: Vec<CallFailure>) -> HypotheticalCall {
        HypotheticalCall {
            day,
            at_ms: i64::from(day) * DAY_MS,
            failure_probability: if failures.is_empty() { 0.0 } else { 1.0 },
            failures,
        }
    }

    #[test]
    fn a_day_is_labelled_by_the_fourteen_days_after_it_and_only_when_all_exist() {
        // Thirty days; the only failing call is on day 20.
        let calls: Vec<HypotheticalCall> = (0..30)
            .map(|d| {
                call(
                    d,
                    if d == 20 {
                        vec![CallFailure::WrongPayee, CallFailure::NotOk]
                    } else {
                        vec![]
                    },
                )
            })
            .collect();
        let labels = window_labels(&calls, 14);
        // Days 0..=15 have their whole window (D+14 <= 29).
        assert_eq!(labels.len(), 16);
        for l in &labels {
            // The window D+1..=D+14 holds day 20 exactly when 6 <= D <= 19.
            assert_eq!(l.fails, (6..=19).contains(&l.day), "day {}", l.day);
            assert_eq!(l.calls, 14);
            if l.fails {
                assert_eq!(
                    l.failures,
                    vec![CallFailure::NotOk, CallFailure::WrongPayee]
                );
                assert!((l.failure_rate - 1.0 / 14.0).abs() < 1e-12);
            } else {
                assert!(l.failures.is_empty() && l.failure_rate == 0.0);
            }
        }
        // A day's own call never labels it (day 5's window starts at day 6).
        assert!(!labels[5].fails);
        // Too short a run has no label.
        assert!(window_labels(&calls[..14], 14).is_empty());
        assert_eq!(window_labels(&calls[..15], 14).len(), 1);
    }

    #[test]
    fn a_fault_from_day_k_labels_the_days_whose_window_reaches_k() {
        let p = Population::generate(3, 600, 40);
        let mut seen = 0;
        for t in &p.subjects {
            let [f] = t.paid_faults[..] else { continue };
            if t.class == Class::TurnsBad || !t.outages.is_empty() {
                continue;
            }
            seen += 1;
            for l in p.labels(t.index, HORIZON_DAYS) {
                assert_eq!(l.fails, l.day + HORIZON_DAYS >= f.onset_day, "{t:?} {l:?}");
                if l.fails {
                    let mut want = f.fault.failures();
                    want.sort();
                    assert_eq!(l.failures, want);
                }
            }
        }
        assert!(seen > 50, "{seen}");
    }

    #[test]
    fn every_base_is_a_lab_scenario_and_both_are_drawn() {
        for base in [Base::HonestV2, Base::HonestV1] {
            assert!(crate::scenarios::by_name(base.scenario()).is_some());
        }
        let p = Population::generate(2, 100, 30);
        assert!(p.subjects.iter().any(|t| t.base == Base::HonestV1));
        assert!(p.subjects.iter().any(|t| t.base == Base::HonestV2));
    }

    #[test]
    fn judging_follows_the_truth_at_the_moment() {
        let t = Truth {
            reliability: vec![
                ShareFrom {
                    from_day: 0,
                    share: 0.25,
                },
                ShareFrom {
                    from_day: 3,
                    share: 0.0,
                },
            ],
            outages: vec![
                Outage {
                    onset_day: 5,
                    days: 2,
                    vantage_only: false,
                },
                Outage {
                    onset_day: 9,
                    days: 1,
                    vantage_only: true,
                },
            ],
            paid_faults: vec![FaultFrom {
                onset_day: 10,
                fault: PaidFault::InvalidOutput,
            }],
            ..Population::generate(1, 1, 20).subjects[0].clone()
        };
        assert_eq!(t.failure_probability(DAY_MS), 0.25);
        assert_eq!(t.judge_call(DAY_MS, 0.2), vec![CallFailure::NotOk]);
        assert!(t.judge_call(DAY_MS, 0.3).is_empty());
        assert_eq!(t.failure_probability(3 * DAY_MS), 0.0);
        assert_eq!(t.judge_call(6 * DAY_MS, 0.99), vec![CallFailure::NotOk]);
        assert!(
            t.judge_call(7 * DAY_MS, 0.99).is_empty(),
            "the outage ended"
        );
        assert!(t.judge_call(9 * DAY_MS + 5, 0.5).is_empty(), "vantage only");
        assert_eq!(
            t.judge_call(10 * DAY_MS, 0.5),
            vec![
                CallFailure::InvalidOutput,
                CallFailure::ChargedWithoutDelivery
            ]
        );
        // The lab timeline carries the same times.
        let tl = t.timeline(1_000, 0.0);
        assert!(tl.down_at(1_000 + 5 * DAY_MS) && !tl.down_at(1_000 + 7 * DAY_MS));
        assert!(tl.down_at(1_000 + 9 * DAY_MS), "our vantage sees it down");
        assert_eq!(tl.fail_share_at(1_000 + DAY_MS), 0.25);
        assert_eq!(tl.fail_share_at(1_000 + 3 * DAY_MS), 0.0);
        assert_eq!(tl.paid_at(1_000 + 10 * DAY_MS), Some(Paid::InvalidOutput));
        assert_eq!(tl.paid_at(1_000 + 10 * DAY_MS - 1), None);
        assert!(tl.free_delay.is_none());
    }
}
