//! What a Solana paid call's chain reads establish, pure: the transactions that took money from
//! our token account, the one that carries our signature, and the verdicts of C6, H5, H6 and H7
//! by the same rules as on EVM (`checks::paid`): the settlement names a transaction that is on
//! chain, succeeded and took from us (C6); exactly the quote left us (H5); all of it reached
//! payTo's account (H6); one payment, one debit (H7). Money facts come from the token balances
//! our RPC reports around each transaction, never from the endpoint's word. A read that failed
//! makes a check `unmeasured`, never `fail`.

use serde_json::json;

use crate::evidence::Conclusion;
use crate::evidence::chain::ChainRead;
use crate::evidence::svm::{SvmPaidChainSeen, SvmTransactionSeen};

/// A successful transaction that lowered our token account's balance of the mint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SvmDebit {
    pub id: String,
    /// It carries our signature: the payment we signed (whatever the facilitator did to it).
    pub ours: bool,
    /// What left our account, atomic units.
    pub amount: u64,
    /// Every account of the mint credited in it, with how much.
    pub credits: Vec<(String, u64)>,
}

impl SvmDebit {
    fn detail(&self) -> serde_json::Value {
        json!({"transaction": self.id, "ours": self.ours, "amount": self.amount.to_string(),
            "credits": self.credits.iter().map(|(a, v)| json!({"account": a, "amount": v.to_string()}))
                .collect::<Vec<_>>()})
    }
}

fn debit_of(seen: &SvmPaidChainSeen, tx: &SvmTransactionSeen) -> Option<SvmDebit> {
    if tx.err.is_some() {
        return None;
    }
    let change = tx.change(&seen.source, &seen.mint);
    (change < 0).then(|| SvmDebit {
        id: tx.id().to_string(),
        ours: tx.signatures.contains(&seen.our_signature),
        amount: u64::try_from(-change).unwrap_or(u64::MAX),
        credits: tx.credits(&seen.mint),
    })
}

/// Every debit of our token account in the call's window, oldest first.
pub fn debits(seen: &SvmPaidChainSeen) -> Result<Vec<SvmDebit>, String> {
    match &seen.window {
        ChainRead::Read { value } => Ok(value
            .iter()
            .rev()
            .filter_map(|tx| debit_of(seen, tx))
            .collect()),
        other => Err(other.missing_because().unwrap_or("").to_string()),
    }
}

/// The charge: the debit that carries our signature, else the first debit of the window (a
/// transfer from us that nobody named), else none.
pub fn charge(seen: &SvmPaidChainSeen) -> Result<Option<SvmDebit>, String> {
    let all = debits(seen)?;
    Ok(all.iter().find(|d| d.ours).or(all.first()).cloned())
}

fn charge_or(seen: &SvmPaidChainSeen) -> Result<SvmDebit, Conclusion> {
    match charge(seen) {
        Ok(Some(charge)) => Ok(charge),
        Ok(None) => Err(Conclusion::na(
            "we were not charged: no transaction took from our token account",
        )),
        Err(why) => Err(Conclusion::unmeasured(format!(
            "the chain could not be read: {why}"
        ))),
    }
}

/// C6: the settlement response names a transaction (a base58 signature of 64 bytes) that is on
/// chain, succeeded, and took from our token account; a reported failure is believed only when
/// the chain agrees nothing was taken.
pub fn c6(seen: &SvmPaidChainSeen, success: Option<bool>, transaction: Option<&str>) -> Conclusion {
    if success != Some(true) {
        return match charge(seen) {
            Ok(None) => Conclusion::pass(
                "the settlement reports failure and the chain agrees nothing was taken",
            ),
            Ok(Some(d)) => Conclusion::fail(format!(
                "the settlement reports failure but transaction {} took {} from us",
                d.id, d.amount
            ))
            .with_detail(d.detail()),
            Err(why) => Conclusion::unmeasured(format!(
                "the settlement reports failure; the chain could not confirm it: {why}"
            )),
        };
    }
    let named = transaction.unwrap_or("");
    let is_signature = bs58::decode(named)
        .into_vec()
        .is_ok_and(|bytes| bytes.len() == 64);
    if !is_signature {
        return Conclusion::fail(format!(
            "the settlement reports success without a transaction signature ({:?})",
            named.chars().take(100).collect::<String>()
        ));
    }
    let tx = match &seen.claimed {
        ChainRead::Read { value: Some(tx) } => tx,
        ChainRead::Read { value: None } => {
            return Conclusion::fail(format!(
                "the settlement names transaction {named}, which the chain does not know"
            ));
        }
        other => {
            return Conclusion::unmeasured(format!(
                "the named transaction could not be looked up: {}",
                other.missing_because().unwrap_or("")
            ));
        }
    };
    if let Some(err) = &tx.err {
        return Conclusion::fail(format!(
            "transaction {named} (slot {}) failed: {err}",
            tx.slot
        ));
    }
    match debit_of(seen, tx) {
        None => Conclusion::fail(format!(
            "transaction {named} (slot {}) takes nothing from our token account",
            tx.slot
        )),
        Some(d) => Conclusion::pass(format!(
            "the settlement names transaction {named}: slot {}, succeeded, {} from our token account",
            tx.slot, d.amount
        ))
        .with_detail(d.detail()),
    }
}

