-- The PostgreSQL store, migration 2: leased work (src/store/lease.rs). One row per piece of work
-- (a subject's free run, its paid call, the scoring role: `work` is its key). A vantage takes
-- rows whose lease is free or expired with FOR UPDATE SKIP LOCKED, and keeps them by heart-beating
-- before `expires_at`; every time is the database's (`now()`), never a vantage's clock.
-- `generation` grows with every taking: a holder's writes name the generation they hold, and one
-- that lost its lease is refused by it.
CREATE TABLE lease (
    work       text PRIMARY KEY,
    holder     text,
    generation bigint NOT NULL DEFAULT 0,
    taken_at   timestamptz,
    expires_at timestamptz NOT NULL DEFAULT '-infinity'
);
CREATE INDEX lease_expiry ON lease (expires_at);
