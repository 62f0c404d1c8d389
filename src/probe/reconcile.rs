//! Reconciliation: resolving open reservations of calls that are over (cut short by a crash or a
//! stop, or left open because the chain could not tell yet), by asking the token through the fixed
//! RPC. The decision per reservation is pure (`paid::steps::reconcile_verdict`); this is the IO
//! around it.

use alloy::primitives::B256;

use crate::paid::chain::AUTHORIZATION_USED_TOPIC;
use crate::paid::steps::{ChainView, Reconciled, reconcile_verdict};
use crate::probe::rpc::{Rpc, RpcError};
use crate::spend::{ReconcileReport, ReconcileStep, ReservationRecord, SpendError, SpendStore};

/// Which open reservations a reconciliation looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Those whose window has closed by `wall_now`: none of them can belong to a call still in
    /// flight, so this is safe whatever else runs (a paid call's opening reconciliation).
    Expired,
    /// Every open one, the window still open included (a used authorization is settled at once).
    /// Only while no paid call is in flight: under the spend store's call lock
    /// ([`SpendStore::lock_for_call`]), as the daemon's start does.
    All,
}

/// Resolves the open reservations `due` names: used on chain -> settled (whether or not its
/// window has closed: money moved); unused once the chain's own clock has passed `validBefore` ->
/// released (the token refuses it from then on, forever); anything else (unused and still valid,
/// the RPC unreadable, another chain) stays open and keeps counting. RPC trouble is not an error:
/// those rows stay open. `wall_now` is real time.
pub async fn reconcile(
    store: &SpendStore,
    rpc: &Rpc,
    wall_now: i64,
    due: Due,
    on_step: Option<&(dyn Fn(ReconcileStep) + Send + Sync)>,
) -> Result<ReconcileReport, SpendError> {
    let mut report = ReconcileReport::default();
    let due = match due {
        Due::Expired => store.expired_open(wall_now)?,
        Due::All => store.open_reservations()?,
    };
    if due.is_empty() {
        return Ok(report);
    }
    let view = match chain_view(rpc).await {
        Ok(view) => view,
        Err(e) => {
            report.still_open = due
                .iter()
                .map(|r| (r.id, format!("RPC unavailable: {e}")))
                .collect();
            return Ok(report);
        }
    };
    for row in due {
        let used = rpc
            .authorization_state(row.asset, row.payer, row.nonce)
            .await;
        let tx = match (&used, row.from_block) {
            (Ok(true), Some(from)) => find_authorization_use(rpc, &row, from, view.latest_block)
                .await
                .ok()
                .flatten(),
            _ => None,
        };
        match reconcile_verdict(row.chain_id, row.valid_before, &view, used, tx) {
            Reconciled::Settled { tx, why } => {
                if store.mark_settled(row.id, tx, &why, wall_now)? {
                    report.settled.push(row.id);
                }
            }
            Reconciled::Released(why) => {
                if store.mark_released(row.id, &why, wall_now)? {
                    report.released.push(row.id);
                }
            }
            Reconciled::Open(why) => {
                report.still_open.push((row.id, why));
                continue;
            }
        }
        if let Some(hook) = on_step {
            hook(ReconcileStep::Resolved { id: row.id });
        }
    }
    Ok(report)
}

async fn chain_view(rpc: &Rpc) -> Result<ChainView, RpcError> {
    Ok(ChainView {
        chain_id: rpc.chain_id().await?,
        latest_block: rpc.block_number().await?,
        latest_timestamp: rpc.latest_timestamp().await?,
    })
}

/// The transaction whose `AuthorizationUsed(payer, nonce)` log shows our authorization was used.
pub async fn find_authorization_use(
    rpc: &Rpc,
    row: &ReservationRecord,
    from_block: u64,
    to_block: u64,
) -> Result<Option<B256>, RpcError> {
    let logs = rpc
        .logs(
            row.asset,
            &[
                Some(AUTHORIZATION_USED_TOPIC),
                Some(row.payer.into_word()),
                Some(row.nonce),
            ],
            from_block,
            to_block,
        )
        .await?;
    Ok(logs.iter().find_map(|l| l.transaction_hash))
}

/// The transactions read per open Solana reservation when looking for ours.
const SVM_LOOKUP_LIMIT: usize = 100;

/// Resolves every open Solana reservation through the fixed Solana RPC: the transaction carrying
/// our signature found among those that touched our token account -> settled (or released when
/// it failed); none committed a signature -> released (nothing was sent); not on chain once the
/// chain is past its blockhash's last valid height -> released (it can never land); anything
/// else, or the RPC unreadable, stays open and keeps counting. Only while no paid call is in
/// flight (under the spend store's call lock), as [`Due::All`].
pub async fn reconcile_svm(
    store: &SpendStore,
    rpc: &crate::probe::solana_rpc::SolanaRpc,
    wall_now: i64,
) -> Result<ReconcileReport, SpendError> {
    use crate::paid::svm_chain::{SvmReconciled, reconcile_verdict};
    let mut report = ReconcileReport::default();
    for row in store.svm_open_reservations()? {
        let read = async {
            let height = rpc.block_height().await?;
            let (landed, whole) = match &row.signature {
                None => (None, true),
                Some(ours) => {
                    let window = rpc
                        .transactions_of(&row.source, None, SVM_LOOKUP_LIMIT)
                        .await?;
                    let whole = window.len() < SVM_LOOKUP_LIMIT;
                    (
                        window.into_iter().find(|tx| tx.signatures.contains(ours)),
                        whole,
                    )
                }
            };
            Ok::<_, RpcError>((height, landed, whole))
        };
        let (height, landed) = match (&row.signature, read.await) {
            // Not among the newest transactions read, and there may be older ones: unknown.
            (_, Ok((_, None, false))) => {
                report.still_open.push((
                    row.id,
                    format!(
                        "not among the newest {SVM_LOOKUP_LIMIT} transactions of our token account"
                    ),
                ));
                continue;
            }
            (_, Ok((height, landed, _))) => (height, landed),
            (None, Err(_)) => (0, None),
            (Some(_), Err(e)) => {
                report
                    .still_open
                    .push((row.id, format!("Solana RPC unavailable: {e}")));
                continue;
            }
        };
        match reconcile_verdict(
            row.signature.as_deref(),
            landed.as_ref(),
            height,
            row.last_valid_block_height,
        ) {
            SvmReconciled::Settled {
                transaction_id,
                why,
            } => {
                if store.mark_svm_settled(row.id, Some(&transaction_id), &why, wall_now)? {
                    report.settled.push(row.id);
                }
            }
            SvmReconciled::Released(why) => {
                if store.mark_released(row.id, &why, wall_now)? {
                    report.released.push(row.id);
                }
            }
            SvmReconciled::Open(why) => report.still_open.push((row.id, why)),
        }
    }
    Ok(report)
}
