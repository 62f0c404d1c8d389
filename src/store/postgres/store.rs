//! The whole [`Store`] on PostgreSQL: one vantage's view of the shared database (schema:
//! `state/postgres/0003-store.sql`). Its own log (entries, tree, checkpoints: `postgres.rs`), its
//! own index rows (declarations, run ids, score rows and headlines, folded states, each naming
//! an entry of its log), and what every vantage shares (blobs, subjects, the webhook outbox).
//! The same semantics as SQLite's (`sqlite.rs`); the proofs are made by `ledger/` from the nodes
//! read here.

use std::collections::BTreeMap;

use tokio_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use super::{PgLedger, head_in, insert_blobs};
use crate::evidence::declared::Declared;
use crate::ledger::chain::{Broken, Checkpoint, StoredEntry, Trusted, VerifySummary};
use crate::ledger::key::ReporterKey;
use crate::ledger::merkle::{self, FetchedNodes, Hash};
use crate::ledger::proof::{self, InclusionBundle};
use crate::ledger::record::RecordKind;
use crate::ledger::stored::{BlobKind, NewBlob};
use crate::ledger::tlog::{self, TreeNote};
use crate::score::headline::ScoreHeadline;
use crate::store::event_kind::EventKind;
use crate::store::lease::Fence;
use crate::store::sqlite::KeptBlob;
use crate::store::{DayRow, StateRow};
use crate::store::{
    Index, LedgerLog, Named, NewEntry, NewOutboxEvent, OutboxRow, OutboxState, OutboxUpdate,
    ReadEntry, RowWithHeadline, ScoreRow, StartRow, Store, StoreError, SubjectRow, SubjectShown,
    SubjectState,
};

/// Statement parameters, as tokio-postgres takes them.
type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// Subject rows written per statement.
const SUBJECT_BATCH: usize = 1000;

/// Score rows checked per page of a verification.
const SCORE_ROWS_PAGE: i64 = 512;

/// An entry's stored columns (seq, at_ms, kind, subject, prev, hash, body) read back.
pub(super) fn stored_entry(r: &tokio_postgres::Row) -> Result<StoredEntry, StoreError> {
    let seq: i64 = r.get(0);
    let broken = |why: String| {
        StoreError::from(Broken {
            seq: seq as u64,
            why,
        })
    };
    let digest = |i: usize, what: &str| -> Result<[u8; 32], StoreError> {
        r.get::<_, &[u8]>(i)
            .try_into()
            .map_err(|_| broken(format!("its {what} is not 32 bytes")))
    };
    let kind: &str = r.get(2);
    Ok(StoredEntry {
        seq: seq as u64,
        at_ms: r.get(1),
        kind: RecordKind::parse(kind)
            .ok_or_else(|| broken(format!("its kind column {kind:?} names no record kind")))?,
        subject: r.get(3),
        prev: digest(4, "prev")?,
        hash: digest(5, "hash")?,
        body: r.get(6),
    })
}

/// The index rows of one entry of `vantage`'s log about `subject`, in the append's transaction
/// (as SQLite's append writes them).
pub(super) async fn insert_index<C: GenericClient + Sync>(
    c: &C,
    vantage: i32,
    subject: &str,
    seq: u64,
    index: Index,
) -> Result<(), tokio_postgres::Error> {
    let Index {
        declared,
        score,
        headline,
        outbox,
        state,
        run_id,
    } = index;
    let seq = seq as i64;
    if let Some(row) = state {
        put_state_in(c, vantage, &row).await?;
    }
    if let Some(id) = run_id {
        c.execute(
            "INSERT INTO run_id (vantage, id, seq) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            &[&vantage, &id, &seq],
        )
        .await?;
    }
    for event in &outbox {
        insert_outbox_in(c, vantage, event).await?;
    }
    if let Some((at, body)) = declared {
        c.execute(
            "INSERT INTO declared (vantage, subject, seq, at_ms, body) VALUES ($1, $2, $3, $4, $5)",
            &[&vantage, &subject, &seq, &at, &body],
        )
        .await?;
    }
    if let Some(row) = score {
        let row = ScoreRow {
            seq: seq as u64,
            ..row
        };
        put_score_in(c, vantage, &row, headline).await?;
    }
    Ok(())
}

/// The index rows of a batch of entries of `vantage`'s log (subject, seq, rows), in the
/// append's transaction: the batch's run ids and declarations in one statement each (a batch of
/// runs writes a row of each per run: one round trip each, not one per row), the other rows entry
/// by entry ([`insert_index`]).
pub(super) async fn insert_indexes<C: GenericClient + Sync>(
    c: &C,
    vantage: i32,
    indexed: Vec<(String, u64, Index)>,
) -> Result<(), tokio_postgres::Error> {
    let (mut ids, mut id_seqs) = (Vec::new(), Vec::new());
    let (mut subjects, mut seqs, mut at, mut bodies) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (subject, seq, mut index) in indexed {
        if let Some(id) = index.run_id.take() {
            ids.push(id);
            id_seqs.push(seq as i64);
        }
        if let Some((at_ms, body)) = index.declared.take() {
            subjects.push(subject.clone());
            seqs.push(seq as i64);
            at.push(at_ms);
            bodies.push(body);
        }
        insert_index(c, vantage, &subject, seq, index).await?;
    }
    if !ids.is_empty() {
        c.execute(
            "INSERT INTO run_id (vantage, id, seq)
             SELECT $1::integer, * FROM unnest($2::text[], $3::bigint[])
             ON CONFLICT DO NOTHING",
            &[&vantage, &ids, &id_seqs],
        )
        .await?;
    }
    if !subjects.is_empty() {
        c.execute(
            "INSERT INTO declared (vantage, subject, seq, at_ms, body)
             SELECT $1::integer, * FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bytea[])",
            &[&vantage, &subjects, &seqs, &at, &bodies],
        )
        .await?;
    }
    Ok(())
}

