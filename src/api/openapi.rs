//! The route table of the API, and what is generated from it: the routers of the JSON routes
//! (public, the operator's, the admin's), the OpenAPI 3.1 document (`/v1/openapi.json`, schemas by
//! schemars from the very types the handlers read and serialise, with each route's access rule),
//! a short machine-readable description for agents (`/v1/description.json`) and `/llms.txt`. One
//! table feeds all of them, so a route cannot be served undocumented or documented with another
//! shape than it answers.

use std::sync::OnceLock;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::admin::{self, AddSubject, AdminAnswer, DeclareOutage, RunNow, SubjectAction};
use super::operator::{
    self, ChallengeIssued, ChallengeRequest, EntriesRequest, NotePosted, NoteRequest,
    OperatorEntries,
};
use super::preflight::{self, Preflight, PreflightQuery, PreflightRequest};
use super::signed::SignedScore;
use super::types::*;
use super::v1;
use super::{ApiState, ErrorBody};
use crate::snapshot::SignedSnapshot;

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

/// The HTTP method of a route (its handler is routed under the same one).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Method {
    Get,
    Post,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Method::Get => "get",
            Method::Post => "post",
        }
    }
}

/// Who may call a route.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Access {
    /// Anyone, under the per-client rate limit.
    Public,
    /// A subject's operator, under the rate limit: the body carries a signature over a challenge
    /// issued for this action (`POST /v1/operator/challenge`), by the subject's payTo or one of
    /// its declared operator keys.
    OperatorProof,
    /// `Authorization: Bearer` with the admin token (no rate limit; refused when no token is
    /// configured).
    AdminToken,
}

/// One route of the API.
#[derive(Clone, Copy)]
pub(crate) struct RouteDoc {
    pub(crate) method: Method,
    pub(crate) path: &'static str,
    pub(crate) operation_id: &'static str,
    pub(crate) summary: &'static str,
    pub(crate) access: Access,
    /// Routed as `method`: `get(handler)` or `post(handler)`.
    pub(crate) handler: Handler,
    /// Path parameters: name and description.
    pub(crate) path_params: &'static [(&'static str, &'static str, &'static str)],
    /// The query parameters' type (its fields become the parameters).
    pub(crate) query: Option<SchemaFn>,
    /// The JSON request body's type.
    pub(crate) body: Option<SchemaFn>,
    /// The status of a success.
    pub(crate) ok_status: u16,
    pub(crate) answer: Answer,
}

/// The routes of one access rule, from the table: what is served is what is documented (the
/// caller puts the rule's layer on them: the rate limit, the token check).
pub(crate) fn routes(access: Access) -> axum::Router<ApiState> {
    ROUTES
        .iter()
        .filter(|r| r.access == access)
        .fold(axum::Router::new(), |router, r| {
            router.route(r.path, (r.handler)())
        })
}

type SchemaFn = fn(&mut SchemaGenerator) -> schemars::Schema;
type Handler = fn() -> MethodRouter<ApiState>;

impl RouteDoc {
    /// A public GET route, without parameters until they are added.
    const fn get(
        path: &'static str,
        operation_id: &'static str,
        summary: &'static str,
        handler: Handler,
        answer: Answer,
    ) -> RouteDoc {
        RouteDoc {
            method: Method::Get,
            path,
            operation_id,
            summary,
            access: Access::Public,
            handler,
            path_params: &[],
            query: None,
            body: None,
            ok_status: 200,
            answer,
        }
    }

    /// A POST route with a JSON body, answering `ok` (its status and answer) on success.
    const fn post(
        access: Access,
        path: &'static str,
        operation_id: &'static str,
        summary: &'static str,
        handler: Handler,
        body: SchemaFn,
        ok: (u16, Answer),
    ) -> RouteDoc {
        RouteDoc {
            method: Method::Post,
            path,
            operation_id,
            summary,
            access,
            handler,
            path_params: &[],
            query: None,
            body: Some(body),
            ok_status: ok.0,
            answer: ok.1,
        }
    }

    const fn path_params(
        mut self,
        params: &'static [(&'static str, &'static str, &'static str)],
    ) -> RouteDoc {
        self.path_params = params;
        self
    }

    const fn query(mut self, query: SchemaFn) -> RouteDoc {
        self.query = Some(query);
        self
    }
}

