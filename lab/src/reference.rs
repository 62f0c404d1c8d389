//! R6's reference sources in the lab: a local npm-like registry standing in for the public one
//! (loopback HTTP, `GET /<package>/latest` and `GET /<package>`), and what the lab's reference
//! endpoints declare and answer: an npm package endpoint and a token supply endpoint, each honest
//! (the fields the source holds) or dishonest (a stale version, a doubled supply).

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::token::Token;

/// The one package the lab registry knows.
pub const PACKAGE: &str = "x402-lab-pkg";
/// Its latest version, and the one before it (what the stale endpoint still serves).
pub const LATEST: &str = "1.3.0";
pub const PREVIOUS: &str = "1.2.0";
pub const LICENSE: &str = "MIT";
pub const DESCRIPTION: &str = "A package the x402 lab publishes in its own registry";

/// What a reference endpoint answers after payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabReference {
    /// The package's latest version document, as the registry has it.
    NpmHonest,
    /// The version before the latest (a stale cache): wrong `version`.
    NpmStale,
    /// The lab token's `totalSupply()`, read from the chain when asked.
    SupplyHonest,
    /// Twice the lab token's supply.
    SupplyDoubled,
}

impl LabReference {
    /// The probe's name of the adapter the endpoint is linked to (`probes/references.json`).
    pub fn adapter(self) -> &'static str {
        match self {
            LabReference::NpmHonest | LabReference::NpmStale => "npm",
            LabReference::SupplyHonest | LabReference::SupplyDoubled => "erc20_supply",
        }
    }

    /// The documented example request's query (bazaar `info.input.queryParams`).
    pub fn query(self, token: &str) -> Value {
        match self {
            LabReference::NpmHonest | LabReference::NpmStale => json!({"package": PACKAGE}),
            LabReference::SupplyHonest | LabReference::SupplyDoubled => json!({"token": token}),
        }
    }

    /// The declared output example.
    pub fn example(self) -> Value {
        match self {
            LabReference::NpmHonest | LabReference::NpmStale => latest_document(),
            LabReference::SupplyHonest | LabReference::SupplyDoubled => {
                json!({"token": "0x0000000000000000000000000000000000000000", "totalSupply": "0"})
            }
        }
    }

    /// The declared output schema.
    pub fn schema(self) -> Value {
        match self {
            LabReference::NpmHonest | LabReference::NpmStale => json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "version": {"type": "string"},
                    "license": {"type": "string"},
                    "description": {"type": "string"}
                },
                "required": ["name", "version"]
            }),
            LabReference::SupplyHonest | LabReference::SupplyDoubled => json!({
                "type": "object",
                "properties": {"token": {"type": "string"}, "totalSupply": {"type": "string"}},
                "required": ["token", "totalSupply"]
            }),
        }
    }

    /// The paid answer (the supply read from the chain at the time of the request).
    pub async fn output(self, token: &Token) -> Value {
        match self {
            LabReference::NpmHonest => latest_document(),
            LabReference::NpmStale => {
                let mut doc = latest_document();
                doc["version"] = json!(PREVIOUS);
                doc
            }
            LabReference::SupplyHonest | LabReference::SupplyDoubled => {
                let supply = match token.total_supply().await {
                    Ok(s) => s,
                    Err(e) => return json!({"error": format!("reading the supply: {e}")}),
                };
                let supply = if self == LabReference::SupplyDoubled {
                    supply * alloy::primitives::U256::from(2)
                } else {
                    supply
                };
                json!({"token": token.address().to_checksum(None), "totalSupply": supply.to_string()})
            }
        }
    }
}

/// The latest version document, as the registry serves it (and the honest endpoint repeats).
pub fn latest_document() -> Value {
    json!({"name": PACKAGE, "version": LATEST, "license": LICENSE, "description": DESCRIPTION})
}

/// The registry's whole package document.
fn package_document() -> Value {
    let mut previous = latest_document();
    previous["version"] = json!(PREVIOUS);
    json!({
        "name": PACKAGE,
        "dist-tags": {"latest": LATEST},
        "versions": {PREVIOUS: previous, LATEST: latest_document()},
        "license": LICENSE,
        "description": DESCRIPTION,
    })
}

/// The running registry: its base URL (`http://127.0.0.1:PORT`).
pub struct RunningRegistry {
    pub url: String,
    _tasks: JoinSet<()>,
}

/// Starts the lab's npm-like registry on a loopback port.
pub async fn start_registry() -> Result<RunningRegistry> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the lab registry")?;
    let addr = listener.local_addr()?;
    let app = Router::new()
        .route("/{package}", get(package))
        .route("/{package}/{tag}", get(version));
    let mut tasks = JoinSet::new();
    tasks.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(RunningRegistry {
        url: format!("http://{addr}"),
        _tasks: tasks,
    })
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"error": "Not found"})),
    )
        .into_response()
}

async fn package(Path(name): Path<String>) -> Response {
    if name != PACKAGE {
        return not_found();
    }
    axum::Json(package_document()).into_response()
}

async fn version(Path((name, tag)): Path<(String, String)>) -> Response {
    if name != PACKAGE {
        return not_found();
    }
    match tag.as_str() {
        "latest" | LATEST => axum::Json(latest_document()).into_response(),
        PREVIOUS => {
            let mut doc = latest_document();
            doc["version"] = json!(PREVIOUS);
            axum::Json(doc).into_response()
        }
        _ => not_found(),
    }
}
