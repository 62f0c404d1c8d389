//! The spend store and the wallet on their own (a real SQLite file, a real key file; no chain):
//! reservations are durable before any signature, caps count open and recent settled spend, a
//! resolved reservation never moves again, and the wallet signs only reservations of its own.

use alloy::primitives::{Address, U256, address};
use base64::Engine as _;
use serde_json::json;

use x402_probe::spend::{
    AllowedAsset, PayPolicy, RefusalCode, ReservationState, ReserveError, ReserveRequest,
    SpendStore, Usd,
};
use x402_probe::wallet::{Wallet, WalletError};
use x402_probe::x402::eip712::{recover_signer, transfer_digest};
use x402_probe::x402::parse::parse_payment_required;
use x402_probe::x402::types::PaymentRequired;

const ASSET: Address = address!("0x036CbD53842c5426634e7929541eC2318f3dCF7e");
const PAY_TO: Address = address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C");
const KEY: &str = "0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318";
const NOW: i64 = 1_800_000_000;

fn usd(text: &str) -> Usd {
    text.parse().unwrap()
}

/// A v2 402 quoting `amount` atomic units of USDC on Base Sepolia.
pub(crate) fn quote(amount: &str) -> PaymentRequired {
    let required = json!({
        "x402Version": 2,
        "resource": {"url": "https://api.example/weather"},
        "accepts": [{
            "scheme": "exact", "network": "eip155:84532", "amount": amount,
            "asset": ASSET.to_checksum(None), "payTo": PAY_TO.to_checksum(None),
            "maxTimeoutSeconds": 60, "extra": {"name": "USDC", "version": "2"}
        }]
    });
    let header = base64::engine::general_purpose::STANDARD.encode(required.to_string());
    let parsed = parse_payment_required(402, &[("payment-required".into(), header)], b"{}");
    parsed.required.expect("the sample parses")
}

pub(crate) fn policy(per_call: &str, per_subject: &str, per_day: &str) -> PayPolicy {
    PayPolicy::new(
        usd(per_call),
        usd(per_subject),
        usd(per_day),
        vec![AllowedAsset {
            network: "eip155:84532".into(),
            asset: ASSET,
            decimals: 6,
            usd_per_unit: usd("1"),
        }],
    )
}

fn wallet(dir: &std::path::Path) -> Wallet {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("wallet.key");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    f.write_all(KEY.as_bytes()).unwrap();
    Wallet::from_key_file(&path).unwrap()
}

fn reserve(
    store: &SpendStore,
    policy: &PayPolicy,
    subject: &str,
    amount: &str,
    payer: Address,
    now: i64,
) -> Result<x402_probe::spend::Reservation, ReserveError> {
    let required = quote(amount);
    store.reserve(
        policy,
        &ReserveRequest {
            subject,
            requirement: &required.accepts[0],
            payer,
            from_block: Some(7),
        },
        now,
    )
}

fn refused(result: Result<x402_probe::spend::Reservation, ReserveError>) -> RefusalCode {
    match result {
        Err(ReserveError::Refused(r)) => r.code,
        Err(e) => panic!("a store error: {e}"),
        Ok(r) => panic!("reserved {} instead of refusing", r.id()),
    }
}

#[test]
fn a_reservation_is_on_disk_before_the_signature_and_signs_exactly_the_quote() {
    let dir = tempfile::tempdir().unwrap();
    let wallet = wallet(dir.path());
    let state = dir.path().join("state");
    let store = SpendStore::open(&state).unwrap();
    let policy = policy("0.05", "0.1", "1");
    let reservation = reserve(&store, &policy, "s", "10000", wallet.address(), NOW).unwrap();

    // Another connection (as after a crash and restart) already sees it, open and counted.
    let reopened = SpendStore::open(&state).unwrap();
    let rows = reopened.reservations().unwrap();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row.state, ReservationState::Open);
    assert_eq!(row.amount, U256::from(10_000u64));
    assert_eq!(row.pay_to, PAY_TO);
    assert_eq!(row.asset, ASSET);
    assert_eq!(row.payer, wallet.address());
    assert_eq!(row.nonce, reservation.authorization().nonce);
    assert_eq!(row.valid_before, NOW as u64 + 60);
    assert_eq!(row.valid_after, NOW as u64 - 600);
    assert_eq!(row.from_block, Some(7));
    assert_eq!(reopened.totals("s", NOW).unwrap().subject_day, usd("0.01"));

    let signed = wallet.sign(&reservation).unwrap();
    assert_eq!(signed.authorization, *reservation.authorization());
    assert_eq!(signed.authorization.value, U256::from(10_000u64));
    assert_eq!(signed.authorization.to, PAY_TO);
    let digest = transfer_digest(&signed.domain, &signed.authorization);
    assert_eq!(
        recover_signer(&digest, &signed.signature).unwrap(),
        wallet.address()
    );
    assert_eq!(signed.domain.chain_id, 84532);
    assert_eq!(signed.domain.verifying_contract, ASSET);

    // Nonces are fresh 32 random bytes each time.
    let again = reserve(&store, &policy, "s", "10000", wallet.address(), NOW).unwrap();
    assert_ne!(
        again.authorization().nonce,
        reservation.authorization().nonce
    );
}

