//! The payment of the exact SVM scheme, pure: the one transaction a paid call on Solana signs,
//! built from the quoted entry and nothing else, in the v0 wire format, byte for byte.
//!
//! What the scheme's reference client builds (and the reference facilitator verifies), in order:
//! set the compute-unit limit, set the compute-unit price, `TransferChecked` of exactly the quoted
//! amount of the quoted mint from our associated token account (ATA) to the ATA of (payTo, mint),
//! then a memo (`extra.memo` when quoted, 16 random bytes in hex otherwise). The fee payer is the
//! quote's `extra.feePayer`: account 0, the first signature, left empty for the facilitator to
//! add. Our signature covers the whole message (fee payer, blockhash, every instruction), so the
//! facilitator can add its own and nothing else: a transaction it would have to alter fails.
//!
//! Written here (compact-u16 lengths, the header, accounts ordered signer-writable first) rather
//! than taken from the Solana SDK: the service build stays small, and the lab decodes what we
//! build with the official crates and has the official `@x402/svm` facilitator verify it.

use std::fmt;

use super::solana::{MAX_MEMO_BYTES, SolanaAddress, SolanaNetwork};
use super::types::Requirement;

/// The compute budget program.
pub const COMPUTE_BUDGET_PROGRAM: &str = "ComputeBudget111111111111111111111111111111";
/// The SPL Memo program (v2), which the scheme's memo instruction calls.
pub const MEMO_PROGRAM: &str = "MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr";
/// The reference client's compute-unit limit.
pub const COMPUTE_UNIT_LIMIT: u32 = 20_000;
/// The reference client's compute-unit price, micro-lamports per unit (facilitators refuse more
/// than 5,000,000; the fee is the facilitator's, so we ask for the least).
pub const COMPUTE_UNIT_PRICE_MICRO_LAMPORTS: u64 = 1;
/// The v0 message's first byte (the version prefix bit and version 0).
const MESSAGE_V0_PREFIX: u8 = 0x80;
/// `SetComputeUnitLimit` and `SetComputeUnitPrice` in the compute budget program.
const SET_COMPUTE_UNIT_LIMIT: u8 = 2;
const SET_COMPUTE_UNIT_PRICE: u8 = 3;
/// `TransferChecked` in the SPL Token programs.
const TRANSFER_CHECKED: u8 = 12;

/// Why an entry cannot be paid on Solana as quoted. Nothing is signed when this is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SvmPaymentError {
    #[error("accepts[{index}].{field} is missing")]
    Missing { index: usize, field: &'static str },
    #[error("accepts[{index}].{field} {value:?} is not valid: {why}")]
    Invalid {
        index: usize,
        field: &'static str,
        value: String,
        why: String,
    },
}

/// Exactly what one Solana payment transfers: the quote in checked form, plus our side (the
/// payer, the blockhash our RPC gave, the memo).
#[derive(Clone, PartialEq, Eq)]
pub struct SvmTransfer {
    pub network: SolanaNetwork,
    /// The facilitator's account that pays the fees (`extra.feePayer`): account 0.
    pub fee_payer: SolanaAddress,
    /// Our wallet: the token authority, the second signer.
    pub payer: SolanaAddress,
    pub mint: SolanaAddress,
    /// The token program that owns the mint (SPL Token or Token-2022).
    pub token_program: SolanaAddress,
    /// Our ATA for the mint.
    pub source: SolanaAddress,
    /// The ATA of (payTo, mint).
    pub destination: SolanaAddress,
    pub pay_to: SolanaAddress,
    pub amount: u64,
    pub decimals: u8,
    pub memo: Vec<u8>,
    pub recent_blockhash: [u8; 32],
}

impl fmt::Debug for SvmTransfer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SvmTransfer")
            .field("network", &self.network)
            .field("fee_payer", &self.fee_payer)
            .field("payer", &self.payer)
            .field("mint", &self.mint)
            .field("destination", &self.destination)
            .field("amount", &self.amount)
            .field("memo", &String::from_utf8_lossy(&self.memo))
            .finish_non_exhaustive()
    }
}

