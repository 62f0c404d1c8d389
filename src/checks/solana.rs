//! C3 of a Solana entry, pure: is the mint the cluster's USDC, is it a real SPL mint of 6
//! decimals, and can an agent pay the payTo at all (its associated token account for the mint
//! exists, is initialised, holds that mint, belongs to payTo and is not frozen)? Judged from what
//! the fixed Solana RPC answered ([`SolanaSeen`]); the ATA is derived here again from the entry
//! and the mint's owner program, never taken from the observation.
//!
//! Decisions:
//! - The mint's canonicality is judged here, as on EVM: the mint must be Circle's USDC of the
//!   entry's cluster (Solana mints the operator declares are not read yet).
//! - A missing payout account fails: facilitators refuse a payment that creates it, so no agent
//!   can pay until the payee creates it. The finding says how.
//! - Our RPC failing, serving another cluster, or not reaching an account is `unmeasured`.

use base64::Engine as _;
use serde_json::json;

use crate::evidence::Conclusion;
use crate::evidence::chain::ChainRead;
use crate::evidence::free::{SolanaAccount, SolanaSeen};
use crate::x402::solana::{
    MintState, SolanaAddress, SolanaNetwork, TOKEN_2022_PROGRAM, TOKEN_PROGRAM, TokenAccount,
    TokenAccountState, USDC_DECIMALS,
};
use crate::x402::types::{Deviation, Requirement};

/// C3 of one Solana entry.
pub fn c3_solana(requirement: &Requirement, seen: &SolanaSeen) -> Conclusion {
    let index = requirement.index;
    let at = |field: &str| format!("accepts[{index}].{field}");
    let Some(network) = requirement
        .network
        .as_deref()
        .and_then(SolanaNetwork::from_network)
    else {
        return Conclusion::unmeasured(format!(
            "accepts[{index}] names no Solana cluster this tool reads (C2 says why)"
        ));
    };
    let genesis_hash = match seen {
        SolanaSeen::NoRpc => {
            return Conclusion::unmeasured(
                "no Solana RPC configured (--solana-rpc), so the mint was not read",
            );
        }
        SolanaSeen::RpcDown { error, .. } => {
            return Conclusion::unmeasured(format!("the Solana RPC is unavailable: {error}"));
        }
        SolanaSeen::Read { genesis_hash, .. } => genesis_hash,
    };
    if !network.is_served_by(genesis_hash) {
        return Conclusion::unmeasured(format!(
            "accepts[{index}] is on {network}; our Solana RPC serves the cluster of genesis {genesis_hash}"
        ));
    }
    let parse = |text: Option<&String>| text.and_then(|t| SolanaAddress::parse(t).ok());
    let (Some(mint), Some(pay_to)) = (
        parse(requirement.asset.as_ref()),
        parse(requirement.pay_to.as_ref()),
    ) else {
        let problems = vec![Deviation::new(
            at("asset.not_address"),
            "the mint or payTo is not a Solana address, so no account can be read (C2 says which)",
        )];
        return fail(&problems, json!({}));
    };
    let mut problems = Vec::new();
    let canonical = mint.to_string() == network.usdc_mint();
    if !canonical {
        problems.push(Deviation::new(
            at("asset.not_recognised"),
            format!(
                "{mint} is not the USDC mint of {} ({})",
                network.v1_name(),
                network.usdc_mint()
            ),
        ));
    }
    let mut detail = json!({
        "network": network.to_string(),
        "mint": mint.to_string(),
        "canonical_usdc": canonical,
    });

    // The mint.
    let mint_account = match read_of(seen, &mint) {
        Err(why) => {
            return unmeasured_unless(
                problems,
                detail,
                format!("accepts[{index}]: the mint {why}"),
            );
        }
        Ok(None) => {
            problems.push(Deviation::new(
                at("asset.no_account"),
                format!(
                    "no account exists at the mint {mint} on {}",
                    network.v1_name()
                ),
            ));
            return fail(&problems, detail);
        }
        Ok(Some(account)) => account,
    };
    let program = match token_program(&mint_account.owner) {
        Some(program) => program,
        None => {
            problems.push(Deviation::new(
                at("asset.not_token_mint"),
                format!(
                    "the account at {mint} is owned by {}, neither the Token nor the Token-2022 program",
                    mint_account.owner
                ),
            ));
            return fail(&problems, detail);
        }
    };
    detail["token_program"] = json!(mint_account.owner);
    match data_of(mint_account).as_deref().and_then(MintState::read) {
        Some(state) if state.is_initialized => {
            detail["decimals"] = json!(state.decimals);
            if state.decimals != USDC_DECIMALS {
                problems.push(Deviation::new(
                    at("asset.decimals"),
                    format!(
                        "the mint has {} decimals, not {USDC_DECIMALS}: the quote's atomic units would mean another price",
                        state.decimals
                    ),
                ));
            }
        }
        _ => {
            problems.push(Deviation::new(
                at("asset.not_token_mint"),
                format!("the account at {mint} is not an initialised SPL mint"),
            ));
            return fail(&problems, detail);
        }
    }

    // The payout account agents pay into.
    let Some(ata) = SolanaAddress::associated_token_account(&pay_to, &mint, &program) else {
        problems.push(Deviation::new(
            at("payTo.ata_underivable"),
            "payTo has no associated token account address for the mint",
        ));
        return fail(&problems, detail);
    };
    detail["pay_to_ata"] = json!(ata.to_string());
    match read_of(seen, &ata) {
        Err(why) => {
            return unmeasured_unless(
                problems,
                detail,
                format!("accepts[{index}]: payTo's token account {why}"),
            );
        }
        Ok(None) => problems.push(Deviation::new(
            at("payTo.ata_missing"),
            format!(
                "payTo {pay_to} has no associated token account for {mint} ({ata}): no agent can pay, since facilitators refuse a payment that creates it. Fix: create it once, e.g. `spl-token create-account {mint} --owner {pay_to}`"
            ),
        )),
        Ok(Some(account)) => {
            problems.extend(payout_problems(&at, account, &pay_to, &mint, &program, &ata));
        }
    }
    if problems.is_empty() {
        Conclusion::pass(format!(
            "accepts[{index}]: {mint} is the USDC mint of {}, 6 decimals; payTo's token account {ata} is open",
            network.v1_name()
        ))
        .with_detail(with_deviations(detail, &[]))
    } else {
        fail(&problems, detail)
    }
}