#[test]
fn caps_count_open_and_recent_settled_spend_but_not_released() {
    let dir = tempfile::tempdir().unwrap();
    let store = SpendStore::open(dir.path()).unwrap();
    let payer = Address::repeat_byte(9);
    let policy = policy("0.05", "0.05", "0.08");

    assert_eq!(
        refused(reserve(&store, &policy, "a", "50001", payer, NOW)),
        RefusalCode::OverPerCallCap
    );
    let a1 = reserve(&store, &policy, "a", "30000", payer, NOW).unwrap();
    let a2 = reserve(&store, &policy, "a", "20000", payer, NOW).unwrap();
    // Subject "a" is at its 5 cents, open reservations only.
    assert_eq!(
        refused(reserve(&store, &policy, "a", "1", payer, NOW)),
        RefusalCode::OverPerSubjectCap
    );
    assert!(store.mark_settled(a1.id(), None, "test", NOW).unwrap());
    // Settled still counts within 24 h.
    assert_eq!(
        refused(reserve(&store, &policy, "a", "1", payer, NOW + 10)),
        RefusalCode::OverPerSubjectCap
    );
    // Released frees its share.
    assert!(store.mark_released(a2.id(), "test", NOW).unwrap());
    let a3 = reserve(&store, &policy, "a", "20000", payer, NOW + 20).unwrap();
    // The day: 3 + 2 cents, 3 cents left; subject "b" may have 3, not 4.
    assert_eq!(
        refused(reserve(&store, &policy, "b", "40000", payer, NOW + 30)),
        RefusalCode::OverDailyCap
    );
    let _b1 = reserve(&store, &policy, "b", "30000", payer, NOW + 30).unwrap();
    assert_eq!(store.totals("a", NOW + 30).unwrap().day, usd("0.08"));
    // A day later the settled 3 cents no longer count; the open ones still do.
    let later = NOW + 86_400 + 1;
    let totals = store.totals("a", later).unwrap();
    assert_eq!(totals.subject_day, usd("0.02"), "a3 is open");
    assert_eq!(totals.day, usd("0.05"));
    assert_eq!(totals.open, 2);
    drop(a3);

    // Every refusal is on record, with its rule.
    let codes: Vec<String> = store
        .refusals()
        .unwrap()
        .into_iter()
        .map(|r| r.code)
        .collect();
    assert_eq!(
        codes,
        [
            "over_per_call_cap",
            "over_per_subject_cap",
            "over_per_subject_cap",
            "over_daily_cap"
        ]
    );
}

/// The per-subject cap is the endpoint's: four spellings of one address (as a catalogue or a
/// configuration may list it) are one subject. Before, each spelling had a cap of its own.
#[test]
fn the_per_subject_cap_is_the_endpoints_however_it_is_spelled() {
    let dir = tempfile::tempdir().unwrap();
    let store = SpendStore::open(dir.path()).unwrap();
    let payer = Address::repeat_byte(9);
    let policy = policy("0.05", "0.02", "1");
    let canonical = "https://127.0.0.1:8443/weather";
    reserve(
        &store,
        &policy,
        "https://127.0.0.1:8443/weather",
        "10000",
        payer,
        NOW,
    )
    .unwrap();
    reserve(
        &store,
        &policy,
        "https://0x7f000001:8443/weather",
        "10000",
        payer,
        NOW,
    )
    .unwrap();
    for spelling in [
        "https://127.1:8443/weather",
        "https://2130706433:8443/weather",
        "HTTPS://127.0.0.1.:8443/v1/../weather#x",
    ] {
        assert_eq!(
            refused(reserve(&store, &policy, spelling, "10000", payer, NOW)),
            RefusalCode::OverPerSubjectCap,
            "{spelling}"
        );
        assert_eq!(
            store.totals(spelling, NOW).unwrap().subject_day,
            usd("0.02")
        );
    }
    // Another endpoint (another port, another query) has its own cap.
    reserve(
        &store,
        &policy,
        "https://127.0.0.1:8444/weather",
        "10000",
        payer,
        NOW,
    )
    .unwrap();
    reserve(
        &store,
        &policy,
        "https://127.0.0.1:8443/weather?city=Oslo",
        "10000",
        payer,
        NOW,
    )
    .unwrap();
    let rows = store.reservations().unwrap();
    assert_eq!(rows[0].subject, canonical);
    assert_eq!(rows[1].subject, canonical);
    assert!(
        store
            .refusals()
            .unwrap()
            .iter()
            .all(|r| r.subject == canonical)
    );
}

