//! Dot-paths into a surface's data model, and their JSON Pointer form.
//!
//! The syntax is documented on [`SurfacePath`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

/// A parsed dot-path into a surface's data model.
///
/// A dot-path is a list of segments separated by `.`: `order.items.0.qty`. A backslash escapes
/// the next character, so a key may hold a dot or a backslash: `a\.b` is the single key `a.b`,
/// `a\\b` the key `a\b`, and `\*` the key `*` (accepted so that paths written for
/// `loom_kernel::DataClassification`, where a bare `*` is a wildcard, mean the same key here). Any other
/// escape is refused rather than guessed at. The empty string is the root; no segment may be
/// empty, so the empty key is not addressable by a dot-path.
///
/// Segments are plain strings here: whether `0` is an array index or an object key is decided
/// against the model when an op is applied, because the same path may meet either.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SurfacePath {
    segments: Vec<String>,
}

/// Why a dot-path string was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid surface path `{path}`: {reason}")]
pub struct PathError {
    /// The text that was refused, verbatim.
    pub path: String,
    /// Why it is not a path.
    pub reason: PathErrorReason,
}

/// What is wrong with a refused dot-path: the kernel's dot-path grammar error (the grammar is
/// written once, in [`loom_kernel::parse_dot_path`]).
pub type PathErrorReason = loom_kernel::DotPathError;

/// Why a JSON Pointer string was refused by [`SurfacePath::from_pointer`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PointerError {
    /// The pointer does not start with `/`.
    #[error("JSON pointer `{pointer}` must be empty or start with `/`")]
    MissingLeadingSlash {
        /// The pointer given.
        pointer: String,
    },
    /// A `~` is not followed by `0` or `1`.
    #[error("JSON pointer `{pointer}` has a `~` not followed by `0` or `1` at byte {offset}")]
    BadEscape {
        /// The pointer given.
        pointer: String,
        /// The byte offset in the text.
        offset: usize,
    },
    /// The pointer has an empty token, which no dot-path can name.
    #[error("JSON pointer `{pointer}` has an empty token, which no dot-path can address")]
    EmptyToken {
        /// The pointer given.
        pointer: String,
    },
}

impl SurfacePath {
    /// The root of the model (the empty dot-path).
    pub const fn root() -> Self {
        Self {
            segments: Vec::new(),
        }
    }

    /// Parses a dot-path.
    pub fn parse(text: &str) -> Result<Self, PathError> {
        parse_segments(text)
            .map(|segments| Self { segments })
            .map_err(|reason| PathError {
                path: text.to_owned(),
                reason,
            })
    }

