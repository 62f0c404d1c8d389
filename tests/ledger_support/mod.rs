//! Editing a ledger file as someone with the file but not the reporter key can: shared by the
//! tamper and migration tests.

use std::path::Path;

use x402_probe::ledger::chain::seal;
use x402_probe::ledger::record::StoredRecord;
use x402_probe::store::{SqliteStore, Store};

/// Edits entry `from` of the ledger at `path` with `edit` and re-chains every entry from it to
/// the head: every hash and link is consistent again, only the signatures are not.
pub fn rechain(path: &Path, from: u64, edit: impl Fn(&mut StoredRecord)) {
    let mut rows = Vec::new();
    SqliteStore::open_file(path)
        .unwrap()
        .scan(0, &mut |row| {
            rows.push(row);
            Ok(())
        })
        .unwrap();
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut prev = rows[from as usize - 2].hash;
    for row in rows.iter().filter(|r| r.seq >= from) {
        let mut record = row.envelope().unwrap().record;
        if row.seq == from {
            edit(&mut record);
        }
        let sealed = seal(row.seq, row.at_ms, prev, &record).unwrap();
        conn.execute(
            "UPDATE entry SET prev = ?1, hash = ?2, body = ?3 WHERE seq = ?4",
            rusqlite::params![
                sealed.prev.as_slice(),
                sealed.hash.as_slice(),
                sealed.body,
                row.seq as i64
            ],
        )
        .unwrap();
        prev = sealed.hash;
    }
    // The Merkle tree is derived from the entries: rebuilt over the edited ones, as someone with
    // the file can (opening the store for writing builds a missing tree).
    conn.execute_batch("DELETE FROM tree;").unwrap();
    drop(conn);
    SqliteStore::open_file(path).unwrap();
}
