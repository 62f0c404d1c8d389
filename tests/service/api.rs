//! The daemon's HTTP API against a running daemon with the lab behind it: real HTTP on loopback,
//! a real store filled by simulated days of real probes and paid calls. Every response a test
//! sees is validated against the OpenAPI document the daemon serves, and checked for raw ledger
//! entries (seed 004: the public gets signed aggregates only).

use crate::api_support;

use std::collections::BTreeMap;
use std::process::Command;

use api_support::daemon_support::DAY;
use api_support::*;
use serde_json::{Value, json};
use x402_probe::readiness::evidence::{OwnApiObservation, from_own_api};
use x402_probe::readiness::{self, ReadinessRubric};
use x402_probe::store::Store;

/// One response seen: the route template it answers, and what came back.
struct Seen {
    template: &'static str,
    url: String,
    status: u16,
    content_type: String,
    body: bytes::Bytes,
}

struct Client {
    http: reqwest::Client,
    seen: Vec<Seen>,
}

impl Client {
    fn new() -> Client {
        Client {
            http: reqwest::Client::new(),
            seen: Vec::new(),
        }
    }

    async fn get(&mut self, template: &'static str, url: String) -> (u16, Value) {
        let r = self.http.get(&url).send().await.expect("the API answers");
        let (status, content_type, body) = read_answer(r).await;
        let value = if content_type.starts_with("application/json") {
            serde_json::from_slice(&body).unwrap_or_else(|e| {
                panic!("{url}: not JSON ({e}): {}", String::from_utf8_lossy(&body))
            })
        } else {
            Value::String(String::from_utf8_lossy(&body).into_owned())
        };
        self.seen.push(Seen {
            template,
            url,
            status,
            content_type,
            body,
        });
        (status, value)
    }
}

/// Every error answer seen was JSON with a code and a message (and there was one).
fn err_codes_seen(c: &Client) -> bool {
    let errors: Vec<Value> = c
        .seen
        .iter()
        .filter(|s| s.status >= 400 && s.content_type.starts_with("application/json"))
        .filter_map(|s| serde_json::from_slice(&s.body).ok())
        .collect();
    !errors.is_empty()
        && errors
            .iter()
            .all(|e| e["error"]["code"].is_string() && e["error"]["message"].is_string())
}

/// Validates a response against the operation's schema for its status in the document.
fn validate(doc: &Value, seen: &Seen) -> Result<(), String> {
    validate_response(
        doc,
        "get",
        seen.template,
        &seen.url,
        seen.status,
        &seen.content_type,
        &seen.body,
    )
}

fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_x402-probe"))
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_public_route_of_a_daemon_with_history_answers_as_documented() {
    let d = ApiDaemon::start(ApiOptions::default()).await;
    let mut c = Client::new();

    // The document the daemon serves is the one every response is checked against.
    let (status, doc) = c.get("/v1/openapi.json", d.url("/v1/openapi.json")).await;
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.1.0");

    // Subjects: every subject, scored from four days of history.
    let (status, page) = c.get("/v1/subjects", d.url("/v1/subjects")).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["total"], 4, "{page}");
    let subjects = page["subjects"].as_array().unwrap();
    for s in subjects {
        let latest = &s["latest"];
        assert!(latest.is_object(), "scored: {s}");
        for field in [
            "score",
            "band",
            "verdict",
            "confidence",
            "outlook",
            "watch",
            "value",
        ] {
            assert!(!latest[field].is_null(), "{field} in {s}");
        }
        assert_eq!(
            s["id"].as_str().unwrap(),
            x402_probe::api::signed::subject_id(s["url"].as_str().unwrap())
        );
    }
    // Sorted by capped score, highest first (the default).
    let scores: Vec<f64> = subjects
        .iter()
        .map(|s| s["latest"]["capped_score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    let (_, asc) = c
        .get("/v1/subjects", d.url("/v1/subjects?sort=score&order=asc"))
        .await;
    let asc_scores: Vec<f64> = asc["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["latest"]["capped_score"].as_f64().unwrap())
        .collect();
    assert!(
        asc_scores.windows(2).all(|w| w[0] <= w[1]),
        "{asc_scores:?}"
    );

    // Filters: a paid call showed overcharging and a wrong payee: avoid.
    let (_, avoid) = c
        .get(
            "/v1/subjects",
            d.url("/v1/subjects?verdict=avoid&sort=id&order=asc"),
        )
        .await;
    let avoid_urls: Vec<&str> = avoid["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["url"].as_str().unwrap())
        .collect();
    assert!(
        avoid_urls.contains(&d.urls["overcharge"].as_str()),
        "{avoid}"
    );
    assert!(
        avoid_urls.contains(&d.urls["wrong-payee"].as_str()),
        "{avoid}"
    );
    assert!(
        !avoid_urls.contains(&d.urls["honest-v2"].as_str()),
        "{avoid}"
    );
    let (_, weather) = c
        .get("/v1/subjects", d.url("/v1/subjects?category=weather"))
        .await;
    assert_eq!(weather["total"], 4);
    let (_, none) = c
        .get("/v1/subjects", d.url("/v1/subjects?category=nothing"))
        .await;
    assert_eq!(none["total"], 0);
    let grade = subjects[0]["latest"]["grade"].as_str().unwrap().to_string();
    let (_, graded) = c
        .get(
            "/v1/subjects",
            d.url(&format!("/v1/subjects?grade={grade}")),
        )
        .await;
    assert!(graded["total"].as_u64().unwrap() >= 1);
    assert!(
        graded["subjects"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["latest"]["grade"] == grade.as_str())
    );
    // Pages: two of two, then the rest, the same subjects as one page.
    let (_, p1) = c
        .get("/v1/subjects", d.url("/v1/subjects?sort=id&limit=2"))
        .await;
    assert_eq!(p1["next_offset"], 2);
    let (_, p2) = c
        .get(
            "/v1/subjects",
            d.url("/v1/subjects?sort=id&limit=2&offset=2"),
        )
        .await;
    assert!(p2["next_offset"].is_null());
    let (_, all) = c.get("/v1/subjects", d.url("/v1/subjects?sort=id")).await;
    let ids = |v: &Value| -> Vec<String> {
        v["subjects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!([ids(&p1), ids(&p2)].concat(), ids(&all));
    for bad in [
        "limit=0",
        "limit=501",
        "verdict=great",
        "sort=colour",
        "colour=red",
        "offset=-1",
    ] {
        let (status, err) = c
            .get("/v1/subjects", d.url(&format!("/v1/subjects?{bad}")))
            .await;
        assert_eq!(status, 400, "{bad}: {err}");
        assert_eq!(err["error"]["code"], "bad_request", "{bad}: {err}");
    }

    // One subject; its signed score; its history.
    let honest = d.id_of("honest-v2");
    let (status, one) = c
        .get(
            "/v1/subjects/{id}",
            d.url(&format!("/v1/subjects/{honest}")),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(one["url"], d.urls["honest-v2"].as_str());
    let (status, signed) = c
        .get(
            "/v1/subjects/{id}/score",
            d.url(&format!("/v1/subjects/{honest}/score")),
        )
        .await;
    assert_eq!(status, 200, "{signed}");
    let envelope: x402_probe::api::signed::SignedScore =
        serde_json::from_value(signed.clone()).unwrap();
    let document = x402_probe::api::signed::verify(&envelope, &d.public_key)
        .expect("the signed score verifies with the reporter key");
    assert_eq!(document["subject"]["url"], d.urls["honest-v2"].as_str());
    // The signed document is the one the ledger's score entry names.
    let store = x402_probe::store::SqliteStore::open(d.dir.path()).unwrap();
    let published = daemon_support::scores(&store, &d.urls["honest-v2"]);
    assert!(
        published
            .iter()
            .any(|s| s.document_sha256 == envelope.document_sha256),
        "the envelope's document is a published score"
    );
    let (status, history) = c
        .get(
            "/v1/subjects/{id}/history",
            d.url(&format!("/v1/subjects/{honest}/history")),
        )
        .await;
    assert_eq!(status, 200);
    let days = history["days"].as_array().unwrap();
    assert!(days.len() >= 4, "four simulated days and today: {history}");
    assert!(
        days.windows(2)
            .all(|w| w[0]["day"].as_str() < w[1]["day"].as_str())
    );
    for (template, path) in [
        ("/v1/subjects/{id}", "/v1/subjects/{id}"),
        ("/v1/subjects/{id}/score", "/v1/subjects/{id}/score"),
        ("/v1/subjects/{id}/history", "/v1/subjects/{id}/history"),
        ("/v1/subjects/{id}/readiness", "/v1/subjects/{id}/readiness"),
        ("/v1/subjects/{id}/findings", "/v1/subjects/{id}/findings"),
    ] {
        let (status, err) = c
            .get(template, d.url(&path.replace("{id}", &"0".repeat(32))))
            .await;
        assert_eq!(
            (status, &err["error"]["code"]),
            (404, &Value::from("not_found"))
        );
        let (status, err) = c
            .get(template, d.url(&path.replace("{id}", "NOT-AN-ID")))
            .await;
        assert_eq!(
            (status, &err["error"]["code"]),
            (400, &Value::from("bad_request"))
        );
    }

    // verify-score, offline: valid (0), tampered (1), usage (2).
    let file = d.dir.path().join("score.json");
    std::fs::write(&file, serde_json::to_vec(&signed).unwrap()).unwrap();
    let key_hex = hex::encode(d.public_key);
    let (code, out, err) = cli(&["verify-score", file.to_str().unwrap(), "--pubkey", &key_hex]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("valid: "), "{out}");
    let key_file = d.dir.path().join("reporter.pub");
    std::fs::write(&key_file, format!("{key_hex}\n")).unwrap();
    let (code, ..) = cli(&[
        "verify-score",
        file.to_str().unwrap(),
        "--pubkey",
        key_file.to_str().unwrap(),
    ]);
    assert_eq!(code, 0);
    let mut tampered = signed.clone();
    tampered["document"]["capped_score"] = Value::from(100.0);
    let tampered_file = d.dir.path().join("tampered.json");
    std::fs::write(&tampered_file, serde_json::to_vec(&tampered).unwrap()).unwrap();
    let (code, _, err) = cli(&[
        "verify-score",
        tampered_file.to_str().unwrap(),
        "--pubkey",
        &key_hex,
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("invalid"), "{err}");
    let other_key = hex::encode([9u8; 32]);
    let (code, _, err) = cli(&[
        "verify-score",
        file.to_str().unwrap(),
        "--pubkey",
        &other_key,
    ]);
    assert_eq!(code, 1, "another key: {err}");
    let (code, ..) = cli(&["verify-score", file.to_str().unwrap(), "--pubkey", "abc"]);
    assert_eq!(code, 2);
    let (code, ..) = cli(&[
        "verify-score",
        "/nonexistent/score.json",
        "--pubkey",
        &key_hex,
    ]);
    assert_eq!(code, 2);

    // Outages: the window declared before serving.
    let (status, outages) = c.get("/v1/outages", d.url("/v1/outages")).await;
    assert_eq!(status, 200);
    let declared_from = x402_probe::clock::rfc3339_ms(d.history_end_ms - DAY);
    assert!(
        outages["outages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["from"] == declared_from.as_str()
                && o["open"] == false
                && o["of"] == "vantage"),
        "{outages}"
    );

    // Rubrics by hash, byte for byte.
    let (status, rubrics) = c.get("/v1/rubrics", d.url("/v1/rubrics")).await;
    assert_eq!(status, 200);
    let current = rubrics["rubrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["current"] == true)
        .expect("the current rubric is listed")
        .clone();
    let sha = current["sha256"].as_str().unwrap();
    assert_eq!(sha, document["rubric"]["sha256"].as_str().unwrap());
    let (status, _) = c
        .get("/v1/rubrics/{sha256}", d.url(&format!("/v1/rubrics/{sha}")))
        .await;
    assert_eq!(status, 200);
    let served = &c.seen.last().unwrap().body;
    assert_eq!(x402_probe::evidence::sha256_hex(served), sha);
    let (status, _) = c
        .get(
            "/v1/rubrics/{sha256}",
            d.url(&format!("/v1/rubrics/{}", "a".repeat(64))),
        )
        .await;
    assert_eq!(status, 404);
    let (status, _) = c
        .get("/v1/rubrics/{sha256}", d.url("/v1/rubrics/short"))
        .await;
    assert_eq!(status, 400);

    // The ledger's head and signed checkpoints (the signature checks with the reporter key).
    let (status, head) = c.get("/v1/ledger/head", d.url("/v1/ledger/head")).await;
    assert_eq!(status, 200);
    assert!(head["seq"].as_u64().unwrap() > 100, "{head}");
    let (status, cps) = c
        .get(
            "/v1/ledger/checkpoints",
            d.url("/v1/ledger/checkpoints?limit=2"),
        )
        .await;
    assert_eq!(status, 200);
    let list = cps["checkpoints"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{cps}");
    let next = cps["next_after"]
        .as_u64()
        .expect("more than two checkpoints");
    let (_, more) = c
        .get(
            "/v1/ledger/checkpoints",
            d.url(&format!("/v1/ledger/checkpoints?after={next}&limit=500")),
        )
        .await;
    assert!(more["checkpoints"][0]["seq"].as_u64().unwrap() > next);
    {
        use ed25519_dalek::{Signature, Verifier, VerifyingKey};
        let cp = &list[0];
        let hash: [u8; 32] = hex::decode(cp["hash"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        let sig: [u8; 64] = hex::decode(cp["signature"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        let message =
            x402_probe::ledger::chain::checkpoint_message(cp["seq"].as_u64().unwrap(), &hash);
        VerifyingKey::from_bytes(&d.public_key)
            .unwrap()
            .verify(&message, &Signature::from_bytes(&sig))
            .expect("a checkpoint verifies with the reporter key");
    }
    let (status, _) = c
        .get(
            "/v1/ledger/checkpoints",
            d.url("/v1/ledger/checkpoints?limit=0"),
        )
        .await;
    assert_eq!(status, 400);

    // The latest tree checkpoint is a signed note under the reporter key; the consistency proof
    // from an earlier tree checkpoint's size leads to both roots; a forged root does not.
    let (status, tree) = c.get("/v1/ledger/tree", d.url("/v1/ledger/tree")).await;
    assert_eq!(status, 200, "{tree}");
    let key = x402_probe::ledger::tlog::note_key(&d.public_key);
    assert_eq!(tree["verifier_key"].as_str().unwrap(), key.verifier_key());
    let latest = x402_probe::ledger::note::open_checkpoint(tree["note"].as_str().unwrap(), &key)
        .expect("the tree checkpoint verifies with the reporter key");
    assert_eq!(latest.size, tree["size"].as_u64().unwrap());
    let store = x402_probe::store::SqliteStore::open_read_only(&d.dir.path().join("ledger.sqlite"))
        .unwrap();
    let notes = x402_probe::store::Store::tree_notes(&store).unwrap();
    assert!(notes.len() >= 2, "tree checkpoints over the days");
    let earlier =
        x402_probe::ledger::note::open_checkpoint(&notes[notes.len() / 2].note, &key).unwrap();
    let (status, proof) = c
        .get(
            "/v1/ledger/consistency",
            d.url(&format!("/v1/ledger/consistency?from={}", earlier.size)),
        )
        .await;
    assert_eq!(status, 200, "{proof}");
    assert_eq!(proof["to"].as_u64().unwrap(), latest.size);
    let hashes: Vec<[u8; 32]> = proof["proof"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(h.as_str().unwrap())
                .unwrap()
                .try_into()
                .unwrap()
        })
        .collect();
    use x402_probe::ledger::merkle::verify_consistency;
    verify_consistency(
        earlier.size,
        latest.size,
        &earlier.root,
        &latest.root,
        &hashes,
    )
    .expect("the later tree extends the earlier one");
    assert!(
        verify_consistency(earlier.size, latest.size, &[1u8; 32], &latest.root, &hashes).is_err()
    );
    for bad in [
        format!("/v1/ledger/consistency?from={}", latest.size + 1),
        format!("/v1/ledger/consistency?from=1&to={}", latest.size + 1),
        "/v1/ledger/consistency?from=x".to_string(),
    ] {
        let (status, _) = c.get("/v1/ledger/consistency", d.url(&bad)).await;
        assert_eq!(status, 400, "{bad}");
    }

    // The daily snapshots (tests/service/snapshots.rs checks them in depth): the newest, the same by its
    // day, and a day not over yet.
    let (status, latest) = c
        .get("/v1/snapshots/latest", d.url("/v1/snapshots/latest"))
        .await;
    assert_eq!(status, 200, "{latest}");
    let day = latest["snapshot"]["day"].as_str().unwrap().to_string();
    let (status, same) = c
        .get(
            "/v1/snapshots/{day}",
            d.url(&format!("/v1/snapshots/{day}")),
        )
        .await;
    assert_eq!((status, &same), (200, &latest));
    let now = x402_probe::clock::Clock::now_ms(&x402_probe::clock::SystemClock);
    let today = x402_probe::clock::day_of(now);
    let (status, _) = c
        .get(
            "/v1/snapshots/{day}",
            d.url(&format!("/v1/snapshots/{today}")),
        )
        .await;
    assert_eq!(status, 404);

    // The key, the agent-facing texts.
    let (status, key) = c.get("/v1/key", d.url("/v1/key")).await;
    assert_eq!(
        (status, key["public_key"].as_str().unwrap()),
        (200, key_hex.as_str())
    );
    let (status, description) = c
        .get("/v1/description.json", d.url("/v1/description.json"))
        .await;
    assert_eq!(status, 200);
    assert_eq!(description["openapi"], "/v1/openapi.json");
    let (status, llms) = c.get("/llms.txt", d.url("/llms.txt")).await;
    assert_eq!(status, 200);
    let llms = llms.as_str().unwrap();
    assert!(llms.starts_with("# x402-probe") && llms.contains("/v1/subjects/{id}/score"));

    // Status: the daemon's own view, and the terminal command that prints it.
    let (status, st) = c.get("/v1/status", d.url("/v1/status")).await;
    assert_eq!(status, 200, "{st}");
    assert_eq!(st["simulated"], false);
    assert_eq!(st["subjects_by_state"]["active"], 4);
    let verdicts: u64 = st["subjects_by_verdict"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(verdicts, 4, "{st}");
    assert_eq!(st["subjects_by_verdict"]["avoid"], 2, "{st}");
    assert!(!st["next_due"].as_array().unwrap().is_empty());
    assert!(st["paid_budget"]["left_usd"].is_string(), "{st}");
    let (code, out, err) = cli(&["status", "--api", &d.base]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("verdicts") && out.contains("avoid 2"), "{out}");
    assert!(
        out.contains("budget") && out.contains("left of $5"),
        "{out}"
    );

    // Errors outside any route are JSON too.
    let (status, err) = c.get("/v1/subjects", d.url("/v1/nothing-here")).await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (404, &Value::from("not_found"))
    );

    // Preflight by URL (tests/service/preflight.rs covers its answers; here it is validated and checked
    // for leaks with every other route).
    let encoded = d.urls["honest-v2"].replace(':', "%3A").replace('/', "%2F");
    let (status, answer) = c
        .get(
            "/v1/preflight",
            d.url(&format!("/v1/preflight?url={encoded}")),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["subject_id"], d.id_of("honest-v2"));

    // Agent readiness (seed 000), beside the score: the honest subject paid and answered
    // (completion decided), docs and the bonuses unmeasured, so a range across two bands.
    let (status, ready) = c
        .get(
            "/v1/subjects/{id}/readiness",
            d.url(&format!("/v1/subjects/{honest}/readiness")),
        )
        .await;
    assert_eq!(status, 200, "{ready}");
    let a = &ready["readiness"];
    assert_eq!(a["format"], "x402-probe.agent-readiness/1");
    assert_eq!(
        a["rubric"]["sha256"],
        ReadinessRubric::embedded().sha256(),
        "{a}"
    );
    let points: Vec<&Value> = a["dimensions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["points"])
        .collect();
    assert_eq!(
        points,
        [&json!(25), &json!(25), &json!(18), &json!(20), &Value::Null],
        "{a}"
    );
    assert_eq!(
        (
            &a["range"]["low"],
            &a["range"]["high"],
            &a["band"],
            &a["completed"]
        ),
        (&json!(88), &json!(100), &json!("unmeasured"), &json!(true)),
        "{a}"
    );
    // The findings peers publish, beside the score: the honest subject described, its
    // resource its own, settled by the lab's known facilitator, its payTo shared only on its
    // own host (every lab subject pays one wallet from 127.0.0.1: one operator); whose its gaps
    // are (a free run's paid checks: ours).
    let (status, found) = c
        .get(
            "/v1/subjects/{id}/findings",
            d.url(&format!("/v1/subjects/{honest}/findings")),
        )
        .await;
    assert_eq!(status, 200, "{found}");
    let outcome = |doc: &Value, id: &str| {
        doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == id)
            .map(|f| f["outcome"].clone())
    };
    for (id, want) in [
        ("described", "pass"),
        ("resource_url", "pass"),
        ("browser_paywall", "fail"),
        ("known_facilitator", "pass"),
        ("payto_collision", "pass"),
        ("pay_then_refused", "pass"),
    ] {
        assert_eq!(outcome(&found, id), Some(json!(want)), "{id}: {found}");
    }
    assert_eq!(
        found["party_counts"].as_object().unwrap().len(),
        4,
        "{found}"
    );
    // The overcharging facilitator's subject: settled by another sender, H5 its doing.
    let overcharge = d.id_of("overcharge");
    let (status, found) = c
        .get(
            "/v1/subjects/{id}/findings",
            d.url(&format!("/v1/subjects/{overcharge}/findings")),
        )
        .await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(
        outcome(&found, "known_facilitator"),
        Some(json!("fail")),
        "{found}"
    );
    let parties = found["parties"].as_array().unwrap();
    assert!(
        parties
            .iter()
            .any(|p| p["check"] == "H5" && p["party"] == "facilitator"),
        "{found}"
    );
    // The overcharging facilitator's subject: a critical finding naming H5's receipt.
    let (status, ready) = c
        .get(
            "/v1/subjects/{id}/readiness",
            d.url(&format!("/v1/subjects/{overcharge}/readiness")),
        )
        .await;
    assert_eq!(status, 200, "{ready}");
    let a = &ready["readiness"];
    assert_eq!(
        (&a["score"], &a["band"]),
        (&json!(0), &json!("hostile")),
        "{a}"
    );
    let penalty = a["penalties"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["kind"] == "overcharge")
        .unwrap_or_else(|| panic!("{a}"));
    assert_eq!(
        (&penalty["check"], &penalty["severity"]),
        (&json!("H5"), &json!("critical"))
    );
    assert_eq!(penalty["receipt_sha256"].as_str().unwrap().len(), 64);

    // Our own API under the same rubric, from what an agent meets on it (the README publishes
    // the result): every route above answered without a credential, the documents are served,
    // errors carry stable codes, the reference task (preflight, then the signed score verified
    // offline) was done; no security.txt.
    let (security_txt, _) = c
        .get("/v1/subjects", d.url("/.well-known/security.txt"))
        .await;
    c.seen.pop();
    let own = OwnApiObservation {
        public_routes_open: c.seen.iter().all(|s| s.status != 401 && s.status != 403),
        openapi_served: doc["openapi"] == "3.1.0",
        llms_txt_served: llms.starts_with("# x402-probe"),
        errors_actionable: err_codes_seen(&c),
        reference_task_done: answer["answer"].is_string(),
        security_txt_served: security_txt == 200,
    };
    let ours = readiness::assess(&ReadinessRubric::embedded(), &from_own_api(&own));
    let dims: Vec<Option<u32>> = ours.dimensions.iter().map(|d| d.points).collect();
    assert_eq!(
        dims,
        [Some(25), Some(25), Some(18), Some(20), Some(7)],
        "{own:?}"
    );
    // 95 + 5 (llms.txt: permissive-tos) = 100; no security.txt: no security-posture bonus.
    assert_eq!(
        (ours.sum.low, ours.score, ours.band.as_str()),
        (100, Some(100), "native"),
        "{ours:?}"
    );

    // Every response, success or error, matches the document.
    let mut templates = BTreeMap::new();
    for seen in &c.seen {
        if seen.url.ends_with("/v1/nothing-here") {
            continue;
        }
        validate(&doc, seen).unwrap_or_else(|e| panic!("{e}"));
        *templates.entry(seen.template).or_insert(0) += 1;
    }
    // Every GET route (the POST routes, the operator's and the admin's, are called and validated
    // by tests/service/operator_api.rs).
    for (path, item) in doc["paths"].as_object().unwrap() {
        if item["get"].is_object() {
            assert!(
                templates.contains_key(path.as_str()),
                "{path} was not called"
            );
        }
    }

    // No response holds a raw ledger entry; and the check would see one.
    let leaks = LeakCheck::from_store(d.dir.path());
    assert!(
        leaks.markers() > 50,
        "markers from the runs: {}",
        leaks.markers()
    );
    for seen in &c.seen {
        if let Some(why) = leaks.leak_in(&seen.body) {
            panic!("{} leaks a ledger entry: {why}", seen.url);
        }
    }
    let mut raw = None;
    store
        .scan(0, &mut |e| {
            if e.kind == x402_probe::ledger::record::RecordKind::Run && raw.is_none() {
                raw = Some(e.body.clone());
            }
            Ok(())
        })
        .unwrap();
    let raw = raw.expect("a run entry");
    assert!(leaks.leak_in(&raw).is_some(), "the check sees a raw entry");

    // The view follows new scores: the daemon keeps probing (a 60 s cadence now), and the
    // subject's latest score moves on without a restart.
    let before = one["latest"]["as_of"].as_str().unwrap().to_string();
    let mut moved = false;
    for _ in 0..150 {
        let (_, now) = c
            .get(
                "/v1/subjects/{id}",
                d.url(&format!("/v1/subjects/{honest}")),
            )
            .await;
        c.seen.pop();
        if now["latest"]["as_of"].as_str().unwrap() > before.as_str() {
            moved = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    assert!(moved, "a new score was served within the cadence");

    d.stop().await.expect("the daemon stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_the_rate_limit_gets_429_with_retry_after_and_others_do_not() {
    let d = ApiDaemon::start(ApiOptions {
        days: 0,
        price_rise: false,
        declared_outage: false,
        pay: false,
        api_extra: "rate_per_second = 1\nrate_burst = 3".into(),
        ..ApiOptions::default()
    })
    .await;
    // The helper's own wait used part of the burst; let it refill.
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let mut c = Client::new();
    let (_, doc) = c.get("/v1/openapi.json", d.url("/v1/openapi.json")).await;
    for _ in 0..2 {
        let (status, _) = c.get("/v1/key", d.url("/v1/key")).await;
        assert_eq!(status, 200);
    }
    let r = c.http.get(d.url("/v1/key")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&retry), "{retry}");
    let (status, err) = c.get("/v1/subjects", d.url("/v1/subjects")).await;
    assert_eq!(status, 429);
    assert_eq!(err["error"]["code"], "rate_limited");
    validate(&doc, c.seen.last().unwrap()).unwrap();
    // Preflight, answered before the router when its answer is kept, is under the same limit.
    let preflight = d.url("/v1/preflight?url=http%3A%2F%2Funrated.test%2F");
    let (status, err) = c.get("/v1/preflight", preflight.clone()).await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (429, &json!("rate_limited"))
    );
    validate(&doc, c.seen.last().unwrap()).unwrap();
    // A page over the limit is a page, not JSON: HTML under the pages' headers, with Retry-After.
    let r = c.http.get(d.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    let header = |name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    assert!(header("content-type").starts_with("text/html"), "{r:?}");
    assert!(header("content-security-policy").contains("default-src 'none'"));
    let page_retry: u64 = header("retry-after").parse().unwrap();
    assert!((1..=2).contains(&page_retry), "{page_retry}");
    let html = r.text().await.unwrap();
    assert!(
        html.contains("Too many requests") && html.contains("</html>"),
        "{html}"
    );
    // Another client address (::1 is another IP than 127.0.0.1) has its own bucket.
    let v6 = format!("http://[::1]:{}/v1/key", d.addr.port());
    if let Ok(r) = c.http.get(&v6).send().await {
        assert_eq!(r.status(), 200);
    }
    // After the refill time, the first client is served again.
    tokio::time::sleep(std::time::Duration::from_secs(retry)).await;
    let (status, _) = c.get("/v1/key", d.url("/v1/key")).await;
    assert_eq!(status, 200);
    // A preflight that goes on to the router (an unrated URL: no answer kept) takes one token,
    // not one before the router and one in it: the whole burst, then 429.
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    for _ in 0..3 {
        let (status, p) = c.get("/v1/preflight", preflight.clone()).await;
        assert_eq!((status, &p["answer"]), (200, &json!("unrated")), "{p}");
    }
    assert_eq!(c.get("/v1/preflight", preflight).await.0, 429);
    d.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_daemon_serves_its_subjects_and_json_errors_and_stops_cleanly() {
    let d = ApiDaemon::start(ApiOptions {
        days: 0,
        price_rise: false,
        declared_outage: false,
        pay: false,
        ..ApiOptions::default()
    })
    .await;
    let mut c = Client::new();
    let (status, page) = c.get("/v1/subjects", d.url("/v1/subjects")).await;
    assert_eq!(status, 200);
    assert_eq!(page["total"], 3, "{page}");
    let r = c.http.post(d.url("/v1/subjects")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    let err: Value = r.json().await.unwrap();
    assert_eq!(err["error"]["code"], "method_not_allowed", "{err}");
    // A body larger than the API reads is refused before any handler.
    let r = c
        .http
        .post(d.url("/v1/subjects"))
        .body(vec![b'x'; 200_000])
        .send()
        .await
        .unwrap();
    assert!([405, 413].contains(&r.status().as_u16()), "{}", r.status());
    let err: Value = r.json().await.unwrap();
    assert!(err["error"]["code"].is_string(), "{err}");
    // The status command says so when nothing answers.
    let addr = d.addr;
    d.stop().await.expect("the daemon stops cleanly");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the listener is closed after a stop"
    );
    let (code, _, err) = cli(&["status", "--api", &format!("http://{addr}")]);
    assert_eq!(code, 1, "{err}");
    let (code, ..) = cli(&["status", "--api", "ftp://127.0.0.1:1"]);
    assert_eq!(code, 2);
}

/// The API never waits for the ledger's writer: while another process holds the ledger's write
/// lock (`BEGIN IMMEDIATE`, as a second writer would), the daemon's writer waits for it and
/// every public route still answers at once (they read through the pool of read connections, and
/// the loop that answers the status never touches the disk); once the lock is let go, the
/// daemon's runs are recorded again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_while_another_process_holds_the_ledgers_write_lock() {
    use std::time::{Duration, Instant};
    const HOLD: Duration = Duration::from_secs(5);
    let d = ApiDaemon::start(ApiOptions {
        days: 1,
        scenarios: vec!["honest-v2", "honest-v1"],
        price_rise: false,
        declared_outage: false,
        pay: false,
        live_free_every_secs: 1,
        api_extra: "rate_per_second = 10000\nrate_burst = 10000".into(),
    })
    .await;
    // Each answer within a bound well under the hold: a route that waited for the lock fails.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(1_500))
        .build()
        .unwrap();
    let head = || async {
        let r = http
            .get(d.url("/v1/ledger/head"))
            .send()
            .await
            .expect("the ledger's head answers");
        assert_eq!(r.status(), 200);
        r.json::<Value>().await.unwrap()["seq"].as_u64().unwrap()
    };
    let wait_for_more = |than: u64, what: &'static str| {
        let head = &head;
        async move {
            let until = Instant::now() + Duration::from_secs(30);
            loop {
                let now = head().await;
                if now > than {
                    return now;
                }
                assert!(
                    Instant::now() < until,
                    "{what}: the ledger stayed at {than}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    // Runs are being recorded.
    let first = head().await;
    wait_for_more(first, "before the lock").await;

    // Another connection takes the write lock and keeps it.
    let ledger = d.dir.path().join(x402_probe::store::sqlite::STORE_FILE);
    let (taken_tx, taken) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(&ledger).unwrap();
        conn.busy_timeout(Duration::from_secs(10)).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        taken_tx.send(Instant::now()).unwrap();
        std::thread::sleep(HOLD);
        conn.execute_batch("ROLLBACK").unwrap();
    });
    let taken_at = taken.recv().unwrap();
    let held = head().await;
    let subject = format!("/v1/subjects/{}", d.id_of("honest-v2"));
    let routes = [
        "/v1/subjects",
        subject.as_str(),
        "/v1/ledger/head",
        "/v1/ledger/checkpoints",
        "/v1/status",
        "/v1/outages",
        "/",
    ];
    let mut answered = 0;
    while taken_at.elapsed() + Duration::from_millis(1_500) < HOLD {
        for route in routes {
            let r = http
                .get(d.url(route))
                .send()
                .await
                .unwrap_or_else(|e| panic!("{route} while the ledger is locked: {e}"));
            assert_eq!(r.status(), 200, "{route} while the ledger is locked");
            answered += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(answered >= 2 * routes.len(), "{answered} answers");
    // Nothing was written meanwhile: the writer waited for the lock.
    assert_eq!(
        head().await,
        held,
        "the ledger grew while another held its lock"
    );
    holder.join().unwrap();

    // The daemon resumes: runs are recorded again, and it stops cleanly.
    wait_for_more(held, "after the lock").await;
    d.stop().await.expect("the daemon stops cleanly");
}
