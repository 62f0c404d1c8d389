//! The discovery catalogue (`GET /discovery/resources`, paginated as the bazaar is) listing the lab's
//! endpoints with their listed prices, some deliberately different from what their 402 quotes.

use std::sync::Arc;

use anyhow::{Context, Result};
use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// Items per page unless the client asks otherwise, and the most it may ask for.
const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 100;

pub struct RunningCatalogue {
    /// The catalogue's base URL; the listing is at `{url}/discovery/resources`.
    pub url: String,
    _tasks: JoinSet<()>,
}

#[derive(Deserialize)]
struct Page {
    #[serde(rename = "type")]
    kind: Option<String>,
    limit: Option<usize>,
    offset: Option<usize>,
}

pub async fn start(items: Vec<Value>) -> Result<RunningCatalogue> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the catalogue")?;
    let addr = listener.local_addr()?;
    let app = Router::new()
        .route("/discovery/resources", get(list))
        .with_state(Arc::new(items));
    let mut tasks = JoinSet::new();
    tasks.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(RunningCatalogue {
        url: format!("http://{addr}"),
        _tasks: tasks,
    })
}

async fn list(State(items): State<Arc<Vec<Value>>>, Query(page): Query<Page>) -> Json<Value> {
    let limit = page.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let offset = page.offset.unwrap_or(0);
    let matching: Vec<&Value> = items
        .iter()
        .filter(|i| {
            page.kind
                .as_deref()
                .is_none_or(|k| i.get("type").and_then(Value::as_str) == Some(k))
        })
        .collect();
    let page_items: Vec<&Value> = matching.iter().skip(offset).take(limit).copied().collect();
    Json(json!({
        "x402Version": 2,
        "items": page_items,
        "pagination": {"limit": limit, "offset": offset, "total": matching.len()},
    }))
}