/// A store written by a build before subjects were canonical (`x402-probe.spend/1`, rows keyed
/// by the spelling each caller used) still opens: it is migrated to `/2` in place, every row's
/// subject canonical, nothing else changed, and the reservations made under several spellings
/// now count against the one endpoint's cap.
#[test]
fn a_first_schema_store_is_migrated_and_its_spellings_count_as_one_subject() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spend.sqlite");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        let v1 = SPEND_V2_SQL.replace("x402-probe.spend/2", "x402-probe.spend/1");
        conn.execute_batch(&v1).unwrap();
        for (i, (subject, state)) in [
            ("https://127.1:8443/weather", "open"),
            ("https://0x7f000001:8443/./weather", "settled"),
            ("https://127.0.0.1:8443/weather", "released"),
            ("not a url", "open"),
        ]
        .iter()
        .enumerate()
        {
            conn.execute(
                "INSERT INTO reservation (subject, created_at, network, chain_id, asset, payer,
                     pay_to, amount, cost_usd, valid_after, valid_before, nonce, from_block, state)
                 VALUES (?1, ?2, 'eip155:84532', 84532, ?3, ?4, ?3, '10000', '0.01', ?5, ?6, ?7,
                     7, ?8)",
                rusqlite::params![
                    subject,
                    NOW,
                    ASSET.to_checksum(None),
                    Address::repeat_byte(9).to_checksum(None),
                    NOW - 600,
                    NOW + 60,
                    format!("0x{:064x}", i + 1),
                    state
                ],
            )
            .unwrap();
        }
        conn.execute(
            "INSERT INTO refusal (subject, at, code, reason) VALUES (?1, ?2, 'quote_changed', 'r')",
            rusqlite::params!["https://2130706433:8443/weather", NOW],
        )
        .unwrap();
    }
    let store = SpendStore::open_file(&path).unwrap();
    let rows = store.reservations().unwrap();
    let subjects: Vec<&str> = rows.iter().map(|r| r.subject.as_str()).collect();
    let canonical = "https://127.0.0.1:8443/weather";
    assert_eq!(subjects, [canonical, canonical, canonical, "not a url"]);
    let states: Vec<ReservationState> = rows.iter().map(|r| r.state).collect();
    assert_eq!(
        states,
        [
            ReservationState::Open,
            ReservationState::Settled,
            ReservationState::Released,
            ReservationState::Open
        ]
    );
    assert_eq!(store.refusals().unwrap()[0].subject, canonical);
    // The open and the settled one: the endpoint's two cents, its cap of 0.02 reached.
    assert_eq!(
        store.totals(canonical, NOW).unwrap().subject_day,
        usd("0.02")
    );
    let policy = policy("0.05", "0.02", "1");
    assert_eq!(
        refused(reserve(
            &store,
            &policy,
            "https://127.1:8443/weather",
            "10000",
            Address::repeat_byte(9),
            NOW
        )),
        RefusalCode::OverPerSubjectCap
    );
    drop(store);
    let schema: String = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(schema, x402_probe::spend::SCHEMA_ID);
    assert_eq!(schema, "x402-probe.spend/3");
    // Opening again changes nothing.
    let again = SpendStore::open_file(&path).unwrap();
    assert_eq!(again.reservations().unwrap(), rows);
}

/// The schema the builds before Solana payments wrote (`x402-probe.spend/2`), as they wrote it.
const SPEND_V2_SQL: &str = include_str!("../data/spend/spend-v2.sql");