    /// Builds a path from unescaped segments, refusing an empty one (it has no dot-path form).
    pub fn from_segments<I, S>(segments: I) -> Result<Self, PathError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let segments: Vec<String> = segments.into_iter().map(Into::into).collect();
        if let Some(index) = segments.iter().position(String::is_empty) {
            return Err(PathError {
                path: display_segments(&segments),
                reason: PathErrorReason::EmptySegment { index },
            });
        }
        Ok(Self { segments })
    }

    /// Parses an RFC 6901 JSON Pointer (`/order/items/0`) into the same path. The grammar and
    /// its escapes are `jsonptr`'s; Loom adds one rule of its own: no empty token, since no
    /// dot-path can address one.
    pub fn from_pointer(pointer: &str) -> Result<Self, PointerError> {
        use json_patch::jsonptr::{ParseError, Pointer};
        let parsed = Pointer::parse(pointer).map_err(|error| match error {
            ParseError::NoLeadingSlash => PointerError::MissingLeadingSlash {
                pointer: pointer.to_owned(),
            },
            // `offset` is where the token starts (its `/`); the escape's offset counts from there.
            ParseError::InvalidEncoding { offset, source } => PointerError::BadEscape {
                pointer: pointer.to_owned(),
                offset: offset + source.offset,
            },
        })?;
        let segments: Vec<String> = parsed
            .tokens()
            .map(|token| token.decoded().into_owned())
            .collect();
        if segments.iter().any(String::is_empty) {
            return Err(PointerError::EmptyToken {
                pointer: pointer.to_owned(),
            });
        }
        Ok(Self { segments })
    }

    /// The unescaped segments, outermost first.
    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// Whether this is the root (the whole model).
    pub fn is_root(&self) -> bool {
        self.segments.is_empty()
    }

    /// How many segments deep the path reaches (0 for the root).
    pub fn depth(&self) -> usize {
        self.segments.len()
    }

    /// The path one level up, or `None` for the root.
    pub fn parent(&self) -> Option<SurfacePath> {
        let (_, parent) = self.segments.split_last()?;
        Some(Self {
            segments: parent.to_vec(),
        })
    }

    /// Whether `self` is `other` or lies below it.
    pub fn starts_with(&self, other: &SurfacePath) -> bool {
        self.segments.starts_with(&other.segments)
    }

    /// The path with one more segment.
    pub fn child(&self, segment: impl Into<String>) -> Result<SurfacePath, PathError> {
        let mut segments = self.segments.clone();
        segments.push(segment.into());
        Self::from_segments(segments)
    }

    /// The RFC 6901 JSON Pointer for this path: `order.items.0` becomes `/order/items/0`, with
    /// `~` written `~0` and `/` written `~1`; the root is the empty pointer.
    pub fn to_pointer(&self) -> String {
        pointer_of(&self.segments)
    }

    pub(crate) fn from_prefix(segments: &[String]) -> Self {
        Self {
            segments: segments.to_vec(),
        }
    }
}

/// The JSON Pointer of a list of unescaped segments (`~` written `~0`, `/` written `~1`, by
/// `jsonptr`'s token encoding), built in one allocation: this runs for every touched path on
/// the A2UI egress path (`benches/pointers.rs`).
pub(crate) fn pointer_of(segments: &[String]) -> String {
    use json_patch::jsonptr::Token;
    let len = segments.iter().map(|s| s.len() + 1).sum();
    let mut out = String::with_capacity(len);
    for segment in segments {
        out.push('/');
        out.push_str(Token::new(segment.as_str()).encoded());
    }
    out
}

/// The dot-path text of a list of unescaped segments, escaped so that it parses back.
pub(crate) fn display_segments(segments: &[String]) -> String {
    loom_kernel::format_dot_path(segments)
}

fn parse_segments(text: &str) -> Result<Vec<String>, PathErrorReason> {
    Ok(loom_kernel::parse_dot_path(text)?
        .into_iter()
        .map(|segment| segment.text)
        .collect())
}

impl fmt::Display for SurfacePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&display_segments(&self.segments))
    }
}

impl FromStr for SurfacePath {
    type Err = PathError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<&str> for SurfacePath {
    type Error = PathError;

    fn try_from(value: &str) -> Result<Self, Self::Error> {
        Self::parse(value)
    }
}

impl Serialize for SurfacePath {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SurfacePath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Reads `segment` as an array index: a canonical decimal (`0`, `17`, never `07` or `+1`).
///
/// Canonical only, so that one index has one spelling and a key like `07` on an object is never
/// mistaken for position 7 of an array.
pub(crate) fn array_index(segment: &str) -> Option<usize> {
    let bytes = segment.as_bytes();
    match bytes {
        [] => None,
        [b'0'] => Some(0),
        [b'0', ..] => None,
        _ if bytes.iter().all(u8::is_ascii_digit) => segment.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_indices_only() {
        assert_eq!(array_index("0"), Some(0));
        assert_eq!(array_index("12"), Some(12));
        assert_eq!(array_index("012"), None);
        assert_eq!(array_index("+1"), None);
        assert_eq!(array_index("-1"), None);
        assert_eq!(array_index(""), None);
        assert_eq!(array_index("99999999999999999999999999"), None);
    }

    #[test]
    fn cow_deserialize_handles_escaped_json_strings() {
        let p: SurfacePath = serde_json::from_str(r#""a\\.b.c""#).unwrap();
        assert_eq!(p.segments(), ["a.b", "c"]);
    }
}