/// What is wrong with the payTo's ATA as read.
fn payout_problems(
    at: &dyn Fn(&str) -> String,
    account: &SolanaAccount,
    pay_to: &SolanaAddress,
    mint: &SolanaAddress,
    program: &SolanaAddress,
    ata: &SolanaAddress,
) -> Vec<Deviation> {
    let mut problems = Vec::new();
    if token_program(&account.owner).as_ref() != Some(program) {
        problems.push(Deviation::new(
            at("payTo.ata_wrong_program"),
            format!(
                "the account {ata} is owned by {}, not the mint's program {program}",
                account.owner
            ),
        ));
        return problems;
    }
    let Some(read) = data_of(account).as_deref().and_then(TokenAccount::read) else {
        problems.push(Deviation::new(
            at("payTo.ata_not_token_account"),
            format!("the account {ata} is not an SPL token account"),
        ));
        return problems;
    };
    match read.state {
        TokenAccountState::Initialized => {}
        TokenAccountState::Frozen => problems.push(Deviation::new(
            at("payTo.ata_frozen"),
            format!(
                "payTo's token account {ata} is frozen: every transfer into it fails. Fix: ask the mint's freeze authority to thaw it, or be paid elsewhere"
            ),
        )),
        TokenAccountState::Uninitialized | TokenAccountState::Invalid(_) => {
            problems.push(Deviation::new(
                at("payTo.ata_uninitialized"),
                format!("payTo's token account {ata} is not initialised"),
            ))
        }
    }
    if read.mint != *mint {
        problems.push(Deviation::new(
            at("payTo.ata_wrong_mint"),
            format!("the account {ata} holds {}, not {mint}", read.mint),
        ));
    }
    if read.owner != *pay_to {
        problems.push(Deviation::new(
            at("payTo.ata_wrong_owner"),
            format!(
                "the account {ata} belongs to {}, not payTo {pay_to}",
                read.owner
            ),
        ));
    }
    problems
}

/// The account read at `address`: `Ok(None)` when the cluster has none, `Err(why)` when we
/// did not learn (not asked, our RPC failed).
fn read_of<'s>(
    seen: &'s SolanaSeen,
    address: &SolanaAddress,
) -> Result<Option<&'s SolanaAccount>, String> {
    match seen.account(&address.to_string()) {
        None => Err(format!(
            "{address} was not read (the run's budget of accounts was spent)"
        )),
        Some(ChainRead::Read { value }) => Ok(value.as_ref()),
        Some(other) => Err(format!(
            "{address} was not read: {}",
            other.missing_because().unwrap_or("no reason given")
        )),
    }
}