/// A `/2` store (EVM reservations only, no network kind) opens as `/3`: its rows read back as
/// EVM reservations, unchanged, still counted against the caps, and a new reservation is added
/// beside them.
#[test]
fn a_second_schema_store_gains_the_network_kind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spend.sqlite");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(SPEND_V2_SQL).unwrap();
        conn.execute(
            "INSERT INTO reservation (subject, created_at, network, chain_id, asset, payer,
                 pay_to, amount, cost_usd, valid_after, valid_before, nonce, from_block, state)
             VALUES ('https://a.example/x', ?1, 'eip155:84532', 84532, ?2, ?3, ?2, '10000',
                 '0.01', ?4, ?5, ?6, 7, 'open')",
            rusqlite::params![
                NOW,
                ASSET.to_checksum(None),
                Address::repeat_byte(9).to_checksum(None),
                NOW - 600,
                NOW + 60,
                format!("0x{:064x}", 1)
            ],
        )
        .unwrap();
    }
    let store = SpendStore::open_file(&path).unwrap();
    let rows = store.reservations().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].state, ReservationState::Open);
    assert_eq!(rows[0].pay_to, ASSET);
    assert!(store.svm_reservations().unwrap().is_empty());
    assert_eq!(
        store
            .totals("https://a.example/x", NOW)
            .unwrap()
            .subject_day,
        usd("0.01")
    );
    let policy = policy("0.05", "1", "1");
    let payer = Address::repeat_byte(9);
    reserve(&store, &policy, "https://a.example/x", "100", payer, NOW).unwrap();
    assert_eq!(store.reservations().unwrap().len(), 2);
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let kinds: Vec<String> = conn
        .prepare("SELECT kind FROM reservation ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(kinds, ["evm", "evm"]);
    let schema: String = conn
        .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(schema, "x402-probe.spend/3");
}

#[test]
fn a_resolved_reservation_never_moves_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = SpendStore::open(dir.path()).unwrap();
    let policy = policy("0.05", "1", "1");
    let payer = Address::repeat_byte(9);
    let r = reserve(&store, &policy, "s", "100", payer, NOW).unwrap();
    let id = r.id();
    assert!(store.mark_settled(id, None, "used", NOW).unwrap());
    assert!(
        !store.mark_released(id, "late", NOW).unwrap(),
        "settled stays settled"
    );
    assert!(
        !store.mark_settled(id, None, "twice", NOW).unwrap(),
        "not settled twice"
    );
    assert!(!store.release_unsent(r, "late", NOW).unwrap());
    let row = store.reservation(id).unwrap().unwrap();
    assert_eq!(row.state, ReservationState::Settled);
    assert_eq!(row.resolution.as_deref(), Some("used"));

    let unsent = reserve(&store, &policy, "s", "100", payer, NOW).unwrap();
    let unsent_id = unsent.id();
    assert!(
        store
            .release_unsent(unsent, "connect refused", NOW)
            .unwrap()
    );
    let row = store.reservation(unsent_id).unwrap().unwrap();
    assert_eq!(row.state, ReservationState::Released);
    assert!(row.resolution.unwrap().contains("never sent"));
}

#[test]
fn the_wallet_refuses_a_reservation_for_another_payer() {
    let dir = tempfile::tempdir().unwrap();
    let wallet = wallet(dir.path());
    let store = SpendStore::open(dir.path()).unwrap();
    let policy = policy("0.05", "1", "1");
    let other = reserve(&store, &policy, "s", "100", Address::repeat_byte(1), NOW).unwrap();
    let err = wallet.sign(&other).expect_err("not our reservation");
    assert!(matches!(err, WalletError::NotOurs { .. }), "{err}");
}

#[test]
fn policy_rules_refuse_what_they_must() {
    let dir = tempfile::tempdir().unwrap();
    let store = SpendStore::open(dir.path()).unwrap();
    let payer = Address::repeat_byte(9);
    let mut v1_name = policy("0.05", "1", "1");
    v1_name.allowlist[0].network = "base-sepolia".into();
    let err = reserve(&store, &v1_name, "s", "1", payer, NOW).expect_err("v1 name");
    assert!(err.to_string().contains("CAIP-2"), "{err}");
    let mut twice = policy("0.05", "1", "1");
    twice.allowlist.push(twice.allowlist[0].clone());
    let err = reserve(&store, &twice, "s", "1", payer, NOW).expect_err("duplicate");
    assert!(err.to_string().contains("twice"), "{err}");
    // A subject cap below the per-call cap is consistent: it binds first.
    let small_subject = policy("0.05", "0.00001", "1");
    assert_eq!(
        refused(reserve(&store, &small_subject, "t", "11", payer, NOW)),
        RefusalCode::OverPerSubjectCap
    );

    let mut tight = policy("0.05", "1", "1");
    tight.max_timeout_seconds = 30;
    assert_eq!(
        refused(reserve(&store, &tight, "s", "1", payer, NOW)),
        RefusalCode::TimeoutInvalid
    );
    let other_asset = PayPolicy {
        allowlist: vec![AllowedAsset {
            asset: Address::repeat_byte(3),
            ..policy("0.05", "1", "1").allowlist[0].clone()
        }],
        ..policy("0.05", "1", "1")
    };
    assert_eq!(
        refused(reserve(&store, &other_asset, "s", "1", payer, NOW)),
        RefusalCode::AssetNotAllowed
    );
}

