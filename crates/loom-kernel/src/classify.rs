//! K10-R6 data classification: paths whose values must not leave the system.
//!
//! A [`DataClassification`] lists dot-paths (`customer.card.number`, `orders.*.iban`) whose
//! values are replaced by [`MASK`] in anything projected outward (the A2UI wire, logs, traces).
//! The event log and the fold keep true values; masking is applied on a copy at egress.
//!
//! # Path syntax
//! The dot-paths of `loom-agent-surface`: segments separated by `.`, with `\.` for a dot inside
//! a key, `\\` for a backslash, and the empty path for the root. A segment that is exactly `*`
//! is a wildcard matching every array item and every object value at that level; `\*` is the
//! literal key `*`. A numeric segment such as `0` matches array index 0 and object key `"0"`.
//! Paths absent from a value are ignored: a classification describes what may appear.
//!
//! Masking replaces the value at a classified path whole, whatever its type; a wildcard in last
//! position masks each child of the container but leaves the container's shape visible.
//!
//! The grammar is written once, in `loom_kernel::parse_dot_path`, which the surface crate uses
//! too.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use thiserror::Error;

/// What a classified value is replaced with on the way out.
pub const MASK: &str = "***";

/// The set of classified paths. The default classifies nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataClassification {
    root: Node,
    paths: Vec<String>,
}

/// A trie of classified paths, so that masking walks only the branches that are classified,
/// not the whole value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Node {
    masked: bool,
    children: BTreeMap<String, Node>,
    wildcard: Option<Box<Node>>,
}

/// A classified path that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid classified path `{path}`: {reason}")]
pub struct ClassifyError {
    /// The text that was refused, verbatim.
    pub path: String,
    /// Why it is not a path.
    pub reason: ClassifyErrorReason,
}

/// What is wrong with a refused classified path: the dot-path grammar's error.
pub type ClassifyErrorReason = crate::dot_path::DotPathError;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Key(String),
    Any,
}

