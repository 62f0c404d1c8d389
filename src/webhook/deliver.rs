//! The delivery task: posts what the outbox holds, oldest first, and records each attempt.
//!
//! An attempt that gets a 2xx answer marks the event delivered. Any other answer, a timeout or a
//! connection error is retried after an exponential backoff (the destination's initial delay,
//! doubled at each attempt up to its maximum) with jitter (a random half to all of it), until
//! the destination's attempts are spent: the event is then marked dead, logged and counted.
//! Retries run on the wall clock, whatever clock the daemon's schedule runs on. Everything is in
//! the store, so a restart resumes exactly: an event posted but not yet marked when the process
//! died is posted again with the same id (at least once).

use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::metrics::{DeliveryResult, Metrics};
use crate::store::{OutboxRow, OutboxUpdate, Store};

use super::{
    Destination, EVENT_ID_HEADER, EVENT_TYPE_HEADER, SIGNATURE_HEADER, Webhooks, signature,
};

/// What the delivery task works through, and all it knows of the daemon that runs it: the store
/// holding the outbox, the wall clock retries run on, the destinations and the metrics.
pub trait Courier: Send + Sync + 'static {
    fn store(&self) -> &Arc<dyn Store>;
    fn wall(&self) -> &dyn Clock;
    fn webhooks(&self) -> &Webhooks;
    fn metrics(&self) -> &Metrics;
}

/// Events read from the outbox at a time.
const BATCH: usize = 64;
/// The longest the task sleeps without looking at the outbox.
const IDLE: Duration = Duration::from_secs(30);

/// The outbound client: plain, no redirects followed (a receiver answers itself), no proxy from
/// the environment.
pub fn client() -> Result<reqwest::Client, super::WebhookError> {
    crate::install_crypto_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent(concat!(
            "x402-probe/",
            env!("CARGO_PKG_VERSION"),
            " webhook"
        ))
        .build()
        .map_err(|e| super::WebhookError::Client(e.to_string()))
}