/// Several processes share one store (a daemon and a one-off probe): every reservation re-reads the
/// totals inside its own write transaction, so racing writers never pass a cap together.
#[test]
fn racing_writers_on_one_file_never_pass_a_cap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spend.sqlite");
    drop(SpendStore::open_file(&path).unwrap());
    let policy = policy("0.05", "1", "0.25");
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let (path, policy) = (path.clone(), policy.clone());
            std::thread::spawn(move || {
                let store = SpendStore::open_file(&path).unwrap();
                let mut reserved = 0;
                for _ in 0..10 {
                    match reserve(
                        &store,
                        &policy,
                        &format!("s{i}"),
                        "10000",
                        Address::repeat_byte(9),
                        NOW,
                    ) {
                        Ok(_) => reserved += 1,
                        Err(ReserveError::Refused(r)) => {
                            assert_eq!(r.code, RefusalCode::OverDailyCap)
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                reserved
            })
        })
        .collect();
    let reserved: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(
        reserved, 25,
        "exactly the daily cap's worth of one-cent reservations"
    );
    let store = SpendStore::open_file(&path).unwrap();
    assert_eq!(store.reservations().unwrap().len(), 25);
    assert_eq!(store.refusals().unwrap().len(), 80 - 25);
    assert_eq!(store.totals("x", NOW).unwrap().day, usd("0.25"));
}

/// A 402 whose every entry is declined: nothing is fetched, signed or reserved, and each refusal is
/// recorded with the entry it declined.
#[tokio::test]
async fn every_declined_entry_is_recorded_with_its_reason() {
    use x402_probe::probe::http::{FetchConfig, FetchRequest};
    use x402_probe::probe::paid::{Decision, PaidContext, PaidOptions, paid_call};
    use x402_probe::probe::rpc::Rpc;

    let dir = tempfile::tempdir().unwrap();
    let wallet = wallet(dir.path());
    let store = SpendStore::open(dir.path()).unwrap();
    let policy = policy("0.05", "1", "1");
    let required = json!({
        "x402Version": 2,
        "resource": {"url": "https://127.0.0.1:9/weather"},
        "accepts": [
            {"scheme": "exact", "network": "eip155:84532", "amount": "10000",
             "asset": ASSET.to_checksum(None), "payTo": PAY_TO.to_checksum(None),
             "maxTimeoutSeconds": 60,
             "extra": {"name": "USDC", "version": "2", "assetTransferMethod": "permit2"}},
            {"scheme": "exact", "network": "eip155:8453", "amount": "10000",
             "asset": ASSET.to_checksum(None), "payTo": PAY_TO.to_checksum(None),
             "maxTimeoutSeconds": 60, "extra": {"name": "USDC", "version": "2"}}
        ]
    });
    let header = base64::engine::general_purpose::STANDARD.encode(required.to_string());
    let quote = parse_payment_required(402, &[("payment-required".into(), header)], b"{}");
    // Nothing may be contacted: an unreachable RPC and endpoint prove it.
    let rpc = Rpc::new("http://127.0.0.1:9");
    let fetch_cfg = FetchConfig::default();
    let ctx = PaidContext {
        wallet: &wallet,
        svm: None,
        store: &store,
        policy: &policy,
        rpc: &rpc,
        fetch: &fetch_cfg,
        options: PaidOptions::lab(),
        clock: &x402_probe::clock::SystemClock,
        wall: &x402_probe::clock::SystemClock,
        on_step: None,
        references: &Default::default(),
    };
    let url = "https://127.0.0.1:9/weather";
    let obs = paid_call(&ctx, url, &FetchRequest::get(url), &quote).await;
    let Decision::Refused { refusals } = &obs.decision else {
        panic!("expected a refusal: {:?}", obs.decision);
    };
    let codes: Vec<RefusalCode> = refusals.iter().map(|r| r.code).collect();
    assert_eq!(
        codes,
        [
            RefusalCode::TransferMethodNotEip3009,
            RefusalCode::NetworkNotAllowed
        ]
    );
    assert!(obs.requote.is_none() && obs.payment.is_none());
    let rows = store.refusals().unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows[0].requirement.as_deref().unwrap().contains("permit2"));
    assert!(
        rows[1]
            .requirement
            .as_deref()
            .unwrap()
            .contains("eip155:8453")
    );
    assert!(store.reservations().unwrap().is_empty());
}
