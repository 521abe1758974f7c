//! A renderer session in the protocol version its renderer announced: v1.0 messages pass as
//! they are; on v0.9 they are projected, checked against the v0.9 schemas, and what v0.9
//! cannot carry is refused for the session (reported, never sent). Inbound v0.9 messages take
//! the v1.0 envelope and then the same path as a v1.0 renderer's: the same limits, the same
//! binding rules, the same inbound seam.

use loom_kernel::{EventStore, Runtime};
use serde_json::Value;

use super::{
    ProjectionError, ProtocolVersion, V0_9Schema, project_v0_9, renderer_message_from_v0_9,
};
use crate::edge::{
    Connection, OpenError, Outbound, Received, Refused, RendererEdge, RendererSession,
};
use crate::wire::{AgentMessage, WireError};

/// What to send for one message of the session: the frames, or why it cannot be sent.
#[derive(Debug)]
pub struct VersionedOutbound {
    /// The JSON messages to send, in order, in the session's version (empty when refused).
    pub frames: Vec<Value>,
    /// Why the message was not sent: v0.9 cannot carry it.
    pub refused: Option<ProjectionError>,
    outbound: Outbound,
}

impl VersionedOutbound {
    /// The message's kind on the v1.0 wire (for logs).
    pub fn message(&self) -> &AgentMessage {
        &self.outbound.message
    }

    /// Tells the edge the frames are written (see [`Outbound::written`]). A refused message
    /// was not written: a grain-B request stays undelivered (a v0.9 session answers none, so
    /// the edge never routes one to it).
    pub fn written(self) {
        if self.refused.is_none() {
            self.outbound.written();
        }
    }
}

/// A [`RendererSession`] speaking the protocol version its renderer announced.
#[derive(Debug)]
pub struct VersionedSession {
    session: RendererSession,
    protocol: ProtocolVersion,
}

impl RendererEdge {
    /// [`RendererEdge::open`] for a renderer that speaks `protocol`. A v0.9 session answers no
    /// function (v0.9 has no function calls), whatever the connection says: the edge never
    /// routes a grain-B request to it.
    pub async fn open_versioned<S: EventStore>(
        &self,
        runtime: &Runtime<S>,
        connection: &Connection,
        protocol: ProtocolVersion,
    ) -> Result<VersionedSession, OpenError> {
        let session = if protocol == ProtocolVersion::V0_9 {
            let mut connection = connection.clone();
            connection.answers = Some(Vec::new());
            self.open_for(runtime, &connection, protocol).await?
        } else {
            self.open_for(runtime, connection, protocol).await?
        };
        Ok(VersionedSession { session, protocol })
    }
}

impl VersionedSession {
    /// The version the session speaks.
    pub fn protocol(&self) -> ProtocolVersion {
        self.protocol
    }

    /// The session underneath (its id, caller, binding).
    pub fn session(&self) -> &RendererSession {
        &self.session
    }

    /// What to send first ([`RendererSession::take_initial`]) in the session's version: the
    /// frames, and the messages refused (an open grain-A call, on v0.9).
    pub fn take_initial(&mut self) -> (Vec<Value>, Vec<ProjectionError>) {
        let mut frames = Vec::new();
        let mut refused = Vec::new();
        for message in self.session.take_initial() {
            match self.project(&message) {
                Ok(mut projected) => frames.append(&mut projected),
                Err(error) => refused.push(error),
            }
        }
        (frames, refused)
    }

    /// The next message ([`RendererSession::next`]) in the session's version.
    pub async fn next(&mut self) -> Option<VersionedOutbound> {
        let outbound = self.session.next().await?;
        let (frames, refused) = match self.project(&outbound.message) {
            Ok(frames) => (frames, None),
            Err(error) => (Vec::new(), Some(error)),
        };
        Some(VersionedOutbound {
            frames,
            refused,
            outbound,
        })
    }

    /// Whether the session ended because its renderer fell too far behind.
    pub fn lagged(&self) -> bool {
        self.session.lagged()
    }

    /// Takes one frame from the renderer ([`RendererSession::receive`]); on v0.9 an `action`
    /// or `error`, judged by the same rules once in the v1.0 envelope.
    pub async fn receive<S: EventStore>(
        &mut self,
        runtime: &Runtime<S>,
        frame: &[u8],
    ) -> Result<Received, Refused> {
        if self.protocol == ProtocolVersion::V1_0 {
            return self.session.receive(runtime, frame).await;
        }
        self.session.admit(frame)?;
        let value: Value = serde_json::from_slice(frame).map_err(|error| {
            Refused::WireV0_9(WireError::Json {
                detail: error.to_string(),
            })
        })?;
        // Every inbound v0.9 frame is checked against the v0.9 schema first.
        let errors = V0_9Schema::shared()
            .map_err(|error| Refused::Hub(error.to_string()))?
            .client_to_server_errors(&value);
        if !errors.is_empty() {
            return Err(Refused::WireV0_9(WireError::InvalidValue {
                at: "$".to_owned(),
                detail: format!("it fails the v0.9 schema: {}", errors.join("; ")),
            }));
        }
        let v1 = renderer_message_from_v0_9(&value).map_err(Refused::WireV0_9)?;
        let bytes = v1.to_string();
        match self
            .session
            .receive_admitted(runtime, &v1, bytes.as_bytes())
            .await
        {
            Err(Refused::Wire(error)) => Err(Refused::WireV0_9(error)),
            other => other,
        }
    }

    fn project(&self, message: &AgentMessage) -> Result<Vec<Value>, ProjectionError> {
        match self.protocol {
            ProtocolVersion::V1_0 => Ok(vec![message.to_value()]),
            ProtocolVersion::V0_9 => {
                let frames = project_v0_9(message)?;
                let schema = V0_9Schema::shared()?;
                for frame in &frames {
                    let errors = schema.server_to_client_errors(frame);
                    if !errors.is_empty() {
                        let kind = frame
                            .as_object()
                            .and_then(|map| map.keys().find(|k| *k != "version"))
                            .cloned()
                            .unwrap_or_default();
                        tracing::warn!(%kind, ?errors, "a v0.9 message failed the v0.9 schema and was not sent");
                        return Err(ProjectionError::Invalid { kind, errors });
                    }
                }
                Ok(frames)
            }
        }
    }
}