fn token_program(owner: &str) -> Option<SolanaAddress> {
    [TOKEN_PROGRAM, TOKEN_2022_PROGRAM]
        .contains(&owner)
        .then(|| SolanaAddress::parse(owner).ok())
        .flatten()
}

fn data_of(account: &SolanaAccount) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(&account.data)
        .ok()
}

fn with_deviations(mut detail: serde_json::Value, problems: &[Deviation]) -> serde_json::Value {
    detail["deviations"] = json!(
        problems
            .iter()
            .map(|d| json!({"code": d.code, "message": d.message}))
            .collect::<Vec<_>>()
    );
    detail
}

fn fail(problems: &[Deviation], detail: serde_json::Value) -> Conclusion {
    let codes: Vec<&str> = problems.iter().map(|d| d.code.as_str()).collect();
    Conclusion::fail(format!(
        "the mint or payTo's token account does not check out: {}",
        codes.join(", ")
    ))
    .with_detail(with_deviations(detail, problems))
}

/// Unmeasured with `why`, unless a problem was already found (then that fails).
fn unmeasured_unless(
    problems: Vec<Deviation>,
    detail: serde_json::Value,
    why: String,
) -> Conclusion {
    if problems.is_empty() {
        Conclusion::unmeasured(why).with_detail(with_deviations(detail, &[]))
    } else {
        fail(&problems, detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::Outcome;
    use crate::evidence::free::SolanaAccountSeen;
    use crate::x402::parse_payment_required;
    use crate::x402::solana::{MINT_LEN, TOKEN_ACCOUNT_LEN};

    const PAY_TO: &str = "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM";

    fn requirement(network: &str, mint: &str) -> Requirement {
        let body = json!({"x402Version": 1, "accepts": [{
            "scheme": "exact", "network": network, "maxAmountRequired": "1000",
            "resource": "https://x.example/", "payTo": PAY_TO, "maxTimeoutSeconds": 60,
            "asset": mint, "extra": {"feePayer": PAY_TO}
        }]});
        let parsed = parse_payment_required(402, &[], body.to_string().as_bytes());
        parsed.required.unwrap().accepts.remove(0)
    }

    fn mint_data(decimals: u8) -> Vec<u8> {
        let mut data = vec![0u8; MINT_LEN];
        data[44] = decimals;
        data[45] = 1;
        data
    }

    fn token_account_data(mint: &SolanaAddress, owner: &SolanaAddress, state: u8) -> Vec<u8> {
        let mut data = vec![0u8; TOKEN_ACCOUNT_LEN];
        data[..32].copy_from_slice(&mint.0);
        data[32..64].copy_from_slice(&owner.0);
        data[108] = state;
        data
    }

    fn account(owner: &str, data: &[u8]) -> Option<SolanaAccount> {
        Some(SolanaAccount {
            owner: owner.into(),
            lamports: 1,
            data_len: data.len(),
            data: base64::engine::general_purpose::STANDARD.encode(data),
        })
    }

    /// Devnet, its USDC mint as given, and payTo's account as given (None: not on chain).
    fn seen(mint: Option<SolanaAccount>, ata: Option<Option<SolanaAccount>>) -> SolanaSeen {
        let usdc = SolanaAddress::parse(SolanaNetwork::Devnet.usdc_mint()).unwrap();
        let pay_to = SolanaAddress::parse(PAY_TO).unwrap();
        let ata_address = SolanaAddress::associated_token_account(
            &pay_to,
            &usdc,
            &SolanaAddress::token_program(),
        )
        .unwrap();
        let mut accounts = vec![SolanaAccountSeen {
            address: usdc.to_string(),
            read: ChainRead::Read { value: mint },
        }];
        if let Some(ata) = ata {
            accounts.push(SolanaAccountSeen {
                address: ata_address.to_string(),
                read: ChainRead::Read { value: ata },
            });
        }
        SolanaSeen::Read {
            url: "http://127.0.0.1:1/".into(),
            genesis_hash: "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG".into(),
            accounts,
        }
    }

    fn codes(c: &Conclusion) -> Vec<String> {
        crate::checks::conformance::deviation_codes(c)
    }

    #[test]
    fn each_fault_of_the_mint_and_the_payout_account_is_named() {
        let usdc = SolanaAddress::parse(SolanaNetwork::Devnet.usdc_mint()).unwrap();
        let pay_to = SolanaAddress::parse(PAY_TO).unwrap();
        let req = requirement("solana-devnet", SolanaNetwork::Devnet.usdc_mint());
        let open = account(TOKEN_PROGRAM, &token_account_data(&usdc, &pay_to, 1));
        let honest = c3_solana(
            &req,
            &seen(account(TOKEN_PROGRAM, &mint_data(6)), Some(open.clone())),
        );
        assert_eq!(honest.outcome, Outcome::Pass, "{}", honest.evidence);

        let cases = [
            (seen(None, None), "accepts[0].asset.no_account"),
            (
                seen(account(TOKEN_PROGRAM, &mint_data(9)), Some(open.clone())),
                "accepts[0].asset.decimals",
            ),
            (
                seen(
                    account("11111111111111111111111111111111", &mint_data(6)),
                    None,
                ),
                "accepts[0].asset.not_token_mint",
            ),
            (
                seen(account(TOKEN_PROGRAM, &mint_data(6)[..40]), None),
                "accepts[0].asset.not_token_mint",
            ),
            (
                seen(account(TOKEN_PROGRAM, &mint_data(6)), Some(None)),
                "accepts[0].payTo.ata_missing",
            ),
            (
                seen(
                    account(TOKEN_PROGRAM, &mint_data(6)),
                    Some(account(
                        TOKEN_PROGRAM,
                        &token_account_data(&usdc, &pay_to, 2),
                    )),
                ),
                "accepts[0].payTo.ata_frozen",
            ),
            (
                seen(
                    account(TOKEN_PROGRAM, &mint_data(6)),
                    Some(account(
                        TOKEN_PROGRAM,
                        &token_account_data(&usdc, &pay_to, 0),
                    )),
                ),
                "accepts[0].payTo.ata_uninitialized",
            ),
            (
                seen(
                    account(TOKEN_PROGRAM, &mint_data(6)),
                    Some(account(
                        TOKEN_PROGRAM,
                        &token_account_data(&pay_to, &pay_to, 1),
                    )),
                ),
                "accepts[0].payTo.ata_wrong_mint",
            ),
            (
                seen(
                    account(TOKEN_PROGRAM, &mint_data(6)),
                    Some(account(TOKEN_PROGRAM, &token_account_data(&usdc, &usdc, 1))),
                ),
                "accepts[0].payTo.ata_wrong_owner",
            ),
            (
                seen(
                    account(TOKEN_PROGRAM, &mint_data(6)),
                    Some(account(
                        TOKEN_2022_PROGRAM,
                        &token_account_data(&usdc, &pay_to, 1),
                    )),
                ),
                "accepts[0].payTo.ata_wrong_program",
            ),
        ];
        for (seen, code) in cases {
            let c = c3_solana(&req, &seen);
            assert_eq!(c.outcome, Outcome::Fail, "{code}: {}", c.evidence);
            assert_eq!(codes(&c), vec![code.to_string()], "{}", c.evidence);
        }

        // A mint that is not the cluster's USDC fails, whatever else was read of it.
        let lookalike = c3_solana(
            &requirement("solana-devnet", PAY_TO),
            &seen(account(TOKEN_PROGRAM, &mint_data(6)), Some(open.clone())),
        );
        assert_eq!(lookalike.outcome, Outcome::Fail, "{}", lookalike.evidence);
        assert_eq!(codes(&lookalike), vec!["accepts[0].asset.not_recognised"]);
        // An entry on another cluster than our node's is not judged.
        let mainnet = requirement("solana", SolanaNetwork::Devnet.usdc_mint());
        let other_cluster = c3_solana(
            &mainnet,
            &seen(account(TOKEN_PROGRAM, &mint_data(6)), Some(open)),
        );
        assert_eq!(
            other_cluster.outcome,
            Outcome::Unmeasured,
            "{}",
            other_cluster.evidence
        );
    }

    #[test]
    fn what_we_did_not_learn_is_unmeasured() {
        let req = requirement("solana-devnet", SolanaNetwork::Devnet.usdc_mint());
        for seen in [
            SolanaSeen::NoRpc,
            SolanaSeen::RpcDown {
                url: "u".into(),
                error: "connection refused".into(),
            },
            // The mint's read failed on our side.
            SolanaSeen::Read {
                url: "u".into(),
                genesis_hash: "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG".into(),
                accounts: vec![SolanaAccountSeen {
                    address: SolanaNetwork::Devnet.usdc_mint().into(),
                    read: ChainRead::Failed {
                        error: "HTTP 502".into(),
                    },
                }],
            },
            // Mint fine, payTo's account never read (the budget).
            seen(account(TOKEN_PROGRAM, &mint_data(6)), None),
        ] {
            let c = c3_solana(&req, &seen);
            assert_eq!(c.outcome, Outcome::Unmeasured, "{seen:?}: {}", c.evidence);
        }
    }
}
