//! A subject's state over several vantages' logs (PostgreSQL, the scoring role): the other
//! vantages' entries folded after the state's own ones (each day lists which log each of its
//! entries is of), and a score's inputs read from every vantage's outcomes inside the horizon:
//! each vantage's outcomes excused by its own outage windows only, then R1 and R2 read through
//! the quorum and H2/H3 through the cloaking marks (`score::quorum::excuse_outcomes`), before
//! they are folded into the day cells. Pure apart from the reads the caller passes in.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    EntryRef, FOLDED_KINDS, OutageFold, RunFold, ScoreAt, ScoreInputsError, SubjectState,
    outcome_of,
};
use crate::checks::cloaking::{CloakingContext, cloaking};
use crate::checks::history::{OutageWindow, excused};
use crate::evidence::free::FreeObservation;
use crate::ledger::record::{Record, RecordKind, SubjectChange};
use crate::rubric::{Kind, Rubric};
use crate::score::input::{HistoryEntry, Inputs};
use crate::score::quorum::{CloakingMark, VantagesRead, excuse_outcomes};
use crate::score::summary::{self, Cell, DAY_MS};
use crate::store::{Store, StoreError};

use crate::history::{SEQ_STRIDE, rows_at, run_rows};

/// One entry of any vantage's log, read for a score: its log's vantage, its history rows and,
/// for a run, its free observation (what cloaking compares).
#[derive(Debug, Clone)]
pub struct VantageEntry {
    pub vantage: String,
    pub rows: Vec<HistoryEntry>,
    pub free: Option<FreeObservation>,
}

/// How a score of several vantages reads the entries of its days.
pub type EntriesOf<'a> = dyn FnMut(&[EntryRef]) -> Result<Vec<VantageEntry>, StoreError> + 'a;

/// What a score of several vantages reads besides the state.
pub struct Vantages<'a> {
    /// The state's own log's vantage (its outage windows are `ScoreAt::outages`).
    pub own: &'a str,
    /// Each other vantage's outage windows: they excuse that vantage's outcomes only.
    pub outages: &'a BTreeMap<String, Vec<OutageWindow>>,
    pub read: &'a VantagesRead,
    pub cloaking: &'a CloakingContext,
}

/// Another vantage's revision id: its own numbering, qualified by its name.
fn qualified(vantage: &str, id: &str) -> String {
    format!("{vantage}/{id}")
}

/// The history rows of a run or refund entry `seq`; of another vantage's log when `of` names it
/// (its revision ids qualified).
fn rows_of_record(
    rubric: &Rubric,
    of: Option<&str>,
    seq: u64,
    record: &Record,
) -> Vec<HistoryEntry> {
    let mut rows: Vec<HistoryEntry> = match record {
        Record::Run(run) => rows_at(&run_rows(rubric, run), seq).collect(),
        Record::Refund(refund) => crate::history::run_entries(
            std::slice::from_ref(&refund.result),
            rubric,
            true,
            &refund.revision,
            seq * SEQ_STRIDE,
        ),
        _ => Vec::new(),
    };
    if let Some(vantage) = of {
        for row in &mut rows {
            if let Some(id) = &mut row.revision {
                *id = qualified(vantage, id);
            }
        }
    }
    rows
}

impl SubjectState {
    /// Folds entry `seq` of vantage `vantage`'s log (another than the state's own, read with its
    /// bodies). Pure; each log's entries in order.
    pub fn fold_of(&mut self, rubric: &Rubric, vantage: &str, seq: u64, record: &Record) {
        match record {
            Record::Run(run) => {
                let rows = rows_of_record(rubric, Some(vantage), seq, record);
                self.fold_rows(rubric, EntryRef::Of(vantage.to_string(), seq), &rows);
                self.fold_run_facts(&RunFold::of(rubric, run), seq);
            }
            Record::Refund(_) => {
                let rows = rows_of_record(rubric, Some(vantage), seq, record);
                self.fold_rows(rubric, EntryRef::Of(vantage.to_string(), seq), &rows);
            }
            Record::Revision(r) => {
                let mut r = r.clone();
                r.id = qualified(vantage, &r.id);
                r.previous = r.previous.map(|p| qualified(vantage, &p));
                self.revisions.push(r);
            }
            Record::Subject(s) => {
                if let SubjectChange::Added { category, .. } = &s.change
                    && self.category.is_none()
                {
                    self.category = Some(category.clone());
                }
            }
            _ => {}
        }
        let at = self.others.entry(vantage.to_string()).or_default();
        *at = (*at).max(seq);
    }

