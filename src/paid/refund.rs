//! Refunds (H9): which transfers to our wallet count as a refund of a charge. Pure; shared by the
//! refund watch (which stops once the charge is refunded) and by H9 (which judges the window).

use alloy::primitives::{Address, U256};

use super::chain::{TransferLog, decode_transfer, sum_in};
use crate::evidence::chain::LogEntry;
use crate::evidence::paid::{OperatorFile, RefundPlan};
use crate::x402::network::chain_id_of;

/// Who a refund may come from: the plan's senders (quoted payee, receivers of the charge) and the
/// operator's wallets on the charged chain.
pub fn refund_senders(plan: &RefundPlan, file: &OperatorFile) -> Vec<Address> {
    let mut senders = plan.senders.clone();
    senders.extend(
        file.wallets
            .iter()
            .filter(|w| {
                w.network
                    .as_deref()
                    .is_none_or(|n| chain_id_of(n) == Some(plan.chain_id))
            })
            .map(|w| w.address),
    );
    senders
}

/// Refund transfers among `logs`: to our wallet, in the charged asset, from a refund sender.
pub fn refunds<'a>(
    logs: impl Iterator<Item = &'a LogEntry>,
    plan: &RefundPlan,
    file: &OperatorFile,
) -> Vec<TransferLog> {
    let senders = refund_senders(plan, file);
    logs.filter_map(decode_transfer)
        .filter(|t| t.token == plan.asset && t.to == plan.wallet && senders.contains(&t.from))
        .collect()
}

/// The sum of refunds in `logs`, in the charged asset.
pub fn refunded(logs: &[LogEntry], plan: &RefundPlan, file: &OperatorFile) -> U256 {
    sum_in(&refunds(logs.iter(), plan, file), plan.asset)
}

/// Whether refunds in `logs` add up to the charge (the refund watch stops then).
pub fn refund_received(logs: &[LogEntry], plan: &RefundPlan, file: &OperatorFile) -> bool {
    !plan.charge_amount.is_zero() && refunded(logs, plan, file) >= plan.charge_amount
}
