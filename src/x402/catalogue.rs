//! One page of a discovery catalogue (the listing of x402 resources a facilitator publishes), read
//! the same way by `probe` (looking for its subject) and by the daemon (building its population).
//! Pure: bytes in, the page's items and announced total out. The page is read whole by serde_json
//! within the caller's byte budget; the fields we look at are `items`, `items[].resource`,
//! `items[].accepts[].network` and `pagination.total`, each by key, so nothing else needs parsing.

use serde_json::Value;

/// Why a page could not be read. The message is a predicate: the caller names the page ("page 3
/// is not JSON").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    #[error("is not JSON")]
    NotJson,
    #[error("has no items array")]
    NoItems,
}

/// A catalogue page: its items as published, and the total the catalogue announces.
#[derive(Debug, Clone, PartialEq)]
pub struct CataloguePage {
    pub items: Vec<Value>,
    /// `pagination.total`, 0 when absent or not a whole number (the caller then stops at the
    /// first short or empty page).
    pub total: usize,
}

/// Reads one page.
pub fn read_page(body: &[u8]) -> Result<CataloguePage, PageError> {
    let page: Value = serde_json::from_slice(body).map_err(|_| PageError::NotJson)?;
    let total = page
        .pointer("/pagination/total")
        .and_then(Value::as_u64)
        .map_or(0, |t| usize::try_from(t).unwrap_or(usize::MAX));
    let Value::Object(mut page) = page else {
        return Err(PageError::NoItems);
    };
    match page.remove("items") {
        Some(Value::Array(items)) => Ok(CataloguePage { items, total }),
        _ => Err(PageError::NoItems),
    }
}

/// An item's `resource`, when it is a string.
pub fn item_resource(item: &Value) -> Option<&str> {
    item.get("resource").and_then(Value::as_str)
}

/// The networks an item's `accepts` entries quote (entries without one are skipped).
pub fn item_networks(item: &Value) -> Vec<&str> {
    item.get("accepts")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|e| e.get("network").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_page_gives_its_items_and_total() {
        let body = json!({
            "items": [
                {"resource": "https://a.test/x", "accepts": [{"network": "base"}, {"scheme": "exact"}]},
                {"resource": 7},
            ],
            "pagination": {"total": 12, "limit": 2, "offset": 0},
        });
        let page = read_page(body.to_string().as_bytes()).unwrap();
        assert_eq!(page.total, 12);
        assert_eq!(page.items.len(), 2);
        assert_eq!(item_resource(&page.items[0]), Some("https://a.test/x"));
        assert_eq!(item_networks(&page.items[0]), vec!["base"]);
        assert_eq!(item_resource(&page.items[1]), None);
        assert!(item_networks(&page.items[1]).is_empty());
    }

    #[test]
    fn a_missing_or_odd_total_is_zero() {
        for body in [
            r#"{"items": []}"#,
            r#"{"items": [], "pagination": {"total": -1}}"#,
            r#"{"items": [], "pagination": {"total": "9"}}"#,
            r#"{"items": [], "pagination": 3}"#,
        ] {
            assert_eq!(read_page(body.as_bytes()).unwrap().total, 0, "{body}");
        }
    }

    #[test]
    fn pages_that_cannot_be_read_say_why() {
        assert_eq!(read_page(b"<html>"), Err(PageError::NotJson));
        assert_eq!(read_page(b""), Err(PageError::NotJson));
        assert_eq!(read_page(b"[1,2]"), Err(PageError::NoItems));
        assert_eq!(read_page(br#"{"items": {}}"#), Err(PageError::NoItems));
        assert_eq!(read_page(br#"{"data": []}"#), Err(PageError::NoItems));
    }
}
