//! The daemon's free runs as work leased from PostgreSQL, shared by every vantage on the
//! database (`[store] postgres`; on SQLite the daemon schedules its own runs, `schedule.rs`).
//!
//! Each subject has `vantages_per_cycle` runs per cycle, one lease row each (`FreeWork`: subject,
//! cycle, replica, due time; `schedule::free_work`). A round, every `heartbeat_ms` and at the next
//! due time, offers the rows of this cycle and the next (once per cycle, or when subjects
//! change), forgets rows a few cycles old, and takes due rows up to the free probe slots
//! (`Leases::take_free`: never two replicas of one cycle for one vantage). A taken run joins its
//! host's line like any other; a task of its own heart-beats every lease held (free runs and paid
//! calls) on real time, whatever the loop is doing; a run recorded marks its lease done, a run
//! not recorded gives it back. A vantage killed or cut off stops heart-beating and its leases
//! expire by the database's clock: the others take them at their next round. A subject's paid
//! call takes a lease of its own (`Leases::take_paid`), so one vantage pays it per interval.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::store::StoreError;
use crate::store::lease::{FreeWork, Lease, Leases, WorkKey};

/// Every lease held now (free runs and paid calls), by key: what the heartbeat task extends.
pub(crate) type Held = Arc<Mutex<BTreeMap<WorkKey, Lease>>>;

/// One vantage's share of the leased work.
pub(crate) struct Leased {
    pub leases: Leases,
    pub per_cycle: u32,
    pub lease_for: Duration,
    pub beat: Duration,
    pub held: Held,
    /// The free leases of the runs taken and not finished, by subject, oldest first.
    pub runs: BTreeMap<String, VecDeque<Lease>>,
    /// The last cycle offered; the rows of the cycle after the current one are offered once the
    /// clock enters it, and all again when subjects were added.
    pub offered_through: Option<i64>,
    pub offer_again: bool,
    pub round_in_flight: bool,
    /// A round was asked for while one was in flight: another once it lands.
    pub round_again: bool,
    /// When the next round is queued for (a queued round at another time is stale).
    pub next_round_ms: Option<i64>,
    /// The heartbeat task, while the loop runs.
    pub heartbeat: Option<tokio::task::JoinHandle<()>>,
}

impl Leased {
    pub fn new(leases: Leases, per_cycle: u32, lease_for: Duration, beat: Duration) -> Leased {
        Leased {
            leases,
            per_cycle,
            lease_for,
            beat,
            held: Arc::default(),
            runs: BTreeMap::new(),
            offered_through: None,
            offer_again: true,
            round_in_flight: false,
            round_again: false,
            next_round_ms: None,
            heartbeat: None,
        }
    }

    /// Free runs taken and not finished.
    pub fn taken(&self) -> usize {
        self.runs.values().map(VecDeque::len).sum()
    }

    pub fn hold(&self, lease: &Lease) {
        lock(&self.held).insert(lease.work.clone(), lease.clone());
    }

    /// No longer heart-beaten; the lease as last extended (its generation is what counts).
    pub fn unhold(&self, lease: &Lease) -> Lease {
        lock(&self.held)
            .remove(&lease.work)
            .unwrap_or_else(|| lease.clone())
    }

    /// The free lease of `subject`'s oldest run taken, when it has one.
    pub fn finished(&mut self, subject: &str) -> Option<Lease> {
        let line = self.runs.get_mut(subject)?;
        let lease = line.pop_front();
        if line.is_empty() {
            self.runs.remove(subject);
        }
        lease.map(|l| self.unhold(&l))
    }

    /// Starts heart-beating every lease held, on real time.
    pub fn start_heartbeat(&mut self) {
        let (leases, held, lease_for, beat) = (
            self.leases.clone(),
            self.held.clone(),
            self.lease_for,
            self.beat,
        );
        self.heartbeat = Some(tokio::spawn(heartbeat(leases, held, lease_for, beat)));
    }

