//! Starting an execution: idempotent on its id (a second start of the same flow and input
//! returns it, another is refused), with no effect of a new execution run before its id is
//! known to be its own: claimed in the store's memory (`EventStore::claim_new`), or else its
//! `EXECUTION_STARTED` durable. Used by [`Runtime::start`](super::Runtime::start) and by a
//! parent starting its child (`children.rs`), so that neither goes through the other.

use std::sync::Arc;

use tokio::sync::{oneshot, watch};

use crate::event::{Event, ExecutionStarted};
use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::errors::{DRIVER_STOPPED, DriverFailure, StartError};
use crate::runtime::mailbox::NewExecution;
use crate::runtime::options::StartOptions;
use crate::runtime::slots::{Inner, new_slot};
use crate::store::EventStore;

impl<S: EventStore> Inner<S> {
    /// [`Runtime::start`](super::Runtime::start), with its input already encoded (or the
    /// encoding's error): the one way an execution is started, by a caller or by its parent.
    pub(crate) async fn start(
        self: &Arc<Self>,
        flow: &str,
        input: Result<Payload, String>,
        options: StartOptions,
    ) -> Result<ExecutionId, StartError> {
        if self.stopping() {
            return Err(StartError::ShutDown);
        }
        let version = match options.flow_version {
            Some(version) => {
                if !self.flows.contains_key(&(flow.to_owned(), version)) {
                    return Err(StartError::UnknownFlowVersion {
                        name: flow.to_owned(),
                        version,
                    });
                }
                version
            }
            None => self
                .flows
                .range((flow.to_owned(), 0)..=(flow.to_owned(), u32::MAX))
                .next_back()
                .map(|((_, version), _)| *version)
                .ok_or_else(|| StartError::UnknownFlow(flow.to_owned()))?,
        };
        let execution = options.execution_id;
        let input = input.map_err(|detail| StartError::Input {
            execution: execution.clone(),
            detail,
        })?;
        let started = ExecutionStarted {
            flow: flow.to_owned(),
            flow_version: version,
            input,
            capabilities: options.capabilities,
            budget: options.budget,
        };
        let version_asked = options.flow_version.is_some();
        loop {
            if let Some(existing) = self.recorded_start(&execution).await? {
                return same_start(&execution, &existing, &started, version_asked)
                    .map(|()| execution);
            }
            match self.create(&execution, &started).await? {
                Created::Yes => {
                    tracing::debug!(%execution, flow, version, "execution started");
                    return Ok(execution);
                }
                // Someone else created it (or is creating it): read what they recorded.
                Created::Taken => {}
                Created::Creating(mut done) => {
                    // Closed when that start knows the outcome (or was dropped).
                    let _ = done.changed().await;
                }
            }
        }
    }

    /// The `EXECUTION_STARTED` of `execution`, if it exists.
    async fn recorded_start(
        self: &Arc<Self>,
        execution: &ExecutionId,
    ) -> Result<Option<ExecutionStarted>, StartError> {
        let first = self
            .store
            .read(execution, 0, 1)
            .await
            .map_err(|source| StartError::Read {
                execution: execution.clone(),
                source,
            })?;
        Ok(first
            .into_iter()
            .next()
            .and_then(|envelope| match envelope.event {
                Event::ExecutionStarted(started) => Some(started),
                _ => None,
            }))
    }

    /// Creates the execution with a new driver, unless another start in this process is
    /// creating it or a driver already runs for it.
    async fn create(
        self: &Arc<Self>,
        execution: &ExecutionId,
        started: &ExecutionStarted,
    ) -> Result<Created, StartError> {
        let (reply, mut answer) = oneshot::channel();
        let (_done, done) = watch::channel(());
        let run = {
            let mut slots = self.slots(execution);
            let slot = slots.entry(execution.clone()).or_insert_with(new_slot);
            if slot
                .driver
                .as_ref()
                .is_some_and(|sender| !sender.is_closed())
            {
                match &slot.starting {
                    Some(creating) => return Ok(Created::Creating(creating.clone())),
                    None => None,
                }
            } else {
                slot.starting = Some(done);
                let new = NewExecution {
                    started: started.clone(),
                    reply,
                };
                Some(self.driver_task(slot, execution, Some(new)).1)
            }
        };
        let Some(mut run) = run else {
            // A driver of an execution the store did not show a moment ago: it exists now, or
            // that driver exits at once (an unknown execution).
            tokio::task::yield_now().await;
            return Ok(Created::Taken);
        };
        let _clear = ClearStarting {
            inner: self,
            execution,
        };
        // The caller drives the new execution itself until its first append is durable (a
        // short flow is then done, with no hand-off to another task on the way), and spawns
        // the driver only for what remains.
        let answered = tokio::select! {
            biased;
            answered = &mut answer => Some(answered),
            () = &mut run => None,
        };
        let answered = match answered {
            Some(answered) => {
                self.spawn(run);
                answered
            }
            None => answer.await,
        };
        match answered {
            Ok(Ok(())) => Ok(Created::Yes),
            Ok(Err(StartError::AlreadyExists(_))) => Ok(Created::Taken),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(DriverFailure::driver(
                execution.clone(),
                DRIVER_STOPPED.into(),
            )),
        }
    }
}

/// Whether `create` created the execution.
enum Created {
    Yes,
    /// It exists, or another driver is about to show that it does.
    Taken,
    /// Another start in this process is creating it; closed when that one knows.
    Creating(watch::Receiver<()>),
}

/// Clears a slot's `starting` mark when the start that set it is done (or dropped).
struct ClearStarting<'a, S> {
    inner: &'a Inner<S>,
    execution: &'a ExecutionId,
}

impl<S> Drop for ClearStarting<'_, S> {
    fn drop(&mut self) {
        let mut slots = self.inner.slots(self.execution);
        if let Some(slot) = slots.get_mut(self.execution) {
            slot.starting = None;
        }
    }
}

/// Whether `existing` is the start `asked` again: the same flow (and version, when the caller
/// named one), the same input, and the same grants (K2) and budget (K3). An execution with other
/// grants or budget is not the one asked for, whoever made it: telling the caller it succeeded
/// would let an execution made under a predictable id (a child's) be taken for it.
fn same_start(
    execution: &ExecutionId,
    existing: &ExecutionStarted,
    asked: &ExecutionStarted,
    version_asked: bool,
) -> Result<(), StartError> {
    let conflict = |detail: String| StartError::Conflict {
        execution: execution.clone(),
        detail,
    };
    if existing.flow != asked.flow || (version_asked && existing.flow_version != asked.flow_version)
    {
        return Err(conflict(format!(
            "running flow '{}' version {}, not flow '{}' version {}",
            existing.flow, existing.flow_version, asked.flow, asked.flow_version
        )));
    }
    if existing.input != asked.input && existing.input.to_value() != asked.input.to_value() {
        return Err(conflict(format!(
            "with other input for flow '{}' (a start with the same flow and input returns it)",
            existing.flow
        )));
    }
    if existing.capabilities != asked.capabilities {
        return Err(conflict(format!(
            "with other capabilities granted ({:?}, not {:?})",
            existing.capabilities, asked.capabilities
        )));
    }
    if existing.budget != asked.budget {
        return Err(conflict(format!(
            "with another budget ({}, not {})",
            budget_text(existing.budget),
            budget_text(asked.budget)
        )));
    }
    Ok(())
}

fn budget_text(budget: Option<u64>) -> String {
    budget.map_or_else(|| "none".to_owned(), |budget| budget.to_string())
}