async fn put_state_in<C: GenericClient + Sync>(
    c: &C,
    vantage: i32,
    row: &StateRow,
) -> Result<(), tokio_postgres::Error> {
    c.execute(
        "INSERT INTO subject_state (vantage, subject, through_seq, sha256, body)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (vantage, subject) DO UPDATE SET through_seq = excluded.through_seq,
             sha256 = excluded.sha256, body = excluded.body",
        &[
            &vantage,
            &row.subject,
            &(row.through_seq.min(i64::MAX as u64) as i64),
            &row.sha256.as_slice(),
            &row.body,
        ],
    )
    .await?;
    for day in &row.days {
        c.execute(
            "INSERT INTO subject_days (vantage, subject, day, sha256, body)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (vantage, subject, day) DO UPDATE SET sha256 = excluded.sha256,
                 body = excluded.body",
            &[
                &vantage,
                &row.subject,
                &day.day,
                &day.sha256.as_slice(),
                &day.body,
            ],
        )
        .await?;
    }
    c.execute(
        "DELETE FROM subject_days WHERE vantage = $1 AND subject = $2 AND day < $3",
        &[&vantage, &row.subject, &row.days_from],
    )
    .await?;
    Ok(())
}

async fn insert_outbox_in<C: GenericClient + Sync>(
    c: &C,
    vantage: i32,
    e: &NewOutboxEvent,
) -> Result<(), tokio_postgres::Error> {
    c.execute(
        "INSERT INTO webhook_outbox (vantage, event_id, webhook, kind, created_ms, body, state,
             attempts, next_attempt_ms)
         VALUES ($1, $2, $3, $4, $5, $6, 'pending', 0, 0)",
        &[
            &vantage,
            &e.event_id,
            &e.webhook,
            &e.kind.as_str(),
            &e.created_ms,
            &e.body,
        ],
    )
    .await?;
    Ok(())
}

/// Keeps `row` with its headline (`headline`, or derived from the document when not given;
/// none for a document that does not read back), as SQLite's `put_score_in`.
async fn put_score_in<C: GenericClient + Sync>(
    c: &C,
    vantage: i32,
    row: &ScoreRow,
    headline: Option<Vec<u8>>,
) -> Result<(), tokio_postgres::Error> {
    let headline = headline.or_else(|| {
        ScoreHeadline::of_stored(&row.document)
            .ok()
            .map(|h| h.to_bytes())
    });
    c.execute(
        "INSERT INTO score (vantage, subject, day, as_of_ms, seq, document)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (vantage, subject, day) DO UPDATE SET as_of_ms = excluded.as_of_ms,
             seq = excluded.seq, document = excluded.document",
        &[
            &vantage,
            &row.subject,
            &row.day,
            &row.as_of_ms,
            &(row.seq as i64),
            &row.document,
        ],
    )
    .await?;
    match headline {
        Some(headline) => {
            c.execute(
                "INSERT INTO score_headline (vantage, subject, day, headline)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (vantage, subject, day) DO UPDATE SET headline = excluded.headline",
                &[&vantage, &row.subject, &row.day, &headline],
            )
            .await?
        }
        // The day's earlier headline is not this document's.
        None => {
            c.execute(
                "DELETE FROM score_headline WHERE vantage = $1 AND subject = $2 AND day = $3",
                &[&vantage, &row.subject, &row.day],
            )
            .await?
        }
    };
    Ok(())
}

/// Writes subject rows, a batch per statement.
pub(super) async fn put_subjects_in<C: GenericClient + Sync>(
    c: &C,
    rows: &[SubjectRow],
) -> Result<(), tokio_postgres::Error> {
    for batch in rows.chunks(SUBJECT_BATCH) {
        let urls: Vec<&str> = batch.iter().map(|r| r.url.as_str()).collect();
        let categories: Vec<&str> = batch.iter().map(|r| r.category.as_str()).collect();
        let sources: Vec<&str> = batch.iter().map(|r| r.source.as_str()).collect();
        let states: Vec<&str> = batch.iter().map(|r| r.state.as_str()).collect();
        let added: Vec<i64> = batch.iter().map(|r| r.added_ms).collect();
        let free: Vec<i64> = batch.iter().map(|r| r.next_free_ms).collect();
        let paid: Vec<i64> = batch.iter().map(|r| r.next_paid_ms).collect();
        let failures: Vec<i64> = batch.iter().map(|r| i64::from(r.failures)).collect();
        let last_run: Vec<Option<i64>> = batch.iter().map(|r| r.last_run_ms).collect();
        let last_paid: Vec<Option<i64>> = batch.iter().map(|r| r.last_paid_ms).collect();
        let revisions: Vec<Option<&str>> = batch.iter().map(|r| r.revision.as_deref()).collect();
        c.execute(
            "INSERT INTO subject (url, category, source, state, added_ms, next_free_ms,
                 next_paid_ms, failures, last_run_ms, last_paid_ms, revision)
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[],
                 $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[],
                 $11::text[])
             ON CONFLICT (url) DO UPDATE SET category = excluded.category,
                 source = excluded.source, state = excluded.state, added_ms = excluded.added_ms,
                 next_free_ms = excluded.next_free_ms, next_paid_ms = excluded.next_paid_ms,
                 failures = excluded.failures, last_run_ms = excluded.last_run_ms,
                 last_paid_ms = excluded.last_paid_ms, revision = excluded.revision",
            &[
                &urls,
                &categories,
                &sources,
                &states,
                &added,
                &free,
                &paid,
                &failures,
                &last_run,
                &last_paid,
                &revisions,
            ],
        )
        .await?;
    }
    Ok(())
}

