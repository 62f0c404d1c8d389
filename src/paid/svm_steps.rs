//! The paid call's decisions on Solana, pure, where they differ from EVM's (`steps.rs`): what our
//! Solana RPC must show before we pay (the quote's cluster, the mint as the allowlist prices it,
//! our token account holding the amount), and the record of what was sent. The rules shared with
//! EVM (choose, re-quote, never-sent, the settlement header) are `steps.rs`'s.

use base64::Engine as _;

use crate::evidence::chain::ChainRead;
use crate::evidence::free::SolanaAccount;
use crate::evidence::paid::{Refusal, RefusalCode};
use crate::evidence::svm::{SvmPaidChainSeen, SvmPaymentSent};
use crate::spend::{PricedSvm, SvmReservation};
use crate::x402::solana::{MintState, SolanaAddress, TokenAccount, TokenAccountState};

/// What the chain showed before paying, as the reservation needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SvmMint {
    /// The program that owns the mint (SPL Token or Token-2022).
    pub token_program: SolanaAddress,
    pub decimals: u8,
}

fn unavailable<E: std::fmt::Display>(what: &str, e: E) -> Refusal {
    Refusal::new(
        RefusalCode::RpcUnavailable,
        format!("{what}: {e}; a settlement could not be verified, so nothing is paid"),
    )
}

/// Step 4a: our Solana RPC serves the quote's cluster, and the mint is an initialised SPL mint
/// owned by the Token or Token-2022 program. A malformed answer is the RPC failing: no payment.
pub fn judge_svm_mint<E: std::fmt::Display>(
    priced: &PricedSvm,
    genesis: Result<String, E>,
    mint: Result<Option<SolanaAccount>, E>,
) -> Result<SvmMint, Refusal> {
    let genesis = genesis.map_err(|e| unavailable("reading the Solana RPC's genesis hash", e))?;
    let network = priced.quote.network;
    if !network.is_served_by(&genesis) {
        return Err(Refusal::new(
            RefusalCode::WrongChain,
            format!(
                "the Solana RPC serves the cluster of genesis {}, the quote is on {network}",
                genesis.chars().take(44).collect::<String>()
            ),
        ));
    }
    let invalid = |why: String| Refusal::new(RefusalCode::SvmTransferInvalid, why);
    let mint_text = priced.quote.mint.to_string();
    let account = mint
        .map_err(|e| unavailable("reading the mint", e))?
        .ok_or_else(|| invalid(format!("the mint {mint_text} does not exist on {network}")))?;
    let token_program = SolanaAddress::parse(&account.owner)
        .ok()
        .filter(|p| {
            *p == SolanaAddress::token_program() || *p == SolanaAddress::token_2022_program()
        })
        .ok_or_else(|| {
            invalid(format!(
                "the mint {mint_text} is owned by {}, not a token program",
                account.owner.chars().take(44).collect::<String>()
            ))
        })?;
    let state = base64::engine::general_purpose::STANDARD
        .decode(&account.data)
        .ok()
        .and_then(|data| MintState::read(&data))
        .filter(|m| m.is_initialized)
        .ok_or_else(|| {
            invalid(format!(
                "the account {mint_text} is not an initialised mint"
            ))
        })?;
    Ok(SvmMint {
        token_program,
        decimals: state.decimals,
    })
}

/// The account read as a token account of the quoted mint belonging to `owner`, when it is one.
fn token_account_of(
    account: &SolanaAccount,
    priced: &PricedSvm,
    owner: SolanaAddress,
) -> Option<TokenAccount> {
    base64::engine::general_purpose::STANDARD
        .decode(&account.data)
        .ok()
        .and_then(|data| TokenAccount::read(&data))
        .filter(|t| t.mint == priced.quote.mint && t.owner == owner)
}

/// Step 4b: our token account for the mint exists, holds that mint for us, is not frozen and
/// holds at least the quoted amount.
pub fn judge_svm_funds<E: std::fmt::Display>(
    priced: &PricedSvm,
    payer: SolanaAddress,
    source: Result<Option<SolanaAccount>, E>,
) -> Result<(), Refusal> {
    let poor = |why: String| Refusal::new(RefusalCode::InsufficientFunds, why);
    let account = source
        .map_err(|e| unavailable("reading our token account", e))?
        .ok_or_else(|| {
            poor(format!(
                "our wallet {payer} has no token account for the mint"
            ))
        })?;
    let Some(token) = token_account_of(&account, priced, payer) else {
        return Err(unavailable(
            "reading our token account",
            "the answer is not our token account of the mint",
        ));
    };
    if token.state != TokenAccountState::Initialized {
        return Err(poor(format!(
            "our token account is {:?}, not open",
            token.state
        )));
    }
    if token.amount < priced.quote.amount {
        return Err(poor(format!(
            "our token account holds {} atomic units, the quote asks {}",
            token.amount, priced.quote.amount
        )));
    }
    Ok(())
}

