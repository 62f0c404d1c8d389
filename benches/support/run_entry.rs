//! A run's entry as the daemon appends it, shared by the benches that append runs.

use x402_probe::checks::history::declared;
use x402_probe::daemon::pipeline::run_index;
use x402_probe::evidence::run::RunRecord;
use x402_probe::ledger::record::Record;
use x402_probe::rubric::Rubric;
use x402_probe::store::NewEntry;

/// `run`'s entry with its index rows (run id, declaration), its stored form made now as the
/// daemon's run task makes it, before the writer.
pub fn prepared_run(run: RunRecord, rubric: &Rubric) -> NewEntry {
    let declared_now = declared(&run.free, run.started_at_ms);
    let index = run_index(&run, declared_now);
    NewEntry::prepared(
        run.ended_at_ms,
        Record::Run(Box::new(run)),
        rubric,
        Some(index),
    )
}
