//! Errors keep their cause as `source()`, whole, instead of flattening it into words: a store's
//! I/O error, a record that does not decode, and a runtime error caused by a store's.

use std::error::Error;

use loom_kernel::conformance::id;
use loom_kernel::kit::{DecodeError, StorageError, decode_record};
use loom_kernel::{
    AppendError, DiskStore, DriveError, FlowCtx, FlowError, MemoryStore, OpenError, ReadError,
    Runtime, StartOptions, WaitError, flow_fn,
};

use crate::support::append_hook::{AppendHooked, on_append};
use serde_json::{Value, json};

/// The errors `error` was caused by, nearest first.
fn causes<'a>(error: &'a (dyn Error + 'static)) -> Vec<&'a (dyn Error + 'static)> {
    let mut chain = Vec::new();
    let mut next = error.source();
    while let Some(cause) = next {
        chain.push(cause);
        next = cause.source();
    }
    chain
}

#[test]
fn a_store_file_that_cannot_be_opened_keeps_the_io_error() {
    let dir = tempfile::tempdir().unwrap();
    // A directory is not a file redb can open.
    let error = DiskStore::open(dir.path()).map(|_| ()).unwrap_err();
    assert!(matches!(error, OpenError::Io { .. }), "{error:?}");
    let io = error
        .source()
        .and_then(|s| s.downcast_ref::<std::io::Error>());
    assert!(io.is_some(), "{error:?}");
    assert!(
        error
            .to_string()
            .contains(&dir.path().display().to_string()),
        "{error}"
    );
}

#[test]
fn a_record_that_does_not_decode_keeps_the_parser_s_error() {
    let error = decode_record(&id("e"), 0, b"{\"schema\": 1, \"event\": ").unwrap_err();
    assert!(matches!(error, DecodeError::Malformed(_)), "{error:?}");
    assert!(
        error
            .source()
            .is_some_and(|s| s.downcast_ref::<serde_json::Error>().is_some()),
        "{error:?}"
    );
    let read = ReadError::Decode {
        execution: id("e"),
        seq: 0,
        source: error,
    };
    let chain = causes(&read);
    assert!(chain[0].downcast_ref::<DecodeError>().is_some());
    assert!(chain[1].downcast_ref::<serde_json::Error>().is_some());
}

#[test]
fn a_storage_error_keeps_the_backend_s_error_and_its_words() {
    let backend = std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left");
    let error = AppendError::Storage {
        execution: id("e"),
        source: StorageError::new(backend),
    };
    assert_eq!(
        error.to_string(),
        "storage failed appending to execution e: no space left"
    );
    let storage = error
        .source()
        .and_then(|s| s.downcast_ref::<StorageError>())
        .expect("the storage error is the source");
    let io = storage.get_ref().downcast_ref::<std::io::Error>().unwrap();
    assert_eq!(io.kind(), std::io::ErrorKind::StorageFull);
    // One failed group commit answers several appends: the error clones, cause and all.
    let again = error.clone();
    assert!(again.source().is_some());
}

/// A memory store whose appends fail after the first (the execution's start), as a full disk
/// would.
fn full_after_start() -> AppendHooked {
    on_append(MemoryStore::new(), |append| async move {
        if append.expected_seq == 0 {
            return append.forward().await;
        }
        let full = std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left");
        Err(AppendError::Storage {
            execution: append.execution,
            source: StorageError::new(full),
        })
    })
}

async fn waits_for_go(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    Ok(ctx.suspend("Go", "k").await?.to_value())
}

#[tokio::test]
async fn a_runtime_error_caused_by_a_failed_append_keeps_the_store_s_error() {
    let runtime = Runtime::builder(full_after_start())
        .flow(flow_fn("waits", 1, waits_for_go))
        .build()
        .unwrap();
    let e = id("full");
    runtime
        .start("waits", &json!({}), StartOptions::new(e.clone()))
        .await
        .unwrap();
    // The resume's append fails: the driver stops with the store's error.
    let resumed = runtime.resume(&e, "Go", "k", json!("go").into()).await;
    assert!(resumed.is_err(), "{resumed:?}");
    let error = match runtime.wait(&e).await {
        Err(error @ WaitError::Driver(DriveError::Append { .. })) => error,
        other => panic!("expected the append's failure, got {other:?}"),
    };
    let chain = causes(&error);
    assert!(
        chain[0].downcast_ref::<AppendError>().is_some(),
        "{error:?}"
    );
    let storage = chain[1]
        .downcast_ref::<StorageError>()
        .unwrap_or_else(|| panic!("no storage error among the causes of {error}"));
    let io = storage.get_ref().downcast_ref::<std::io::Error>().unwrap();
    assert_eq!(io.kind(), std::io::ErrorKind::StorageFull);
    assert!(error.to_string().contains("no space left"), "{error}");
}
