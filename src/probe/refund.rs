//! The refund watch: a job of its own, run after a paid call that charged without delivering when
//! the operator's file promises a refund. It reads the operator file, then watches the chain for
//! transfers back to our wallet until the declared window ends (at most `refund_watch_max_secs`),
//! so a watch never holds the paid lane. H9 judges what it saw.
//!
//! Its times are real time (`wall`): the window is declared in seconds after the charge's block
//! time, which is the chain's clock.

use std::time::Duration;

use crate::clock::Clock;
use crate::evidence::chain::{ChainRead, LogEntry};
use crate::evidence::http::FetchRequest;
use crate::evidence::paid::{
    OperatorFileSeen, RefundPlan, RefundSeen, RefundTransfer, RefundWatch,
};
use crate::paid::chain::TRANSFER_TOPIC;
use crate::paid::refund::refund_received;
use crate::probe::http::{FetchConfig, Target, fetch};
use crate::probe::paid::{PaidOptions, logs_between};
use crate::probe::rpc::{Rpc, RpcError};
use crate::x402::operator::{OPERATOR_FILE_PATH, parse_operator_file};

/// Watches for the refund `plan` describes. Never panics; what could not be read is recorded.
pub async fn watch_refund(
    fetch_cfg: &FetchConfig,
    rpc: &Rpc,
    options: &PaidOptions,
    wall: &dyn Clock,
    plan: &RefundPlan,
) -> RefundSeen {
    let mut seen = RefundSeen {
        skipped: None,
        operator_exchange: None,
        operator: None,
        watch: None,
    };
    let origin = match Target::parse(&plan.subject) {
        Ok(target) => target.origin(),
        Err(e) => {
            seen.operator = Some(OperatorFileSeen::Unreadable {
                why: format!("the subject URL has no origin: {e}"),
            });
            return seen;
        }
    };
    let exchange = fetch(
        fetch_cfg,
        &FetchRequest::get(format!("{origin}{OPERATOR_FILE_PATH}")),
    )
    .await;
    let operator = match exchange.response.as_ref() {
        Some(r) if r.status == 200 && !r.body_truncated => match parse_operator_file(&r.body) {
            Ok(file) => OperatorFileSeen::Read { file },
            Err(why) => OperatorFileSeen::Malformed { why },
        },
        Some(r) if r.status == 404 || r.status == 410 => {
            OperatorFileSeen::Absent { status: r.status }
        }
        Some(r) => OperatorFileSeen::Unreadable {
            why: format!("HTTP {}", r.status),
        },
        None => OperatorFileSeen::Unreadable {
            why: exchange
                .error
                .as_ref()
                .map(|e| e.to_string())
                .unwrap_or_else(|| "no response".into()),
        },
    };
    seen.operator_exchange = Some(exchange);
    seen.operator = Some(operator.clone());
    let OperatorFileSeen::Read { file } = operator else {
        return seen;
    };
    let Some(rule) = file.refund.clone() else {
        seen.skipped = Some("the operator file declares no refund rule".into());
        return seen;
    };

    let wallet = plan.wallet.into_word();
    let charge_time = ChainRead::from_result(block_timestamp(rpc, plan.charge_block).await);
    let start = charge_time
        .value()
        .and_then(|t| i64::try_from(*t).ok())
        .unwrap_or(plan.sent_at);
    let window_end = start.saturating_add(i64::try_from(rule.within_seconds).unwrap_or(i64::MAX));
    let started_at = wall.now();
    let bound =
        started_at.saturating_add(i64::try_from(options.refund_watch_max_secs).unwrap_or(i64::MAX));
    let until = window_end.min(bound);
    let mut transfers: ChainRead<Vec<LogEntry>> = ChainRead::skipped("not read");
    let mut refunded = false;
    let last_block = loop {
        let latest = rpc.block_number().await;
        let last_block = ChainRead::from_result(latest.clone());
        if let Ok(latest) = latest {
            let read = logs_between(
                rpc,
                plan.asset,
                &[Some(TRANSFER_TOPIC), None, Some(wallet)],
                plan.charge_block,
                latest,
            )
            .await;
            transfers = ChainRead::from_result(read);
            if let Some(logs) = transfers.value() {
                refunded = refund_received(logs, plan, &file);
            }
        }
        if refunded || wall.now() >= until {
            break last_block;
        }
        tokio::time::sleep(Duration::from_millis(options.poll_interval_ms)).await;
    };
    let ended_at = wall.now();
    let transfers_to_wallet = match transfers {
        ChainRead::Read { value } => {
            let mut with_times = Vec::with_capacity(value.len());
            for log in value {
                let block_timestamp = match log.block_number {
                    Some(b) => ChainRead::from_result(block_timestamp(rpc, b).await),
                    None => ChainRead::skipped("the log has no block number"),
                };
                with_times.push(RefundTransfer {
                    log,
                    block_timestamp,
                });
            }
            ChainRead::Read { value: with_times }
        }
        ChainRead::Failed { error } => ChainRead::Failed { error },
        ChainRead::Skipped { why } => ChainRead::Skipped { why },
    };
    seen.watch = Some(RefundWatch {
        charge_block: plan.charge_block,
        charge_time,
        window_end,
        started_at,
        ended_at,
        last_block,
        transfers_to_wallet,
        complete: refunded || ended_at >= window_end,
    });
    seen
}

/// A block's timestamp (unix seconds).
pub async fn block_timestamp(rpc: &Rpc, block: u64) -> Result<u64, RpcError> {
    rpc.block_timestamp(block).await
}
