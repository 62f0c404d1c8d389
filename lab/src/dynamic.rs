//! Endpoints that change over time: a price that rises, a payTo that rotates (with or without the
//! operator's note), outages of hours or days, a failure share that changes, latency, and the
//! lab's dishonest behaviours (an overcharging, wrong-payee or double-pulling facilitator, a charge
//! without delivery, invalid output, an injected description) switched on at an onset. The time
//! is read from a clock the test gives (simulated days pass in seconds), so the daemon under test
//! sees an endpoint's life unfold while nothing about it reaches the daemon except what the
//! endpoint serves.

use std::sync::Arc;

use alloy::primitives::Address;
use serde_json::{Value, json};

use crate::scenarios::{FacilitatorKind, Paid, TextFault};

/// The lab's idea of "now", in ms since the epoch (a simulated clock in tests).
pub type LabClock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// How one endpoint changes over time. Every list is `(from_ms, value)`, sorted by time; the
/// latest entry at or before now applies, and before the first the scenario's own value does.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// The price (atomic units) quoted from a time on.
    pub price: Vec<(i64, u64)>,
    /// The payTo quoted from a time on (and listed in the operator file instead of the usual one).
    pub pay_to: Vec<(i64, Address)>,
    /// Revision notes published in the operator file from a time on: `(visible_from_ms, note)`,
    /// each note in the operator file's format (`at`, `kind`, `amount` or `pay_to`, `text`).
    pub notes: Vec<(i64, Value)>,
    /// Windows in which the endpoint is down: connections are dropped at once.
    pub down: Vec<(i64, i64)>,
    /// Share of requests (0..1) answered 503, deterministically spread over requests.
    pub fail_share: f64,
    /// The share from a time on, replacing `fail_share` (a reliability that changes).
    pub fail_shares: Vec<(i64, f64)>,
    /// Draw each request's failure on its own (a hash of its number) instead of spreading the
    /// failures evenly. The simulator's labels judge each call by an independent draw; an even
    /// spread at a share of 0.5 fails every other request, so the second request of every paid
    /// call (the 402, then the paid retry) would fail before settling, never reaching the paid
    /// behaviour the truth says it has.
    pub independent_failures: bool,
    /// The facilitator the paid path settles through from a time on (an overcharge, a wrong
    /// payee or a double pull that starts at an onset).
    pub facilitator: Vec<(i64, FacilitatorKind)>,
    /// What happens after a valid payment from a time on (charge without delivery, invalid
    /// output).
    pub paid: Vec<(i64, Paid)>,
    /// The description and docs from a time on (an injection that appears).
    pub text: Vec<(i64, TextFault)>,
    /// A delay before each unpaid answer, drawn per request.
    pub free_delay: Option<Delay>,
    /// A delay before each paid answer, drawn per request.
    pub paid_delay: Option<Delay>,
}

/// A log-normal delay: `median_ms * exp(sigma * z)` for a standard normal z drawn per request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Delay {
    pub median_ms: f64,
    pub sigma: f64,
}

impl Delay {
    /// The delay of request number `n`: deterministic in `n` (a hash, not a random generator),
    /// capped at ten times the median.
    pub fn for_request(&self, n: u64) -> std::time::Duration {
        let (u1, u2) = units(&n.to_be_bytes());
        // Box-Muller.
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        let ms = (self.median_ms * (self.sigma * z).exp()).clamp(0.0, self.median_ms * 10.0);
        std::time::Duration::from_micros((ms * 1000.0) as u64)
    }
}