    /// The inputs of this state's `/3` score of `url` from several vantages: every outcome of
    /// the days inside the horizon read again from its entry (`entries`), each excused by its own
    /// vantage's outage windows, in time order (then vantage, then seq); R1 and R2 through the
    /// quorum and the cloaking marks of each cycle's observations; then folded into day cells.
    /// The `quorum` block is in the inputs when the horizon holds several vantages' outcomes.
    pub fn score_inputs_vantages(
        &mut self,
        rubric: &Rubric,
        url: &str,
        score: ScoreAt<'_>,
        vantages: Vantages<'_>,
        entries: &mut EntriesOf<'_>,
    ) -> Result<Inputs, ScoreInputsError> {
        let as_of_ms = score.as_of_ms;
        let from_ms = as_of_ms - score.horizon_days as i64 * DAY_MS;
        let mut refs = BTreeSet::new();
        for (day, s) in self.days.range(summary::day_of(from_ms)..) {
            if day * DAY_MS < from_ms {
                continue;
            }
            if day * DAY_MS > as_of_ms {
                break;
            }
            refs.extend(s.entries.iter().cloned());
        }
        let refs: Vec<EntryRef> = refs.into_iter().collect();
        let read = entries(&refs)?;
        let none = Vec::new();
        let mut rows: Vec<(&str, i64, &HistoryEntry, Option<crate::evidence::Outcome>)> =
            Vec::new();
        for e in &read {
            let windows = if e.vantage == vantages.own {
                score.outages
            } else {
                vantages.outages.get(&e.vantage).unwrap_or(&none)
            };
            for row in &e.rows {
                let Some(at_ms) = crate::clock::ms_of(&row.at) else {
                    continue;
                };
                if summary::day_of(at_ms) * DAY_MS < from_ms || at_ms > as_of_ms {
                    continue;
                }
                let excused = (row.kind == Kind::Free)
                    .then(|| excused(&row.check, row.outcome, at_ms, windows))
                    .flatten()
                    .map(|_| row.outcome);
                rows.push((e.vantage.as_str(), at_ms, row, excused));
            }
        }
        rows.sort_by(|a, b| (a.1, a.0, a.2.seq).cmp(&(b.1, b.0, b.2.seq)));
        let names: Vec<&str> = rows.iter().map(|r| r.0).collect();
        let mut outcomes: Vec<summary::Outcome1<'_>> = rows
            .iter()
            .map(|(_, at_ms, row, excused)| outcome_of(row, *at_ms, *excused))
            .collect();
        let marks = cloaking_marks(&read, vantages.read.cycle_secs, vantages.cloaking);
        let cfg = vantages.read.quorum().as_of(as_of_ms);
        let quorum = excuse_outcomes(&mut outcomes, &names, &cfg, &marks);
        let mut cells: BTreeMap<i64, Vec<Cell>> = BTreeMap::new();
        for o in outcomes {
            summary::add_outcome(
                rubric,
                cells.entry(summary::day_of(o.at_ms)).or_default(),
                o,
            );
        }
        let days: Vec<summary::Day<'_>> = cells
            .iter()
            .map(|(day, cells)| summary::Day {
                day: *day,
                cells,
                sha256: summary::day_digest(cells),
            })
            .collect();
        // Each vantage numbers its own revisions: read together, oldest first.
        let mut revisions = self.revisions.clone();
        revisions.sort_by_key(|r| r.at_ms);
        let mut meta = self.inputs_meta(rubric, url, score, &revisions);
        meta.quorum = quorum;
        Ok(summary::inputs(meta, &days)?)
    }
}

