//! The route table of the public API, and what is generated from it: the router's public routes,
//! the OpenAPI 3.1 document (`/v1/openapi.json`, schemas by schemars from the very types the
//! handlers serialise), a short machine-readable description for agents (`/v1/description.json`)
//! and `/llms.txt`. One table feeds all of them, so a route cannot be served undocumented or
//! documented with another shape than it answers.

use std::sync::OnceLock;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::signed::SignedScore;
use super::v1::{self, *};
use super::{ApiState, ErrorBody};

/// What a route answers with on success.
#[derive(Clone, Copy)]
pub(crate) enum Answer {
    /// JSON of a type (its schema generated).
    Json(fn(&mut SchemaGenerator) -> schemars::Schema),
    /// A JSON document we do not describe further (a rubric file, the OpenAPI document itself).
    AnyJson,
    /// Plain text.
    Text,
}

/// One route of the public API.
#[derive(Clone, Copy)]
pub(crate) struct RouteDoc {
    pub(crate) path: &'static str,
    pub(crate) operation_id: &'static str,
    pub(crate) summary: &'static str,
    pub(crate) handler: fn() -> MethodRouter<ApiState>,
    /// Path parameters: name and description.
    pub(crate) path_params: &'static [(&'static str, &'static str, &'static str)],
    /// The query parameters' type (its fields become the parameters).
    pub(crate) query: Option<fn(&mut SchemaGenerator) -> schemars::Schema>,
    pub(crate) answer: Answer,
}

fn schema<T: JsonSchema>(g: &mut SchemaGenerator) -> schemars::Schema {
    g.subschema_for::<T>()
}

const SUBJECT_ID: (&str, &str, &str) = (
    "id",
    "the subject id: hex of the first 16 bytes of SHA-256 of its URL",
    "^[0-9a-f]{32}$",
);

/// Every public route.
pub(crate) const ROUTES: &[RouteDoc] = &[
    RouteDoc {
        path: "/v1/subjects",
        operation_id: "listSubjects",
        summary: "Subjects with their latest score, band, grade, verdict, confidence, outlook, watch and value; filtered, sorted, paged.",
        handler: || get(v1::subjects),
        path_params: &[],
        query: Some(schema::<SubjectQuery>),
        answer: Answer::Json(schema::<SubjectPage>),
    },
    RouteDoc {
        path: "/v1/subjects/{id}",
        operation_id: "getSubject",
        summary: "One subject and its latest score, summarised.",
        handler: || get(v1::subject),
        path_params: &[SUBJECT_ID],
        query: None,
        answer: Answer::Json(schema::<SubjectSummary>),
    },
    RouteDoc {
        path: "/v1/subjects/{id}/score",
        operation_id: "getSignedScore",
        summary: "The subject's latest score document, signed by the reporter key (verify offline with `x402-probe verify-score`).",
        handler: || get(v1::subject_score),
        path_params: &[SUBJECT_ID],
        query: None,
        answer: Answer::Json(schema::<SignedScore>),
    },
    RouteDoc {
        path: "/v1/subjects/{id}/history",
        operation_id: "getScoreHistory",
        summary: "The subject's daily scores (the last of each UTC day), oldest first.",
        handler: || get(v1::subject_history),
        path_params: &[SUBJECT_ID],
        query: None,
        answer: Answer::Json(schema::<ScoreHistory>),
    },
    RouteDoc {
        path: "/v1/outages",
        operation_id: "listOutages",
        summary: "Our own declared outage windows (free outcomes inside them count against no subject).",
        handler: || get(v1::outages),
        path_params: &[],
        query: None,
        answer: Answer::Json(schema::<OutageList>),
    },
    RouteDoc {
        path: "/v1/rubrics",
        operation_id: "listRubrics",
        summary: "The rubrics this daemon serves, by the SHA-256 of their files.",
        handler: || get(v1::rubrics),
        path_params: &[],
        query: None,
        answer: Answer::Json(schema::<RubricList>),
    },
    RouteDoc {
        path: "/v1/rubrics/{sha256}",
        operation_id: "getRubric",
        summary: "A rubric file, byte for byte (its SHA-256 is the one in the path).",
        handler: || get(v1::rubric),
        path_params: &[(
            "sha256",
            "SHA-256 of the rubric file, hex",
            "^[0-9a-f]{64}$",
        )],
        query: None,
        answer: Answer::AnyJson,
    },
    RouteDoc {
        path: "/v1/ledger/head",
        operation_id: "getLedgerHead",
        summary: "The ledger's last entry number and chain hash, and its last signed checkpoint.",
        handler: || get(v1::ledger_head),
        path_params: &[],
        query: None,
        answer: Answer::Json(schema::<LedgerHead>),
    },
    RouteDoc {
        path: "/v1/ledger/checkpoints",
        operation_id: "listCheckpoints",
        summary: "The ledger's signed checkpoints, oldest first, paged.",
        handler: || get(v1::checkpoints),
        path_params: &[],
        query: Some(schema::<CheckpointQuery>),
        answer: Answer::Json(schema::<CheckpointList>),
    },
    RouteDoc {
        path: "/v1/key",
        operation_id: "getReporterKey",
        summary: "The reporter's ed25519 public key, which signs scores and checkpoints.",
        handler: || get(v1::key),
        path_params: &[],
        query: None,
        answer: Answer::Json(schema::<ReporterKeyView>),
    },
    RouteDoc {
        path: "/v1/status",
        operation_id: "getStatus",
        summary: "The daemon's view: subjects by verdict, next due runs, paid budget left, outages.",
        handler: || get(v1::status),
        path_params: &[],
        query: None,
        answer: Answer::Json(schema::<StatusView>),
    },
    RouteDoc {
        path: "/v1/openapi.json",
        operation_id: "getOpenApi",
        summary: "This document (OpenAPI 3.1).",
        handler: || get(openapi_json),
        path_params: &[],
        query: None,
        answer: Answer::AnyJson,
    },
    RouteDoc {
        path: "/v1/description.json",
        operation_id: "getDescription",
        summary: "A short machine-readable description of the service for agents.",
        handler: || get(description_json),
        path_params: &[],
        query: None,
        answer: Answer::Json(schema::<AgentDescription>),
    },
    RouteDoc {
        path: "/llms.txt",
        operation_id: "getLlmsTxt",
        summary: "What this service is and how to use it, for language models (llms.txt).",
        handler: || get(llms_txt),
        path_params: &[],
        query: None,
        answer: Answer::Text,
    },
];

