//! The kinds of webhook event, as the outbox keeps them: a leaf, so that the configuration and the
//! store name them without depending on the webhook machinery (`webhook` hands them on).

use serde::{Deserialize, Serialize};

/// What a webhook can be told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A subject's published verdict differs from its previous score's.
    VerdictChanged,
    /// A gate binds in a subject's new score that did not bind in its previous one.
    GateBinding,
    /// A new revision of a subject declares another payTo than the revision before.
    PayToChanged,
}

impl EventKind {
    pub const ALL: [EventKind; 3] = [
        EventKind::VerdictChanged,
        EventKind::GateBinding,
        EventKind::PayToChanged,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::VerdictChanged => "verdict_changed",
            EventKind::GateBinding => "gate_binding",
            EventKind::PayToChanged => "pay_to_changed",
        }
    }

    /// The kind a stored row names (its `as_str` spelling only); `None` for any other text,
    /// which the reader reports as corrupt.
    pub fn parse(text: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_as_written() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::parse(kind.as_str()), Some(kind));
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
            assert_eq!(serde_json::from_str::<EventKind>(&json).unwrap(), kind);
        }
        assert_eq!(EventKind::parse("verdict-changed"), None);
    }
}
