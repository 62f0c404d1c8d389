//! Admin actions and operator notes, done by the daemon's loop: the loop owns the subjects and
//! the schedule, so the API asks it (through the command channel) instead of writing itself.
//! Each action is recorded in the ledger as the daemon records the same thing otherwise (a
//! subject added or paused, a declared outage window, a revision note), then answered.

use tokio::sync::oneshot;

use crate::config::SubjectUrl;
use crate::control::{ActionRefused, AdminAction, AdminDone};
use crate::ledger::record::{NoteRecord, OutageRecord, Record, SubjectChange, SubjectRecord};
use crate::store::{SubjectRow, SubjectState};

use super::schedule::due_after_restart;
use super::writer::{LoopWrite, Write};
use super::{Daemon, Job, Subject};

/// What an action came to in the loop: answered now, or once the writer has written its entry
/// (the answer is built from the entry's seq).
enum Acted {
    Now(AdminDone),
    Writing(LoopWrite, Box<dyn FnOnce(u64) -> AdminDone + Send>),
}

/// A write's answer to whoever asked: the seq of its first entry.
fn answer<T: Send + 'static>(
    reply: oneshot::Sender<Result<T, ActionRefused>>,
    then: impl FnOnce(u64) -> T + Send + 'static,
) -> super::writer::Reply {
    Box::new(move |written: Result<Vec<u64>, String>| {
        let result = written
            .map_err(|e| ActionRefused::Internal(format!("writing the ledger: {e}")))
            .and_then(|seqs| {
                seqs.first()
                    .copied()
                    .ok_or_else(|| ActionRefused::Internal("the ledger took no entry".into()))
            })
            .map(then);
        if let Err(e) = &result {
            tracing::warn!(error = %e, "admin action not recorded");
        }
        let _ = reply.send(result);
    })
}

impl Daemon {
    /// Does an admin action (called by the loop): the loop's state changes at once, and the
    /// answer goes out once the writer has recorded the action.
    pub(super) fn admin(
        &mut self,
        action: AdminAction,
        reply: oneshot::Sender<Result<AdminDone, ActionRefused>>,
    ) {
        match self.act(action) {
            Ok(Acted::Now(done)) => {
                let _ = reply.send(Ok(done));
            }
            Ok(Acted::Writing(mut write, then)) => {
                write.reply = Some(answer(reply, then));
                self.writer.send(Write::Loop(write));
            }
            Err(e) => {
                tracing::warn!(error = %e, "admin action refused");
                let _ = reply.send(Err(e));
            }
        }
    }

    fn act(&mut self, action: AdminAction) -> Result<Acted, ActionRefused> {
        let now = self.shared.clock.now_ms();
        match action {
            AdminAction::AddSubject { url, category } => self.add_subject(url, category, now),
            AdminAction::Pause { url, reason } => {
                let row = self.subject_in(&url, &[SubjectState::Active], "active")?;
                let mut row = row;
                row.state = SubjectState::Paused;
                let write = self.record_subject(
                    &row,
                    now,
                    SubjectChange::Paused {
                        why: reason.clone(),
                    },
                );
                self.unschedule(&url);
                Ok(Acted::Writing(
                    write,
                    Box::new(move |seq| AdminDone {
                        subject: Some(url),
                        seq: Some(seq),
                        detail: format!("paused: {reason}"),
                    }),
                ))
            }
            AdminAction::Resume { url, reason } => {
                let mut row = self.subject_in(&url, &[SubjectState::Paused], "paused")?;
                row.state = SubjectState::Active;
                let write = self.record_subject(
                    &row,
                    now,
                    SubjectChange::Resumed {
                        why: reason.clone(),
                    },
                );
                let due = due_after_restart(&self.cadence, &url, row.next_free_ms, now);
                self.schedule_free(&url, due);
                Ok(Acted::Writing(
                    write,
                    Box::new(move |seq| AdminDone {
                        subject: Some(url),
                        seq: Some(seq),
                        detail: format!("resumed: {reason}"),
                    }),
                ))
            }
            AdminAction::DeclareOutage { from, to, reason } => {
                let record = OutageRecord::declared(&from, &to, &reason, now)
                    .map_err(|e| ActionRefused::Invalid(e.to_string()))?;
                // The writer reads the windows again after it.
                let write = LoopWrite {
                    entries: vec![(now, Record::Outage(record))],
                    outages: true,
                    ..LoopWrite::default()
                };
                Ok(Acted::Writing(
                    write,
                    Box::new(move |seq| AdminDone {
                        subject: None,
                        seq: Some(seq),
                        detail: format!("outage declared from {from} to {to}: {}", reason.trim()),
                    }),
                ))
            }
            AdminAction::RunNow { url } => {
                self.subject_in(&url, &[SubjectState::Active], "active")?;
                if self.running.contains(&url) {
                    return Err(ActionRefused::Conflict(format!(
                        "a run of {url} is in flight; its next one is scheduled when it ends"
                    )));
                }
                self.schedule_free(&url, now);
                Ok(Acted::Now(AdminDone {
                    subject: Some(url),
                    seq: None,
                    detail: "run queued now (it records itself in the ledger when it ends)".into(),
                }))
            }
        }
    }

