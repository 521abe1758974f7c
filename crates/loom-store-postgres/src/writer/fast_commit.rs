//! The writer's one-statement commit: a batch the fast path can take all of, committed in one
//! round trip, and what it leaves of each execution to the fast path and the full path.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use loom_kernel::kit::{EncodedAppend, StorageError};
use loom_kernel::{AppendError, ExecutionId};
use tokio_postgres::error::Severity;

use super::Writer;
use crate::cause::describe;
use crate::fast::{self, Cached};
use crate::faults::Faults;
use crate::wake::WakeParams;

impl Writer {
    /// Commits `batch` in one statement if the fast path can take all of it (see
    /// [`crate::fast`]); returns the requests left for the full path, unanswered.
    pub(super) async fn commit_fast(&mut self, batch: Vec<EncodedAppend>) -> Vec<EncodedAppend> {
        if self.faults.stall_after_lock.load(Ordering::SeqCst) > 0 {
            return batch;
        }
        let leases = Arc::clone(&self.leases);
        let Some(plan) = fast::plan(&batch, &self.cache, |id| leases.token(id)) else {
            return batch;
        };
        let Ok(client) = self.writes.get().await else {
            return batch;
        };
        let Ok(statement) = client.prepare_cached(fast::STATEMENT).await else {
            return batch;
        };
        let rows = fast::RowParams::of(&plan.rows, self.leases.worker_id());
        let commit_id = crate::config::random_u64() as i64;
        let lease_ms = self.leases.lease_ms();
        let since = std::time::Instant::now();
        let mut wake = WakeParams::default();
        for row in &plan.rows {
            wake.add(row.id.as_str(), &row.wake);
        }
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 23] = [
            &rows.ids,
            &rows.expected,
            &rows.tokens,
            &rows.heads,
            &rows.tails,
            &rows.statuses,
            &rows.driving,
            &rows.ended,
            &rows.keep,
            &lease_ms,
            &rows.owners,
            &plan.event_ids,
            &plan.event_seqs,
            &plan.event_records,
            &commit_id,
            &self.channel,
            &wake.cleared,
            &wake.deleted_ids,
            &wake.deleted_tags,
            &wake.upserted_ids,
            &wake.upserted_tags,
            &wake.upserted_at,
            &rows.doubts,
        ];
        let outcome = if Faults::take(&self.faults.lose_commit) {
            // Injected: the statement runs, is rolled back, and its reply is "lost".
            let _ = client.batch_execute("BEGIN").await;
            let _ = client.query(&statement, &params).await;
            let _ = client.batch_execute("ROLLBACK").await;
            Err("injected: commit lost".to_owned())
        } else {
            match client.query(&statement, &params).await {
                Ok(_) if Faults::take(&self.faults.lose_commit_reply) => {
                    Err("injected: reply to the statement lost".to_owned())
                }
                Ok(updated) => {
                    self.faults
                        .one_statement_commits
                        .fetch_add(1, Ordering::Relaxed);
                    Ok(fast::id_set(&updated))
                }
                // The server refused it (an ERROR, not a FATAL or PANIC that ends the session
                // and may come after the commit): the implicit transaction rolled back,
                // nothing is stored. The full path will tell why.
                Err(err)
                    if err
                        .as_db_error()
                        .is_some_and(|db| db.parsed_severity() == Some(Severity::Error)) =>
                {
                    tracing::debug!(error = %err, "one-statement commit refused; full path");
                    return batch;
                }
                Err(err) => Err(describe(&err)),
            }
        };
        if outcome.is_err() {
            // Its session may be on a server that is gone or going: never used again.
            let _ = deadpool_postgres::Object::take(client);
        } else {
            drop(client);
        }
        let committed = match outcome {
            Ok(updated) => updated,
            Err(detail) => {
                tracing::warn!(%detail, "commit outcome unknown; reading back");
                let ids: Vec<&str> = plan.rows.iter().map(|r| r.id.as_str()).collect();
                let seqs: Vec<i64> = rows.expected.clone();
                let deadline = crate::cause::deadline_after(self.failover_timeout);
                match self.read_back(&ids, &seqs, commit_id, deadline).await {
                    // What did not commit goes the full path, which commits it on the primary
                    // now there.
                    Some(found) => found,
                    None => {
                        let detail = format!(
                            "the commit failed ({detail}) and whether it took effect could not \
                             be read back within the failover bound of {:?}: read the head to \
                             learn the outcome",
                            self.failover_timeout
                        );
                        tracing::error!(%detail, "group commit failed");
                        for request in batch {
                            self.cache.remove(&request.execution);
                            let _ = request.reply.send(Err(AppendError::Storage {
                                execution: request.execution,
                                source: StorageError::msg(detail.clone()),
                            }));
                        }
                        return Vec::new();
                    }
                }
            }
        };
        // Leases first, then the cache, then the replies (as on the full path).
        let mut lease_changes = Vec::new();
        for row in &plan.rows {
            if committed.contains(row.id.as_str()) {
                let token = row.keep().then_some(row.token);
                lease_changes.push((row.id.clone(), token));
            }
        }
        self.leases.apply(lease_changes, since);
        let mut rest = Vec::new();
        let answers: Vec<(usize, u64)> = plan.requests.clone();
        let rows_after: Vec<(ExecutionId, bool, Option<Cached>)> = plan
            .rows
            .into_iter()
            .map(|row| {
                let done = committed.contains(row.id.as_str());
                let cached = (done && row.keep()).then_some(Cached {
                    head: row.head,
                    token: row.token,
                    tail: row.tail,
                });
                (row.id, done, cached)
            })
            .collect();
        // What did not commit here goes the full path, which reads the row and decides what to
        // remember; until then the knowledge of the last commit stays (it tells lost commits).
        for (id, done, cached) in &rows_after {
            match cached {
                Some(cached) => self.cache.insert(id.clone(), cached.clone()),
                None if *done => self.cache.remove(id),
                None => None,
            };
        }
        for (request, (at, head)) in batch.into_iter().zip(answers) {
            let done = rows_after[at].1;
            if done {
                self.watch.publish(&request.execution, head);
                let _ = request.reply.send(Ok(head));
            } else {
                // Fenced, or not committed: nothing of it is stored; the full path reads the
                // row and answers.
                rest.push(request);
            }
        }
        rest
    }
}
