//! Leased work in the shared PostgreSQL database (schema: `state/postgres/0002-lease.sql`).
//!
//! A piece of work (a subject's free run, its paid call, the scoring role) is one `lease` row,
//! keyed by its [`WorkKey`]. A vantage takes free or expired rows with `FOR UPDATE SKIP LOCKED`
//! (two vantages taking at once never wait on, nor take, the same row), keeps them by heart-beating
//! before they expire, and gives them back when done. Every time that decides who holds what is the
//! database's `now()`: a vantage sends durations, never instants, so a vantage whose clock is wrong
//! can neither keep a lease past its expiry nor take one before it. Each taking raises the row's
//! `generation`: a vantage that lost its lease finds out from [`Leases::heartbeat`], and a write
//! made under a lease names its generation ([`Leases::holds`]) so that a late one is refused.

use std::time::Duration;

use super::StoreError;
use super::postgres::PgPool;

/// A piece of work, as keyed in the `lease` table (`free:URL`, `paid:URL`, `role:scorer`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkKey(pub String);

/// A lease held: the work, the generation it was taken at, and when it expires by the
/// database's clock (ms since the epoch, for showing; never compared with ours).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub work: WorkKey,
    pub generation: i64,
    pub expires_at_ms: i64,
}

/// A write made under a lease ([`super::Store::append_fenced`]): refused unless the lease is
/// still this vantage's when the write's transaction checks it. The check locks the lease's row
/// until the transaction ends, so no one takes it meanwhile; `idle_limit` bounds how long a
/// writer that stops between its statements (paused, swapped out) can keep it so: the database
/// ends a transaction left idle that long, and nothing it wrote lands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub lease: Lease,
    pub idle_limit: Duration,
}

/// In a transaction of `holder`'s: whether it holds `fence.lease` now by the database's clock
/// (`clock_timestamp()`, not the transaction's start). When it does, the lease's row stays locked
/// until the transaction ends (no one takes the lease meanwhile, though it expires), and the
/// server ends the transaction, with everything it wrote, once it idles `fence.idle_limit`.
pub async fn hold_fence<C: tokio_postgres::GenericClient + Sync>(
    c: &C,
    fence: &Fence,
    holder: &str,
) -> Result<bool, tokio_postgres::Error> {
    // `SET LOCAL` takes no parameters: the limit is a number formatted here.
    c.batch_execute(&format!(
        "SET LOCAL idle_in_transaction_session_timeout = {}",
        interval_ms(fence.idle_limit)
    ))
    .await?;
    let held = c
        .query_opt(
            "SELECT 1 FROM lease WHERE work = $1 AND generation = $2 AND holder = $3
               AND expires_at > clock_timestamp() FOR SHARE",
            &[&fence.lease.work.0, &fence.lease.generation, &holder],
        )
        .await?;
    Ok(held.is_some())
}

/// A row of the `lease` table as it stands (who holds it until when), for status and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    pub work: WorkKey,
    pub holder: Option<String>,
    pub generation: i64,
    pub expires_at_ms: i64,
    /// Whether it is held now, by the database's clock.
    pub live: bool,
}

/// One vantage's handle on the leases: its name is the holder it writes.
#[derive(Debug, Clone)]
pub struct Leases {
    pool: PgPool,
    holder: String,
}

/// A lease's length as PostgreSQL reads it (whole milliseconds; at least one).
fn interval_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

const LEASE_COLUMNS: &str =
    "work, generation, (extract(epoch FROM expires_at) * 1000)::bigint AS expires_at_ms";

fn lease_of(row: &tokio_postgres::Row) -> Lease {
    Lease {
        work: WorkKey(row.get(0)),
        generation: row.get(1),
        expires_at_ms: row.get(2),
    }
}