fn schema<T: JsonSchema>(g: &mut SchemaGenerator) -> schemars::Schema {
    g.subschema_for::<T>()
}

const SUBJECT_ID: (&str, &str, &str) = (
    "id",
    "the subject id: hex of the first 16 bytes of SHA-256 of its URL",
    "^[0-9a-f]{32}$",
);

/// Every route of the JSON API.
pub(crate) const ROUTES: &[RouteDoc] = &[
    RouteDoc::get(
        "/v1/subjects",
        "listSubjects",
        "Subjects with their latest score, band, grade, verdict, confidence, outlook, watch and value; filtered, sorted, paged.",
        || get(v1::subjects),
        Answer::Json(schema::<SubjectPage>),
    )
    .query(schema::<SubjectQuery>),
    RouteDoc::get(
        "/v1/subjects/{id}",
        "getSubject",
        "One subject and its latest score, summarised.",
        || get(v1::subject),
        Answer::Json(schema::<SubjectSummary>),
    )
    .path_params(&[SUBJECT_ID]),
    RouteDoc::get(
        "/v1/subjects/{id}/score",
        "getSignedScore",
        "The subject's latest score document, signed by the reporter key (verify offline with `x402-probe verify-score`).",
        || get(v1::subject_score),
        Answer::Json(schema::<SignedScore>),
    )
    .path_params(&[SUBJECT_ID]),
    RouteDoc::get(
        "/v1/subjects/{id}/history",
        "getScoreHistory",
        "The subject's daily scores (the last of each UTC day), oldest first.",
        || get(v1::subject_history),
        Answer::Json(schema::<ScoreHistory>),
    )
    .path_params(&[SUBJECT_ID]),
    RouteDoc::get(
        "/v1/subjects/{id}/readiness",
        "getReadiness",
        "The subject's agent readiness under the seed 000 rubric (access, payment, interface, completion, docs; bonuses; safety findings with their receipts; the score or its range where evidence cannot decide a step; the band): beside the score, never mixed into it.",
        || get(v1::subject_readiness),
        Answer::Json(schema::<SubjectReadiness>),
    )
    .path_params(&[SUBJECT_ID]),
    RouteDoc::get(
        "/v1/subjects/{id}/findings",
        "getFindings",
        "The subject's findings (facts other x402 tools publish: a machine-readable description, resource.url against the endpoint, a paywall page for a browser, settlements by a known facilitator, payTo collisions across subjects, pay-then-refuse), each with its receipt, and whose its failed paid checks and unmeasured results are (seller, facilitator, chain or us), with counts by party: beside the score, never in it.",
        || get(v1::subject_findings),
        Answer::Json(schema::<SubjectFindings>),
    )
    .path_params(&[SUBJECT_ID]),
    RouteDoc::get(
        "/v1/snapshots/latest",
        "getLatestSnapshot",
        "The newest daily snapshot: every subject's verdict, grade, score, band, payTo and price as rated at a UTC day's end, signed by the reporter key, with each score entry's inclusion proof (verify offline with `x402-probe verify-snapshot`). gzip when accepted.",
        || get(super::snapshots::latest),
        Answer::Json(schema::<SignedSnapshot>),
    ),
    RouteDoc::get(
        "/v1/snapshots/{day}",
        "getSnapshot",
        "The signed snapshot of one UTC day, immutable once made (404 for a day not over, or before the ledger began). gzip when accepted.",
        || get(super::snapshots::day),
        Answer::Json(schema::<SignedSnapshot>),
    )
    .path_params(&[(
        "day",
        "a UTC day, YYYY-MM-DD",
        "^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
    )]),
    RouteDoc::get(
        "/v1/preflight",
        "preflight",
        "Before paying a URL: go, caution, avoid or unrated, with the reasons, the subject's signed score and the terms we rated (payTo, asset, network, amount).",
        || get(preflight::get),
        Answer::Json(schema::<Preflight>),
    )
    .query(schema::<PreflightQuery>),
    RouteDoc::post(
        Access::Public,
        "/v1/preflight",
        "preflightPaymentRequired",
        "Before paying, with the PaymentRequired received (the 402's body, or the PAYMENT-REQUIRED header's base64): the GET's answer, and which accepts entry is safe to pay (the one whose payTo, asset, network and amount are the rated ones; none: avoid).",
        || post(preflight::post),
        schema::<PreflightRequest>,
        (200, Answer::Json(schema::<Preflight>)),
    ),
    RouteDoc::get(
        "/v1/outages",
        "listOutages",
        "Our own declared outage windows (free outcomes inside them count against no subject).",
        || get(v1::outages),
        Answer::Json(schema::<OutageList>),
    ),
    RouteDoc::get(
        "/v1/rubrics",
        "listRubrics",
        "The rubrics this daemon serves, by the SHA-256 of their files.",
        || get(v1::rubrics),
        Answer::Json(schema::<RubricList>),
    ),
    RouteDoc::get(
        "/v1/rubrics/{sha256}",
        "getRubric",
        "A rubric file, byte for byte (its SHA-256 is the one in the path).",
        || get(v1::rubric),
        Answer::AnyJson,
    )
    .path_params(&[(
        "sha256",
        "SHA-256 of the rubric file, hex",
        "^[0-9a-f]{64}$",
    )]),
    RouteDoc::get(
        "/v1/ledger/head",
        "getLedgerHead",
        "The ledger's last entry number and chain hash, and its last signed checkpoint.",
        || get(v1::ledger_head),
        Answer::Json(schema::<LedgerHead>),
    ),
    RouteDoc::get(
        "/v1/ledger/checkpoints",
        "listCheckpoints",
        "The ledger's signed checkpoints, oldest first, paged.",
        || get(v1::checkpoints),
        Answer::Json(schema::<CheckpointList>),
    )
    .query(schema::<CheckpointQuery>),
    RouteDoc::get(
        "/v1/ledger/tree",
        "getTreeCheckpoint",
        "The latest tree checkpoint: the Merkle root (RFC 9162) of the ledger's first entries, signed as a C2SP note.",
        || get(v1::tree_head),
        Answer::Json(schema::<TreeHead>),
    ),
    RouteDoc::get(
        "/v1/ledger/consistency",
        "getConsistencyProof",
        "The RFC 9162 proof that the tree of `to` entries extends the tree of `from` entries (two checkpoints you hold).",
        || get(v1::consistency),
        Answer::Json(schema::<ConsistencyView>),
    )
    .query(schema::<ConsistencyQuery>),
    RouteDoc::get(
        "/v1/key",
        "getReporterKey",
        "The reporter's ed25519 public key, which signs scores and checkpoints.",
        || get(v1::key),
        Answer::Json(schema::<ReporterKeyView>),
    ),
    RouteDoc::get(
        "/v1/status",
        "getStatus",
        "The daemon's view: subjects by verdict, the paused ones, next due runs, paid budget left, outages.",
        || get(v1::status),
        Answer::Json(schema::<StatusView>),
    ),
    RouteDoc::get(
        "/v1/openapi.json",
        "getOpenApi",
        "This document (OpenAPI 3.1).",
        || get(openapi_json),
        Answer::AnyJson,
    ),
    RouteDoc::get(
        "/v1/description.json",
        "getDescription",
        "A short machine-readable description of the service for agents.",
        || get(description_json),
        Answer::Json(schema::<AgentDescription>),
    ),
    RouteDoc::get(
        "/llms.txt",
        "getLlmsTxt",
        "What this service is and how to use it, for language models (llms.txt).",
        || get(llms_txt),
        Answer::Text,
    ),
    RouteDoc::post(
        Access::Public,
        "/v1/operator/challenge",
        "issueOperatorChallenge",
        "A single-use challenge for one action on one subject, to sign with EIP-191 personal_sign by the subject's payTo or a declared operator key (the first step of the operator's proof).",
        || post(operator::challenge),
        schema::<ChallengeRequest>,
        (201, Answer::Json(schema::<ChallengeIssued>)),
    ),
    RouteDoc::post(
        Access::OperatorProof,
        "/v1/operator/entries",
        "readOperatorEntries",
        "Every ledger entry about the subject, as stored and chained, a page at a time: for its operator only (a challenge issued for read_entries, signed).",
        || post(operator::entries),
        schema::<EntriesRequest>,
        (200, Answer::Json(schema::<OperatorEntries>)),
    ),
    RouteDoc::post(
        Access::OperatorProof,
        "/v1/operator/notes",
        "postOperatorNote",
        "A dated revision note by the subject's operator (a challenge issued for post_note, signed), recorded in the ledger.",
        || post(operator::notes),
        schema::<NoteRequest>,
        (201, Answer::Json(schema::<NotePosted>)),
    ),
    RouteDoc::post(
        Access::AdminToken,
        "/v1/admin/subjects",
        "addSubject",
        "Start probing a subject (or probe again one that was removed or delisted).",
        || post(admin::add_subject),
        schema::<AddSubject>,
        (201, ADMIN_ANSWER),
    ),
    RouteDoc::post(
        Access::AdminToken,
        "/v1/admin/subjects/pause",
        "pauseSubject",
        "Stop probing a subject until it is resumed (its history stays).",
        || post(admin::pause),
        schema::<SubjectAction>,
        (200, ADMIN_ANSWER),
    ),
    RouteDoc::post(
        Access::AdminToken,
        "/v1/admin/subjects/resume",
        "resumeSubject",
        "Probe a paused subject again.",
        || post(admin::resume),
        schema::<SubjectAction>,
        (200, ADMIN_ANSWER),
    ),
    RouteDoc::post(
        Access::AdminToken,
        "/v1/admin/outages",
        "declareOutage",
        "Declare one of our own outage windows (free outcomes inside it count against no subject).",
        || post(admin::declare_outage),
        schema::<DeclareOutage>,
        (201, ADMIN_ANSWER),
    ),
    RouteDoc::post(
        Access::AdminToken,
        "/v1/admin/runs",
        "runNow",
        "Run a subject's free probe now (it records itself in the ledger when it ends).",
        || post(admin::run_now),
        schema::<RunNow>,
        (202, ADMIN_ANSWER),
    ),
];

