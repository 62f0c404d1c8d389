//! The scoring role on PostgreSQL: one vantage at a time holds it, by the lease `role:scorer` on
//! the database's clock, heart-beaten on real time (a holder killed or cut off loses it to
//! another within the lease time). The holder rescores a subject after each of its own runs and,
//! every beat, the subjects of the other vantages' entries written since it last looked, each
//! score read from every vantage's log (`subject_state::vantages`) and published in its own log.
//! The other vantages record their runs and publish no score. On SQLite there is no role: the
//! daemon always scores.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::checks::cloaking::CloakingContext;
use crate::score::quorum::VantagesRead;
use crate::store::lease::{Fence, Lease, Leases};

use super::subject_state::VantageOutages;
use super::writer::{Write, Writer};

/// This vantage's share of the scoring role.
#[derive(Debug)]
pub(crate) struct ScorerRole {
    holds: AtomicBool,
    /// Until when (this process's monotonic clock) the role is surely still ours: the send time
    /// of the last take or heartbeat that the database granted, plus the lease, less a quarter
    /// of it. The database's expiry is at least that late (it was set after we sent), so a score
    /// published before this instant is published within the lease: a holder paused (stopped,
    /// swapped out) past its lease publishes nothing when it wakes, even before its next beat
    /// tells it the role is gone. With it, the fence the role's scores are appended under
    /// (the database checks it again in the append's transaction: a holder paused between its
    /// check here and its append publishes nothing either).
    grant: Mutex<Option<(Instant, Fence)>>,
    /// The role's lease while held.
    lease: Mutex<Option<Lease>>,
    /// The task that heart-beats it, while the loop runs.
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// `[schedule] down_quorum` and the cycle (`free_every_secs`) the quorum reads.
    down_quorum: Option<u32>,
    cycle_secs: u64,
    pub cloaking: CloakingContext,
    /// The other vantages' outage entries, folded once.
    outages: Mutex<VantageOutages>,
    /// How far each other vantage's log was looked through for subjects to rescore (empty once
    /// the role is taken: every subject of theirs is rescored once).
    scanned: Mutex<BTreeMap<String, u64>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ScorerRole {
    pub(crate) fn new(schedule: &crate::config::ScheduleConfig) -> ScorerRole {
        ScorerRole {
            holds: AtomicBool::new(false),
            grant: Mutex::new(None),
            lease: Mutex::new(None),
            task: Mutex::new(None),
            down_quorum: schedule.down_quorum.as_ref().map(|k| k.get() as u32),
            cycle_secs: schedule.free_every_secs.get(),
            cloaking: CloakingContext::default(),
            outages: Mutex::default(),
            scanned: Mutex::default(),
        }
    }

    /// Whether this vantage holds the role now: as of its last beat, and within the lease that
    /// beat was granted (`grant`).
    pub(crate) fn holds(&self) -> bool {
        self.holds_at(Instant::now())
    }

    fn holds_at(&self, now: Instant) -> bool {
        self.fence_at(now).is_some()
    }

    /// The fence the role's scores are appended under, while it is held ([`Self::holds`]).
    pub(crate) fn fence(&self) -> Option<Fence> {
        self.fence_at(Instant::now())
    }

    fn fence_at(&self, now: Instant) -> Option<Fence> {
        if !self.holds.load(Ordering::SeqCst) {
            return None;
        }
        lock(&self.grant)
            .as_ref()
            .filter(|(until, _)| now < *until)
            .map(|(_, fence)| fence.clone())
    }

    pub(crate) fn set(&self, holds: bool) {
        if !holds {
            *lock(&self.grant) = None;
        }
        if !self.holds.swap(holds, Ordering::SeqCst) && holds {
            lock(&self.scanned).clear();
        }
    }

    /// The database granted the role (`lease`, by a take or a heartbeat) on a request sent at
    /// `sent_at`. A fenced append idle for a quarter of the lease is ended by the database: a
    /// paused holder keeps the others from taking the role no longer than that.
    fn granted(&self, sent_at: Instant, lease: &Lease, lease_for: Duration) {
        let fence = Fence {
            lease: lease.clone(),
            idle_limit: lease_for / 4,
        };
        *lock(&self.grant) = Some((sent_at + lease_for - lease_for / 4, fence));
        self.set(true);
    }

    /// What a score reading the other vantages' logs through `through` records.
    pub(crate) fn read(&self, through: BTreeMap<String, u64>) -> VantagesRead {
        VantagesRead {
            through,
            down_quorum: self.down_quorum,
            cycle_secs: self.cycle_secs,
            cycles: crate::score::quorum::CycleCut::Grid,
        }
    }

    pub(crate) fn outages(&self) -> MutexGuard<'_, VantageOutages> {
        lock(&self.outages)
    }

    pub(crate) fn scanned(&self) -> MutexGuard<'_, BTreeMap<String, u64>> {
        lock(&self.scanned)
    }
}