/// Two uniform numbers in (0, 1) hashed from `input`: deterministic, spread like independent draws.
fn units(input: &[u8]) -> (f64, f64) {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(input);
    let unit = |b: &[u8]| {
        let mut word = [0u8; 8];
        word.copy_from_slice(b);
        ((u64::from_be_bytes(word) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (unit(&digest[..8]), unit(&digest[8..16]))
}

impl Timeline {
    fn latest<T: Copy>(list: &[(i64, T)], now: i64) -> Option<T> {
        list.iter()
            .rev()
            .find(|(from, _)| *from <= now)
            .map(|(_, v)| *v)
    }

    pub fn price_at(&self, now: i64) -> Option<u64> {
        Self::latest(&self.price, now)
    }

    pub fn pay_to_at(&self, now: i64) -> Option<Address> {
        Self::latest(&self.pay_to, now)
    }

    /// The failure share at `now`.
    pub fn fail_share_at(&self, now: i64) -> f64 {
        Self::latest(&self.fail_shares, now).unwrap_or(self.fail_share)
    }

    /// The facilitator at `now`, when the timeline sets one.
    pub fn facilitator_at(&self, now: i64) -> Option<FacilitatorKind> {
        Self::latest(&self.facilitator, now)
    }

    /// The paid behaviour at `now`, when the timeline sets one.
    pub fn paid_at(&self, now: i64) -> Option<Paid> {
        Self::latest(&self.paid, now)
    }

    /// The text fault at `now`, when the timeline sets one.
    pub fn text_at(&self, now: i64) -> Option<TextFault> {
        Self::latest(&self.text, now)
    }

    pub fn down_at(&self, now: i64) -> bool {
        self.down.iter().any(|(from, to)| now >= *from && now < *to)
    }

    /// Whether request number `n` at `now` fails: the same even spread as the flaky scenario,
    /// or an independent draw per request (`independent_failures`).
    pub fn fails(&self, n: u64, now: i64) -> bool {
        let share = self.fail_share_at(now);
        if share <= 0.0 {
            return false;
        }
        if self.independent_failures {
            // Salted: not the same draw as the request's delay.
            let mut input = n.to_be_bytes().to_vec();
            input.extend_from_slice(b"fails");
            return units(&input).0 < share;
        }
        ((n + 1) as f64 * share).floor() > (n as f64 * share).floor()
    }

    /// Applies the price and payTo of `now` to every `accepts` entry of a PaymentRequired.
    pub fn apply_quote(&self, pr: &mut Value, now: i64) {
        let price = self.price_at(now);
        let pay_to = self.pay_to_at(now);
        if let Some(accepts) = pr.get_mut("accepts").and_then(Value::as_array_mut) {
            for entry in accepts {
                if let Some(p) = price {
                    let field = if entry.get("maxAmountRequired").is_some() {
                        "maxAmountRequired"
                    } else {
                        "amount"
                    };
                    entry[field] = Value::String(p.to_string());
                }
                if let Some(a) = pay_to {
                    entry["payTo"] = Value::String(a.to_checksum(None));
                }
            }
        }
    }

    /// Applies the payTo and the notes visible at `now` to an operator file.
    pub fn apply_operator_file(&self, file: &mut Value, now: i64) {
        if let Some(a) = self.pay_to_at(now)
            && let Some(wallets) = file.get_mut("wallets").and_then(Value::as_array_mut)
        {
            for w in wallets {
                w["address"] = Value::String(a.to_checksum(None));
            }
        }
        let visible: Vec<Value> = self
            .notes
            .iter()
            .filter(|(from, _)| *from <= now)
            .map(|(_, n)| n.clone())
            .collect();
        if !visible.is_empty() {
            file["notes"] = json!(visible);
        }
    }
}

/// A timeline and the clock it is read against, shared by an endpoint's connections.
pub struct Dynamic {
    pub clock: LabClock,
    pub timeline: std::sync::Mutex<Timeline>,
}

impl Dynamic {
    pub fn now(&self) -> i64 {
        (self.clock)()
    }

    pub fn timeline(&self) -> Timeline {
        self.timeline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set(&self, timeline: Timeline) {
        *self.timeline.lock().unwrap_or_else(|p| p.into_inner()) = timeline;
    }
}

/// RFC 3339 UTC text of a time in ms (for notes).
pub fn rfc3339_ms(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_entry_at_or_before_now_applies() {
        let t = Timeline {
            price: vec![(100, 1), (200, 3)],
            down: vec![(50, 60)],
            ..Timeline::default()
        };
        assert_eq!(t.price_at(99), None);
        assert_eq!(t.price_at(100), Some(1));
        assert_eq!(t.price_at(250), Some(3));
        assert!(t.down_at(50) && t.down_at(59) && !t.down_at(60));
    }

    #[test]
    fn a_thirty_percent_share_fails_three_in_ten() {
        let t = Timeline {
            fail_share: 0.3,
            ..Timeline::default()
        };
        assert_eq!((0..10).filter(|n| t.fails(*n, 0)).count(), 3);
    }

    #[test]
    fn independent_failures_keep_the_share_and_do_not_alternate() {
        let t = Timeline {
            fail_share: 0.5,
            independent_failures: true,
            ..Timeline::default()
        };
        let n = 20_000u64;
        let fails = (0..n).filter(|i| t.fails(*i, 0)).count() as f64 / n as f64;
        assert!((fails - 0.5).abs() < 0.02, "{fails}");
        // A request and the next both pass about a quarter of the time (the even spread: never).
        let pairs = (0..n)
            .filter(|i| !t.fails(*i, 0) && !t.fails(i + 1, 0))
            .count() as f64;
        assert!((pairs / n as f64 - 0.25).abs() < 0.02, "{pairs}");
        let even = Timeline {
            fail_share: 0.5,
            ..Timeline::default()
        };
        assert_eq!(
            (0..n)
                .filter(|i| !even.fails(*i, 0) && !even.fails(i + 1, 0))
                .count(),
            0
        );
    }

    #[test]
    fn a_share_and_the_paid_path_change_at_their_onsets() {
        let t = Timeline {
            fail_share: 0.3,
            fail_shares: vec![(100, 0.0), (200, 0.5)],
            paid: vec![(150, Paid::SettleThen500)],
            facilitator: vec![(150, FacilitatorKind::Overcharge)],
            ..Timeline::default()
        };
        assert_eq!((0..10).filter(|n| t.fails(*n, 99)).count(), 3);
        assert_eq!((0..10).filter(|n| t.fails(*n, 100)).count(), 0);
        assert_eq!((0..10).filter(|n| t.fails(*n, 200)).count(), 5);
        assert_eq!(t.paid_at(149), None);
        assert_eq!(t.paid_at(150), Some(Paid::SettleThen500));
        assert_eq!(t.facilitator_at(150), Some(FacilitatorKind::Overcharge));
    }

    #[test]
    fn delays_spread_around_their_median() {
        let d = Delay {
            median_ms: 100.0,
            sigma: 0.5,
        };
        let mut ms: Vec<f64> = (0..1001)
            .map(|n| d.for_request(n).as_secs_f64() * 1000.0)
            .collect();
        ms.sort_by(f64::total_cmp);
        assert!((80.0..125.0).contains(&ms[500]), "median {}", ms[500]);
        assert!(ms[0] < 60.0 && ms[1000] > 160.0 && ms[1000] <= 1000.0);
        assert_eq!(d.for_request(7), d.for_request(7));
    }
}