/// What a copy of a SQLite store writes besides the log (`store copy`): the rows of its
/// working state, in the copy's transaction.
pub(super) async fn copy_working_state<C: GenericClient + Sync>(
    c: &C,
    vantage: i32,
    state: &super::super::sqlite::WorkingState,
) -> Result<(), tokio_postgres::Error> {
    put_subjects_in(c, &state.subjects).await?;
    for (row, headline) in &state.scores {
        // A row without a headline stays without one (as it was kept).
        put_score_in(c, vantage, row, None).await?;
        if headline.is_none() {
            c.execute(
                "DELETE FROM score_headline WHERE vantage = $1 AND subject = $2 AND day = $3",
                &[&vantage, &row.subject, &row.day],
            )
            .await?;
        } else if let Some(h) = headline {
            c.execute(
                "UPDATE score_headline SET headline = $4
                 WHERE vantage = $1 AND subject = $2 AND day = $3",
                &[&vantage, &row.subject, &row.day, h],
            )
            .await?;
        }
    }
    for row in &state.states {
        put_state_in(c, vantage, row).await?;
    }
    for (subject, seq, at_ms, body) in &state.declared {
        c.execute(
            "INSERT INTO declared (vantage, subject, seq, at_ms, body) VALUES ($1, $2, $3, $4, $5)",
            &[&vantage, subject, &(*seq as i64), at_ms, body],
        )
        .await?;
    }
    for (id, seq) in &state.run_ids {
        c.execute(
            "INSERT INTO run_id (vantage, id, seq) VALUES ($1, $2, $3)",
            &[&vantage, id, &(*seq as i64)],
        )
        .await?;
    }
    for row in &state.outbox {
        let state = row.state.as_str();
        c.execute(
            "INSERT INTO webhook_outbox (vantage, event_id, webhook, kind, created_ms, body,
                 state, attempts, next_attempt_ms, last_error, done_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            &[
                &vantage,
                &row.event.event_id,
                &row.event.webhook,
                &row.event.kind.as_str(),
                &row.event.created_ms,
                &row.event.body,
                &state,
                &i64::from(row.attempts),
                &row.next_attempt_ms,
                &row.last_error,
                &row.done_ms,
            ],
        )
        .await?;
    }
    Ok(())
}

const SELECT_SUBJECT: &str = "SELECT url, category, source, state, added_ms, next_free_ms,
    next_paid_ms, failures, last_run_ms, last_paid_ms, revision FROM subject";

const SELECT_OUTBOX: &str = "SELECT id, event_id, webhook, kind, created_ms, body, state,
    attempts, next_attempt_ms, last_error, done_ms FROM webhook_outbox";

const SELECT_SCORE: &str = "SELECT subject, day, as_of_ms, seq, document FROM score";

fn read_score(r: &tokio_postgres::Row) -> ScoreRow {
    ScoreRow {
        subject: r.get(0),
        day: r.get(1),
        as_of_ms: r.get(2),
        seq: r.get::<_, i64>(3) as u64,
        document: r.get(4),
    }
}

pub(super) fn read_checkpoint(r: &tokio_postgres::Row) -> Result<Checkpoint, String> {
    let seq: i64 = r.get(0);
    let bad = |what: &str| format!("checkpoint {seq}: bad {what}");
    Ok(Checkpoint {
        seq: seq as u64,
        hash: r.get::<_, &[u8]>(1).try_into().map_err(|_| bad("hash"))?,
        at_ms: r.get(2),
        public_key: r
            .get::<_, &[u8]>(3)
            .try_into()
            .map_err(|_| bad("public key"))?,
        signature: r
            .get::<_, &[u8]>(4)
            .try_into()
            .map_err(|_| bad("signature"))?,
    })
}

fn read_note(r: &tokio_postgres::Row) -> TreeNote {
    TreeNote {
        size: r.get::<_, i64>(0) as u64,
        at_ms: r.get(1),
        note: r.get(2),
    }
}

/// Kinds as the statements take them (empty: every kind).
fn kind_names(kinds: &[RecordKind]) -> Vec<&'static str> {
    kinds.iter().map(|k| k.as_str()).collect()
}

