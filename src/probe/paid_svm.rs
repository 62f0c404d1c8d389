//! The paid call on Solana: the steps of `probe::paid` for an `accepts` entry of the exact SVM
//! scheme, the IO between the pure decisions of `paid::steps` (choose, re-quote: the same rules as
//! EVM) and `paid::svm_steps` (what our Solana RPC must show before we pay). Reached from
//! [`super::paid::paid_call`] under the same call lock, caps and deadline:
//! 1. (before choosing) every open Solana reservation is reconciled on chain;
//! 3. the 402 again: the entry unchanged (amount, payTo), still within the policy;
//! 4. our Solana RPC serves the quote's cluster, the mint is a token mint of the allowlist's
//!    decimals, our token account holds the amount; the newest transaction of our token account
//!    is noted (the window of the chain reads starts after it);
//! 5. the exact transfer reserved durably, signed, our signature committed, then sent;
//! 6. the transaction the settlement names and every transaction of our token account since
//!    step 4 read with `getTransaction` (C6, H5, H6, H7 judged from their token balances);
//! 7. the reservation settled when the transaction carrying our signature landed, released when
//!    it failed or can no longer land (its blockhash expired), open otherwise.

use std::time::Duration;

use super::paid::{
    DEADLINE_PASSED, Deadline, PaidContext, PaidStep, SvmPay, refuse, verified_fetch_config,
};
use crate::evidence::chain::ChainRead;
use crate::evidence::paid::{Decision, PaidObservation};
use crate::evidence::svm::SvmPaidSeen;
use crate::paid::steps::{self, Declined, quote_seen};
use crate::paid::svm_chain::{SvmReconciled, reconcile_verdict};
use crate::paid::svm_steps::{
    judge_svm_destination, judge_svm_funds, judge_svm_mint, named_signature, svm_chain_before,
    svm_payment_sent,
};
use crate::probe::http::{FetchRequest, fetch};
use crate::spend::{SvmReservation, SvmReserveRequest};
use crate::x402::payload::build_svm_payment_header;
use crate::x402::solana::SolanaAddress;
use crate::x402::types::Requirement;

/// Transactions of our token account read at most for one call's window.
const WINDOW_LIMIT: usize = 50;

