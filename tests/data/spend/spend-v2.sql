-- The spend store: every payment this tool reserved, and every payment it refused.
-- Documented in state/spend.md. Embedded by src/spend/store.rs and applied on open; every
-- statement is idempotent so opening an existing store is safe.

CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) STRICT;

-- A new store starts at /2; a /1 store keeps its id here and is migrated by the code at open
-- (its subjects rewritten as canonical URLs; see spend.md, "Versions").
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', 'x402-probe.spend/2');

-- One row per authorization we reserved (and then possibly signed). Written and committed
-- before the signature exists; never deleted. `state` moves open -> settled or open -> released,
-- never back.
CREATE TABLE IF NOT EXISTS reservation (
    id            INTEGER PRIMARY KEY,
    subject       TEXT    NOT NULL,               -- the endpoint paid: its canonical URL
    created_at    INTEGER NOT NULL,               -- unix seconds, when reserved
    network       TEXT    NOT NULL,               -- as quoted (CAIP-2 or a v1 name)
    chain_id      INTEGER NOT NULL,
    asset         TEXT    NOT NULL,               -- token address, checksummed
    payer         TEXT    NOT NULL,               -- our wallet, checksummed
    pay_to        TEXT    NOT NULL,               -- checksummed
    amount        TEXT    NOT NULL,               -- atomic units, decimal integer
    cost_usd      TEXT    NOT NULL,               -- USD, decimal, rounded up (see spend.md)
    valid_after   INTEGER NOT NULL,               -- the authorization's window, unix seconds
    valid_before  INTEGER NOT NULL,
    nonce         TEXT    NOT NULL UNIQUE,        -- 0x + 64 hex: the EIP-3009 nonce
    from_block    INTEGER,                        -- a block read before sending, when known
    state         TEXT    NOT NULL DEFAULT 'open'
                          CHECK (state IN ('open', 'settled', 'released')),
    tx            TEXT,                           -- the settling transaction, when located
    resolved_at   INTEGER,                        -- unix seconds, when settled or released
    resolution    TEXT                            -- why it was settled or released
) STRICT;

CREATE INDEX IF NOT EXISTS reservation_state ON reservation (state, created_at);
CREATE INDEX IF NOT EXISTS reservation_subject ON reservation (subject, created_at);

-- One row per payment we declined to make, with the rule that declined it.
CREATE TABLE IF NOT EXISTS refusal (
    id          INTEGER PRIMARY KEY,
    subject     TEXT    NOT NULL,                 -- the endpoint: its canonical URL
    at          INTEGER NOT NULL,                 -- unix seconds
    code        TEXT    NOT NULL,                 -- stable reason code, e.g. over_per_call_cap
    reason      TEXT    NOT NULL,                 -- one readable line
    requirement TEXT                              -- the accepts entry as JSON, when there was one
) STRICT;

CREATE INDEX IF NOT EXISTS refusal_subject ON refusal (subject, at);