/// H5: what left our token account equals the quote.
pub fn h5(seen: &SvmPaidChainSeen) -> Conclusion {
    let charge = match charge_or(seen) {
        Ok(c) => c,
        Err(c) => return c,
    };
    let text = format!(
        "transaction {} took {} from our token account; the quote was {}",
        charge.id, charge.amount, seen.amount
    );
    let c = if charge.amount == seen.amount {
        Conclusion::pass(text)
    } else {
        Conclusion::fail(text)
    };
    c.with_detail(charge.detail())
}

/// H6: everything the charge credited went to payTo's token account of the quoted mint.
pub fn h6(seen: &SvmPaidChainSeen) -> Conclusion {
    let charge = match charge_or(seen) {
        Ok(c) => c,
        Err(c) => return c,
    };
    let wrong: Vec<String> = charge
        .credits
        .iter()
        .filter(|(account, _)| *account != seen.destination)
        .map(|(account, v)| format!("{v} to {account}"))
        .collect();
    let c = if wrong.is_empty() && !charge.credits.is_empty() {
        Conclusion::pass(format!(
            "transaction {} paid {} (payTo's account) in {}",
            charge.id, seen.destination, seen.mint
        ))
    } else if wrong.is_empty() {
        Conclusion::fail(format!(
            "transaction {} took from us and credited no account of {}",
            charge.id, seen.mint
        ))
    } else {
        Conclusion::fail(format!(
            "payTo's account is {}, but transaction {} moved {}",
            seen.destination,
            charge.id,
            wrong.join("; ")
        ))
    };
    c.with_detail(charge.detail())
}

/// H7: one payment, one debit of our token account in the window.
pub fn h7(seen: &SvmPaidChainSeen) -> Conclusion {
    let all = match debits(seen) {
        Ok(all) => all,
        Err(why) => return Conclusion::unmeasured(format!("the chain could not be read: {why}")),
    };
    let detail = json!({"debits": all.iter().map(SvmDebit::detail).collect::<Vec<_>>()});
    match all.len() {
        0 => Conclusion::na("we were not charged: no transaction took from our token account"),
        1 => Conclusion::pass(format!(
            "one transaction ({}) took from our token account for one payment",
            all[0].id
        ))
        .with_detail(detail),
        n => Conclusion::fail(format!(
            "{n} transactions took from our token account for one payment: a second pull"
        ))
        .with_detail(detail),
    }
}

/// What the chain says of an open Solana reservation, for reconciliation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SvmReconciled {
    /// The transaction carrying our signature landed and succeeded: money moved.
    Settled { transaction_id: String, why: String },
    /// It provably never can move money.
    Released(String),
    /// Not known yet.
    Open(String),
}

