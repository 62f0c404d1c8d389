//! Fault injection: a paid call is a child process that is killed (SIGKILL, no cleanup) at a chosen
//! step: after reserving, after signing, while the request is in flight, after the response, after
//! verifying, or in the middle of reconciling. Over a random sequence of calls, with a fresh process
//! each time (a restart), the invariants must hold after every step:
//! - what is committed (open reservations + settled in 24 h) never exceeds a cap;
//! - every reservation a child announced exists, and no other (none lost, none invented);
//! - every token that left the wallet is covered by a reservation;
//!
//! and at the end, after every window closed and a reconciliation (itself killed once midway):
//! - no reservation is open; the settled ones are exactly the nonces used on chain, each once;
//! - the settled amounts add up to exactly what left the wallet.
//!
//! How the kill happens (simple and honest): the library reports each step to an optional hook
//! (`PaidContext::on_step`, `reconcile`'s `on_step`); the child, this same test binary running the
//! ignored test `child_paid_call`, SIGKILLs itself from that hook when it reaches the step named in
//! its environment. "In flight" arms a timer at `Sending` that kills after a random delay, so the
//! kill lands anywhere between sending and the response. No cargo feature is needed: the hook is a
//! plain argument, and production passes none.

use crate::daemon_support;
use crate::paid_support;
use crate::process_support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use alloy::primitives::{Address, B256, U256};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use x402_lab::{Lab, LabOptions};
use x402_probe::probe::paid::{Decision, PaidContext, PaidOptions, PaidStep, paid_call};
use x402_probe::probe::rpc::Rpc;
use x402_probe::spend::{
    AllowedAsset, PayPolicy, ReconcileStep, ReservationState, SpendStore, Usd,
};
use x402_probe::wallet::Wallet;

use paid_support::*;

/// The child test's name as the harness knows it: its path in the test binary, module included.
const CHILD_TEST: &str = "paid_faults::child_paid_call";
/// Caps: a call costs one cent; eight per subject, fourteen in all. The first twelve calls (each
/// step killed twice, alternating subjects) always fit; the random rest runs into both caps.
const SUBJECT_CAP: &str = "0.08";
const DAY_CAP: &str = "0.14";

fn die_now() -> ! {
    let _ = std::io::stdout().flush();
    // SAFETY: kill(2) on our own pid with SIGKILL; the process ends here, nothing runs after it.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    std::process::abort()
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run by the parent test only"))
}

fn announce(line: &str) {
    let mut out = std::io::stdout();
    let _ = writeln!(out, "\nCHILD {line}");
    let _ = out.flush();
}

fn announce_reconciled(report: &x402_probe::spend::ReconcileReport) {
    announce(&format!(
        "RECONCILED settled={} released={} open={}",
        report.settled.len(),
        report.released.len(),
        report.still_open.len()
    ));
}

fn child_policy() -> PayPolicy {
    PayPolicy::new(
        usd("0.05"),
        usd(SUBJECT_CAP),
        usd(DAY_CAP),
        vec![AllowedAsset {
            network: format!("eip155:{}", env("PAID_CHILD_CHAIN")),
            asset: env("PAID_CHILD_TOKEN").parse().unwrap(),
            decimals: 6,
            usd_per_unit: usd("1"),
        }],
    )
}