impl DataClassification {
    /// Classifies the given dot-paths; the first one that does not parse is refused.
    pub fn mask_paths<I, S>(paths: I) -> Result<Self, ClassifyError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut classification = Self::default();
        for path in paths {
            let text = path.as_ref();
            let segments = parse(text).map_err(|reason| ClassifyError {
                path: text.to_owned(),
                reason,
            })?;
            let mut node = &mut classification.root;
            for segment in segments {
                node = match segment {
                    Segment::Key(key) => node.children.entry(key).or_default(),
                    Segment::Any => node.wildcard.get_or_insert_with(Box::default),
                };
            }
            node.masked = true;
            classification.paths.push(text.to_owned());
        }
        Ok(classification)
    }

    /// The classified paths as given.
    pub fn paths(&self) -> &[String] {
        &self.paths
    }

    /// Whether nothing is classified.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// A copy of `value` with every classified value replaced by [`MASK`].
    pub fn mask(&self, value: &Value) -> Value {
        let mut copy = value.clone();
        self.mask_in_place(&mut copy);
        copy
    }

    /// Replaces every classified value inside `value` by [`MASK`].
    pub fn mask_in_place(&self, value: &mut Value) {
        if !self.is_empty() {
            mask_under(value, &[&self.root]);
        }
    }

    /// Whether the value at an RFC 6901 JSON Pointer is classified, because the pointer is at or
    /// below a classified path.
    ///
    /// A malformed pointer counts as classified: at egress, what cannot be understood is not
    /// let out.
    pub fn is_masked_pointer(&self, pointer: &str) -> bool {
        matches!(self.walk(pointer), Walk::Masked)
    }

    /// Masks `value`, which lives at `pointer` in some larger document: entirely if the pointer
    /// is at or below a classified path, or partly if classified paths lie below the pointer.
    /// A malformed pointer masks the value entirely, as in [`Self::is_masked_pointer`].
    pub fn mask_at(&self, pointer: &str, value: &Value) -> Value {
        self.masked_from(self.walk(pointer), value)
    }

    /// Masks `value`, which lives at the dot-path `path` (the syntax of classified paths) in
    /// some larger document; a path that does not parse masks the value entirely.
    pub fn mask_at_path(&self, path: &str, value: &Value) -> Value {
        if self.is_empty() {
            return value.clone();
        }
        let Ok(segments) = parse(path) else {
            return Value::String(MASK.to_owned());
        };
        let tokens = segments.into_iter().map(|segment| match segment {
            Segment::Key(key) => key,
            Segment::Any => "*".to_owned(),
        });
        self.masked_from(self.walk_tokens(tokens), value)
    }

    /// A copy of a document about to leave in a message (an error, a trace, a report), masked
    /// as a document rooted where the classified paths are, and, for every object in it that
    /// has a string `path` and a `value` (an agent-surface op), with that value masked as if it
    /// lived at that path. The kernel treats surface ops as opaque, so this is the one place
    /// that looks into them, and only to hide.
    pub fn mask_message_value(&self, value: &Value) -> Value {
        let mut copy = self.mask(value);
        if !self.is_empty() {
            self.mask_ops_in(&mut copy, 0);
        }
        copy
    }

    fn mask_ops_in(&self, value: &mut Value, depth: usize) {
        // Ops sit at the top of a patch or one level down; deeper nesting is data, which the
        // rooted mask has covered.
        if depth > 2 {
            return;
        }
        match value {
            Value::Array(items) => {
                for item in items {
                    self.mask_ops_in(item, depth + 1);
                }
            }
            Value::Object(map) => {
                if let Some(Value::String(path)) = map.get("path").cloned()
                    && let Some(op_value) = map.get_mut("value")
                {
                    *op_value = self.mask_at_path(&path, op_value);
                }
                for child in map.values_mut() {
                    if child.is_array() {
                        self.mask_ops_in(child, depth + 1);
                    }
                }
            }
            _ => {}
        }
    }

    fn masked_from(&self, walk: Walk<'_>, value: &Value) -> Value {
        match walk {
            Walk::Masked => Value::String(MASK.to_owned()),
            Walk::Clear => value.clone(),
            Walk::Below(nodes) => {
                let mut copy = value.clone();
                mask_under(&mut copy, &nodes);
                copy
            }
        }
    }

    fn walk(&self, pointer: &str) -> Walk<'_> {
        let Some(tokens) = pointer_tokens(pointer) else {
            return Walk::Masked;
        };
        self.walk_tokens(tokens)
    }

    fn walk_tokens(&self, tokens: impl IntoIterator<Item = String>) -> Walk<'_> {
        let mut nodes = vec![&self.root];
        if self.root.masked {
            return Walk::Masked;
        }
        for token in tokens {
            nodes = step(&nodes, &token);
            if nodes.is_empty() {
                return Walk::Clear;
            }
            if nodes.iter().any(|n| n.masked) {
                return Walk::Masked;
            }
        }
        if nodes
            .iter()
            .all(|n| n.children.is_empty() && n.wildcard.is_none())
        {
            Walk::Clear
        } else {
            Walk::Below(nodes)
        }
    }
}

enum Walk<'n> {
    Masked,
    Clear,
    Below(Vec<&'n Node>),
}

/// The trie nodes that match one more step through `token`, from every node in `nodes`.
fn step<'n>(nodes: &[&'n Node], token: &str) -> Vec<&'n Node> {
    nodes
        .iter()
        .flat_map(|n| {
            n.children
                .get(token)
                .into_iter()
                .chain(n.wildcard.as_deref())
        })
        .collect()
}

