//! The paid call's driver: the IO between the pure steps of `paid::steps`. Everything that spends
//! money and everything it takes to see where the money went; the outcomes are decided later by
//! `checks::paid` from the [`PaidObservation`], and nothing here calls a check.
//!
//! One call, in order (each step recorded, none of them panics):
//! 1. Reconcile open reservations whose window has closed (so the caps count what is really open).
//! 2. Choose the first `accepts` entry of the quote that the policy allows; refuse otherwise.
//! 3. Fetch the 402 again and refuse if the entry changed (price, payTo, asset, network).
//! 4. Read the chain: our RPC must answer, serve the quote's chain and show our balance covers it;
//!    we do not pay what we cannot verify.
//! 5. Reserve durably (spend store), then sign exactly that reservation, then send it.
//! 6. Read the chain again: the settlement the response names, the use of our nonce
//!    (`AuthorizationUsed`), `authorizationState`, every `Transfer` from our wallet in the blocks
//!    around the call; replay the payment when our authorization is spent.
//! 7. Mark the reservation settled, released or (when unknown) leave it open for reconciliation.
//!
//! A promised refund is watched afterwards by its own job (`probe::refund`), so a watch never
//! holds the paid lane.
//!
//! Attribution: the transfers from our wallet seen around a call are attributed to that call, except
//! those that settle another of our own authorizations (another nonce). So paid calls from one
//! wallet must not overlap: [`paid_call`] holds the store's call lock (in this process and, through
//! a file lock, across processes sharing the state directory) for its whole duration.
//!
//! Two clocks: the observation is stamped by `clock` (simulated in tests), while the
//! authorization's window and the spend caps use `wall`, the real time the facilitator and the
//! token check against.

use std::time::Duration;

use alloy::primitives::{Address, B256};
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::paid::chain::{AUTHORIZATION_USED_TOPIC, TRANSFER_TOPIC};
use crate::paid::steps::{
    self, Choice, Declined, Fate, Fresh, Signed, chain_before, confirmation_target, judge_chain,
    judge_requote, never_sent, nonce_transaction, paid_request, payment_sent, quote_seen,
    replay_plan, requote_parsed, reservation_fate, settlement_block, settlement_by,
};
use crate::probe::http::{FetchConfig, FetchRequest, fetch};
use crate::probe::rpc::{LogEntry, Rpc, RpcError, TxReceipt};
use crate::probe::solana_rpc::SolanaRpc;
use crate::solana_wallet::SolanaWallet;
use crate::spend::PayPolicy;
use crate::spend::{ReconcileStep, Refusal, ReserveError, ReserveRequest, SpendStore};
use crate::wallet::Wallet;
use crate::x402::payload::build_payment_header;
use crate::x402::types::Parsed402;

pub use crate::evidence::chain::ChainRead;
pub use crate::evidence::paid::{
    AuthorizationSeen, Decision, OperatorFile, OperatorFileSeen, OperatorWallet, PaidChainSeen,
    PaidObservation, PaymentSent, QuoteSeen, RefundPlan, RefundRule, RefundSeen, RefundTransfer,
    RefundWatch, ReplaySeen, RequoteSeen, ReservationSeen, SettlementSeen,
};
pub use crate::x402::operator::OPERATOR_FILE_PATH;

/// How a paid call waits and what it does besides paying.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaidOptions {
    /// Time allowed for the paid request's response head (settlement happens inside it), ms.
    pub paid_timeout_ms: u64,
    /// Blocks a settlement must have (counting its own) before the chain reads are taken as final;
    /// 0 or 1 = included is enough.
    pub confirmations: u64,
    /// How long to wait for a named transaction's receipt, or for the confirmations, ms.
    pub receipt_wait_ms: u64,
    /// Pause between chain polls, ms.
    pub poll_interval_ms: u64,
    /// Longest refund watch, whatever window the operator declares, seconds.
    pub refund_watch_max_secs: u64,
    /// Replay the payment once our authorization is spent (H7).
    pub replay: bool,
    /// The whole paid part's deadline, ms: past it nothing new is sent, and chain reads not yet
    /// made are recorded as not made (their checks `unmeasured`). The reservation is always
    /// recorded.
    pub deadline_ms: u64,
}

