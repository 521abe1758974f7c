//! The store file's health through the CLI: the read commands on what a crash left (without a
//! write), a journal cut short, `loom store check` and `loom store salvage`.

use loom_kernel::DiskStore;

use crate::support::*;

/// What a SIGKILL or a crash of the server leaves (the store file and its journal as they are
/// while it runs, copied): every read command works on it, prints what the live store held,
/// and writes nothing to either file; the first write command then recovers it for good.
#[tokio::test]
async fn every_read_command_works_on_a_store_left_by_a_crash_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live.redb");
    let runtime = compose(DiskStore::open(&live).unwrap());
    start_order(&runtime, "order-1").await;
    start_hello(&runtime, "hello-1").await;
    let image = dir.path().join("image.redb");
    let journal = dir.path().join("image.redb.journal");
    std::fs::copy(&live, &image).unwrap();
    std::fs::copy(dir.path().join("live.redb.journal"), &journal).unwrap();
    drop(runtime);
    let store = image.to_str().unwrap();
    let exports = dir.path().join("exports");
    let before = (
        std::fs::read(&image).unwrap(),
        std::fs::read(&journal).unwrap(),
    );
    let reads: [&[&str]; 7] = [
        &["executions"],
        &["show", "order-1"],
        &["tail", "hello-1"],
        &["in-doubt"],
        &[
            "export-log",
            "--out",
            exports.to_str().unwrap(),
            "--execution",
            "hello-1",
        ],
        &["purge", "--ended-before", "0s", "--dry-run"],
        &["--json", "executions", "--status", "completed"],
    ];
    for args in reads {
        let mut all = vec!["--store", store];
        all.extend_from_slice(args);
        let output = loom(&all);
        assert_eq!(code(&output), 0, "{args:?}: {}", stderr(&output));
        assert!(
            !stderr(&output).contains("not closed cleanly"),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    let listed = stdout(&loom(&["--store", store, "executions"]));
    assert!(
        listed.contains("order-1") && listed.contains("hello-1"),
        "{listed}"
    );
    let after = (
        std::fs::read(&image).unwrap(),
        std::fs::read(&journal).unwrap(),
    );
    assert!(
        before == after,
        "a read command wrote to the store or its journal"
    );

    let cancelled = loom(&["--store", store, "cancel", "order-1"]);
    assert_eq!(code(&cancelled), 0, "{}", stderr(&cancelled));
    let shown = stdout(&loom(&["--store", store, "show", "order-1"]));
    assert!(shown.contains("cancelled"), "{shown}");
}

/// A journal cut at a record boundary is refused by every command with what was lost and the
/// way out; `--accept-cut-journal` reads the store as of the cut.
#[tokio::test]
async fn a_store_whose_journal_was_cut_short_is_refused_until_the_loss_is_accepted() {
    let seeded = Seeded::new().await;
    let journal = seeded.dir.path().join("loom.redb.journal");
    let bytes = std::fs::read(&journal).unwrap();
    let records_end = (bytes.iter().rposition(|byte| *byte != 0).unwrap() + 1).max(32);
    std::fs::write(&journal, &bytes[..records_end]).unwrap();
    for args in [&["executions"][..], &["cancel", "order-1"][..]] {
        let refused = seeded.loom(args);
        assert_eq!(code(&refused), 4, "{args:?}");
        assert!(
            stderr(&refused).contains("cut short")
                && stderr(&refused).contains("--accept-cut-journal"),
            "{}",
            stderr(&refused)
        );
    }
    let read = seeded.loom(&["--accept-cut-journal", "executions"]);
    assert_eq!(code(&read), 0, "{}", stderr(&read));
}

/// `loom store check` reads every page and log of a whole store (and of one left by a crash,
/// without writing) and says so; on a store whose redb roots are damaged it names the damage
/// and exits 4, and `loom store salvage` exports every log from it anyway, one JSON Lines file
/// per execution, as export-log writes them.
#[tokio::test]
async fn store_check_reports_damage_and_salvage_exports_every_log_of_a_store_that_no_longer_opens()
{
    let seeded = Seeded::new().await;
    let checked = seeded.loom(&["store", "check"]);
    assert_eq!(code(&checked), 0, "{}", stderr(&checked));
    assert!(
        stdout(&checked).contains("pages     ok"),
        "{}",
        stdout(&checked)
    );
    assert!(
        stdout(&checked).contains("3 executions"),
        "{}",
        stdout(&checked)
    );
    assert!(
        stderr(&checked).contains("checking the pages"),
        "progress on stderr"
    );

    let mut bytes = std::fs::read(&seeded.path).unwrap();
    for byte in &mut bytes[64..1024] {
        *byte ^= 0x5A;
    }
    std::fs::write(&seeded.path, &bytes).unwrap();
    let checked = seeded.loom(&["store", "check"]);
    assert_eq!(code(&checked), 4, "{}", stdout(&checked));
    let out = seeded.dir.path().join("salvaged");
    let salvaged = seeded.loom(&["store", "salvage", "--out", out.to_str().unwrap()]);
    assert_eq!(code(&salvaged), 0, "{}", stderr(&salvaged));
    assert!(
        stdout(&salvaged).contains("salvaged 3 logs"),
        "{}",
        stdout(&salvaged)
    );
    let files = std::fs::read_dir(&out).unwrap().count();
    assert_eq!(files, 3);
    assert_eq!(
        std::fs::read(&seeded.path).unwrap(),
        bytes,
        "nothing written"
    );

    let refused = loom(&[
        "--admin",
        "http://127.0.0.1:9",
        "--token",
        "t".repeat(32).as_str(),
        "store",
        "check",
    ]);
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
}