/// What every admin action answers.
const ADMIN_ANSWER: Answer = Answer::Json(schema::<AdminAnswer>);

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
                let required = |name: &str| {
                    schema
                        .get("required")
                        .and_then(Value::as_array)
                        .is_some_and(|r| r.iter().any(|n| n == name))
                };
                for (name, prop) in props {
                    let mut prop = prop.clone();
                    let description = prop
                        .as_object_mut()
                        .and_then(|o| o.remove("description"))
                        .unwrap_or(Value::String(String::new()));
                    parameters.push(json!({
                        "name": name, "in": "query", "required": required(name),
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
            r.ok_status.to_string(),
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
        if let Some(body) = r.body {
            // Inlined (the deserialising generator): a request type's schema can differ from
            // the same type's as an answer (fields with defaults are optional here).
            operation["requestBody"] = json!({
                "required": true,
                "content": {"application/json": {"schema": body(&mut q).to_value()}},
            });
        }
        match r.access {
            Access::Public => {}
            Access::OperatorProof => {
                operation["description"] = Value::String(OPERATOR_PROOF.into());
            }
            Access::AdminToken => {
                operation["security"] = json!([{ADMIN_SCHEME: []}]);
            }
        }
        if let Some(item) = paths
            .entry(r.path.to_string())
            .or_insert_with(|| json!({}))
            .as_object_mut()
        {
            item.insert(r.method.key().into(), operation);
        }
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
            "description": "Public routes are read-only and rate-limited per client IP (429 with Retry-After). \
                Scores are signed aggregates: raw ledger entries go only to a subject's operator, after a \
                signed challenge (the /v1/operator routes). Admin routes need the admin token.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                ADMIN_SCHEME: {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The admin token, read by the daemon from a credential file ([api] admin_token_file, or the systemd credential admin-token). Without a configured token every admin route answers 403; a missing or wrong token is 401.",
                },
            },
        },
    })
}

