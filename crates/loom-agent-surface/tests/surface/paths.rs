//! Dot-path parsing, escaping, and the JSON Pointer form.

use loom_agent_surface::{PathErrorReason, PointerError, SurfacePath};
use proptest::prelude::*;

#[track_caller]
fn check(text: &str, segments: &[&str], pointer: &str) {
    let path = SurfacePath::parse(text).unwrap();
    assert_eq!(path.segments(), segments, "segments of {text:?}");
    assert_eq!(path.to_pointer(), pointer, "pointer of {text:?}");
    assert_eq!(SurfacePath::from_pointer(pointer).unwrap(), path);
    assert_eq!(SurfacePath::parse(&path.to_string()).unwrap(), path);
}

#[test]
fn plain_and_numeric_segments() {
    check("", &[], "");
    check("order", &["order"], "/order");
    check("order.items.0", &["order", "items", "0"], "/order/items/0");
    check(
        "order.items.0.qty",
        &["order", "items", "0", "qty"],
        "/order/items/0/qty",
    );
}

#[test]
fn escaped_dots_backslashes_and_stars() {
    check(r"a\.b", &["a.b"], "/a.b");
    check(r"a\.b.c", &["a.b", "c"], "/a.b/c");
    check(r"a\\b", &[r"a\b"], r"/a\b");
    check(r"a\\.b", &[r"a\", "b"], r"/a\/b");
    check(r"\*.*", &["*", "*"], "/*/*");
    check(r"\.\.\.", &["..."], "/...");
}

#[test]
fn tilde_and_slash_in_keys_are_escaped_in_pointers() {
    check("a~b", &["a~b"], "/a~0b");
    check("a/b", &["a/b"], "/a~1b");
    check("~1", &["~1"], "/~01");
    check("m.~/~", &["m", "~/~"], "/m/~0~1~0");
}

#[test]
fn display_escapes_what_needs_it() {
    let path = SurfacePath::from_segments(["a.b", r"c\d", "*", "e"]).unwrap();
    assert_eq!(path.to_string(), r"a\.b.c\\d.*.e");
}

#[test]
fn bad_paths_name_the_path_and_the_problem() {
    let cases = [
        ("a..b", PathErrorReason::EmptySegment { index: 1 }),
        (".a", PathErrorReason::EmptySegment { index: 0 }),
        ("a.", PathErrorReason::EmptySegment { index: 1 }),
        (".", PathErrorReason::EmptySegment { index: 0 }),
        (r"a\", PathErrorReason::TrailingBackslash),
        (r"a.b\", PathErrorReason::TrailingBackslash),
        (
            r"a\x",
            PathErrorReason::UnknownEscape {
                escaped: 'x',
                offset: 1,
            },
        ),
        (
            r"a\/b",
            PathErrorReason::UnknownEscape {
                escaped: '/',
                offset: 1,
            },
        ),
    ];
    for (text, reason) in cases {
        let err = SurfacePath::parse(text).unwrap_err();
        assert_eq!(err.path, text);
        assert_eq!(err.reason, reason, "{text:?}");
        let message = err.to_string();
        assert!(message.contains(text), "{message}");
    }
    assert!(SurfacePath::from_segments(["a", ""]).is_err());
}

#[test]
fn bad_pointers_are_refused() {
    assert!(matches!(
        SurfacePath::from_pointer("a/b"),
        Err(PointerError::MissingLeadingSlash { .. })
    ));
    assert!(matches!(
        SurfacePath::from_pointer("/a~2"),
        Err(PointerError::BadEscape { offset: 2, .. })
    ));
    assert!(matches!(
        SurfacePath::from_pointer("/a~"),
        Err(PointerError::BadEscape { .. })
    ));
    assert!(matches!(
        SurfacePath::from_pointer("/a//b"),
        Err(PointerError::EmptyToken { .. })
    ));
}

#[test]
fn paths_serialize_as_their_dot_form() {
    let path = SurfacePath::parse(r"a\.b.c").unwrap();
    let json = serde_json::to_string(&path).unwrap();
    assert_eq!(json, r#""a\\.b.c""#);
    assert_eq!(serde_json::from_str::<SurfacePath>(&json).unwrap(), path);
    assert!(serde_json::from_str::<SurfacePath>(r#""a..b""#).is_err());
}

#[test]
fn helpers() {
    let path = SurfacePath::parse("a.b.c").unwrap();
    assert_eq!(path.depth(), 3);
    assert_eq!(path.parent().unwrap().to_string(), "a.b");
    assert!(path.starts_with(&SurfacePath::parse("a.b").unwrap()));
    assert!(!path.starts_with(&SurfacePath::parse("a.c").unwrap()));
    assert_eq!(path.child("d.e").unwrap().to_pointer(), "/a/b/c/d.e");
    assert!(SurfacePath::root().parent().is_none());
    assert!("".parse::<SurfacePath>().unwrap().is_root());
}

proptest! {
    #[test]
    fn any_segments_round_trip(segments in prop::collection::vec("[a.\\\\*~/0-9]{1,4}", 0..5)) {
        let path = SurfacePath::from_segments(segments.clone()).unwrap();
        prop_assert_eq!(path.segments(), &segments[..]);
        prop_assert_eq!(SurfacePath::parse(&path.to_string()).unwrap(), path.clone());
        prop_assert_eq!(SurfacePath::from_pointer(&path.to_pointer()).unwrap(), path);
    }

    #[test]
    fn parsing_never_panics(text in "[a.\\\\*~/x]{0,8}") {
        let _ = SurfacePath::parse(&text);
        let _ = SurfacePath::from_pointer(&text);
    }
}
