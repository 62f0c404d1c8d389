//! Check definitions from `probes/`, embedded in the binary.
//!
//! Each rubric check has a definition file `probes/<ID>.md`: a front matter block (`id`, `title`,
//! `dimension`, `kind`, `metric`) and the sections What, Why, How, Outcomes, Validity and
//! Remediation (the format is described in `probes/README.md`). They are compiled in with
//! `include_str!`, so `x402-probe explain` and the reports never read files at run time. A unit
//! test checks them against the embedded rubric.

use std::sync::OnceLock;

/// `probes/README.md`: what the folder is, and the rules shared by every check.
pub const README: &str = include_str!("../probes/README.md");

/// `probes/operator-file.md`: the format of `/.well-known/x402-operator.json`.
pub const OPERATOR_FILE: &str = include_str!("../probes/operator-file.md");

/// The definition files, in the rubric's order of checks.
const SOURCES: &[(&str, &str)] = &[
    ("R1", include_str!("../probes/R1.md")),
    ("R2", include_str!("../probes/R2.md")),
    ("R3", include_str!("../probes/R3.md")),
    ("R4", include_str!("../probes/R4.md")),
    ("R5", include_str!("../probes/R5.md")),
    ("R7", include_str!("../probes/R7.md")),
    ("C1", include_str!("../probes/C1.md")),
    ("C2", include_str!("../probes/C2.md")),
    ("C3", include_str!("../probes/C3.md")),
    ("C4", include_str!("../probes/C4.md")),
    ("C5", include_str!("../probes/C5.md")),
    ("C6", include_str!("../probes/C6.md")),
    ("H1", include_str!("../probes/H1.md")),
    ("H2", include_str!("../probes/H2.md")),
    ("H3", include_str!("../probes/H3.md")),
    ("H4", include_str!("../probes/H4.md")),
    ("H5", include_str!("../probes/H5.md")),
    ("H6", include_str!("../probes/H6.md")),
    ("H7", include_str!("../probes/H7.md")),
    ("H8", include_str!("../probes/H8.md")),
    ("H9", include_str!("../probes/H9.md")),
    ("S1", include_str!("../probes/S1.md")),
    ("S2", include_str!("../probes/S2.md")),
    ("S3", include_str!("../probes/S3.md")),
    ("S4", include_str!("../probes/S4.md")),
    ("S5", include_str!("../probes/S5.md")),
    ("R6", include_str!("../probes/R6.md")),
];

/// The sections every definition has, in this order.
pub const SECTIONS: [&str; 6] = ["What", "Why", "How", "Outcomes", "Validity", "Remediation"];

/// Whether a check is measured without paying or needs a paid call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckKind {
    Free,
    Paid,
}

impl CheckKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckKind::Free => "free",
            CheckKind::Paid => "paid",
        }
    }
}

/// How a check's outcomes become a score: a (decayed, posterior-mean) share of passes, or a latency through a curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Rate,
    Curve,
}

impl Metric {
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Rate => "rate",
            Metric::Curve => "curve",
        }
    }
}

/// One check's definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    /// Rubric check id, e.g. `R3`.
    pub id: &'static str,
    pub title: &'static str,
    /// `works`, `as_described`, `safe` or `good`.
    pub dimension: &'static str,
    pub kind: CheckKind,
    pub metric: Metric,
    /// Everything after the front matter: the six sections, in Markdown.
    pub body_markdown: &'static str,
    /// The text of the Remediation section, for reports.
    pub remediation: &'static str,
}

impl Definition {
    /// The text of one section (`What`, `How`...), without its heading; `None` when absent.
    pub fn section(&self, name: &str) -> Option<&'static str> {
        section_text(self.body_markdown, name)
    }
}

