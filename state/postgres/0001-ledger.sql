-- The PostgreSQL store, migration 1: the vantages and their logs (src/store/postgres.rs).
-- Applied once, in a transaction, and recorded in `schema_migration`. Format: state/ledger.md
-- ("PostgreSQL"). Each vantage keeps its own log: its entries chained from seq 1, its Merkle tree,
-- its checkpoints signed by its own reporter key; no head is shared between vantages.

-- One row per vantage: its name and the public key its checkpoints are signed with. A key
-- belongs to one vantage (two vantages signing with one key could not be told apart).
CREATE TABLE vantage (
    id         integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text NOT NULL UNIQUE CHECK (name <> ''),
    public_key bytea NOT NULL UNIQUE CHECK (octet_length(public_key) = 32),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- A vantage's entries, as in SQLite's `entry`: `body` the RFC 8785 bytes of the envelope, `hash`
-- its leaf hash, `prev` the previous entry's hash in the same vantage's log. Only inserted.
CREATE TABLE entry (
    vantage integer NOT NULL REFERENCES vantage (id),
    seq     bigint NOT NULL CHECK (seq > 0),
    at_ms   bigint NOT NULL,
    kind    text NOT NULL,
    subject text,
    prev    bytea NOT NULL CHECK (octet_length(prev) = 32),
    hash    bytea NOT NULL CHECK (octet_length(hash) = 32),
    body    bytea NOT NULL,
    PRIMARY KEY (vantage, seq)
);
CREATE INDEX entry_subject ON entry (vantage, subject, seq);
CREATE INDEX entry_kind ON entry (vantage, kind, seq);

-- The interior nodes of each vantage's Merkle tree (level 1 and up; leaves are the entries'
-- hashes), written with the entries that complete them.
CREATE TABLE tree (
    vantage integer NOT NULL REFERENCES vantage (id),
    level   integer NOT NULL CHECK (level > 0),
    idx     bigint NOT NULL CHECK (idx >= 0),
    hash    bytea NOT NULL CHECK (octet_length(hash) = 32),
    PRIMARY KEY (vantage, level, idx)
);

-- Signed chain checkpoints of each vantage's log, as in SQLite's `checkpoint`.
CREATE TABLE checkpoint (
    vantage    integer NOT NULL REFERENCES vantage (id),
    seq        bigint NOT NULL,
    hash       bytea NOT NULL,
    at_ms      bigint NOT NULL,
    public_key bytea NOT NULL,
    signature  bytea NOT NULL,
    PRIMARY KEY (vantage, seq)
);

-- Tree checkpoints (C2SP signed notes) of each vantage's log.
CREATE TABLE tree_checkpoint (
    vantage integer NOT NULL REFERENCES vantage (id),
    size    bigint NOT NULL,
    at_ms   bigint NOT NULL,
    note    text NOT NULL,
    PRIMARY KEY (vantage, size)
);

-- Blobs by the SHA-256 of their bytes, shared by every vantage (the same body seen by two
-- vantages is kept once); codecs as in SQLite (0 raw, 1 zstd, 2 zstd with a dictionary).
CREATE TABLE blob (
    sha256 bytea PRIMARY KEY CHECK (octet_length(sha256) = 32),
    codec  smallint NOT NULL,
    bytes  bytea NOT NULL
);

-- The zstd dictionaries codec 2 names, by their zstd id.
CREATE TABLE dictionary (
    id    bigint PRIMARY KEY,
    bytes bytea NOT NULL
);
