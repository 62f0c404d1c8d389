//! Bringing the whole lab up, describing it (the manifest), and taking it down.

use crate::agent_registry::{AgentIdentity, AgentRegistry};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy::primitives::{Address, U256};
use alloy::signers::local::PrivateKeySigner;
use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::{Value, json};

use crate::catalogue::{self, RunningCatalogue};
use crate::chain::Anvil;
use crate::dynamic::{Dynamic, LabClock, Timeline};
use crate::facilitator::{self, FacilitatorAccounts, FacilitatorClient, RunningFacilitator};
use crate::quote::{self, QuoteContext};
use crate::rpc::Rpc;
use crate::scenarios::{self, Listing, Protocol, QuoteFault, Reliability, Scenario, Transport};
use crate::server::{self, RunningEndpoint, Shared};
use crate::svm::{SolanaAccounts, Svm};
use crate::tls::{Lifetime, TestCa};
use crate::token::Token;

/// What the payer wallet holds at the start by default: 1000 USDC.
pub const PAYER_FUNDS: u64 = 1_000_000_000;

/// Knobs for a lab.
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// Only these scenarios (by name); all when `None`.
    pub scenarios: Option<Vec<String>>,
    /// The `slow` scenario's time to first byte, ms.
    pub slow_ms: u64,
    /// The `flaky` scenario's failure share.
    pub flaky_share: f64,
    /// What the payer wallet holds at the start, in the token's base units (a long simulation
    /// pays more than a test).
    pub payer_funds: u64,
}

impl Default for LabOptions {
    fn default() -> Self {
        LabOptions {
            scenarios: None,
            slow_ms: 4000,
            flaky_share: 0.5,
            payer_funds: PAYER_FUNDS,
        }
    }
}

/// One running scenario endpoint.
pub struct LabEndpoint {
    pub scenario: Scenario,
    /// The subject URL to probe.
    pub url: String,
    _server: RunningEndpoint,
}

/// The lab's description, printed by `lab up` and read by tests and the demo.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Manifest {
    pub rpc: String,
    /// The lab SVM's JSON-RPC, when a Solana scenario runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solana_rpc: Option<String>,
    pub chain_id: u64,
    pub token: String,
    pub fake_token: String,
    pub payer: String,
    pub payer_key_file: PathBuf,
    /// The Solana payer (its USDC account funded on the lab's SVM) and its key file (the Solana
    /// CLI's keypair form), when a Solana scenario runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solana_payer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solana_payer_key_file: Option<PathBuf>,
    pub ca_file: PathBuf,
    pub catalogue: String,
    pub facilitators: BTreeMap<String, String>,
    pub endpoints: Vec<ManifestEndpoint>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ManifestEndpoint {
    pub scenario: String,
    pub summary: String,
    pub url: String,
    pub expect: BTreeMap<String, String>,
}

/// A running lab. Dropping it stops every server and the chain, and removes its files.
pub struct Lab {
    pub rpc: Rpc,
    pub chain_id: u64,
    pub token: Token,
    pub fake_token: Token,
    pub payer: Address,
    pub pay_to: Address,
    pub attacker: Address,
    /// Who sends the honest facilitator's settlements: the lab's one known facilitator (the
    /// `known_facilitator` finding's list).
    pub facilitator_signer: Address,
    pub other_wallet: Address,
    /// The ERC-8004 identity and reputation registry (`agent_registry.rs`).
    pub agent_registry: AgentRegistry,
    /// The agent registered for the endpoints' operator (owned by `pay_to`).
    pub agent: AgentIdentity,
    pub payer_key_file: PathBuf,
    /// The Solana payer, base58, and its key file, when the SVM runs.
    pub solana_payer: Option<String>,
    pub solana_payer_key_file: Option<PathBuf>,
    pub ca_file: PathBuf,
    pub ca_pem: String,
    pub facilitator_urls: BTreeMap<String, String>,
    pub catalogue_url: String,
    /// The lab's npm-like registry (`reference.rs`), standing in for the public one (R6).
    pub npm_registry_url: String,
    pub endpoints: Vec<LabEndpoint>,
    pub startup_time: Duration,
    /// Endpoints started later with a timeline (`spawn_variant`).
    pub variants: Vec<LabVariant>,
    /// Endpoints started later at a placement of their own (`spawn_placed`).
    pub placed: Vec<LabPlaced>,
    /// What starting another endpoint needs.
    parts: VariantParts,
    // Field order is drop order: servers first, then the chain, then the files.
    _catalogue: RunningCatalogue,
    _registry: crate::reference::RunningRegistry,
    _facilitator: RunningFacilitator,
    /// The local SVM, when a Solana scenario runs.
    pub svm: Option<Svm>,
    anvil: Anvil,
    dir: LabDir,
}

