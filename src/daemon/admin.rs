//! Admin actions and operator notes, done by the daemon's loop: the loop owns the subjects and
//! the schedule, so the API asks it (through the command channel) instead of writing itself.
//! Each action is recorded in the ledger as the daemon records the same thing otherwise (a
//! subject added or paused, a declared outage window, a revision note), then answered.

use crate::config::SubjectUrl;
use crate::control::{ActionRefused, AdminAction, AdminDone};
use crate::ledger::record::{NoteRecord, Record, SubjectChange, SubjectRecord};
use crate::store::{NewEntry, SubjectRow, SubjectState};

use super::schedule::due_after_restart;
use super::{Daemon, Job, Subject};

impl Daemon {
    /// Does an admin action (called by the loop).
    pub(super) fn admin(&mut self, action: AdminAction) -> Result<AdminDone, ActionRefused> {
        let now = self.shared.clock.now_ms();
        match action {
            AdminAction::AddSubject { url, category } => self.add_subject(url, category, now),
            AdminAction::Pause { url, reason } => {
                let row = self.subject_in(&url, &[SubjectState::Active], "active")?;
                let mut row = row;
                row.state = SubjectState::Paused;
                let seq = self.record_subject(
                    &row,
                    now,
                    SubjectChange::Paused {
                        why: reason.clone(),
                    },
                )?;
                self.unschedule(&url);
                Ok(AdminDone {
                    subject: Some(url),
                    seq: Some(seq),
                    detail: format!("paused: {reason}"),
                })
            }
            AdminAction::Resume { url, reason } => {
                let mut row = self.subject_in(&url, &[SubjectState::Paused], "paused")?;
                row.state = SubjectState::Active;
                let seq = self.record_subject(
                    &row,
                    now,
                    SubjectChange::Resumed {
                        why: reason.clone(),
                    },
                )?;
                let due = due_after_restart(&self.cadence, &url, row.next_free_ms, now);
                self.schedule_free(&url, due);
                Ok(AdminDone {
                    subject: Some(url),
                    seq: Some(seq),
                    detail: format!("resumed: {reason}"),
                })
            }
            AdminAction::DeclareOutage { from, to, reason } => {
                let record = crate::cmd::outage::declared_window(&from, &to, &reason, now)
                    .map_err(|e| ActionRefused::Invalid(format!("{e:#}")))?;
                let seq = self.append_one(NewEntry::plain(now, Record::Outage(record)))?;
                self.refresh_outages()
                    .map_err(|e| ActionRefused::Internal(format!("reading outages: {e:#}")))?;
                Ok(AdminDone {
                    subject: None,
                    seq: Some(seq),
                    detail: format!("outage declared from {from} to {to}: {}", reason.trim()),
                })
            }
            AdminAction::RunNow { url } => {
                self.subject_in(&url, &[SubjectState::Active], "active")?;
                if self.running.contains(&url) {
                    return Err(ActionRefused::Conflict(format!(
                        "a run of {url} is in flight; its next one is scheduled when it ends"
                    )));
                }
                self.schedule_free(&url, now);
                Ok(AdminDone {
                    subject: Some(url),
                    seq: None,
                    detail: "run queued now (it records itself in the ledger when it ends)".into(),
                })
            }
        }
    }

    /// Records a revision note its operator posted (the API checked the proof).
    pub(super) fn note(&mut self, note: NoteRecord) -> Result<u64, ActionRefused> {
        if !self.subjects.contains_key(&note.subject) {
            return Err(ActionRefused::UnknownSubject(format!(
                "no subject {}",
                note.subject
            )));
        }
        let at = note.at_ms;
        self.append_one(NewEntry::plain(at, Record::Note(note)))
    }

    fn add_subject(
        &mut self,
        url: String,
        category: String,
        now: i64,
    ) -> Result<AdminDone, ActionRefused> {
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
        let seq = self.record_subject(
            &row,
            now,
            SubjectChange::Added {
                source: "admin".into(),
                category: category.clone(),
            },
        )?;
        self.schedule_free(&url, now);
        Ok(AdminDone {
            subject: Some(url),
            seq: Some(seq),
            detail: format!("added in category {category}; its first run is queued now"),
        })
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

    /// Writes the row and its ledger entry, and keeps the row in the loop's map.
    fn record_subject(
        &mut self,
        row: &SubjectRow,
        now: i64,
        change: SubjectChange,
    ) -> Result<u64, ActionRefused> {
        self.shared
            .store
            .put_subject(row)
            .map_err(|e| ActionRefused::Internal(format!("writing the subject: {e}")))?;
        let seq = self.append_one(NewEntry::plain(
            now,
            Record::Subject(SubjectRecord {
                subject: row.url.clone(),
                at_ms: now,
                change,
            }),
        ))?;
        match self.subjects.get_mut(&row.url) {
            Some(s) => s.row = row.clone(),
            None => {
                self.subjects.insert(
                    row.url.clone(),
                    Subject {
                        row: row.clone(),
                        runs: 0,
                    },
                );
            }
        }
        Ok(seq)
    }

    fn append_one(&self, entry: NewEntry) -> Result<u64, ActionRefused> {
        let _writing = self
            .shared
            .write_lock
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.shared
            .store
            .append(vec![entry])
            .map_err(|e| ActionRefused::Internal(format!("writing the ledger: {e}")))?
            .first()
            .copied()
            .ok_or_else(|| ActionRefused::Internal("the ledger took no entry".into()))
    }

    /// Drops the subject's queued free run (a paused subject's would be skipped anyway; one
    /// queued run per subject keeps a resume or a run-now from doubling its cadence).
    fn unschedule(&mut self, url: &str) {
        self.queue
            .retain(|std::cmp::Reverse((_, _, job))| !matches!(job, Job::Free(u) if u == url));
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
