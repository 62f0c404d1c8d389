//! The daemon's one writer: a thread that does every write of the daemon to the ledger (runs and
//! their scores, the loop's subject rows and entries, refund watches, checkpoints, the value
//! population's blobs), in the order they come, with the runs that finish while it writes, or
//! within a short wait after one arrives, taken together (group commit: one transaction for their
//! entries, one for their scores). The loop and the runs send it messages and never wait for the
//! disk on the runtime's workers; the readers (the API, the runs' history reads) use the store's
//! pool of read connections, so no read waits behind a batch either.
//!
//! A full disk: a run's batch fails (each run reports it; nothing was acknowledged), and the loop's
//! own writes are kept, in order, and written first when room returns. The loop hears of it
//! ([`Event::StorageFull`], [`Event::StorageRoom`]) and starts nothing meanwhile.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::ledger::key::ReporterKey;
use crate::ledger::record::{Record, RecordKind};
use crate::score::input::PeerDocument;
use crate::store::{NewEntry, StoreError, SubjectRow};

use super::pipeline::{PendingRun, Population, Shared, record_batch};
use super::storage;

/// Where a write of the loop's own answers: its entries' sequence numbers, or why it failed.
pub(crate) type Reply = Box<dyn FnOnce(Result<Vec<u64>, String>) + Send>;

/// What the writer is asked to do.
pub(crate) enum Write {
    /// A finished run: written and rescored with the other runs waiting.
    Run(PendingRun),
    /// Entries of a job (a refund watch), answered with their sequence numbers.
    Append {
        entries: Vec<NewEntry>,
        reply: oneshot::Sender<Result<Vec<u64>, StoreError>>,
    },
    /// The loop's own subject rows and plain entries (kept while the disk is full).
    Loop(LoopWrite),
    /// A checkpoint signed at the head, then our outage windows read again.
    Checkpoint { at_ms: i64 },
    /// The scoring role's beat: the subjects of the other vantages' new entries rescored.
    ScoreOthers,
    /// The value population (per category: its documents and their bytes): the bytes kept as
    /// blobs, then the population made the one scores read.
    Population {
        at_ms: i64,
        categories: Vec<(String, Vec<PeerDocument>, Vec<u8>)>,
    },
    /// Everything before written; then the last checkpoint and every subject's row; then the
    /// thread ends.
    Stop {
        at_ms: i64,
        rows: Vec<SubjectRow>,
        done: oneshot::Sender<Result<(), String>>,
    },
}

/// Rows and plain entries of the loop, written in two commits (rows, then entries).
#[derive(Default)]
pub(crate) struct LoopWrite {
    pub rows: Vec<SubjectRow>,
    pub entries: Vec<(i64, Record)>,
    /// The entries open or close an outage window: read the windows again after.
    pub outages: bool,
    pub reply: Option<Reply>,
}

/// What the writer tells the loop.
#[derive(Debug)]
pub(crate) enum Event {
    /// A write failed for lack of room (the error, for the log).
    StorageFull(String),
    /// A write succeeded again after the disk was full (since when, real time).
    StorageRoom { full_since: Instant },
    /// A write of the loop failed for another reason: the daemon stops.
    Failed(String),
}

/// The sending side, shared by the loop and the runs.
#[derive(Clone)]
pub(crate) struct Writer {
    tx: Sender<Write>,
}

impl Writer {
    /// Starts the writer thread for `shared`'s store; its events go to the returned receiver.
    pub(crate) fn start(
        shared: Arc<Shared>,
        key: ReporterKey,
        state_dir: PathBuf,
    ) -> std::io::Result<(Writer, mpsc::UnboundedReceiver<Event>)> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (events, events_rx) = mpsc::unbounded_channel();
        let thread = Thread {
            shared,
            key,
            state_dir,
            events,
            kept: Vec::new(),
            full_since: None,
            last_row: None,
            retry_at: Instant::now(),
        };
        std::thread::Builder::new()
            .name("ledger-writer".into())
            .spawn(move || thread.run(rx))?;
        Ok((Writer { tx }, events_rx))
    }

    /// Sends a write (lost only when the writer is gone: the daemon is stopping).
    pub(crate) fn send(&self, write: Write) {
        if let Err(std::sync::mpsc::SendError(write)) = self.tx.send(write) {
            refuse(write, "the ledger's writer has stopped");
        }
    }
}

/// How long a batch of finished runs waits for more to join it. Each batch pays fixed costs
/// once, whatever its size: two commits (each waits for stable storage), the writer's wake, the
/// head's read; runs finish a few milliseconds apart in a busy sweep, so without a wait most
/// batches held one or two runs. A run's score is published at most this much later.
const GATHER: Duration = Duration::from_millis(20);
/// The most writes one batch gathers (the loop's writes wait behind a batch).
const GATHER_MAX: usize = 256;