/// Masks `value`, which every node in `nodes` matches. Recursion follows the trie, so its depth
/// is bounded by the longest classified path, not by the value's nesting.
fn mask_under(value: &mut Value, nodes: &[&Node]) {
    if nodes.iter().any(|n| n.masked) {
        *value = Value::String(MASK.to_owned());
        return;
    }
    let wildcard = nodes.iter().any(|n| n.wildcard.is_some());
    // Without a wildcard only the trie's keys can match, so look those up instead of scanning
    // every child of the value.
    let keys = || -> BTreeSet<&str> {
        nodes
            .iter()
            .flat_map(|n| n.children.keys().map(String::as_str))
            .collect()
    };
    match value {
        Value::Object(map) if wildcard => {
            for (key, child) in map.iter_mut() {
                descend(child, nodes, key);
            }
        }
        Value::Object(map) => {
            for key in keys() {
                if let Some(child) = map.get_mut(key) {
                    descend(child, nodes, key);
                }
            }
        }
        Value::Array(items) if wildcard => {
            for (index, child) in items.iter_mut().enumerate() {
                descend(child, nodes, &index.to_string());
            }
        }
        Value::Array(items) => {
            for key in keys() {
                if let Some(child) = array_index(key).and_then(|i| items.get_mut(i)) {
                    descend(child, nodes, key);
                }
            }
        }
        _ => {}
    }
}

fn descend(child: &mut Value, nodes: &[&Node], token: &str) {
    let next = step(nodes, token);
    if !next.is_empty() {
        mask_under(child, &next);
    }
}

/// A canonical decimal array index (`0`, `12`, never `012`), as a JSON Pointer writes one.
fn array_index(segment: &str) -> Option<usize> {
    match segment.as_bytes() {
        [b'0'] => Some(0),
        [b'1'..=b'9', rest @ ..] if rest.iter().all(u8::is_ascii_digit) => segment.parse().ok(),
        _ => None,
    }
}

/// The unescaped tokens of an RFC 6901 pointer, or `None` if it is malformed.
fn pointer_tokens(pointer: &str) -> Option<Vec<String>> {
    if pointer.is_empty() {
        return Some(Vec::new());
    }
    pointer
        .strip_prefix('/')?
        .split('/')
        .map(|token| {
            let mut out = String::with_capacity(token.len());
            let mut chars = token.chars();
            while let Some(c) = chars.next() {
                match c {
                    '~' => match chars.next()? {
                        '0' => out.push('~'),
                        '1' => out.push('/'),
                        _ => return None,
                    },
                    c => out.push(c),
                }
            }
            Some(out)
        })
        .collect()
}