/// Why a definition file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DefinitionError {
    #[error("{file}: no front matter block between `---` lines")]
    NoFrontMatter { file: String },
    #[error("{file}: front matter line {line:?} is not `key: value`")]
    BadLine { file: String, line: String },
    #[error("{file}: front matter has no `{key}`")]
    Missing { file: String, key: &'static str },
    #[error("{file}: `{key}` is {value:?}, expected one of {expected}")]
    BadValue {
        file: String,
        key: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("{file}: the front matter says id {found:?}")]
    WrongId { file: String, found: String },
    #[error("{file}: no `## {section}` section")]
    MissingSection { file: String, section: &'static str },
}

/// The text under `## <name>` up to the next `## ` heading, trimmed.
fn section_text(body: &'static str, name: &str) -> Option<&'static str> {
    let heading = format!("## {name}");
    let mut offset = 0;
    let mut start = None;
    for line in body.split_inclusive('\n') {
        let trimmed = line.trim_end();
        if let Some(begin) = start {
            if trimmed.starts_with("## ") {
                return Some(body[begin..offset].trim());
            }
        } else if trimmed == heading {
            start = Some(offset + line.len());
        }
        offset += line.len();
    }
    start.map(|begin| body[begin..].trim())
}

/// Parse one definition file. `file` names it in errors; `expected_id` is the id its name promises.
pub fn parse(
    file: &str,
    expected_id: &str,
    source: &'static str,
) -> Result<Definition, DefinitionError> {
    let no_front_matter = || DefinitionError::NoFrontMatter {
        file: file.to_string(),
    };
    let rest = source
        .strip_prefix("---\n")
        .or_else(|| source.strip_prefix("---\r\n"))
        .ok_or_else(no_front_matter)?;
    let end = rest.find("\n---").ok_or_else(no_front_matter)?;
    let front = &rest[..end];
    let after = &rest[end + "\n---".len()..];
    let body = after.strip_prefix('\r').unwrap_or(after);
    let body = body.strip_prefix('\n').unwrap_or(body).trim();

    let mut fields: Vec<(&'static str, &'static str)> = Vec::new();
    for line in front.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (key, value) = line
            .split_once(':')
            .ok_or_else(|| DefinitionError::BadLine {
                file: file.to_string(),
                line: line.to_string(),
            })?;
        fields.push((key.trim(), value.trim().trim_matches('"')));
    }
    let field = |key: &'static str| {
        fields
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
            .filter(|v| !v.is_empty())
            .ok_or(DefinitionError::Missing {
                file: file.to_string(),
                key,
            })
    };
    let id = field("id")?;
    if !id.eq_ignore_ascii_case(expected_id) {
        return Err(DefinitionError::WrongId {
            file: file.to_string(),
            found: id.to_string(),
        });
    }
    let bad_value =
        |key: &'static str, value: &str, expected: &'static str| DefinitionError::BadValue {
            file: file.to_string(),
            key,
            value: value.to_string(),
            expected,
        };
    let kind = match field("kind")? {
        "free" => CheckKind::Free,
        "paid" => CheckKind::Paid,
        other => return Err(bad_value("kind", other, "free, paid")),
    };
    let metric = match field("metric")? {
        "rate" => Metric::Rate,
        "curve" => Metric::Curve,
        other => return Err(bad_value("metric", other, "rate, curve")),
    };
    let dimension = field("dimension")?;
    if !matches!(dimension, "works" | "as_described" | "safe" | "good") {
        return Err(bad_value(
            "dimension",
            dimension,
            "works, as_described, safe, good",
        ));
    }
    for section in SECTIONS {
        if section_text(body, section).is_none() {
            return Err(DefinitionError::MissingSection {
                file: file.to_string(),
                section,
            });
        }
    }
    Ok(Definition {
        id,
        title: field("title")?,
        dimension,
        kind,
        metric,
        body_markdown: body,
        remediation: section_text(body, "Remediation").unwrap_or(""),
    })
}

/// Every check definition, in the rubric's order.
pub fn definitions() -> &'static [Definition] {
    static DEFINITIONS: OnceLock<Vec<Definition>> = OnceLock::new();
    DEFINITIONS.get_or_init(|| {
        SOURCES
            .iter()
            .map(|(id, source)| {
                // The files are part of the binary and the unit tests parse every one, so a
                // failure here is a build defect, not bad input.
                parse(&format!("probes/{id}.md"), id, source)
                    .unwrap_or_else(|e| panic!("embedded check definition is invalid: {e}"))
            })
            .collect()
    })
}