impl Leases {
    /// The leases of `holder` (a vantage's name) in the database `pool` reaches.
    pub fn new(pool: PgPool, holder: &str) -> Leases {
        Leases {
            pool,
            holder: holder.to_string(),
        }
    }

    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Makes sure a row exists for each piece of work (free, held by no one); existing rows are
    /// left as they are.
    pub async fn offer(&self, work: &[WorkKey]) -> Result<(), StoreError> {
        let keys: Vec<&str> = work.iter().map(|w| w.0.as_str()).collect();
        let client = self.pool.client("offering work").await?;
        client
            .execute(
                "INSERT INTO lease (work) SELECT * FROM unnest($1::text[])
                 ON CONFLICT (work) DO NOTHING",
                &[&keys],
            )
            .await
            .map_err(self.pool.pg("offering work"))?;
        Ok(())
    }

    /// Takes at most `limit` pieces of plain work (not a free run's cycle, a paid call's
    /// row, nor the scoring role: those have their own takings) that no one holds now (never held, given back, or
    /// expired by the database's clock), each for `lease_for` from the database's now, skipping
    /// rows another vantage is taking at this moment. Oldest expiry first, so work that lost its
    /// holder longest ago moves first.
    pub async fn take(&self, limit: usize, lease_for: Duration) -> Result<Vec<Lease>, StoreError> {
        let client = self.pool.client("taking work").await?;
        let rows = client
            .query(
                &format!(
                    "UPDATE lease SET holder = $1, generation = generation + 1, taken_at = now(),
                         expires_at = now() + $2::bigint * interval '1 millisecond'
                     WHERE work IN (
                         SELECT work FROM lease WHERE expires_at <= now()
                             AND cycle IS NULL AND done_at IS NULL AND work NOT LIKE 'paid:%'
                             AND work NOT LIKE 'role:%'
                         ORDER BY expires_at, work LIMIT $3 FOR UPDATE SKIP LOCKED)
                     RETURNING {LEASE_COLUMNS}"
                ),
                &[
                    &self.holder,
                    &interval_ms(lease_for),
                    &(limit.min(i64::MAX as usize) as i64),
                ],
            )
            .await
            .map_err(self.pool.pg("taking work"))?;
        let mut taken: Vec<Lease> = rows.iter().map(lease_of).collect();
        taken.sort_by(|a, b| a.work.cmp(&b.work));
        Ok(taken)
    }

    /// Extends every lease this vantage still holds to `lease_for` from the database's now, and
    /// returns them. A lease that expired meanwhile is not extended, even if no one took it yet:
    /// the caller has lost it (it is in `held` but not in the answer) and must stop that work.
    pub async fn heartbeat(
        &self,
        held: &[Lease],
        lease_for: Duration,
    ) -> Result<Vec<Lease>, StoreError> {
        let keys: Vec<&str> = held.iter().map(|l| l.work.0.as_str()).collect();
        let generations: Vec<i64> = held.iter().map(|l| l.generation).collect();
        let client = self.pool.client("heart-beating").await?;
        let rows = client
            .query(
                "UPDATE lease l SET expires_at = now() + $2::bigint * interval '1 millisecond'
                 FROM unnest($3::text[], $4::bigint[]) AS h (work, generation)
                 WHERE l.work = h.work AND l.generation = h.generation
                   AND l.holder = $1 AND l.expires_at > now()
                 RETURNING l.work, l.generation,
                           (extract(epoch FROM l.expires_at) * 1000)::bigint",
                &[&self.holder, &interval_ms(lease_for), &keys, &generations],
            )
            .await
            .map_err(self.pool.pg("heart-beating"))?;
        let mut kept: Vec<Lease> = rows.iter().map(lease_of).collect();
        kept.sort_by(|a, b| a.work.cmp(&b.work));
        Ok(kept)
    }

