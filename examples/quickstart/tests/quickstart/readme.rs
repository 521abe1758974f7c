//! The README's "Using Loom in your crate" program: the README shows exactly
//! `examples/using_loom.rs`, and the program runs twice in a row on one store without error.

use std::path::Path;

#[allow(dead_code)] // its `main` is the example's, not this test's
#[path = "../../examples/using_loom.rs"]
mod using_loom;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The README's code block that follows the line `<!-- examples/quickstart/examples/using_loom.rs -->`.
fn readme_program() -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let marker = "<!-- examples/quickstart/examples/using_loom.rs -->";
    let after =
        &readme[readme.find(marker).expect("the README names the example") + marker.len()..];
    let code = after.split_once("```rust").expect("a code block").1;
    let code = code.split_once('\n').expect("a fence line").1;
    code.split_once("```")
        .expect("a closing fence")
        .0
        .to_owned()
}

#[test]
fn the_readme_shows_the_example_as_it_is() {
    let example =
        std::fs::read_to_string(root().join("examples/quickstart/examples/using_loom.rs")).unwrap();
    // The README leaves out the file's opening comment.
    let body: String = example
        .lines()
        .skip_while(|line| line.starts_with("//!") || line.is_empty())
        .map(|line| format!("{line}\n"))
        .collect();
    assert_eq!(
        readme_program(),
        body,
        "the README's program differs from examples/quickstart/examples/using_loom.rs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_program_runs_twice_in_a_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loom.redb");
    let path = path.to_str().unwrap();
    using_loom::run(path).await.unwrap();
    // Two processes in the README; one here, where the first run's store closes once its last
    // driver task has let go of it, a moment after `run` returns.
    let mut again = using_loom::run(path).await;
    for _ in 0..200 {
        match &again {
            Err(error) if format!("{error:#}").contains("is open in another process") => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                again = using_loom::run(path).await;
            }
            _ => break,
        }
    }
    again.unwrap();
    // A failure reads as a sentence with its causes, not in Rust's debug form.
    let error = using_loom::run("/nonexistent/dir/loom.redb")
        .await
        .unwrap_err();
    let text = format!("{error:#}");
    assert!(
        text.starts_with("opening the store /nonexistent/dir/loom.redb: "),
        "{text}"
    );
    assert!(!text.contains("Io {"), "{text}");
}
