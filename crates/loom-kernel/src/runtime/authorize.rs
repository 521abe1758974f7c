//! The runtime asking its resume authenticator (K12.2, `caller.rs`): which gate a resume is
//! approved for, whether a resume may be recorded, and starts asked for by inbound messages.

use std::sync::Arc;

use crate::id::ExecutionId;
use crate::payload::Payload;
use crate::runtime::caller::{
    AsyncResumeAuthenticator, Caller, ResumeRequest, StartRequest, decide,
};
use crate::runtime::{InboundError, Runtime, RuntimeBuilder, StartError, StartOptions};
use crate::store::{EventStore, EventStoreExt};

impl<S: EventStore> RuntimeBuilder<S> {
    /// Sets a resume authenticator (K12.2) that may decide asynchronously, consulted before any
    /// resume is recorded and before an inbound message starts an execution. Replaces one set
    /// by [`RuntimeBuilder::resume_authenticator`].
    pub fn async_resume_authenticator(
        mut self,
        authenticator: impl AsyncResumeAuthenticator,
    ) -> Self {
        self.authenticator = Some(Arc::new(authenticator));
        self
    }
}

impl<S: EventStore> Runtime<S> {
    /// The gate a resume is approved for when an authenticator decides (it may take its
    /// time, and meanwhile that gate may close and another of the same key open): the first
    /// durable pending gate of the key. `None` without an authenticator (nothing waits between
    /// the request and the driver), or when no durable gate matches yet (the driver then
    /// answers as for any resume). A flow kept parked in memory says it in place, when the log
    /// has not moved since it parked (one read of the head); otherwise the log is folded.
    pub(crate) async fn approved_gate(
        &self,
        execution: &ExecutionId,
        event_type: &str,
        correlation_key: &str,
    ) -> Option<String> {
        self.inner.authenticator.as_ref()?;
        let kept = self
            .inner
            .kept
            .gate_waiting_for(execution, event_type, correlation_key);
        if let Some((parked_at, gate)) = kept
            && self.inner.store.head(execution).await.ok() == Some(parked_at)
        {
            return gate;
        }
        let state = self.inner.store.fold(execution).await.ok()?;
        state
            .gate_waiting_for(event_type, correlation_key)
            .map(|(gate_id, _)| gate_id.clone())
    }

    /// The authenticator's decision on a resume (`Ok` when the runtime has none).
    pub(crate) async fn authorize_resume(&self, request: ResumeRequest<'_>) -> Result<(), String> {
        let Some(authenticator) = &self.inner.authenticator else {
            return Ok(());
        };
        decide("resume", || authenticator.authorize(request)).await?;
        tracing::debug!(
            execution = %request.execution,
            event_type = request.event_type,
            caller = %request.caller,
            "resume authorized"
        );
        Ok(())
    }

    /// Starts what an inbound message asked for, as `caller`, once the authenticator agrees;
    /// then as [`Runtime::start`] (a start of an existing execution returns it, or is refused
    /// as a conflict).
    pub(crate) async fn inbound_start(
        &self,
        caller: &Caller,
        flow: &str,
        input: &Payload,
        options: &StartOptions,
    ) -> Result<ExecutionId, InboundError> {
        if self.is_shut_down() {
            return Err(StartError::ShutDown.into());
        }
        if let Some(authenticator) = &self.inner.authenticator {
            let request = StartRequest {
                caller,
                execution: &options.execution_id,
                flow,
                input,
            };
            decide("start", || authenticator.authorize_start(request))
                .await
                .map_err(|reason| StartError::Unauthorized {
                    execution: options.execution_id.clone(),
                    reason,
                })?;
        }
        tracing::debug!(execution = %options.execution_id, flow, caller = %caller, "inbound start");
        Ok(self.start(flow, input, options.clone()).await?)
    }
}
