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

/// Several daemons on one simulated clock (the lab's `daemon --lab --vantages N`): the clock moves
/// only when every member waits to move it, and then to the earliest time any of them asked for,
/// so no member's due work is jumped over by another's. A member whose run ends leaves
/// ([`Member`] dropped) and is no longer waited for.
#[derive(Debug)]
pub struct SharedSimulatedClock {
    clock: std::sync::Arc<ManualClock>,
    state: std::sync::Mutex<Waiting>,
    moved: tokio::sync::watch::Sender<u64>,
}

#[derive(Debug)]
struct Waiting {
    members: usize,
    waiting: usize,
    earliest: Option<i64>,
    generation: u64,
}

impl SharedSimulatedClock {
    /// A clock shared by `members` daemons.
    pub fn new(clock: std::sync::Arc<ManualClock>, members: usize) -> std::sync::Arc<Self> {
        std::sync::Arc::new(SharedSimulatedClock {
            clock,
            state: std::sync::Mutex::new(Waiting {
                members,
                waiting: 0,
                earliest: None,
                generation: 0,
            }),
            moved: tokio::sync::watch::channel(0).0,
        })
    }

    pub fn clock(&self) -> std::sync::Arc<ManualClock> {
        self.clock.clone()
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until every member waits, then the clock is at the earliest time asked for (or
    /// where it was, when that is later). A member whose time has not come asks again.
    pub async fn advance_to_ms(&self, ms: i64) {
        let mut moved = self.moved.subscribe();
        let generation = {
            let mut w = self.waiting();
            w.waiting += 1;
            w.earliest = Some(w.earliest.map_or(ms, |e| e.min(ms)));
            if w.waiting >= w.members {
                self.release(&mut w);
                return;
            }
            w.generation
        };
        while *moved.borrow_and_update() == generation {
            if moved.changed().await.is_err() {
                return;
            }
        }
    }

    /// One member less (its run ended): the others no longer wait for it.
    fn leave(&self) {
        let mut w = self.waiting();
        w.members = w.members.saturating_sub(1);
        if w.waiting > 0 && w.waiting >= w.members {
            self.release(&mut w);
        }
    }

    fn release(&self, w: &mut Waiting) {
        if let Some(at) = w.earliest.take() {
            self.clock.advance_to_ms(at);
        }
        w.waiting = 0;
        w.generation += 1;
        self.moved.send_replace(w.generation);
    }
}

/// A member of a [`SharedSimulatedClock`]: leaves it when dropped.
#[derive(Debug)]
pub struct Member(pub std::sync::Arc<SharedSimulatedClock>);

impl Drop for Member {
    fn drop(&mut self) {
        self.0.leave();
    }
}

// The ledger's times as text: what entries, documents and pages write and read back.

/// RFC 3339 (UTC, ms when not whole seconds) of a time in ms.
pub fn rfc3339_ms(ms: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let f = if ms.rem_euclid(1000) == 0 {
        time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z")
    } else {
        time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
        )
    };
    t.format(&f).unwrap_or_default()
}

/// ms of an RFC 3339 time (None when it does not parse).
pub fn ms_of(text: &str) -> Option<i64> {
    let t =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos().div_euclid(1_000_000)).ok()
}

/// `YYYY-MM-DD` (UTC) of a time in ms.
pub fn day_of(ms: i64) -> String {
    rfc3339_ms(ms.div_euclid(86_400_000) * 86_400_000)[..10].to_string()
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

    #[tokio::test]
    async fn a_shared_clock_moves_to_the_earliest_time_once_every_member_waits() {
        let shared = SharedSimulatedClock::new(std::sync::Arc::new(ManualClock::at_ms(0)), 3);
        let (a, b, c) = (
            Member(shared.clone()),
            Member(shared.clone()),
            Member(shared.clone()),
        );
        let first = tokio::spawn({
            let s = shared.clone();
            async move { s.advance_to_ms(500).await }
        });
        let second = tokio::spawn({
            let s = shared.clone();
            async move { s.advance_to_ms(200).await }
        });
        tokio::task::yield_now().await;
        assert_eq!(shared.clock().now_ms(), 0, "one member is not waiting yet");
        shared.advance_to_ms(900).await;
        first.await.unwrap();
        second.await.unwrap();
        assert_eq!(shared.clock().now_ms(), 200, "the earliest asked for");
        // A member that leaves is not waited for; the last alone moves it.
        drop(c);
        let waiting = tokio::spawn({
            let s = shared.clone();
            async move { s.advance_to_ms(700).await }
        });
        tokio::task::yield_now().await;
        assert_eq!(shared.clock().now_ms(), 200);
        drop(b);
        waiting.await.unwrap();
        assert_eq!(shared.clock().now_ms(), 700);
        shared.advance_to_ms(100).await;
        assert_eq!(shared.clock().now_ms(), 700, "never backward");
        drop(a);
    }

    #[test]
    fn times_round_trip_and_days_are_utc() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_ms(1_500), "1970-01-01T00:00:01.500Z");
        assert_eq!(ms_of(&rfc3339_ms(1_234_567)), Some(1_234_567));
        assert_eq!(day_of(86_400_000 * 2 + 5), "1970-01-03");
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now() > 1_577_836_800);
    }
}
