//! What a free run fetched for the findings peers publish (`probes/findings/`): the subject asked
//! for as a browser asks (`Accept: text/html`), and the usual places of a machine-readable
//! description when the 402 carries none. Plain data, stored with the run's observation (left out
//! of the stored form when absent, so earlier runs keep their bytes), read by `checks::findings`.

use serde::{Deserialize, Serialize};

use super::http::Sample;

/// The paths asked for a machine-readable description, in order, at the subject's origin; the
/// first that answers 200 ends the search.
pub const DESCRIPTION_PATHS: [&str; 2] = ["/openapi.json", "/.well-known/openapi.json"];

/// The `Accept` header of the browser's request.
pub const BROWSER_ACCEPT: &str = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8";

/// What the free run fetched for the findings, after the samples and the operator file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PeersSeen {
    /// The subject asked for with a browser's `Accept` header; `None` when not asked (see
    /// `skipped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub browser: Option<Sample>,
    /// The usual places of a description asked, in order ([`DESCRIPTION_PATHS`]), until one
    /// answered 200. Empty when the 402 describes itself (nothing to look for) or not asked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub descriptions: Vec<Sample>,
    /// Why nothing was asked, when nothing was: the first unpaid request got no clean 402, or
    /// the run's deadline passed first (ours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// The run's deadline passed before these were all asked (ours).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut_short: bool,
}

impl PeersSeen {
    /// Nothing asked, with why.
    pub fn skipped(why: impl Into<String>) -> PeersSeen {
        PeersSeen {
            skipped: Some(why.into()),
            ..PeersSeen::default()
        }
    }
}
