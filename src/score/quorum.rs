//! Quorum for down: R1 and R2 outcomes from several vantages read per probe cycle, a cycle failed
//! only when at least `k` of the vantages that probed it agree (`rubrics/README.md`, "Several
//! vantages: quorum for down"). Pure.
//!
//! With one vantage (every history before several vantages existed) nothing here runs: the
//! inputs are today's, byte for byte, and carry no `quorum` block.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::input::{HistoryEntry, InputError, parse_instant};
use crate::evidence::{CheckId, Outcome};

/// The checks read per cycle: reachability and the unpaid 402 (the `down` gate watches R1).
pub const QUORUM_CHECKS: [CheckId; 2] = [CheckId::R1, CheckId::R2];

/// How a history's outcomes are cut into cycles. A score records the cut it read under
/// (`VantagesRead::cycles`), so a score published before the grid still recomputes byte for byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CycleCut {
    /// The first cut, of the scores that record none: a cycle from the first outcome not yet in
    /// one through one interval after it. It took in the next cycle's earlier-placed runs.
    #[default]
    FromFirst,
    /// The intervals of one cycle's length from the Unix epoch: the daemon's schedule's cycles.
    Grid,
}

impl CycleCut {
    fn is_from_first(&self) -> bool {
        *self == CycleCut::FromFirst
    }
}

/// How cycles are cut and decided: `[schedule] down_quorum` and the free interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuorumConfig {
    /// `k`: how many of the vantages that probed a cycle must fail it; `None` is a majority of
    /// them (`n / 2 + 1`). Never more than the vantages that probed it (`min(k, n)`).
    pub k: Option<u32>,
    /// A cycle's length (ns): the schedule's free interval, within which every vantage probes
    /// each subject once (the daemon's vantages within a minute of each other). Cycles are the
    /// intervals of this length from the Unix epoch, as the daemon's schedule cuts them.
    pub window_ns: i128,
    pub cut: CycleCut,
    /// The score's time (ns), when known: a cycle on the grid that ended less than one interval
    /// before it is still **open** (a replica due late in it may not have landed, the others'
    /// may not have run yet), and is decided against every vantage of the horizon rather than
    /// those that probed it so far: one vantage's failure there waits for the others (its
    /// outcome read as unmeasured) instead of failing the cycle alone. `None`: every cycle is
    /// closed (a `/2` history, the old cut).
    pub as_of_ns: Option<i128>,
}

impl QuorumConfig {
    /// A cycle of `free_every_secs` (the daemon's `[schedule] free_every_secs`).
    pub fn new(k: Option<u32>, free_every_secs: u64) -> QuorumConfig {
        QuorumConfig {
            k,
            window_ns: i128::from(free_every_secs) * 1_000_000_000,
            cut: CycleCut::Grid,
            as_of_ns: None,
        }
    }

    /// Decided as of `as_of_ms`, the score's time (see [`QuorumConfig::as_of_ns`]).
    pub fn as_of(self, as_of_ms: i64) -> QuorumConfig {
        QuorumConfig {
            as_of_ns: Some(i128::from(as_of_ms) * 1_000_000),
            ..self
        }
    }

    fn k_of(&self, probed: u32) -> u32 {
        self.k.unwrap_or(probed / 2 + 1).clamp(1, probed.max(1))
    }
}

/// What a score of several vantages read (the score entry's `read`): each other vantage's log
/// through the seq given (the score's own log through its `through_seq`), R1 and R2 read through
/// the quorum of `down_quorum` over cycles of `cycle_secs`. `recompute` folds exactly this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VantagesRead {
    /// Each other vantage's name and the last entry of its log read.
    pub through: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down_quorum: Option<u32>,
    pub cycle_secs: u64,
    /// How the cycles were cut; absent in the scores published before the grid (`FromFirst`).
    #[serde(default, skip_serializing_if = "CycleCut::is_from_first")]
    pub cycles: CycleCut,
}

impl VantagesRead {
    /// The quorum these positions were read under.
    pub fn quorum(&self) -> QuorumConfig {
        QuorumConfig {
            cut: self.cycles,
            ..QuorumConfig::new(self.down_quorum, self.cycle_secs)
        }
    }
}

/// One pass or fail of a quorum check by one vantage.
#[derive(Debug, Clone, Copy)]
pub struct Probe<'a> {
    pub vantage: &'a str,
    pub check: CheckId,
    pub outcome: Outcome,
    pub at_ns: i128,
    pub seq: u64,
}

/// What the scorer records of the quorum (the inputs' `quorum`, copied to the score document):
/// present only when more than one vantage is in the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuorumDocument {
    /// The vantages in the history, sorted.
    pub vantages: Vec<String>,
    /// `[schedule] down_quorum` as configured; absent: a majority of the vantages that probed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down_quorum: Option<u32>,
    /// A cycle's length in seconds.
    pub cycle_secs: f64,
    /// Cycles decided (R1's and R2's together) and how many of them failed.
    pub cycles: u32,
    pub failed_cycles: u32,
    /// Each vantage's disagreements with its cycles' decisions, a row per run of consecutive
    /// cycles of one check in which it disagreed the same way.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disagreements: Vec<Disagreement>,
    /// Cloaking read into H2 or H3 (`apply_cloaking`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cloaking: Vec<CloakingMark>,
}

