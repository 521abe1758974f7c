//! JSON Pointers through `jsonptr` (what `SurfacePath` uses) against the hand-written escape
//! and parse they replaced, in one run: the price of the shared crate on the egress path, where
//! every touched path becomes a pointer (`to_pointer`) and inbound paths are parsed
//! (`from_pointer`). The baselines below are kept only as this bench's yardstick.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use loom_agent_surface::SurfacePath;

/// The escape `SurfacePath::to_pointer` did by hand before it used `jsonptr`.
fn hand_written_pointer(segments: &[String]) -> String {
    let len = segments.iter().map(|s| s.len() + 1).sum();
    let mut out = String::with_capacity(len);
    for segment in segments {
        out.push('/');
        for c in segment.chars() {
            match c {
                '~' => out.push_str("~0"),
                '/' => out.push_str("~1"),
                c => out.push(c),
            }
        }
    }
    out
}

/// The parse `SurfacePath::from_pointer` did by hand before it used `jsonptr`.
fn hand_written_parse(pointer: &str) -> Option<Vec<String>> {
    let body = pointer.strip_prefix('/')?;
    let mut segments = Vec::new();
    for token in body.split('/') {
        if token.is_empty() {
            return None;
        }
        let mut segment = String::with_capacity(token.len());
        let mut chars = token.chars();
        while let Some(c) = chars.next() {
            if c != '~' {
                segment.push(c);
                continue;
            }
            match chars.next() {
                Some('0') => segment.push('~'),
                Some('1') => segment.push('/'),
                _ => return None,
            }
        }
        segments.push(segment);
    }
    Some(segments)
}

fn bench(c: &mut Criterion) {
    let path = SurfacePath::parse("order.rows.r250.qty").expect("path");
    let escaped = SurfacePath::from_segments(["order", "a/b", "c~d", "qty"]).expect("path");
    let mut group = c.benchmark_group("pointer");
    for (name, path) in [("plain", &path), ("escaped", &escaped)] {
        let segments = path.segments().to_vec();
        let pointer = path.to_pointer();
        group.bench_function(format!("format_jsonptr/{name}"), |b| {
            b.iter(|| black_box(path).to_pointer())
        });
        group.bench_function(format!("format_hand_written/{name}"), |b| {
            b.iter(|| hand_written_pointer(black_box(&segments)))
        });
        group.bench_function(format!("parse_jsonptr/{name}"), |b| {
            b.iter(|| SurfacePath::from_pointer(black_box(&pointer)).expect("pointer"))
        });
        group.bench_function(format!("parse_hand_written/{name}"), |b| {
            b.iter(|| hand_written_parse(black_box(&pointer)).expect("pointer"))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