/// The OpenAPI 3.1 document of the public API.
pub fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(build_document)
}

fn build_document() -> Value {
    let mut g = SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = "/components/schemas".into())
        .for_serialize()
        .into_generator();
    let mut q = SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.inline_subschemas = true;
        })
        .for_deserialize()
        .into_generator();
    let error = g.subschema_for::<ErrorBody>();
    let error_response = json!({
        "description": "an error: `error.code` is stable (see ErrorCode), `error.message` is for people",
        "content": {"application/json": {"schema": error}},
    });
    let mut paths = Map::new();
    for r in ROUTES {
        let mut parameters = Vec::new();
        for (name, description, pattern) in r.path_params {
            parameters.push(json!({
                "name": name, "in": "path", "required": true, "description": description,
                "schema": {"type": "string", "pattern": pattern},
            }));
        }
        if let Some(query) = r.query {
            let schema = query(&mut q).to_value();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (name, prop) in props {
                    let mut prop = prop.clone();
                    let description = prop
                        .as_object_mut()
                        .and_then(|o| o.remove("description"))
                        .unwrap_or(Value::String(String::new()));
                    parameters.push(json!({
                        "name": name, "in": "query", "required": false,
                        "description": description, "schema": prop,
                    }));
                }
            }
        }
        let ok = match r.answer {
            Answer::Json(f) => json!({"application/json": {"schema": f(&mut g)}}),
            Answer::AnyJson => json!({"application/json": {"schema": {"type": "object"}}}),
            Answer::Text => json!({"text/plain": {"schema": {"type": "string"}}}),
        };
        let mut responses = Map::new();
        responses.insert(
            "200".into(),
            json!({"description": "success", "content": ok}),
        );
        responses.insert("4XX".into(), error_response.clone());
        responses.insert("5XX".into(), error_response.clone());
        let mut operation = json!({
            "operationId": r.operation_id,
            "summary": r.summary,
            "responses": responses,
        });
        if !parameters.is_empty() {
            operation["parameters"] = Value::Array(parameters);
        }
        paths.insert(r.path.to_string(), json!({"get": operation}));
    }
    let mut schemas = g.take_definitions(true);
    schemas.extend(q.take_definitions(true));
    json!({
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "x402-probe",
            "version": env!("CARGO_PKG_VERSION"),
            "summary": "Evidence-based scores of x402 pay-per-call endpoints, signed by the reporter key.",
            "description": "Read-only. Public routes are rate-limited per client IP (429 with Retry-After). \
                Scores are signed aggregates: raw ledger entries are never served here.",
        },
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// A route, for agents.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RouteSummary {
    pub method: String,
    pub path: String,
    pub summary: String,
}