/// A vantage that saw a check's cycles otherwise than the quorum decided: its outcomes against
/// the decision are read as `unmeasured` (excused), never as the subject's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Disagreement {
    pub check: CheckId,
    pub vantage: String,
    /// What the vantage saw (`fail` or `pass`); the cycles were decided the other way.
    pub saw: Outcome,
    /// The first and latest cycle's first outcome, RFC 3339 (as the history writes its times).
    pub from: String,
    pub to: String,
    pub cycles: u32,
    /// Its outcomes read as `unmeasured`.
    pub excused: u32,
    /// In the latest of these cycles: vantages that failed it, vantages that probed it, and `k`.
    pub failing: u32,
    pub probed: u32,
    pub k: u32,
}

/// The quorum's decision over a history's probes.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Indices (into the probes given) of the outcomes read as `unmeasured`.
    pub excused: Vec<usize>,
    pub document: QuorumDocument,
}

/// Decides every cycle of R1 and R2 in `probes` (other checks are left alone). `None` when at
/// most one vantage is present: today's reading, untouched. `time_text` writes a cycle's start
/// as the history writes times.
pub fn decide(
    probes: &[Probe<'_>],
    cfg: &QuorumConfig,
    time_text: &dyn Fn(i128) -> String,
) -> Option<Decision> {
    let mut vantages: Vec<&str> = probes.iter().map(|p| p.vantage).collect();
    vantages.sort_unstable();
    vantages.dedup();
    if vantages.len() <= 1 {
        return None;
    }
    Some(decide_all(probes, cfg, time_text, vantages))
}

/// [`decide`] for a history known to hold several vantages (`vantages`, sorted: every one of
/// the history, whether or not it probed R1 or R2).
fn decide_all(
    probes: &[Probe<'_>],
    cfg: &QuorumConfig,
    time_text: &dyn Fn(i128) -> String,
    vantages: Vec<&str>,
) -> Decision {
    let window = cfg.window_ns.max(1);
    let mut excused = Vec::new();
    let (mut cycles, mut failed_cycles) = (0u32, 0u32);
    let mut disagreements: Vec<Disagreement> = Vec::new();
    for check in QUORUM_CHECKS {
        let mut order: Vec<usize> = (0..probes.len())
            .filter(|&i| {
                probes[i].check == check
                    && matches!(probes[i].outcome, Outcome::Pass | Outcome::Fail)
            })
            .collect();
        order.sort_by_key(|&i| (probes[i].at_ns, probes[i].seq));
        // (vantage, the cycle number it last disagreed in, its row) for merging runs of cycles.
        let mut open: BTreeMap<&str, (u32, usize)> = BTreeMap::new();
        let mut start = 0;
        let mut cycle_no = 0u32;
        while start < order.len() {
            // Cycles on the clock's grid, as the daemon's schedule cuts them
            // (`schedule::cycle_of`): every replica of a cycle is due inside it, at an offset
            // drawn afresh each cycle. A cut from a cycle's first outcome would take in the next
            // cycle's earlier-placed runs and leave a later one alone in a cycle of its own.
            let from_ns = probes[order[start]].at_ns;
            let grid = from_ns.div_euclid(window);
            let in_cycle = |at_ns: i128| match cfg.cut {
                CycleCut::Grid => at_ns.div_euclid(window) == grid,
                CycleCut::FromFirst => at_ns < from_ns.saturating_add(window),
            };
            let end = start
                + order[start..]
                    .iter()
                    .take_while(|&&i| in_cycle(probes[i].at_ns))
                    .count();
            // Per vantage: fails, passes, its outcomes.
            let mut by_vantage: BTreeMap<&str, (u32, u32, Vec<usize>)> = BTreeMap::new();
            for &i in &order[start..end] {
                let v = by_vantage.entry(probes[i].vantage).or_default();
                match probes[i].outcome {
                    Outcome::Fail => v.0 += 1,
                    _ => v.1 += 1,
                }
                v.2.push(i);
            }
            let probed = by_vantage.len() as u32;
            // An open cycle (see `QuorumConfig::as_of_ns`) counts every vantage of the horizon.
            let still_open = cfg.cut == CycleCut::Grid
                && cfg
                    .as_of_ns
                    .is_some_and(|as_of| grid.saturating_add(2).saturating_mul(window) > as_of);
            let k = if still_open {
                cfg.k_of(probed.max(vantages.len() as u32))
            } else {
                cfg.k_of(probed)
            };
            let failing = by_vantage.values().filter(|(f, p, _)| f > p).count() as u32;
            let failed = failing >= k;
            cycles += 1;
            failed_cycles += u32::from(failed);
            for (vantage, (fails, passes, own)) in &by_vantage {
                let saw_fail = fails > passes;
                if saw_fail == failed {
                    continue;
                }
                let against = if failed { Outcome::Pass } else { Outcome::Fail };
                let mine: Vec<usize> = own
                    .iter()
                    .copied()
                    .filter(|&i| probes[i].outcome == against)
                    .collect();
                let n = mine.len() as u32;
                excused.extend(mine);
                let at = time_text(from_ns);
                match open.get(vantage) {
                    Some(&(last, row))
                        if last + 1 == cycle_no && disagreements[row].saw == against =>
                    {
                        let d = &mut disagreements[row];
                        d.to = at;
                        d.cycles += 1;
                        d.excused += n;
                        (d.failing, d.probed, d.k) = (failing, probed, k);
                        open.insert(vantage, (cycle_no, row));
                    }
                    _ => {
                        disagreements.push(Disagreement {
                            check,
                            vantage: vantage.to_string(),
                            saw: against,
                            from: at.clone(),
                            to: at,
                            cycles: 1,
                            excused: n,
                            failing,
                            probed,
                            k,
                        });
                        open.insert(vantage, (cycle_no, disagreements.len() - 1));
                    }
                }
            }
            cycle_no += 1;
            start = end;
        }
    }
    excused.sort_unstable();
    Decision {
        excused,
        document: QuorumDocument {
            vantages: vantages.into_iter().map(str::to_string).collect(),
            down_quorum: cfg.k,
            cycle_secs: cfg.window_ns as f64 / 1e9,
            cycles,
            failed_cycles,
            disagreements,
            cloaking: Vec::new(),
        },
    }
}

/// The sorted, distinct vantages of a history.
fn distinct<'a>(vantages: &[&'a str]) -> Vec<&'a str> {
    let mut all = vantages.to_vec();
    all.sort_unstable();
    all.dedup();
    all
}