/// The definition of one check; the id is matched case-insensitively (`r3` finds `R3`).
pub fn definition(id: &str) -> Option<&'static Definition> {
    definitions()
        .iter()
        .find(|d| d.id.eq_ignore_ascii_case(id.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn rubric_checks() -> Vec<Value> {
        let rubric: Value = serde_json::from_str(include_str!("../rubrics/x402-endpoint.json"))
            .expect("the embedded rubric is JSON");
        rubric["checks"]
            .as_array()
            .expect("the rubric has a checks list")
            .clone()
    }

    #[test]
    fn one_definition_per_rubric_check_with_matching_fields() {
        let checks = rubric_checks();
        assert_eq!(definitions().len(), checks.len());
        for check in &checks {
            let id = check["id"].as_str().expect("check id");
            let matching: Vec<&Definition> = definitions().iter().filter(|d| d.id == id).collect();
            assert_eq!(matching.len(), 1, "{id} must have exactly one definition");
            let d = matching[0];
            assert_eq!(d.title, check["title"].as_str().unwrap_or(""), "{id} title");
            assert_eq!(
                d.dimension,
                check["dimension"].as_str().unwrap_or(""),
                "{id} dimension"
            );
            assert_eq!(
                d.kind.as_str(),
                check["kind"].as_str().unwrap_or(""),
                "{id} kind"
            );
            assert_eq!(
                d.metric.as_str(),
                check["metric"].as_str().unwrap_or(""),
                "{id} metric"
            );
        }
        // And in the rubric's order.
        let order: Vec<&str> = checks.iter().filter_map(|c| c["id"].as_str()).collect();
        let ours: Vec<&str> = definitions().iter().map(|d| d.id).collect();
        assert_eq!(ours, order);
    }

    #[test]
    fn every_definition_has_its_sections_in_order_and_names_every_outcome() {
        for d in definitions() {
            let positions: Vec<usize> = SECTIONS
                .iter()
                .map(|s| {
                    d.body_markdown
                        .find(&format!("## {s}\n"))
                        .unwrap_or_else(|| panic!("{} lacks {s}", d.id))
                })
                .collect();
            assert!(
                positions.windows(2).all(|w| w[0] < w[1]),
                "{} sections out of order",
                d.id
            );
            let outcomes = d.section("Outcomes").unwrap_or("");
            for outcome in ["`pass`", "`fail`", "`na`", "`unmeasured`"] {
                assert!(
                    outcomes.contains(outcome),
                    "{} Outcomes lacks {outcome}",
                    d.id
                );
            }
            assert!(
                !d.remediation.is_empty(),
                "{} has an empty remediation",
                d.id
            );
            assert!(
                !d.remediation.contains("## "),
                "{} remediation runs on",
                d.id
            );
        }
    }

    #[test]
    fn lookup_is_case_insensitive() {
        assert_eq!(definition("r3").map(|d| d.title), Some("Unpaid latency"));
        assert_eq!(definition(" S5 ").map(|d| d.id), Some("S5"));
        assert!(definition("R8").is_none());
    }

    #[test]
    fn remediation_is_the_last_section_text() {
        let r1 = definition("R1").expect("R1");
        assert!(r1.remediation.starts_with("Keep the endpoint up"));
        assert_eq!(r1.section("Remediation"), Some(r1.remediation));
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let missing_front = parse("x.md", "X1", "## What\n");
        assert!(matches!(
            missing_front,
            Err(DefinitionError::NoFrontMatter { .. })
        ));
        let bad_kind = parse(
            "x.md",
            "X1",
            "---\nid: X1\ntitle: T\ndimension: works\nkind: maybe\nmetric: rate\n---\n",
        );
        assert_eq!(
            bad_kind.map_err(|e| e.to_string()),
            Err("x.md: `kind` is \"maybe\", expected one of free, paid".to_string())
        );
        let no_sections = parse(
            "x.md",
            "X1",
            "---\nid: X1\ntitle: T\ndimension: works\nkind: free\nmetric: rate\n---\n## What\nx\n",
        );
        assert!(matches!(
            no_sections,
            Err(DefinitionError::MissingSection { section: "Why", .. })
        ));
        let wrong_id = parse(
            "x.md",
            "X2",
            "---\nid: X1\ntitle: T\ndimension: works\nkind: free\nmetric: rate\n---\n",
        );
        assert!(matches!(wrong_id, Err(DefinitionError::WrongId { .. })));
    }

    #[test]
    fn the_shared_documents_are_embedded() {
        assert!(README.contains("never counts against a subject"));
        assert!(OPERATOR_FILE.contains("x402-probe.operator/1"));
    }
}