/// Step 4c: payTo's token account for the mint exists, holds that mint for payTo and is open:
/// facilitators refuse a payment that would create it, and a frozen one cannot receive, so a
/// payment to it could only fail or be altered.
pub fn judge_svm_destination<E: std::fmt::Display>(
    priced: &PricedSvm,
    destination: Result<Option<SolanaAccount>, E>,
) -> Result<(), Refusal> {
    let pay_to = priced.quote.pay_to;
    let invalid = |why: String| Refusal::new(RefusalCode::SvmTransferInvalid, why);
    let account = destination
        .map_err(|e| unavailable("reading payTo's token account", e))?
        .ok_or_else(|| {
            invalid(format!(
                "payTo {pay_to} has no token account for the mint: no facilitator settles a payment that creates it"
            ))
        })?;
    let token = token_account_of(&account, priced, pay_to)
        .ok_or_else(|| invalid(format!("payTo {pay_to}'s token account is not of the mint")))?;
    if token.state != TokenAccountState::Initialized {
        return Err(invalid(format!(
            "payTo {pay_to}'s token account is {:?}: it cannot receive",
            token.state
        )));
    }
    Ok(())
}

/// Step 5: the record of what is about to be sent on Solana (public once sent).
pub fn svm_payment_sent(
    reservation: &SvmReservation,
    signature: &[u8; 64],
    header_name: &str,
    header_value: &str,
    last_valid_block_height: u64,
    sent_at: i64,
) -> SvmPaymentSent {
    let t = reservation.transfer();
    SvmPaymentSent {
        reservation_id: reservation.id(),
        cost_usd: reservation.cost(),
        network: t.network.to_string(),
        payer: t.payer.to_string(),
        fee_payer: t.fee_payer.to_string(),
        mint: t.mint.to_string(),
        source: t.source.to_string(),
        destination: t.destination.to_string(),
        pay_to: t.pay_to.to_string(),
        amount: t.amount,
        memo: String::from_utf8_lossy(&t.memo).into_owned(),
        blockhash: bs58::encode(t.recent_blockhash).into_string(),
        last_valid_block_height,
        signature: bs58::encode(signature).into_string(),
        header_name: header_name.to_string(),
        header_value: header_value.to_string(),
        sent_at,
    }
}

/// The chain reads of a Solana payment before they are made.
pub fn svm_chain_before(rpc_url: &str, payment: &SvmPaymentSent) -> SvmPaidChainSeen {
    const UNREAD: &str = "not read yet";
    SvmPaidChainSeen {
        rpc_url: rpc_url.to_string(),
        our_signature: payment.signature.clone(),
        source: payment.source.clone(),
        destination: payment.destination.clone(),
        mint: payment.mint.clone(),
        amount: payment.amount,
        claimed: ChainRead::skipped(UNREAD),
        window: ChainRead::skipped(UNREAD),
    }
}

