//! The dot-path grammar, written once: K10-R6 classification (`classify`) and the agent
//! surface's `SurfacePath` both read paths with [`parse_dot_path`] and write them with
//! [`format_dot_path`].
//!
//! Segments are separated by `.`; a backslash escapes the next character, and only `\.`, `\\`
//! and `\*` are escapes. The empty string is the root (no segment); no segment may be empty. A
//! segment that is exactly an unescaped `*` is marked [`DotSegment::wildcard`]: classification
//! reads it as "every child", the surface as the key `*`.

use thiserror::Error;

/// One segment of a dot-path, unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DotSegment {
    /// The segment's text with its escapes removed.
    pub text: String,
    /// Whether the segment is a bare `*` (not `\*`).
    pub wildcard: bool,
}

/// What is wrong with a refused dot-path.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DotPathError {
    /// A segment is empty (two dots in a row, or a dot at an end).
    #[error("segment {index} is empty (a leading, trailing or doubled `.`)")]
    EmptySegment {
        /// The position of the empty segment, from 0.
        index: usize,
    },
    /// The path ends with a lone backslash.
    #[error("it ends with a lone `\\` (write `\\\\` for a literal backslash)")]
    TrailingBackslash,
    /// A backslash escapes a character that needs no escape.
    #[error("`\\{escaped}` at byte {offset} is not an escape (only `\\.`, `\\\\` and `\\*` are)")]
    UnknownEscape {
        /// The character after the backslash.
        escaped: char,
        /// The byte offset in the text.
        offset: usize,
    },
}

/// The segments of the dot-path `text`, unescaped (none for the empty path, the root).
pub fn parse_dot_path(text: &str) -> Result<Vec<DotSegment>, DotPathError> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let mut segments = Vec::new();
    let mut current = String::new();
    // Only an unescaped `*` is a wildcard, so the segment's escapes are tracked with it.
    let mut escaped_any = false;
    let finish = |current: &mut String,
                  escaped_any: &mut bool,
                  segments: &mut Vec<DotSegment>|
     -> Result<(), DotPathError> {
        if current.is_empty() {
            return Err(DotPathError::EmptySegment {
                index: segments.len(),
            });
        }
        let text = std::mem::take(current);
        let wildcard = text == "*" && !*escaped_any;
        *escaped_any = false;
        segments.push(DotSegment { text, wildcard });
        Ok(())
    };
    let mut chars = text.char_indices();
    while let Some((offset, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, escaped @ ('.' | '\\' | '*'))) => {
                    current.push(escaped);
                    escaped_any = true;
                }
                Some((_, escaped)) => return Err(DotPathError::UnknownEscape { escaped, offset }),
                None => return Err(DotPathError::TrailingBackslash),
            },
            '.' => finish(&mut current, &mut escaped_any, &mut segments)?,
            c => current.push(c),
        }
    }
    finish(&mut current, &mut escaped_any, &mut segments)?;
    Ok(segments)
}

/// The dot-path of `segments`: each joined by `.`, with `.` and `\` inside a segment escaped.
pub fn format_dot_path<S: AsRef<str>>(segments: &[S]) -> String {
    let mut out = String::new();
    for (i, segment) in segments.iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        for c in segment.as_ref().chars() {
            if matches!(c, '.' | '\\') {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(path: &str) -> Vec<(String, bool)> {
        parse_dot_path(path)
            .unwrap()
            .into_iter()
            .map(|segment| (segment.text, segment.wildcard))
            .collect()
    }

    #[test]
    fn segments_escapes_and_wildcards() {
        assert!(texts("").is_empty());
        assert_eq!(
            texts(r"a\.b.*.\*.c\\d"),
            [
                ("a.b".to_owned(), false),
                ("*".to_owned(), true),
                ("*".to_owned(), false),
                (r"c\d".to_owned(), false),
            ]
        );
        assert_eq!(
            parse_dot_path("a..b"),
            Err(DotPathError::EmptySegment { index: 1 })
        );
        assert_eq!(parse_dot_path(r"a\"), Err(DotPathError::TrailingBackslash));
        assert_eq!(
            parse_dot_path(r"a\x"),
            Err(DotPathError::UnknownEscape {
                escaped: 'x',
                offset: 1
            })
        );
    }

    #[test]
    fn formatting_round_trips() {
        let segments = ["a.b", r"c\d", "e"];
        let text = format_dot_path(&segments);
        assert_eq!(text, r"a\.b.c\\d.e");
        let parsed: Vec<String> = parse_dot_path(&text)
            .unwrap()
            .into_iter()
            .map(|segment| segment.text)
            .collect();
        assert_eq!(parsed, segments);
    }
}
