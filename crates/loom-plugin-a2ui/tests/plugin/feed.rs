//! The hub followed on the store's feed: a subscriber in one process sees the updates of an
//! execution another process drives, and a new hub rebuilds every surface from the feed.

use crate::support::*;
use loom_kernel::MemoryStore;
use loom_kernel::StartOptions;
use loom_kernel::conformance::id;
use loom_plugin_a2ui::AgentMessage;
use serde_json::{Value, json};

fn reply(call_id: &str, value: Value) -> Vec<u8> {
    json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": call_id, "value": value}})
        .to_string()
        .into_bytes()
}

#[tokio::test]
async fn a_followed_hub_sees_what_another_runtime_appends_and_a_new_one_rebuilds_from_the_feed() {
    let store = MemoryStore::new();
    // This process: a hub that is a plugin of its runtime and follows the feed.
    let here_hub = hub();
    let here = runtime(store.clone(), &here_hub);
    let follower = here.follow_feed(here_hub.clone());
    // Another process on the same store.
    let there_hub = hub();
    let there = runtime(store.clone(), &there_hub);

    let e = id("feed-hub");
    here.start("checkout", &order(), StartOptions::new(e.clone()))
        .await
        .unwrap();
    let _ = here.wait(&e).await;
    let mut sub = here_hub.subscribe(&store, &e, SURFACE).await.unwrap();
    let AgentMessage::CreateSurface(create) = &sub.initial[0] else {
        panic!("createSurface first")
    };
    let mut model = Value::Object(create.data_model.clone().unwrap());

    // The other process (which reads the execution from the store first) answers the call
    // and drives the flow on.
    there_hub.catch_up(&store, &e).await.unwrap();
    let call_id = format!("{}:getLocale#1", e.as_str());
    there_hub
        .deliver_function_response(&there, SURFACE, &reply(&call_id, json!("fr-CH")))
        .await
        .unwrap();
    let _ = there.wait(&e).await;
    follower.caught_up().await.unwrap();
    let mut updates = 0;
    while let Some(message) = sub.try_next() {
        if let AgentMessage::UpdateDataModel(update) = message {
            apply_update(&mut model, &update.path.unwrap(), update.value);
            updates += 1;
        }
    }
    assert!(
        updates >= 1,
        "the subscriber here saw the update made there"
    );
    assert_eq!(model["order"]["locale"], json!("fr-CH"));
    assert_eq!(model, here_hub.masked_model(&e, SURFACE).unwrap());

    // A new process: a fresh hub rebuilds the surface from the feed alone.
    let fresh = hub();
    let next = runtime(store.clone(), &fresh);
    next.follow_feed(fresh.clone()).caught_up().await.unwrap();
    assert_eq!(
        fresh.masked_model(&e, SURFACE),
        here_hub.masked_model(&e, SURFACE)
    );
    here.shutdown().await;
    there.shutdown().await;
    next.shutdown().await;
}