/// The signature a settlement names, when it is one (base58 of 64 bytes).
pub fn named_signature(transaction: Option<&str>) -> Option<&str> {
    let text = transaction?;
    (text.len() <= 88 && bs58::decode(text).into_vec().is_ok_and(|b| b.len() == 64)).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spend::{AllowedSvmAsset, PayPolicy, assess_svm};
    use crate::x402::parse::parse_payment_required;
    use crate::x402::solana::SolanaNetwork;

    const PAY_TO: &str = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin";
    const FEE_PAYER: &str = "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4";

    fn priced(amount: u64) -> PricedSvm {
        let mut policy = PayPolicy::new(
            "1".parse().unwrap(),
            "1".parse().unwrap(),
            "1".parse().unwrap(),
            Vec::new(),
        );
        policy.svm_allowlist = AllowedSvmAsset::canonical_usdc();
        let body = serde_json::json!({"x402Version": 2, "resource": {"url": "https://a.example/x"},
            "accepts": [{"scheme": "exact", "network": SolanaNetwork::Devnet.to_string(),
                "amount": amount.to_string(), "asset": SolanaNetwork::Devnet.usdc_mint(),
                "payTo": PAY_TO, "maxTimeoutSeconds": 60, "extra": {"feePayer": FEE_PAYER}}]});
        let parsed = parse_payment_required(402, &[], body.to_string().as_bytes());
        assess_svm(&policy, &parsed.required.unwrap().accepts[0]).unwrap()
    }

    fn account(owner: &str, data: Vec<u8>) -> Option<SolanaAccount> {
        Some(SolanaAccount {
            owner: owner.into(),
            lamports: 1,
            data_len: data.len(),
            data: base64::engine::general_purpose::STANDARD.encode(data),
        })
    }

    fn mint(decimals: u8, initialised: bool) -> Vec<u8> {
        let mut data = vec![0u8; 82];
        data[44] = decimals;
        data[45] = u8::from(initialised);
        data
    }

    fn token(mint: SolanaAddress, owner: SolanaAddress, amount: u64, state: u8) -> Vec<u8> {
        let mut data = vec![0u8; 165];
        data[..32].copy_from_slice(&mint.0);
        data[32..64].copy_from_slice(&owner.0);
        data[64..72].copy_from_slice(&amount.to_le_bytes());
        data[108] = state;
        data
    }

    type Read = Result<Option<SolanaAccount>, String>;

    #[test]
    fn the_rpc_must_serve_the_cluster_and_the_mint_must_be_a_token_mint() {
        let p = priced(10_000);
        let devnet = || Ok::<_, String>("EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG".to_string());
        let token_mint: Read = Ok(account(crate::x402::solana::TOKEN_PROGRAM, mint(6, true)));
        let got = judge_svm_mint(&p, devnet(), token_mint.clone()).unwrap();
        assert_eq!(got.decimals, 6);
        assert_eq!(got.token_program, SolanaAddress::token_program());
        let code = |r: Result<SvmMint, Refusal>| r.unwrap_err().code;
        let mainnet = Ok::<_, String>("5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d".to_string());
        assert_eq!(
            code(judge_svm_mint(&p, mainnet, token_mint.clone())),
            RefusalCode::WrongChain
        );
        assert_eq!(
            code(judge_svm_mint(&p, Err("down".into()), token_mint)),
            RefusalCode::RpcUnavailable
        );
        for bad in [
            Ok(None),
            Ok(account(FEE_PAYER, mint(6, true))),
            Ok(account(crate::x402::solana::TOKEN_PROGRAM, mint(6, false))),
            Ok(account(crate::x402::solana::TOKEN_PROGRAM, vec![1, 2, 3])),
        ] {
            assert_eq!(
                code(judge_svm_mint(&p, devnet(), bad)),
                RefusalCode::SvmTransferInvalid
            );
        }
        assert_eq!(
            code(judge_svm_mint(&p, devnet(), Err("timeout".into()))),
            RefusalCode::RpcUnavailable
        );
    }

    #[test]
    fn we_pay_only_from_an_open_account_holding_the_amount_to_an_open_account() {
        let p = priced(10_000);
        let us = SolanaAddress([7; 32]);
        let usdc = p.quote.mint;
        let ours = |amount, state| -> Read { Ok(account("x", token(usdc, us, amount, state))) };
        assert_eq!(judge_svm_funds(&p, us, ours(10_000, 1)), Ok(()));
        let code = |r: Result<(), Refusal>| r.unwrap_err().code;
        assert_eq!(
            code(judge_svm_funds(&p, us, ours(9_999, 1))),
            RefusalCode::InsufficientFunds
        );
        assert_eq!(
            code(judge_svm_funds(&p, us, ours(10_000, 2))),
            RefusalCode::InsufficientFunds
        );
        assert_eq!(
            code(judge_svm_funds(&p, us, Ok::<_, String>(None))),
            RefusalCode::InsufficientFunds
        );
        let someone_elses: Read = Ok(account(
            "x",
            token(usdc, SolanaAddress([8; 32]), 1 << 40, 1),
        ));
        assert_eq!(
            code(judge_svm_funds(&p, us, someone_elses)),
            RefusalCode::RpcUnavailable
        );
        assert_eq!(
            code(judge_svm_funds(&p, us, Err("down".to_string()))),
            RefusalCode::RpcUnavailable
        );

        let payee = p.quote.pay_to;
        let theirs = |state| -> Read { Ok(account("x", token(usdc, payee, 0, state))) };
        assert_eq!(judge_svm_destination(&p, theirs(1)), Ok(()));
        assert_eq!(
            code(judge_svm_destination(&p, theirs(2))),
            RefusalCode::SvmTransferInvalid
        );
        assert_eq!(
            code(judge_svm_destination(&p, Ok::<_, String>(None))),
            RefusalCode::SvmTransferInvalid
        );
        let other_mint: Read = Ok(account("x", token(us, payee, 0, 1)));
        assert_eq!(
            code(judge_svm_destination(&p, other_mint)),
            RefusalCode::SvmTransferInvalid
        );
    }

    #[test]
    fn only_a_base58_signature_of_64_bytes_is_named() {
        let signature = bs58::encode([3u8; 64]).into_string();
        assert_eq!(named_signature(Some(&signature)), Some(signature.as_str()));
        assert_eq!(named_signature(Some("0xabc")), None);
        assert_eq!(
            named_signature(Some(&bs58::encode([3u8; 32]).into_string())),
            None
        );
        assert_eq!(named_signature(None), None);
    }
}