/// The fate of an open Solana reservation. `signature`: ours, when it was committed (it is
/// committed before anything is sent, so without it nothing was sent); `landed`: the transaction
/// carrying it among those that touched our token account, when one did; `block_height`: the
/// chain's now, against the blockhash's `last_valid_block_height`. Pure.
pub fn reconcile_verdict(
    signature: Option<&str>,
    landed: Option<&SvmTransactionSeen>,
    block_height: u64,
    last_valid_block_height: u64,
) -> SvmReconciled {
    if signature.is_none() {
        return SvmReconciled::Released(
            "never sent: no signature was committed, so none left this process".into(),
        );
    }
    match landed {
        Some(tx) if tx.err.is_none() => SvmReconciled::Settled {
            transaction_id: tx.id().to_string(),
            why: format!("our signed transfer landed in transaction {}", tx.id()),
        },
        Some(tx) => SvmReconciled::Released(format!(
            "our transfer landed in transaction {} and failed: nothing moved",
            tx.id()
        )),
        None if block_height > last_valid_block_height => SvmReconciled::Released(format!(
            "not on chain at block height {block_height}, past its blockhash's last valid height \
             {last_valid_block_height}: it can never land"
        )),
        None => SvmReconciled::Open(format!(
            "not on chain yet; its blockhash is valid until height {last_valid_block_height}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::Outcome;
    use crate::evidence::svm::SvmTokenBalance;

    const US: &str = "Source1111111111111111111111111111111111111";
    const PAYEE: &str = "Dest11111111111111111111111111111111111111";
    const MINT: &str = "Mint11111111111111111111111111111111111111";

    fn tx(id: &str, ours: bool, moves: &[(&str, i64)]) -> SvmTransactionSeen {
        let balance = |account: &str, amount: u64| SvmTokenBalance {
            account: account.into(),
            mint: MINT.into(),
            owner: None,
            amount,
        };
        SvmTransactionSeen {
            signatures: if ours {
                vec![id.into(), "OurSig".into()]
            } else {
                vec![id.into()]
            },
            slot: 7,
            err: None,
            pre: moves.iter().map(|(a, _)| balance(a, 1_000)).collect(),
            post: moves
                .iter()
                .map(|(a, d)| balance(a, (1_000 + d) as u64))
                .collect(),
        }
    }

    fn seen(window: Vec<SvmTransactionSeen>) -> SvmPaidChainSeen {
        SvmPaidChainSeen {
            rpc_url: String::new(),
            our_signature: "OurSig".into(),
            source: US.into(),
            destination: PAYEE.into(),
            mint: MINT.into(),
            amount: 10,
            claimed: ChainRead::Read {
                value: window.first().cloned(),
            },
            window: ChainRead::Read { value: window },
        }
    }

    #[test]
    fn money_verdicts_read_the_balances() {
        let honest = seen(vec![tx("A", true, &[(US, -10), (PAYEE, 10)])]);
        for c in [h5(&honest), h6(&honest), h7(&honest)] {
            assert_eq!(c.outcome, Outcome::Pass, "{}", c.evidence);
        }
        let over = seen(vec![tx("A", true, &[(US, -30), (PAYEE, 30)])]);
        assert_eq!(h5(&over).outcome, Outcome::Fail);
        assert_eq!(h6(&over).outcome, Outcome::Pass);
        let elsewhere = seen(vec![tx("A", true, &[(US, -10), ("Thief", 10)])]);
        assert_eq!(h5(&elsewhere).outcome, Outcome::Pass);
        assert_eq!(h6(&elsewhere).outcome, Outcome::Fail);
        let twice = seen(vec![
            tx("B", false, &[(US, -10), (PAYEE, 10)]),
            tx("A", true, &[(US, -10), (PAYEE, 10)]),
        ]);
        assert_eq!(h5(&twice).outcome, Outcome::Pass, "the charge is ours");
        assert_eq!(h7(&twice).outcome, Outcome::Fail);
        let nothing = seen(vec![]);
        assert_eq!(h5(&nothing).outcome, Outcome::Na);
        let mut unread = seen(vec![]);
        unread.window = ChainRead::Failed {
            error: "down".into(),
        };
        for c in [h5(&unread), h6(&unread), h7(&unread)] {
            assert_eq!(c.outcome, Outcome::Unmeasured, "{}", c.evidence);
        }
    }

    #[test]
    fn the_settlement_must_name_a_landed_transaction_that_took_from_us() {
        let sig = bs58::encode([1u8; 64]).into_string();
        let honest = seen(vec![tx("A", true, &[(US, -10), (PAYEE, 10)])]);
        assert_eq!(c6(&honest, Some(true), Some(&sig)).outcome, Outcome::Pass);
        assert_eq!(
            c6(&honest, Some(true), Some("0xabc")).outcome,
            Outcome::Fail
        );
        let mut unknown = honest.clone();
        unknown.claimed = ChainRead::Read { value: None };
        assert_eq!(c6(&unknown, Some(true), Some(&sig)).outcome, Outcome::Fail);
        assert_eq!(c6(&seen(vec![]), Some(false), None).outcome, Outcome::Pass);
        assert_eq!(c6(&honest, Some(false), None).outcome, Outcome::Fail);
    }
}
