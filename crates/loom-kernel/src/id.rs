//! Execution identifiers.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The longest execution id accepted, in bytes.
pub const MAX_EXECUTION_ID_LEN: usize = 256;

/// The id of one execution, and so of one event log.
///
/// Non-empty, at most [`MAX_EXECUTION_ID_LEN`] bytes, no `:` (the separator of idempotency keys
/// `executionId:stepId`), and nothing that shows one text as another: no control or format
/// character (bidirectional overrides such as U+202E, zero-width characters) and no line or
/// paragraph separator (U+2028, U+2029). An id is compared byte for byte, so two spellings
/// Unicode calls canonically equal (`é` as one code point or as `e` and a combining accent)
/// would be two executions: an id must be in Normalization Form C, the form almost every
/// source produces, and an id in another form is refused rather than silently rewritten.
///
/// Ids read back from a store are checked by the rules they were written under (no control
/// character, no `:`), so that a log recorded before these rules still reads. Cheap to clone.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ExecutionId(Arc<str>);

/// Why a string is not an [`ExecutionId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidExecutionId {
    /// The id is empty.
    #[error("execution id is empty")]
    Empty,
    /// The id is longer than [`MAX_EXECUTION_ID_LEN`] bytes.
    #[error("execution id is {len} bytes long; at most {MAX_EXECUTION_ID_LEN} are allowed")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The id is not in Normalization Form C (see [`ExecutionId`]).
    #[error("execution id {id:?} is not in Unicode Normalization Form C; normalize it (NFC) first")]
    NotNormalized {
        /// The id given.
        id: String,
    },
    /// The id holds a character that is not allowed.
    #[error("execution id {id:?} contains {found:?}, which is not allowed")]
    ForbiddenChar {
        /// The id given.
        id: String,
        /// The character refused.
        found: char,
    },
}

impl ExecutionId {
    /// Checks `id` and wraps it.
    pub fn new(id: impl AsRef<str>) -> Result<Self, InvalidExecutionId> {
        let id = id.as_ref();
        Self::check_stored(id)?;
        if let Some(found) = id.chars().find(|&c| hides_text(c)) {
            return Err(InvalidExecutionId::ForbiddenChar {
                id: id.to_owned(),
                found,
            });
        }
        if !is_nfc(id) {
            return Err(InvalidExecutionId::NotNormalized { id: id.to_owned() });
        }
        Ok(Self(Arc::from(id)))
    }

    /// An id read back from a store or a recorded log: checked by the rules every release has
    /// kept (not empty, at most [`MAX_EXECUTION_ID_LEN`] bytes, no control character, no `:`),
    /// not by the later ones [`ExecutionId::new`] adds, so that what was recorded still reads.
    pub fn from_stored(id: impl AsRef<str>) -> Result<Self, InvalidExecutionId> {
        let id = id.as_ref();
        Self::check_stored(id)?;
        Ok(Self(Arc::from(id)))
    }

