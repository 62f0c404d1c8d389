//! The lab's Solana: a local SVM (`litesvm`, which embeds the SPL Token, Token-2022, ATA and
//! Memo programs) behind a small JSON-RPC server of our own, answering the few methods a prober
//! and a client need, as a real node does: `getGenesisHash`, `getAccountInfo` and
//! `getMultipleAccounts` (base64), `getBalance`, `getLatestBlockhash`, `getHealth`, `getVersion`.
//!
//! It also answers what a payment needs (`simulateTransaction`, `sendTransaction`,
//! `getSignatureStatuses`, `getTransaction` in `jsonParsed` with token balances,
//! `getSignaturesForAddress`, `getBlockHeight`), and serves the lab's Solana facilitators
//! (`svm_facilitator.rs`) on the same port.
//!
//! It calls itself Solana devnet (its genesis hash is devnet's), and Circle's devnet USDC mint
//! exists at its real address with 6 decimals, so the lab's Solana 402s quote exactly what a real
//! devnet endpoint quotes. The accounts the scenarios need (a payee with an open USDC account, a
//! payee without one, a payee whose account is frozen, a lookalike mint) are written into the
//! SVM directly; their addresses come from the official `spl-associated-token-account-interface`
//! derivation, which checks the probe's own derivation against the reference.

use std::collections::BTreeMap;
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
use solana_transaction::versioned::VersionedTransaction;
use spl_associated_token_account_interface::address::get_associated_token_address_with_program_id;
use spl_token_interface::state::{Account as TokenAccount, AccountState, Mint};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::scenarios::FacilitatorKind;

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
    /// The Solana facilitators' base URLs, by behaviour (`{base}/verify`, `{base}/settle`).
    pub facilitator_urls: BTreeMap<FacilitatorKind, String>,
    chain: Arc<Mutex<Chain>>,
    tasks: JoinSet<()>,
}

/// The SVM and what the lab keeps beside it: the fee payer's key (the facilitator signs with
/// it), the attacker's payee, and every transaction that landed through the RPC or the
/// facilitators, with its token balances before and after (what `getTransaction` answers).
pub(crate) struct Chain {
    pub(crate) svm: LiteSVM,
    pub(crate) fee_payer: Keypair,
    /// Where the wrong-payee facilitator sends the money (its USDC account is open).
    pub(crate) attacker: Address,
    pub(crate) history: Vec<Landed>,
    /// The block height the chain is at (advanced by [`Svm::advance_blocks`]).
    pub(crate) block_height: u64,
}

/// Blocks a blockhash stays valid for, as on a real cluster.
pub const BLOCKHASH_VALID_BLOCKS: u64 = 150;

/// A transaction that landed (succeeded or failed), as `getTransaction` reports it.
#[derive(Debug, Clone)]
pub(crate) struct Landed {
    pub(crate) signatures: Vec<String>,
    pub(crate) slot: u64,
    pub(crate) err: Option<String>,
    /// (key, signer, writable) of each static account key.
    pub(crate) account_keys: Vec<(String, bool, bool)>,
    /// (account index, mint, owner, amount) of each token account before and after.
    pub(crate) pre: Vec<(usize, String, String, u64)>,
    pub(crate) post: Vec<(usize, String, String, u64)>,
    pub(crate) fee: u64,
}