/// The cloaking marks of the runs read: their free observations cut into groups from each
/// group's first, as long as cloaking compares (`max_skew_secs`, never more than a cycle), each
/// group of several vantages compared (`checks::cloaking`), each run not quoted the majority's
/// terms marked. Cut by the skew, not by the cycle: a cycle cut from its first observation can
/// hold the next cycle's runs too, and cloaking compares only each vantage's latest.
fn cloaking_marks(
    read: &[VantageEntry],
    cycle_secs: u64,
    ctx: &CloakingContext,
) -> Vec<CloakingMark> {
    let mut seen: Vec<&FreeObservation> = read.iter().filter_map(|e| e.free.as_ref()).collect();
    seen.sort_by(|a, b| (a.at, &a.vantage).cmp(&(b.at, &b.vantage)));
    let ats: Vec<i64> = seen.iter().map(|o| o.at).collect();
    let mut marks = Vec::new();
    for group in skew_groups(&ats, cycle_secs, ctx.max_skew_secs) {
        let cycle = &seen[group];
        let vantages: BTreeSet<&str> = cycle.iter().map(|o| o.vantage.as_str()).collect();
        if vantages.len() >= 2 {
            let (_, runs) = cloaking(cycle, ctx);
            marks.extend(runs.into_iter().map(|r| CloakingMark {
                checks: CloakingMark::checks_for(&r.fields),
                vantage: r.vantage,
                at: r.at,
                fields: r.fields,
            }));
        }
    }
    marks
}

/// The groups cloaking compares, as ranges of `ats` (times in s, sorted): each group from its
/// first time through `max_skew_secs` after it, never longer than a cycle.
fn skew_groups(ats: &[i64], cycle_secs: u64, max_skew_secs: i64) -> Vec<std::ops::Range<usize>> {
    let window = i64::try_from(cycle_secs)
        .unwrap_or(i64::MAX)
        .min(max_skew_secs.saturating_add(1))
        .max(1);
    let mut groups = Vec::new();
    let mut start = 0;
    while start < ats.len() {
        let from = ats[start];
        let end = start
            + ats[start..]
                .iter()
                .take_while(|at| **at < from.saturating_add(window))
                .count();
        groups.push(start..end);
        start = end;
    }
    groups
}

/// Brings `state` forward over every other vantage's entries of `url` after those it folded,
/// through `through` (each other vantage's log as far as the score reads it): vantage by vantage
/// (by name), each log in order.
pub fn fold_others(
    store: &dyn Store,
    rubric: &Rubric,
    url: &str,
    state: &mut SubjectState,
    through: &BTreeMap<String, u64>,
) -> Result<(), StoreError> {
    for (vantage, head) in through {
        let after = state.others.get(vantage).copied().unwrap_or(0);
        if *head > after {
            for mut e in store.vantage_subject_entries(vantage, url, &FOLDED_KINDS, after, *head)? {
                if let Record::Run(_) = &e.record {
                    store.restore_bodies(&mut e.record)?;
                }
                state.fold_of(rubric, vantage, e.seq, &e.record);
            }
        }
        state.others.insert(vantage.clone(), (*head).max(after));
    }
    Ok(())
}

/// The entries `refs` (of the state's own log, vantage `own`, and of the others) read for a
/// score: their rows and free observations (bodies put back: cloaking reads the 402s).
pub fn entries_of(
    store: &dyn Store,
    rubric: &Rubric,
    own: &str,
    refs: &[EntryRef],
) -> Result<Vec<VantageEntry>, StoreError> {
    let mut by_log: BTreeMap<Option<&str>, Vec<u64>> = BTreeMap::new();
    for r in refs {
        match r {
            EntryRef::Own(seq) => by_log.entry(None).or_default().push(*seq),
            EntryRef::Of(vantage, seq) => by_log.entry(Some(vantage)).or_default().push(*seq),
        }
    }
    let mut read = Vec::with_capacity(refs.len());
    for (log, seqs) in by_log {
        let entries = match log {
            None => store.entries_at(&seqs)?,
            Some(vantage) => store.vantage_entries_at(vantage, &seqs)?,
        };
        for mut e in entries {
            let free = match &mut e.record {
                Record::Run(_) => {
                    store.restore_bodies(&mut e.record)?;
                    match &e.record {
                        Record::Run(run) => Some(run.free.clone()),
                        _ => None,
                    }
                }
                _ => None,
            };
            read.push(VantageEntry {
                vantage: log.unwrap_or(own).to_string(),
                rows: rows_of_record(rubric, log, e.seq, &e.record),
                free,
            });
        }
    }
    Ok(read)
}