/// One paid call (or one reconciliation) in a process of its own, killed where the parent says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run only as a child process by crash_at_every_step_never_overspends_or_loses_a_reservation"]
async fn child_paid_call() {
    x402_probe::install_crypto_provider();
    let kill_at = env("PAID_CHILD_KILL_AT");
    // A vantage of a shared spend store (`spend_shared`), or the state directory's.
    let store = match std::env::var("PAID_CHILD_PG") {
        Ok(url) => {
            SpendStore::open_postgres(&url, &env("PAID_CHILD_VANTAGE"), Duration::from_secs(3600))
                .unwrap()
        }
        Err(_) => SpendStore::open(&PathBuf::from(env("PAID_CHILD_STATE"))).unwrap(),
    };
    let rpc = Rpc::new(env("PAID_CHILD_RPC"));
    let mode = env("PAID_CHILD_MODE");
    let solana_rpc = std::env::var("PAID_CHILD_SOLANA_RPC")
        .ok()
        .map(x402_probe::probe::solana_rpc::SolanaRpc::new);
    if mode == "svm-reconcile" {
        let solana_rpc = solana_rpc.expect("PAID_CHILD_SOLANA_RPC");
        let _lock = store.lock_for_call().await.unwrap();
        let report = x402_probe::probe::reconcile::reconcile_svm(&store, &solana_rpc, now_unix())
            .await
            .unwrap();
        announce_reconciled(&report);
        return;
    }
    if mode == "reconcile" {
        let hook = |step: ReconcileStep| {
            let ReconcileStep::Resolved { id } = step;
            announce(&format!("RESOLVED {id}"));
            if kill_at == "reconciled" {
                die_now();
            }
        };
        let report = x402_probe::probe::reconcile::reconcile(
            &store,
            &rpc,
            now_unix(),
            x402_probe::probe::reconcile::Due::Expired,
            Some(&hook),
        )
        .await
        .unwrap();
        announce_reconciled(&report);
        return;
    }
    let wallet = Wallet::from_key_file(&PathBuf::from(env("PAID_CHILD_KEY"))).unwrap();
    let solana_wallet = std::env::var("PAID_CHILD_SOLANA_KEY").ok().map(|key| {
        x402_probe::solana_wallet::SolanaWallet::from_key_file(&PathBuf::from(key)).unwrap()
    });
    let mut policy = child_policy();
    if solana_wallet.is_some() {
        policy.svm_allowlist = x402_probe::spend::AllowedSvmAsset::canonical_usdc();
    }
    let ca = std::fs::read(env("PAID_CHILD_CA")).unwrap();
    let ca = rustls_pki_types::pem::PemObject::from_pem_slice(&ca).unwrap();
    let fetch_cfg = x402_probe::probe::http::FetchConfig {
        allow_private: true,
        extra_roots: vec![ca],
        ..Default::default()
    };
    let url = env("PAID_CHILD_URL");
    let (request, quote) = quote_of(&fetch_cfg, &url).await;
    let hook = |step: PaidStep| {
        let (name, id) = match step {
            PaidStep::Reconciled { id } => ("reconciled", id),
            PaidStep::Reserved { id } => ("reserved", id),
            PaidStep::Signed { id } => ("signed", id),
            PaidStep::Sending { id } => ("sending", id),
            PaidStep::Responded { id } => ("responded", id),
            PaidStep::Verified { id } => ("verified", id),
        };
        if name == "reserved" {
            announce(&format!("RESERVED {id}"));
        }
        if let Some(ms) = kill_at.strip_prefix("in_flight:")
            && name == "sending"
        {
            let ms: u64 = ms.parse().unwrap();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(ms));
                die_now();
            });
        }
        if name == kill_at {
            die_now();
        }
    };
    let ctx = PaidContext {
        wallet: &wallet,
        svm: solana_wallet
            .as_ref()
            .zip(solana_rpc.as_ref())
            .map(|(wallet, rpc)| x402_probe::probe::paid::SvmPay { wallet, rpc }),
        store: &store,
        policy: &policy,
        rpc: &rpc,
        fetch: &fetch_cfg,
        options: PaidOptions::lab(),
        clock: &x402_probe::clock::SystemClock,
        wall: &x402_probe::clock::SystemClock,
        on_step: Some(&hook),
        references: &Default::default(),
    };
    let obs = paid_call(&ctx, &url, &request, &quote).await;
    match &obs.decision {
        Decision::Paid { reservation_id } => announce(&format!("PAID {reservation_id}")),
        Decision::Refused { refusals } => {
            announce(&format!("REFUSED {}", refusals[0].code.as_str()))
        }
        Decision::Failed { stage, error } => announce(&format!("FAILED {stage}: {error}")),
    }
}

pub(crate) struct Child {
    pub(crate) lines: Vec<String>,
    pub(crate) killed: bool,
}

pub(crate) async fn run_child(
    lab: &Lab,
    state: &std::path::Path,
    mode: &str,
    url: &str,
    kill_at: &str,
) -> Child {
    run_child_with(lab, state, mode, url, kill_at, &[]).await
}