/// Steps 3-5 for a Solana entry the policy allowed in the caller's quote.
pub(super) async fn pay(
    ctx: &PaidContext<'_>,
    svm: &SvmPay<'_>,
    mut obs: PaidObservation,
    request: &FetchRequest,
    requirement: &Requirement,
    deadline: Deadline,
) -> PaidObservation {
    // 3. The 402 again.
    if deadline.passed() {
        return super::paid::deadline_refusal(ctx, obs, requirement);
    }
    let policy = ctx.policy.current();
    let requote = fetch(&verified_fetch_config(ctx), request).await;
    let fresh_parse = steps::requote_parsed(obs.carrier, request, &requote);
    let (seen, judged) =
        steps::judge_requote_svm(&policy, requirement, &requote, fresh_parse.as_ref());
    obs.requote = Some(seen);
    let (fresh_required, fresh_entry, priced) = match judged {
        Ok(fresh) => fresh,
        Err(declined) => return refuse(ctx, obs, vec![declined]),
    };
    obs.paid_entry = Some(quote_seen(fresh_required, fresh_entry));

    // 4. We pay only what we can verify.
    if deadline.passed() {
        return super::paid::deadline_refusal(ctx, obs, fresh_entry);
    }
    let payer = svm.wallet.address();
    let mint_text = priced.quote.mint.to_string();
    let (genesis, mint) = tokio::join!(svm.rpc.genesis_hash(), svm.rpc.account(&mint_text));
    let mint = match judge_svm_mint(&priced, genesis, mint) {
        Ok(mint) => mint,
        Err(refusal) => return refuse(ctx, obs, vec![Declined::new(refusal, Some(fresh_entry))]),
    };
    let Some(source) =
        SolanaAddress::associated_token_account(&payer, &priced.quote.mint, &mint.token_program)
    else {
        let refusal = crate::evidence::paid::Refusal::new(
            crate::evidence::paid::RefusalCode::SvmTransferInvalid,
            "no associated token account can be derived for our wallet",
        );
        return refuse(ctx, obs, vec![Declined::new(refusal, Some(fresh_entry))]);
    };
    let Some(destination) = SolanaAddress::associated_token_account(
        &priced.quote.pay_to,
        &priced.quote.mint,
        &mint.token_program,
    ) else {
        let refusal = crate::evidence::paid::Refusal::new(
            crate::evidence::paid::RefusalCode::SvmTransferInvalid,
            "no associated token account can be derived for payTo",
        );
        return refuse(ctx, obs, vec![Declined::new(refusal, Some(fresh_entry))]);
    };
    let source_text = source.to_string();
    let destination_text = destination.to_string();
    let (funds, payee, blockhash, height, newest) = tokio::join!(
        svm.rpc.account(&source_text),
        svm.rpc.account(&destination_text),
        svm.rpc.latest_blockhash(),
        svm.rpc.block_height(),
        svm.rpc.newest_signature(&source_text),
    );
    if let Err(refusal) =
        judge_svm_funds(&priced, payer, funds).and_then(|()| judge_svm_destination(&priced, payee))
    {
        return refuse(ctx, obs, vec![Declined::new(refusal, Some(fresh_entry))]);
    }
    let read = blockhash.and_then(|b| Ok((b, height?, newest?)));
    let ((recent_blockhash, last_valid), block_height, window_after) = match read {
        Ok(read) => read,
        Err(e) => {
            let refusal = crate::evidence::paid::Refusal::new(
                crate::evidence::paid::RefusalCode::RpcUnavailable,
                format!("{e}; a settlement could not be verified, so nothing is paid"),
            );
            return refuse(ctx, obs, vec![Declined::new(refusal, Some(fresh_entry))]);
        }
    };

    // 5. Reserve (durably), sign that reservation, commit our signature, send.
    let reserve_request = SvmReserveRequest {
        subject: &obs.subject,
        requirement: fresh_entry,
        payer,
        token_program: mint.token_program,
        mint_decimals: mint.decimals,
        recent_blockhash,
        last_valid_block_height: last_valid,
        block_height,
    };
    let reservation =
        match ctx
            .store
            .reserve_svm(&ctx.policy.current(), &reserve_request, ctx.wall.now())
        {
            Ok(reservation) => reservation,
            Err(e) => return super::paid::not_reserved(obs, e),
        };
    let id = reservation.id();
    ctx.step(PaidStep::Reserved { id });
    let signed = match svm.wallet.sign(&reservation) {
        Ok(signed) => signed,
        Err(e) => {
            release_unsent(ctx, &mut obs, reservation, &format!("signing failed: {e}"));
            return failed(obs, "sign", e.to_string());
        }
    };
    if let Err(e) = ctx.store.record_svm_signature(id, &signed.signature) {
        // Not committed, so not sent: the reservation is released (or, when even that fails,
        // reconciliation releases it: no signature was committed).
        release_unsent(
            ctx,
            &mut obs,
            reservation,
            &format!("committing our signature: {e}"),
        );
        return failed(obs, "commit signature", e.to_string());
    }
    ctx.step(PaidStep::Signed { id });
    let header = match build_svm_payment_header(fresh_required, fresh_entry, &signed.transaction) {
        Ok(header) => header,
        Err(e) => {
            release_unsent(
                ctx,
                &mut obs,
                reservation,
                &format!("building the header: {e}"),
            );
            return failed(obs, "payment header", e.to_string());
        }
    };
    if deadline.passed() {
        release_unsent(ctx, &mut obs, reservation, DEADLINE_PASSED);
        return failed(
            obs,
            "deadline",
            "the paid part's deadline passed before the payment was sent; nothing was sent".into(),
        );
    }
    let payment = svm_payment_sent(
        &reservation,
        &signed.signature,
        header.name,
        &header.value,
        last_valid,
        ctx.clock.now(),
    );
    obs.svm = Some(SvmPaidSeen {
        chain: svm_chain_before(svm.rpc.url(), &payment),
        payment,
        block_height_before: block_height,
        window_after,
    });
    obs.decision = Decision::Paid { reservation_id: id };

    if let Some(why) =
        super::paid::send(ctx, &mut obs, request, header.name, header.value, id).await
    {
        release_unsent(ctx, &mut obs, reservation, &why);
    }
    obs
}