/// While `waiting` holds only finished runs: the runs that finish within [`GATHER`] join them.
/// Any other write (the loop's, a checkpoint, a stop) ends the wait at once, so nothing but
/// runs is ever delayed by it.
fn gather(rx: &Receiver<Write>, waiting: &mut Vec<Write>) {
    if !waiting.iter().all(|w| matches!(w, Write::Run(_))) {
        return;
    }
    let until = Instant::now() + GATHER;
    while waiting.len() < GATHER_MAX {
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(write) => {
                let run = matches!(write, Write::Run(_));
                waiting.push(write);
                if !run {
                    return;
                }
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Answers a write that will not be done.
fn refuse(write: Write, why: &str) {
    match write {
        Write::Run(run) => {
            let _ = run.done.send(Err(why.to_string()));
        }
        Write::Append { reply, .. } => {
            let _ = reply.send(Err(StoreError::WriterStopped));
        }
        Write::Loop(w) => {
            if let Some(reply) = w.reply {
                reply(Err(why.to_string()));
            }
        }
        Write::Stop { done, .. } => {
            let _ = done.send(Err(why.to_string()));
        }
        Write::Checkpoint { .. } | Write::Population { .. } | Write::ScoreOthers => {}
    }
}

struct Thread {
    shared: Arc<Shared>,
    key: ReporterKey,
    state_dir: PathBuf,
    events: mpsc::UnboundedSender<Event>,
    /// The loop's writes not written for lack of room, in order.
    kept: Vec<LoopWrite>,
    /// Since when the disk is full.
    full_since: Option<Instant>,
    /// A subject row written before: written again to see a write succeed when nothing is kept.
    last_row: Option<SubjectRow>,
    /// While the disk is full: when to try again.
    retry_at: Instant,
}

impl Thread {
    fn run(mut self, rx: Receiver<Write>) {
        loop {
            let first = if self.full_since.is_some() {
                // The next try comes every `RETRY_EVERY`, however many writes arrive meanwhile.
                if Instant::now() >= self.retry_at {
                    self.retry();
                    continue;
                }
                match rx.recv_timeout(self.retry_at.saturating_duration_since(Instant::now())) {
                    Ok(w) => Some(w),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            } else {
                match rx.recv() {
                    Ok(w) => Some(w),
                    Err(_) => return,
                }
            };
            let Some(first) = first else {
                continue;
            };
            // Everything waiting now: the loop's writes in order, then the runs as one batch.
            let mut waiting = vec![first];
            waiting.extend(rx.try_iter());
            if self.full_since.is_none() {
                gather(&rx, &mut waiting);
            }
            let mut runs = Vec::new();
            let mut loop_writes = LoopWrite::default();
            let mut replies = Vec::new();
            let mut stop = None;
            let mut score_others = false;
            for write in waiting {
                match write {
                    Write::Run(run) => runs.push(run),
                    Write::Loop(mut w) => {
                        // The loop's writes of one gathering go in one commit (rows, then entries).
                        let count = w.entries.len();
                        loop_writes.rows.append(&mut w.rows);
                        loop_writes.entries.append(&mut w.entries);
                        loop_writes.outages |= w.outages;
                        replies.push((count, w.reply));
                    }
                    Write::Append { entries, reply } => {
                        let _ = reply.send(self.shared.store.append(entries));
                    }
                    Write::Checkpoint { at_ms } => {
                        if let Err(e) = self.shared.store.checkpoint(&self.key, at_ms) {
                            tracing::error!(error = %e, "signing a checkpoint failed");
                        }
                        self.snapshots(at_ms);
                        self.publish_outages();
                    }
                    Write::Population { at_ms, categories } => self.population(at_ms, categories),
                    Write::ScoreOthers => score_others = true,
                    Write::Stop { at_ms, rows, done } => stop = Some((at_ms, rows, done)),
                }
            }
            if !replies.is_empty() {
                loop_writes.reply = Some(split_replies(replies));
                self.loop_write(loop_writes);
            }
            if !runs.is_empty() {
                self.runs(runs);
            }
            if score_others
                && self.full_since.is_none()
                && let Err(e) = super::pipeline::score_others(&self.shared)
            {
                tracing::warn!(error = %e, "rescoring the other vantages' subjects failed; tried again at the next beat");
            }
            if let Some((at_ms, rows, done)) = stop {
                let _ = done.send(self.stop(at_ms, rows));
                return;
            }
        }
    }

    /// A batch of runs; a failure for lack of room is told to the loop.
    fn runs(&mut self, runs: Vec<PendingRun>) {
        if let Err(e) = record_batch(&self.shared, runs) {
            let e = anyhow::Error::new(e);
            if storage::is_full(&e, &self.state_dir) {
                self.enter_full(&e);
            }
        }
    }

    fn loop_write(&mut self, write: LoopWrite) {
        if self.full_since.is_some() {
            self.kept.push(write);
            return;
        }
        match self.write_now(&write) {
            Ok(seqs) => finish(write, seqs, self),
            Err(e) if storage::is_full(&e, &self.state_dir) => {
                self.enter_full(&e);
                self.kept.push(write);
            }
            Err(e) => {
                let why = format!("{e:#}");
                if let Some(reply) = write.reply {
                    reply(Err(why.clone()));
                }
                let _ = self.events.send(Event::Failed(why));
            }
        }
    }

    fn write_now(&mut self, write: &LoopWrite) -> anyhow::Result<Vec<u64>> {
        self.shared.store.put_subjects(&write.rows)?;
        if let Some(row) = write.rows.last() {
            self.last_row = Some(row.clone());
        }
        if write.entries.is_empty() {
            return Ok(Vec::new());
        }
        let entries = write
            .entries
            .iter()
            .map(|(at, record)| NewEntry::plain(*at, record.clone()))
            .collect();
        Ok(self.shared.store.append(entries)?)
    }

    fn enter_full(&mut self, error: &anyhow::Error) {
        self.retry_at = Instant::now() + storage::RETRY_EVERY;
        if self.full_since.is_none() {
            self.full_since = Some(Instant::now());
            let _ = self.events.send(Event::StorageFull(format!("{error:#}")));
        }
    }

    /// While the disk is full, every `RETRY_EVERY`: once the filesystem has room, writes what
    /// was kept (or, with nothing kept, a subject's row again to see a write succeed).
    fn retry(&mut self) {
        let Some(full_since) = self.full_since else {
            return;
        };
        self.retry_at = Instant::now() + storage::RETRY_EVERY;
        if storage::low_on_room(&self.state_dir) {
            return;
        }
        while !self.kept.is_empty() {
            let write = self.kept.remove(0);
            match self.write_now(&write) {
                Ok(seqs) => finish(write, seqs, self),
                Err(e) if storage::is_full(&e, &self.state_dir) => {
                    self.kept.insert(0, write);
                    return;
                }
                Err(e) => {
                    let why = format!("{e:#}");
                    if let Some(reply) = write.reply {
                        reply(Err(why.clone()));
                    }
                    let _ = self.events.send(Event::Failed(why));
                    return;
                }
            }
        }
        if let Some(row) = self.last_row.clone()
            && let Err(e) = self.shared.store.put_subjects(&[row])
        {
            let e = anyhow::Error::new(e);
            if !storage::is_full(&e, &self.state_dir) {
                let _ = self.events.send(Event::Failed(format!("{e:#}")));
            }
            return;
        }
        self.full_since = None;
        let _ = self.events.send(Event::StorageRoom { full_since });
        self.publish_outages();
    }

    /// After a checkpoint: the snapshot of every day over without one yet (signed, kept as a
    /// blob with its `snapshot` entry), and a checkpoint over those entries, so that no
    /// snapshot's entry waits a whole interval unsigned.
    fn snapshots(&self, at_ms: i64) {
        if self.full_since.is_some() {
            return;
        }
        let store = &*self.shared.store;
        match crate::snapshot::make::make_due(store, &self.key, at_ms) {
            Ok(made) if made.is_empty() => {}
            Ok(made) => {
                for s in &made {
                    tracing::info!(day = %s.day, subjects = s.subjects, sha256 = %s.sha256, "daily snapshot made");
                }
                if let Err(e) = store.checkpoint(&self.key, at_ms) {
                    tracing::error!(error = %e, "signing the checkpoint after a snapshot failed");
                }
            }
            Err(e) => tracing::error!(error = %e, "making a daily snapshot failed"),
        }
    }

    /// Our outage windows read again from every outage entry (another process may declare one),
    /// for the API, the metrics and the scores. Done here, before a write's reply, so what the
    /// API accepted is what it serves next.
    fn publish_outages(&self) {
        match self.shared.store.entries_of_kind(&[RecordKind::Outage], 0) {
            Ok(entries) => {
                let windows = super::scoring::outage_windows(&super::outage_records(entries));
                *self
                    .shared
                    .outages
                    .write()
                    .unwrap_or_else(|p| p.into_inner()) = windows;
            }
            Err(e) => tracing::error!(error = %e, "reading outage windows failed"),
        }
    }

    fn population(&self, at_ms: i64, categories: Vec<(String, Vec<PeerDocument>, Vec<u8>)>) {
        let mut population = Population {
            at_ms,
            by_category: Default::default(),
        };
        for (category, docs, bytes) in categories {
            match self.shared.store.put_blob(&bytes) {
                Ok(sha) => {
                    population.by_category.insert(category, (sha, docs));
                }
                Err(e) => tracing::error!(error = %e, "keeping the value population failed"),
            }
        }
        *self
            .shared
            .population
            .write()
            .unwrap_or_else(|p| p.into_inner()) = population;
    }

    /// The last checkpoint and every subject's row; what is kept for lack of room, written if
    /// the disk has room now.
    fn stop(&mut self, at_ms: i64, rows: Vec<SubjectRow>) -> Result<(), String> {
        if self.full_since.is_some() {
            self.retry();
        }
        if let Err(e) = self.shared.store.checkpoint(&self.key, at_ms) {
            tracing::error!(error = %e, "signing the last checkpoint failed");
        }
        // No daily snapshot here: one of every subject takes seconds per 100,000 subjects, more
        // than a service manager waits for a stop; the first checkpoint after the restart makes
        // the days due (`snapshot::make::days_due` starts from the newest snapshot).
        let written = if self.kept.is_empty() {
            self.shared.store.put_subjects(&rows).map_err(Into::into)
        } else {
            Err(anyhow::anyhow!(
                "{} writes of the loop kept for lack of room",
                self.kept.len()
            ))
        };
        match written {
            Ok(()) => Ok(()),
            // The schedule's rows are rebuilt at the next start (a subject may be probed early);
            // the kept entries were acknowledged to no one (our control probes, catalogue reads).
            Err(e) if self.full_since.is_some() || storage::is_full(&e, &self.state_dir) => {
                tracing::error!(
                    error = %format!("{e:#}"),
                    "stopping on a full disk: the schedule and the loop's last records were not written"
                );
                Ok(())
            }
            Err(e) => Err(format!("{e:#}")),
        }
    }
}

/// The replies of the loop's writes gathered in one commit, each given its own entries' seqs.
fn split_replies(replies: Vec<(usize, Option<Reply>)>) -> Reply {
    Box::new(move |result: Result<Vec<u64>, String>| {
        let mut from = 0;
        for (count, reply) in replies {
            let Some(reply) = reply else {
                from += count;
                continue;
            };
            reply(match &result {
                Ok(seqs) => Ok(seqs
                    .get(from..from + count)
                    .map(<[u64]>::to_vec)
                    .unwrap_or_default()),
                Err(e) => Err(e.clone()),
            });
            from += count;
        }
    })
}

/// A loop write done: the outage windows published when they changed, then its replies answered.
fn finish(write: LoopWrite, seqs: Vec<u64>, thread: &Thread) {
    if write.outages {
        thread.publish_outages();
    }
    if let Some(reply) = write.reply {
        reply(Ok(seqs));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(url: &str) -> Write {
        Write::Run(PendingRun::empty(url))
    }

    fn urls(writes: &[Write]) -> Vec<String> {
        writes
            .iter()
            .map(|w| match w {
                Write::Run(run) => run.url().to_string(),
                Write::ScoreOthers => "others".to_string(),
                _ => "other".to_string(),
            })
            .collect()
    }

    #[test]
    fn runs_gather_until_another_write_arrives_and_nothing_else_waits() {
        let (tx, rx) = std::sync::mpsc::channel();
        for write in [run("b"), run("c"), Write::ScoreOthers, run("d")] {
            tx.send(write).unwrap();
        }
        let mut waiting = vec![run("a")];
        gather(&rx, &mut waiting);
        // The runs up to the other write, and that write: the wait ends there (the run after
        // it, already sent, is left for the next batch).
        assert_eq!(urls(&waiting), ["a", "b", "c", "others"]);
        assert_eq!(urls(&rx.try_iter().collect::<Vec<_>>()), ["d"]);

        // A batch that holds a write other than runs does not wait at all.
        tx.send(run("e")).unwrap();
        let mut waiting = vec![Write::ScoreOthers];
        gather(&rx, &mut waiting);
        assert_eq!(urls(&waiting), ["others"]);
        assert_eq!(urls(&rx.try_iter().collect::<Vec<_>>()), ["e"]);
    }

    #[test]
    fn runs_alone_wait_for_the_gathering_time_and_at_most_the_batch_limit() {
        let (tx, rx) = std::sync::mpsc::channel();
        tx.send(run("b")).unwrap();
        let mut waiting = vec![run("a")];
        let started = Instant::now();
        gather(&rx, &mut waiting);
        assert!(
            started.elapsed() >= GATHER,
            "it waited {:?}",
            started.elapsed()
        );
        assert_eq!(urls(&waiting), ["a", "b"]);

        for i in 0..GATHER_MAX + 5 {
            tx.send(run(&format!("r{i}"))).unwrap();
        }
        let mut waiting = vec![run("first")];
        gather(&rx, &mut waiting);
        assert_eq!(waiting.len(), GATHER_MAX);
        assert_eq!(rx.try_iter().count(), 6);
    }
}
