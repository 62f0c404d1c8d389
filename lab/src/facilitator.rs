//! The lab's facilitator: `/verify`, `/settle` and `/supported` over HTTP, settling on the lab chain.
//!
//! One listener serves every kind under its own base path (`/honest`, `/double-pull`, ...), the way
//! hosted facilitators live under a path. The honest kind verifies as the reference facilitator does
//! (scheme, EIP-712 domain present, network, signature, recipient, time window, exact value, then a
//! simulation) and settles with `transferWithAuthorization`. The dishonest kinds verify the same way
//! and then misbehave on settle, using an allowance the payer granted their signer (the lab grants it).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alloy::primitives::{Address, B256, Signature, U256};
use anyhow::{Context, Result, anyhow};
use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::scenarios::FacilitatorKind;
use crate::token::{Authorization, Domain, Token, recover_authorization_signer};

/// Facilitators refuse authorizations that expire sooner than this (one block of margin).
const MIN_REMAINING_SECS: u64 = 6;

/// Who signs and pays gas for each kind of facilitator, and where dishonest pulls go.
#[derive(Debug, Clone)]
pub struct FacilitatorAccounts {
    /// Sends honest settlements.
    pub honest: Address,
    /// Sends the dishonest kinds' transactions; the payer has granted it an allowance.
    pub dishonest: Address,
    /// Where `wrong-payee` sends the money.
    pub attacker: Address,
}

struct Facilitator {
    token: Token,
    chain_id: u64,
    accounts: FacilitatorAccounts,
}

/// A running facilitator: the base URL of each kind.
pub struct RunningFacilitator {
    pub base_urls: BTreeMap<FacilitatorKind, String>,
    _tasks: JoinSet<()>,
}

pub async fn start(
    token: Token,
    chain_id: u64,
    accounts: FacilitatorAccounts,
) -> Result<RunningFacilitator> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the facilitator")?;
    let addr = listener.local_addr()?;
    let state = Arc::new(Facilitator {
        token,
        chain_id,
        accounts,
    });
    let app = Router::new()
        .route("/{kind}/supported", get(supported))
        .route("/{kind}/verify", post(verify))
        .route("/{kind}/settle", post(settle))
        .route("/pull-again", post(pull_again))
        .with_state(state);
    let mut tasks = JoinSet::new();
    tasks.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let base_urls = FacilitatorKind::ALL
        .iter()
        .map(|k| (*k, format!("http://{addr}/{}", k.name())))
        .collect();
    Ok(RunningFacilitator {
        base_urls,
        _tasks: tasks,
    })
}

fn kind_of(name: &str) -> Option<FacilitatorKind> {
    FacilitatorKind::ALL.into_iter().find(|k| k.name() == name)
}

async fn supported(State(f): State<Arc<Facilitator>>, Path(kind): Path<String>) -> Json<Value> {
    let network = format!("eip155:{}", f.chain_id);
    let signer = match kind_of(&kind) {
        Some(FacilitatorKind::Honest) => f.accounts.honest,
        _ => f.accounts.dishonest,
    };
    Json(json!({
        "kinds": [
            {"x402Version": 1, "scheme": "exact", "network": network},
            {"x402Version": 2, "scheme": "exact", "network": network},
        ],
        "extensions": [],
        "signers": {"eip155:*": [signer.to_checksum(None)]},
    }))
}

/// A payment the facilitator has checked: the authorization, its signature and the requirement's
/// network, ready to settle.
struct Checked {
    authorization: Authorization,
    signature: Signature,
    network: String,
}

fn invalid(reason: &str, payer: Option<Address>) -> Value {
    json!({"isValid": false, "invalidReason": reason, "payer": payer.map(|p| p.to_checksum(None))})
}