/// The security scheme of the admin routes in the document.
const ADMIN_SCHEME: &str = "adminToken";

/// How the operator's routes are authorised (no HTTP security scheme carries a signature over a
/// server-issued challenge in the body, so the document says it in words).
const OPERATOR_PROOF: &str = "For the subject's operator only. 1. POST /v1/operator/challenge with the subject and \
    this route's action (read_entries for /v1/operator/entries, post_note for /v1/operator/notes). \
    2. Sign the returned text, as is, with EIP-191 personal_sign by the subject's current payTo or \
    an address its operator file lists in operator_keys. 3. Send challenge_id and the signature \
    (65 bytes hex) with this request before expires_at. A challenge is single use (spent by this \
    attempt whatever its result) and authorises only the action it was issued for.";

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
    /// How to ask before paying an endpoint.
    pub preflight: Vec<String>,
}

const PREFLIGHT_STEPS: [&str; 4] = [
    "Before paying URL, GET /v1/preflight?url=URL, or POST /v1/preflight with {\"url\": URL, \"payment_required_header\": the PAYMENT-REQUIRED header's value} (or \"payment_required\": the 402's JSON body).",
    "answer: go (pay), caution (pay only if the reasons are acceptable), avoid (do not pay), unrated (we have no evidence: decide without us); reasons[].code says why.",
    "With a PaymentRequired, pay only accepts[safe_accept]: its payTo, asset, network and amount are the ones we rated. A payTo or amount other than the rated one is avoid, whatever the score.",
    "signed_score is the subject's latest score signed by the reporter key: verify it as under verify_score.",
];

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
            .filter(|r| r.access != Access::AdminToken)
            .map(|r| RouteSummary {
                method: r.method.as_str().into(),
                path: r.path.into(),
                summary: r.summary.into(),
            })
            .collect(),
        verify_score: VERIFY_STEPS.iter().map(|s| s.to_string()).collect(),
        preflight: PREFLIGHT_STEPS.iter().map(|s| s.to_string()).collect(),
    }
}