    /// Records a revision note its operator posted (the API checked the proof): answered with
    /// its entry's seq once written.
    pub(super) fn note(
        &mut self,
        note: NoteRecord,
        reply: oneshot::Sender<Result<u64, ActionRefused>>,
    ) {
        if !self.subjects.contains_key(&note.subject) {
            let _ = reply.send(Err(ActionRefused::UnknownSubject(format!(
                "no subject {}",
                note.subject
            ))));
            return;
        }
        let at = note.at_ms;
        self.writer.send(Write::Loop(LoopWrite {
            entries: vec![(at, Record::Note(note))],
            reply: Some(answer(reply, |seq| seq)),
            ..LoopWrite::default()
        }));
    }

    fn add_subject(
        &mut self,
        url: String,
        category: String,
        now: i64,
    ) -> Result<Acted, ActionRefused> {
        // Known by its canonical URL, as a configured or catalogued subject is.
        let parsed: SubjectUrl = url
            .parse()
            .map_err(|e| ActionRefused::Invalid(format!("url: {e}")))?;
        let url = parsed.to_string();
        let category = category.trim().to_string();
        if category.is_empty() || category.chars().count() > 64 {
            return Err(ActionRefused::Invalid(
                "category must be 1 to 64 characters".into(),
            ));
        }
        let row = match self.subjects.get(&url) {
            Some(s) if s.row.state == SubjectState::Active => {
                return Err(ActionRefused::Conflict(format!("{url} is already probed")));
            }
            Some(s) if s.row.state == SubjectState::Paused => {
                return Err(ActionRefused::Conflict(format!(
                    "{url} is paused: resume it"
                )));
            }
            Some(s) => SubjectRow {
                state: SubjectState::Active,
                source: "admin".into(),
                category: category.clone(),
                ..s.row.clone()
            },
            None => {
                if self.subjects.len() >= self.config.daemon.max_subjects.count() {
                    return Err(ActionRefused::Conflict(
                        "the daemon already has [daemon] max_subjects subjects".into(),
                    ));
                }
                SubjectRow::new_active(url.clone(), category.clone(), "admin".into(), now)
            }
        };
        let write = self.record_subject(
            &row,
            now,
            SubjectChange::Added {
                source: "admin".into(),
                category: category.clone(),
            },
        );
        self.schedule_free(&url, now);
        Ok(Acted::Writing(
            write,
            Box::new(move |seq| AdminDone {
                subject: Some(url),
                seq: Some(seq),
                detail: format!("added in category {category}; its first run is queued now"),
            }),
        ))
    }

    /// The subject's row, when it is in one of `states`.
    fn subject_in(
        &self,
        url: &str,
        states: &[SubjectState],
        wanted: &str,
    ) -> Result<SubjectRow, ActionRefused> {
        let s = self
            .subjects
            .get(url)
            .ok_or_else(|| ActionRefused::UnknownSubject(format!("no subject {url}")))?;
        if !states.contains(&s.row.state) {
            return Err(ActionRefused::Conflict(format!(
                "{url} is {}, not {wanted}",
                s.row.state.as_str()
            )));
        }
        Ok(s.row.clone())
    }

    /// Keeps the row in the loop's map; the write of the row and its ledger entry, to send.
    fn record_subject(&mut self, row: &SubjectRow, now: i64, change: SubjectChange) -> LoopWrite {
        match self.subjects.get_mut(&row.url) {
            Some(s) => s.row = row.clone(),
            None => {
                self.subjects
                    .insert(row.url.clone(), Subject::new(row.clone()));
            }
        }
        LoopWrite {
            rows: vec![row.clone()],
            entries: vec![(
                now,
                Record::Subject(SubjectRecord {
                    subject: row.url.clone(),
                    at_ms: now,
                    change,
                }),
            )],
            ..LoopWrite::default()
        }
    }

    /// Drops the subject's queued free run (a paused subject's would be skipped anyway; one
    /// queued run per subject keeps a resume or a run-now from doubling its cadence).
    fn unschedule(&mut self, url: &str) {
        self.queue
            .retain(|std::cmp::Reverse((_, _, job))| !matches!(job, Job::Free(u) if u == url));
        self.frontier.remove(&super::host_of(url), url);
    }

    /// Queues the subject's free run at `due`, replacing the one queued; while a run of it is in
    /// flight nothing is queued (the run schedules the next one when it ends).
    pub(super) fn schedule_free(&mut self, url: &str, due: i64) {
        self.unschedule(url);
        if !self.running.contains(url) {
            self.push(due, Job::Free(url.to_string()));
        }
    }
}