/// The parts of a quoted Solana entry that a payment needs, checked: what the spend store
/// reserves and the transaction is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SvmQuote {
    pub network: SolanaNetwork,
    pub mint: SolanaAddress,
    pub pay_to: SolanaAddress,
    pub fee_payer: SolanaAddress,
    pub amount: u64,
    /// `extra.memo`, when quoted (at most 256 bytes).
    pub memo: Option<String>,
}

impl SvmQuote {
    /// Reads a Solana `accepts` entry strictly: a network of the three clusters, base58 mint,
    /// payTo and feePayer of 32 bytes, a decimal amount that fits 64 bits, a memo within bounds.
    pub fn read(requirement: &Requirement) -> Result<SvmQuote, SvmPaymentError> {
        let index = requirement.index;
        let missing = |field| SvmPaymentError::Missing { index, field };
        let invalid = |field, value: &str, why: String| SvmPaymentError::Invalid {
            index,
            field,
            value: value.chars().take(80).collect(),
            why,
        };
        let network_text = requirement.network.as_deref().ok_or(missing("network"))?;
        let network = SolanaNetwork::from_network(network_text).ok_or_else(|| {
            invalid(
                "network",
                network_text,
                "not Solana mainnet, devnet or testnet".into(),
            )
        })?;
        let address = |field, text: Option<&str>| {
            let text = text.ok_or(missing(field))?;
            SolanaAddress::parse(text).map_err(|e| invalid(field, text, e.to_string()))
        };
        let mint = address("asset", requirement.asset.as_deref())?;
        let pay_to = address("payTo", requirement.pay_to.as_deref())?;
        let fee_payer = address("extra.feePayer", requirement.extra_fee_payer.as_deref())?;
        let amount_text = requirement.amount.as_deref().ok_or(missing("amount"))?;
        let amount = amount_text
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| amount_text.parse::<u64>().ok())
            .flatten()
            .ok_or_else(|| {
                invalid(
                    "amount",
                    amount_text,
                    "not a decimal integer of 64 bits".into(),
                )
            })?;
        if amount == 0 {
            return Err(invalid("amount", amount_text, "zero".into()));
        }
        let memo = requirement.extra_memo.clone();
        if let Some(memo) = &memo
            && memo.len() > MAX_MEMO_BYTES
        {
            return Err(invalid(
                "extra.memo",
                memo,
                format!("{} bytes, more than {MAX_MEMO_BYTES}", memo.len()),
            ));
        }
        Ok(SvmQuote {
            network,
            mint,
            pay_to,
            fee_payer,
            amount,
            memo,
        })
    }
}

/// Why a transfer would be unsafe to sign, whatever the quote says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnsafeTransfer {
    #[error("the fee payer {0} is our own wallet: the facilitator would spend our lamports")]
    FeePayerIsUs(SolanaAddress),
    #[error("the fee payer {0} is an account of the transfer (the scheme forbids it)")]
    FeePayerInTransfer(SolanaAddress),
    #[error("payTo {0} is our own wallet")]
    PayToIsUs(SolanaAddress),
    #[error("no associated token account can be derived for {0}")]
    NoAssociatedAccount(SolanaAddress),
}

