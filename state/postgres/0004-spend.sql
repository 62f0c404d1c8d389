-- The PostgreSQL store, migration 4: the spend store every vantage shares (src/spend/pg.rs,
-- documented in state/spend.md, "Shared by vantages"). The same columns as the state directory's
-- SQLite spend store (state/spend.sql), plus the vantage that made each row and the one that
-- resolved it. Every time here (created_at, at, resolved_at) is the database's clock, unix
-- seconds; valid_after and valid_before are the signed authorization's window.
-- Rows are never deleted; a reservation's state moves once, open -> settled or open -> released.

CREATE TABLE spend_reservation (
    id            bigserial PRIMARY KEY,
    vantage       text    NOT NULL,               -- the vantage that reserved it
    subject       text    NOT NULL,               -- the endpoint paid: its canonical URL
    created_at    bigint  NOT NULL,               -- the database's clock, when reserved
    network       text    NOT NULL,
    chain_id      bigint  NOT NULL,
    asset         text    NOT NULL,
    payer         text    NOT NULL,
    pay_to        text    NOT NULL,
    amount        text    NOT NULL,               -- atomic units, decimal integer
    cost_usd      text    NOT NULL,               -- USD, decimal, rounded up
    valid_after   bigint  NOT NULL,
    valid_before  bigint  NOT NULL,
    nonce         text    NOT NULL UNIQUE,
    from_block    bigint,
    state         text    NOT NULL DEFAULT 'open'
                          CHECK (state IN ('open', 'settled', 'released')),
    tx            text,
    resolved_at   bigint,
    resolution    text,
    resolved_by   text,                           -- the vantage that settled or released it
    kind          text    NOT NULL DEFAULT 'evm' CHECK (kind IN ('evm', 'svm'))
);

-- One payment per subject in flight, whichever vantage makes it: enforced by the database even
-- if a vantage's code did not ask first (the reservation's transaction refuses it earlier, as
-- `subject_in_flight`).
CREATE UNIQUE INDEX spend_one_open_per_subject ON spend_reservation (subject) WHERE state = 'open';
CREATE INDEX spend_reservation_state ON spend_reservation (state, created_at);
CREATE INDEX spend_reservation_subject ON spend_reservation (subject, created_at);

CREATE TABLE spend_svm_payment (
    reservation_id          bigint PRIMARY KEY REFERENCES spend_reservation (id),
    fee_payer               text   NOT NULL,
    source                  text   NOT NULL,
    destination             text   NOT NULL,
    token_program           text   NOT NULL,
    decimals                bigint NOT NULL,
    memo                    text   NOT NULL,
    blockhash               text   NOT NULL,
    last_valid_block_height bigint NOT NULL,
    signature               text   UNIQUE,
    transaction_id          text
);

CREATE TABLE spend_refusal (
    id          bigserial PRIMARY KEY,
    vantage     text   NOT NULL,                  -- the vantage that declined
    subject     text   NOT NULL,
    at          bigint NOT NULL,                  -- the database's clock
    code        text   NOT NULL,
    reason      text   NOT NULL,
    requirement text
);
CREATE INDEX spend_refusal_subject ON spend_refusal (subject, at);