/// Each other vantage's outage entries folded once (a vantage's windows excuse its own
/// outcomes only).
#[derive(Debug, Clone, Default)]
pub struct VantageOutages(BTreeMap<String, OutageFold>);

impl VantageOutages {
    /// Each vantage's windows as of its log's entry in `through`, its outage entries read
    /// after those already folded.
    pub fn windows(
        &mut self,
        store: &dyn Store,
        through: &BTreeMap<String, u64>,
    ) -> Result<BTreeMap<String, Vec<OutageWindow>>, StoreError> {
        let mut windows = BTreeMap::new();
        for (vantage, head) in through {
            let fold = self.0.entry(vantage.clone()).or_default();
            if *head > fold.through_seq {
                for e in store.vantage_entries_of_kind(
                    vantage,
                    &[RecordKind::Outage],
                    fold.through_seq,
                    *head,
                )? {
                    fold.fold(e.seq, &e.record);
                }
                fold.through_seq = *head;
            }
            windows.insert(vantage.clone(), fold.windows(*head));
        }
        Ok(windows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::history::OutageOf;
    use crate::evidence::Outcome;
    use crate::score::input::Entry;

    const AS_OF_MS: i64 = 1_793_491_200_000; // 2026-11-01T00:00:00Z
    const CYCLE_MS: i64 = 900_000;

    /// A run's R1 row of vantage `v` in cycle `c` (of four before as_of), its entry `seq`.
    fn run(v: usize, c: i64, outcome: Outcome) -> (EntryRef, VantageEntry) {
        let seq = (c * 3 + v as i64 + 1) as u64;
        let at_ms = AS_OF_MS - (4 - c) * CYCLE_MS + v as i64 * 10_000;
        let name = format!("v{v}");
        let entry = if v == 0 {
            EntryRef::Own(seq)
        } else {
            EntryRef::Of(name.clone(), seq)
        };
        let row = HistoryEntry {
            seq: seq * SEQ_STRIDE,
            check: "R1".into(),
            outcome,
            at: crate::clock::rfc3339_ms(at_ms),
            kind: Kind::Free,
            revision: None,
            value: None,
            receipt: "0".repeat(64),
            note: None,
        };
        let read = VantageEntry {
            vantage: name,
            rows: vec![row],
            free: None,
        };
        (entry, read)
    }

    fn fails(history: &[Entry]) -> u32 {
        history
            .iter()
            .filter(|e| &*e.check == "R1" && e.outcome == Outcome::Fail)
            .map(|e| e.cell.as_ref().map_or(1, |c| c.count))
            .sum()
    }

    fn score(
        runs: Vec<(EntryRef, VantageEntry)>,
        outages: &BTreeMap<String, Vec<OutageWindow>>,
    ) -> Inputs {
        let rubric = Rubric::embedded_default();
        let mut state = SubjectState::new();
        let day = summary::day_of(AS_OF_MS - 1);
        let mut by_ref: BTreeMap<EntryRef, VantageEntry> = BTreeMap::new();
        for (entry, read) in runs {
            state
                .days
                .entry(day)
                .or_default()
                .entries
                .push(entry.clone());
            by_ref.insert(entry, read);
        }
        let read = VantagesRead {
            through: BTreeMap::from([("v1".into(), 12), ("v2".into(), 12)]),
            down_quorum: None,
            cycle_secs: (CYCLE_MS / 1000) as u64,
            cycles: crate::score::quorum::CycleCut::Grid,
        };
        let cloaking = CloakingContext::default();
        let vantages = Vantages {
            own: "v0",
            outages,
            read: &read,
            cloaking: &cloaking,
        };
        let at = ScoreAt {
            as_of_ms: AS_OF_MS,
            horizon_days: 180,
            outages: &[],
            category: Some("c"),
            population: Vec::new(),
        };
        state
            .score_inputs_vantages(&rubric, "https://s.example/x", at, vantages, &mut |refs| {
                Ok(refs.iter().map(|r| by_ref[r].clone()).collect())
            })
            .unwrap()
    }

    #[test]
    fn one_vantage_failing_alone_is_a_disagreement_and_each_vantages_outage_excuses_its_own() {
        // v2 fails R1 in every cycle; v0 and v1 pass, but in the last cycle v0 fails and v1's
        // control was failing (its outage window covers that cycle, and v1 failed too).
        let mut runs = Vec::new();
        for c in 0..4 {
            for v in 0..3 {
                let fail = v == 2 || (c == 3 && v < 2);
                runs.push(run(v, c, if fail { Outcome::Fail } else { Outcome::Pass }));
            }
        }
        let window = OutageWindow {
            from_ms: AS_OF_MS - CYCLE_MS - 60_000,
            to_ms: Some(AS_OF_MS - 60_000),
            of: OutageOf::Vantage,
        };
        let outages = BTreeMap::from([("v1".to_string(), vec![window]), ("v2".into(), vec![])]);
        let inputs = score(runs.clone(), &outages);
        let q = inputs
            .quorum
            .as_ref()
            .expect("a quorum block with several vantages");
        assert_eq!(q.vantages, ["v0", "v1", "v2"]);
        // Cycle 3: v1 excused by its own outage, so v0 and v2 probed it and both failed it.
        assert_eq!((q.cycles, q.failed_cycles), (4, 1), "{q:?}");
        let d = &q.disagreements;
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!((d[0].vantage.as_str(), d[0].saw), ("v2", Outcome::Fail));
        assert_eq!(
            (d[0].cycles, d[0].excused, d[0].failing, d[0].probed),
            (3, 3, 1, 3)
        );
        // What counts against the subject: the failed cycle's two fails (v0's and v2's), never
        // v2's lone fails, never v1's fail inside its own outage.
        assert_eq!(fails(&inputs.history), 2);

        // Without v1's outage its fail in the last cycle counts too: three.
        let inputs = score(runs, &BTreeMap::new());
        assert_eq!(inputs.quorum.as_ref().unwrap().failed_cycles, 1);
        assert_eq!(fails(&inputs.history), 3);
    }

    /// Cloaking compares runs quoted within the skew, not a whole cycle: a cycle of 3 hours
    /// whose replicas land a minute apart, then again two hours later (a vantage that came
    /// back), gives two groups, not one that holds both rounds.
    #[test]
    fn cloakings_groups_are_cut_by_the_skew_not_by_the_cycle() {
        let cycle = 3 * 3600;
        let skew = 120;
        let ats = [0, 20, 40, 7_200, 7_260, 10_800, 10_920, 10_921];
        assert_eq!(
            skew_groups(&ats, cycle, skew),
            [0..3, 3..5, 5..7, 7..8],
            "each group runs from its first time through the skew"
        );
        // A cycle shorter than the skew bounds the group instead.
        assert_eq!(skew_groups(&[0, 30, 59, 60, 61], 60, skew), [0..3, 3..5]);
        // A skew of zero: only runs of the same second are compared.
        assert_eq!(skew_groups(&[5, 5, 6], cycle, 0), [0..2, 2..3]);
        assert!(skew_groups(&[], cycle, skew).is_empty());
    }

    #[test]
    fn a_state_of_one_log_reads_as_before_and_its_days_keep_bare_seqs() {
        // One vantage's outcomes: no quorum block, every fail counts.
        let runs: Vec<_> = (0..4).map(|c| run(0, c, Outcome::Fail)).collect();
        let inputs = score(runs, &BTreeMap::new());
        assert!(inputs.quorum.is_none());
        assert_eq!(fails(&inputs.history), 4);
        // A day's entries: own seqs as bare numbers (the bytes of every state of one log).
        let day = super::super::DaySummary {
            cells: Vec::new(),
            entries: vec![EntryRef::Own(3), EntryRef::Of("v2".into(), 4)],
        };
        let text = serde_json::to_string(&day).unwrap();
        assert_eq!(text, r#"{"cells":[],"entries":[3,["v2",4]]}"#);
        let back: super::super::DaySummary = serde_json::from_str(&text).unwrap();
        assert_eq!(back, day);
        assert!(
            serde_json::from_str::<super::super::DaySummary>(r#"{"cells":[],"entries":["x"]}"#)
                .is_err()
        );
        // A state of one log has no `others` in its stored form.
        let mut state = SubjectState::new();
        let body = String::from_utf8(state.to_row("s").body).unwrap();
        assert!(!body.contains("others"), "{body}");
    }
}