/// The note an excused outcome carries.
fn excuse_note(d: &QuorumDocument, check: CheckId, vantage: &str, was: Outcome) -> String {
    let row = d
        .disagreements
        .iter()
        .rev()
        .find(|r| r.check == check && r.vantage == vantage);
    let (failing, probed, k) = row.map_or((0, 0, 0), |r| (r.failing, r.probed, r.k));
    format!(
        "quorum: {vantage}'s {was} disagrees with its cycle ({failing} of {probed} vantages \
         failed it, k = {k}); read as unmeasured"
    )
}

/// A `/2` history from several vantages (`vantages[i]` is the vantage of `history[i]`, the
/// `vantage` of the receipt it was recorded from) read through the quorum: each R1 or R2 outcome
/// against its cycle's decision becomes `unmeasured` with a note naming the outcome it replaces.
/// Returns the `quorum` block for the inputs, or `None` (nothing changed) with one vantage.
pub fn apply_to_history(
    history: &mut [HistoryEntry],
    vantages: &[&str],
    cfg: &QuorumConfig,
) -> Result<Option<QuorumDocument>, InputError> {
    if history.len() != vantages.len() {
        return Err(InputError::Invalid(format!(
            "{} history entries but {} vantages",
            history.len(),
            vantages.len()
        )));
    }
    let mut probes = Vec::with_capacity(history.len());
    let mut texts: BTreeMap<i128, String> = BTreeMap::new();
    for (h, (e, v)) in history.iter().zip(vantages).enumerate() {
        // Other checks are not read; a check this build does not know is not a quorum check.
        let Ok(check) = e.check.parse::<CheckId>() else {
            continue;
        };
        if !QUORUM_CHECKS.contains(&check) {
            continue;
        }
        let at = parse_instant("history entry", &e.at)?;
        texts.entry(at.ns).or_insert_with(|| e.at.clone());
        probes.push((
            Probe {
                vantage: v,
                check,
                outcome: e.outcome,
                at_ns: at.ns,
                seq: e.seq,
            },
            h,
        ));
    }
    let all = distinct(vantages);
    if all.len() <= 1 {
        return Ok(None);
    }
    let only: Vec<Probe<'_>> = probes.iter().map(|(p, _)| *p).collect();
    let text = |ns: i128| texts.get(&ns).cloned().unwrap_or_default();
    let decision = decide_all(&only, cfg, &text, all);
    for &i in &decision.excused {
        let (p, h) = probes[i];
        let e = &mut history[h];
        let note = excuse_note(&decision.document, p.check, p.vantage, e.outcome);
        e.outcome = Outcome::Unmeasured;
        e.note = Some(match e.note.take() {
            Some(old) => format!("{old}; {note}"),
            None => note,
        });
    }
    Ok(Some(decision.document))
}

/// Cloaking read into the score (`rubrics/README.md`): the run of `vantage` at `at` was quoted
/// other terms than the other vantages at the same time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloakingMark {
    pub vantage: String,
    /// The run's time, as its history entries write it.
    pub at: String,
    /// The fields that differed: `pay_to`, `amount`, `asset`, `network`, `scheme`, `accepts`.
    pub fields: Vec<String>,
    /// The check failed for it: H3 (payee, asset, network, scheme, entries) or H2 (amount).
    pub checks: Vec<CheckId>,
}

impl CloakingMark {
    /// The checks a difference of these fields fails: the amount is H2's (price), every other
    /// term H3's (the payee's terms), whose `payto_changed` gate then binds.
    pub fn checks_for(fields: &[String]) -> Vec<CheckId> {
        let mut checks = Vec::new();
        if fields.iter().any(|f| f != "amount") {
            checks.push(CheckId::H3);
        }
        if fields.iter().any(|f| f == "amount") {
            checks.push(CheckId::H2);
        }
        checks
    }
}