/// [`run_child`] with more of the child's environment (a shared spend store's URL and vantage).
pub(crate) async fn run_child_with(
    lab: &Lab,
    state: &std::path::Path,
    mode: &str,
    url: &str,
    kill_at: &str,
    more_env: &[(&str, &str)],
) -> Child {
    let exe = std::env::current_exe().unwrap();
    let mut command = tokio::process::Command::new(exe);
    command
        .args([
            CHILD_TEST,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("PAID_CHILD_MODE", mode)
        .env("PAID_CHILD_STATE", state)
        .env("PAID_CHILD_RPC", lab.rpc_url())
        .env("PAID_CHILD_KEY", &lab.payer_key_file)
        .env("PAID_CHILD_CA", &lab.ca_file)
        .env("PAID_CHILD_URL", url)
        .env("PAID_CHILD_TOKEN", lab.token.address().to_string())
        .env("PAID_CHILD_CHAIN", lab.chain_id.to_string())
        .env("PAID_CHILD_KILL_AT", kill_at)
        .envs(more_env.iter().copied())
        .kill_on_drop(true);
    if let (Some(key), Some(url)) = (&lab.solana_payer_key_file, lab.solana_rpc_url()) {
        command
            .env("PAID_CHILD_SOLANA_KEY", key)
            .env("PAID_CHILD_SOLANA_RPC", url);
    }
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the child finished within 2 minutes")
        .expect("the child ran");
    use std::os::unix::process::ExitStatusExt;
    let killed = output.status.signal() == Some(libc::SIGKILL);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<String> = stdout
        .lines()
        // The harness may have written "test child_paid_call ... " on the same line first.
        .filter_map(|l| {
            l.find("CHILD ")
                .map(|at| l[at + "CHILD ".len()..].to_string())
        })
        .collect();
    if !killed && !output.status.success() {
        panic!(
            "child ({mode}, kill at {kill_at:?}) failed: {}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Child { lines, killed }
}

/// A random order of every paid step twice, then a random tail up to `len` calls: the first
/// part always fits the caps, the tail runs into them.
fn fault_plan(rng: &mut StdRng, len: usize) -> (Vec<&'static str>, usize) {
    let steps = [
        "",
        "reserved",
        "signed",
        "in_flight",
        "responded",
        "verified",
    ];
    let mut plan: Vec<&str> = steps.iter().chain(steps.iter()).copied().collect();
    for i in (1..plan.len()).rev() {
        plan.swap(i, rng.random_range(0..=i));
    }
    let guaranteed = plan.len();
    while plan.len() < len {
        plan.push(steps[rng.random_range(0..steps.len())]);
    }
    (plan, guaranteed)
}

/// The killed steps every run of the plan must have hit (an in-flight timer may lose the race
/// against a fast call), and a cap that bound.
fn assert_every_step_hit(tally: &BTreeMap<String, usize>) {
    for step in ["reserved", "signed", "responded", "verified"] {
        assert!(
            tally
                .get(&format!("killed at {step}"))
                .copied()
                .unwrap_or(0)
                >= 1,
            "no call was killed at {step}: {tally:?}"
        );
    }
    assert!(
        tally.keys().any(|k| k.starts_with("REFUSED over_")),
        "the caps never bound: {tally:?}"
    );
}

/// Runs the plan's paid calls in children against `urls`, checking `invariants` after each;
/// returns the reservations announced and the outcomes' tally.
async fn run_plan<F, Fut>(
    lab: &Lab,
    state: &std::path::Path,
    urls: &[String],
    rng: &mut StdRng,
    len: usize,
    invariants: F,
) -> (BTreeSet<i64>, BTreeMap<String, usize>)
where
    F: Fn(BTreeSet<i64>, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (plan, guaranteed) = fault_plan(rng, len);
    let mut announced = BTreeSet::new();
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    let capped =
        |tally: &BTreeMap<String, usize>| tally.keys().any(|k| k.starts_with("REFUSED over_"));
    // The random tail may end short of the caps (a call killed before it signs gives its
    // reservation back): plain calls follow until a cap refuses one, at most `len` more.
    for n in 0.. {
        let step: &str = match plan.get(n) {
            Some(step) => step,
            None if !capped(&tally) && n < plan.len() + len => "",
            None => break,
        };
        let url = if n < guaranteed {
            &urls[n % urls.len()]
        } else {
            &urls[rng.random_range(0..urls.len())]
        };
        let kill_at = match step {
            "in_flight" => format!("in_flight:{}", rng.random_range(0..120)),
            other => other.to_string(),
        };
        let child = run_child(lab, state, "pay", url, &kill_at).await;
        for line in &child.lines {
            if let Some(id) = line.strip_prefix("RESERVED ") {
                announced.insert(id.parse::<i64>().unwrap());
            }
        }
        let outcome = match (child.killed, child.lines.last()) {
            (true, _) => format!("killed at {}", step),
            (false, Some(last)) => last.split(' ').take(2).collect::<Vec<_>>().join(" "),
            (false, None) => "no output".to_string(),
        };
        eprintln!("call {n:>2} kill_at={kill_at:<14} -> {outcome}");
        *tally.entry(outcome).or_default() += 1;
        invariants(announced.clone(), format!("after call {n}")).await;
    }
    eprintln!("outcomes: {tally:?}");
    (announced, tally)
}

/// What is committed (open reservations, and those settled in the last 24 hours) stays within
/// the daily cap, and each subject's within the subject cap. `rows`: (subject, created at,
/// state, cost) of every reservation.
fn assert_within_caps<'r>(
    rows: impl Iterator<Item = (&'r str, i64, ReservationState, Usd)>,
    context: &str,
) {
    let now = now_unix();
    let mut day = Usd::ZERO;
    let mut by_subject: BTreeMap<&str, Usd> = BTreeMap::new();
    for (subject, created_at, state, cost) in rows {
        let counted = state == ReservationState::Open
            || (state == ReservationState::Settled && created_at > now - 86_400);
        if counted {
            day = day.checked_add(cost).unwrap();
            let sum = by_subject.entry(subject).or_insert(Usd::ZERO);
            *sum = sum.checked_add(cost).unwrap();
        }
    }
    assert!(
        day <= usd(DAY_CAP),
        "{context}: {day} committed, over the daily cap"
    );
    for (subject, sum) in &by_subject {
        assert!(
            *sum <= usd(SUBJECT_CAP),
            "{context}: {sum} committed to {subject}, over the subject cap"
        );
    }
}

/// A seeded random source (the seed printed, `PAID_FAULTS_SEED` to rerun it), a lab of the two
/// scenarios, and a directory for the state.
async fn fault_lab(scenarios: [&str; 2]) -> (StdRng, Lab, tempfile::TempDir) {
    x402_probe::install_crypto_provider();
    let seed: u64 = std::env::var("PAID_FAULTS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("fault injection seed {seed} (rerun with PAID_FAULTS_SEED={seed})");
    let lab = Lab::start_with(LabOptions {
        scenarios: Some(scenarios.iter().map(|s| s.to_string()).collect()),
        ..LabOptions::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    (StdRng::seed_from_u64(seed), lab, dir)
}

/// What left the wallet is covered by reservations not released.
fn assert_covered<T: PartialOrd + std::fmt::Display>(spent: T, covered: T, context: &str) {
    assert!(
        spent <= covered,
        "{context}: {spent} left the wallet, only {covered} is reserved"
    );
}

/// The invariants that must hold after every step.
async fn check_invariants(
    lab: &Lab,
    store: &SpendStore,
    announced: &BTreeSet<i64>,
    initial_balance: U256,
    context: &str,
) {
    let rows = store.reservations().unwrap();
    let ids: BTreeSet<i64> = rows.iter().map(|r| r.id).collect();
    assert_eq!(&ids, announced, "{context}: reservations lost or invented");
    let nonces: BTreeSet<B256> = rows.iter().map(|r| r.nonce).collect();
    assert_eq!(nonces.len(), rows.len(), "{context}: a nonce reused");

    assert_within_caps(
        rows.iter()
            .map(|r| (r.subject.as_str(), r.created_at, r.state, r.cost)),
        context,
    );

    let spent = initial_balance - balance(lab, lab.payer).await;
    let covered = rows
        .iter()
        .filter(|r| r.state != ReservationState::Released)
        .fold(U256::ZERO, |sum, r| sum + r.amount);
    assert_covered(spent, covered, context);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_at_every_step_never_overspends_or_loses_a_reservation() {
    let (mut rng, lab, dir) = fault_lab(["honest-v2", "honest-v1"]).await;
    let state = dir.path().join("state");
    let store = SpendStore::open(&state).unwrap();
    let initial = balance(&lab, lab.payer).await;
    let urls = [
        lab.endpoint("honest-v2").unwrap().url.clone(),
        lab.endpoint("honest-v1").unwrap().url.clone(),
    ];

    // First every step twice, in random order, within the caps; then a random tail past them.
    let (announced, tally) = run_plan(&lab, &state, &urls, &mut rng, 24, |announced, context| {
        let (lab, store) = (&lab, &store);
        async move { check_invariants(lab, store, &announced, initial, &context).await }
    })
    .await;
    assert_every_step_hit(&tally);
    assert!(tally.keys().any(|k| k.starts_with("killed")));

    // Let every authorization window close, then let the chain's clock pass too (anvil mines only
    // on demand; a live chain makes blocks by itself).
    let latest_valid_before = store
        .reservations()
        .unwrap()
        .iter()
        .map(|r| r.valid_before)
        .max()
        .unwrap_or(0) as i64;
    let wait = (latest_valid_before + 2 - now_unix()).max(0) as u64;
    eprintln!("waiting {wait} s for the last authorization window to close");
    tokio::time::sleep(Duration::from_secs(wait)).await;
    lab.rpc.mine().await.unwrap();

    // A reconciliation killed after its first resolution, then one that finishes.
    let open_before = store
        .reservations()
        .unwrap()
        .iter()
        .filter(|r| r.state == ReservationState::Open)
        .count();
    if open_before >= 2 {
        let child = run_child(&lab, &state, "reconcile", "", "reconciled").await;
        assert!(
            child.killed,
            "the reconciliation was to be killed: {:?}",
            child.lines
        );
        let after = store
            .reservations()
            .unwrap()
            .iter()
            .filter(|r| r.state == ReservationState::Open)
            .count();
        assert_eq!(
            after,
            open_before - 1,
            "exactly one resolution was committed"
        );
        eprintln!("reconciliation killed after 1 of {open_before} resolutions");
        check_invariants(
            &lab,
            &store,
            &announced,
            initial,
            "after a killed reconciliation",
        )
        .await;
    }
    let child = run_child(&lab, &state, "reconcile", "", "").await;
    assert!(!child.killed, "{:?}", child.lines);
    check_invariants(&lab, &store, &announced, initial, "after reconciliation").await;

    // The end state: nothing open; settled = exactly the nonces used on chain; money adds up.
    let rows = store.reservations().unwrap();
    assert!(
        rows.iter().all(|r| r.state != ReservationState::Open),
        "still open: {:?}",
        rows.iter()
            .filter(|r| r.state == ReservationState::Open)
            .collect::<Vec<_>>()
    );
    let rpc = Rpc::new(lab.rpc_url());
    let latest = rpc.block_number().await.unwrap();
    let used_logs = rpc
        .logs(
            lab.token.address(),
            &[
                Some(x402_probe::paid::chain::AUTHORIZATION_USED_TOPIC),
                Some(lab.payer.into_word()),
            ],
            0,
            latest,
        )
        .await
        .unwrap();
    let used_on_chain: BTreeMap<B256, Option<B256>> = used_logs
        .iter()
        .map(|l| (l.topics[2], l.transaction_hash))
        .collect();
    assert_eq!(
        used_on_chain.len(),
        used_logs.len(),
        "a nonce used twice on chain"
    );
    let settled: BTreeMap<B256, &x402_probe::spend::ReservationRecord> = rows
        .iter()
        .filter(|r| r.state == ReservationState::Settled)
        .map(|r| (r.nonce, r))
        .collect();
    assert_eq!(
        settled.keys().collect::<BTreeSet<_>>(),
        used_on_chain.keys().collect::<BTreeSet<_>>(),
        "settled reservations and nonces used on chain differ"
    );
    for (nonce, row) in &settled {
        if let Some(tx) = row.tx {
            assert_eq!(
                Some(tx),
                used_on_chain[nonce],
                "reservation {} names the wrong tx",
                row.id
            );
        }
    }
    for row in rows
        .iter()
        .filter(|r| r.state == ReservationState::Released)
    {
        assert!(
            !rpc.authorization_state(row.asset, row.payer, row.nonce)
                .await
                .unwrap(),
            "released reservation {} was used on chain",
            row.id
        );
    }
    let settled_sum = settled.values().fold(U256::ZERO, |sum, r| sum + r.amount);
    let spent = initial - balance(&lab, lab.payer).await;
    assert_eq!(
        settled_sum, spent,
        "settled amounts and the wallet's loss differ"
    );
    assert!(!settled.is_empty(), "some payments must have gone through");
    let released = rows.len() - settled.len();
    eprintln!(
        "{} reservations: {} settled ({spent} units), {released} released",
        rows.len(),
        settled.len()
    );
    let _: Address = lab.payer;
}

/// A paid call killed once the endpoint answered (its payment settled on chain) and one killed
/// after signing (never sent) leave two open reservations, as a `kill -9` of a daemon mid-call
/// does. A real daemon process started on that state directory, with no subject it could pay,
/// resolves both at its start: the first settled with the transaction that used it (before its
/// window closed: money moved), the second released once its 5 s window has passed on the
/// chain's clock. Before, only the next paid call reconciled, and only rows past `validBefore`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemons_start_reconciles_paid_calls_cut_short() {
    use process_support::{signal, start_daemon, wait_for};
    x402_probe::install_crypto_provider();
    let lab = Lab::start_with(LabOptions {
        scenarios: Some(vec!["honest-v2".into(), "timeout-5".into()]),
        ..LabOptions::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let store = SpendStore::open(&state).unwrap();
    let honest = lab.endpoint("honest-v2").unwrap().url.clone();
    let short = lab.endpoint("timeout-5").unwrap().url.clone();
    // The unsent one first: a paid call reconciles the reservations past their window before it
    // pays (the second call's leaves the first open: its 5 s have not passed on the chain's
    // clock, whose last block came before it was reserved).
    let unsent = run_child(&lab, &state, "pay", &short, "signed").await;
    assert!(unsent.killed, "{:?}", unsent.lines);
    let paid = run_child(&lab, &state, "pay", &honest, "responded").await;
    assert!(paid.killed, "{:?}", paid.lines);
    let rows = store.reservations().unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows.iter().all(|r| r.state == ReservationState::Open),
        "{rows:?}"
    );
    let (never_sent, used) = (&rows[0], &rows[1]);
    let rpc = Rpc::new(lab.rpc_url());
    let token = lab.token.address();
    assert!(
        rpc.authorization_state(token, used.payer, used.nonce)
            .await
            .unwrap(),
        "the first call's authorization was used on chain"
    );
    assert!(
        used.valid_before as i64 > now_unix() + 30,
        "the used one's window is still open when the daemon starts"
    );
    // The unsent one's window closes on our clock, then on the chain's (anvil mines on demand).
    let wait = (never_sent.valid_before as i64 + 1 - now_unix()).max(0) as u64;
    tokio::time::sleep(Duration::from_secs(wait)).await;
    lab.rpc.mine().await.unwrap();

    let mut settings = daemon_support::Settings::new(&state);
    settings.pay = true;
    let config =
        daemon_support::write_config(dir.path(), &daemon_support::config_text(&lab, &settings));
    let log = dir.path().join("daemon.log");
    let mut daemon = start_daemon(&config, &log);
    wait_for(
        "the daemon's start to resolve both reservations",
        Duration::from_secs(60),
        || {
            store
                .reservations()
                .unwrap()
                .iter()
                .all(|r| r.state != ReservationState::Open)
        },
    );
    signal(&daemon, libc::SIGTERM);
    assert!(daemon.wait().unwrap().success());

    let rows = store.reservations().unwrap();
    let (never_sent_now, used_now) = (&rows[0], &rows[1]);
    assert_eq!(used_now.state, ReservationState::Settled, "{used_now:?}");
    let used_logs = rpc
        .logs(
            token,
            &[
                Some(x402_probe::paid::chain::AUTHORIZATION_USED_TOPIC),
                Some(lab.payer.into_word()),
                Some(used.nonce),
            ],
            0,
            rpc.block_number().await.unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        used_now.tx, used_logs[0].transaction_hash,
        "the settling tx"
    );
    assert_eq!(
        never_sent_now.state,
        ReservationState::Released,
        "{never_sent_now:?}"
    );
    assert!(
        !rpc.authorization_state(token, never_sent.payer, never_sent.nonce)
            .await
            .unwrap()
    );
    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(logs.contains("reservations reconciled"), "{logs}");
}

/// What must hold of the Solana reservations after every step: every announced one exists and
/// no other; open ones plus those settled in 24 hours stay within the caps; every USDC unit that
/// left the Solana payer is covered by a reservation not released.
fn check_svm_invariants(
    lab: &Lab,
    store: &SpendStore,
    announced: &BTreeSet<i64>,
    initial: i128,
    context: &str,
) {
    let rows = store.svm_reservations().unwrap();
    let ids: BTreeSet<i64> = rows.iter().map(|r| r.id).collect();
    assert_eq!(&ids, announced, "{context}: reservations lost or invented");
    assert_within_caps(
        rows.iter()
            .map(|r| (r.subject.as_str(), r.created_at, r.state, r.cost)),
        context,
    );
    let payer = lab.solana_payer.as_deref().unwrap();
    let spent = initial - svm_balance(lab, payer);
    let covered: i128 = rows
        .iter()
        .filter(|r| r.state != ReservationState::Released)
        .map(|r| r.amount.parse::<i128>().unwrap())
        .sum();
    assert_covered(spent, covered, context);
}

/// The same faults on Solana: a paid call to a Solana endpoint killed at every step (after
/// reserving, after signing and committing our signature, in flight, after the response, after
/// verifying), then the Solana reconciliation once every blockhash has expired. Nothing is ever
/// committed past a cap, nothing leaves the payer uncovered, and at the end the settled
/// reservations are exactly those whose signed transaction landed, and add up to what left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_at_every_step_on_solana_never_overspends_or_loses_a_reservation() {
    let (mut rng, lab, dir) = fault_lab(["solana-honest-v2", "solana-honest-v1"]).await;
    let state = dir.path().join("state");
    let store = SpendStore::open(&state).unwrap();
    let payer = lab.solana_payer.clone().unwrap();
    let initial = svm_balance(&lab, &payer);
    let urls = [
        lab.endpoint("solana-honest-v2").unwrap().url.clone(),
        lab.endpoint("solana-honest-v1").unwrap().url.clone(),
    ];
    let (announced, tally) = run_plan(&lab, &state, &urls, &mut rng, 20, |announced, context| {
        let (lab, store) = (&lab, &store);
        async move { check_svm_invariants(lab, store, &announced, initial, &context) }
    })
    .await;
    assert_every_step_hit(&tally);
    assert!(
        store.reservations().unwrap().is_empty(),
        "nothing was reserved on EVM"
    );

    // Every blockhash expires (a live cluster makes blocks by itself), then one reconciliation.
    let svm = lab.svm.as_ref().unwrap();
    svm.advance_blocks(2 * x402_lab::svm::BLOCKHASH_VALID_BLOCKS)
        .unwrap();
    let child = run_child(&lab, &state, "svm-reconcile", "", "").await;
    assert!(!child.killed, "{:?}", child.lines);
    check_svm_invariants(&lab, &store, &announced, initial, "after reconciliation");

    let rows = store.svm_reservations().unwrap();
    assert!(
        rows.iter().all(|r| r.state != ReservationState::Open),
        "still open: {rows:?}"
    );
    let rpc = x402_probe::probe::solana_rpc::SolanaRpc::new(lab.solana_rpc_url().unwrap());
    let landed = rpc
        .transactions_of(&rows[0].source, None, 200)
        .await
        .unwrap();
    let ours_landed = |signature: &str| {
        landed
            .iter()
            .any(|tx| tx.err.is_none() && tx.signatures.iter().any(|s| s == signature))
    };
    let mut settled_sum = 0i128;
    for row in &rows {
        let did_land = row.signature.as_deref().is_some_and(ours_landed);
        assert_eq!(
            row.state == ReservationState::Settled,
            did_land,
            "reservation {} is {:?}, its transaction landed: {did_land}",
            row.id,
            row.state
        );
        if row.state == ReservationState::Settled {
            settled_sum += row.amount.parse::<i128>().unwrap();
            assert!(row.transaction_id.is_some(), "{row:?}");
        }
    }
    let spent = initial - svm_balance(&lab, &payer);
    assert_eq!(
        settled_sum, spent,
        "settled amounts and the payer's loss differ"
    );
    assert!(settled_sum > 0, "some payments must have gone through");
    eprintln!(
        "{} Solana reservations: {} units settled",
        rows.len(),
        settled_sum
    );
}