    /// Gives leases back before they expire (the work is done): free for anyone at once.
    pub async fn release(&self, held: &[Lease]) -> Result<(), StoreError> {
        let keys: Vec<&str> = held.iter().map(|l| l.work.0.as_str()).collect();
        let generations: Vec<i64> = held.iter().map(|l| l.generation).collect();
        let client = self.pool.client("releasing work").await?;
        client
            .execute(
                "UPDATE lease l SET expires_at = '-infinity', holder = NULL
                 FROM unnest($2::text[], $3::bigint[]) AS h (work, generation)
                 WHERE l.work = h.work AND l.generation = h.generation AND l.holder = $1",
                &[&self.holder, &keys, &generations],
            )
            .await
            .map_err(self.pool.pg("releasing work"))?;
        Ok(())
    }

    /// Whether this vantage still holds `lease` now, by the database's clock (what a write made
    /// under the lease checks in its own transaction).
    pub async fn holds(&self, lease: &Lease) -> Result<bool, StoreError> {
        let client = self.pool.client("checking a lease").await?;
        let row = client
            .query_opt(
                "SELECT 1 FROM lease WHERE work = $1 AND generation = $2 AND holder = $3
                   AND expires_at > now()",
                &[&lease.work.0, &lease.generation, &self.holder],
            )
            .await
            .map_err(self.pool.pg("checking a lease"))?;
        Ok(row.is_some())
    }

    /// Every lease row as it stands, by work.
    pub async fn rows(&self) -> Result<Vec<LeaseRow>, StoreError> {
        let client = self.pool.client("reading leases").await?;
        let rows = client
            .query(
                "SELECT work, holder, generation,
                        CASE WHEN expires_at = '-infinity' THEN 0
                             ELSE (extract(epoch FROM expires_at) * 1000)::bigint END,
                        expires_at > now()
                 FROM lease ORDER BY work",
                &[],
            )
            .await
            .map_err(self.pool.pg("reading leases"))?;
        Ok(rows
            .iter()
            .map(|r| LeaseRow {
                work: WorkKey(r.get(0)),
                holder: r.get(1),
                generation: r.get(2),
                expires_at_ms: r.get(3),
                live: r.get(4),
            })
            .collect())
    }
}

/// A subject's free run in one cycle, one of the `vantages_per_cycle` replicas of that cycle:
/// the daemon's leased work on PostgreSQL (`daemon/leased.rs` decides the cycles and due times).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FreeWork {
    pub subject: String,
    pub cycle: i64,
    pub replica: u32,
    /// When it is due, ms since the epoch by the vantages' clock.
    pub due_ms: i64,
}

impl FreeWork {
    /// Its key in the `lease` table.
    pub fn key(&self) -> WorkKey {
        WorkKey(format!(
            "free:{}@{}/{}",
            self.subject, self.cycle, self.replica
        ))
    }
}

/// The scoring role, as keyed in the `lease` table.
pub fn role_key() -> WorkKey {
    WorkKey("role:scorer".into())
}

impl Leases {
    /// Takes the scoring role ([`role_key`]) when no vantage holds it now by the database's
    /// clock (or this one did: taken again, a new generation), for `lease_for`. `None`: another
    /// vantage holds it.
    pub async fn take_role(&self, lease_for: Duration) -> Result<Option<Lease>, StoreError> {
        let key = role_key();
        let client = self.pool.client("taking the scoring role").await?;
        client
            .execute(
                "INSERT INTO lease (work) VALUES ($1) ON CONFLICT (work) DO NOTHING",
                &[&key.0],
            )
            .await
            .map_err(self.pool.pg("taking the scoring role"))?;
        let row = client
            .query_opt(
                &format!(
                    "UPDATE lease SET holder = $2, generation = generation + 1, taken_at = now(),
                         expires_at = now() + $3::bigint * interval '1 millisecond'
                     WHERE work = $1 AND (expires_at <= now() OR holder = $2)
                     RETURNING {LEASE_COLUMNS}"
                ),
                &[&key.0, &self.holder, &interval_ms(lease_for)],
            )
            .await
            .map_err(self.pool.pg("taking the scoring role"))?;
        Ok(row.as_ref().map(lease_of))
    }
}

