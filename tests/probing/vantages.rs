//! Several vantages against the lab, with the real prober: three vantages in network namespaces
//! probe at the same time an endpoint that quotes one of them another payee (cloaking), an honest
//! one, one that resets one vantage's connections (a regional outage) and one that resets every
//! vantage's; their observations go through the findings and the quorum as the scorer reads them
//! (`rubrics/README.md`, "Several vantages"). Needs root and `ip`: skipped with a reason otherwise.

use std::sync::Arc;
use std::time::Duration;

use x402_lab::Lab;
use x402_lab::server::{BySource, Placement};
use x402_lab::vantage_net::VantageNet;
use x402_probe::checks::findings::{CloakingContext, FindingId, cloaking};
use x402_probe::checks::free::evaluate_free;
use x402_probe::evidence::{CheckId, Outcome};
use x402_probe::observation::FreeObservation;
use x402_probe::probe::free::{FreeProbeConfig, probe_free};
use x402_probe::probe::http::FetchConfig;
use x402_probe::rubric::{Rubric, Verdict};
use x402_probe::score::document::ScoreDocument;
use x402_probe::score::input::{HistoryEntry, Inputs, InputsDocument};
use x402_probe::score::montecarlo::Sampler;
use x402_probe::score::quorum::{QuorumConfig, QuorumDocument, inputs_from_vantages};
use x402_probe::score::score;

const VANTAGES: usize = 3;
const CYCLE_S: i64 = 900;

/// Three vantages, or why not (printed; the test then returns).
fn vantages() -> Option<Arc<VantageNet>> {
    match VantageNet::create(VANTAGES) {
        Ok(net) => Some(Arc::new(net)),
        Err(e) => {
            eprintln!("skipped: three vantages in network namespaces need root and iproute2 ({e})");
            None
        }
    }
}

fn config(lab: &Lab, vantage: usize) -> FreeProbeConfig {
    let ca: rustls_pki_types::CertificateDer<'static> =
        rustls_pki_types::pem::PemObject::from_pem_slice(lab.ca_pem.as_bytes()).unwrap();
    FreeProbeConfig {
        fetch: FetchConfig {
            allow_private: true,
            extra_roots: vec![ca],
            ..FetchConfig::default()
        },
        samples: 2,
        spacing: Duration::from_millis(0),
        deadline: Duration::from_secs(30),
        vantage: format!("v{vantage}"),
        ..FreeProbeConfig::default()
    }
}

