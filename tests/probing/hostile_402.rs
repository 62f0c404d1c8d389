//! Hostile 402s against the real prober: the `probe` command, run as a user runs it, against lab
//! endpoints whose responses are within the read caps but cost too much to evaluate naively
//! (accepts floods in the body and the header, deep nesting, a flood of deviations, a schema that
//! takes 2^40 steps to validate) or say two things at once (disagreeing `PAYMENT-REQUIRED`
//! headers). Each run must end in findings, within the documented bounds (README, "Bounds: what one
//! response can cost"): at most 64 accepts entries read, at most 32 deviations in a receipt list, a
//! JSON report of at most 1 MiB, and a process that stays far from gigabytes. The numbers are
//! written here by hand from the README, not taken from the code under test.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use alloy::primitives::U256;
use serde_json::Value;
use x402_lab::{Lab, LabOptions};

/// `accepts` entries read into requirements (README bounds table).
const ENTRIES_READ: usize = 64;
/// Deviations kept in one receipt list.
const RECEIPT_DEVIATIONS: usize = 32;
/// The largest JSON report.
const REPORT_BYTES: usize = 1 << 20;
/// Far above a bounded run (tens of MB) and far below the gigabytes an unbounded one took.
const MAX_RSS_BYTES: u64 = 256 << 20;
/// Far above a bounded run (about a second); a run still going after this is hung.
const HUNG_AFTER: Duration = Duration::from_secs(180);

async fn lab(scenarios: &[&str]) -> Lab {
    let options = LabOptions {
        scenarios: Some(scenarios.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    };
    Lab::start_with(options).await.unwrap()
}

/// One finished `probe` run: exit code, stdout, peak resident memory and wall time.
struct Run {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
    max_rss_bytes: u64,
    elapsed: Duration,
}

impl Run {
    fn report(&self) -> Value {
        serde_json::from_slice(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "the report is not JSON ({e}); {} bytes; stderr: {}",
                self.stdout.len(),
                self.stderr
            )
        })
    }
}