fn field<'a>(v: &'a Value, path: &str) -> Option<&'a str> {
    v.pointer(path).and_then(Value::as_str)
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Verify a `{x402Version, paymentPayload, paymentRequirements}` request. `Err(response)` is the
/// `isValid: false` answer.
async fn check(f: &Facilitator, body: &Value) -> Result<Checked, Value> {
    let payload = body
        .get("paymentPayload")
        .ok_or_else(|| invalid("invalid_payload", None))?;
    let req = body
        .get("paymentRequirements")
        .ok_or_else(|| invalid("invalid_payment_requirements", None))?;
    let version = body.get("x402Version").and_then(Value::as_u64).unwrap_or(1);
    let (payload_scheme, payload_network) = if version >= 2 {
        (
            field(payload, "/accepted/scheme"),
            field(payload, "/accepted/network"),
        )
    } else {
        (field(payload, "/scheme"), field(payload, "/network"))
    };
    let from =
        field(payload, "/payload/authorization/from").and_then(|s| s.parse::<Address>().ok());
    if payload_scheme != Some("exact") || field(req, "/scheme") != Some("exact") {
        return Err(invalid("invalid_exact_evm_scheme", from));
    }
    let (Some(name), Some(version_str)) = (field(req, "/extra/name"), field(req, "/extra/version"))
    else {
        return Err(invalid("invalid_exact_evm_missing_eip712_domain", from));
    };
    let network = field(req, "/network").unwrap_or_default();
    if payload_network != Some(network) {
        return Err(invalid("invalid_exact_evm_network_mismatch", from));
    }
    if network != format!("eip155:{}", f.chain_id) {
        return Err(invalid("invalid_network", from));
    }
    let asset = field(req, "/asset").and_then(|s| s.parse::<Address>().ok());
    let pay_to = field(req, "/payTo").and_then(|s| s.parse::<Address>().ok());
    let amount = field(req, "/amount").or_else(|| field(req, "/maxAmountRequired"));
    let amount = amount.and_then(|s| s.parse::<U256>().ok());
    let (Some(asset), Some(pay_to), Some(amount)) = (asset, pay_to, amount) else {
        return Err(invalid("invalid_payment_requirements", from));
    };
    let authorization =
        parse_authorization(payload).ok_or_else(|| invalid("invalid_payload", from))?;
    let signature = field(payload, "/payload/signature")
        .and_then(|s| s.parse::<Signature>().ok())
        .ok_or_else(|| invalid("invalid_exact_evm_signature", from))?;
    let domain = Domain::new(name, version_str, f.chain_id, asset);
    match recover_authorization_signer(&domain, &authorization, &signature) {
        Ok(signer) if signer == authorization.from => {}
        _ => return Err(invalid("invalid_exact_evm_signature", from)),
    }
    if authorization.to != pay_to {
        return Err(invalid("invalid_exact_evm_recipient_mismatch", from));
    }
    let now = U256::from(now_secs());
    if authorization.valid_before < now + U256::from(MIN_REMAINING_SECS) {
        return Err(invalid(
            "invalid_exact_evm_payload_authorization_valid_before",
            from,
        ));
    }
    if authorization.valid_after > now {
        return Err(invalid(
            "invalid_exact_evm_payload_authorization_valid_after",
            from,
        ));
    }
    if authorization.value != amount {
        return Err(invalid("invalid_exact_evm_authorization_value", from));
    }
    catch_up_chain_clock(f, authorization.valid_after).await;
    // Only tokens deployed on this chain can be simulated; anything else fails the simulation below.
    let token = Token::at(f.token.rpc(), asset)
        .await
        .map_err(|_| invalid("invalid_exact_evm_eip3009_not_supported", from))?;
    if let Ok(true) = token
        .authorization_state(authorization.from, authorization.nonce)
        .await
    {
        return Err(invalid("invalid_exact_evm_nonce_already_used", from));
    }
    if token
        .simulate_transfer_with_authorization(f.accounts.honest, &authorization, &signature)
        .await
        .is_err()
    {
        return Err(invalid(
            "invalid_exact_evm_transaction_simulation_failed",
            from,
        ));
    }
    Ok(Checked {
        authorization,
        signature,
        network: network.to_string(),
    })
}

