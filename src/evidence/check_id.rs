//! The rubric's check ids: one closed set for the whole crate (rubric, checks, receipts, score
//! documents, metrics labels, calibration), written exactly as the ids of `probes/` (`"R1"`,
//! `"S2"`...), so that typing them changed no stored byte and no digest.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A check this build knows: the id of a file in `probes/` and of a check in the rubric.
///
/// Ordered as its text is (`"C1" < "H1" < "R1" < "S1"`), so a sorted list or map of ids is in the
/// same order it was in while ids were strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CheckId {
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    R7,
    C1,
    C2,
    C3,
    C4,
    C5,
    C6,
    H1,
    H2,
    H3,
    H4,
    H5,
    H6,
    H7,
    H8,
    H9,
    S1,
    S2,
    S3,
    S4,
    S5,
}

/// An id that is not one of [`CheckId::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown check {0:?} (this build knows R1-R7, C1-C6, H1-H9, S1-S5)")]
pub struct UnknownCheck(pub String);

impl CheckId {
    pub const ALL: [CheckId; 27] = [
        CheckId::R1,
        CheckId::R2,
        CheckId::R3,
        CheckId::R4,
        CheckId::R5,
        CheckId::R6,
        CheckId::R7,
        CheckId::C1,
        CheckId::C2,
        CheckId::C3,
        CheckId::C4,
        CheckId::C5,
        CheckId::C6,
        CheckId::H1,
        CheckId::H2,
        CheckId::H3,
        CheckId::H4,
        CheckId::H5,
        CheckId::H6,
        CheckId::H7,
        CheckId::H8,
        CheckId::H9,
        CheckId::S1,
        CheckId::S2,
        CheckId::S3,
        CheckId::S4,
        CheckId::S5,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CheckId::R1 => "R1",
            CheckId::R2 => "R2",
            CheckId::R3 => "R3",
            CheckId::R4 => "R4",
            CheckId::R5 => "R5",
            CheckId::R6 => "R6",
            CheckId::R7 => "R7",
            CheckId::C1 => "C1",
            CheckId::C2 => "C2",
            CheckId::C3 => "C3",
            CheckId::C4 => "C4",
            CheckId::C5 => "C5",
            CheckId::C6 => "C6",
            CheckId::H1 => "H1",
            CheckId::H2 => "H2",
            CheckId::H3 => "H3",
            CheckId::H4 => "H4",
            CheckId::H5 => "H5",
            CheckId::H6 => "H6",
            CheckId::H7 => "H7",
            CheckId::H8 => "H8",
            CheckId::H9 => "H9",
            CheckId::S1 => "S1",
            CheckId::S2 => "S2",
            CheckId::S3 => "S3",
            CheckId::S4 => "S4",
            CheckId::S5 => "S5",
        }
    }

    /// The id written exactly (`"R1"`; `"r1"` is not an id: stored text is never re-cased).
    pub fn parse(text: &str) -> Result<CheckId, UnknownCheck> {
        CheckId::ALL
            .into_iter()
            .find(|c| c.as_str() == text)
            .ok_or_else(|| UnknownCheck(text.to_string()))
    }
}

impl std::fmt::Display for CheckId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, not `write_str`: a width (`{:<3}` in the reports' tables) applies as to the text.
        f.pad(self.as_str())
    }
}

impl std::str::FromStr for CheckId {
    type Err = UnknownCheck;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CheckId::parse(s)
    }
}

impl PartialOrd for CheckId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for CheckId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialEq<str> for CheckId {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for CheckId {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for CheckId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for CheckId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        CheckId::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_round_trips_through_its_text_and_json() {
        for id in CheckId::ALL {
            assert_eq!(CheckId::parse(id.as_str()), Ok(id));
            assert_eq!(id.to_string(), id.as_str());
            assert_eq!(format!("{id:<4}|"), format!("{:<4}|", id.as_str()));
            let json = serde_json::to_string(&id).unwrap();
            assert_eq!(json, format!("\"{}\"", id.as_str()));
            assert_eq!(serde_json::from_str::<CheckId>(&json).unwrap(), id);
        }
        let distinct: std::collections::BTreeSet<&str> =
            CheckId::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(distinct.len(), CheckId::ALL.len());
    }

    #[test]
    fn unknown_ids_are_refused_by_name() {
        for text in ["R8", "r1", " R1", "", "R1 OR 1=1"] {
            assert_eq!(CheckId::parse(text), Err(UnknownCheck(text.to_string())));
        }
        let e = serde_json::from_str::<CheckId>("\"Z9\"").unwrap_err();
        assert!(e.to_string().contains("unknown check \"Z9\""), "{e}");
    }

    #[test]
    fn ids_order_as_their_text() {
        let mut ids = CheckId::ALL.to_vec();
        ids.sort();
        let mut texts: Vec<&str> = CheckId::ALL.iter().map(|c| c.as_str()).collect();
        texts.sort();
        assert_eq!(ids.iter().map(|c| c.as_str()).collect::<Vec<_>>(), texts);
    }
}
