//! The signed daily snapshot from a simulated run: days of real probes and paid calls against the
//! lab on a simulated clock, then the daemon serving its API. Each day's snapshot, fetched as an
//! agent would (plain and gzip), verifies offline with `x402-probe verify-snapshot` and the
//! reporter's public key alone, and states what the ledger published; a changed byte fails it.
//! A day not over, or before the ledger began, is a 404. Every answer is validated against the
//! served OpenAPI document.

use crate::api_support;

use std::io::Read;
use std::process::Command;

use api_support::daemon_support::DAY;
use api_support::*;
use serde_json::Value;
use x402_probe::clock::{day_of, ms_of};
use x402_probe::ledger::record::{Record, RecordKind};
use x402_probe::store::{SqliteStore, Store};

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: bytes::Bytes,
}

async fn get(url: &str, gzip: bool) -> Answer {
    let mut request = reqwest::Client::new().get(url);
    if gzip {
        request = request.header("accept-encoding", "br, gzip");
    }
    let r = request.send().await.expect("the API answers");
    Answer {
        status: r.status().as_u16(),
        headers: r.headers().clone(),
        body: r.bytes().await.unwrap(),
    }
}

fn header<'a>(a: &'a Answer, name: &str) -> &'a str {
    a.headers
        .get(name)
        .map(|v| v.to_str().unwrap())
        .unwrap_or_default()
}