impl Default for PaidOptions {
    /// Production: two confirmations, a minute for receipts, ten minutes of refund watch at most.
    fn default() -> Self {
        PaidOptions {
            paid_timeout_ms: 120_000,
            confirmations: 2,
            receipt_wait_ms: 60_000,
            poll_interval_ms: 1_000,
            refund_watch_max_secs: 600,
            replay: true,
            deadline_ms: 900_000,
        }
    }
}

impl PaidOptions {
    /// The local lab: anvil mines each transaction at once and no more blocks after it, so waiting
    /// for extra confirmations would wait forever; receipts are there at once.
    pub fn lab() -> Self {
        PaidOptions {
            paid_timeout_ms: 30_000,
            confirmations: 0,
            receipt_wait_ms: 2_000,
            poll_interval_ms: 200,
            refund_watch_max_secs: 60,
            replay: true,
            deadline_ms: 120_000,
        }
    }
}

/// A point in a paid call, reported to [`PaidContext::on_step`] (fault-injection tests kill the
/// process here; a CLI may show progress).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaidStep {
    /// An expired reservation was resolved during the opening reconciliation.
    Reconciled { id: i64 },
    /// The reservation is committed; nothing is signed yet.
    Reserved { id: i64 },
    /// The authorization is signed; nothing is sent yet.
    Signed { id: i64 },
    /// The paid request is about to be sent.
    Sending { id: i64 },
    /// The paid request's exchange is complete (response or failure).
    Responded { id: i64 },
    /// Chain reads and replay are done; the reservation is updated.
    Verified { id: i64 },
}

/// What paying Solana entries needs: the Solana wallet and the fixed Solana RPC every Solana
/// chain fact is read through.
#[derive(Clone, Copy)]
pub struct SvmPay<'a> {
    pub wallet: &'a SolanaWallet,
    pub rpc: &'a SolanaRpc,
}

/// What a paid call needs. The caller owns everything; nothing here outlives the call.
pub struct PaidContext<'a> {
    pub wallet: &'a Wallet,
    /// Solana entries are paid only with this (`None`: they are refused).
    pub svm: Option<SvmPay<'a>>,
    pub store: &'a SpendStore,
    /// A fixed policy, or one that may change while the call runs (the daemon's, whose caps a
    /// reload may lower): the reservation reads it last, so a cap lowered meanwhile holds.
    pub policy: &'a dyn PolicySource,
    /// The fixed RPC every chain fact is read through.
    pub rpc: &'a Rpc,
    /// How endpoints are fetched (address guard, extra roots, caps); the paid request gets a
    /// longer first-byte timeout from `options`.
    pub fetch: &'a FetchConfig,
    pub options: PaidOptions,
    /// Stamps the observation (the run's clock; simulated in tests).
    pub clock: &'a dyn Clock,
    /// Authorization windows, spend caps, reservation times: always real time in production.
    pub wall: &'a dyn Clock,
    pub on_step: Option<&'a (dyn Fn(PaidStep) + Send + Sync)>,
    /// Which subjects R6 compares with which reference source, and where the sources are
    /// (`probe::reference`); read right before and after the paid request.
    pub references: &'a super::reference::ReferenceConfig,
}

/// Where a paid call reads the pay policy.
pub trait PolicySource: Send + Sync {
    /// The policy in force now.
    fn current(&self) -> PayPolicy;
}

impl PolicySource for PayPolicy {
    fn current(&self) -> PayPolicy {
        self.clone()
    }
}

impl PolicySource for std::sync::RwLock<PayPolicy> {
    fn current(&self) -> PayPolicy {
        self.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl PaidContext<'_> {
    pub(super) fn step(&self, step: PaidStep) {
        if let Some(hook) = self.on_step {
            hook(step);
        }
    }
}

/// The paid part's deadline, on the monotonic clock (it bounds real waiting).
#[derive(Debug, Clone, Copy)]
pub(super) struct Deadline(tokio::time::Instant);

impl Deadline {
    fn after_ms(ms: u64) -> Deadline {
        Deadline(tokio::time::Instant::now() + Duration::from_millis(ms))
    }

