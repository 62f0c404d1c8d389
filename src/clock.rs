//! Time as an input. Everything that stamps evidence or schedules work asks a [`Clock`] given to it;
//! nothing below the command line reads the system time by itself, so the scheduler and the tests
//! can run days of simulated time in seconds.
//!
//! Two clocks meet in a paid call, on purpose: evidence is stamped with the run's clock (simulated
//! in tests), while an EIP-3009 authorization's window and the spend caps' rolling 24 hours always
//! use the wall clock, because the facilitator and the token check the window against real time
//! and because a simulated clock must never make the spend store believe a day has passed.

use std::sync::atomic::{AtomicI64, Ordering};

/// A source of the current time, in milliseconds since the Unix epoch (UTC).
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now_ms(&self) -> i64;

    /// Whole seconds since the epoch (floor).
    fn now(&self) -> i64 {
        self.now_ms().div_euclid(1000)
    }
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        match since {
            Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            // A clock set before 1970: report the epoch rather than panic.
            Err(_) => 0,
        }
    }
}

/// A clock that only moves when told: tests and the simulator set or advance it.
#[derive(Debug, Default)]
pub struct ManualClock {
    ms: AtomicI64,
}

impl ManualClock {
    pub fn at_ms(ms: i64) -> ManualClock {
        ManualClock {
            ms: AtomicI64::new(ms),
        }
    }

    pub fn at(unix_seconds: i64) -> ManualClock {
        ManualClock::at_ms(unix_seconds.saturating_mul(1000))
    }

    pub fn set_ms(&self, ms: i64) {
        self.ms.store(ms, Ordering::SeqCst);
    }

    /// Moves the clock forward (never backward) to `ms`.
    pub fn advance_to_ms(&self, ms: i64) {
        self.ms.fetch_max(ms, Ordering::SeqCst);
    }

    pub fn advance_by_ms(&self, delta: i64) {
        self.ms.fetch_add(delta.max(0), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.ms.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_forward_when_advanced() {
        let clock = ManualClock::at(1_000);
        assert_eq!(clock.now(), 1_000);
        clock.advance_to_ms(500);
        assert_eq!(clock.now_ms(), 1_000_000);
        clock.advance_by_ms(-5);
        assert_eq!(clock.now_ms(), 1_000_000);
        clock.advance_by_ms(2_500);
        assert_eq!(clock.now(), 1_002);
        clock.set_ms(-1_500);
        assert_eq!(clock.now(), -2, "floor, not truncation, before the epoch");
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now() > 1_577_836_800);
    }
}