impl Lab {
    pub async fn start() -> Result<Lab> {
        Lab::start_with(LabOptions::default()).await
    }

    pub async fn start_with(options: LabOptions) -> Result<Lab> {
        crate::install_crypto_provider();
        let started = Instant::now();
        let dir = LabDir::create()?;
        let anvil = Anvil::start().await.context("starting anvil")?;
        let rpc = anvil.rpc().context("connecting to anvil")?;
        let chain_id = anvil.chain_id();
        let accounts = anvil.accounts();
        let deployer = accounts[0].address;
        let facilitator_accounts = FacilitatorAccounts {
            honest: accounts[1].address,
            dishonest: accounts[2].address,
            attacker: accounts[5].address,
        };
        let pay_to = accounts[3].address;
        let other_wallet = accounts[4].address;

        let token = Token::deploy(&rpc, deployer, quote::TOKEN_NAME, quote::TOKEN_VERSION)
            .await
            .context("deploying the lab token")?;
        // Same code, another EIP-712 name: a 402 that declares "USDC" for it lies about the asset.
        let fake_token = Token::deploy(&rpc, deployer, "USDC Lookalike", quote::TOKEN_VERSION)
            .await
            .context("deploying the fake token")?;
        // The ERC-8004 registry, with an agent of nobody in particular first (so the operator's
        // is not agent 0) and then the operator's own (owned by payTo), which a scenario that
        // `declares_agent` names in its operator file.
        let agent_registry = AgentRegistry::deploy(&rpc, deployer)
            .await
            .context("deploying the agent registry")?;
        agent_registry
            .register(other_wallet, "https://elsewhere.lab.test/agent.json")
            .await
            .context("registering an agent")?;
        let agent = agent_registry
            .register(pay_to, "https://weather.lab.test/agent.json")
            .await
            .context("registering the operator's agent")?;

        // The payer is a fresh key (not a public dev key), funded with tokens and a little gas money
        // for the one approval the dishonest facilitator needs.
        let payer_signer = PrivateKeySigner::random();
        let payer = payer_signer.address();
        let payer_key_file = dir.path().join("payer.key");
        write_private_file(
            &payer_key_file,
            &format!("0x{}\n", hex::encode(payer_signer.to_bytes())),
        )?;
        drop(payer_signer);
        token
            .mint(payer, U256::from(options.payer_funds))
            .await
            .context("funding the payer")?;
        rpc.set_balance(payer, U256::from(10u128.pow(18))).await?;
        rpc.impersonate(payer).await?;
        token
            .approve(payer, facilitator_accounts.dishonest, U256::MAX)
            .await
            .context("granting the dishonest facilitator its allowance")?;

        let ca = TestCa::new()?;
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).context("writing the CA file")?;
        let mut tls_configs = BTreeMap::new();
        for lifetime in [
            Lifetime::Good,
            Lifetime::ExpiresInDays(5),
            Lifetime::Expired,
        ] {
            tls_configs.insert(format!("{lifetime:?}"), ca.leaf(lifetime)?.server_config()?);
        }