    /// Stops heart-beating and gives back every lease held (a run not finished is taken by
    /// another vantage at once rather than after the lease time).
    pub async fn give_back(&mut self) {
        if let Some(task) = self.heartbeat.take() {
            task.abort();
        }
        let all: Vec<Lease> = std::mem::take(&mut *lock(&self.held))
            .into_values()
            .collect();
        if all.is_empty() {
            return;
        }
        match tokio::time::timeout(Duration::from_secs(2), self.leases.release(&all)).await {
            Ok(Ok(())) => tracing::info!(leases = all.len(), "leases given back"),
            Ok(Err(e)) => tracing::warn!(error = %e, "giving leases back failed; they expire"),
            Err(_) => tracing::warn!("giving leases back timed out; they expire"),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a round asks of the database: rows to offer, rows to forget, and how much to take.
pub(crate) struct Round {
    pub offer: Vec<FreeWork>,
    pub forget_before_ms: i64,
    pub limit: usize,
    pub now_ms: i64,
    pub from_ms: i64,
    pub lease_for: Duration,
}

/// One round against the database: offer, forget, take.
pub(crate) async fn round(
    leases: Leases,
    round: Round,
) -> Result<Vec<(Lease, FreeWork)>, StoreError> {
    if !round.offer.is_empty() {
        leases.offer_free(&round.offer).await?;
        leases.forget_free_before(round.forget_before_ms).await?;
    }
    if round.limit == 0 {
        return Ok(Vec::new());
    }
    leases
        .take_free(round.limit, round.lease_for, round.now_ms, round.from_ms)
        .await
}

/// Extends every lease in `held` every `beat`; a lease the database no longer gives this vantage
/// (expired, taken by another) is dropped from `held` and said.
async fn heartbeat(leases: Leases, held: Held, lease_for: Duration, beat: Duration) {
    let mut tick = tokio::time::interval(beat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let mine: Vec<Lease> = lock(&held).values().cloned().collect();
        if mine.is_empty() {
            continue;
        }
        match tokio::time::timeout(
            beat.max(Duration::from_secs(1)),
            leases.heartbeat(&mine, lease_for),
        )
        .await
        {
            Ok(Ok(kept)) => {
                let kept: BTreeMap<WorkKey, Lease> =
                    kept.into_iter().map(|l| (l.work.clone(), l)).collect();
                let mut held = lock(&held);
                for lease in &mine {
                    match kept.get(&lease.work) {
                        Some(now) => {
                            if let Some(h) = held.get_mut(&lease.work)
                                && h.generation == now.generation
                            {
                                *h = now.clone();
                            }
                        }
                        None => {
                            if held
                                .get(&lease.work)
                                .is_some_and(|h| h.generation == lease.generation)
                            {
                                held.remove(&lease.work);
                                tracing::warn!(work = %lease.work.0, "lease lost (expired or taken by another vantage); the run goes on, its lease no longer ours");
                            }
                        }
                    }
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "heart-beating the leases failed"),
            Err(_) => tracing::warn!("heart-beating the leases timed out"),
        }
    }
}

/// A paid call's lease for `subject`, taken before the run pays (`None`: another vantage holds
/// it or paid it within the interval, or the database did not answer: no paid call this run).
pub(crate) async fn paid_lease(
    leases: &Leases,
    held: &Held,
    subject: &str,
    interval: Duration,
    lease_for: Duration,
) -> Option<Lease> {
    match leases.take_paid(subject, interval, lease_for).await {
        Ok(Some(lease)) => {
            lock(held).insert(lease.work.clone(), lease.clone());
            Some(lease)
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(subject, error = %e, "taking a paid call's lease failed: no paid call this run");
            None
        }
    }
}

/// Gives a paid call's lease back after its run (`paid`: the call was made).
pub(crate) async fn paid_done(leases: &Leases, held: &Held, lease: Lease, paid: bool) {
    let lease = lock(held).remove(&lease.work).unwrap_or(lease);
    if let Err(e) = leases.release_paid(&lease, paid).await {
        tracing::warn!(work = %lease.work.0, error = %e, "giving a paid call's lease back failed; it expires");
    }
}

/// Marks a free run's lease done (its run recorded) or gives it back (not recorded).
pub(crate) async fn run_done(leases: Leases, lease: Lease, recorded: bool) {
    let result = if recorded {
        leases.complete(std::slice::from_ref(&lease)).await.map(|done| {
            if done.is_empty() {
                tracing::warn!(work = %lease.work.0, "a run recorded after its lease was lost: another vantage may probe that replica too");
            }
        })
    } else {
        leases.release(std::slice::from_ref(&lease)).await
    };
    if let Err(e) = result {
        tracing::warn!(work = %lease.work.0, error = %e, "finishing a lease failed; it expires");
    }
}
