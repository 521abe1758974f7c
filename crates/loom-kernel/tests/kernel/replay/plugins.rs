//! Plugins: the kernel ABI check at composition, and the projections and inbound handlers a
//! plugin contributes.

use std::sync::Arc;

use crate::support::*;
use loom_kernel::conformance::id;
use loom_kernel::*;
use loom_kernel::{AbiVersion, EventStoreExt, ExecutionId, ExecutionStatus, MemoryStore};
use serde_json::{Value, json};

struct OldPlugin;

impl Plugin for OldPlugin {
    fn name(&self) -> &str {
        "old"
    }
    fn kernel_abi(&self) -> AbiRange {
        AbiRange::caret(2, 0)
    }
    fn contribute(&self, _: &mut Contributions) {}
}

struct GoodPlugin;

impl Plugin for GoodPlugin {
    fn name(&self) -> &str {
        "good"
    }
    fn kernel_abi(&self) -> AbiRange {
        AbiRange::caret(1, 0)
    }
    fn contribute(&self, contributions: &mut Contributions) {
        contributions.effect("echo", Arc::new(echo(Calls::default())));
    }
}

#[test]
fn plugins_are_checked_against_the_kernel_abi() {
    let err = Runtime::builder(MemoryStore::new())
        .plugin(&OldPlugin)
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin 'old' needs kernel ABI >=2.0.0, <3.0.0, but this kernel is 1.1.0"
    );
    assert!(AbiRange::caret(1, 1).contains(AbiVersion::new(1, 1, 0)));
    assert!(!AbiRange::caret(1, 2).contains(AbiVersion::new(1, 1, 0)));
    let err = Runtime::builder(MemoryStore::new())
        .plugin(&GoodPlugin)
        .plugin(&GoodPlugin)
        .build()
        .unwrap_err();
    assert_eq!(err, CompositionError::DuplicateEffect("echo".into()));
}

#[derive(Default, Clone)]
struct Seen(Arc<std::sync::Mutex<Vec<(u64, &'static str)>>>);

impl Projection for Seen {
    fn apply(&self, envelope: &loom_kernel::EventEnvelope) {
        self.0
            .lock()
            .unwrap()
            .push((envelope.seq, envelope.event.type_name()));
    }
}

struct ApprovalButton;

impl InboundHandler for ApprovalButton {
    fn handle(&self, message: &Value) -> Result<Inbound, String> {
        let execution = message["execution"]
            .as_str()
            .and_then(|id| ExecutionId::new(id).ok())
            .ok_or("the message names no execution")?;
        Ok(Inbound::Resume {
            execution,
            event_type: "Pick".into(),
            correlation_key: message["key"].as_str().unwrap_or_default().to_owned(),
            payload: message["value"].clone().into(),
        })
    }
}

struct Ui(Seen);

impl Plugin for Ui {
    fn name(&self) -> &str {
        "ui"
    }
    fn kernel_abi(&self) -> AbiRange {
        AbiRange::caret(1, 1)
    }
    fn contribute(&self, contributions: &mut Contributions) {
        contributions
            .projection(Arc::new(self.0.clone()))
            .inbound("button", Arc::new(ApprovalButton));
    }
}

#[tokio::test]
async fn plugins_contribute_projections_and_inbound_handlers() {
    let seen = Seen::default();
    let rt = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("gates", 1, three_gates))
        .plugin(&Ui(seen.clone()))
        .build()
        .unwrap();
    let e = rt
        .start("gates", &json!(null), grant_all(id("ui")))
        .await
        .unwrap();
    rt.wait(&e).await.unwrap();
    for key in ["a", "b", "c"] {
        let action = rt
            .inbound(
                "button",
                &json!({"execution": "ui", "key": key, "value": key}),
            )
            .await
            .unwrap();
        assert!(matches!(action, Inbound::Resume { .. }));
    }
    assert!(matches!(
        rt.inbound("button", &json!({"key": "a"})).await,
        Err(InboundError::Refused(_))
    ));
    assert!(matches!(
        rt.inbound("nope", &json!({})).await,
        Err(InboundError::UnknownHandler(_))
    ));
    assert!(matches!(
        rt.inbound("button", &json!({"execution": "ui", "key": "a"}))
            .await,
        Err(InboundError::Resume(ResumeError::NoPendingGate { .. }))
    ));
    assert_eq!(
        rt.wait(&e).await.unwrap().status(),
        ExecutionStatus::Completed
    );
    // The projection saw every durable event once, in log order.
    let log = rt.store().read_all(&e).await.unwrap();
    let expected: Vec<_> = log.iter().map(|x| (x.seq, x.event.type_name())).collect();
    assert_eq!(*seen.0.lock().unwrap(), expected);
}