/// The real free run of `url` from every vantage at once, each in its namespace on a runtime of
/// its own thread.
fn probe_from_all(net: &Arc<VantageNet>, lab: &Lab, url: &str) -> Vec<FreeObservation> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let threads: Vec<_> = (0..VANTAGES)
        .map(|i| {
            let (net, cfg, url) = (net.clone(), config(lab, i), url.to_string());
            std::thread::spawn(move || {
                net.run_in(i, move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    runtime.block_on(probe_free(&cfg, &url, now))
                })
                .expect("enter the vantage's namespace")
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// An endpoint of the lab's `honest-v2` at the service address, answering by source.
async fn placed(lab: &mut Lab, net: &VantageNet, name: &str, by_source: BySource) -> String {
    lab.spawn_placed(
        "honest-v2",
        name,
        &Placement {
            bind: net.service_address().into(),
            by_source,
        },
    )
    .await
    .unwrap()
}

fn address(net: &VantageNet, i: usize) -> std::net::IpAddr {
    std::net::IpAddr::V4(net.vantages()[i].address)
}

async fn lab() -> Lab {
    x402_probe::install_crypto_provider();
    Lab::start_with(x402_lab::LabOptions {
        scenarios: Some(vec!["honest-v2".into()]),
        ..Default::default()
    })
    .await
    .unwrap()
}

fn r1(obs: &FreeObservation, rubric: &Rubric) -> Outcome {
    evaluate_free(obs, rubric)
        .into_iter()
        .find(|r| r.id == CheckId::R1)
        .unwrap()
        .outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloaked_endpoint_is_flagged_with_each_vantages_receipt_and_an_honest_one_passes() {
    let Some(net) = vantages() else { return };
    let mut lab = lab().await;
    let other = lab.other_wallet;
    let cloaked = placed(
        &mut lab,
        &net,
        "cloaked",
        BySource::Cloak {
            from: vec![address(&net, 0)],
            pay_to: other,
        },
    )
    .await;
    let honest = placed(&mut lab, &net, "honest-placed", BySource::Alike).await;
    let (ours, theirs) = (
        format!("{:#x}", lab.pay_to),
        format!("{:#x}", lab.other_wallet),
    );
    let seen_cloaked = probe_from_all(&net, &lab, &cloaked);
    let seen_honest = probe_from_all(&net, &lab, &honest);
    let ctx = CloakingContext::default();

    let refs: Vec<&FreeObservation> = seen_cloaked.iter().collect();
    let (finding, runs) = cloaking(&refs, &ctx);
    assert_eq!(finding.id, FindingId::Cloaking);
    assert_eq!(finding.outcome, Outcome::Fail, "{}", finding.evidence);
    assert!(finding.evidence.contains("pay_to"), "{}", finding.evidence);
    assert!(finding.evidence.contains("to v0 "), "{}", finding.evidence);
    // The cloaked run alone is marked, for payTo alone.
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(
        (runs[0].vantage.as_str(), runs[0].fields.clone()),
        ("v0", vec!["pay_to".to_string()])
    );
    // Every vantage's receipt, with its body's hash and the payTo it was quoted.
    let observations = finding.receipt.detail["observations"].as_array().unwrap();
    assert_eq!(observations.len(), VANTAGES);
    for (i, o) in observations.iter().enumerate() {
        let vantage = format!("v{i}");
        assert_eq!(o["vantage"], vantage.as_str());
        let body = seen_cloaked[i].samples[0]
            .exchange
            .response
            .as_ref()
            .unwrap()
            .body_sha256
            .clone();
        assert_eq!(o["sha256"]["response.body"], body.as_str());
        assert_eq!(
            finding
                .receipt
                .sha256
                .get(&format!("{vantage}/response.body")),
            Some(&body)
        );
        let expected = if i == 0 { &theirs } else { &ours };
        assert_eq!(o["accepts"][0]["pay_to"], expected.as_str(), "vantage {i}");
    }
    assert_eq!(finding.receipt.detail["differs"][0]["field"], "pay_to");

    let refs: Vec<&FreeObservation> = seen_honest.iter().collect();
    let (finding, runs) = cloaking(&refs, &ctx);
    assert_eq!(finding.outcome, Outcome::Pass, "{}", finding.evidence);
    assert!(runs.is_empty());
    // One vantage alone cannot see it.
    let (finding, _) = cloaking(&refs[..1], &ctx);
    assert_eq!(finding.outcome, Outcome::Unmeasured);
}

fn text(s: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(s)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

/// `cycles` probe cycles of one subject ending at `end`: in each, every vantage's entries are
/// those of its observation in `pick(cycle)`, their times shifted to the cycle (vantages 5
/// minutes apart).
fn timeline(
    rubric: &Rubric,
    cycles_of: &[&[FreeObservation]],
    pick: &dyn Fn(i64) -> usize,
    cycles: i64,
    end: i64,
) -> Vec<(String, HistoryEntry)> {
    let start = end - cycles * CYCLE_S;
    let mut out = Vec::new();
    let mut seq = 0;
    for c in 0..cycles {
        for (i, obs) in cycles_of[pick(c)].iter().enumerate() {
            let results = evaluate_free(obs, rubric);
            let at = text(start + c * CYCLE_S + i as i64 * 300);
            for mut e in x402_probe::history::run_entries(&results, rubric, false, "r0", seq) {
                seq += 1;
                e.at = at.clone();
                out.push((obs.vantage.clone(), e));
            }
        }
    }
    out
}

fn meta(rubric: &Rubric, as_of: i64, since: i64) -> InputsDocument {
    serde_json::from_value(serde_json::json!({
        "rubric_sha256": rubric.sha256(), "rubric_version": rubric.version,
        "as_of": text(as_of),
        "subject": {"id": "regional", "url": "https://regional.example/", "category": "weather",
                    "price_usd": "0.01", "revisions": [{"id": "r0", "at": text(since)}]},
        "history": [], "provenance": "test_harness"
    }))
    .unwrap()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regional_outage_is_not_down_under_the_quorum_and_every_vantage_failing_past_72_hours_is()
{
    let Some(net) = vantages() else { return };
    let mut lab = lab().await;
    let rubric = Rubric::embedded_default();
    let regional = placed(
        &mut lab,
        &net,
        "regional",
        BySource::Unreachable(vec![address(&net, 1)]),
    )
    .await;
    let everywhere = placed(
        &mut lab,
        &net,
        "everywhere",
        BySource::Unreachable((0..VANTAGES).map(|i| address(&net, i)).collect()),
    )
    .await;
    let one_out = probe_from_all(&net, &lab, &regional);
    let all_out = probe_from_all(&net, &lab, &everywhere);
    let r1s: Vec<Outcome> = one_out.iter().map(|o| r1(o, &rubric)).collect();
    assert_eq!(
        r1s,
        [Outcome::Pass, Outcome::Fail, Outcome::Pass],
        "regional"
    );
    let r1s: Vec<Outcome> = all_out.iter().map(|o| r1(o, &rubric)).collect();
    assert_eq!(r1s, [Outcome::Fail; 3], "everywhere");

    let cfg = QuorumConfig::new(None, CYCLE_S as u64);
    let end = 1_793_491_200; // 2026-11-01T00:00:00Z
    let hours = 80;
    let cycles = hours * 3600 / CYCLE_S;
    let since = end - hours * 3600 - 1;

    // One cycle as observed: it did not fail, and vantage 1's disagreement is shown.
    let one = timeline(&rubric, &[&one_out], &|_| 0, 1, end);
    let doc = inputs_from_vantages(meta(&rubric, end, since), one, &cfg, &[]).unwrap();
    let q: QuorumDocument = doc.quorum.clone().unwrap();
    assert_eq!(q.vantages, ["v0", "v1", "v2"]);
    assert_eq!((q.cycles, q.failed_cycles), (2, 0), "R1's and R2's cycle");
    let r1_rows: Vec<_> = q
        .disagreements
        .iter()
        .filter(|d| d.check == CheckId::R1)
        .collect();
    assert_eq!(r1_rows.len(), 1, "{:?}", q.disagreements);
    assert_eq!(
        (
            r1_rows[0].vantage.as_str(),
            r1_rows[0].saw,
            r1_rows[0].failing,
            r1_rows[0].probed
        ),
        ("v1", Outcome::Fail, 1, 3)
    );
    let shown = scored(doc);
    assert_eq!(shown.quorum.as_ref(), Some(&q), "in the score document");

    // 80 hours of such cycles: R1 never fails under the quorum, never down.
    let regional_80h = timeline(&rubric, &[&one_out], &|_| 0, cycles, end);
    let mut raw = meta(&rubric, end, since);
    raw.history = regional_80h.iter().map(|(_, e)| e.clone()).collect();
    let raw = scored(raw);
    let r1_fails = |d: &ScoreDocument| {
        d.dimensions
            .iter()
            .flat_map(|d| &d.checks)
            .find(|c| c.id == CheckId::R1)
            .unwrap()
            .fails
    };
    assert!(
        r1_fails(&raw) > 0,
        "without the quorum vantage 1's fails count"
    );
    let doc = inputs_from_vantages(meta(&rubric, end, since), regional_80h, &cfg, &[]).unwrap();
    let q = doc.quorum.clone().unwrap();
    assert_eq!(q.failed_cycles, 0);
    assert!(
        q.disagreements
            .iter()
            .all(|d| d.vantage == "v1" && d.cycles == cycles as u32)
    );
    let s = scored(doc);
    assert_eq!(r1_fails(&s), 0);
    assert!(!down(&s));
    assert_ne!(s.verdict.verdict, Verdict::Down);

    // Every vantage failing for the last 73 hours (after 7 hours of the regional outage): down.
    let all_from = cycles - 73 * 3600 / CYCLE_S;
    let pick = move |c: i64| usize::from(c >= all_from);
    let mixed = timeline(&rubric, &[&one_out, &all_out], &pick, cycles, end);
    let doc = inputs_from_vantages(meta(&rubric, end, since), mixed, &cfg, &[]).unwrap();
    let q = doc.quorum.clone().unwrap();
    // R1's cycles, and R2's when an unreachable endpoint fails R2 too.
    let r2_fails = all_out.iter().all(|o| {
        evaluate_free(o, &rubric)
            .into_iter()
            .any(|r| r.id == CheckId::R2 && r.outcome == Outcome::Fail)
    });
    assert_eq!(
        q.failed_cycles as i64,
        (1 + i64::from(r2_fails)) * (cycles - all_from)
    );
    let s = scored(doc);
    assert!(down(&s), "{:?}", s.gates);
    assert_eq!(s.verdict.verdict, Verdict::Down);

    // The same for the last 70 hours only: not yet.
    let all_from = cycles - 70 * 3600 / CYCLE_S;
    let pick = move |c: i64| usize::from(c >= all_from);
    let mixed = timeline(&rubric, &[&one_out, &all_out], &pick, cycles, end);
    let s = scored(inputs_from_vantages(meta(&rubric, end, since), mixed, &cfg, &[]).unwrap());
    assert!(!down(&s));
}
