//! Checking every execution of a source, many at once: a batch of executions a task, each
//! task's outcomes sent back a batch at a time.

use std::sync::Arc;

use loom_kernel::{EventEnvelope, EventStore, ExecutionId};
use tokio::sync::mpsc;

use super::{CheckArgs, Progress, Source};
use crate::check::{Checker, Outcome};
use crate::jsonl;

/// Executions read from a store at once.
const READ_BATCH: usize = 32;

pub(super) async fn check_all<S: EventStore + Clone>(
    source: Source<S>,
    checker: Arc<Checker>,
    args: &CheckArgs,
    jobs: usize,
    progress: &Progress,
) -> Vec<Outcome> {
    // Outcomes travel a batch at a time (`None` for an execution the filters leave out): one
    // wake-up of the collecting thread per batch rather than per execution.
    let (done, mut results) = mpsc::channel::<Vec<Option<Outcome>>>(jobs * 4);
    let limit = Arc::new(tokio::sync::Semaphore::new(jobs * 2));
    let flow = args.flow.clone();
    let since = args.since;
    let keep = move |log: &[EventEnvelope]| -> bool {
        let Some(first) = log.first() else {
            return true;
        };
        let flow_ok = match (&flow, &first.event) {
            (Some(name), loom_kernel::Event::ExecutionStarted(started)) => started.flow == *name,
            (Some(_), _) => false,
            (None, _) => true,
        };
        let since_ok = match (since, first.recorded_at_ms) {
            (Some(since), Some(at)) => at >= since,
            _ => true,
        };
        flow_ok && since_ok
    };
    let keep = Arc::new(keep);
    let spawner = {
        let done = done.clone();
        async move {
            match source {
                // Small batches: one read transaction and one blocking-pool trip per batch.
                Source::Store(store, ids) => {
                    check_batches(&ids, &limit, &done, |batch| {
                        let (store, checker, keep) =
                            (store.clone(), Arc::clone(&checker), Arc::clone(&keep));
                        async move {
                            match store.read_stored_logs(&batch).await {
                                Ok(logs) => {
                                    logs.iter()
                                        .map(|stored| match stored.decode() {
                                            Ok(log) => keep(&log)
                                                .then(|| checker.check_decoded(log, stored)),
                                            Err(error) => Some(Outcome::unread(
                                                stored.execution_id().to_string(),
                                                &error,
                                            )),
                                        })
                                        .collect()
                                }
                                Err(error) => unread_batch(&batch, &error),
                            }
                        }
                    })
                    .await;
                }
                Source::Any(store, ids) => {
                    check_batches(&ids, &limit, &done, |batch| {
                        let (store, checker, keep) =
                            (store.clone(), Arc::clone(&checker), Arc::clone(&keep));
                        async move {
                            match store.read_logs(&batch).await {
                                Ok(logs) => logs
                                    .into_iter()
                                    .map(|log| keep(&log).then(|| checker.check(log)))
                                    .collect(),
                                Err(error) => unread_batch(&batch, &error),
                            }
                        }
                    })
                    .await;
                }
                Source::Logs(paths) => {
                    for path in paths {
                        let Ok(permit) = Arc::clone(&limit).acquire_owned().await else {
                            break;
                        };
                        let (checker, keep, done) =
                            (Arc::clone(&checker), Arc::clone(&keep), done.clone());
                        tokio::spawn(async move {
                            let outcome = match jsonl::read_log(&path) {
                                Ok(log) if keep(&log) => Some(checker.check(log)),
                                Ok(_) => None,
                                Err(error) => Some(Outcome::unread(
                                    path.file_stem()
                                        .map(|stem| stem.to_string_lossy().into_owned())
                                        .unwrap_or_default(),
                                    &error,
                                )),
                            };
                            let _ = done.send(vec![outcome]).await;
                            drop(permit);
                        });
                    }
                }
            }
        }
    };
    drop(done);
    let collect = async {
        let mut outcomes = Vec::new();
        while let Some(batch) = results.recv().await {
            for outcome in batch {
                progress.tick();
                outcomes.extend(outcome);
            }
        }
        outcomes
    };
    let ((), mut outcomes) = futures::join!(spawner, collect);
    outcomes.sort_by(|a, b| a.execution.cmp(&b.execution));
    outcomes
}

/// Checks `ids` a batch of [`READ_BATCH`] at a time, each batch on its own task once a permit
/// of `limit` is free, and sends each batch's outcomes to `done`.
async fn check_batches<F, Fut>(
    ids: &[ExecutionId],
    limit: &Arc<tokio::sync::Semaphore>,
    done: &mpsc::Sender<Vec<Option<Outcome>>>,
    check: F,
) where
    F: Fn(Vec<ExecutionId>) -> Fut,
    Fut: std::future::Future<Output = Vec<Option<Outcome>>> + Send + 'static,
{
    for batch in ids.chunks(READ_BATCH) {
        let Ok(permit) = Arc::clone(limit).acquire_owned().await else {
            break;
        };
        let (checked, done) = (check(batch.to_vec()), done.clone());
        tokio::spawn(async move {
            let _ = done.send(checked.await).await;
            drop(permit);
        });
    }
}

/// An unread outcome for each execution of a batch that could not be read.
fn unread_batch(batch: &[ExecutionId], error: &dyn std::error::Error) -> Vec<Option<Outcome>> {
    batch
        .iter()
        .map(|id| Some(Outcome::unread(id.to_string(), error)))
        .collect()
}