/// Mines an empty block when the chain's latest block is not after `valid_after`.
///
/// The token checks `validAfter < block.timestamp`, and the simulation runs at the latest block.
/// A real chain makes a block every few seconds, so its latest block is always recent; anvil
/// mines only when a transaction comes, so after ten idle minutes the latest block is older than
/// the `now - 600 s` a payer signs as `validAfter`, and every honest payment would fail its
/// simulation. One empty block, stamped with anvil's clock (the wall clock, plus any warp a test
/// asked for), is what a real chain would have made meanwhile. Interval mining (`--block-time`)
/// would keep the clock moving too, but it also delays every transaction to the next tick and
/// grows the chain while the lab is idle; this mines only when a payment needs it.
async fn catch_up_chain_clock(f: &Facilitator, valid_after: U256) {
    let rpc = f.token.rpc();
    match rpc.latest_block_timestamp().await {
        Ok(latest) if U256::from(latest) <= valid_after => {
            if let Err(e) = rpc.mine().await {
                eprintln!("lab: mining a block to move the chain's clock failed: {e}");
            }
        }
        _ => {}
    }
}

fn parse_authorization(payload: &Value) -> Option<Authorization> {
    let a = payload.pointer("/payload/authorization")?;
    let addr = |k: &str| a.get(k)?.as_str()?.parse::<Address>().ok();
    let num = |k: &str| a.get(k)?.as_str()?.parse::<U256>().ok();
    Some(Authorization {
        from: addr("from")?,
        to: addr("to")?,
        value: num("value")?,
        valid_after: num("validAfter")?,
        valid_before: num("validBefore")?,
        nonce: a.get("nonce")?.as_str()?.parse::<B256>().ok()?,
    })
}

async fn verify(
    State(f): State<Arc<Facilitator>>,
    Path(kind): Path<String>,
    Json(body): Json<Value>,
) -> Json<Value> {
    if kind_of(&kind).is_none() {
        return Json(invalid("unknown_facilitator", None));
    }
    Json(match check(&f, &body).await {
        Ok(c) => json!({"isValid": true, "payer": c.authorization.from.to_checksum(None)}),
        Err(v) => v,
    })
}

async fn settle(
    State(f): State<Arc<Facilitator>>,
    Path(kind): Path<String>,
    Json(body): Json<Value>,
) -> Json<Value> {
    let Some(kind) = kind_of(&kind) else {
        return Json(
            json!({"success": false, "errorReason": "unknown_facilitator", "transaction": ""}),
        );
    };
    let checked = match check(&f, &body).await {
        Ok(c) => c,
        Err(v) => {
            let reason = v.get("invalidReason").cloned().unwrap_or(Value::Null);
            return Json(
                json!({"success": false, "errorReason": reason, "transaction": "", "network": ""}),
            );
        }
    };
    let network = checked.network.clone();
    let payer = checked.authorization.from;
    Json(settle_answer(
        settle_as(&f, kind, &checked).await,
        &network,
        payer,
    ))
}

/// The SettleResponse for a settlement sent (its transaction) or failed.
fn settle_answer(sent: Result<B256>, network: &str, payer: Address) -> Value {
    match sent {
        Ok(tx) => json!({
            "success": true,
            "transaction": format!("{tx:#x}"),
            "network": network,
            "payer": payer.to_checksum(None),
        }),
        Err(e) => json!({
            "success": false,
            "errorReason": "unexpected_settle_error",
            "errorMessage": format!("{e:#}"),
            "transaction": "",
            "network": network,
        }),
    }
}

/// What no facilitator should offer, for the lab's dishonest sellers (`payment-id-double-charge`):
/// the amount of an authorization already spent pulled again from the payer to the payee, through
/// the allowance the payer granted the dishonest signer. Nothing is checked: the authorization is
/// only read for who, to whom and how much.
async fn pull_again(State(f): State<Arc<Facilitator>>, Json(body): Json<Value>) -> Json<Value> {
    let network = format!("eip155:{}", f.chain_id);
    let Some(a) = body.get("paymentPayload").and_then(parse_authorization) else {
        return Json(
            json!({"success": false, "errorReason": "invalid_payload", "transaction": ""}),
        );
    };
    let pulled: Result<B256> = async {
        let token = Token::at(f.token.rpc(), f.token.address()).await?;
        Ok(token
            .transfer_from(f.accounts.dishonest, a.from, a.to, a.value)
            .await?)
    }
    .await;
    Json(settle_answer(pulled, &network, a.from))
}

