//! A byte flipped anywhere in a store file, opened with `verify_on_open` (the default before
//! LD-039) or without (the default since, here with the scrub off): the open refuses the file, a read (or retention) reports the damage, or everything
//! reads back as it was written and retention deletes the one ended execution; nothing reads
//! back wrong, nothing else is deleted, and no read unwinds into the caller's task (redb panics
//! on some damaged pages: the store reports them as a damaged file).
//!
//! The copies are opened in a child process of their own (this binary's `entry` test), which
//! goes through them one by one and prints each outcome. Without the check, redb sometimes
//! panics again while a panic on a damaged page unwinds (in a destructor), and Rust then aborts
//! the process: no `catch_unwind` can report that. The parent counts such a copy as one that
//! ended the process and starts the child again past it. `verify_on_open: false` documents that
//! it trusts the file that far (`DiskStoreConfig`); with the check, no copy may end the process.
//!
//! The store's tables here are one page each: which damage the unverified reads of a larger file
//! do not see is in `docs/STORAGE.md`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use loom_kernel::conformance::{id, started, tagged};
use loom_kernel::{DiskStore, DiskStoreConfig, EventStore, ReadError};
use serde_json::json;

use crate::support::child::{child_runtime, child_test, say};

/// The variable that gives the child its work directory (unset: the entry test does nothing).
const SWEEP_DIR: &str = "LOOM_FLIP_SWEEP_DIR";
/// `1` when the child opens the copies with `verify_on_open`.
const SWEEP_VERIFY: &str = "LOOM_FLIP_SWEEP_VERIFY";
/// The index, in the list of offsets, of the first copy the child opens.
const SWEEP_FROM: &str = "LOOM_FLIP_SWEEP_FROM";

const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];

/// Everything a store answers about three executions, as text: two stores answer alike when
/// every log, head, listing, status count, query page and the feed are the same.
async fn everything_read(store: &DiskStore) -> Result<String, ReadError> {
    use loom_kernel::kit::ExecutionQuery;
    use loom_kernel::{EventStoreExt, ExecutionStatus, StatusFilter};
    let mut out = String::new();
    for name in NAMES {
        let e = id(name);
        let head = store.head(&e).await?;
        out += &format!("{name}: head {head} log {:?}\n", store.read_all(&e).await?);
    }
    out += &format!("listed {:?}\n", store.list_all_executions().await?);
    out += &format!("counts {:?}\n", store.count_by_status().await?);
    for status in [ExecutionStatus::Running, ExecutionStatus::Completed] {
        let listed = store
            .list_by_status(StatusFilter::Status(status), None, 100)
            .await?;
        out += &format!("{status:?}: {listed:?}\n");
    }
    let query = ExecutionQuery {
        limit: 100,
        ..ExecutionQuery::default()
    };
    out += &format!("query {:?}\n", store.query_executions(&query).await?);
    out += &format!("feed {:?}\n", store.read_feed(0, 1000).await?);
    Ok(out)
}

/// Everything read, then retention run over every ended execution: what it deleted, as text
/// (the one completed execution, `beta`, in a copy read back right).
async fn everything_read_then_deleted(store: &DiskStore) -> Result<String, String> {
    let read = everything_read(store).await.map_err(|e| e.to_string())?;
    let deleted = store
        .delete_ended(u64::MAX, 10)
        .await
        .map_err(|e| e.to_string())?;
    Ok(format!("{read}deleted {deleted:?}\n"))
}

/// How the opens and reads of a copy with one flipped byte went, over many bytes.
#[derive(Debug, Default)]
struct FlipOutcomes {
    /// The open refused the file.
    refused: usize,
    /// A read reported the damage.
    reported: usize,
    /// Everything read back as before (the byte was not in use).
    same: usize,
    /// Something read back otherwise, without an error: the byte offsets.
    wrong: Vec<usize>,
    /// A read unwound into the caller's task: the byte offsets.
    panicked: Vec<usize>,
    /// The process ended while the copy was open (redb panicked during a panic): the offsets.
    ended_process: Vec<usize>,
}