        let facilitator =
            facilitator::start(token.clone(), chain_id, facilitator_accounts.clone()).await?;
        let selected = selected_scenarios(&options)?;
        let svm = if selected
            .iter()
            .any(|s| matches!(s.quote, QuoteFault::Solana(_)))
        {
            Some(Svm::start().await.context("starting the local SVM")?)
        } else {
            None
        };
        let (solana_payer, solana_payer_key_file) = match &svm {
            Some(svm) => {
                let (payer, file) = solana_payer(svm, dir.path(), options.payer_funds)?;
                (Some(payer), Some(file))
            }
            None => (None, None),
        };
        let mut facilitators = FacilitatorClient::new(facilitator.base_urls.clone())?;
        if let Some(svm) = &svm {
            facilitators = facilitators.with_solana(svm.facilitator_urls.clone());
        }
        let shared = Arc::new(Shared {
            facilitators,
            token: token.clone(),
        });
        let solana = svm.as_ref().map(|s| s.accounts.clone());
        let mut endpoints = Vec::new();
        for mut scenario in selected {
            match &mut scenario.reliability {
                Reliability::SlowTtfb(ms) => *ms = options.slow_ms,
                Reliability::Flaky(share) => *share = options.flaky_share,
                _ => {}
            }
            let tls = match scenario.transport {
                Transport::Https(lifetime) => tls_configs.get(&format!("{lifetime:?}")).cloned(),
                Transport::Http => None,
            };
            let ctx = QuoteContext {
                chain_id,
                token: token.address(),
                fake_token: fake_token.address(),
                pay_to,
                other_wallet,
                resource: String::new(),
                solana: solana.clone(),
                agent: Some(agent.clone()),
            };
            let running = server::start(scenario.clone(), tls, ctx, shared.clone()).await?;
            endpoints.push(LabEndpoint {
                url: running.url.clone(),
                scenario,
                _server: running,
            });
        }

        let items = endpoints
            .iter()
            .filter_map(|e| {
                catalogue_item(
                    e,
                    chain_id,
                    token.address(),
                    fake_token.address(),
                    pay_to,
                    other_wallet,
                    solana.clone(),
                )
            })
            .collect();
        let catalogue = catalogue::start(items).await?;
        let registry = crate::reference::start_registry().await?;

        let variant_ctx = QuoteContext {
            chain_id,
            token: token.address(),
            fake_token: fake_token.address(),
            pay_to,
            other_wallet,
            resource: String::new(),
            solana,
            agent: Some(agent.clone()),
        };
        Ok(Lab {
            rpc,
            chain_id,
            token,
            fake_token,
            payer,
            pay_to,
            attacker: facilitator_accounts.attacker,
            facilitator_signer: facilitator_accounts.honest,
            other_wallet,
            agent_registry,
            agent,
            payer_key_file,
            solana_payer,
            solana_payer_key_file,
            ca_file,
            ca_pem: ca.pem().to_string(),
            facilitator_urls: facilitator
                .base_urls
                .iter()
                .map(|(k, v)| (k.name().to_string(), v.clone()))
                .collect(),
            catalogue_url: catalogue.url.clone(),
            npm_registry_url: registry.url.clone(),
            endpoints,
            startup_time: started.elapsed(),
            variants: Vec::new(),
            placed: Vec::new(),
            parts: VariantParts {
                ca: Arc::new(ca),
                tls_configs,
                ctx: variant_ctx,
                shared: shared.clone(),
            },
            _catalogue: catalogue,
            _registry: registry,
            _facilitator: facilitator,
            svm,
            anvil,
            dir,
        })
    }
}

/// An endpoint started from a scenario with a timeline of its own.
/// An endpoint started at a placement of its own (`spawn_placed`).
pub struct LabPlaced {
    pub name: String,
    pub url: String,
    _server: server::RunningEndpoint,
}

pub struct LabVariant {
    pub name: String,
    pub url: String,
    /// Change the timeline at any time; the endpoint reads it on every request.
    pub dynamic: Arc<Dynamic>,
    _server: server::RunningEndpoint,
}

struct VariantParts {
    ca: Arc<TestCa>,
    tls_configs: BTreeMap<String, Arc<rustls::ServerConfig>>,
    ctx: QuoteContext,
    shared: Arc<Shared>,
}

