-- The ledger store (`ledger.sqlite`): the append-only, hash-chained evidence log, its blobs and
-- signed checkpoints, and the daemon's working state (subjects, schedule, latest scores). The code
-- embeds this file and applies it on every open of a ledger of its format (x402-probe.ledger/2).
-- Format: state/ledger.md.

CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;

-- One row per ledger entry. `body` is the entry's RFC 8785 canonical JSON (envelope included);
-- `hash` its SHA-256; `prev` the previous entry's hash (32 zero bytes for seq 1). Rows are only
-- ever inserted.
CREATE TABLE IF NOT EXISTS entry (
    seq     INTEGER PRIMARY KEY,
    at_ms   INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    subject TEXT,
    prev    BLOB NOT NULL,
    hash    BLOB NOT NULL,
    body    BLOB NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS entry_subject ON entry (subject, seq);
CREATE INDEX IF NOT EXISTS entry_kind ON entry (kind, seq);
-- A subject's entries other than its runs and scores (its revisions, notes, refunds, ...): a few
-- per subject, so that reading them (a run reads the subject's notes) never walks the thousands of
-- runs and scores a subject has after a year.
CREATE INDEX IF NOT EXISTS entry_subject_rare ON entry (subject, seq) WHERE kind NOT IN ('run', 'score');

-- Byte strings kept apart from the entries that name them, addressed by the SHA-256 of their
-- bytes: each run's observation, and what repeats from entry to entry (bodies, header sets,
-- certificate chains, a run's catalogue listing, a score's value population), kept once; `codec`
-- 0 keeps the bytes as they are, 1 compressed with zstd (when that is smaller). Rows are appended
-- in the order they are kept (a rowid table: packed pages, no page of its own for a blob of a
-- few KB), found by their address through the unique index.
-- Codec 2 is zstd with a dictionary (`dictionary`, by the id its frame names): a run's
-- observation, alike in shape from run to run.
CREATE TABLE IF NOT EXISTS blob (
    id     INTEGER PRIMARY KEY,
    sha256 BLOB NOT NULL UNIQUE,
    codec  INTEGER NOT NULL,
    bytes  BLOB NOT NULL
) STRICT;

-- The zstd dictionaries blobs of codec 2 are compressed with, by their zstd dictionary id (the
-- build's own is written when the ledger is opened for writing): the ledger reads back without
-- the build that wrote it.
CREATE TABLE IF NOT EXISTS dictionary (
    id    INTEGER PRIMARY KEY,
    bytes BLOB NOT NULL
) STRICT;

-- Signed checkpoints: the reporter key's ed25519 signature over "x402-probe.checkpoint/1",
-- seq and hash of the entry it covers.
CREATE TABLE IF NOT EXISTS checkpoint (
    seq        INTEGER PRIMARY KEY,
    hash       BLOB NOT NULL,
    at_ms      INTEGER NOT NULL,
    public_key BLOB NOT NULL,
    signature  BLOB NOT NULL
) STRICT;

-- The daemon's subjects and their schedule. Working state, rebuilt from config and catalogues;
-- every change that matters is also a ledger entry.
CREATE TABLE IF NOT EXISTS subject (
    url         TEXT PRIMARY KEY,
    category    TEXT NOT NULL,
    source      TEXT NOT NULL,
    state       TEXT NOT NULL,
    added_ms    INTEGER NOT NULL,
    next_free_ms INTEGER NOT NULL,
    next_paid_ms INTEGER NOT NULL,
    failures    INTEGER NOT NULL,
    last_run_ms INTEGER,
    last_paid_ms INTEGER,
    revision    TEXT
) STRICT;

-- The latest score document of each subject (the document without its inputs, which the ledger
-- rebuilds), and one snapshot per subject and UTC day.
CREATE TABLE IF NOT EXISTS score (
    subject   TEXT NOT NULL,
    day       TEXT NOT NULL,
    as_of_ms  INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    document  BLOB NOT NULL,
    PRIMARY KEY (subject, day)
) STRICT;

-- What the index, the list and the scheduler read of each score row's document
-- (src/score/headline.rs, JSON; it names the document's SHA-256), derived from it and written
-- with it: the daemon's start reads it instead of parsing every document. Kept apart from the
-- document so that reading it never reads the document's pages (a column after a large value
-- is reached through all of that value's overflow pages). Missing only for a row whose
-- document does not read, or one copied by a migration: those are derived when the ledger is
-- next opened for writing, once (`meta` key `score_headlines`).
CREATE TABLE IF NOT EXISTS score_headline (
    subject  TEXT NOT NULL,
    day      TEXT NOT NULL,
    headline BLOB NOT NULL,
    PRIMARY KEY (subject, day)
) STRICT, WITHOUT ROWID;

-- Each subject's folded scoring state (src/daemon/subject_state.rs): its revisions, declared
-- price, category, provenance, paid-call facts, where its window of days starts and the digest
-- of each day's summary, as of ledger entry `through_seq`; `body` is its JSON, `sha256` the
-- digest of `body`. Derived working state, written in the transaction of the score that read it;
-- a row that does not match its digest or does not decode is rebuilt from the ledger, never
-- trusted.
CREATE TABLE IF NOT EXISTS subject_state (
    subject     TEXT PRIMARY KEY,
    through_seq INTEGER NOT NULL,
    sha256      BLOB NOT NULL,
    body        BLOB NOT NULL
) STRICT;

-- One day of a subject's folded state (`day`: days since 1970-01-01, UTC): the summary of each
-- check's outcomes that day (method /3's cells) and the entries they came from; `body` is its
-- JSON, `sha256` the digest of `body`, which the subject's state row also names. Written with
-- the state when the day changed; days that left every window are deleted.
CREATE TABLE IF NOT EXISTS subject_days (
    subject TEXT NOT NULL,
    day     INTEGER NOT NULL,
    sha256  BLOB NOT NULL,
    body    BLOB NOT NULL,
    PRIMARY KEY (subject, day)
) STRICT, WITHOUT ROWID;

-- Each run entry's id, so the refund watch reads its run by id. Derived from the run entries,
-- written with them.
CREATE TABLE IF NOT EXISTS run_id (
    id  TEXT PRIMARY KEY,
    seq INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- What each run saw a subject declare (price, payTo, revision fingerprint), for the checks that
-- compare runs (H2, H3, revisions). Derived from the run entries, written with them.
CREATE TABLE IF NOT EXISTS declared (
    subject TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    at_ms   INTEGER NOT NULL,
    body    BLOB NOT NULL,
    PRIMARY KEY (subject, seq)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS declared_time ON declared (subject, at_ms);

-- Webhook events waiting for delivery (and those delivered or given up on). A row is written in the
-- transaction of the ledger entry that causes it (a score whose verdict changed or whose gate
-- started binding, a revision whose payTo changed), so an event exists exactly when its cause does.
-- One row per event and destination; `event_id` is what receivers deduplicate by (delivery is at
-- least once). `next_attempt_ms` is on the wall clock; 0 means at once.
CREATE TABLE IF NOT EXISTS webhook_outbox (
    id              INTEGER PRIMARY KEY,
    event_id        TEXT NOT NULL,
    webhook         TEXT NOT NULL,
    kind            TEXT NOT NULL,
    created_ms      INTEGER NOT NULL,
    body            BLOB NOT NULL,
    state           TEXT NOT NULL,
    attempts        INTEGER NOT NULL,
    next_attempt_ms INTEGER NOT NULL,
    last_error      TEXT,
    done_ms         INTEGER
) STRICT;
CREATE INDEX IF NOT EXISTS webhook_outbox_due ON webhook_outbox (state, next_attempt_ms);

-- The Merkle tree over the entries (RFC 9162; leaf i is entry seq i + 1, its leaf hash the
-- entry's `hash`): the hash of every perfect subtree above the leaves (level 1 and up; the leaves
-- are the entries' own hashes). Derived from the entries and written in their transaction; a
-- ledger older than the tree gets it rebuilt from its entries when opened for writing. Inclusion
-- and consistency proofs are read from it.
CREATE TABLE IF NOT EXISTS tree (
    level INTEGER NOT NULL,
    idx   INTEGER NOT NULL,
    hash  BLOB NOT NULL,
    PRIMARY KEY (level, idx)
) STRICT, WITHOUT ROWID;

-- Tree checkpoints: C2SP signed notes (origin, tree size, root, time) by the reporter key, made
-- with each chain checkpoint (same size as its seq).
CREATE TABLE IF NOT EXISTS tree_checkpoint (
    size  INTEGER PRIMARY KEY,
    at_ms INTEGER NOT NULL,
    note  TEXT NOT NULL
) STRICT;
