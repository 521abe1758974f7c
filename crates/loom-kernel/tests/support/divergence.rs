//! A resume that the flow, changed since the log was written, cannot replay. The kernel only, so
//! that other crates' tests include this file too (`#[path]`).

use loom_kernel::{DriveError, EventStore, ExecutionId, Payload, Runtime, WaitError};

/// Resumes the gate `Approval` (key `k`) of `e`, whose log `rt`'s flow no longer replays:
/// asserts the resume is refused with an error saying `words`, that nothing was recorded, and
/// that the driver stopped on the non-determinism at `seq`.
pub async fn assert_resume_diverges<S: EventStore>(
    rt: &Runtime<S>,
    e: &ExecutionId,
    seq: u64,
    words: &str,
) {
    let head = rt.store().head(e).await.unwrap();
    let err = rt
        .resume(e, "Approval", "k", Payload::null())
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(message.contains(words), "{message}");
    assert_eq!(
        rt.store().head(e).await.unwrap(),
        head,
        "nothing was recorded"
    );
    let err = rt.wait(e).await.unwrap_err();
    assert!(
        matches!(
            err,
            WaitError::Driver(DriveError::NonDeterminism { ref source, .. }) if source.seq == seq
        ),
        "{err:?}"
    );
}
