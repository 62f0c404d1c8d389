//! How much an outcome still weighs: halved every half-life, and (for checks with `on_revision`)
//! halved or dropped at each later revision of the subject.

use crate::rubric::OnRevision;

/// `0.5 ^ (age / half_life)`. Ages at or below zero weigh 1 (evidence from `as_of` itself).
pub fn decay_factor(age_days: f64, half_life_days: f64) -> f64 {
    if age_days <= 0.0 {
        return 1.0;
    }
    libm::exp2(-age_days / half_life_days)
}

/// The factor a check's `on_revision` rule applies to evidence that `later` revisions followed.
/// Checks without `on_revision` ignore revisions.
pub fn revision_factor(rule: Option<OnRevision>, later: u32) -> f64 {
    match (rule, later) {
        (None, _) | (_, 0) => 1.0,
        (Some(OnRevision::Half), n) => libm::exp2(-f64::from(n)),
        (Some(OnRevision::Reset), _) => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_evidence_halves_every_14_days() {
        assert_eq!(decay_factor(0.0, 14.0), 1.0);
        assert_eq!(decay_factor(14.0, 14.0), 0.5);
        assert_eq!(decay_factor(28.0, 14.0), 0.25);
        // 7 days: 2^-0.5
        assert!((decay_factor(7.0, 14.0) - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-15);
    }

    #[test]
    fn paid_evidence_halves_every_30_days() {
        assert_eq!(decay_factor(30.0, 30.0), 0.5);
        assert_eq!(decay_factor(90.0, 30.0), 0.125);
    }

    #[test]
    fn per_check_override_90_days() {
        assert_eq!(decay_factor(90.0, 90.0), 0.5);
        assert_eq!(decay_factor(180.0, 90.0), 0.25);
    }

    #[test]
    fn revision_modes() {
        assert_eq!(revision_factor(None, 3), 1.0);
        assert_eq!(revision_factor(Some(OnRevision::Half), 0), 1.0);
        assert_eq!(revision_factor(Some(OnRevision::Half), 1), 0.5);
        assert_eq!(revision_factor(Some(OnRevision::Half), 3), 0.125);
        assert_eq!(revision_factor(Some(OnRevision::Reset), 0), 1.0);
        assert_eq!(revision_factor(Some(OnRevision::Reset), 1), 0.0);
    }
}