impl PgLedger {
    /// The rows of one statement, on a connection of the pool (the statement prepared once per
    /// connection).
    fn query(
        &self,
        context: &'static str,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        self.run(async {
            let client = self.pool.client(context).await?;
            let stmt = client
                .prepare_cached(sql)
                .await
                .map_err(self.pool.pg(context))?;
            client
                .query(&stmt, params)
                .await
                .map_err(self.pool.pg(context))
        })
    }

    fn query_opt(
        &self,
        context: &'static str,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Option<tokio_postgres::Row>, StoreError> {
        Ok(self.query(context, sql, params)?.into_iter().next())
    }

    /// Entries read back from rows of (seq, at_ms, body).
    fn entries(
        &self,
        context: &'static str,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Vec<ReadEntry>, StoreError> {
        let rows = self.query(context, sql, params)?;
        self.read_rows(rows)
    }

    fn declaration(&self, subject: &str, body: &[u8]) -> Result<Declared, StoreError> {
        serde_json::from_slice(body)
            .map_err(|e| self.corrupt(format!("a declaration of {subject} does not read: {e}")))
    }

    fn one_declaration(
        &self,
        subject: &str,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Option<Declared>, StoreError> {
        self.query_opt("reading declarations", sql, params)?
            .map(|r| self.declaration(subject, r.get(0)))
            .transpose()
    }

    fn subject_row(&self, r: &tokio_postgres::Row) -> Result<SubjectRow, StoreError> {
        let url: String = r.get(0);
        let state: &str = r.get(3);
        let state = SubjectState::parse(state)
            .ok_or_else(|| self.corrupt(format!("subject {url}: unknown state {state:?}")))?;
        Ok(SubjectRow {
            category: r.get(1),
            source: r.get(2),
            state,
            added_ms: r.get(4),
            next_free_ms: r.get(5),
            next_paid_ms: r.get(6),
            failures: u32::try_from(r.get::<_, i64>(7)).unwrap_or(u32::MAX),
            last_run_ms: r.get(8),
            last_paid_ms: r.get(9),
            revision: r.get(10),
            url,
        })
    }

    fn outbox(&self, sql: &str, params: Params<'_>) -> Result<Vec<OutboxRow>, StoreError> {
        self.query("reading the outbox", sql, params)?
            .iter()
            .map(|r| {
                let id: i64 = r.get(0);
                let (kind, state): (&str, &str) = (r.get(3), r.get(6));
                let kind = EventKind::parse(kind).ok_or_else(|| {
                    self.corrupt(format!("outbox row {id}: unknown event kind {kind:?}"))
                })?;
                let state = OutboxState::parse(state).ok_or_else(|| {
                    self.corrupt(format!("outbox row {id}: unknown state {state:?}"))
                })?;
                Ok(OutboxRow {
                    id,
                    event: NewOutboxEvent {
                        event_id: r.get(1),
                        webhook: r.get(2),
                        kind,
                        created_ms: r.get(4),
                        body: r.get(5),
                    },
                    state,
                    attempts: u32::try_from(r.get::<_, i64>(7)).unwrap_or(u32::MAX),
                    next_attempt_ms: r.get(8),
                    last_error: r.get(9),
                    done_ms: r.get(10),
                })
            })
            .collect()
    }

    /// The nodes `wanted` of this vantage's tree (leaves from the entries, the levels above
    /// from `tree`), read in `c`.
    async fn fetch_nodes<C: GenericClient + Sync>(
        &self,
        c: &C,
        size: u64,
        wanted: impl IntoIterator<Item = (u32, u64)>,
    ) -> Result<FetchedNodes, StoreError> {
        let (mut leaves, mut levels, mut idxs) = (Vec::new(), Vec::new(), Vec::new());
        for (level, idx) in wanted {
            if level == 0 {
                leaves.push(idx as i64 + 1);
            } else {
                levels.push(level as i32);
                idxs.push(idx as i64);
            }
        }
        let context = "reading the Merkle tree";
        let rows = c
            .query(
                "SELECT 0, seq - 1, hash FROM entry WHERE vantage = $1 AND seq = ANY($2)
                 UNION ALL
                 SELECT t.level, t.idx, t.hash FROM tree t
                 JOIN unnest($3::integer[], $4::bigint[]) AS w (level, idx)
                     ON t.level = w.level AND t.idx = w.idx
                 WHERE t.vantage = $1",
                &[&self.vantage, &leaves, &levels, &idxs],
            )
            .await
            .map_err(self.pool.pg(context))?;
        let mut hashes = merkle::NodeMap::with_capacity_and_hasher(rows.len(), Default::default());
        for r in rows {
            let level: i32 = r.get(0);
            let idx: i64 = r.get(1);
            let hash: Hash = r
                .get::<_, &[u8]>(2)
                .try_into()
                .map_err(|_| self.corrupt(format!("tree node {idx} at level {level}")))?;
            hashes.insert((level as u32, idx as u64), hash);
        }
        Ok(FetchedNodes { size, hashes })
    }

    /// Every score row of this vantage checked against its entry, each subject's newest row
    /// against its newest score entry, and no headline without its row (as SQLite's).
    pub(super) fn verify_score_rows(&self, named: &Named) -> Result<u64, StoreError> {
        let mut checked = 0u64;
        let mut after = (String::new(), String::new());
        loop {
            let rows = self.query(
                "reading scores",
                "SELECT s.subject, s.day, s.as_of_ms, s.seq, s.document, h.headline FROM score s
                 LEFT JOIN score_headline h
                     ON h.vantage = s.vantage AND h.subject = s.subject AND h.day = s.day
                 WHERE s.vantage = $1 AND (s.subject, s.day) > ($2, $3)
                 ORDER BY s.subject, s.day LIMIT $4",
                &[&self.vantage, &after.0, &after.1, &SCORE_ROWS_PAGE],
            )?;
            let Some(last) = rows.last() else { break };
            after = (last.get(0), last.get(1));
            let page: Vec<(ScoreRow, Option<Vec<u8>>)> =
                rows.iter().map(|r| (read_score(r), r.get(5))).collect();
            let seqs: Vec<u64> = page.iter().map(|(r, _)| r.seq).collect();
            let entries: BTreeMap<u64, ReadEntry> = Store::entries_at(self, &seqs)?
                .into_iter()
                .map(|e| (e.seq, e))
                .collect();
            for (row, headline) in &page {
                super::super::check_score_row(row, headline.as_deref(), &entries)?;
                checked += 1;
            }
        }
        let newest_rows: BTreeMap<String, u64> = self
            .query(
                "reading scores",
                "SELECT DISTINCT ON (subject) subject, seq FROM score WHERE vantage = $1
                 ORDER BY subject, day DESC",
                &[&self.vantage],
            )?
            .iter()
            .map(|r| (r.get(0), r.get::<_, i64>(1) as u64))
            .collect();
        super::super::check_newest_rows(named, &newest_rows)?;
        let orphan = self.query_opt(
            "reading scores",
            "SELECT h.subject, h.day FROM score_headline h WHERE h.vantage = $1 AND NOT EXISTS
                 (SELECT 1 FROM score s WHERE s.vantage = h.vantage AND s.subject = h.subject
                  AND s.day = h.day) LIMIT 1",
            &[&self.vantage],
        )?;
        if let Some(r) = orphan {
            return Err(super::super::orphan_headline(r.get(0), r.get(1)).into());
        }
        Ok(checked)
    }
}

impl Store for PgLedger {
    fn append(&self, entries: Vec<NewEntry>) -> Result<Vec<u64>, StoreError> {
        LedgerLog::append(self, entries)
    }

    fn append_fenced(&self, entries: Vec<NewEntry>, fence: &Fence) -> Result<Vec<u64>, StoreError> {
        self.append_in(entries, Some(fence))
    }

    fn head(&self) -> Result<(u64, [u8; 32]), StoreError> {
        LedgerLog::head(self)
    }

