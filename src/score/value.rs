//! Value, shown beside the score and never inside it: where the subject's price sits among good
//! subjects of its category, and what a valid KiB of output costs.

use super::input::Inputs;
use crate::evidence::Outcome;
use crate::rubric::Rubric;
use serde::{Deserialize, Serialize};

/// A peer counts for the price percentile when both its R4 and R5 pass rates reach this.
pub const PEER_MIN_PASS_RATE: f64 = 0.8;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Value {
    pub inside_score: bool,
    pub price_usd: f64,
    /// 0..=100, mid-rank: the share of peers cheaper, counting equal prices as half. Low is cheap.
    pub price_percentile: Option<f64>,
    pub peers: u32,
    /// Price times the decayed number of paid output checks, over the decayed valid KiB.
    pub usd_per_valid_kib: Option<f64>,
    pub notes: Vec<String>,
}

/// USD figures keep 8 decimals (a price can be a fraction of a cent per KiB). Magnitudes with no
/// digit below 1e-8 left (from 2^53 / 10^8) are kept as they are, as in `round4`.
pub fn round_usd(x: f64) -> f64 {
    if x.is_finite() && x.abs() < 9_007_199_254_740_992.0 / 1e8 {
        (x * 1e8).round() / 1e8
    } else {
        x
    }
}

pub fn value(rubric: &Rubric, inputs: &Inputs, weights: &super::tally::EntryWeights) -> Value {
    let price = inputs.subject.price_usd;
    let peers: Vec<f64> = inputs
        .population
        .iter()
        .filter(|p| {
            p.id != inputs.subject.id
                && p.category == inputs.subject.category
                && p.r4_pass_rate >= PEER_MIN_PASS_RATE
                && p.r5_pass_rate >= PEER_MIN_PASS_RATE
        })
        .map(|p| p.price_usd)
        .collect();
    let mut notes = Vec::new();
    let price_percentile = if peers.is_empty() {
        notes.push(format!(
            "no peer in category {:?} with R4 and R5 pass rates >= {PEER_MIN_PASS_RATE}",
            inputs.subject.category
        ));
        None
    } else {
        let cheaper = peers.iter().filter(|p| **p < price).count() as f64;
        let equal = peers.iter().filter(|p| **p == price).count() as f64;
        Some(super::points::round4(
            100.0 * (cheaper + 0.5 * equal) / peers.len() as f64,
        ))
    };

    // R5 carries each paid output check; a pass's value is the valid output's size in bytes.
    let (mut calls, mut valid_kib) = (0.0, 0.0);
    if let Some(r5) = rubric
        .checks
        .iter()
        .position(|c| c.id == crate::rubric::CheckId::R5)
    {
        for &i in &weights.by_check[r5] {
            let (e, w) = (&inputs.history[i], weights.weight[i]);
            match e.outcome {
                Outcome::Pass => {
                    calls += w;
                    valid_kib += match &e.cell {
                        Some(cell) => weights.base[i] * cell.value_sum / 1024.0,
                        None => w * e.value.unwrap_or(0.0) / 1024.0,
                    };
                }
                Outcome::Fail => calls += w,
                Outcome::Na | Outcome::Unmeasured => {}
            }
        }
    }
    let usd_per_valid_kib = if valid_kib > 0.0 {
        Some(round_usd(price * calls / valid_kib))
    } else {
        notes.push("no valid output measured (R5 passes with a size)".to_string());
        None
    };
    Value {
        inside_score: false,
        price_usd: price,
        price_percentile,
        peers: peers.len() as u32,
        usd_per_valid_kib,
        notes,
    }
}