/// The service described for agents.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AgentDescription {
    pub name: String,
    pub description: String,
    pub openapi: String,
    pub llms_txt: String,
    pub reporter_key: String,
    pub routes: Vec<RouteSummary>,
    /// How to check a signed score without trusting this server.
    pub verify_score: Vec<String>,
}

const VERIFY_STEPS: [&str; 5] = [
    "Fetch /v1/key once and keep public_key (ed25519, hex); compare it with a copy obtained out of band.",
    "Fetch /v1/subjects/{id}/score: an envelope with payload (base64 of the score document's exact bytes) and signature (hex).",
    "Check SHA-256(payload bytes) equals document_sha256.",
    "Verify the ed25519 signature over the bytes \"x402-probe.signed-score/1\\n\" followed by the payload bytes.",
    "Read the payload as JSON; it must equal `document`, and its subject.url and as_of must equal the envelope's. Or run: x402-probe verify-score FILE --pubkey HEX.",
];

fn description() -> AgentDescription {
    AgentDescription {
        name: "x402-probe".into(),
        description: "Scores x402 (HTTP 402 pay-per-call) endpoints from probes and small real paid calls, \
            under a published rubric: score, uncertainty band, grade, verdict (ok, caution, avoid, down, unverified), \
            confidence, outlook, watch and value. Each score document is signed by the reporter key."
            .into(),
        openapi: "/v1/openapi.json".into(),
        llms_txt: "/llms.txt".into(),
        reporter_key: "/v1/key".into(),
        routes: ROUTES
            .iter()
            .map(|r| RouteSummary {
                method: "GET".into(),
                path: r.path.into(),
                summary: r.summary.into(),
            })
            .collect(),
        verify_score: VERIFY_STEPS.iter().map(|s| s.to_string()).collect(),
    }
}

fn llms_text() -> String {
    let mut text = String::from(
        "# x402-probe\n\n\
         > Tells paying AI agents which x402 pay-per-call APIs they can trust, with evidence: \
         each endpoint is probed on a schedule, paid small real amounts now and then, and scored \
         under a published rubric. Scores are signed by the reporter key.\n\n\
         Read-only JSON. Subjects are named by an id: hex of the first 16 bytes of SHA-256 of \
         their URL. Errors are `{\"error\": {\"code\", \"message\"}}`; over the rate limit: 429 \
         with Retry-After.\n\n## Routes\n\n",
    );
    for r in ROUTES {
        text.push_str(&format!("- [GET {}]({}): {}\n", r.path, r.path, r.summary));
    }
    text.push_str("\n## Choosing an endpoint\n\n\
        - Prefer verdict `ok`; `caution` means a low grade or low confidence; never pay `avoid` or `down`.\n\
        - `unverified` means too little evidence yet (probes, days, or a paid call): not a judgement.\n\
        - `GET /v1/subjects?verdict=ok&sort=score` lists the best first.\n\
        \n## Verifying a signed score\n\n");
    for (i, step) in VERIFY_STEPS.iter().enumerate() {
        text.push_str(&format!("{}. {step}\n", i + 1));
    }
    text
}

pub(crate) async fn openapi_json(State(_): State<ApiState>) -> Response {
    static BYTES: OnceLock<bytes::Bytes> = OnceLock::new();
    let body = BYTES.get_or_init(|| serde_json::to_vec(document()).unwrap_or_default().into());
    v1::JsonBytes(body.clone()).into_response()
}

pub(crate) async fn description_json(State(_): State<ApiState>) -> Response {
    axum::Json(description()).into_response()
}

pub(crate) async fn llms_txt(State(_): State<ApiState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        )],
        llms_text(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_names_every_route_and_resolves_every_reference() {
        let doc = document();
        assert_eq!(doc["openapi"], "3.1.0");
        for r in ROUTES {
            assert!(doc["paths"][r.path]["get"].is_object(), "{}", r.path);
        }
        let text = doc.to_string();
        for reference in text.split("\"$ref\":\"").skip(1) {
            let target = reference.split('"').next().unwrap();
            let name = target.strip_prefix("#/components/schemas/").unwrap();
            assert!(doc["components"]["schemas"][name].is_object(), "{target}");
        }
        // Query parameters come from the query types.
        let params = doc["paths"]["/v1/subjects"]["get"]["parameters"]
            .as_array()
            .unwrap();
        let names: Vec<&str> = params.iter().map(|p| p["name"].as_str().unwrap()).collect();
        for n in [
            "verdict", "grade", "category", "sort", "order", "limit", "offset",
        ] {
            assert!(names.contains(&n), "{names:?}");
        }
    }
}