/// Each cloaking mark fails its run's H2 or H3 entry (of `vantages[i]`, at the run's time) with
/// a note; the marks are listed in the `quorum` block. Only for a history of several vantages
/// (`quorum` is `Some`): one vantage cannot see cloaking.
pub fn apply_cloaking(
    history: &mut [HistoryEntry],
    vantages: &[&str],
    marks: &[CloakingMark],
    quorum: &mut Option<QuorumDocument>,
) {
    let Some(q) = quorum else { return };
    for m in marks {
        let mut applied = false;
        for (e, v) in history.iter_mut().zip(vantages) {
            if *v != m.vantage || e.at != m.at || !m.checks.iter().any(|c| e.check == c.as_str()) {
                continue;
            }
            let note = format!(
                "cloaking: {} was quoted another {} than the other vantages at the same time",
                m.vantage,
                m.fields.join(", ")
            );
            e.outcome = Outcome::Fail;
            e.note = Some(match e.note.take() {
                Some(old) => format!("{old}; {note}"),
                None => note,
            });
            applied = true;
        }
        if applied {
            q.cloaking.push(m.clone());
        }
    }
}

/// The daemon's hook for several vantages under method `/2`: `meta` (its history empty) with the
/// history entries of every vantage's runs, each with its vantage, read through the quorum and
/// the cloaking marks. One vantage: `meta` with the entries, as before (no `quorum` block).
pub fn inputs_from_vantages(
    mut meta: super::input::InputsDocument,
    entries: Vec<(String, HistoryEntry)>,
    cfg: &QuorumConfig,
    cloaking: &[CloakingMark],
) -> Result<super::input::InputsDocument, InputError> {
    if !meta.history.is_empty() {
        return Err(InputError::Invalid(
            "the history comes from the vantages' entries".into(),
        ));
    }
    let (vantages, mut history): (Vec<String>, Vec<HistoryEntry>) = entries.into_iter().unzip();
    let names: Vec<&str> = vantages.iter().map(String::as_str).collect();
    let mut quorum = apply_to_history(&mut history, &names, cfg)?;
    apply_cloaking(&mut history, &names, cloaking, &mut quorum);
    meta.history = history;
    meta.quorum = quorum;
    Ok(meta)
}