impl Chain {
    /// Sends `tx` to the SVM and records it; returns its id (first signature) or the error.
    pub(crate) fn send(&mut self, tx: VersionedTransaction) -> std::result::Result<String, String> {
        let keys: Vec<Address> = tx.message.static_account_keys().to_vec();
        let header = *tx.message.header();
        let balances = |svm: &LiteSVM| -> Vec<(usize, String, String, u64)> {
            keys.iter()
                .enumerate()
                .filter_map(|(i, k)| {
                    let account = svm.get_account(k)?;
                    if account.owner != spl_token_interface::id() {
                        return None;
                    }
                    let t = TokenAccount::unpack(&account.data).ok()?;
                    Some((i, t.mint.to_string(), t.owner.to_string(), t.amount))
                })
                .collect()
        };
        let pre = balances(&self.svm);
        let signatures: Vec<String> = tx.signatures.iter().map(|s| s.to_string()).collect();
        let outcome = self.svm.send_transaction(tx);
        let (err, fee) = match &outcome {
            Ok(meta) => (None, meta.fee),
            Err(failed) => (Some(format!("{:?}", failed.err)), failed.meta.fee),
        };
        if let Err(failed) = &outcome
            && matches!(
                failed.err,
                solana_transaction_error::TransactionError::AlreadyProcessed
                    | solana_transaction_error::TransactionError::BlockhashNotFound
                    | solana_transaction_error::TransactionError::SignatureFailure
            )
        {
            // Never included: nothing to record.
            return Err(format!("{:?}", failed.err));
        }
        let post = balances(&self.svm);
        let n = keys.len();
        let signed = usize::from(header.num_required_signatures);
        let writable = |i: usize| {
            if i < signed {
                i < signed - usize::from(header.num_readonly_signed_accounts)
            } else {
                i < n - usize::from(header.num_readonly_unsigned_accounts)
            }
        };
        let account_keys = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.to_string(), i < signed, writable(i)))
            .collect();
        let id = signatures.first().cloned().unwrap_or_default();
        self.history.push(Landed {
            signatures,
            slot: self.block_height,
            err: err.clone(),
            account_keys,
            pre,
            post,
            fee,
        });
        // One block per landed transaction, as on a chain that keeps producing blocks.
        self.block_height += 1;
        match err {
            None => Ok(id),
            Some(e) => Err(e),
        }
    }
}