    fn subject_entries(
        &self,
        subject: &str,
        kinds: &[RecordKind],
        after: u64,
    ) -> Result<Vec<ReadEntry>, StoreError> {
        self.entries(
            "reading a subject's entries",
            "SELECT seq, at_ms, body FROM entry
             WHERE vantage = $1 AND subject = $2 AND seq > $3
                 AND (cardinality($4::text[]) = 0 OR kind = ANY($4))
             ORDER BY seq",
            &[&self.vantage, &subject, &(after as i64), &kind_names(kinds)],
        )
    }

    fn subject_stored_entries(
        &self,
        subject: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredEntry>, StoreError> {
        self.query(
            "reading a subject's entries",
            "SELECT seq, at_ms, kind, subject, prev, hash, body FROM entry
             WHERE vantage = $1 AND subject = $2 AND seq > $3 ORDER BY seq LIMIT $4",
            &[
                &self.vantage,
                &subject,
                &(after as i64),
                &(limit.min(i64::MAX as usize) as i64),
            ],
        )?
        .iter()
        .map(stored_entry)
        .collect()
    }

    fn latest_subject_entry(
        &self,
        subject: &str,
        kind: RecordKind,
    ) -> Result<Option<ReadEntry>, StoreError> {
        Ok(self
            .entries(
                "reading a subject's entries",
                "SELECT seq, at_ms, body FROM entry
                 WHERE vantage = $1 AND subject = $2 AND kind = $3 ORDER BY seq DESC LIMIT 1",
                &[&self.vantage, &subject, &kind.as_str()],
            )?
            .pop())
    }

    fn latest_entry_of_kind(&self, kind: RecordKind) -> Result<Option<ReadEntry>, StoreError> {
        Ok(self
            .entries(
                "reading entries",
                "SELECT seq, at_ms, body FROM entry WHERE vantage = $1 AND kind = $2
                 ORDER BY seq DESC LIMIT 1",
                &[&self.vantage, &kind.as_str()],
            )?
            .pop())
    }

    fn entries_at(&self, seqs: &[u64]) -> Result<Vec<ReadEntry>, StoreError> {
        let wanted: Vec<i64> = seqs.iter().map(|s| *s as i64).collect();
        self.entries(
            "reading entries",
            "SELECT seq, at_ms, body FROM entry WHERE vantage = $1 AND seq = ANY($2) ORDER BY seq",
            &[&self.vantage, &wanted],
        )
    }

    fn entries_of_kind(
        &self,
        kinds: &[RecordKind],
        after: u64,
    ) -> Result<Vec<ReadEntry>, StoreError> {
        self.entries(
            "reading entries",
            "SELECT seq, at_ms, body FROM entry
             WHERE vantage = $1 AND seq > $2 AND (cardinality($3::text[]) = 0 OR kind = ANY($3))
             ORDER BY seq",
            &[&self.vantage, &(after as i64), &kind_names(kinds)],
        )
    }

    fn entries_page(&self, after: u64, limit: usize) -> Result<Vec<ReadEntry>, StoreError> {
        LedgerLog::entries_page(self, after, limit)
    }

    fn scan(
        &self,
        after: u64,
        f: &mut dyn FnMut(StoredEntry) -> Result<(), Broken>,
    ) -> Result<(), StoreError> {
        LedgerLog::scan(self, after, f)
    }

    fn put_blob(&self, bytes: &[u8]) -> Result<String, StoreError> {
        use sha2::Digest;
        let sha256: [u8; 32] = sha2::Sha256::digest(bytes).into();
        let kept = KeptBlob::new(NewBlob {
            sha256,
            bytes: bytes.to_vec(),
            kind: BlobKind::Repeated,
        });
        self.run(async {
            let client = self.pool.client("writing a blob").await?;
            insert_blobs(&**client, std::slice::from_ref(&kept))
                .await
                .map_err(self.pool.pg("writing a blob"))
        })?;
        Ok(hex::encode(sha256))
    }

    fn blob(&self, sha256: &[u8; 32]) -> Result<Option<Vec<u8>>, StoreError> {
        LedgerLog::blob(self, sha256)
    }

    fn checkpoint(&self, key: &ReporterKey, at_ms: i64) -> Result<Option<Checkpoint>, StoreError> {
        LedgerLog::checkpoint(self, key, at_ms)
    }

    fn checkpoints(&self) -> Result<Vec<Checkpoint>, StoreError> {
        LedgerLog::checkpoints(self)
    }

    fn tree_notes(&self) -> Result<Vec<TreeNote>, StoreError> {
        LedgerLog::tree_notes(self)
    }

    fn latest_tree_note(&self) -> Result<Option<TreeNote>, StoreError> {
        Ok(self
            .query_opt(
                "reading tree checkpoints",
                "SELECT size, at_ms, note FROM tree_checkpoint WHERE vantage = $1
                 ORDER BY size DESC LIMIT 1",
                &[&self.vantage],
            )?
            .map(|r| read_note(&r)))
    }

    fn inclusion_bundle(
        &self,
        subject: &str,
        after: u64,
        limit: usize,
    ) -> Result<Option<InclusionBundle>, StoreError> {
        let context = "reading an inclusion proof";
        let limit = limit.min(i64::MAX as usize) as i64;
        // One read transaction: the checkpoint, the entries and the tree as of one moment.
        let read = self.run(async {
            let mut client = self.pool.client(context).await?;
            let tx = client
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await
                .map_err(self.pool.pg(context))?;
            let note = tx
                .query_opt(
                    "SELECT size, at_ms, note FROM tree_checkpoint WHERE vantage = $1
                     ORDER BY size DESC LIMIT 1",
                    &[&self.vantage],
                )
                .await
                .map_err(self.pool.pg(context))?;
            let signer = tx
                .query_opt(
                    "SELECT seq, hash, at_ms, public_key, signature FROM checkpoint
                     WHERE vantage = $1 ORDER BY seq DESC LIMIT 1",
                    &[&self.vantage],
                )
                .await
                .map_err(self.pool.pg(context))?;
            let (Some(note), Some(signer)) = (note, signer) else {
                return Ok(None);
            };
            let note = read_note(&note);
            let signer = read_checkpoint(&signer).map_err(|why| self.corrupt(why))?;
            let entries: Vec<(u64, Vec<u8>)> = tx
                .query(
                    "SELECT seq, body FROM entry WHERE vantage = $1 AND subject = $2
                         AND seq > $3 AND seq <= $4 ORDER BY seq LIMIT $5",
                    &[
                        &self.vantage,
                        &subject,
                        &(after as i64),
                        &(note.size as i64),
                        &limit,
                    ],
                )
                .await
                .map_err(self.pool.pg(context))?
                .iter()
                .map(|r| (r.get::<_, i64>(0) as u64 - 1, r.get(1)))
                .collect();
            let wanted: std::collections::BTreeSet<(u32, u64)> = entries
                .iter()
                .flat_map(|(index, _)| merkle::inclusion_nodes(*index, note.size))
                .collect();
            let nodes = self.fetch_nodes(&*tx, note.size, wanted).await?;
            Ok::<_, StoreError>(Some((note, signer, entries, nodes)))
        })?;
        let Some((note, signer, entries, nodes)) = read else {
            return Ok(None);
        };
        let key = tlog::note_key(&signer.public_key);
        proof::build(&nodes, note.note, key.verifier_key(), note.size, entries)
            .map(Some)
            .map_err(|e| self.corrupt(format!("an inclusion proof: {e}")))
    }

    fn consistency_proof(&self, old: u64, new: u64) -> Result<Vec<Hash>, StoreError> {
        let context = "reading a consistency proof";
        let nodes = self.run(async {
            let client = self.pool.client(context).await?;
            let (head, _) = head_in(&**client, self.vantage)
                .await
                .map_err(self.pool.pg(context))?;
            if new > head {
                return Err(self.corrupt(format!("no tree of {new} entries: the log has {head}")));
            }
            self.fetch_nodes(&**client, new, merkle::consistency_nodes(old, new))
                .await
        })?;
        merkle::consistency_proof(&nodes, old, new)
            .map_err(|e| self.corrupt(format!("a consistency proof {old} -> {new}: {e}")))
    }

    fn verify(&self, trusted: Option<&Trusted>, deep: bool) -> Result<VerifySummary, StoreError> {
        LedgerLog::verify(self, trusted, deep)
    }

    fn subject_state(&self, subject: &str) -> Result<Option<StateRow>, StoreError> {
        let Some(row) = self.query_opt(
            "reading a subject state",
            "SELECT through_seq, sha256, body FROM subject_state
             WHERE vantage = $1 AND subject = $2",
            &[&self.vantage, &subject],
        )?
        else {
            return Ok(None);
        };
        let days = self
            .query(
                "reading a subject's days",
                "SELECT day, sha256, body FROM subject_days WHERE vantage = $1 AND subject = $2
                 ORDER BY day",
                &[&self.vantage, &subject],
            )?
            .iter()
            .map(|r| DayRow {
                day: r.get(0),
                // A digest of the wrong length matches no body: the state is rebuilt.
                sha256: r.get::<_, &[u8]>(1).try_into().unwrap_or([0; 32]),
                body: r.get(2),
            })
            .collect();
        Ok(Some(StateRow {
            subject: subject.to_string(),
            through_seq: row.get::<_, i64>(0).max(0) as u64,
            sha256: row.get::<_, &[u8]>(1).try_into().unwrap_or([0; 32]),
            body: row.get(2),
            days,
            days_from: i64::MIN,
        }))
    }

    fn run_by_id(&self, run_id: &str) -> Result<Option<ReadEntry>, StoreError> {
        let Some(row) = self.query_opt(
            "reading a run id",
            "SELECT seq FROM run_id WHERE vantage = $1 AND id = $2",
            &[&self.vantage, &run_id],
        )?
        else {
            return Ok(None);
        };
        let seq = row.get::<_, i64>(0) as u64;
        let Some(mut entry) = Store::entries_at(self, &[seq])?.pop() else {
            return Ok(None);
        };
        self.restore_bodies(&mut entry.record)?;
        Ok(Some(entry))
    }

    fn declared(&self, subject: &str, since_ms: i64) -> Result<Vec<Declared>, StoreError> {
        self.query(
            "reading declarations",
            "SELECT body FROM declared WHERE vantage = $1 AND subject = $2 AND at_ms >= $3
             ORDER BY seq",
            &[&self.vantage, &subject, &since_ms],
        )?
        .iter()
        .map(|r| self.declaration(subject, r.get(0)))
        .collect()
    }

    fn latest_declared(&self, subject: &str) -> Result<Option<Declared>, StoreError> {
        self.one_declaration(
            subject,
            "SELECT body FROM declared WHERE vantage = $1 AND subject = $2
             ORDER BY seq DESC LIMIT 1",
            &[&self.vantage, &subject],
        )
    }

    fn declared_before(&self, subject: &str, seq: u64) -> Result<Option<Declared>, StoreError> {
        self.one_declaration(
            subject,
            "SELECT body FROM declared WHERE vantage = $1 AND subject = $2 AND seq < $3
             ORDER BY seq DESC LIMIT 1",
            &[
                &self.vantage,
                &subject,
                &i64::try_from(seq).unwrap_or(i64::MAX),
            ],
        )
    }

    fn subjects(&self) -> Result<Vec<SubjectRow>, StoreError> {
        self.query(
            "reading subjects",
            &format!("{SELECT_SUBJECT} ORDER BY url"),
            &[],
        )?
        .iter()
        .map(|r| self.subject_row(r))
        .collect()
    }

    fn each_subject_shown(&self, each: &mut dyn FnMut(SubjectShown<'_>)) -> Result<(), StoreError> {
        let rows = self.query(
            "reading subjects",
            "SELECT url, category, state, revision FROM subject ORDER BY url",
            &[],
        )?;
        for r in &rows {
            let url: &str = r.get(0);
            let state: &str = r.get(2);
            let Some(state) = SubjectState::parse(state) else {
                return Err(self.corrupt(format!("subject {url}: unknown state {state:?}")));
            };
            each(SubjectShown {
                url,
                category: r.get(1),
                state,
                revision: r.get(3),
            });
        }
        Ok(())
    }

    fn subject(&self, url: &str) -> Result<Option<SubjectRow>, StoreError> {
        self.query_opt(
            "reading a subject",
            &format!("{SELECT_SUBJECT} WHERE url = $1"),
            &[&url],
        )?
        .map(|r| self.subject_row(&r))
        .transpose()
    }

    fn put_subject(&self, row: &SubjectRow) -> Result<(), StoreError> {
        self.put_subjects(std::slice::from_ref(row))
    }

    fn put_subjects(&self, rows: &[SubjectRow]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let context = "writing subjects";
        self.run(async {
            let mut client = self.pool.client(context).await?;
            let tx = client.transaction().await.map_err(self.pool.pg(context))?;
            put_subjects_in(&*tx, rows)
                .await
                .map_err(self.pool.pg(context))?;
            tx.commit().await.map_err(self.pool.pg(context))
        })
    }

    fn put_score(&self, row: &ScoreRow) -> Result<(), StoreError> {
        let context = "writing a score";
        self.run(async {
            let mut client = self.pool.client(context).await?;
            let tx = client.transaction().await.map_err(self.pool.pg(context))?;
            put_score_in(&*tx, self.vantage, row, None)
                .await
                .map_err(self.pool.pg(context))?;
            tx.commit().await.map_err(self.pool.pg(context))
        })
    }

    fn latest_score(&self, subject: &str) -> Result<Option<ScoreRow>, StoreError> {
        Ok(self
            .query_opt(
                "reading a score",
                &format!(
                    "{SELECT_SCORE} WHERE vantage = $1 AND subject = $2 ORDER BY day DESC LIMIT 1"
                ),
                &[&self.vantage, &subject],
            )?
            .map(|r| read_score(&r)))
    }

    fn latest_score_with_headline(
        &self,
        subject: &str,
    ) -> Result<Option<RowWithHeadline>, StoreError> {
        Ok(self
            .query_opt(
                "reading a score",
                "SELECT s.subject, s.day, s.as_of_ms, s.seq, s.document, h.headline FROM score s
                 LEFT JOIN score_headline h
                     ON h.vantage = s.vantage AND h.subject = s.subject AND h.day = s.day
                 WHERE s.vantage = $1 AND s.subject = $2 ORDER BY s.day DESC LIMIT 1",
                &[&self.vantage, &subject],
            )?
            .map(|r| (read_score(&r), r.get(5))))
    }

    fn start_rows(&self, each: &mut dyn FnMut(StartRow)) -> Result<(), StoreError> {
        // One statement for every subject, as SQLite's: each subject's newest score row (never
        // its document), its headline, its newest score entry and its latest declaration.
        let rows = self.query(
            "reading every subject's latest score",
            "SELECT x.url, s.seq, s.as_of_ms, h.headline, e.seq, e.at_ms, e.body,
                    (SELECT d.body FROM declared d WHERE d.vantage = $1 AND d.subject = x.url
                     ORDER BY d.seq DESC LIMIT 1)
             FROM subject x
             LEFT JOIN LATERAL (SELECT seq, as_of_ms, day FROM score
                 WHERE vantage = $1 AND subject = x.url ORDER BY day DESC LIMIT 1) s ON true
             LEFT JOIN score_headline h ON h.vantage = $1 AND h.subject = x.url AND h.day = s.day
             LEFT JOIN LATERAL (SELECT seq, at_ms, body FROM entry
                 WHERE vantage = $1 AND subject = x.url AND kind = 'score'
                 ORDER BY seq DESC LIMIT 1) e ON true
             ORDER BY x.url",
            &[&self.vantage],
        )?;
        for r in rows {
            let subject: String = r.get(0);
            let newest = match r.get::<_, Option<i64>>(4) {
                Some(seq) => Some(self.read_entry(seq, r.get(5), r.get(6))?),
                None => None,
            };
            let declared = r
                .get::<_, Option<&[u8]>>(7)
                .map(|body| self.declaration(&subject, body))
                .transpose()?;
            let row_seq: Option<i64> = r.get(1);
            let as_of: Option<i64> = r.get(2);
            each(StartRow {
                row: row_seq.zip(as_of).map(|(seq, at)| (seq as u64, at)),
                headline: r.get(3),
                subject,
                newest,
                declared,
            });
        }
        Ok(())
    }

    fn daily_scores(&self, subject: &str) -> Result<Vec<ScoreRow>, StoreError> {
        Ok(self
            .query(
                "reading scores",
                &format!("{SELECT_SCORE} WHERE vantage = $1 AND subject = $2 ORDER BY day"),
                &[&self.vantage, &subject],
            )?
            .iter()
            .map(read_score)
            .collect())
    }

    fn last_checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        self.query_opt(
            "reading the last checkpoint",
            "SELECT seq, hash, at_ms, public_key, signature FROM checkpoint WHERE vantage = $1
             ORDER BY seq DESC LIMIT 1",
            &[&self.vantage],
        )?
        .map(|r| read_checkpoint(&r).map_err(|why| self.corrupt(why)))
        .transpose()
    }

    fn outbox_due(&self, now_ms: i64, limit: usize) -> Result<Vec<OutboxRow>, StoreError> {
        self.outbox(
            &format!(
                "{SELECT_OUTBOX} WHERE state = 'pending' AND next_attempt_ms <= $1
                 ORDER BY id LIMIT $2"
            ),
            &[&now_ms, &(limit.min(i64::MAX as usize) as i64)],
        )
    }

    fn outbox_next_due(&self) -> Result<Option<i64>, StoreError> {
        Ok(self
            .query_opt(
                "reading the outbox",
                "SELECT MIN(next_attempt_ms) FROM webhook_outbox WHERE state = 'pending'",
                &[],
            )?
            .and_then(|r| r.get(0)))
    }

    fn outbox_update(&self, id: i64, update: &OutboxUpdate) -> Result<(), StoreError> {
        let (state, attempts, next, error, done) = update.columns();
        self.query(
            "updating the outbox",
            "UPDATE webhook_outbox SET state = $1, attempts = $2, next_attempt_ms = $3,
                 last_error = COALESCE($4, last_error), done_ms = $5
             WHERE id = $6 AND state = 'pending'",
            &[
                &state.as_str(),
                &i64::from(attempts),
                &next,
                &error,
                &done,
                &id,
            ],
        )?;
        Ok(())
    }

    fn outbox_counts(&self) -> Result<(u64, u64), StoreError> {
        let row = self.query_opt(
            "counting the outbox",
            "SELECT COUNT(*) FILTER (WHERE state = 'pending'),
                    COUNT(*) FILTER (WHERE state = 'dead') FROM webhook_outbox",
            &[],
        )?;
        Ok(row.map_or((0, 0), |r| {
            (r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64)
        }))
    }

    fn outbox_rows(&self) -> Result<Vec<OutboxRow>, StoreError> {
        self.outbox(&format!("{SELECT_OUTBOX} ORDER BY id"), &[])
    }

    fn latest_subject_entry_before(
        &self,
        subject: &str,
        kind: RecordKind,
        before_ms: i64,
    ) -> Result<Option<ReadEntry>, StoreError> {
        Ok(self
            .entries(
                "reading a subject's entries",
                "SELECT seq, at_ms, body FROM entry
                 WHERE vantage = $1 AND subject = $2 AND kind = $3 AND at_ms < $4
                 ORDER BY seq DESC LIMIT 1",
                &[&self.vantage, &subject, &kind.as_str(), &before_ms],
            )?
            .pop())
    }

    fn declared_through(&self, subject: &str, seq: u64) -> Result<Option<Declared>, StoreError> {
        self.one_declaration(
            subject,
            "SELECT body FROM declared WHERE vantage = $1 AND subject = $2 AND seq <= $3
             ORDER BY seq DESC LIMIT 1",
            &[
                &self.vantage,
                &subject,
                &i64::try_from(seq).unwrap_or(i64::MAX),
            ],
        )
    }

    fn vantage_name(&self) -> Option<&str> {
        Some(&self.name)
    }

    fn other_vantages(&self) -> Result<Vec<(String, u64)>, StoreError> {
        Ok(self
            .query(
                "reading the vantages",
                "SELECT v.name, COALESCE((SELECT max(e.seq) FROM entry e WHERE e.vantage = v.id), 0)
                 FROM vantage v WHERE v.id <> $1 ORDER BY v.name",
                &[&self.vantage],
            )?
            .iter()
            .map(|r| (r.get(0), r.get::<_, i64>(1) as u64))
            .collect())
    }

    fn vantage_subject_entries(
        &self,
        vantage: &str,
        subject: &str,
        kinds: &[RecordKind],
        after: u64,
        through: u64,
    ) -> Result<Vec<ReadEntry>, StoreError> {
        self.entries(
            "reading another vantage's entries",
            "SELECT seq, at_ms, body FROM entry
             WHERE vantage = (SELECT id FROM vantage WHERE name = $1) AND subject = $2
                 AND seq > $3 AND seq <= $4
                 AND (cardinality($5::text[]) = 0 OR kind = ANY($5))
             ORDER BY seq",
            &[
                &vantage,
                &subject,
                &pg_seq(after),
                &pg_seq(through),
                &kind_names(kinds),
            ],
        )
    }

    fn vantage_entries_at(
        &self,
        vantage: &str,
        seqs: &[u64],
    ) -> Result<Vec<ReadEntry>, StoreError> {
        let wanted: Vec<i64> = seqs.iter().map(|s| pg_seq(*s)).collect();
        self.entries(
            "reading another vantage's entries",
            "SELECT seq, at_ms, body FROM entry
             WHERE vantage = (SELECT id FROM vantage WHERE name = $1) AND seq = ANY($2)
             ORDER BY seq",
            &[&vantage, &wanted],
        )
    }

    fn vantage_entries_of_kind(
        &self,
        vantage: &str,
        kinds: &[RecordKind],
        after: u64,
        through: u64,
    ) -> Result<Vec<ReadEntry>, StoreError> {
        self.entries(
            "reading another vantage's entries",
            "SELECT seq, at_ms, body FROM entry
             WHERE vantage = (SELECT id FROM vantage WHERE name = $1) AND seq > $2 AND seq <= $3
                 AND (cardinality($4::text[]) = 0 OR kind = ANY($4))
             ORDER BY seq",
            &[
                &vantage,
                &pg_seq(after),
                &pg_seq(through),
                &kind_names(kinds),
            ],
        )
    }

    fn vantage_subjects(
        &self,
        vantage: &str,
        kinds: &[RecordKind],
        after: u64,
        through: u64,
    ) -> Result<Vec<String>, StoreError> {
        Ok(self
            .query(
                "reading another vantage's subjects",
                "SELECT DISTINCT subject FROM entry
                 WHERE vantage = (SELECT id FROM vantage WHERE name = $1) AND seq > $2
                     AND seq <= $3 AND subject IS NOT NULL
                     AND (cardinality($4::text[]) = 0 OR kind = ANY($4))
                 ORDER BY subject",
                &[
                    &vantage,
                    &pg_seq(after),
                    &pg_seq(through),
                    &kind_names(kinds),
                ],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }
}

/// A seq as a `bigint` (past its range: the largest).
fn pg_seq(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}
