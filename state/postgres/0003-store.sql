-- The PostgreSQL store, migration 3: the daemon's working state beside the logs
-- (src/store/postgres/store.rs), so that the whole `Store` a daemon needs lives in one database.
-- Shared by every vantage: the subjects and their schedule (keyed by URL) and the webhook outbox
-- (one row per event and destination, whichever vantage's entry caused it). Kept per vantage,
-- because each indexes that vantage's own log (a `seq` names an entry of its log): the
-- declarations, run ids, score rows and their headlines, and the folded scoring states.

CREATE TABLE subject (
    url          text PRIMARY KEY,
    category     text NOT NULL,
    source       text NOT NULL,
    state        text NOT NULL,
    added_ms     bigint NOT NULL,
    next_free_ms bigint NOT NULL,
    next_paid_ms bigint NOT NULL,
    failures     bigint NOT NULL,
    last_run_ms  bigint,
    last_paid_ms bigint,
    revision     text
);

-- As SQLite's `score`: one row per subject and UTC day, the document as published (PostgreSQL
-- compresses large values itself).
CREATE TABLE score (
    vantage  integer NOT NULL REFERENCES vantage (id),
    subject  text NOT NULL,
    day      text NOT NULL,
    as_of_ms bigint NOT NULL,
    seq      bigint NOT NULL,
    document bytea NOT NULL,
    PRIMARY KEY (vantage, subject, day)
);

-- What the index, the list and the scheduler read of each score row (src/score/headline.rs).
CREATE TABLE score_headline (
    vantage  integer NOT NULL REFERENCES vantage (id),
    subject  text NOT NULL,
    day      text NOT NULL,
    headline bytea NOT NULL,
    PRIMARY KEY (vantage, subject, day)
);

CREATE TABLE subject_state (
    vantage     integer NOT NULL REFERENCES vantage (id),
    subject     text NOT NULL,
    through_seq bigint NOT NULL,
    sha256      bytea NOT NULL,
    body        bytea NOT NULL,
    PRIMARY KEY (vantage, subject)
);

CREATE TABLE subject_days (
    vantage integer NOT NULL REFERENCES vantage (id),
    subject text NOT NULL,
    day     bigint NOT NULL,
    sha256  bytea NOT NULL,
    body    bytea NOT NULL,
    PRIMARY KEY (vantage, subject, day)
);

CREATE TABLE run_id (
    vantage integer NOT NULL REFERENCES vantage (id),
    id      text NOT NULL,
    seq     bigint NOT NULL,
    PRIMARY KEY (vantage, id)
);

CREATE TABLE declared (
    vantage integer NOT NULL REFERENCES vantage (id),
    subject text NOT NULL,
    seq     bigint NOT NULL,
    at_ms   bigint NOT NULL,
    body    bytea NOT NULL,
    PRIMARY KEY (vantage, subject, seq)
);
CREATE INDEX declared_time ON declared (vantage, subject, at_ms);

-- `vantage`: whose entry caused the event (delivery is anyone's: receivers deduplicate by
-- `event_id`).
CREATE TABLE webhook_outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    vantage         integer NOT NULL REFERENCES vantage (id),
    event_id        text NOT NULL,
    webhook         text NOT NULL,
    kind            text NOT NULL,
    created_ms      bigint NOT NULL,
    body            bytea NOT NULL,
    state           text NOT NULL,
    attempts        bigint NOT NULL,
    next_attempt_ms bigint NOT NULL,
    last_error      text,
    done_ms         bigint
);
CREATE INDEX webhook_outbox_due ON webhook_outbox (state, next_attempt_ms);
