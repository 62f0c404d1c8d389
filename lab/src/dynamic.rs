//! Endpoints that change over time: a price that rises, a payTo that rotates (with or without the
//! operator's note), outages of hours or days, a failure share. The time is read from a clock the
//! test gives (simulated days pass in seconds), so the daemon under test sees an endpoint's life
//! unfold while nothing about it reaches the daemon except what the endpoint serves.

use std::sync::Arc;

use alloy::primitives::Address;
use serde_json::{Value, json};

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

    pub fn down_at(&self, now: i64) -> bool {
        self.down.iter().any(|(from, to)| now >= *from && now < *to)
    }

    /// Whether request number `n` fails (the same spread as the flaky scenario).
    pub fn fails(&self, n: u64) -> bool {
        self.fail_share > 0.0
            && ((n + 1) as f64 * self.fail_share).floor() > (n as f64 * self.fail_share).floor()
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
        assert_eq!((0..10).filter(|n| t.fails(*n)).count(), 3);
    }
}