impl SvmTransfer {
    /// The transfer for `quote` from `payer`, the mint's `decimals` and `token_program` as our RPC
    /// read them, the `recent_blockhash` our RPC gave, and `memo_nonce` (16 random bytes, used
    /// only when the quote names no memo).
    pub fn new(
        quote: &SvmQuote,
        payer: SolanaAddress,
        token_program: SolanaAddress,
        decimals: u8,
        recent_blockhash: [u8; 32],
        memo_nonce: [u8; 16],
    ) -> Result<SvmTransfer, UnsafeTransfer> {
        let ata = |owner: &SolanaAddress| {
            SolanaAddress::associated_token_account(owner, &quote.mint, &token_program)
                .ok_or(UnsafeTransfer::NoAssociatedAccount(*owner))
        };
        let source = ata(&payer)?;
        let destination = ata(&quote.pay_to)?;
        if quote.fee_payer == payer {
            return Err(UnsafeTransfer::FeePayerIsUs(payer));
        }
        if quote.pay_to == payer {
            return Err(UnsafeTransfer::PayToIsUs(payer));
        }
        if [source, destination, quote.mint, token_program].contains(&quote.fee_payer) {
            return Err(UnsafeTransfer::FeePayerInTransfer(quote.fee_payer));
        }
        let memo = match &quote.memo {
            Some(memo) => memo.as_bytes().to_vec(),
            None => hex::encode(memo_nonce).into_bytes(),
        };
        Ok(SvmTransfer {
            network: quote.network,
            fee_payer: quote.fee_payer,
            payer,
            mint: quote.mint,
            token_program,
            source,
            destination,
            pay_to: quote.pay_to,
            amount: quote.amount,
            decimals,
            memo,
            recent_blockhash,
        })
    }

    /// The v0 message our signature covers: the header, the account keys (signers first, the
    /// fee payer at 0), the blockhash, four instructions, no address lookup tables.
    pub fn message(&self) -> Vec<u8> {
        let compute_budget = SolanaAddress::parse(COMPUTE_BUDGET_PROGRAM)
            .expect("a constant of this file is a Solana address");
        let memo_program = SolanaAddress::parse(MEMO_PROGRAM)
            .expect("a constant of this file is a Solana address");
        // Writable signer, read-only signer, writable non-signers, read-only non-signers.
        let keys = [
            self.fee_payer,
            self.payer,
            self.source,
            self.destination,
            self.mint,
            compute_budget,
            self.token_program,
            memo_program,
        ];
        const PAYER: u8 = 1;
        const SOURCE: u8 = 2;
        const DESTINATION: u8 = 3;
        const MINT: u8 = 4;
        const COMPUTE_BUDGET: u8 = 5;
        const TOKEN: u8 = 6;
        const MEMO: u8 = 7;

        let mut out = Vec::with_capacity(400 + self.memo.len());
        out.push(MESSAGE_V0_PREFIX);
        // 2 signatures required (fee payer, us), 1 of them read-only (us), 4 read-only unsigned.
        out.extend_from_slice(&[2, 1, 4]);
        compact_u16(&mut out, keys.len());
        for key in &keys {
            out.extend_from_slice(&key.0);
        }
        out.extend_from_slice(&self.recent_blockhash);

        let mut limit = vec![SET_COMPUTE_UNIT_LIMIT];
        limit.extend_from_slice(&COMPUTE_UNIT_LIMIT.to_le_bytes());
        let mut price = vec![SET_COMPUTE_UNIT_PRICE];
        price.extend_from_slice(&COMPUTE_UNIT_PRICE_MICRO_LAMPORTS.to_le_bytes());
        let mut transfer = vec![TRANSFER_CHECKED];
        transfer.extend_from_slice(&self.amount.to_le_bytes());
        transfer.push(self.decimals);
        let instructions: [(u8, &[u8], &[u8]); 4] = [
            (COMPUTE_BUDGET, &[], &limit),
            (COMPUTE_BUDGET, &[], &price),
            (TOKEN, &[SOURCE, MINT, DESTINATION, PAYER], &transfer),
            (MEMO, &[], &self.memo),
        ];
        compact_u16(&mut out, instructions.len());
        for (program, accounts, data) in instructions {
            out.push(program);
            compact_u16(&mut out, accounts.len());
            out.extend_from_slice(accounts);
            compact_u16(&mut out, data.len());
            out.extend_from_slice(data);
        }
        // No address lookup tables.
        compact_u16(&mut out, 0);
        out
    }
}