/// Runs until aborted: delivers what is due, then sleeps until the next retry is due or new
/// events are committed.
pub async fn run(courier: Arc<impl Courier>) {
    let client = match client() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "webhooks disabled");
            return;
        }
    };
    loop {
        match deliver_due(courier.as_ref(), &client).await {
            Ok(0) => {}
            Ok(_) => continue,
            Err(e) => tracing::error!(error = %e, "reading the webhook outbox failed"),
        }
        let now = courier.wall().now_ms();
        let store = courier.store().clone();
        let next = tokio::task::spawn_blocking(move || store.outbox_next_due())
            .await
            .ok()
            .and_then(Result::ok)
            .flatten();
        let wait = next.map_or(IDLE, |due| {
            Duration::from_millis((due - now).clamp(0, IDLE.as_millis() as i64) as u64)
        });
        if wait.is_zero() {
            continue;
        }
        tokio::select! {
            _ = courier.webhooks().wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// One pass: every event due now, posted once. Returns how many were attempted.
pub async fn deliver_due(
    courier: &impl Courier,
    client: &reqwest::Client,
) -> Result<usize, crate::store::StoreError> {
    let now = courier.wall().now_ms();
    let store = courier.store().clone();
    let due = tokio::task::spawn_blocking(move || store.outbox_due(now, BATCH))
        .await
        .unwrap_or_else(|e| {
            Err(crate::store::StoreError::Corrupt {
                path: "outbox".into(),
                why: e.to_string(),
            })
        })?;
    let attempted = due.len();
    for row in due {
        let update = match courier
            .webhooks()
            .destinations()
            .iter()
            .find(|d| d.url == row.event.webhook)
        {
            None => {
                tracing::warn!(event = %row.event.event_id, webhook = %row.event.webhook, "webhook no longer configured: event dropped");
                courier.metrics().delivery(DeliveryResult::Dead);
                OutboxUpdate::Dead {
                    attempts: row.attempts,
                    at_ms: courier.wall().now_ms(),
                    error: "the webhook is no longer configured".into(),
                }
            }
            Some(dest) => attempt(courier, client, dest, &row).await,
        };
        let store = courier.store().clone();
        let id = row.id;
        tokio::task::spawn_blocking(move || store.outbox_update(id, &update))
            .await
            .unwrap_or_else(|e| {
                Err(crate::store::StoreError::Corrupt {
                    path: "outbox".into(),
                    why: e.to_string(),
                })
            })?;
    }
    Ok(attempted)
}

/// Posts one event once and says what to record.
async fn attempt(
    courier: &impl Courier,
    client: &reqwest::Client,
    dest: &Destination,
    row: &OutboxRow,
) -> OutboxUpdate {
    let attempts = row.attempts.saturating_add(1);
    let sent_s = courier.wall().now_ms().div_euclid(1000);
    let result = client
        .post(&dest.url)
        .timeout(Duration::from_millis(dest.options.timeout_ms))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(EVENT_ID_HEADER, &row.event.event_id)
        .header(EVENT_TYPE_HEADER, row.event.kind.as_str())
        .header(
            SIGNATURE_HEADER,
            signature(&dest.secret, sent_s, &row.event.body),
        )
        .body(row.event.body.clone())
        .send()
        .await;
    let error = match result {
        Ok(response) if response.status().is_success() => {
            courier.metrics().delivery(DeliveryResult::Delivered);
            tracing::info!(event = %row.event.event_id, webhook = %dest.url, attempts, "webhook delivered");
            return OutboxUpdate::Delivered {
                attempts,
                at_ms: courier.wall().now_ms(),
            };
        }
        Ok(response) => format!("HTTP {}", response.status().as_u16()),
        Err(e) => without_url(&e),
    };
    let now = courier.wall().now_ms();
    if attempts >= dest.options.max_attempts {
        courier.metrics().delivery(DeliveryResult::Dead);
        tracing::error!(event = %row.event.event_id, webhook = %dest.url, attempts, error = %error, "webhook event dead: every attempt failed");
        OutboxUpdate::Dead {
            attempts,
            at_ms: now,
            error,
        }
    } else {
        courier.metrics().delivery(DeliveryResult::Retried);
        let delay = backoff_ms(&dest.options, attempts, rand::random::<f64>());
        tracing::warn!(event = %row.event.event_id, webhook = %dest.url, attempts, retry_in_ms = delay, error = %error, "webhook attempt failed");
        OutboxUpdate::Retry {
            attempts,
            next_attempt_ms: now.saturating_add(delay as i64),
            error,
        }
    }
}

/// The wait before the attempt after `attempts` failed ones: the initial delay doubled per
/// failure, at most the maximum, then between half and all of it (`unit` in [0, 1)).
pub fn backoff_ms(options: &super::DeliveryOptions, attempts: u32, unit: f64) -> u64 {
    let doubled = options
        .retry_initial_ms
        .saturating_mul(1u64 << attempts.saturating_sub(1).min(40));
    let ceiling = doubled.min(options.retry_max_ms.max(options.retry_initial_ms));
    let unit = unit.clamp(0.0, 1.0);
    ((ceiling as f64) * (0.5 + 0.5 * unit)).round() as u64
}

/// A client error's text without the URL (it may carry a token in its query).
fn without_url(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else if e.is_request() {
        "the request failed"
    } else {
        "failed"
    };
    let mut text = kind.to_string();
    let mut source = std::error::Error::source(e);
    if let Some(s) = source.take() {
        text.push_str(": ");
        text.push_str(&s.to_string());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::DeliveryOptions;

    #[test]
    fn backoff_doubles_up_to_the_maximum_with_jitter_between_half_and_all() {
        let o = DeliveryOptions {
            max_attempts: 10,
            retry_initial_ms: 1_000,
            retry_max_ms: 60_000,
            timeout_ms: 1_000,
        };
        assert_eq!(backoff_ms(&o, 1, 0.999_999), 1_000);
        assert_eq!(backoff_ms(&o, 1, 0.0), 500);
        assert_eq!(backoff_ms(&o, 3, 0.999_999), 4_000);
        assert_eq!(backoff_ms(&o, 30, 0.999_999), 60_000);
        assert_eq!(backoff_ms(&o, u32::MAX, 0.0), 30_000);
    }
}
