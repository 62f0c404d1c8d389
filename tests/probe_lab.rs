//! The acceptance table: probe every lab scenario for free and compare every free check with what the
//! lab promises (`expect`). Also the CLI's exit codes and JSON report on a few of them.

use std::collections::BTreeMap;
use std::time::Duration;

use x402_lab::scenarios::READINESS_FREE;
use x402_lab::{Lab, LabOptions};
use x402_probe::checks::free::{evaluate_free, evaluate_free_parsed};
use x402_probe::probe::free::{FreeProbeConfig, PeerFetches, probe_free_parsed};
use x402_probe::probe::http::FetchConfig;
use x402_probe::probe::rpc::Rpc;
use x402_probe::probe::solana_rpc::SolanaRpc;
use x402_probe::readiness::{self, ReadinessRubric};
use x402_probe::rubric::{Kind, Rubric};

fn lab_config(lab: &Lab) -> FreeProbeConfig {
    let ca = rustls_pki_types::pem::PemObject::from_pem_slice(lab.ca_pem.as_bytes()).unwrap();
    FreeProbeConfig {
        fetch: FetchConfig {
            allow_private: true,
            observe_invalid_tls: true,
            extra_roots: vec![ca],
            ..FetchConfig::default()
        },
        samples: 2,
        spacing: Duration::from_millis(10),
        listing: Some(lab.manifest().catalogue),
        rpc: Some(Rpc::new(lab.rpc_url())),
        solana_rpc: lab.solana_rpc_url().map(SolanaRpc::new),
        declared_assets: vec![lab.token.address()],
        vantage: "test".into(),
        ..FreeProbeConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_free_check_agrees_with_the_lab_on_every_scenario() {
    x402_probe::install_crypto_provider();
    let lab = Lab::start_with(LabOptions::default()).await.unwrap();
    let rubric = Rubric::embedded_default();
    let free: Vec<String> = rubric
        .checks
        .iter()
        .filter(|c| c.kind == Kind::Free)
        .map(|c| c.id.as_str().to_string())
        .collect();
    let cfg = lab_config(&lab);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let mut runs = tokio::task::JoinSet::new();
    for e in &lab.endpoints {
        let (cfg, url, name) = (cfg.clone(), e.url.clone(), e.scenario.name);
        runs.spawn(async move {
            let started = std::time::Instant::now();
            let (observation, first_parse) =
                probe_free_parsed(&cfg, &url, now, PeerFetches::Make).await;
            (name, observation, first_parse, started.elapsed())
        });
    }
    let mut disagreements = Vec::new();
    let mut compared = 0;
    let readiness_rubric = ReadinessRubric::embedded();
    let mut readiness_compared = 0;
    let mut findings_compared = 0;
    // The prober's parse of each first answer, handed to the checks: taken for that answer, it
    // gives the results a parse of the observation alone gives; a parse of another scenario's
    // answer is never taken for this one's.
    let mut parse_taken = 0;
    let mut other_answer: Option<x402_probe::probe::http::HttpResponse> = None;
    while let Some(joined) = runs.join_next().await {
        let (name, observation, first_parse, elapsed) = joined.unwrap();
        let alone = evaluate_free(&observation, &rubric);
        let first = observation
            .samples
            .first()
            .and_then(|s| s.exchange.response.clone());
        if let (Some(parse), Some(answer)) = (&first_parse, &first) {
            let again = x402_probe::x402::parse::parse_payment_required(
                answer.status,
                &answer.headers,
                &answer.body,
            );
            assert_eq!(
                format!("{:?}", parse.parsed()),
                format!("{again:?}"),
                "{name}"
            );
            parse_taken += 1;
        }
        assert_eq!(
            evaluate_free_parsed(&observation, &rubric, first_parse),
            alone,
            "{name}: the checks with the prober's parse"
        );
        if let Some(other) = &other_answer {
            let wrong = x402_probe::x402::parse::ResponseParse::of(other);
            assert_eq!(
                evaluate_free_parsed(&observation, &rubric, Some(wrong)),
                alone,
                "{name}: the checks given another scenario's parse"
            );
        }
        if first.is_some() {
            other_answer = first;
        }
        // Hostile endpoints end as findings within the prober's bounds: per request at most the
        // first-byte (10 s) plus the whole-body (15 s) deadlines, for 2 samples and the operator file.
        assert!(
            elapsed < Duration::from_secs(3 * 25),
            "{name} took {elapsed:?}"
        );
        let results: BTreeMap<String, _> = alone
            .into_iter()
            .map(|r| (r.id.as_str().to_string(), r))
            .collect();
        let scenario = lab.endpoint(name).unwrap();
        // Every subject gets an agent-readiness assessment; a free run never completes the
        // reference task, so it is never more than a paper assessment.
        let all: Vec<_> = results.values().cloned().collect();
        let readiness =
            readiness::assess(&readiness_rubric, &readiness::evidence::from_checks(&all));
        assert!(readiness.range.low <= readiness.range.high, "{name}");
        assert_eq!(readiness.completed, None, "{name}");
        assert!(
            ["unverified", "hostile"].contains(&readiness.band.as_str()),
            "{name}: {}",
            readiness.band.as_str()
        );
        if let Some((_, want)) = READINESS_FREE.iter().find(|(n, _)| *n == name) {
            readiness_compared += 1;
            let got = (
                readiness.range.low,
                readiness.range.high,
                readiness.band.as_str(),
            );
            if got != (want.low, want.high, want.band) {
                disagreements.push(format!("{name} readiness: want {want:?}, got {got:?}"));
            }
        }
        // What the run declares carries the verified signer of the signed offer for its first
        // entry (H3's continuity): the lab's offer key where the offer is good and matches,
        // nobody where it is badly signed, unmatched or absent.
        let declared = x402_probe::checks::history::declared(&observation, 0);
        let want_signer = match scenario.scenario.offers {
            x402_lab::offers::Signing::Eip712
            | x402_lab::offers::Signing::Jws
            | x402_lab::offers::Signing::ReceiptLies => {
                Some(x402_lab::offers::offer_signer().to_checksum(None))
            }
            _ => None,
        };
        assert_eq!(
            declared.and_then(|d| d.offer_signer),
            want_signer,
            "{name}: the offer's signer"
        );
        // Every `unmeasured` says whose it is: a free run's paid checks and history ours, the
        // requirements a 500 never carried the seller's.
        {
            use x402_probe::checks::attribution::{Party, attribute_all};
            use x402_probe::evidence::{CheckId, Outcome};
            let parties = attribute_all(&all, &observation, None);
            for r in &all {
                if r.outcome == Outcome::Unmeasured && !parties.contains_key(&r.id) {
                    disagreements.push(format!("{name} {}: unmeasured without a party", r.id));
                }
            }
            let party = |id: CheckId| parties.get(&id).map(|a| a.party);
            let want: &[(CheckId, Party)] = match name {
                "honest-v2" => &[(CheckId::H2, Party::Us), (CheckId::R4, Party::Us)],
                "status-500" | "down" => &[(CheckId::C2, Party::Seller)],
                _ => &[],
            };
            for (id, p) in want {
                if party(*id) != Some(*p) {
                    disagreements
                        .push(format!("{name} {id} party: want {p}, got {:?}", party(*id)));
                }
            }
        }
        // The findings peers publish that a free run gives, against the lab's word.
        for f in x402_probe::checks::findings::evaluate_free(&observation) {
            if let Some(want) = scenario.scenario.findings.get(f.id.as_str()) {
                findings_compared += 1;
                if f.outcome.as_str() != *want {
                    disagreements.push(format!(
                        "{name} finding {}: want {want}, got {} ({})",
                        f.id, f.outcome, f.evidence
                    ));
                }
            }
        }
        for (id, want) in &scenario.scenario.expect {
            if !free.iter().any(|f| f == id) {
                continue;
            }
            compared += 1;
            let got = &results[*id];
            if got.outcome.as_str() != *want {
                disagreements.push(format!(
                    "{name} {id}: want {want}, got {} ({})",
                    got.outcome, got.evidence
                ));
            }
        }
    }
    assert!(
        parse_taken > 40,
        "the prober parsed only {parse_taken} first answers"
    );
    assert!(compared > 300, "compared only {compared} expectations");
    assert!(
        findings_compared >= 12,
        "compared only {findings_compared} findings"
    );
    assert_eq!(readiness_compared, READINESS_FREE.len());
    assert!(
        disagreements.is_empty(),
        "{} disagreements:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
}