/// The wire transaction: two signature slots (the fee payer's left zero for the facilitator,
/// ours second) and the message.
pub fn partially_signed_transaction(message: &[u8], our_signature: &[u8; 64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 128 + message.len());
    compact_u16(&mut out, 2);
    out.extend_from_slice(&[0u8; 64]);
    out.extend_from_slice(our_signature);
    out.extend_from_slice(message);
    out
}

/// Solana's compact-u16 (`ShortU16`): 7 bits per byte, low bits first, high bit = more follows.
fn compact_u16(out: &mut Vec<u8>, value: usize) {
    // Every length written here is far below 2^16 (accounts, instructions, a memo of 256 bytes).
    let mut rest = value as u16;
    loop {
        let low = (rest & 0x7f) as u8;
        rest >>= 7;
        if rest == 0 {
            out.push(low);
            return;
        }
        out.push(low | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn requirement(entry: serde_json::Value) -> Requirement {
        let body = json!({"x402Version": 2, "accepts": [entry],
            "resource": {"url": "https://a.example/x"}});
        let parsed =
            crate::x402::parse::parse_payment_required(402, &[], body.to_string().as_bytes());
        parsed.required.expect("a PaymentRequired").accepts[0].clone()
    }

    fn entry() -> serde_json::Value {
        json!({"scheme": "exact", "network": "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1",
            "amount": "10000", "asset": SolanaNetwork::Devnet.usdc_mint(),
            "payTo": "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM", "maxTimeoutSeconds": 60,
            "extra": {"feePayer": "2wmVCSfPxGPjrnMMn7rchp4uaeoTqN39mXFC2zhPdri9"}})
    }

    #[test]
    fn compact_u16_is_solanas_short_vec() {
        for (value, bytes) in [
            (0usize, vec![0u8]),
            (0x7f, vec![0x7f]),
            (0x80, vec![0x80, 0x01]),
            (0x3fff, vec![0xff, 0x7f]),
            (0x4000, vec![0x80, 0x80, 0x01]),
        ] {
            let mut out = Vec::new();
            compact_u16(&mut out, value);
            assert_eq!(out, bytes, "{value}");
        }
    }

    #[test]
    fn quotes_are_read_strictly() {
        let quote = SvmQuote::read(&requirement(entry())).unwrap();
        assert_eq!(quote.amount, 10_000);
        assert_eq!(quote.network, SolanaNetwork::Devnet);
        assert_eq!(quote.memo, None);
        let with = |key: &str, value: serde_json::Value| {
            let mut e = entry();
            match key.strip_prefix("extra.") {
                Some(key) => e["extra"][key] = value,
                None => e[key] = value,
            }
            e
        };
        for (e, why) in [
            (with("amount", json!("1e6")), "decimal"),
            (with("amount", json!("18446744073709551616")), "64 bits"),
            (with("amount", json!("0")), "zero"),
            (
                with("payTo", json!("0x1111111111111111111111111111111111111111")),
                "base58",
            ),
            (with("network", json!("solana:unknowncluster")), "mainnet"),
            (with("extra.memo", json!("m".repeat(257))), "257 bytes"),
        ] {
            let err = SvmQuote::read(&requirement(e)).unwrap_err();
            assert!(err.to_string().contains(why), "{why}: {err}");
        }
        let mut e = entry();
        e["extra"] = json!({});
        assert_eq!(
            SvmQuote::read(&requirement(e)),
            Err(SvmPaymentError::Missing {
                index: 0,
                field: "extra.feePayer"
            })
        );
    }

    fn transfer(memo: Option<&str>) -> SvmTransfer {
        let mut e = entry();
        if let Some(memo) = memo {
            e["extra"]["memo"] = json!(memo);
        }
        let quote = SvmQuote::read(&requirement(e)).unwrap();
        SvmTransfer::new(
            &quote,
            SolanaAddress([7; 32]),
            SolanaAddress::token_program(),
            6,
            [9; 32],
            [0xab; 16],
        )
        .unwrap()
    }

    /// The message's layout, read back field by field: the fee payer at 0 and only there, our
    /// wallet the second signer, the four instructions with exactly the quoted amount.
    #[test]
    fn the_message_is_exactly_the_quoted_transfer() {
        let t = transfer(Some("order-42"));
        let m = t.message();
        assert_eq!(&m[..4], &[0x80, 2, 1, 4]);
        assert_eq!(m[4], 8, "eight account keys");
        let key = |i: usize| &m[5 + 32 * i..5 + 32 * (i + 1)];
        assert_eq!(key(0), t.fee_payer.0);
        assert_eq!(key(1), t.payer.0);
        assert_eq!(key(2), t.source.0);
        assert_eq!(key(3), t.destination.0);
        assert_eq!(
            t.destination,
            SolanaAddress::associated_token_account(&t.pay_to, &t.mint, &t.token_program).unwrap()
        );
        let fee_payer_uses = (0..8).filter(|&i| key(i) == t.fee_payer.0).count();
        assert_eq!(fee_payer_uses, 1);
        let rest = &m[5 + 32 * 8..];
        assert_eq!(&rest[..32], &[9; 32], "the blockhash");
        let ix = &rest[32..];
        assert_eq!(ix[0], 4, "four instructions");
        // Compute limit: program 5, no accounts, [2, 20000 LE u32].
        assert_eq!(&ix[1..9], &[5, 0, 5, 2, 0x20, 0x4e, 0, 0]);
        // Compute price: program 5, no accounts, [3, 1 LE u64].
        assert_eq!(&ix[9..21], &[5, 0, 9, 3, 1, 0, 0, 0, 0, 0, 0, 0]);
        // TransferChecked: program 6, accounts source, mint, destination, authority.
        assert_eq!(&ix[21..27], &[6, 4, 2, 4, 3, 1]);
        assert_eq!(ix[27], 10);
        assert_eq!(ix[28], 12);
        assert_eq!(&ix[29..37], &10_000u64.to_le_bytes());
        assert_eq!(ix[37], 6);
        // Memo: program 7, no accounts, the quoted text.
        assert_eq!(&ix[38..41], &[7, 0, 8]);
        assert_eq!(&ix[41..49], b"order-42");
        assert_eq!(&ix[49..], &[0], "no lookup tables");
    }

    #[test]
    fn without_a_quoted_memo_the_nonce_is_the_memo() {
        let t = transfer(None);
        assert_eq!(t.memo, "ab".repeat(16).into_bytes());
        let tx = partially_signed_transaction(&t.message(), &[5; 64]);
        assert_eq!(tx[0], 2);
        assert_eq!(&tx[1..65], &[0; 64], "the fee payer's slot is empty");
        assert_eq!(&tx[65..129], &[5; 64]);
        assert_eq!(&tx[129..], &t.message()[..]);
    }

    #[test]
    fn unsafe_transfers_are_refused() {
        let quote = SvmQuote::read(&requirement(entry())).unwrap();
        let token = SolanaAddress::token_program();
        let us = SolanaAddress([7; 32]);
        let new = |quote: &SvmQuote| SvmTransfer::new(quote, us, token, 6, [0; 32], [0; 16]);
        let mut q = quote.clone();
        q.fee_payer = us;
        assert_eq!(new(&q), Err(UnsafeTransfer::FeePayerIsUs(us)));
        let mut q = quote.clone();
        q.pay_to = us;
        assert_eq!(new(&q), Err(UnsafeTransfer::PayToIsUs(us)));
        let mut q = quote.clone();
        q.fee_payer = q.mint;
        assert!(matches!(
            new(&q),
            Err(UnsafeTransfer::FeePayerInTransfer(_))
        ));
    }
}
