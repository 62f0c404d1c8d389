//! The feedback a score gives, from a score document of the golden set.

use super::*;
use crate::x402::operator::AgentRegistration;

fn document() -> ScoreDocument {
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/golden/03-down-stale.json"
    ))
    .unwrap();
    ScoreDocument::from_slice(&bytes).unwrap()
}

fn agent() -> AgentRegistration {
    AgentRegistration {
        chain_id: 8453,
        registry: Address::repeat_byte(0x80),
        agent_id: alloy::primitives::U256::from(22),
    }
}

/// Each measure the score has, at the ERC's fixed point: the capped score at 4 decimals, R1's and
/// R4's values as percentages at 2, R3's p95 in whole milliseconds; the file binds all of it.
#[test]
fn a_score_gives_one_feedback_per_measure_and_its_file_hashes_to_feedback_hash() {
    let doc = document();
    let agent = agent();
    let signed = serde_json::json!({"format": "x402-probe.signed-score/1"});
    let evidence = [EvidenceRef {
        seq: 7,
        kind: RecordKind::Score,
        hash: "ab".repeat(32),
    }];
    let rated = Rated {
        endpoint: "https://api.example.com/weather",
        agent: &agent,
        client: Address::repeat_byte(0x42),
        document: &doc,
        reachable: Some(Outcome::Fail),
        evidence: &evidence,
        signed_score: &signed,
    };
    let given = feedback(&rated);
    let tags: Vec<(Tag, i128, u8)> = given
        .iter()
        .map(|f| (f.tag1, f.value, f.value_decimals))
        .collect();
    // 03-down-stale: capped 91.6795, grade A; R1 76.6952; R4 88.6902; R3 p95 557 ms.
    assert_eq!(
        tags,
        [
            (Tag::Starred, 916_795, 4),
            (Tag::Reachable, 0, 0),
            (Tag::Uptime, 7670, 2),
            (Tag::SuccessRate, 8869, 2),
            (Tag::ResponseTime, 557, 0),
        ]
    );
    for f in &given {
        assert_eq!(f.feedback_hash, keccak256(&f.file));
        assert_eq!(
            f.file_name,
            format!("{}.json", hex::encode(f.feedback_hash))
        );
        let file: serde_json::Value = serde_json::from_slice(&f.file).unwrap();
        assert_eq!(file["agentId"], "22");
        assert_eq!(
            file["agentRegistry"],
            "eip155:8453:0x8080808080808080808080808080808080808080"
        );
        assert_eq!(file["tag1"], f.tag1.as_str());
        assert_eq!(file["value"], f.value.to_string());
        assert_eq!(file["createdAt"], doc.as_of);
        assert_eq!(file["x402-probe"]["evidence"][0]["seq"], 7);
        assert_eq!(file["x402-probe"]["signed_score"], signed);
    }
    // The same score gives the same files, byte for byte.
    assert_eq!(feedback(&rated), given);
    // Not measured: no `reachable`; not verified: no `starred`.
    let mut unverified = doc.clone();
    unverified.grade = None;
    let rated = Rated {
        reachable: Some(Outcome::Unmeasured),
        document: &unverified,
        ..rated
    };
    let tags: Vec<Tag> = feedback(&rated).iter().map(|f| f.tag1).collect();
    assert_eq!(tags, [Tag::Uptime, Tag::SuccessRate, Tag::ResponseTime]);
}