fn llms_text() -> String {
    let mut text = String::from(
        "# x402-probe\n\n\
         > Tells paying AI agents which x402 pay-per-call APIs they can trust, with evidence: \
         each endpoint is probed on a schedule, paid small real amounts now and then, and scored \
         under a published rubric. Scores are signed by the reporter key.\n\n\
         JSON; the public routes only read. Subjects are named by an id: hex of the first 16 bytes of SHA-256 of \
         their URL. Errors are `{\"error\": {\"code\", \"message\"}}`; over the rate limit: 429 \
         with Retry-After.\n\n## Routes\n\n",
    );
    for r in ROUTES.iter().filter(|r| r.access != Access::AdminToken) {
        text.push_str(&format!(
            "- [{} {}]({}): {}\n",
            r.method.as_str(),
            r.path,
            r.path,
            r.summary
        ));
    }
    text.push_str("\n## Choosing an endpoint\n\n\
        - Prefer verdict `ok`; `caution` means a low grade or low confidence; never pay `avoid` or `down`.\n\
        - `unverified` means too little evidence yet (probes, days, or a paid call): not a judgement.\n\
        - `GET /v1/subjects?verdict=ok&sort=score` lists the best first.\n\
        - Offline or at high volume: `GET /v1/snapshots/latest` once a day, one signed file of every verdict, payTo and price as rated; check it with `x402-probe verify-snapshot FILE --pubkey HEX`.\n\
        \n## Before paying\n\n");
    for (i, step) in PREFLIGHT_STEPS.iter().enumerate() {
        text.push_str(&format!("{}. {step}\n", i + 1));
    }
    text.push_str("\n## Verifying a signed score\n\n");
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
            let op = &doc["paths"][r.path][r.method.key()];
            assert!(op.is_object(), "{}", r.path);
            assert!(
                op["responses"][r.ok_status.to_string()].is_object(),
                "{}",
                r.path
            );
            assert_eq!(
                op["requestBody"].is_object(),
                r.body.is_some(),
                "{}",
                r.path
            );
            assert_eq!(
                op["security"][0][ADMIN_SCHEME].is_array(),
                r.access == Access::AdminToken,
                "{}",
                r.path
            );
        }
        // One operation per method and path.
        let operations: usize = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .map(|item| item.as_object().unwrap().len())
            .sum();
        assert_eq!(operations, ROUTES.len());
        let body = &doc["paths"]["/v1/operator/challenge"]["post"]["requestBody"]["content"]["application/json"]
            ["schema"];
        assert!(body["properties"]["action"].is_object(), "{body}");
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