/// The daemon's hook under method `/3`: a horizon's outcomes (in ledger order, `vantages[i]` the
/// vantage of `outcomes[i]`) read through the quorum before they are folded into cells: each R1
/// or R2 outcome against its cycle's decision becomes `unmeasured` with `excused` naming it (as
/// our outages' are), and each cloaking mark fails its run's H3 or H2 outcome. Returns the
/// `quorum` block for the inputs' meta (`summary::inputs`), `None` with one vantage (nothing
/// changed).
pub fn excuse_outcomes(
    outcomes: &mut [super::summary::Outcome1<'_>],
    vantages: &[&str],
    cfg: &QuorumConfig,
    cloaking: &[CloakingMark],
) -> Option<QuorumDocument> {
    let all = distinct(vantages);
    if outcomes.len() != vantages.len() || all.len() <= 1 {
        return None;
    }
    let mut at: Vec<usize> = Vec::new();
    let probes: Vec<Probe<'_>> = outcomes
        .iter()
        .zip(vantages)
        .enumerate()
        .filter_map(|(i, (o, v))| {
            let check = o.check.parse::<CheckId>().ok()?;
            QUORUM_CHECKS.contains(&check).then(|| {
                at.push(i);
                Probe {
                    vantage: v,
                    check,
                    outcome: o.outcome,
                    at_ns: i128::from(o.at_ms) * 1_000_000,
                    seq: o.seq,
                }
            })
        })
        .collect();
    let text = |ns: i128| {
        let ms = (ns / 1_000_000) as i64;
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
            .ok()
            .and_then(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
            .unwrap_or_default()
    };
    let mut decision = decide_all(&probes, cfg, &text, all);
    for i in decision.excused {
        let o = &mut outcomes[at[i]];
        o.excused = Some(o.outcome);
        o.outcome = Outcome::Unmeasured;
    }
    for m in cloaking {
        let Ok(when) = parse_instant("cloaking mark", &m.at) else {
            continue;
        };
        let mut applied = false;
        for (o, v) in outcomes.iter_mut().zip(vantages) {
            if *v == m.vantage
                && i128::from(o.at_ms) * 1_000_000 == when.ns
                && m.checks.iter().any(|c| o.check == c.as_str())
            {
                o.outcome = Outcome::Fail;
                o.excused = None;
                applied = true;
            }
        }
        if applied {
            decision.document.cloaking.push(m.clone());
        }
    }
    Some(decision.document)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rubric::{Rubric, Verdict};
    use crate::score::input::{Inputs, InputsDocument};
    use crate::score::montecarlo::Sampler;
    use crate::score::{ScoreDocument, score};

    const AS_OF_S: i64 = 1_793_491_200; // 2026-11-01T00:00:00Z
    const CYCLE_S: i64 = 900;

    fn text(s: i64) -> String {
        time::OffsetDateTime::from_unix_timestamp(s)
            .unwrap()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    }

    fn meta() -> InputsDocument {
        let rubric = Rubric::embedded_default();
        serde_json::from_value(serde_json::json!({
            "rubric_sha256": rubric.sha256(), "rubric_version": rubric.version,
            "as_of": text(AS_OF_S),
            "subject": {"id": "s", "url": "https://api.example/x", "category": "search",
                        "price_usd": "0.01", "revisions": []},
            "history": [], "provenance": "synthetic_fixture"
        }))
        .unwrap()
    }

    fn entry(seq: u64, check: &str, outcome: Outcome, at: i64) -> HistoryEntry {
        HistoryEntry {
            seq,
            check: check.into(),
            outcome,
            at: text(at),
            kind: crate::rubric::Kind::Free,
            revision: None,
            value: None,
            receipt: "ab".repeat(32),
            note: None,
        }
    }

    /// `hours` of cycles up to as_of: each of `vantages` probes once a cycle, staggered by 5
    /// minutes, R1, R2 and H3 each; `fails(v, t)` says whether vantage `v` fails at `t`.
    fn timeline(
        vantages: &[&str],
        hours: i64,
        fails: &dyn Fn(&str, i64) -> bool,
    ) -> Vec<(String, HistoryEntry)> {
        placed(vantages, hours * 3600 / CYCLE_S, &|_, i| i * 300, fails)
    }

    /// `cycles` cycles up to as_of, vantage `i`'s run of cycle `c` at `offset(c, i)` seconds
    /// into the cycle.
    fn placed(
        vantages: &[&str],
        cycles: i64,
        offset: &dyn Fn(i64, i64) -> i64,
        fails: &dyn Fn(&str, i64) -> bool,
    ) -> Vec<(String, HistoryEntry)> {
        let mut out = Vec::new();
        let mut seq = 0;
        let start = AS_OF_S - cycles * CYCLE_S;
        for c in 0..cycles {
            for (i, v) in vantages.iter().enumerate() {
                let at = start + c * CYCLE_S + offset(c, i as i64);
                let o = if fails(v, at) {
                    Outcome::Fail
                } else {
                    Outcome::Pass
                };
                for check in ["R1", "R2"] {
                    out.push((v.to_string(), entry(seq, check, o, at)));
                    seq += 1;
                }
                let h3 = if o == Outcome::Pass {
                    Outcome::Pass
                } else {
                    Outcome::Unmeasured
                };
                out.push((v.to_string(), entry(seq, "H3", h3, at)));
                seq += 1;
            }
        }
        out
    }

    fn cfg(k: Option<u32>) -> QuorumConfig {
        QuorumConfig::new(k, CYCLE_S as u64)
    }

    fn scored(doc: InputsDocument) -> ScoreDocument {
        let inputs = Inputs::from_document(doc).unwrap();
        score(
            &Rubric::embedded_default(),
            &inputs,
            Sampler::InverseCdfTable,
        )
        .unwrap()
    }

    fn down(doc: &ScoreDocument) -> bool {
        doc.gates.iter().any(|g| g.flag == "down" && g.binding)
    }

    fn r1_fails(doc: &ScoreDocument) -> u32 {
        doc.dimensions
            .iter()
            .flat_map(|d| &d.checks)
            .find(|c| c.id == CheckId::R1)
            .unwrap()
            .fails
    }

    #[test]
    fn one_vantage_is_todays_reading_byte_for_byte() {
        let entries = timeline(&["solo"], 80, &|_, t| t > AS_OF_S - 10 * 3600);
        let plain: Vec<HistoryEntry> = entries.iter().map(|(_, e)| e.clone()).collect();
        let via = inputs_from_vantages(meta(), entries, &cfg(None), &[]).unwrap();
        assert_eq!(via.history, plain);
        assert!(via.quorum.is_none());
        let mut direct = meta();
        direct.history = plain;
        let (a, b) = (scored(via), scored(direct));
        assert_eq!(a.to_bytes().unwrap(), b.to_bytes().unwrap());
        assert!(!a.to_bytes().unwrap().windows(8).any(|w| w == b"\"quorum\""));
    }

    #[test]
    fn a_regional_outage_is_excused_shown_and_never_down() {
        let entries = timeline(&["a", "b", "c"], 80, &|v, _| v == "b");
        // Without the quorum every one of b's fails would count, and R1 would be a third failed.
        let mut raw = meta();
        raw.history = entries.iter().map(|(_, e)| e.clone()).collect();
        assert!(r1_fails(&scored(raw)) > 300);

        let doc = inputs_from_vantages(meta(), entries, &cfg(None), &[]).unwrap();
        let q = doc.quorum.clone().unwrap();
        assert_eq!(q.vantages, ["a", "b", "c"]);
        assert_eq!(q.cycles, 2 * 320);
        assert_eq!(q.failed_cycles, 0);
        // One row per check for the whole outage: consecutive cycles merge.
        assert_eq!(q.disagreements.len(), 2, "{:?}", q.disagreements);
        for d in &q.disagreements {
            assert_eq!((d.vantage.as_str(), d.saw), ("b", Outcome::Fail));
            assert_eq!((d.cycles, d.excused), (320, 320));
            assert_eq!((d.failing, d.probed, d.k), (1, 3, 2));
            assert_eq!(d.from, text(AS_OF_S - 80 * 3600));
        }
        let excused = doc
            .history
            .iter()
            .filter(|e| {
                e.note
                    .as_deref()
                    .is_some_and(|n| n.starts_with("quorum: b's fail"))
            })
            .count();
        assert_eq!(excused, 640);
        let s = scored(doc);
        assert_eq!(r1_fails(&s), 0);
        assert!(!down(&s));
        assert_ne!(s.verdict.verdict, Verdict::Down);
        assert_eq!(s.quorum.as_ref(), Some(&q), "shown in the score document");
    }

    #[test]
    fn every_vantage_failing_past_72_hours_is_down_and_not_before() {
        let from = AS_OF_S - 73 * 3600;
        let entries = timeline(&["a", "b", "c"], 80, &|_, t| t >= from);
        let doc = inputs_from_vantages(meta(), entries, &cfg(None), &[]).unwrap();
        let q = doc.quorum.clone().unwrap();
        assert!(q.disagreements.is_empty(), "{:?}", q.disagreements);
        assert_eq!(q.failed_cycles, 2 * 73 * 4);
        let s = scored(doc);
        assert!(down(&s));
        assert_eq!(s.verdict.verdict, Verdict::Down);

        let from = AS_OF_S - 70 * 3600;
        let entries = timeline(&["a", "b", "c"], 80, &|_, t| t >= from);
        let s = scored(inputs_from_vantages(meta(), entries, &cfg(None), &[]).unwrap());
        assert!(!down(&s), "70 hours is not yet down");
    }

    #[test]
    fn a_majority_fails_the_cycle_and_the_passing_minority_is_excused() {
        let from = AS_OF_S - 75 * 3600;
        let entries = timeline(&["a", "b", "c"], 80, &|v, t| v != "c" && t >= from);
        // Without the quorum c's passes break the run of fails every cycle: never down.
        let mut raw = meta();
        raw.history = entries.iter().map(|(_, e)| e.clone()).collect();
        assert!(!down(&scored(raw)));
        let doc = inputs_from_vantages(meta(), entries, &cfg(None), &[]).unwrap();
        let q = doc.quorum.clone().unwrap();
        assert_eq!(q.failed_cycles, 2 * 75 * 4);
        assert!(
            q.disagreements
                .iter()
                .all(|d| d.vantage == "c" && d.saw == Outcome::Pass && d.cycles == 300)
        );
        assert!(down(&scored(doc)));
    }

    #[test]
    fn down_quorum_k_is_read_and_never_exceeds_the_vantages_that_probed() {
        let from = AS_OF_S - 75 * 3600;
        let two_of_three = timeline(&["a", "b", "c"], 80, &|v, t| v != "c" && t >= from);
        let q = inputs_from_vantages(meta(), two_of_three, &cfg(Some(3)), &[])
            .unwrap()
            .quorum
            .unwrap();
        assert_eq!((q.failed_cycles, q.down_quorum), (0, Some(3)));
        let one_of_three = timeline(&["a", "b", "c"], 80, &|v, t| v == "a" && t >= from);
        let q = inputs_from_vantages(meta(), one_of_three, &cfg(Some(1)), &[])
            .unwrap()
            .quorum
            .unwrap();
        assert_eq!(q.failed_cycles, 2 * 75 * 4);
        // k = 5 with three vantages: all three must fail.
        let all = timeline(&["a", "b", "c"], 80, &|_, t| t >= from);
        let q = inputs_from_vantages(meta(), all, &cfg(Some(5)), &[])
            .unwrap()
            .quorum
            .unwrap();
        assert_eq!(q.failed_cycles, 2 * 75 * 4);
        assert!(q.disagreements.iter().all(|d| d.k == 3));
    }

    /// The daemon's placement (`schedule::replica_due_ms`): each cycle's runs at an offset drawn
    /// afresh, the replicas 20 s apart. A late-placed cycle followed by an early-placed one is
    /// the case a cut from each cycle's first outcome got wrong (it took the next cycle's first
    /// run in and left the last one alone, a cycle of one failing vantage).
    /// A cycle still open when scored (it ended less than one interval before): one vantage's
    /// failure there waits for the others instead of failing the cycle alone, a failure of the
    /// quorum of every vantage fails it at once, and once the cycle has closed with only that
    /// one vantage's run, the cycle is that vantage's.
    #[test]
    fn an_open_cycle_waits_for_the_quorum_of_every_vantage() {
        let last = |fails: &[&str]| {
            let mut entries = placed(&["a", "b", "c"], 3, &|_, i| 100 + i * 20, &|_, _| false);
            // The cycle from as_of: only `fails` have run in it, failing, 100 s in.
            for (i, v) in fails.iter().enumerate() {
                for check in ["R1", "R2"] {
                    let seq = 1000 + entries.len() as u64;
                    let e = entry(seq, check, Outcome::Fail, AS_OF_S + 100 + i as i64);
                    entries.push((v.to_string(), e));
                }
            }
            entries
        };
        let quorum = |entries, as_of_s: i64| {
            let cfg = cfg(None).as_of(as_of_s * 1000);
            let doc = inputs_from_vantages(meta(), entries, &cfg, &[]).unwrap();
            doc.quorum.unwrap()
        };
        // c alone so far: the cycle is not failed; c's fails are read as unmeasured, against
        // a quorum of two of the three vantages.
        let q = quorum(last(&["c"]), AS_OF_S + 150);
        assert_eq!((q.cycles, q.failed_cycles), (8, 0));
        assert_eq!(q.disagreements.len(), 2, "{q:?}");
        for d in &q.disagreements {
            assert_eq!((d.vantage.as_str(), d.saw), ("c", Outcome::Fail));
            assert_eq!((d.failing, d.probed, d.k, d.excused), (1, 1, 2, 1));
        }
        // Still open up to one interval after its end.
        let q = quorum(last(&["c"]), AS_OF_S + 2 * CYCLE_S - 1);
        assert_eq!(q.failed_cycles, 0);
        // Closed with c's run alone: that cycle is c's, failed, as with one vantage.
        let q = quorum(last(&["c"]), AS_OF_S + 2 * CYCLE_S);
        assert_eq!((q.failed_cycles, q.disagreements.len()), (2, 0), "{q:?}");
        // Two of the three fail while it is open: failed at once, no one excused.
        let q = quorum(last(&["a", "c"]), AS_OF_S + 150);
        assert_eq!((q.failed_cycles, q.disagreements.len()), (2, 0), "{q:?}");
        // The cycles before, long closed, are decided by those that probed them, as ever.
        let old = quorum(last(&[]), AS_OF_S + 150);
        assert_eq!((old.cycles, old.failed_cycles), (6, 0));
    }

    #[test]
    fn cycles_are_the_schedules_whatever_the_offset_of_each_cycles_runs() {
        let cycles = 40;
        // The first cut: a cycle from 500 s runs to 1,400 s and takes in the next cycle's runs
        // at 1,360 and 1,380 s; the one at 1,400 s is alone in a cycle.
        let offset = |c: i64, i: i64| if c % 2 == 0 { 500 } else { 460 } + i * 20;
        let entries = placed(&["a", "b", "c"], cycles, &offset, &|v, _| v == "c");
        let doc = inputs_from_vantages(meta(), entries, &cfg(None), &[]).unwrap();
        let q = doc.quorum.clone().unwrap();
        assert_eq!((q.cycles, q.failed_cycles), (2 * cycles as u32, 0));
        for d in &q.disagreements {
            assert_eq!((d.vantage.as_str(), d.saw), ("c", Outcome::Fail));
            assert_eq!((d.failing, d.probed, d.k), (1, 3, 2));
        }
        assert_eq!(
            q.disagreements.iter().map(|d| d.excused).sum::<u32>(),
            2 * cycles as u32
        );
        assert_eq!(r1_fails(&scored(doc)), 0);

        // A score that records no cut was read from each cycle's first outcome, and recomputes
        // so: here that cut leaves some of c's runs alone in a cycle, failed.
        let read: VantagesRead =
            serde_json::from_str(r#"{"through": {"b": 1}, "cycle_secs": 900}"#).unwrap();
        assert_eq!(read.cycles, CycleCut::FromFirst);
        let entries = placed(&["a", "b", "c"], cycles, &offset, &|v, _| v == "c");
        let old = inputs_from_vantages(meta(), entries, &read.quorum(), &[]).unwrap();
        let old = old.quorum.unwrap();
        assert!(
            old.failed_cycles > 0,
            "{:?}",
            (old.cycles, old.failed_cycles)
        );
        // A new read writes its cut; the old one is written as before, without it.
        let grid = VantagesRead {
            cycles: CycleCut::Grid,
            ..read.clone()
        };
        assert!(
            serde_json::to_string(&grid)
                .unwrap()
                .contains(r#""cycles":"grid""#)
        );
        assert!(!serde_json::to_string(&read).unwrap().contains("cycles"));
    }

    #[test]
    fn disagreements_merge_only_over_consecutive_cycles() {
        // b fails cycles 0..3, agrees in cycle 3, fails again from cycle 4.
        let start = AS_OF_S - 2 * 3600;
        let entries = timeline(&["a", "b", "c"], 2, &|v, t| {
            v == "b" && (t - start) / CYCLE_S != 3
        });
        let q = inputs_from_vantages(meta(), entries, &cfg(None), &[])
            .unwrap()
            .quorum
            .unwrap();
        let r1: Vec<(u32, &str)> = q
            .disagreements
            .iter()
            .filter(|d| d.check == CheckId::R1)
            .map(|d| (d.cycles, d.from.as_str()))
            .collect();
        assert_eq!(r1.len(), 2, "{r1:?}");
        assert_eq!(r1[0].0, 3);
        assert_eq!(r1[1].0, 4);
    }

    #[test]
    fn cloaking_fails_h3_for_the_cloaked_run_only_with_several_vantages() {
        let entries = timeline(&["a", "b", "c"], 4, &|_, _| false);
        let at = text(AS_OF_S - 3600);
        let mark = CloakingMark {
            vantage: "a".into(),
            at: at.clone(),
            fields: vec!["pay_to".into()],
            checks: CloakingMark::checks_for(&["pay_to".into()]),
        };
        let doc =
            inputs_from_vantages(meta(), entries, &cfg(None), std::slice::from_ref(&mark)).unwrap();
        let failed: Vec<&HistoryEntry> = doc
            .history
            .iter()
            .filter(|e| e.check == "H3" && e.outcome == Outcome::Fail)
            .collect();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].at, at);
        assert_eq!(
            doc.quorum.as_ref().unwrap().cloaking,
            std::slice::from_ref(&mark)
        );
        let s = scored(doc);
        assert!(
            s.gates
                .iter()
                .any(|g| g.flag == "payto_changed" && g.binding)
        );
        assert_eq!(s.verdict.verdict, Verdict::Caution);

        // One vantage: no quorum block, nothing applied.
        let solo = timeline(&["a"], 4, &|_, _| false);
        let doc = inputs_from_vantages(meta(), solo, &cfg(None), &[mark]).unwrap();
        assert!(doc.history.iter().all(|e| e.outcome == Outcome::Pass));
        assert!(doc.quorum.is_none());
        // The amount is H2's, the rest H3's.
        assert_eq!(CloakingMark::checks_for(&["amount".into()]), [CheckId::H2]);
        assert_eq!(
            CloakingMark::checks_for(&["amount".into(), "asset".into()]),
            [CheckId::H3, CheckId::H2]
        );
    }

    #[test]
    fn cells_outcomes_are_excused_as_outages_are() {
        let rubric = Rubric::embedded_default();
        let (mut outcomes, mut vantages) = (Vec::new(), Vec::new());
        for (i, v) in ["a", "b", "c"].iter().enumerate() {
            outcomes.push(crate::score::summary::Outcome1 {
                seq: i as u64,
                check: "R1",
                outcome: if *v == "b" {
                    Outcome::Fail
                } else {
                    Outcome::Pass
                },
                kind: crate::rubric::Kind::Free,
                revision: None,
                value: None,
                at_ms: AS_OF_S * 1000 - 600_000 + i as i64 * 1000,
                excused: None,
            });
            vantages.push(*v);
        }
        outcomes.push(crate::score::summary::Outcome1 {
            seq: 3,
            check: "H3",
            outcome: Outcome::Pass,
            kind: crate::rubric::Kind::Free,
            revision: None,
            value: None,
            at_ms: AS_OF_S * 1000 - 600_000,
            excused: None,
        });
        vantages.push("a");
        let mark = CloakingMark {
            vantage: "a".into(),
            at: text(AS_OF_S - 600),
            fields: vec!["pay_to".into()],
            checks: vec![CheckId::H3],
        };
        let q = excuse_outcomes(&mut outcomes, &vantages, &cfg(None), &[mark]).unwrap();
        assert_eq!(q.disagreements.len(), 1);
        assert_eq!(q.cloaking.len(), 1);
        assert_eq!(outcomes[3].outcome, Outcome::Fail);
        assert_eq!(outcomes[1].outcome, Outcome::Unmeasured);
        assert_eq!(outcomes[1].excused, Some(Outcome::Fail));
        let mut cells = Vec::new();
        for o in outcomes {
            crate::score::summary::add_outcome(&rubric, &mut cells, o);
        }
        assert!(
            cells
                .iter()
                .all(|c| c.check != "R1" || c.outcome != Outcome::Fail)
        );
        assert!(
            cells
                .iter()
                .any(|c| c.check == "R1" && c.excused == Some(Outcome::Fail))
        );
        // One vantage: untouched.
        let mut one = vec![crate::score::summary::Outcome1 {
            seq: 0,
            check: "R1",
            outcome: Outcome::Fail,
            kind: crate::rubric::Kind::Free,
            revision: None,
            value: None,
            at_ms: 0,
            excused: None,
        }];
        assert!(excuse_outcomes(&mut one, &["a"], &cfg(None), &[]).is_none());
        assert_eq!(one[0].outcome, Outcome::Fail);
    }

    #[test]
    fn down_quorum_is_read_from_the_schedule_and_zero_is_refused() {
        let read = |t: &str| toml::from_str::<crate::config::ScheduleConfig>(t);
        let q = read("down_quorum = 3\nfree_every_secs = 600")
            .unwrap()
            .quorum();
        assert_eq!(
            q,
            QuorumConfig {
                k: Some(3),
                window_ns: 600_000_000_000,
                cut: CycleCut::Grid,
                as_of_ns: None,
            }
        );
        assert_eq!(read("").unwrap().quorum().k, None, "a majority by default");
        assert!(read("down_quorum = 0").is_err());
        assert!(read("down_quorum = 65").is_err());
    }

    #[test]
    fn hostile_histories_are_refused_or_read_never_a_panic() {
        // Mismatched lengths, a time that does not read, a zero window.
        let mut h = vec![entry(0, "R1", Outcome::Fail, AS_OF_S)];
        assert!(apply_to_history(&mut h, &[], &cfg(None)).is_err());
        let mut bad = vec![
            entry(0, "R1", Outcome::Fail, AS_OF_S),
            entry(1, "R1", Outcome::Pass, AS_OF_S),
        ];
        bad[0].at = "yesterday".into();
        assert!(apply_to_history(&mut bad, &["a", "b"], &cfg(None)).is_err());
        let mut h = vec![
            entry(0, "R1", Outcome::Fail, AS_OF_S),
            entry(1, "R1", Outcome::Pass, AS_OF_S),
        ];
        let zero = QuorumConfig {
            k: Some(0),
            window_ns: 0,
            cut: CycleCut::Grid,
            as_of_ns: Some(0),
        };
        let q = apply_to_history(&mut h, &["a", "b"], &zero)
            .unwrap()
            .unwrap();
        assert_eq!(q.cycles, 1);
        // An unknown check is not a quorum check.
        let mut h = vec![
            entry(0, "Z9", Outcome::Fail, AS_OF_S),
            entry(1, "R1", Outcome::Pass, AS_OF_S),
        ];
        assert!(
            apply_to_history(&mut h, &["a", "b"], &cfg(None))
                .unwrap()
                .is_some()
        );
        assert_eq!(h[0].outcome, Outcome::Fail);
    }
}