impl Lab {
    /// Starts one more endpoint behaving like scenario `base`, named `name`, whose price, payTo,
    /// notes, outages and failures follow `timeline` against `clock`. Returns its URL.
    pub async fn spawn_variant(
        &mut self,
        base: &str,
        name: &str,
        timeline: Timeline,
        clock: LabClock,
    ) -> Result<String> {
        let scenario =
            scenarios::by_name(base).with_context(|| format!("no scenario named {base:?}"))?;
        let tls = match scenario.transport {
            Transport::Https(lifetime) => self
                .parts
                .tls_configs
                .get(&format!("{lifetime:?}"))
                .cloned(),
            Transport::Http => None,
        };
        let dynamic = Arc::new(Dynamic {
            clock,
            timeline: std::sync::Mutex::new(timeline),
        });
        let running = server::start_with(
            scenario,
            tls,
            self.parts.ctx.clone(),
            self.parts.shared.clone(),
            Some(dynamic.clone()),
        )
        .await?;
        let url = running.url.clone();
        self.variants.push(LabVariant {
            name: name.to_string(),
            url: url.clone(),
            dynamic,
            _server: running,
        });
        Ok(url)
    }

    /// Starts one more endpoint behaving like scenario `base`, named `name`, listening at
    /// `placement.bind` (an HTTPS one presents a certificate that also names that address) and
    /// answering by source address as `placement` says: how the lab shows several vantages a
    /// regional outage or cloaking. Returns its URL.
    pub async fn spawn_placed(
        &mut self,
        base: &str,
        name: &str,
        placement: &server::Placement,
    ) -> Result<String> {
        let scenario =
            scenarios::by_name(base).with_context(|| format!("no scenario named {base:?}"))?;
        let tls = match scenario.transport {
            Transport::Https(lifetime) => Some(
                self.parts
                    .ca
                    .leaf_also_for(lifetime, &[placement.bind])?
                    .server_config()?,
            ),
            Transport::Http => None,
        };
        let running = server::start_placed(
            scenario,
            tls,
            self.parts.ctx.clone(),
            self.parts.shared.clone(),
            None,
            placement,
        )
        .await?;
        let url = running.url.clone();
        self.placed.push(LabPlaced {
            name: name.to_string(),
            url: url.clone(),
            _server: running,
        });
        Ok(url)
    }

    /// A variant by name.
    pub fn variant(&self, name: &str) -> Option<&LabVariant> {
        self.variants.iter().find(|v| v.name == name)
    }

    /// The running endpoint of a scenario.
    pub fn endpoint(&self, scenario: &str) -> Option<&LabEndpoint> {
        self.endpoints.iter().find(|e| e.scenario.name == scenario)
    }

    /// The PID of the lab's anvil (so tests can check it is gone after the lab).
    pub fn anvil_pid(&self) -> u32 {
        self.anvil.pid()
    }

    pub fn rpc_url(&self) -> &str {
        self.anvil.rpc_url()
    }

    /// The local SVM's JSON-RPC, when a Solana scenario runs.
    pub fn solana_rpc_url(&self) -> Option<&str> {
        self.svm.as_ref().map(|s| s.rpc_url.as_str())
    }

    /// The lab's directory (key file, CA file).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn manifest(&self) -> Manifest {
        Manifest {
            rpc: self.anvil.rpc_url().to_string(),
            solana_rpc: self.solana_rpc_url().map(str::to_string),
            chain_id: self.chain_id,
            token: self.token.address().to_checksum(None),
            fake_token: self.fake_token.address().to_checksum(None),
            payer: self.payer.to_checksum(None),
            payer_key_file: self.payer_key_file.clone(),
            solana_payer: self.solana_payer.clone(),
            solana_payer_key_file: self.solana_payer_key_file.clone(),
            ca_file: self.ca_file.clone(),
            catalogue: format!("{}/discovery/resources", self.catalogue_url),
            facilitators: self.facilitator_urls.clone(),
            endpoints: self
                .endpoints
                .iter()
                .map(|e| ManifestEndpoint {
                    scenario: e.scenario.name.to_string(),
                    summary: e.scenario.summary.to_string(),
                    url: e.url.clone(),
                    expect: e
                        .scenario
                        .expect
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                })
                .collect(),
        }
    }

    /// Start an MCP server of `kind` whose paid tool quotes as the `honest-v2` endpoint does (the
    /// lab's token, payTo and chain), its resource the tool's subject URL; a paid call is
    /// verified and settled through the lab's honest facilitator.
    pub async fn start_mcp(&self, kind: crate::mcp::McpKind) -> Result<crate::mcp::RunningMcp> {
        let quote = self.mcp_quote("")?;
        crate::mcp::start_paid(
            kind,
            move |resource| {
                let mut quote = quote;
                quote["resource"]["url"] = serde_json::json!(resource);
                quote
            },
            Some(self.parts.shared.facilitators.clone()),
        )
        .await
    }

    /// The PaymentRequired a lab MCP tool at `resource` quotes: the `honest-v2` endpoint's terms
    /// (the lab's token, payTo and chain).
    pub fn mcp_quote(&self, resource: &str) -> Result<serde_json::Value> {
        let scenario = scenarios::by_name("honest-v2").context("the honest-v2 scenario")?;
        let mut ctx = self.parts.ctx.clone();
        ctx.resource = resource.to_string();
        Ok(crate::quote::payment_required(&scenario, &ctx, 0))
    }

    /// Stop the chain only (the servers keep running): for tests of what happens when the RPC dies.
    pub fn stop_chain(&mut self) {
        self.anvil.stop();
    }

    /// Stop everything now (dropping the lab does the same).
    pub fn stop(self) {}
}

