//! The whole story, as `cargo run -p a2ui-callfunction` tells it, run as real processes: the
//! order is placed once despite the crash, the log replays deterministically, every wire
//! message is valid A2UI v1.0, and the card number never leaves.

use std::path::Path;
use std::sync::OnceLock;

use a2ui_callfunction::app::{self, CARD_NUMBER};
use a2ui_callfunction::client::read_ledger;
use a2ui_callfunction::story::EXECUTION;
use loom_kernel::{DiskStore, EventStoreExt, ExecutionId};
use loom_plugin_a2ui::{AgentMessage, MessageSchema, RendererMessage};
use loom_replay_check::{Checker, Finding};
use serde_json::Value;

use crate::support::run_example;

/// The v1.0 agent-to-renderer schema (a2ui-core 0.4.0's), with `catalog.json` resolved to the
/// example's catalogs; compiled once.
fn validator() -> &'static MessageSchema {
    static VALIDATOR: OnceLock<MessageSchema> = OnceLock::new();
    VALIDATOR.get_or_init(|| MessageSchema::new(&app::catalogs()).unwrap())
}

fn run_story(dir: &Path) {
    let (stdout, stderr) = run_example([
        "--dir".as_ref(),
        dir.join("story").as_os_str(),
        "--wire-log".as_ref(),
        dir.join("wire.jsonl").as_os_str(),
        "--export-catalogs".as_ref(),
        dir.join("catalogs").as_os_str(),
    ]);
    assert!(
        !stdout.contains("\x1b["),
        "no colour when stdout is not a terminal"
    );
    for told in [
        "SIGABRT",
        "EFFECT_INDOUBT",
        "EFFECT_RESOLVED",
        "dedup answers the original",
        "deterministic",
    ] {
        assert!(stdout.contains(told), "the story tells `{told}`:\n{stdout}");
    }
    // K10-R6: the narration prints events and payloads, never the card in clear.
    assert!(
        !stdout.contains(CARD_NUMBER) && !stderr.contains(CARD_NUMBER),
        "the card number appeared in the narration:\n{stdout}"
    );
}

#[test]
fn the_story_places_the_order_once_replays_and_keeps_the_wire_valid_and_the_card_masked() {
    let dir = tempfile::tempdir().unwrap();
    run_story(dir.path());

    // submitOrder's side effect happened exactly once, though it was sent twice.
    let orders = read_ledger(&dir.path().join("story/orders.jsonl")).unwrap();
    assert_eq!(orders.len(), 1, "{orders:?}");

    // The final log replays deterministically, and it completed.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store =
            DiskStore::open_read_only(dir.path().join("story/loom.redb"), Default::default())
                .unwrap();
        let execution = ExecutionId::new(EXECUTION).unwrap();
        let state = store.fold(&execution).await.unwrap();
        assert_eq!(state.status().to_string(), "completed");
        let stored = store.read_stored_logs(&[execution]).await.unwrap();
        let outcome = Checker::new(&app::flows())
            .unwrap()
            .check_stored(&stored[0]);
        assert_eq!(outcome.finding, Finding::Deterministic, "{outcome:?}");
        let log = store
            .read_all(&ExecutionId::new(EXECUTION).unwrap())
            .await
            .unwrap();
        let types: Vec<&str> = log.iter().map(|e| e.event.type_name()).collect();
        assert!(types.contains(&"EFFECT_INDOUBT"), "{types:?}");
        assert!(types.contains(&"EFFECT_RESOLVED"), "{types:?}");
    });

    // Every wire message is valid v1.0; the card number never went over the wire.
    let wire = std::fs::read_to_string(dir.path().join("wire.jsonl")).unwrap();
    assert!(
        !wire.contains(CARD_NUMBER),
        "the card number is on the wire"
    );
    assert!(
        !wire.contains("4111"),
        "part of the card number is on the wire"
    );
    let mut kinds = Vec::new();
    for line in wire.lines() {
        let entry: Value = serde_json::from_str(line).unwrap();
        let message = &entry["message"];
        match entry["direction"].as_str() {
            Some("agent_to_renderer") => {
                let errors = validator().errors(message);
                assert!(errors.is_empty(), "{message} fails the schema: {errors:?}");
                AgentMessage::from_value(message).unwrap();
            }
            Some("renderer_to_agent") => {
                RendererMessage::from_value(message)
                    .unwrap_or_else(|e| panic!("{message} does not parse strictly: {e}"));
            }
            other => panic!("unknown direction {other:?}"),
        }
        kinds.push(a2ui_callfunction::narrate::kind_of(message));
    }
    assert_eq!(kinds.first().map(String::as_str), Some("createSurface"));
    assert_eq!(kinds.last().map(String::as_str), Some("deleteSurface"));
    // Grain B was sent twice with one call id (before the crash, and on the retry).
    let submits = wire
        .lines()
        .filter(|l| l.contains("\"@call\":\"submitOrder\""))
        .count();
    assert_eq!(submits, 2);
    assert_eq!(
        kinds.iter().filter(|k| *k == "createSurface").count(),
        2,
        "the renderer got the surface again after the restart"
    );

    // The catalogs load as v1.0 documents.
    let catalogs: Vec<_> = std::fs::read_dir(dir.path().join("catalogs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(catalogs.len(), 3);
    for path in catalogs {
        let document: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(document["protocolVersion"], "1.0", "{}", path.display());
    }
}