impl FlipOutcomes {
    fn count(&mut self, at: usize, outcome: &str) {
        match outcome {
            "refused" => self.refused += 1,
            "reported" => self.reported += 1,
            "same" => self.same += 1,
            "wrong" => self.wrong.push(at),
            "panicked" => self.panicked.push(at),
            other => panic!("the child printed an unknown outcome '{other}' for offset {at}"),
        }
    }
}

/// The work directory the parent shares with the child: the store as written, its journal,
/// what it reads back, and the offsets to flip.
struct Sweep {
    dir: PathBuf,
}

impl Sweep {
    fn original(&self) -> PathBuf {
        self.dir.join("original.redb")
    }
    fn journal(&self) -> PathBuf {
        self.dir.join("original.redb.journal")
    }
    fn expected(&self) -> PathBuf {
        self.dir.join("expected.txt")
    }
    fn offsets(&self) -> PathBuf {
        self.dir.join("offsets.txt")
    }

    fn read_offsets(&self) -> Vec<usize> {
        std::fs::read_to_string(self.offsets())
            .unwrap()
            .lines()
            .map(|line| line.parse().unwrap())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_byte_flipped_anywhere_is_refused_or_reads_back_right() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = Sweep {
        dir: dir.path().to_path_buf(),
    };
    let path = sweep.original();
    {
        let store = DiskStore::open(&path).unwrap();
        for (n, name) in NAMES.iter().enumerate() {
            let e = id(name);
            let mut head = store.append(&e, 0, &[started("f")]).await.unwrap();
            for i in 0..(3 + n * 4) {
                head = store
                    .append(&e, head, &[tagged(json!({"i": i}))])
                    .await
                    .unwrap();
            }
            if n == 1 {
                store
                    .append(&e, head, &[loom_kernel::conformance::completed()])
                    .await
                    .unwrap();
            }
        }
    }
    // Read back through an open for writing, as the copies will be: the file is then as closed.
    let expected = everything_read(&DiskStore::open(&path).unwrap())
        .await
        .unwrap()
        + &format!("deleted {:?}\n", [id("beta")]);
    std::fs::write(sweep.expected(), expected).unwrap();
    let original = std::fs::read(&path).unwrap();
    // A few offsets into every page in use: headers, keys, values, the page's end.
    let in_page = [
        0, 1, 2, 8, 12, 16, 31, 40, 64, 100, 200, 511, 1024, 2047, 4095,
    ];
    let offsets: Vec<usize> = original
        .chunks(4096)
        .enumerate()
        .filter(|(_, page)| page.iter().any(|byte| *byte != 0))
        .flat_map(|(page, bytes)| {
            in_page
                .iter()
                .filter(move |offset| **offset < bytes.len())
                .map(move |offset| page * 4096 + offset)
        })
        .collect();
    assert!(offsets.len() > 100, "{} offsets", offsets.len());
    let listed: String = offsets.iter().map(|at| format!("{at}\n")).collect();
    std::fs::write(sweep.offsets(), listed).unwrap();
    for verify_on_open in [true, false] {
        let outcomes = run_children(&sweep, verify_on_open, offsets.len());
        assert!(
            outcomes.panicked.is_empty() && outcomes.wrong.is_empty(),
            "verify_on_open {verify_on_open}: {outcomes:?}"
        );
        assert!(outcomes.refused > 0, "{outcomes:?}");
        if verify_on_open {
            assert!(
                outcomes.ended_process.is_empty(),
                "with the check, a damaged file never ends the process: {outcomes:?}"
            );
        } else {
            assert!(outcomes.reported > 0, "{outcomes:?}");
        }
        let seen = outcomes.refused
            + outcomes.reported
            + outcomes.same
            + outcomes.wrong.len()
            + outcomes.panicked.len()
            + outcomes.ended_process.len();
        assert_eq!(seen, offsets.len(), "every copy was opened: {outcomes:?}");
    }
}

/// Runs the child over every offset, started again past a copy that ended it.
fn run_children(sweep: &Sweep, verify_on_open: bool, count: usize) -> FlipOutcomes {
    let mut outcomes = FlipOutcomes::default();
    let mut from = 0;
    while from < count {
        let mut child = child_test(concat!(module_path!(), "::entry"))
            .env(SWEEP_DIR, &sweep.dir)
            .env(SWEEP_VERIFY, if verify_on_open { "1" } else { "0" })
            .env(SWEEP_FROM, from.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut opening = None;
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            // The test harness may print its own words before the child's on the same line.
            let Some((_, said)) = line.split_once("flip ") else {
                continue;
            };
            let mut words = said.split(' ');
            let (Some(index), Some(word)) = (words.next(), words.next()) else {
                continue;
            };
            let index: usize = index.parse().unwrap();
            match word {
                "opening" => opening = Some(index),
                outcome => {
                    assert_eq!(opening, Some(index), "the child answers in order");
                    outcomes.count(index, outcome);
                    opening = None;
                    from = index + 1;
                }
            }
        }
        let status = child.wait().unwrap();
        match opening {
            Some(index) => {
                assert!(!status.success(), "the child left copy {index} unanswered");
                outcomes.ended_process.push(index);
                from = index + 1;
            }
            None => assert!(
                status.success() && from == count,
                "the child stopped at copy {from} of {count}: {status}"
            ),
        }
    }
    outcomes
}

/// The child: opens the copies from `SWEEP_FROM` on, one byte flipped in each, and prints
/// `flip <index> opening` before and `flip <index> <outcome>` after each.
#[test]
fn entry() {
    let Some(dir) = std::env::var_os(SWEEP_DIR) else {
        return;
    };
    let sweep = Sweep {
        dir: PathBuf::from(dir),
    };
    let verify_on_open = std::env::var(SWEEP_VERIFY).as_deref() == Ok("1");
    let from: usize = std::env::var(SWEEP_FROM).unwrap().parse().unwrap();
    let original = std::fs::read(sweep.original()).unwrap();
    let journal = std::fs::read(sweep.journal()).unwrap();
    let expected = std::fs::read_to_string(sweep.expected()).unwrap();
    // What the reads themselves do with each flip: the scrub, which reports damage without
    // changing what a read answers, has its own test (`store::scrub`).
    let config = DiskStoreConfig {
        verify_on_open,
        scrub_after_open: false,
        ..DiskStoreConfig::default()
    };
    let case = sweep.dir.join("case.redb");
    child_runtime().block_on(async {
        for (index, &at) in sweep.read_offsets().iter().enumerate().skip(from) {
            let mut bytes = original.clone();
            bytes[at] ^= 0x10;
            std::fs::write(&case, &bytes).unwrap();
            std::fs::write(sweep.dir.join("case.redb.journal"), &journal).unwrap();
            say(&format!("flip {index} opening"));
            let outcome = outcome_of(&case, config.clone(), &expected).await;
            say(&format!("flip {index} {outcome}"));
            std::fs::remove_file(&case).unwrap();
        }
    });
}

async fn outcome_of(case: &Path, config: DiskStoreConfig, expected: &str) -> &'static str {
    let Ok(store) = DiskStore::open_with(case, config) else {
        return "refused";
    };
    // Read on a task of its own: a panic that unwinds out of the store ends the task.
    let read = tokio::spawn({
        let store = store.clone();
        async move { everything_read_then_deleted(&store).await }
    })
    .await;
    match read {
        Err(_) => "panicked",
        Ok(Err(_)) => "reported",
        Ok(Ok(got)) if got == expected => "same",
        Ok(Ok(_)) => "wrong",
    }
}
