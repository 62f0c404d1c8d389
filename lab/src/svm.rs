//! The lab's Solana: a local SVM (`litesvm`, which embeds the SPL Token, Token-2022, ATA and
//! Memo programs) behind a small JSON-RPC server of our own, answering the few methods a prober
//! and a client need, as a real node does: `getGenesisHash`, `getAccountInfo` and
//! `getMultipleAccounts` (base64), `getBalance`, `getLatestBlockhash`, `getHealth`, `getVersion`.
//!
//! It calls itself Solana devnet (its genesis hash is devnet's), and Circle's devnet USDC mint
//! exists at its real address with 6 decimals, so the lab's Solana 402s quote exactly what a real
//! devnet endpoint quotes. The accounts the scenarios need (a payee with an open USDC account, a
//! payee without one, a payee whose account is frozen, a lookalike mint) are written into the
//! SVM directly; their addresses come from the official `spl-associated-token-account-interface`
//! derivation, which checks the probe's own derivation against the reference.

use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use axum::Json;
use axum::extract::State;
use axum::routing::post;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use litesvm::LiteSVM;
use serde_json::{Value, json};
use solana_account::Account;
use solana_address::Address;
use solana_keypair::Keypair;
use solana_program_option::COption;
use solana_program_pack::Pack;
use solana_signer::Signer;
use spl_associated_token_account_interface::address::get_associated_token_address_with_program_id;
use spl_token_interface::state::{Account as TokenAccount, AccountState, Mint};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// Solana devnet's genesis hash: the lab's SVM answers it, so `solana:EtWTRABZ...` is its CAIP-2 id.
pub const DEVNET_GENESIS_HASH: &str = "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG";
/// Solana devnet as x402 v2 names it.
pub const DEVNET_CAIP2: &str = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
/// Solana devnet as x402 v1 names it.
pub const DEVNET_V1: &str = "solana-devnet";
/// Circle's USDC mint on devnet.
pub const DEVNET_USDC: &str = "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU";
/// What each payee's open account holds at the start (units of 6 decimals).
const PAYEE_START: u64 = 5_000_000;

/// The Solana accounts the lab's scenarios quote, base58.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SolanaAccounts {
    pub usdc_mint: String,
    /// A mint of 6 decimals that is not USDC.
    pub lookalike_mint: String,
    /// A payee whose USDC account is open (and who also has one for the lookalike).
    pub pay_to: String,
    /// A payee with no USDC account at all.
    pub pay_to_without_account: String,
    /// A payee whose USDC account is frozen.
    pub pay_to_frozen: String,
    /// The fee payer the lab's 402s name (the facilitator's account).
    pub fee_payer: String,
}

/// A running local SVM and its JSON-RPC server. Dropping it stops the server.
pub struct Svm {
    pub rpc_url: String,
    pub accounts: SolanaAccounts,
    chain: Arc<Mutex<LiteSVM>>,
    tasks: JoinSet<()>,
}

impl Svm {
    pub async fn start() -> Result<Svm> {
        let mut svm = LiteSVM::new();
        let token_program = spl_token_interface::id();
        let authority = Keypair::new().pubkey();
        let usdc: Address = DEVNET_USDC.parse().context("the devnet USDC mint")?;
        let lookalike = Keypair::new().pubkey();
        put_mint(&mut svm, usdc, 6, authority)?;
        put_mint(&mut svm, lookalike, 6, authority)?;
        let pay_to = Keypair::new().pubkey();
        let pay_to_without_account = Keypair::new().pubkey();
        let pay_to_frozen = Keypair::new().pubkey();
        let fee_payer = Keypair::new().pubkey();
        svm.airdrop(&fee_payer, 10_000_000_000)
            .map_err(|e| anyhow::anyhow!("funding the fee payer: {:?}", e.err))?;
        put_token_account(&mut svm, pay_to, usdc, AccountState::Initialized)?;
        put_token_account(&mut svm, pay_to, lookalike, AccountState::Initialized)?;
        put_token_account(&mut svm, pay_to_frozen, usdc, AccountState::Frozen)?;
        debug_assert!(
            svm.get_account(&get_associated_token_address_with_program_id(
                &pay_to_without_account,
                &usdc,
                &token_program
            ))
            .is_none()
        );
        let accounts = SolanaAccounts {
            usdc_mint: usdc.to_string(),
            lookalike_mint: lookalike.to_string(),
            pay_to: pay_to.to_string(),
            pay_to_without_account: pay_to_without_account.to_string(),
            pay_to_frozen: pay_to_frozen.to_string(),
            fee_payer: fee_payer.to_string(),
        };
        let chain = Arc::new(Mutex::new(svm));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the SVM's JSON-RPC")?;
        let rpc_url = format!("http://{}/", listener.local_addr()?);
        let app = axum::Router::new()
            .route("/", post(answer))
            .with_state(chain.clone());
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Svm {
            rpc_url,
            accounts,
            chain,
            tasks,
        })
    }

    /// The associated token account of `owner` for `mint` under the SPL Token program, as the
    /// official interface crate derives it (base58 in, base58 out).
    pub fn reference_ata(owner: &str, mint: &str) -> Result<String> {
        let owner: Address = owner.parse().context("owner")?;
        let mint: Address = mint.parse().context("mint")?;
        Ok(
            get_associated_token_address_with_program_id(&owner, &mint, &spl_token_interface::id())
                .to_string(),
        )
    }

    /// The amount a token account holds, or `None` when it does not exist.
    pub fn token_balance(&self, owner: &str, mint: &str) -> Result<Option<u64>> {
        let ata: Address = Self::reference_ata(owner, mint)?.parse()?;
        let chain = self.chain.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        Ok(chain
            .get_account(&ata)
            .and_then(|a| TokenAccount::unpack(&a.data).ok())
            .map(|a| a.amount))
    }

    /// Stop answering JSON-RPC (for tests of what happens when our Solana RPC dies).
    pub fn stop_rpc(&mut self) {
        self.tasks.abort_all();
    }
}