    pub(super) fn passed(self) -> bool {
        tokio::time::Instant::now() >= self.0
    }

    /// The earlier of this deadline and `ms` from now.
    pub(super) fn or_within_ms(self, ms: u64) -> tokio::time::Instant {
        self.0
            .min(tokio::time::Instant::now() + Duration::from_millis(ms))
    }
}

pub(super) const DEADLINE_PASSED: &str = "the paid part's deadline passed before this read";

/// Pays `url` once (as quoted in `quote`, the 402 the caller saw for `request`), then verifies on
/// chain where the money went. Never panics; every failure and refusal is in the observation.
/// Holds the store's call lock throughout (see the module doc on attribution).
pub async fn paid_call(
    ctx: &PaidContext<'_>,
    url: &str,
    request: &FetchRequest,
    quote: &Parsed402,
) -> PaidObservation {
    let _one_at_a_time = match ctx.store.lock_for_call().await {
        Ok(guard) => guard,
        Err(e) => {
            let mut obs = PaidObservation::new(
                url,
                request,
                ctx.wallet.address(),
                ctx.clock.now(),
                ctx.options.paid_timeout_ms,
            );
            obs.decision = Decision::Failed {
                stage: "call lock".into(),
                error: e.to_string(),
            };
            return obs;
        }
    };
    let deadline = Deadline::after_ms(ctx.options.deadline_ms);
    let reader = super::reference::ReferenceReader {
        config: ctx.references,
        fetch: ctx.fetch,
        rpc: ctx.rpc,
        clock: ctx.clock,
    };
    let mut reference = super::reference::before(&reader, url, request).await;
    let mut obs = pay_until(ctx, url, request, quote, deadline).await;
    if let Some(seen) = reference.as_mut()
        && obs.payment_sent()
    {
        super::reference::after(&reader, seen).await;
    }
    obs.reference = reference;
    verify_until(ctx, &mut obs, deadline).await;
    obs
}

/// Steps 1-5: decide, reserve, sign and send. The caller must not run paid calls from the same
/// wallet at the same time ([`paid_call`] takes care of that).
pub async fn pay(
    ctx: &PaidContext<'_>,
    url: &str,
    request: &FetchRequest,
    quote: &Parsed402,
) -> PaidObservation {
    pay_until(
        ctx,
        url,
        request,
        quote,
        Deadline::after_ms(ctx.options.deadline_ms),
    )
    .await
}

/// Steps 6-7: read the chain, replay, and update the reservation. Does nothing when nothing was
/// paid.
pub async fn verify(ctx: &PaidContext<'_>, obs: &mut PaidObservation) {
    verify_until(ctx, obs, Deadline::after_ms(ctx.options.deadline_ms)).await
}

async fn pay_until(
    ctx: &PaidContext<'_>,
    url: &str,
    request: &FetchRequest,
    quote: &Parsed402,
    deadline: Deadline,
) -> PaidObservation {
    let mut obs = PaidObservation::new(
        url,
        request,
        ctx.wallet.address(),
        ctx.clock.now(),
        ctx.options.paid_timeout_ms,
    );

    // 1. What is really still open counts against the caps.
    let on_reconciled = |step: ReconcileStep| {
        let ReconcileStep::Resolved { id } = step;
        ctx.step(PaidStep::Reconciled { id });
    };
    match super::reconcile::reconcile(
        ctx.store,
        ctx.rpc,
        ctx.wall.now(),
        super::reconcile::Due::Expired,
        Some(&on_reconciled),
    )
    .await
    {
        Ok(report) => obs.reconciled = Some(report),
        Err(e) => obs
            .notes
            .push(format!("reconciling earlier reservations: {e}")),
    }
    // Open Solana reservations too (a paid call holds the call lock: none is in flight).
    if let Some(svm) = &ctx.svm {
        match super::reconcile::reconcile_svm(ctx.store, svm.rpc, ctx.wall.now()).await {
            Ok(report) => {
                for id in report.settled.iter().chain(&report.released) {
                    ctx.step(PaidStep::Reconciled { id: *id });
                }
                let all = obs.reconciled.get_or_insert_with(Default::default);
                all.settled.extend(report.settled);
                all.released.extend(report.released);
                all.still_open.extend(report.still_open);
            }
            Err(e) => obs
                .notes
                .push(format!("reconciling earlier Solana reservations: {e}")),
        }
    }

    // 2. Choose an entry the policy allows.
    let policy = ctx.policy.current();
    let (required, requirement, svm) = match steps::choose(&policy, quote, ctx.svm.is_some()) {
        Choice::Pay {
            required,
            requirement,
            svm,
        } => (required, requirement, svm),
        Choice::Refuse { quote, declined } => {
            obs.quote = quote.map(|q| *q);
            return refuse(ctx, obs, declined);
        }
    };
    obs.quote = Some(quote_seen(required, requirement));
    if svm {
        return match &ctx.svm {
            Some(pay) => super::paid_svm::pay(ctx, pay, obs, request, requirement, deadline).await,
            None => refuse(ctx, obs, Vec::new()),
        };
    }

    // 3. The 402 again: the price must not have moved.
    if deadline.passed() {
        return deadline_refusal(ctx, obs, requirement);
    }
    let requote = fetch(&verified_fetch_config(ctx), request).await;
    let fresh_parse = requote_parsed(obs.carrier, request, &requote);
    let (seen, judged) = judge_requote(&policy, requirement, &requote, fresh_parse.as_ref());
    obs.requote = Some(seen);
    let Fresh {
        required: fresh_required,
        requirement: fresh_entry,
        priced,
    } = match judged {
        Ok(fresh) => fresh,
        Err(declined) => return refuse(ctx, obs, vec![declined]),
    };
    obs.paid_entry = Some(quote_seen(fresh_required, fresh_entry));

    // 4. We pay only what we can verify.
    if deadline.passed() {
        return deadline_refusal(ctx, obs, fresh_entry);
    }
    let (chain_id, block, balance) = tokio::join!(
        ctx.rpc.chain_id(),
        ctx.rpc.block_number(),
        ctx.rpc.balance_of(priced.asset, ctx.wallet.address()),
    );
    let chain_id_read = chain_id.as_ref().ok().copied();
    let block_before = match judge_chain(&priced, chain_id, block, balance) {
        Ok(block) => block,
        Err(refusal) => return refuse(ctx, obs, vec![Declined::new(refusal, Some(fresh_entry))]),
    };
    let chain_id = chain_id_read.unwrap_or(priced.chain_id);

    // 5. Reserve (durably), sign that reservation, send.
    let reserve_request = ReserveRequest {
        subject: url,
        requirement: fresh_entry,
        payer: ctx.wallet.address(),
        from_block: Some(block_before),
    };
    let reservation =
        match ctx
            .store
            .reserve(&ctx.policy.current(), &reserve_request, ctx.wall.now())
        {
            Ok(reservation) => reservation,
            Err(e) => return not_reserved(obs, e),
        };
    let id = reservation.id();
    ctx.step(PaidStep::Reserved { id });
    let signed = match ctx.wallet.sign(&reservation) {
        Ok(signed) => signed,
        Err(e) => {
            release_unsent(ctx, &mut obs, reservation, &format!("signing failed: {e}"));
            obs.decision = Decision::Failed {
                stage: "sign".into(),
                error: e.to_string(),
            };
            return obs;
        }
    };
    ctx.step(PaidStep::Signed { id });
    let header = match build_payment_header(
        fresh_required,
        fresh_entry,
        &signed.authorization,
        &signed.signature,
    ) {
        Ok(header) => header,
        Err(e) => {
            release_unsent(
                ctx,
                &mut obs,
                reservation,
                &format!("building the header: {e}"),
            );
            obs.decision = Decision::Failed {
                stage: "payment header".into(),
                error: e.to_string(),
            };
            return obs;
        }
    };
    if deadline.passed() {
        release_unsent(ctx, &mut obs, reservation, DEADLINE_PASSED);
        obs.decision = Decision::Failed {
            stage: "deadline".into(),
            error: "the paid part's deadline passed before the payment was sent; nothing was sent"
                .into(),
        };
        return obs;
    }
    obs.payment = Some(payment_sent(
        &Signed {
            reservation_id: id,
            cost: reservation.cost(),
            authorization: &signed.authorization,
            domain: &signed.domain,
            signature: &signed.signature,
            header_name: header.name,
            header_value: &header.value,
            payment_id: header.payment_id.as_deref(),
        },
        ctx.clock.now(),
    ));
    obs.decision = Decision::Paid { reservation_id: id };
    obs.chain = Some(chain_before(
        ctx.rpc.url(),
        chain_id,
        block_before,
        ctx.options.confirmations,
    ));

    if let Some(why) = send(ctx, &mut obs, request, header.name, header.value, id).await {
        release_unsent(ctx, &mut obs, reservation, &why);
    }
    obs
}

/// Step 5's last act, on either network: the paid request with the payment header, its answer
/// and settlement header recorded. `Some(why)` when the payment certainly never left this
/// process (then the caller releases the reservation).
pub(super) async fn send(
    ctx: &PaidContext<'_>,
    obs: &mut PaidObservation,
    request: &FetchRequest,
    header_name: &'static str,
    header_value: String,
    id: i64,
) -> Option<String> {
    let paid_request = match paid_request(obs.carrier, request, header_name, &header_value) {
        Ok(paid_request) => paid_request,
        Err(why) => {
            obs.notes.push(format!("the paid request: {why}"));
            return Some(why);
        }
    };
    ctx.step(PaidStep::Sending { id });
    let exchange = fetch(&paid_fetch_config(ctx), &paid_request).await;
    ctx.step(PaidStep::Responded { id });
    let unsent = never_sent(&exchange).then(|| {
        exchange
            .error
            .as_ref()
            .map(|e| e.to_string())
            .unwrap_or_default()
    });
    obs.settlement = settlement_by(obs.carrier, &paid_request, &exchange);
    obs.paid = Some(exchange);
    if unsent.is_none() {
        recheck_pending(ctx, obs, &paid_request).await;
    }
    unsent
}

/// While the paid answer's settlement says `settlement_pending` (not terminal), send the very
/// same paid request again (the same payment: nothing new is reserved or signed) every poll
/// interval until the outcome is final or the receipt wait ends (bounded by the paid part's
/// deadline, counted from the first answer); each pending answer is kept, the last one is the
/// call's answer.
async fn recheck_pending(ctx: &PaidContext<'_>, obs: &mut PaidObservation, request: &FetchRequest) {
    let until = tokio::time::Instant::now()
        + Duration::from_millis(ctx.options.receipt_wait_ms.min(ctx.options.deadline_ms));
    while obs.settlement.as_ref().is_some_and(SettlementSeen::pending)
        && obs.pending.len() < MAX_PENDING_RECHECKS
    {
        let wake =
            tokio::time::Instant::now() + Duration::from_millis(ctx.options.poll_interval_ms);
        if wake >= until {
            break;
        }
        tokio::time::sleep_until(wake).await;
        let exchange = fetch(&paid_fetch_config(ctx), request).await;
        let settlement = settlement_by(obs.carrier, request, &exchange);
        if let (Some(previous), previous_settlement) =
            (obs.paid.replace(exchange), obs.settlement.take())
        {
            obs.pending.push(crate::evidence::paid::PendingSeen {
                exchange: previous,
                settlement: previous_settlement,
            });
        }
        obs.settlement = settlement;
    }
}

/// Re-checks of a pending settlement at most (each one answer kept in the observation).
const MAX_PENDING_RECHECKS: usize = 30;

async fn verify_until(ctx: &PaidContext<'_>, obs: &mut PaidObservation, deadline: Deadline) {
    if let (Some(_), Some(pay)) = (&obs.svm, &ctx.svm) {
        return super::paid_svm::verify(ctx, pay, obs, deadline).await;
    }
    let Some(payment) = obs.payment.clone() else {
        return;
    };
    read_chain(ctx, obs, &payment, deadline).await;
    replay(ctx, obs, &payment, deadline).await;
    update_reservation(ctx, obs, &payment).await;
    ctx.step(PaidStep::Verified {
        id: payment.reservation_id,
    });
}

/// The decision when the store did not reserve, on either network: refused by a cap (the store
/// recorded it, inside the transaction that read the totals), or failed.
pub(super) fn not_reserved(mut obs: PaidObservation, e: ReserveError) -> PaidObservation {
    obs.decision = match e {
        ReserveError::Refused(refusal) => Decision::Refused {
            refusals: vec![refusal],
        },
        ReserveError::Store(e) => Decision::Failed {
            stage: "reserve".into(),
            error: e.to_string(),
        },
    };
    obs
}

pub(super) fn refuse(
    ctx: &PaidContext<'_>,
    mut obs: PaidObservation,
    declined: Vec<Declined>,
) -> PaidObservation {
    let now = ctx.wall.now();
    let mut refusals = Vec::with_capacity(declined.len());
    for d in declined {
        if let Err(e) =
            ctx.store
                .record_refusal(&obs.subject, &d.refusal, d.entry_json.as_deref(), now)
        {
            obs.notes.push(format!("recording a refusal: {e}"));
        }
        refusals.push(d.refusal);
    }
    obs.decision = Decision::Refused { refusals };
    obs
}

pub(super) fn deadline_refusal(
    ctx: &PaidContext<'_>,
    obs: PaidObservation,
    entry: &crate::x402::types::Requirement,
) -> PaidObservation {
    let refusal = Refusal::new(
        crate::spend::RefusalCode::DeadlinePassed,
        "the paid part's deadline passed before the payment could be made; nothing was signed",
    );
    refuse(ctx, obs, vec![Declined::new(refusal, Some(entry))])
}

fn release_unsent(
    ctx: &PaidContext<'_>,
    obs: &mut PaidObservation,
    reservation: crate::spend::Reservation,
    why: &str,
) {
    if let Err(e) = ctx.store.release_unsent(reservation, why, ctx.wall.now()) {
        obs.notes.push(format!(
            "releasing an unsent reservation failed (it stays open and counted): {e}"
        ));
    }
}

/// The fetch settings for the quote we pay from: the endpoint's own, except that an unverified TLS
/// chain always stops the exchange (a caller observing invalid TLS for S1 must not pay through it:
/// whoever sits in the middle could take the signed authorization and never deliver).
pub(super) fn verified_fetch_config(ctx: &PaidContext<'_>) -> FetchConfig {
    let mut cfg = ctx.fetch.clone();
    cfg.observe_invalid_tls = false;
    cfg
}

/// The fetch settings for the paid request: as for the quote, with room for settlement.
fn paid_fetch_config(ctx: &PaidContext<'_>) -> FetchConfig {
    let mut cfg = verified_fetch_config(ctx);
    cfg.timeouts.first_byte_ms = ctx.options.paid_timeout_ms;
    cfg.timeouts.overall_ms = ctx
        .options
        .paid_timeout_ms
        .saturating_add(cfg.timeouts.body_ms)
        .saturating_add(cfg.timeouts.connect_ms)
        .saturating_add(cfg.timeouts.tls_ms)
        .saturating_add(cfg.timeouts.dns_ms);
    cfg
}

/// Polls for a receipt until it appears or the wait (bounded by the deadline) ends.
async fn wait_receipt(
    ctx: &PaidContext<'_>,
    tx: B256,
    deadline: Deadline,
) -> Result<Option<TxReceipt>, RpcError> {
    let until = deadline.or_within_ms(ctx.options.receipt_wait_ms);
    loop {
        if let Some(receipt) = ctx.rpc.receipt(tx).await? {
            return Ok(Some(receipt));
        }
        if tokio::time::Instant::now() >= until {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(ctx.options.poll_interval_ms)).await;
    }
}

/// Logs over an inclusive block range; an empty range reads nothing.
pub(crate) async fn logs_between(
    rpc: &Rpc,
    asset: Address,
    topics: &[Option<B256>],
    from_block: u64,
    to_block: u64,
) -> Result<Vec<LogEntry>, RpcError> {
    if from_block > to_block {
        return Ok(Vec::new());
    }
    rpc.logs(asset, topics, from_block, to_block).await
}

/// Step 6a: where did the money go.
async fn read_chain(
    ctx: &PaidContext<'_>,
    obs: &mut PaidObservation,
    payment: &PaymentSent,
    deadline: Deadline,
) {
    let Some(mut chain) = obs.chain.take() else {
        return;
    };
    let wallet = obs.wallet;
    let asset = payment.asset;
    let nonce = payment.authorization.nonce;
    let Some(block_before) = chain.block_before.value().copied() else {
        obs.chain = Some(chain);
        return;
    };

    chain.claimed_receipt = match obs.settlement.as_ref().and_then(|s| s.transaction_hash()) {
        Some(tx) => ChainRead::from_result(wait_receipt(ctx, tx, deadline).await),
        None => ChainRead::skipped("the settlement response names no transaction"),
    };

    let mut waited = false;
    loop {
        if deadline.passed() {
            // What was read stands; what was not is marked, never guessed.
            let mark = |read: &mut ChainRead<_>| {
                if matches!(read, ChainRead::Skipped { .. }) {
                    *read = ChainRead::skipped(DEADLINE_PASSED);
                }
            };
            mark(&mut chain.block_after);
            break;
        }
        let block_after = ctx.rpc.block_number().await;
        chain.block_after = ChainRead::from_result(block_after.clone());
        let Ok(block_after) = block_after else {
            let why = "the block number after the call could not be read";
            chain.authorizations_used = ChainRead::skipped(why);
            chain.nonce_receipt = ChainRead::skipped(why);
            chain.transfers_from_wallet = ChainRead::skipped(why);
            chain.authorization_state =
                ChainRead::from_result(ctx.rpc.authorization_state(asset, wallet, nonce).await);
            break;
        };
        let used_topics = [Some(AUTHORIZATION_USED_TOPIC), Some(wallet.into_word())];
        let transfer_topics = [Some(TRANSFER_TOPIC), Some(wallet.into_word())];
        let (used, state, transfers) = tokio::join!(
            logs_between(ctx.rpc, asset, &used_topics, block_before + 1, block_after),
            ctx.rpc.authorization_state(asset, wallet, nonce),
            logs_between(
                ctx.rpc,
                asset,
                &transfer_topics,
                block_before + 1,
                block_after
            ),
        );
        chain.authorizations_used = ChainRead::from_result(used);
        chain.authorization_state = ChainRead::from_result(state);
        chain.transfers_from_wallet = ChainRead::from_result(transfers);
        chain.nonce_receipt = match (&chain.authorizations_used, nonce_transaction(&chain, nonce)) {
            (ChainRead::Read { .. }, Some(tx)) => ChainRead::from_result(ctx.rpc.receipt(tx).await),
            (ChainRead::Read { .. }, None) => ChainRead::Read { value: None },
            (other, _) => ChainRead::skipped(format!(
                "AuthorizationUsed logs unread: {}",
                other.missing_because().unwrap_or("")
            )),
        };
        chain.settlement_depth =
            settlement_block(&chain).map(|b| block_after.saturating_sub(b).saturating_add(1));
        let Some(target) = confirmation_target(&chain, waited) else {
            break;
        };
        // Wait for the confirmations, then read everything again at that depth.
        waited = true;
        let until = deadline.or_within_ms(ctx.options.receipt_wait_ms);
        while tokio::time::Instant::now() < until {
            match ctx.rpc.block_number().await {
                Ok(latest) if latest >= target => break,
                Ok(_) => {}
                Err(_) => break,
            }
            tokio::time::sleep(Duration::from_millis(ctx.options.poll_interval_ms)).await;
        }
    }
    obs.chain = Some(chain);
}

/// Step 6b: send the same payment again, only once our authorization is spent on chain (so an
/// honest token cannot move money for it again), and see whether any more money left.
async fn replay(
    ctx: &PaidContext<'_>,
    obs: &mut PaidObservation,
    payment: &PaymentSent,
    deadline: Deadline,
) {
    if obs.chain.is_none() {
        return;
    }
    let skip = |why: &str| ReplaySeen {
        exchange: None,
        skipped: Some(why.to_string()),
        block_after: ChainRead::skipped(why),
        transfers_after: ChainRead::skipped(why),
        authorizations_used_after: ChainRead::skipped(why),
    };
    let first_window_end = match replay_plan(ctx.options.replay, obs) {
        Ok(block) if !deadline.passed() => block,
        Ok(_) => {
            obs.replay = Some(skip(DEADLINE_PASSED));
            return;
        }
        Err(why) => {
            obs.replay = Some(skip(&why));
            return;
        }
    };
    let request = match paid_request(
        obs.carrier,
        &obs.request,
        &payment.header_name,
        &payment.header_value,
    ) {
        Ok(request) => request,
        Err(why) => {
            obs.replay = Some(skip(&why));
            return;
        }
    };
    let exchange = fetch(&paid_fetch_config(ctx), &request).await;
    let block_after = ctx.rpc.block_number().await;
    let (transfers_after, authorizations_used_after) = match &block_after {
        Ok(to) => {
            let wallet = obs.wallet.into_word();
            let transfer_topics = [Some(TRANSFER_TOPIC), Some(wallet)];
            let used_topics = [Some(AUTHORIZATION_USED_TOPIC), Some(wallet)];
            let (transfers, used) = tokio::join!(
                logs_between(
                    ctx.rpc,
                    payment.asset,
                    &transfer_topics,
                    first_window_end + 1,
                    *to,
                ),
                logs_between(
                    ctx.rpc,
                    payment.asset,
                    &used_topics,
                    first_window_end + 1,
                    *to,
                ),
            );
            (
                ChainRead::from_result(transfers),
                ChainRead::from_result(used),
            )
        }
        Err(e) => (
            ChainRead::skipped(format!("block number unread: {e}")),
            ChainRead::skipped(format!("block number unread: {e}")),
        ),
    };
    obs.replay = Some(ReplaySeen {
        exchange: Some(exchange),
        skipped: None,
        block_after: ChainRead::from_result(block_after),
        transfers_after,
        authorizations_used_after,
    });
}

/// Step 7: the reservation's fate, from what the chain showed. Settled when our authorization is
/// spent; released only when it provably never can be (unused after `validBefore` by our clock and
/// the chain's); otherwise left open for a later reconciliation. Runs whatever the deadline: the
/// record of money is never cut short.
async fn update_reservation(
    ctx: &PaidContext<'_>,
    obs: &mut PaidObservation,
    payment: &PaymentSent,
) {
    let id = payment.reservation_id;
    let now = ctx.wall.now();
    let result = match reservation_fate(obs, payment, now) {
        Fate::Settled { tx, why } => ctx.store.mark_settled(id, tx, why, now).map(|_| ()),
        Fate::ReleaseIfChainPast { valid_before } => match ctx.rpc.latest_timestamp().await {
            Ok(chain_time) if chain_time >= valid_before => ctx
                .store
                .mark_released(
                    id,
                    "unused on chain after validBefore: it can never be used",
                    now,
                )
                .map(|_| ()),
            _ => Ok(()),
        },
        Fate::KeepOpen => Ok(()),
    };
    let row = ctx
        .store
        .reservation(id)
        .map(|row| row.map(|r| (r.state, r.resolution)));
    record_reservation(obs, id, result, row);
}

/// Step 7's record, on either network: an update that failed is noted, and the reservation as
/// the store now holds it (`row`: its state and resolution) is kept in the observation.
pub(super) fn record_reservation(
    obs: &mut PaidObservation,
    id: i64,
    updated: Result<(), crate::spend::SpendError>,
    row: Result<Option<(crate::spend::ReservationState, Option<String>)>, crate::spend::SpendError>,
) {
    if let Err(e) = updated {
        obs.notes.push(format!("updating reservation {id}: {e}"));
    }
    match row {
        Ok(Some((state, resolution))) => {
            obs.reservation = Some(ReservationSeen {
                id,
                state,
                resolution,
            });
        }
        Ok(None) => obs
            .notes
            .push(format!("reservation {id} is missing from the store")),
        Err(e) => obs.notes.push(format!("reading reservation {id}: {e}")),
    }
}
