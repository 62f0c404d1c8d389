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

    /// Takes at most `limit` pieces of work that no one holds now (never held, given back, or
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