fn parse(text: &str) -> Result<Vec<Segment>, ClassifyErrorReason> {
    Ok(crate::dot_path::parse_dot_path(text)?
        .into_iter()
        .map(|segment| {
            if segment.wildcard {
                Segment::Any
            } else {
                Segment::Key(segment.text)
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn classify(paths: &[&str]) -> DataClassification {
        DataClassification::mask_paths(paths).unwrap()
    }

    #[test]
    fn masks_a_leaf_and_keeps_the_rest() {
        let c = classify(&["customer.card"]);
        let v = json!({"customer": {"card": "4111", "name": "Ada"}, "total": 3});
        assert_eq!(
            c.mask(&v),
            json!({"customer": {"card": MASK, "name": "Ada"}, "total": 3})
        );
        // The input is untouched: the log keeps true values.
        assert_eq!(v["customer"]["card"], "4111");
    }

    #[test]
    fn masks_a_whole_subtree_whatever_its_type() {
        let c = classify(&["secret"]);
        assert_eq!(
            c.mask(&json!({"secret": {"a": [1, 2]}, "x": 1})),
            json!({"secret": MASK, "x": 1})
        );
    }

    #[test]
    fn wildcards_over_nested_arrays() {
        let c = classify(&["orders.*.items.*.card"]);
        let v = json!({"orders": [
            {"items": [{"card": 1, "sku": "a"}, {"sku": "b"}]},
            {"items": [{"card": 2}]},
            {"items": "not an array"},
            7
        ]});
        assert_eq!(
            c.mask(&v),
            json!({"orders": [
                {"items": [{"card": MASK, "sku": "a"}, {"sku": "b"}]},
                {"items": [{"card": MASK}]},
                {"items": "not an array"},
                7
            ]})
        );
    }

    #[test]
    fn wildcard_matches_object_values_and_last_position_keeps_shape() {
        let c = classify(&["users.*.email", "tokens.*"]);
        let v = json!({
            "users": {"u1": {"email": "a@x", "id": 1}, "u2": {"id": 2}},
            "tokens": ["t1", "t2"],
        });
        assert_eq!(
            c.mask(&v),
            json!({
                "users": {"u1": {"email": MASK, "id": 1}, "u2": {"id": 2}},
                "tokens": [MASK, MASK],
            })
        );
        // A wildcard reaches children only: a scalar where a container was expected stays.
        assert_eq!(c.mask(&json!({"tokens": 5})), json!({"tokens": 5}));
    }

    #[test]
    fn wildcard_and_key_combine() {
        let c = classify(&["a.*.x", "a.b.y"]);
        let v = json!({"a": {"b": {"x": 1, "y": 2, "z": 3}, "c": {"x": 1, "y": 2}}});
        assert_eq!(
            c.mask(&v),
            json!({"a": {"b": {"x": MASK, "y": MASK, "z": 3}, "c": {"x": MASK, "y": 2}}})
        );
    }

    #[test]
    fn numeric_segments_index_arrays_and_name_keys() {
        let c = classify(&["items.1", "m.0"]);
        let v = json!({"items": [1, 2, 3], "m": {"0": "k", "1": "l"}});
        assert_eq!(
            c.mask(&v),
            json!({"items": [1, MASK, 3], "m": {"0": MASK, "1": "l"}})
        );
        // Out of range and non-canonical indices match nothing.
        let c = classify(&["items.9", "items.01"]);
        assert_eq!(c.mask(&json!({"items": [1, 2]})), json!({"items": [1, 2]}));
    }

    #[test]
    fn missing_paths_are_ignored() {
        let c = classify(&["a.b.c", "x.*.y", "q"]);
        for v in [
            json!(null),
            json!(3),
            json!({}),
            json!({"a": 1}),
            json!({"a": {"b": []}}),
            json!({"x": []}),
            json!([1, {"a": 2}]),
        ] {
            assert_eq!(c.mask(&v), v);
        }
    }

    #[test]
    fn escaped_dots_backslashes_and_stars_are_keys() {
        let c = classify(&[r"a\.b", r"c\\d", r"e.\*"]);
        let v = json!({"a.b": 1, "a": {"b": 2}, "c\\d": 3, "e": {"*": 4, "f": 5}});
        assert_eq!(
            c.mask(&v),
            json!({"a.b": MASK, "a": {"b": 2}, "c\\d": MASK, "e": {"*": MASK, "f": 5}})
        );
        let c = classify(&["a*"]);
        assert_eq!(
            c.mask(&json!({"a*": 1, "ab": 2})),
            json!({"a*": MASK, "ab": 2})
        );
    }

    #[test]
    fn the_empty_path_classifies_everything() {
        let c = classify(&[""]);
        assert_eq!(c.mask(&json!({"a": 1})), json!(MASK));
        assert!(c.is_masked_pointer(""));
        assert!(c.is_masked_pointer("/a"));
    }

    #[test]
    fn nothing_classified_changes_nothing() {
        let c = DataClassification::default();
        let v = json!({"a": [1, {"b": 2}]});
        assert_eq!(c.mask(&v), v);
        assert!(!c.is_masked_pointer("/a"));
        assert!(c.is_empty());
    }

    #[test]
    fn bad_paths_are_refused_with_the_reason() {
        let cases = [
            ("a..b", ClassifyErrorReason::EmptySegment { index: 1 }),
            (".a", ClassifyErrorReason::EmptySegment { index: 0 }),
            ("a.", ClassifyErrorReason::EmptySegment { index: 1 }),
            (r"a\", ClassifyErrorReason::TrailingBackslash),
            (
                r"a\n",
                ClassifyErrorReason::UnknownEscape {
                    escaped: 'n',
                    offset: 1,
                },
            ),
        ];
        for (path, reason) in cases {
            let err = DataClassification::mask_paths(["ok", path]).unwrap_err();
            assert_eq!(
                err,
                ClassifyError {
                    path: path.to_owned(),
                    reason
                }
            );
            assert!(err.to_string().contains(path));
        }
    }

    #[test]
    fn pointers_at_or_below_a_classified_path_are_masked() {
        let c = classify(&["customer.card", "orders.*.iban", "a/b.c~d"]);
        assert!(c.is_masked_pointer("/customer/card"));
        assert!(c.is_masked_pointer("/customer/card/number"));
        assert!(c.is_masked_pointer("/orders/3/iban"));
        assert!(c.is_masked_pointer("/orders/x/iban/deep"));
        assert!(c.is_masked_pointer("/a~1b/c~0d"));
        assert!(!c.is_masked_pointer("/customer"));
        assert!(!c.is_masked_pointer("/customer/name"));
        assert!(!c.is_masked_pointer("/orders/3"));
        assert!(!c.is_masked_pointer(""));
        assert!(!c.is_masked_pointer("/a/b/c~0d"));
    }

    #[test]
    fn malformed_pointers_fail_closed() {
        let c = classify(&["x"]);
        for bad in ["a", "/a~", "/a~2", "/~x"] {
            assert!(c.is_masked_pointer(bad), "{bad}");
            assert_eq!(c.mask_at(bad, &json!({"y": 1})), json!(MASK));
        }
    }

    #[test]
    fn mask_at_masks_whole_or_part() {
        let c = classify(&["customer.card", "orders.*.iban"]);
        let customer = json!({"card": "4111", "name": "Ada"});
        assert_eq!(
            c.mask_at("/customer", &customer),
            json!({"card": MASK, "name": "Ada"})
        );
        assert_eq!(c.mask_at("/customer/card", &json!("4111")), json!(MASK));
        assert_eq!(c.mask_at("/customer/card/x", &json!(1)), json!(MASK));
        assert_eq!(c.mask_at("/other", &customer), customer);
        assert_eq!(
            c.mask_at("/orders", &json!([{"iban": "DE1", "n": 1}])),
            json!([{"iban": MASK, "n": 1}])
        );
        assert_eq!(
            c.mask_at("/orders/0", &json!({"iban": "DE1", "n": 1})),
            json!({"iban": MASK, "n": 1})
        );
        assert_eq!(
            c.mask_at("", &json!({"customer": customer.clone(), "orders": []})),
            json!({"customer": {"card": MASK, "name": "Ada"}, "orders": []})
        );
    }

    #[test]
    fn mask_at_agrees_with_masking_the_whole_document() {
        let c = classify(&["a.*.b", "a.1", "c"]);
        let doc = json!({"a": [{"b": 1, "k": 2}, {"b": 3}, {"k": [4]}], "c": {"d": 5}, "e": 6});
        let masked = c.mask(&doc);
        for pointer in [
            "", "/a", "/a/0", "/a/0/b", "/a/1", "/a/2", "/a/2/k", "/c", "/e",
        ] {
            let at = doc.pointer(pointer).unwrap();
            assert_eq!(
                &c.mask_at(pointer, at),
                masked.pointer(pointer).unwrap(),
                "{pointer}"
            );
        }
    }

    #[test]
    fn masking_does_not_recurse_with_the_value_depth() {
        // `json!` would serialize (recursively) an embedded value, so nest by hand.
        let mut deep = json!({"x": 1});
        for _ in 0..100_000 {
            deep = Value::Array(vec![deep]);
        }
        let mut v = json!({});
        if let Value::Object(map) = &mut v {
            map.insert("k".into(), deep);
        }
        // Replacing a deep subtree would drop it, which recurses inside serde_json; the point
        // here is only that the walk stops where the classified paths stop.
        classify(&["*.*.x", "k.0.0.0.x"]).mask_in_place(&mut v);
        assert!(v.pointer("/k/0/0/0").is_some_and(Value::is_array));
        // Dropping a 100,000-deep value recurses inside serde_json too: leak it instead.
        std::mem::forget(v);
    }
}