/// A subject's paid call, as keyed in the `lease` table.
pub fn paid_key(subject: &str) -> WorkKey {
    WorkKey(format!("paid:{subject}"))
}

impl Leases {
    /// Makes sure a row exists for each free run (free, held by no one); rows already there
    /// (offered by another vantage, taken or done) are left as they are.
    pub async fn offer_free(&self, work: &[FreeWork]) -> Result<(), StoreError> {
        let client = self.pool.client("offering free runs").await?;
        for batch in work.chunks(5_000) {
            let keys: Vec<String> = batch.iter().map(|w| w.key().0).collect();
            let subjects: Vec<&str> = batch.iter().map(|w| w.subject.as_str()).collect();
            let cycles: Vec<i64> = batch.iter().map(|w| w.cycle).collect();
            let replicas: Vec<i32> = batch
                .iter()
                .map(|w| i32::try_from(w.replica).unwrap_or(i32::MAX))
                .collect();
            let due: Vec<i64> = batch.iter().map(|w| w.due_ms).collect();
            client
                .execute(
                    "INSERT INTO lease (work, subject, cycle, replica, due_ms)
                     SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::int[],
                                          $5::bigint[])
                     ON CONFLICT (work) DO NOTHING",
                    &[&keys, &subjects, &cycles, &replicas, &due],
                )
                .await
                .map_err(self.pool.pg("offering free runs"))?;
        }
        Ok(())
    }

    /// Takes at most `limit` free runs due by `now_ms` (and not before `from_ms`: older ones are
    /// stale, the next cycle covers them), not done, that no one holds now by the database's
    /// clock: never two replicas of one subject's cycle in one taking, nor a replica of a cycle
    /// of which this vantage holds or has done another. Earliest due first.
    pub async fn take_free(
        &self,
        limit: usize,
        lease_for: Duration,
        now_ms: i64,
        from_ms: i64,
    ) -> Result<Vec<(Lease, FreeWork)>, StoreError> {
        let client = self.pool.client("taking free runs").await?;
        let rows = client
            .query(
                "WITH candidate AS (
                     SELECT l.work, l.subject, l.cycle FROM lease l
                     WHERE l.cycle IS NOT NULL AND l.done_at IS NULL AND l.expires_at <= now()
                       AND l.due_ms <= $3 AND l.due_ms >= $4
                       AND NOT EXISTS (
                           SELECT 1 FROM lease o
                           WHERE o.subject = l.subject AND o.cycle = l.cycle
                             AND o.work <> l.work AND o.holder = $1
                             AND (o.done_at IS NOT NULL OR o.expires_at > now()))
                     ORDER BY l.due_ms, l.work LIMIT $5 FOR UPDATE OF l SKIP LOCKED),
                 one AS (SELECT DISTINCT ON (subject, cycle) work FROM candidate
                         ORDER BY subject, cycle, work)
                 UPDATE lease SET holder = $1, generation = generation + 1, taken_at = now(),
                     expires_at = now() + $2::bigint * interval '1 millisecond'
                 WHERE work IN (SELECT work FROM one)
                 RETURNING work, generation, (extract(epoch FROM expires_at) * 1000)::bigint,
                           subject, cycle, replica, due_ms",
                &[
                    &self.holder,
                    &interval_ms(lease_for),
                    &now_ms,
                    &from_ms,
                    &(limit.min(i64::MAX as usize) as i64),
                ],
            )
            .await
            .map_err(self.pool.pg("taking free runs"))?;
        let mut taken: Vec<(Lease, FreeWork)> = rows
            .iter()
            .map(|r| {
                (
                    lease_of(r),
                    FreeWork {
                        subject: r.get(3),
                        cycle: r.get(4),
                        replica: u32::try_from(r.get::<_, i32>(5)).unwrap_or(0),
                        due_ms: r.get(6),
                    },
                )
            })
            .collect();
        taken.sort_by(|a, b| (a.1.due_ms, &a.0.work).cmp(&(b.1.due_ms, &b.0.work)));
        Ok(taken)
    }

    /// Marks free runs done (recorded): never taken again, kept under this vantage's name so that
    /// it takes no other replica of their cycles. Only leases still held (generation and
    /// holder); the keys marked are returned.
    pub async fn complete(&self, held: &[Lease]) -> Result<Vec<WorkKey>, StoreError> {
        let keys: Vec<&str> = held.iter().map(|l| l.work.0.as_str()).collect();
        let generations: Vec<i64> = held.iter().map(|l| l.generation).collect();
        let client = self.pool.client("completing work").await?;
        let rows = client
            .query(
                "UPDATE lease l SET done_at = now(), expires_at = now()
                 FROM unnest($2::text[], $3::bigint[]) AS h (work, generation)
                 WHERE l.work = h.work AND l.generation = h.generation AND l.holder = $1
                 RETURNING l.work",
                &[&self.holder, &keys, &generations],
            )
            .await
            .map_err(self.pool.pg("completing work"))?;
        Ok(rows.iter().map(|r| WorkKey(r.get(0))).collect())
    }

    /// Deletes the free runs due before `before_ms`, done or not (older than any cycle taken).
    pub async fn forget_free_before(&self, before_ms: i64) -> Result<u64, StoreError> {
        let client = self.pool.client("forgetting old free runs").await?;
        client
            .execute(
                "DELETE FROM lease WHERE cycle IS NOT NULL AND due_ms < $1",
                &[&before_ms],
            )
            .await
            .map_err(self.pool.pg("forgetting old free runs"))
    }

    /// Takes `subject`'s paid-call lease when no vantage holds it and none made its paid call
    /// within `interval`, both by the database's clock: at most one vantage pays a subject per
    /// interval. `None`: another vantage holds it or paid it lately.
    pub async fn take_paid(
        &self,
        subject: &str,
        interval: Duration,
        lease_for: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let key = paid_key(subject);
        let client = self.pool.client("taking a paid call").await?;
        client
            .execute(
                "INSERT INTO lease (work, subject) VALUES ($1, $2) ON CONFLICT (work) DO NOTHING",
                &[&key.0, &subject],
            )
            .await
            .map_err(self.pool.pg("taking a paid call"))?;
        let row = client
            .query_opt(
                "UPDATE lease SET holder = $2, generation = generation + 1, taken_at = now(),
                     expires_at = now() + $3::bigint * interval '1 millisecond'
                 WHERE work = $1 AND expires_at <= now()
                   AND (paid_at IS NULL OR paid_at <= now() - $4::bigint * interval '1 millisecond')
                 RETURNING work, generation, (extract(epoch FROM expires_at) * 1000)::bigint",
                &[
                    &key.0,
                    &self.holder,
                    &interval_ms(lease_for),
                    &interval_ms(interval),
                ],
            )
            .await
            .map_err(self.pool.pg("taking a paid call"))?;
        Ok(row.as_ref().map(lease_of))
    }

    /// Gives a paid call's lease back; `paid`: its call was made (now, by the database's clock),
    /// so no vantage takes it again within the interval.
    pub async fn release_paid(&self, lease: &Lease, paid: bool) -> Result<(), StoreError> {
        let client = self.pool.client("releasing a paid call").await?;
        client
            .execute(
                "UPDATE lease SET expires_at = '-infinity', holder = NULL,
                     paid_at = CASE WHEN $4 THEN now() ELSE paid_at END
                 WHERE work = $1 AND generation = $2 AND holder = $3",
                &[&lease.work.0, &lease.generation, &self.holder, &paid],
            )
            .await
            .map_err(self.pool.pg("releasing a paid call"))?;
        Ok(())
    }
}
