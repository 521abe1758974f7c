//! What bringing a layout 4 file to layout 5 costs (LD-037): the open for writing that gives
//! every head, tail and meta value its check, at a count of ended executions.
//!
//! It fills a store with `LOOM_UPGRADE_EXECUTIONS` ended executions (default 100,000; two
//! events each), turns the file into what a layout 4 build wrote (every head and meta value
//! without its check, every tail without its frame, the format 4: the only differences between
//! the layouts), then times the open for writing that upgrades it and the open after.
//!
//! `LOOM_UPGRADE_EXECUTIONS=1000000 cargo bench -p loom-kernel --bench upgrade`

#[path = "../tests/support/older_layouts.rs"]
mod older_layouts;
mod support;

use std::path::Path;
use std::time::Instant;

use loom_kernel::conformance::{completed, fill_for_recovery, started};
use loom_kernel::{DiskStore, DiskStoreConfig};

use older_layouts::as_layout_4;

fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let executions: usize = std::env::var("LOOM_UPGRADE_EXECUTIONS")
        .ok()
        .and_then(|count| count.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("upgrade.redb");
    support::tokio_runtime().block_on(async {
        let config = DiskStoreConfig {
            max_batch_events: 100_000,
            ..DiskStoreConfig::default()
        };
        let store = DiskStore::open_with(&path, config).expect("the store opens");
        fill_for_recovery(&store, "ended", executions, &[started("done"), completed()]).await;
    });
    as_layout_4(&path);
    let megabytes = |path: &Path| std::fs::metadata(path).map_or(0, |m| m.len()) / 1_000_000;
    let before = megabytes(&path);
    let began = Instant::now();
    drop(DiskStore::open(&path).expect("the layout 4 file opens for writing"));
    let upgraded = began.elapsed();
    let after = megabytes(&path);
    let began = Instant::now();
    drop(DiskStore::open(&path).expect("the layout 5 file opens"));
    let reopened = began.elapsed();
    println!(
        "upgrade/{executions}_ended: layout 4 to 5 in {:.1} ms (verify_on_open included), reopened in {:.1} ms, file {before} MB before, {after} MB after",
        upgraded.as_secs_f64() * 1e3,
        reopened.as_secs_f64() * 1e3,
    );
}