/// A fresh Solana payer: its key written as the Solana CLI writes one (a JSON array of the
/// seed and the public key, 0600), its USDC account on the lab's SVM holding `funds`.
fn solana_payer(svm: &Svm, dir: &Path, funds: u64) -> Result<(String, PathBuf)> {
    use solana_signer::Signer as _;
    let keypair = solana_keypair::Keypair::new();
    let file = dir.join("solana-payer.json");
    write_private_file(&file, &serde_json::to_string(&keypair.to_bytes().to_vec())?)?;
    let payer = keypair.pubkey().to_string();
    svm.fund_usdc(&payer, funds)
        .context("funding the Solana payer")?;
    Ok((payer, file))
}

fn selected_scenarios(options: &LabOptions) -> Result<Vec<Scenario>> {
    let all = scenarios::all();
    match &options.scenarios {
        None => Ok(all),
        Some(names) => names
            .iter()
            .map(|n| {
                all.iter()
                    .find(|s| s.name == n)
                    .cloned()
                    .with_context(|| format!("no scenario named {n:?}"))
            })
            .collect(),
    }
}

/// The catalogue's entry for an endpoint: what its first 402 quotes (or half the price for
/// `price-mismatch`), or nothing for `unlisted`.
fn catalogue_item(
    e: &LabEndpoint,
    chain_id: u64,
    token: Address,
    fake_token: Address,
    pay_to: Address,
    other_wallet: Address,
    solana: Option<SolanaAccounts>,
) -> Option<Value> {
    let s = &e.scenario;
    if s.listing == Listing::Unlisted {
        return None;
    }
    let ctx = QuoteContext {
        chain_id,
        token,
        fake_token,
        pay_to,
        other_wallet,
        resource: e.url.clone(),
        solana,
        agent: None,
    };
    let mut requirement = quote::requirement(s, &ctx, 0);
    if s.listing == Listing::DifferentPrice {
        let half = (quote::PRICE / 2).to_string();
        for key in ["amount", "maxAmountRequired"] {
            if requirement.get(key).is_some() {
                requirement[key] = Value::String(half.clone());
            }
        }
    }
    let version = match s.protocol {
        Protocol::V2 => 2,
        Protocol::V1 => 1,
    };
    Some(json!({
        "resource": e.url,
        "type": "http",
        "x402Version": version,
        "accepts": [requirement],
        "lastUpdated": "2026-11-01T00:00:00Z",
        "metadata": {"category": "weather", "provider": "Lab Weather Ltd", "scenario": s.name},
    }))
}

fn write_private_file(path: &Path, contents: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(contents.as_bytes())?;
    Ok(())
}

/// A private temporary directory, removed on drop.
struct LabDir(PathBuf);

impl LabDir {
    fn create() -> Result<LabDir> {
        use std::os::unix::fs::DirBuilderExt;
        let name = format!(
            "x402-lab-{}-{}",
            std::process::id(),
            hex::encode(rand::random::<[u8; 6]>())
        );
        let path = std::env::temp_dir().join(name);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(LabDir(path))
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for LabDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