fn validated(doc: &Value, template: &str, url: &str, a: &Answer, body: &[u8]) {
    validate_response(
        doc,
        "get",
        template,
        url,
        a.status,
        header(a, "content-type"),
        body,
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// `x402-probe verify-snapshot FILE --pubkey HEX`: exit code and output.
fn verify_snapshot(file: &std::path::Path, pubkey: &str) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
        .arg("verify-snapshot")
        .arg(file)
        .args(["--pubkey", pubkey])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_days_snapshot_verifies_offline_states_the_ledger_and_a_changed_byte_fails() {
    let d = ApiDaemon::start(ApiOptions {
        days: 3,
        declared_outage: false,
        ..ApiOptions::default()
    })
    .await;
    let pubkey = hex::encode(d.public_key);
    let doc: Value = serde_json::from_slice(&get(&d.url("/v1/openapi.json"), false).await.body)
        .expect("the document");
    let files = tempfile::tempdir().unwrap();

    // The newest: cached briefly, naming its day.
    let latest = get(&d.url("/v1/snapshots/latest"), false).await;
    assert_eq!(latest.status, 200, "{:?}", latest.body);
    validated(
        &doc,
        "/v1/snapshots/latest",
        "latest",
        &latest,
        &latest.body,
    );
    assert_eq!(header(&latest, "cache-control"), "public, max-age=300");
    let newest: Value = serde_json::from_slice(&latest.body).unwrap();
    let newest_day = newest["snapshot"]["day"].as_str().unwrap().to_string();
    assert_eq!(
        header(&latest, "content-location"),
        format!("/v1/snapshots/{newest_day}")
    );

    // Every day from the ledger's first to the newest snapshot's has one (the history began 3
    // days before the current hour; the newest is yesterday's, or the day before's when the
    // history ended within the hour after midnight).
    let first_day = day_of(d.history_end_ms - 3 * DAY);
    let yesterday = day_of(d.history_end_ms - DAY);
    assert!(
        newest_day == yesterday || newest_day == day_of(d.history_end_ms - 2 * DAY),
        "{newest_day}, history ended {}",
        d.history_end_ms
    );
    let store = SqliteStore::open(d.dir.path()).unwrap();
    let mut day_ms = d.history_end_ms - 3 * DAY;
    let mut days = Vec::new();
    while day_of(day_ms) <= newest_day {
        days.push(day_of(day_ms));
        day_ms += DAY;
    }
    assert!(days.len() >= 2, "{days:?}");
    assert_eq!(days[0], first_day);
    let mut listed_any = 0;
    for day in &days {
        let url = d.url(&format!("/v1/snapshots/{day}"));
        let plain = get(&url, false).await;
        assert_eq!(plain.status, 200, "{day}: {:?}", plain.body);
        validated(&doc, "/v1/snapshots/{day}", &url, &plain, &plain.body);
        assert_eq!(
            header(&plain, "cache-control"),
            "public, max-age=31536000, immutable"
        );
        assert_eq!(header(&plain, "content-encoding"), "");
        let file = files.path().join(format!("{day}.json"));
        std::fs::write(&file, &plain.body).unwrap();
        let (code, out) = verify_snapshot(&file, &pubkey);
        assert_eq!(code, 0, "{day}: {out}");
        assert!(
            out.starts_with(&format!("valid: the snapshot of {day}")),
            "{out}"
        );

        // What it states is what the ledger published: each subject's last score entry before
        // the day's end, read here another way (every score entry of the subject).
        let snapshot: Value = serde_json::from_slice(&plain.body).unwrap();
        let snapshot = &snapshot["snapshot"];
        assert_eq!(snapshot["day"], day.as_str());
        let day_end = ms_of(&format!("{day}T00:00:00Z")).unwrap() + DAY;
        let rows = snapshot["subjects"].as_array().unwrap();
        for (name, subject) in &d.urls {
            let last = store
                .subject_entries(subject, &[RecordKind::Score], 0)
                .unwrap()
                .into_iter()
                .filter_map(|e| match e.record {
                    Record::Score(s) if s.as_of_ms < day_end => Some(s),
                    _ => None,
                })
                .last();
            let row = rows.iter().find(|r| r["url"] == subject.as_str());
            match (last, row) {
                (None, None) => {}
                (Some(score), Some(row)) => {
                    listed_any += 1;
                    assert_eq!(
                        row["document_sha256"],
                        score.document_sha256.as_str(),
                        "{name}"
                    );
                    assert_eq!(row["score"].as_f64(), Some(score.score), "{name}");
                    assert_eq!(
                        row["verdict"],
                        serde_json::to_value(score.verdict).unwrap(),
                        "{name}"
                    );
                    let pay_to = row["rated"]["pay_to"].as_str().unwrap_or_default();
                    assert!(pay_to.starts_with("0x"), "{name} rated payTo: {row}");
                }
                (last, row) => panic!("{day} {name}: ledger {last:?}, snapshot {row:?}"),
            }
        }

        // Compressed when asked; the compressed file verifies too.
        let packed = get(&url, true).await;
        assert_eq!(packed.status, 200);
        assert_eq!(header(&packed, "content-encoding"), "gzip");
        assert_eq!(header(&packed, "vary"), "accept-encoding");
        let mut unpacked = Vec::new();
        flate2::read::GzDecoder::new(&packed.body[..])
            .read_to_end(&mut unpacked)
            .unwrap();
        assert_eq!(unpacked, plain.body, "{day}: the same bytes");
        assert!(packed.body.len() < plain.body.len());
        let gz = files.path().join(format!("{day}.json.gz"));
        std::fs::write(&gz, &packed.body).unwrap();
        assert_eq!(verify_snapshot(&gz, &pubkey).0, 0, "{day} gzip");
    }
    assert!(
        listed_any >= 4,
        "subjects listed across the days: {listed_any}"
    );
    let newest_again = get(&d.url(&format!("/v1/snapshots/{newest_day}")), false).await;
    assert_eq!(newest_again.body, latest.body);

    // A changed byte, anywhere, fails: in a verdict, in a proof, in the signature; and in the
    // compressed file. Another key fails too.
    let file = files.path().join(format!("{newest_day}.json"));
    let bytes = std::fs::read(&file).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    let at = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("{needle}")) + needle.len();
    for (what, at) in [
        ("a verdict", at("\"verdict\":\"")),
        ("a proof", at("\"proof\":[\"") + 3),
        ("the signature", at("\"signature\":\"") + 10),
        ("a score", at("\"score\":")),
        ("the day", at("\"day\":\"") + 9),
    ] {
        let mut tampered = bytes.clone();
        tampered[at] = if tampered[at] == b'1' { b'2' } else { b'1' };
        let path = files.path().join("tampered.json");
        std::fs::write(&path, &tampered).unwrap();
        let (code, out) = verify_snapshot(&path, &pubkey);
        assert_eq!(code, 1, "{what} changed: {out}");
        assert!(out.starts_with("invalid: "), "{out}");
    }
    let mut gz = std::fs::read(files.path().join(format!("{newest_day}.json.gz"))).unwrap();
    let middle = gz.len() / 2;
    gz[middle] ^= 0x20;
    let path = files.path().join("tampered.json.gz");
    std::fs::write(&path, &gz).unwrap();
    let (code, out) = verify_snapshot(&path, &pubkey);
    assert_eq!(code, 1, "a compressed byte changed: {out}");
    let (code, out) = verify_snapshot(&file, &"ab".repeat(32));
    assert_eq!(code, 1, "another key: {out}");
    assert_eq!(verify_snapshot(&file, "not-a-key").0, 2);

    // 404: today (not over), a day before the ledger's first; 400: not a day.
    let today = day_of(x402_probe::clock::Clock::now_ms(
        &x402_probe::clock::SystemClock,
    ));
    let before = day_of(d.history_end_ms - 5 * DAY);
    for (day, status, says) in [
        (today.as_str(), 404, "not over"),
        ("2999-01-01", 404, "not over"),
        (before.as_str(), 404, "before the ledger began"),
        ("2026-13-01", 400, "YYYY-MM-DD"),
        ("yesterday", 400, "YYYY-MM-DD"),
    ] {
        let url = d.url(&format!("/v1/snapshots/{day}"));
        let a = get(&url, false).await;
        assert_eq!(a.status, status, "{day}");
        validated(&doc, "/v1/snapshots/{day}", &url, &a, &a.body);
        let error: Value = serde_json::from_slice(&a.body).unwrap();
        assert!(
            error["error"]["message"].as_str().unwrap().contains(says),
            "{day}: {error}"
        );
    }
    drop(store);
    d.stop().await.expect("the daemon stops cleanly");
}
