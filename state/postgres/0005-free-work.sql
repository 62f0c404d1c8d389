-- The PostgreSQL store, migration 4: the daemon's free runs as leased work (src/store/lease.rs,
-- src/daemon/leased.rs). A free run is a lease row per (subject, cycle, replica): `cycle` is the
-- cycle's number (its start over the cadence), `replica` which of the `vantages_per_cycle` runs
-- of that cycle it is, `due_ms` when it is due (by the offering vantage's clock, the same for
-- every vantage: a pure function of the subject, cycle and replica). A row done is kept (with
-- its holder, so that no vantage takes two replicas of one cycle) until it is older than a few
-- cycles. A subject's paid call is one row too (`paid:URL`): `paid_at` is when its last paid
-- call was made, by the database's clock.
ALTER TABLE lease
    ADD COLUMN subject text,
    ADD COLUMN cycle   bigint,
    ADD COLUMN replica integer,
    ADD COLUMN due_ms  bigint,
    ADD COLUMN done_at timestamptz,
    ADD COLUMN paid_at timestamptz;
CREATE INDEX lease_free_due ON lease (due_ms) WHERE cycle IS NOT NULL AND done_at IS NULL;
CREATE INDEX lease_free_cycle ON lease (subject, cycle) WHERE cycle IS NOT NULL;
