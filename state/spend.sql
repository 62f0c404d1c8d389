-- The spend store: every payment this tool reserved, and every payment it refused.
-- Documented in state/spend.md. Embedded by src/spend/store.rs and applied on open; every
-- statement is idempotent so opening an existing store is safe.

CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) STRICT;

-- A new store starts at /3; a /1 or /2 store keeps its id here and is migrated by the code at
-- open (see spend.md, "Versions").
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', 'x402-probe.spend/3');

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
    resolution    TEXT,                           -- why it was settled or released
    kind          TEXT    NOT NULL DEFAULT 'evm'      -- the network's kind (added in /3)
                          CHECK (kind IN ('evm', 'svm'))
) STRICT;

-- What a Solana reservation (kind 'svm') transfers, beside its reservation row: written in the
-- reservation's transaction, before any signature exists. Its reservation row holds the mint as
-- `asset`, our wallet as `payer`, the quoted payee as `pay_to` (base58), `chain_id` 0, and the
-- wall-clock bound of the blockhash's life as `valid_before`.
CREATE TABLE IF NOT EXISTS svm_payment (
    reservation_id          INTEGER PRIMARY KEY REFERENCES reservation (id),
    fee_payer               TEXT    NOT NULL,     -- the quote's extra.feePayer, base58
    source                  TEXT    NOT NULL,     -- our token account (ATA), base58
    destination             TEXT    NOT NULL,     -- payTo's token account (ATA), base58
    token_program           TEXT    NOT NULL,
    decimals                INTEGER NOT NULL,
    memo                    TEXT    NOT NULL,     -- hex of the memo's bytes
    blockhash               TEXT    NOT NULL,     -- base58, from our RPC
    last_valid_block_height INTEGER NOT NULL,     -- past it the transaction can never land
    signature               TEXT    UNIQUE,       -- ours, base58: written before sending
    transaction_id          TEXT                  -- the landed transaction's id (its first signature)
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