fn put_mint(svm: &mut LiteSVM, address: Address, decimals: u8, authority: Address) -> Result<()> {
    let mut data = vec![0u8; Mint::LEN];
    Mint::pack(
        Mint {
            mint_authority: COption::Some(authority),
            supply: 1_000_000_000_000,
            decimals,
            is_initialized: true,
            freeze_authority: COption::Some(authority),
        },
        &mut data,
    )
    .map_err(|e| anyhow::anyhow!("packing a mint: {e}"))?;
    let account = Account {
        lamports: svm.minimum_balance_for_rent_exemption(Mint::LEN),
        data,
        owner: spl_token_interface::id(),
        executable: false,
        rent_epoch: 0,
    };
    svm.set_account(address, account)
        .map_err(|e| anyhow::anyhow!("writing a mint: {e:?}"))
}

fn put_token_account(
    svm: &mut LiteSVM,
    owner: Address,
    mint: Address,
    state: AccountState,
) -> Result<Address> {
    let address =
        get_associated_token_address_with_program_id(&owner, &mint, &spl_token_interface::id());
    let mut data = vec![0u8; TokenAccount::LEN];
    TokenAccount::pack(
        TokenAccount {
            mint,
            owner,
            amount: PAYEE_START,
            delegate: COption::None,
            state,
            is_native: COption::None,
            delegated_amount: 0,
            close_authority: COption::None,
        },
        &mut data,
    )
    .map_err(|e| anyhow::anyhow!("packing a token account: {e}"))?;
    let account = Account {
        lamports: svm.minimum_balance_for_rent_exemption(TokenAccount::LEN),
        data,
        owner: spl_token_interface::id(),
        executable: false,
        rent_epoch: 0,
    };
    svm.set_account(address, account)
        .map_err(|e| anyhow::anyhow!("writing a token account: {e:?}"))?;
    Ok(address)
}

/// One JSON-RPC request (no batches: the prober sends none).
async fn answer(
    State(chain): State<Arc<Mutex<LiteSVM>>>,
    Json(request): Json<Value>,
) -> Json<Value> {
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let method = request.get("method").and_then(Value::as_str).unwrap_or("");
    let params = request.get("params").cloned().unwrap_or(json!([]));
    let outcome = match chain.lock() {
        Ok(svm) => call(&svm, method, &params),
        Err(_) => Err((-32603, "the SVM is poisoned".to_string())),
    };
    Json(match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
    })
}

type RpcOutcome = std::result::Result<Value, (i64, String)>;

fn call(svm: &LiteSVM, method: &str, params: &Value) -> RpcOutcome {
    let context = json!({"slot": 1, "apiVersion": "2.2.0"});
    match method {
        "getGenesisHash" => Ok(json!(DEVNET_GENESIS_HASH)),
        "getHealth" => Ok(json!("ok")),
        "getVersion" => Ok(json!({"solana-core": "litesvm-0.16.0", "feature-set": 0})),
        "getLatestBlockhash" => Ok(json!({"context": context, "value": {
            "blockhash": svm.latest_blockhash().to_string(),
            "lastValidBlockHeight": 150,
        }})),
        "getBalance" => {
            let address = address_param(params, 0)?;
            Ok(json!({"context": context, "value": svm.get_balance(&address).unwrap_or(0)}))
        }
        "getAccountInfo" => {
            base64_only(params.get(1))?;
            let address = address_param(params, 0)?;
            Ok(json!({"context": context, "value": account_json(svm.get_account(&address))}))
        }
        "getMultipleAccounts" => {
            base64_only(params.get(1))?;
            let list = params
                .get(0)
                .and_then(Value::as_array)
                .ok_or((-32602, "expected a list of addresses".to_string()))?;
            let values = list
                .iter()
                .map(|a| {
                    let address = parse_address(a)?;
                    Ok(account_json(svm.get_account(&address)))
                })
                .collect::<std::result::Result<Vec<_>, (i64, String)>>()?;
            Ok(json!({"context": context, "value": values}))
        }
        _ => Err((-32601, format!("Method not found: {method}"))),
    }
}

fn base64_only(config: Option<&Value>) -> std::result::Result<(), (i64, String)> {
    match config
        .and_then(|c| c.get("encoding"))
        .and_then(Value::as_str)
    {
        None | Some("base64") => Ok(()),
        Some(other) => Err((
            -32602,
            format!("this lab node answers base64 only, not {other}"),
        )),
    }
}

fn address_param(params: &Value, at: usize) -> std::result::Result<Address, (i64, String)> {
    parse_address(params.get(at).unwrap_or(&Value::Null))
}

fn parse_address(v: &Value) -> std::result::Result<Address, (i64, String)> {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .ok_or((-32602, format!("Invalid param: not an address: {v}")))
}

fn account_json(account: Option<Account>) -> Value {
    match account {
        None => Value::Null,
        Some(a) => json!({
            "data": [STANDARD.encode(&a.data), "base64"],
            "executable": a.executable,
            "lamports": a.lamports,
            "owner": a.owner.to_string(),
            "rentEpoch": a.rent_epoch,
            "space": a.data.len(),
        }),
    }
}