    fn check_stored(id: &str) -> Result<(), InvalidExecutionId> {
        if id.is_empty() {
            return Err(InvalidExecutionId::Empty);
        }
        if id.len() > MAX_EXECUTION_ID_LEN {
            return Err(InvalidExecutionId::TooLong { len: id.len() });
        }
        if let Some(found) = id.chars().find(|c| c.is_control() || *c == ':') {
            return Err(InvalidExecutionId::ForbiddenChar {
                id: id.to_owned(),
                found,
            });
        }
        Ok(())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether `c` changes how the text around it shows without showing itself: a control
/// character, a line or paragraph separator (U+2028, U+2029), or a format character (Unicode
/// category Cf: bidirectional controls such as U+202E, zero-width characters, the soft hyphen,
/// tag characters). The Cf ranges are Unicode 16's, listed here rather than taken from a
/// crate: the category is small and changes rarely.
pub(crate) fn hides_text(c: char) -> bool {
    const FORMAT: &[(u32, u32)] = &[
        (0x00AD, 0x00AD),
        (0x0600, 0x0605),
        (0x061C, 0x061C),
        (0x06DD, 0x06DD),
        (0x070F, 0x070F),
        (0x0890, 0x0891),
        (0x08E2, 0x08E2),
        (0x180E, 0x180E),
        (0x200B, 0x200F),
        (0x2028, 0x202E),
        (0x2060, 0x2064),
        (0x2066, 0x206F),
        (0xFEFF, 0xFEFF),
        (0xFFF9, 0xFFFB),
        (0x110BD, 0x110BD),
        (0x110CD, 0x110CD),
        (0x13430, 0x1343F),
        (0x1BCA0, 0x1BCA3),
        (0x1D173, 0x1D17A),
        (0xE0001, 0xE0001),
        (0xE0020, 0xE007F),
    ];
    if c.is_ascii() {
        return c.is_ascii_control();
    }
    let code = u32::from(c);
    c.is_control()
        || FORMAT
            .iter()
            .any(|&(first, last)| (first..=last).contains(&code))
}

/// Whether `text` is in Unicode Normalization Form C.
pub(crate) fn is_nfc(text: &str) -> bool {
    // ASCII is always NFC: most ids need no table lookup.
    text.is_ascii() || unicode_normalization::is_nfc(text)
}

/// The separator of an idempotency key, which no execution id contains.
const KEY_SEPARATOR: char = ':';

/// The idempotency key of a step, `executionId:stepId` (K9): the same on every attempt and
/// after every crash, never random. This is the one place the format is written; effects read
/// it from their call, operators from the listing of steps in doubt, and the A2UI plugin names
/// its calls with it.
pub fn idempotency_key(execution: &ExecutionId, step_id: &str) -> String {
    let mut key = String::with_capacity(execution.as_str().len() + 1 + step_id.len());
    key.push_str(execution.as_str());
    key.push(KEY_SEPARATOR);
    key.push_str(step_id);
    key
}

/// An idempotency key split into its execution id and step id, or `None` when `key` is not
/// one. Execution ids hold no `:`, so the first one separates them.
pub fn split_idempotency_key(key: &str) -> Option<(ExecutionId, &str)> {
    let (execution, step_id) = key.split_once(KEY_SEPARATOR)?;
    Some((ExecutionId::from_stored(execution).ok()?, step_id))
}

impl fmt::Display for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl fmt::Debug for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::str::FromStr for ExecutionId {
    type Err = InvalidExecutionId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl Serialize for ExecutionId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ExecutionId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Ids are read back from logs and stores this way: by the rules they were written
        // under. New ids are checked where they are made ([`ExecutionId::new`]).
        let raw = String::deserialize(deserializer)?;
        Self::from_stored(raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_ids_and_refuses_bad_ones() {
        assert_eq!(ExecutionId::new("order-42").unwrap().as_str(), "order-42");
        assert_eq!(ExecutionId::new(""), Err(InvalidExecutionId::Empty));
        assert!(matches!(
            ExecutionId::new("a".repeat(300)),
            Err(InvalidExecutionId::TooLong { len: 300 })
        ));
        assert!(matches!(
            ExecutionId::new("a:b"),
            Err(InvalidExecutionId::ForbiddenChar { found: ':', .. })
        ));
        assert!(matches!(
            ExecutionId::new("a\nb"),
            Err(InvalidExecutionId::ForbiddenChar { found: '\n', .. })
        ));
    }

    #[test]
    fn idempotency_keys_join_and_split_at_the_first_colon() {
        let id = ExecutionId::new("order-42/notify#1").unwrap();
        let key = idempotency_key(&id, "mail:send#2");
        assert_eq!(key, "order-42/notify#1:mail:send#2");
        assert_eq!(split_idempotency_key(&key), Some((id, "mail:send#2")));
        assert_eq!(split_idempotency_key("no-separator"), None);
        assert_eq!(split_idempotency_key(":step#1"), None);
    }

    #[test]
    fn deserializing_checks_the_id() {
        let err = serde_json::from_str::<ExecutionId>("\"\"").unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
    }
}