impl Svm {
    pub async fn start() -> Result<Svm> {
        // Signatures are not verified: the lab's dishonest facilitators alter what we signed and
        // land it anyway, as only a broken chain or a stolen key would allow, so that the probe
        // must see from the chain alone what moved. Honest transactions carry valid signatures
        // all the same (the official facilitator's test checks them).
        let mut svm = LiteSVM::new().with_sigverify(false);
        let token_program = spl_token_interface::id();
        let authority = Keypair::new().pubkey();
        let usdc: Address = DEVNET_USDC.parse().context("the devnet USDC mint")?;
        let lookalike = Keypair::new().pubkey();
        put_mint(&mut svm, usdc, 6, authority)?;
        put_mint(&mut svm, lookalike, 6, authority)?;
        let pay_to = Keypair::new().pubkey();
        let pay_to_without_account = Keypair::new().pubkey();
        let pay_to_frozen = Keypair::new().pubkey();
        let fee_payer_key = Keypair::new();
        let fee_payer = fee_payer_key.pubkey();
        svm.airdrop(&fee_payer, 10_000_000_000)
            .map_err(|e| anyhow::anyhow!("funding the fee payer: {:?}", e.err))?;
        let attacker = Keypair::new().pubkey();
        put_token_account(&mut svm, attacker, usdc, AccountState::Initialized, 0)?;
        put_token_account(
            &mut svm,
            pay_to,
            usdc,
            AccountState::Initialized,
            PAYEE_START,
        )?;
        put_token_account(
            &mut svm,
            pay_to,
            lookalike,
            AccountState::Initialized,
            PAYEE_START,
        )?;
        put_token_account(
            &mut svm,
            pay_to_frozen,
            usdc,
            AccountState::Frozen,
            PAYEE_START,
        )?;
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
        let chain = Arc::new(Mutex::new(Chain {
            svm,
            fee_payer: fee_payer_key,
            attacker,
            history: Vec::new(),
            block_height: 1,
        }));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the SVM's JSON-RPC")?;
        let base = format!("http://{}", listener.local_addr()?);
        let rpc_url = format!("{base}/");
        let facilitator_urls = FacilitatorKind::ALL
            .into_iter()
            .map(|k| (k, format!("{base}/facilitator/{}", k.name())))
            .collect();
        let app = axum::Router::new()
            .route("/", post(answer))
            .merge(crate::svm_facilitator::router())
            .with_state(chain.clone());
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Svm {
            rpc_url,
            accounts,
            facilitator_urls,
            chain,
            tasks,
        })
    }

    /// Opens `owner`'s USDC account holding `amount` (a payer for the tests and the demo) and
    /// gives `owner` lamports for rent; returns the account's address.
    pub fn fund_usdc(&self, owner: &str, amount: u64) -> Result<String> {
        let owner: Address = owner.parse().context("owner")?;
        let usdc: Address = DEVNET_USDC.parse().context("the devnet USDC mint")?;
        let mut chain = self.chain.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        let address = put_token_account(
            &mut chain.svm,
            owner,
            usdc,
            AccountState::Initialized,
            amount,
        )?;
        Ok(address.to_string())
    }

    /// The fee payer's keypair as the Solana CLI writes it (64 bytes: seed, public key): the
    /// official facilitator of the tests signs with it.
    pub fn fee_payer_keypair_bytes(&self) -> Result<Vec<u8>> {
        let chain = self.chain.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        Ok(chain.fee_payer.to_bytes().to_vec())
    }

    /// The current blockhash, base58, and the height it stays valid through.
    pub fn latest_blockhash(&self) -> Result<(String, u64)> {
        let chain = self.chain.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        Ok((
            chain.svm.latest_blockhash().to_string(),
            chain.block_height + BLOCKHASH_VALID_BLOCKS,
        ))
    }

    /// Moves the chain on by `blocks` (a new blockhash; the old ones expire once past their
    /// height), as a real cluster does while a reservation waits.
    pub fn advance_blocks(&self, blocks: u64) -> Result<()> {
        let mut chain = self.chain.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        chain.block_height += blocks;
        chain.svm.expire_blockhash();
        Ok(())
    }

    /// How many transactions landed (succeeded or failed) that moved tokens out of `account`.
    pub fn debits_from(&self, account: &str) -> Result<usize> {
        let chain = self.chain.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        Ok(chain
            .history
            .iter()
            .filter(|l| {
                l.pre.iter().any(|(i, _, _, before)| {
                    l.account_keys[*i].0 == account
                        && l.post
                            .iter()
                            .any(|(j, _, _, after)| j == i && after < before)
                })
            })
            .count())
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
            .svm
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
    amount: u64,
) -> Result<Address> {
    let address =
        get_associated_token_address_with_program_id(&owner, &mint, &spl_token_interface::id());
    let mut data = vec![0u8; TokenAccount::LEN];
    TokenAccount::pack(
        TokenAccount {
            mint,
            owner,
            amount,
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
async fn answer(State(chain): State<Arc<Mutex<Chain>>>, Json(request): Json<Value>) -> Json<Value> {
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let method = request.get("method").and_then(Value::as_str).unwrap_or("");
    let params = request.get("params").cloned().unwrap_or(json!([]));
    let outcome = match chain.lock() {
        Ok(mut chain) => call(&mut chain, method, &params),
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

fn call(chain: &mut Chain, method: &str, params: &Value) -> RpcOutcome {
    let context = json!({"slot": chain.block_height, "apiVersion": "2.2.0"});
    match method {
        "getLatestBlockhash" => Ok(json!({"context": context, "value": {
            "blockhash": chain.svm.latest_blockhash().to_string(),
            "lastValidBlockHeight": chain.block_height + BLOCKHASH_VALID_BLOCKS,
        }})),
        "getBlockHeight" | "getSlot" => Ok(json!(chain.block_height)),
        "simulateTransaction" => {
            let tx = crate::svm_facilitator::decode_param(params)?;
            Ok(
                json!({"context": context, "value": match chain.svm.simulate_transaction(tx) {
                    Ok(info) => json!({"err": null, "logs": info.meta.logs,
                        "unitsConsumed": info.meta.compute_units_consumed, "accounts": null}),
                    Err(failed) => json!({"err": format!("{:?}", failed.err),
                        "logs": failed.meta.logs, "accounts": null}),
                }}),
            )
        }
        "sendTransaction" => {
            let tx = crate::svm_facilitator::decode_param(params)?;
            chain
                .send(tx)
                .map(|id| json!(id))
                .map_err(|e| (-32002, format!("Transaction simulation failed: {e}")))
        }
        "getSignatureStatuses" => {
            let list = params
                .get(0)
                .and_then(Value::as_array)
                .ok_or((-32602, "expected a list of signatures".to_string()))?;
            let values: Vec<Value> = list
                .iter()
                .map(|s| {
                    let s = s.as_str().unwrap_or("");
                    chain
                        .history
                        .iter()
                        .find(|l| l.signatures.first().map(String::as_str) == Some(s))
                        .map(|l| {
                            json!({"slot": l.slot, "confirmations": null,
                            "err": l.err, "confirmationStatus": "finalized"})
                        })
                        .unwrap_or(Value::Null)
                })
                .collect();
            Ok(json!({"context": context, "value": values}))
        }
        "getTransaction" => {
            let s = params.get(0).and_then(Value::as_str).unwrap_or("");
            Ok(chain
                .history
                .iter()
                .find(|l| l.signatures.first().map(String::as_str) == Some(s))
                .map(transaction_json)
                .unwrap_or(Value::Null))
        }
        "getSignaturesForAddress" => {
            let address = params.get(0).and_then(Value::as_str).unwrap_or("");
            let limit = params
                .get(1)
                .and_then(|c| c.get("limit"))
                .and_then(Value::as_u64)
                .unwrap_or(1000) as usize;
            let until = params
                .get(1)
                .and_then(|c| c.get("until"))
                .and_then(Value::as_str);
            Ok(json!(
                chain
                    .history
                    .iter()
                    .rev()
                    .take_while(|l| l.signatures.first().map(String::as_str) != until)
                    .filter(|l| l.account_keys.iter().any(|(k, _, _)| k == address))
                    .take(limit)
                    .map(
                        |l| json!({"signature": l.signatures.first(), "slot": l.slot,
                    "err": l.err, "memo": null, "blockTime": null,
                    "confirmationStatus": "finalized"})
                    )
                    .collect::<Vec<_>>()
            ))
        }
        other => read_only(&chain.svm, other, params, context),
    }
}

/// `getTransaction` in `jsonParsed` as far as a payer's checks read it: the signatures, the
/// account keys, `meta.err`, the fee, the token balances before and after.
fn transaction_json(l: &Landed) -> Value {
    let balances = |list: &[(usize, String, String, u64)]| {
        list.iter()
            .map(|(i, mint, owner, amount)| {
                json!({"accountIndex": i, "mint": mint,
                "owner": owner, "programId": spl_token_interface::id().to_string(),
                "uiTokenAmount": {"amount": amount.to_string(), "decimals": 6}})
            })
            .collect::<Vec<_>>()
    };
    json!({
        "slot": l.slot,
        "blockTime": null,
        "version": 0,
        "meta": {
            "err": l.err,
            "fee": l.fee,
            "preTokenBalances": balances(&l.pre),
            "postTokenBalances": balances(&l.post),
            "innerInstructions": [],
            "logMessages": [],
        },
        "transaction": {
            "signatures": l.signatures,
            "message": {"accountKeys": l.account_keys.iter()
                .map(|(k, signer, writable)| json!({"pubkey": k, "signer": signer,
                    "writable": writable, "source": "transaction"}))
                .collect::<Vec<_>>()},
        },
    })
}

fn read_only(svm: &LiteSVM, method: &str, params: &Value, context: Value) -> RpcOutcome {
    match method {
        "getGenesisHash" => Ok(json!(DEVNET_GENESIS_HASH)),
        "getHealth" => Ok(json!("ok")),
        "getVersion" => Ok(json!({"solana-core": "litesvm-0.16.0", "feature-set": 0})),
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