/// `probe URL --json --samples 1` with the lab's CA, RPC, token and catalogue, and `extra`. The
/// child is waited for with `wait4`, which reports its own peak RSS; a child still running after
/// [`HUNG_AFTER`] is killed and reported as hung. `ru_maxrss` of a child also counts the address
/// space it was started from (Linux records its peak at exec), so this is an upper bound of the
/// probe's own peak; it stays meaningful because this test process stays small.
#[allow(clippy::zombie_processes)] // reaped by wait4 below, which clippy cannot see
fn probe(lab: &Lab, scenario: &str, extra: &[&str]) -> Run {
    let m = lab.manifest();
    let mut child = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
        .arg("probe")
        .arg(&lab.endpoint(scenario).unwrap().url)
        .args([
            "--allow-private",
            "--samples",
            "1",
            "--provenance",
            "test_harness",
            "--json",
            "--ca-file",
        ])
        .arg(&m.ca_file)
        .args([
            "--rpc",
            &m.rpc,
            "--asset",
            &m.token,
            "--listing",
            &m.catalogue,
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, err) = crate::drain_outputs(&mut child);
    let pid = child.id() as libc::pid_t;
    let started = Instant::now();
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: plain syscalls on our own child; rusage is fully written by wait4 on success.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let got = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(got >= 0, "wait4 failed");
        if got == pid {
            break (status, usage);
        }
        if started.elapsed() > HUNG_AFTER {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{scenario}: the probe was still running after {HUNG_AFTER:?}: hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = started.elapsed();
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    Run {
        code,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        // ru_maxrss is in kilobytes on Linux.
        max_rss_bytes: usage.ru_maxrss as u64 * 1024,
        elapsed,
    }
}

/// The lab serves from this test's runtime, so the child runs on a blocking section.
async fn run(lab: &Lab, scenario: &str, extra: &[&str]) -> Run {
    tokio::task::block_in_place(|| probe(lab, scenario, extra))
}

fn check<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in the report"))
}

fn codes(list: &Value) -> Vec<&str> {
    list.as_array()
        .map(|l| l.iter().filter_map(|d| d["code"].as_str()).collect())
        .unwrap_or_default()
}

/// What every hostile run must respect, whatever the scenario: a finished process, a bounded
/// report, bounded receipt lists and a bounded peak memory.
fn assert_bounded(scenario: &str, run: &Run) -> Value {
    eprintln!(
        "{scenario}: exit {:?}, report {} bytes, peak RSS {} MB, {:?}",
        run.code,
        run.stdout.len(),
        run.max_rss_bytes >> 20,
        run.elapsed
    );
    assert!(
        run.stdout.len() <= REPORT_BYTES,
        "{scenario}: a {} byte report",
        run.stdout.len()
    );
    let report = run.report();
    assert_eq!(
        run.code,
        Some(1),
        "{scenario}: a hostile 402 fails checks; stderr: {}",
        run.stderr
    );
    for c in report["checks"].as_array().unwrap() {
        let detail = &c["receipt"]["detail"];
        for list in ["deviations", "notes"] {
            let n = detail[list].as_array().map_or(0, Vec::len);
            assert!(
                n <= RECEIPT_DEVIATIONS,
                "{scenario} {}: {n} {list} in the receipt",
                c["id"]
            );
        }
        if let Some(entries) = detail["entries"].as_array() {
            assert!(entries.len() <= ENTRIES_READ, "{scenario} {}", c["id"]);
        }
    }
    assert!(
        run.max_rss_bytes <= MAX_RSS_BYTES,
        "{scenario}: peak RSS {} MB",
        run.max_rss_bytes >> 20
    );
    report
}

/// An accepts list over the budget: C1 and C2 fail with `accepts.too_many`, the receipt says how
/// many entries were sent and how many were read, and names the deviations it did not keep.
fn assert_over_entry_budget(scenario: &str, report: &Value, sent_at_least: u64) {
    let c1 = check(report, "C1");
    assert_eq!(c1["outcome"], "fail", "{scenario}: {}", c1["evidence"]);
    assert!(
        codes(&c1["receipt"]["detail"]["deviations"]).contains(&"accepts.too_many"),
        "{scenario}: {}",
        c1["receipt"]["detail"]
    );
    let c2 = check(report, "C2");
    assert_eq!(c2["outcome"], "fail", "{scenario}: {}", c2["evidence"]);
    let detail = &c2["receipt"]["detail"];
    assert!(
        codes(&detail["deviations"]).contains(&"accepts.too_many"),
        "{scenario}: {detail}"
    );
    assert_eq!(detail["entries"], ENTRIES_READ, "{scenario}: entries read");
    assert!(
        detail["entries_sent"].as_u64().unwrap_or(0) >= sent_at_least,
        "{scenario}: {detail}"
    );
    assert!(
        detail["deviations_omitted"].as_u64().unwrap_or(0) > 0,
        "{scenario}: the receipt counts what it did not keep: {detail}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepts_floods_are_findings_within_the_budget() {
    let lab = lab(&["accepts-flood-body", "accepts-flood-header"]).await;
    let run_body = run(&lab, "accepts-flood-body", &[]).await;
    let report = assert_bounded("accepts-flood-body", &run_body);
    assert_over_entry_budget("accepts-flood-body", &report, 340_000);

    let run_header = run(&lab, "accepts-flood-header", &[]).await;
    let report = assert_bounded("accepts-flood-header", &run_header);
    assert_over_entry_budget("accepts-flood-header", &report, 10_000);
    assert_eq!(
        check(&report, "C2")["receipt"]["detail"]["entries_sent"],
        10_000
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_deviations_keeps_the_first_and_counts_the_rest() {
    let lab = lab(&["deviation-flood"]).await;
    let run = run(&lab, "deviation-flood", &[]).await;
    let report = assert_bounded("deviation-flood", &run);
    assert_over_entry_budget("deviation-flood", &report, 6_000);
    let c2 = check(&report, "C2");
    let kept = c2["receipt"]["detail"]["deviations"].as_array().unwrap();
    assert_eq!(kept.len(), RECEIPT_DEVIATIONS, "the first ones are kept");
    // The first entry's own deviations come first, in the order found.
    assert!(
        codes(&c2["receipt"]["detail"]["deviations"]).contains(&"accepts[0].scheme.not_string"),
        "{}",
        c2["receipt"]["detail"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nesting_past_the_budget_is_a_finding_and_nothing_is_read() {
    let lab = lab(&["deep-nesting"]).await;
    let run = run(&lab, "deep-nesting", &[]).await;
    let report = assert_bounded("deep-nesting", &run);
    let c1 = check(&report, "C1");
    assert_eq!(c1["outcome"], "fail", "{}", c1["evidence"]);
    assert!(
        codes(&c1["receipt"]["detail"]["deviations"]).contains(&"header.too_deep"),
        "{}",
        c1["receipt"]["detail"]
    );
    for id in ["C2", "C3", "C4", "C5"] {
        assert_eq!(check(&report, id)["outcome"], "unmeasured", "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_that_validates_in_exponential_time_is_refused_not_run() {
    let lab = lab(&["schema-bomb"]).await;
    let run = run(&lab, "schema-bomb", &[]).await;
    let report = assert_bounded("schema-bomb", &run);
    assert_eq!(check(&report, "C1")["outcome"], "pass");
    let c5 = check(&report, "C5");
    assert_eq!(c5["outcome"], "fail", "{}", c5["evidence"]);
    assert!(
        codes(&c5["receipt"]["detail"]["deviations"])
            .contains(&"extensions.bazaar.schema.too_complex"),
        "{}",
        c5["receipt"]["detail"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disagreeing_payment_required_headers_fail_c1_and_offer_nothing() {
    let lab = lab(&[
        "dup-header-disagree",
        "dup-header-case",
        "dup-header-agree",
        "dup-content-type",
    ])
    .await;
    for scenario in ["dup-header-disagree", "dup-header-case"] {
        let run = run(&lab, scenario, &[]).await;
        let report = assert_bounded(scenario, &run);
        let c1 = check(&report, "C1");
        assert_eq!(c1["outcome"], "fail", "{scenario}: {}", c1["evidence"]);
        assert!(
            codes(&c1["receipt"]["detail"]["deviations"]).contains(&"header.duplicate_disagree"),
            "{scenario}: {}",
            c1["receipt"]["detail"]
        );
        // No requirements were read from either header (or the body): nothing to check or pay.
        for id in ["C2", "C3", "C4", "C5", "H1", "H4"] {
            let c = check(&report, id);
            assert_eq!(
                c["outcome"], "unmeasured",
                "{scenario} {id}: {}",
                c["evidence"]
            );
        }
    }
    // Two Content-Types that disagree declare nothing S5 can hold the bytes to.
    let run_types = run(&lab, "dup-content-type", &[]).await;
    let report = assert_bounded("dup-content-type", &run_types);
    let s5 = check(&report, "S5");
    assert_eq!(s5["outcome"], "fail", "{}", s5["evidence"]);
    assert!(s5["evidence"].as_str().unwrap().contains("disagree"));
    assert_eq!(check(&report, "C1")["outcome"], "pass");
    // The same header twice is only a note.
    let run = run(&lab, "dup-header-agree", &[]).await;
    let report = run.report();
    let c1 = check(&report, "C1");
    assert_eq!(c1["outcome"], "pass", "{}", c1["evidence"]);
    assert!(codes(&c1["receipt"]["detail"]["notes"]).contains(&"header.duplicate"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disagreeing_payment_required_headers_are_never_paid() {
    let lab = lab(&["dup-header-disagree", "dup-header-agree"]).await;
    let state = lab.dir().join("spend");
    let key = lab.payer_key_file.display().to_string();
    let state_arg = state.display().to_string();
    let pay = [
        "--pay",
        "--max-usd",
        "0.05",
        "--wallet-key-file",
        &key,
        "--state-dir",
        &state_arg,
        "--confirmations",
        "0",
    ];
    let before = lab.token.balance_of(lab.payer).await.unwrap();
    let other_before = lab.token.balance_of(lab.other_wallet).await.unwrap();
    let run_disagree = run(&lab, "dup-header-disagree", &pay).await;
    let report = run_disagree.report();
    assert_eq!(
        report["paid"]["decision"], "refused",
        "{}; stderr: {}",
        report["paid"], run_disagree.stderr
    );
    let reason = report["paid"]["reasons"][0].as_str().unwrap_or_default();
    assert!(reason.starts_with("no_requirements"), "{reason}");
    assert!(report["paid"].get("reservation_id").is_none());
    assert_eq!(lab.token.balance_of(lab.payer).await.unwrap(), before);
    assert_eq!(
        lab.token.balance_of(lab.other_wallet).await.unwrap(),
        other_before
    );
    for id in ["R4", "C6", "H5", "H6"] {
        assert_eq!(check(&report, id)["outcome"], "unmeasured", "{id}");
    }

    // Agreeing duplicates are one quote: paid as usual.
    let run_agree = run(&lab, "dup-header-agree", &pay).await;
    let report = run_agree.report();
    assert_eq!(
        report["paid"]["decision"], "paid",
        "{}; stderr: {}",
        report["paid"], run_agree.stderr
    );
    assert_eq!(
        lab.token.balance_of(lab.payer).await.unwrap(),
        before - U256::from(x402_lab::quote::PRICE)
    );
}