/// Takes the role when no one holds it (at the start, before any run: a lone vantage scores
/// its first run); `Some`: taken.
pub(crate) async fn take(leases: &Leases, role: &ScorerRole, lease_for: Duration) -> Option<Lease> {
    let sent_at = Instant::now();
    match leases.take_role(lease_for).await {
        Ok(Some(lease)) => {
            tracing::info!(
                vantage = leases.holder(),
                "this vantage holds the scoring role"
            );
            *lock(&role.lease) = Some(lease.clone());
            role.granted(sent_at, &lease, lease_for);
            Some(lease)
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(error = %e, "taking the scoring role failed");
            None
        }
    }
}

/// Starts [`role_task`] (kept in `role`, ended by [`give_back`]).
pub(crate) fn start(
    role: &Arc<ScorerRole>,
    leases: Leases,
    writer: Writer,
    lease_for: Duration,
    beat: Duration,
) {
    let task = tokio::spawn(role_task(leases, role.clone(), writer, lease_for, beat));
    if let Some(old) = lock(&role.task).replace(task) {
        old.abort();
    }
}

/// Every `beat` on real time: the role heart-beaten while held (lost: this vantage stops
/// scoring at once), taken when free; while held, the writer asked to rescore the subjects of
/// the other vantages' new entries.
async fn role_task(
    leases: Leases,
    role: Arc<ScorerRole>,
    writer: Writer,
    lease_for: Duration,
    beat: Duration,
) {
    let mut tick = tokio::time::interval(beat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let held = lock(&role.lease).take();
        let held = match held {
            None => take(&leases, &role, lease_for).await,
            Some(lease) => {
                let sent_at = Instant::now();
                let kept = tokio::time::timeout(
                    beat.max(Duration::from_secs(1)),
                    leases.heartbeat(std::slice::from_ref(&lease), lease_for),
                )
                .await;
                match kept {
                    Ok(Ok(mut kept)) if !kept.is_empty() => {
                        let kept = kept.pop();
                        if let Some(lease) = &kept {
                            role.granted(sent_at, lease, lease_for);
                        }
                        kept
                    }
                    Ok(Ok(_)) => {
                        tracing::warn!(
                            "the scoring role was lost (expired or taken by another vantage): this vantage stops scoring"
                        );
                        role.set(false);
                        None
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "heart-beating the scoring role failed: this vantage stops scoring until it holds it again");
                        role.set(false);
                        None
                    }
                    Err(_) => {
                        tracing::warn!(
                            "heart-beating the scoring role timed out: this vantage stops scoring until it holds it again"
                        );
                        role.set(false);
                        None
                    }
                }
            }
        };
        if let Some(lease) = held {
            *lock(&role.lease) = Some(lease);
            writer.send(Write::ScoreOthers);
        }
    }
}

/// Gives the role back (the daemon stops): another vantage takes it at its next beat.
pub(crate) async fn give_back(leases: &Leases, role: &ScorerRole) {
    if let Some(task) = lock(&role.task).take() {
        task.abort();
    }
    role.set(false);
    let Some(lease) = lock(&role.lease).take() else {
        return;
    };
    match tokio::time::timeout(Duration::from_secs(2), leases.release(&[lease])).await {
        Ok(Ok(())) => tracing::info!("the scoring role given back"),
        _ => tracing::warn!("giving the scoring role back failed; it expires"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role() -> ScorerRole {
        ScorerRole::new(&crate::config::ScheduleConfig::default())
    }

    #[test]
    fn the_role_is_held_only_within_the_lease_the_database_last_granted() {
        let r = role();
        let t0 = Instant::now();
        assert!(!r.holds_at(t0), "never granted");
        let lease = Duration::from_secs(4);
        let role_lease = Lease {
            work: crate::store::lease::role_key(),
            generation: 7,
            expires_at_ms: 0,
        };
        r.granted(t0, &role_lease, lease);
        assert!(r.holds_at(t0 + Duration::from_millis(2_999)));
        // Its scores are appended under the lease granted, idle for at most a quarter of it.
        let fence = r.fence_at(t0 + Duration::from_secs(1)).unwrap();
        assert_eq!(fence.lease, role_lease);
        assert_eq!(fence.idle_limit, Duration::from_secs(1));
        assert_eq!(r.fence_at(t0 + Duration::from_secs(3)), None);
        // A quarter of the lease before the database's expiry: a paused holder that wakes
        // later publishes nothing, even before its next beat says the role is gone.
        assert!(!r.holds_at(t0 + Duration::from_millis(3_000)));
        assert!(!r.holds_at(t0 + lease));
        // Renewed by a heartbeat sent later: held again until that one's lease.
        r.granted(t0 + Duration::from_secs(2), &role_lease, lease);
        assert!(r.holds_at(t0 + Duration::from_millis(4_999)));
        assert!(!r.holds_at(t0 + Duration::from_secs(5)));
        // Lost at a beat: not held, whatever the last grant said.
        r.set(false);
        assert!(!r.holds_at(t0 + Duration::from_secs(3)));
    }
}