fn failed(mut obs: PaidObservation, stage: &str, error: String) -> PaidObservation {
    obs.decision = Decision::Failed {
        stage: stage.into(),
        error,
    };
    obs
}

fn release_unsent(
    ctx: &PaidContext<'_>,
    obs: &mut PaidObservation,
    reservation: SvmReservation,
    why: &str,
) {
    if let Err(e) = ctx
        .store
        .release_unsent_svm(reservation, why, ctx.wall.now())
    {
        obs.notes.push(format!(
            "releasing an unsent reservation failed (it stays open and counted): {e}"
        ));
    }
}

/// Steps 6-7 on Solana: read the chain, then the reservation's fate. The record of money is
/// never cut short by the deadline; the chain reads are.
pub(super) async fn verify(
    ctx: &PaidContext<'_>,
    svm: &SvmPay<'_>,
    obs: &mut PaidObservation,
    deadline: Deadline,
) {
    let Some(mut seen) = obs.svm.take() else {
        return;
    };
    let id = seen.payment.reservation_id;
    if obs.paid.is_some() {
        read_chain(ctx, svm, obs, &mut seen, deadline).await;
    }
    // 7. The reservation's fate, by the rule reconciliation uses.
    let landed = seen.chain.window.value().and_then(|w| {
        w.iter()
            .find(|tx| tx.signatures.contains(&seen.payment.signature))
            .cloned()
    });
    let now = ctx.wall.now();
    let result = match svm.rpc.block_height().await {
        Ok(height) => match reconcile_verdict(
            Some(&seen.payment.signature),
            landed.as_ref(),
            height,
            seen.payment.last_valid_block_height,
        ) {
            SvmReconciled::Settled {
                transaction_id,
                why,
            } => ctx
                .store
                .mark_svm_settled(id, Some(&transaction_id), &why, now)
                .map(|_| ()),
            // Only a window read whole can show that our transaction is not on chain.
            SvmReconciled::Released(why)
                if seen
                    .chain
                    .window
                    .value()
                    .is_some_and(|w| w.len() < WINDOW_LIMIT) =>
            {
                ctx.store.mark_released(id, &why, now).map(|_| ())
            }
            _ => Ok(()),
        },
        Err(e) => {
            obs.notes.push(format!(
                "reading the block height for reservation {id}: {e}"
            ));
            Ok(())
        }
    };
    let row = ctx
        .store
        .svm_reservation(id)
        .map(|row| row.map(|r| (r.state, r.resolution)));
    super::paid::record_reservation(obs, id, result, row);
    obs.svm = Some(seen);
    ctx.step(PaidStep::Verified { id });
}

/// Step 6: the named transaction (waited for), then every transaction of our token account
/// since the call began.
async fn read_chain(
    ctx: &PaidContext<'_>,
    svm: &SvmPay<'_>,
    obs: &PaidObservation,
    seen: &mut SvmPaidSeen,
    deadline: Deadline,
) {
    let named = obs
        .settlement
        .as_ref()
        .and_then(|s| named_signature(s.transaction.as_deref()));
    seen.chain.claimed = match named {
        None => ChainRead::skipped("the settlement response names no transaction signature"),
        Some(signature) => {
            let until = deadline.or_within_ms(ctx.options.receipt_wait_ms);
            loop {
                if deadline.passed() {
                    break ChainRead::skipped(DEADLINE_PASSED);
                }
                match svm.rpc.transaction(signature).await {
                    Ok(None) if tokio::time::Instant::now() < until => {
                        tokio::time::sleep(Duration::from_millis(ctx.options.poll_interval_ms))
                            .await;
                    }
                    other => break ChainRead::from_result(other),
                }
            }
        }
    };
    seen.chain.window = if deadline.passed() {
        ChainRead::skipped(DEADLINE_PASSED)
    } else {
        ChainRead::from_result(
            svm.rpc
                .transactions_of(
                    &seen.payment.source,
                    seen.window_after.as_deref(),
                    WINDOW_LIMIT,
                )
                .await,
        )
    };
}