async fn settle_as(f: &Facilitator, kind: FacilitatorKind, c: &Checked) -> Result<B256> {
    let a = &c.authorization;
    let token = Token::at(f.token.rpc(), f.token.address()).await?;
    let dishonest = f.accounts.dishonest;
    Ok(match kind {
        FacilitatorKind::Honest => {
            token
                .transfer_with_authorization(f.accounts.honest, a, &c.signature)
                .await?
        }
        FacilitatorKind::DoublePull => {
            let tx = token
                .transfer_with_authorization(dishonest, a, &c.signature)
                .await?;
            token
                .transfer_from(dishonest, a.from, a.to, a.value)
                .await?;
            tx
        }
        FacilitatorKind::Overcharge => {
            token
                .transfer_from(dishonest, a.from, a.to, a.value * U256::from(3))
                .await?
        }
        FacilitatorKind::WrongPayee => {
            token
                .transfer_from(dishonest, a.from, f.accounts.attacker, a.value)
                .await?
        }
        FacilitatorKind::FakeHash => B256::from(rand::random::<[u8; 32]>()),
    })
}

/// How the resource servers reach the facilitator: real HTTP, as a hosted one would be reached.
#[derive(Clone)]
pub struct FacilitatorClient {
    http: reqwest::Client,
    base_urls: BTreeMap<FacilitatorKind, String>,
    /// The Solana facilitators (`svm_facilitator.rs`), when the lab runs its SVM: a requirement
    /// on a `solana` network goes there.
    solana_base_urls: BTreeMap<FacilitatorKind, String>,
}

impl FacilitatorClient {
    pub fn new(base_urls: BTreeMap<FacilitatorKind, String>) -> Result<FacilitatorClient> {
        crate::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .no_proxy()
            .build()
            .context("building the facilitator client")?;
        Ok(FacilitatorClient {
            http,
            base_urls,
            solana_base_urls: BTreeMap::new(),
        })
    }

    /// The same client, sending Solana requirements to these facilitators.
    pub fn with_solana(mut self, urls: BTreeMap<FacilitatorKind, String>) -> FacilitatorClient {
        self.solana_base_urls = urls;
        self
    }

    async fn post(
        &self,
        kind: FacilitatorKind,
        op: &str,
        version: u64,
        payload: &Value,
        req: &Value,
    ) -> Result<Value> {
        let on_solana = req
            .get("network")
            .and_then(Value::as_str)
            .is_some_and(|n| n.starts_with("solana"));
        let urls = if on_solana {
            &self.solana_base_urls
        } else {
            &self.base_urls
        };
        let base = urls
            .get(&kind)
            .ok_or_else(|| anyhow!("no {} facilitator", kind.name()))?;
        let body =
            json!({"x402Version": version, "paymentPayload": payload, "paymentRequirements": req});
        let resp = self
            .http
            .post(format!("{base}/{op}"))
            .json(&body)
            .send()
            .await?;
        Ok(resp.json::<Value>().await?)
    }

    pub async fn verify(
        &self,
        kind: FacilitatorKind,
        version: u64,
        payload: &Value,
        req: &Value,
    ) -> Result<Value> {
        self.post(kind, "verify", version, payload, req).await
    }

    /// The dishonest `/pull-again` (see [`pull_again`]): the amount of `payload`'s spent
    /// authorization pulled again.
    pub async fn pull_again(&self, payload: &Value, req: &Value) -> Result<Value> {
        let base = self
            .base_urls
            .get(&FacilitatorKind::Honest)
            .ok_or_else(|| anyhow!("no facilitator"))?;
        let root = base
            .strip_suffix(FacilitatorKind::Honest.name())
            .unwrap_or(base);
        let body = json!({"x402Version": 2, "paymentPayload": payload, "paymentRequirements": req});
        let resp = self
            .http
            .post(format!("{root}pull-again"))
            .json(&body)
            .send()
            .await?;
        Ok(resp.json::<Value>().await?)
    }

    pub async fn settle(
        &self,
        kind: FacilitatorKind,
        version: u64,
        payload: &Value,
        req: &Value,
    ) -> Result<Value> {
        self.post(kind, "settle", version, payload, req).await
    }
}
