//! The wire: every message the plugin emits validates against the A2UI v1.0 JSON Schemas of
//! the reference SDK `a2ui-core` 0.4.0 (validators compiled once), parses back to itself, and
//! strict parsing names the offending field.

use std::sync::OnceLock;

use crate::support::*;
use loom_agent_surface::SurfaceOp;
use loom_kernel::DataClassification;
use loom_plugin_a2ui::{A2UISurfaceBridge, BridgeError, ComponentError, MessageSchema};
use loom_plugin_a2ui::{
    AgentMessage, FunctionError, FunctionOutcome, FunctionResponse, RendererMessage, WireError,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// The agent-to-renderer schema with `catalog.json` resolved to the test catalogs.
fn validator() -> &'static MessageSchema {
    static VALIDATOR: OnceLock<MessageSchema> = OnceLock::new();
    VALIDATOR.get_or_init(|| MessageSchema::new(&catalogs()).unwrap())
}

/// Checks one emitted message: schema-valid, and it parses back to itself.
fn check(message: &AgentMessage) {
    let value = message.to_value();
    let errors = validator().errors(&value);
    assert!(errors.is_empty(), "{value} fails the schema: {errors:?}");
    assert_eq!(
        &AgentMessage::parse(value.to_string().as_bytes()).unwrap(),
        message
    );
}

fn bridge() -> A2UISurfaceBridge {
    A2UISurfaceBridge::new(SURFACE, catalogs(), classification())
}

fn ops(values: Value) -> Vec<SurfaceOp> {
    values
        .as_array()
        .unwrap()
        .iter()
        .map(|v| SurfaceOp::from_value(v).unwrap())
        .collect()
}

#[test]
fn every_kind_of_emitted_message_validates_against_the_schemas() {
    let mut bridge = bridge();
    check(&bridge.create_surface(components(), order_model()).unwrap());
    for message in bridge
        .apply_ops(&ops(json!([
            {"op": "set", "path": "order.status", "value": "paid"},
            {"op": "remove", "path": "order.title"},
            {"op": "append", "path": "order.items", "value": {"sku": "B2", "secret": "x"}},
            {"op": "set", "path": "", "value": {"fresh": true}}
        ])))
        .unwrap()
    {
        check(&message);
    }
    check(
        &bridge
            .update_components(vec![
                json!({"id": "title", "component": "Text", "text": "New"}),
            ])
            .unwrap(),
    );
    check(
        &bridge
            .call_function(
                Some(TEST_CATALOG),
                "getLocale",
                Map::new(),
                "e1:getLocale#1",
            )
            .unwrap(),
    );
    check(&bridge.delete_surface().unwrap());
    // The validator does refuse: an unknown component and an unknown function.
    assert!(!validator().is_valid(&json!({"version": "v1.0", "createSurface": {"surfaceId": "s", "components": [{"id": "root", "component": "Nope"}]}})));
    assert!(!validator().is_valid(&json!({"version": "v1.0", "callRendererFunction": {"functionCallId": "c", "callFunction": {"@call": "nope", "catalogId": TEST_CATALOG}}})));
    for outcome in [
        FunctionOutcome::Value(json!({"a": 1})),
        FunctionOutcome::Error(FunctionError {
            code: "NOPE".into(),
            message: "no".into(),
        }),
    ] {
        check(&AgentMessage::AgentFunctionResponse(FunctionResponse {
            function_call_id: "c1".into(),
            outcome,
        }));
    }
}

fn order_model() -> Value {
    json!({"order": order(), "customer": {"name": "Ada", "card": "4111"}})
}

#[test]
fn updates_carry_post_patch_values_at_minimal_pointers_and_remove_as_null() {
    let mut bridge = bridge();
    bridge.create_surface(components(), order_model()).unwrap();
    let messages = bridge
        .apply_ops(&ops(json!([
            {"op": "set", "path": "order.status", "value": "paid"},
            {"op": "increment", "path": "order.version", "by": 2},
            {"op": "set", "path": "order", "value": {"status": "new", "version": 1}},
            {"op": "increment", "path": "order.version", "by": 1},
            {"op": "remove", "path": "customer.name"}
        ])))
        .unwrap();
    let updates: Vec<(String, Value)> = messages
        .iter()
        .map(|m| match m {
            AgentMessage::UpdateDataModel(u) => (u.path.clone().unwrap(), u.value.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        updates,
        vec![
            ("/order".to_owned(), json!({"status": "new", "version": 2})),
            ("/customer/name".to_owned(), Value::Null),
        ]
    );
}

#[test]
fn classified_values_are_masked_on_the_way_out_and_kept_true_in_the_fold() {
    let mut bridge = bridge();
    let AgentMessage::CreateSurface(create) =
        bridge.create_surface(components(), order_model()).unwrap()
    else {
        panic!()
    };
    let data = Value::Object(create.data_model.unwrap());
    assert_eq!(data["customer"]["card"], json!("***"));
    assert_eq!(data["order"]["items"][0]["secret"], json!("***"));
    let messages = bridge
        .apply_ops(&ops(json!([
            {"op": "set", "path": "customer.card", "value": "5500"},
            {"op": "append", "path": "order.items", "value": {"sku": "C3", "secret": "zz"}}
        ])))
        .unwrap();
    let values: Vec<Value> = messages
        .iter()
        .map(|m| match m {
            AgentMessage::UpdateDataModel(u) => json!([u.path, u.value]),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        values,
        vec![
            json!(["/customer/card", "***"]),
            json!(["/order/items/1", {"sku": "C3", "secret": "***"}])
        ]
    );
    assert_eq!(bridge.model()["customer"]["card"], json!("5500"));
}

#[test]
fn a_change_below_a_classified_path_is_sent_as_the_masked_path() {
    let masking = DataClassification::mask_paths(["vault"]).unwrap();
    let mut bridge = A2UISurfaceBridge::new("s", catalogs(), masking);
    bridge
        .create_surface(components(), json!({"vault": {"pin": 1}}))
        .unwrap();
    let messages = bridge
        .apply_ops(&ops(
            json!([{"op": "set", "path": "vault.pin", "value": 2}]),
        ))
        .unwrap();
    assert_eq!(messages.len(), 1);
    let AgentMessage::UpdateDataModel(update) = &messages[0] else {
        panic!()
    };
    assert_eq!(
        (update.path.as_deref(), &update.value),
        (Some("/vault"), &json!("***"))
    );
}

#[test]
fn outgoing_components_are_checked_against_their_catalog() {
    let mut bridge = bridge();
    let refuse = |components: Vec<Value>| {
        let mut b = A2UISurfaceBridge::new("s", catalogs(), DataClassification::default());
        match b.create_surface(components, json!({})) {
            Err(BridgeError::Component { source, .. }) => source,
            other => panic!("{other:?}"),
        }
    };
    assert!(matches!(
        refuse(vec![
            json!({"id": "order-title", "component": "Text", "text": "x"})
        ]),
        ComponentError::InvalidId { .. }
    ));
    assert!(matches!(
        refuse(vec![
            json!({"id": "root", "component": "Badge", "text": "x"})
        ]),
        ComponentError::UnknownComponent { .. }
    ));
    assert!(matches!(
        refuse(vec![json!({"id": "root", "component": "Text"})]),
        ComponentError::Invalid { .. }
    ));
    assert!(matches!(
        refuse(vec![
            json!({"id": "root", "component": "Text", "text": "x", "colour": 1})
        ]),
        ComponentError::Invalid { .. }
    ));
    assert!(matches!(
        refuse(vec![
            json!({"id": "main", "component": "Text", "text": "x"})
        ]),
        ComponentError::NoRoot
    ));
    assert!(bridge.create_surface(components(), json!({})).is_ok());
}

#[test]
fn a_renderer_only_function_is_refused_before_anything_is_sent() {
    let mut bridge = bridge();
    let refused = bridge.call_function(Some(TEST_CATALOG), "formatThing", Map::new(), "c#1");
    assert!(
        matches!(refused, Err(BridgeError::RendererOnly { .. })),
        "{refused:?}"
    );
    let reply = json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": "c#1", "value": "x"}});
    assert!(matches!(
        bridge.ingest_function_response(reply.to_string().as_bytes(), "c#1"),
        Err(loom_plugin_a2ui::IngestError::UnknownCallId { .. })
    ));
}

#[test]
fn replies_are_checked_against_the_call_issued() {
    use loom_plugin_a2ui::IngestError;
    let mut bridge = bridge();
    bridge.create_surface(components(), json!({})).unwrap();
    bridge
        .call_function(
            Some(TEST_CATALOG),
            "confirm",
            Map::from_iter([("question".into(), json!("ok?"))]),
            "e:confirm#1",
        )
        .unwrap();
    let reply = |id: &str, value: Value| {
        json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": id, "value": value}})
            .to_string()
            .into_bytes()
    };
    assert!(matches!(
        bridge.ingest_function_response(&reply("e:confirm#2", json!(true)), "e:confirm#1"),
        Err(IngestError::MismatchedCallId { .. })
    ));
    assert!(matches!(
        bridge.ingest_function_response(&reply("e:confirm#1", json!("yes")), "e:confirm#1"),
        Err(IngestError::InvalidResult { .. })
    ));
    let result = bridge
        .ingest_function_response(&reply("e:confirm#1", json!(true)), "e:confirm#1")
        .unwrap();
    assert_eq!(
        (result.surface_id.as_str(), result.name.as_str()),
        (SURFACE, "confirm")
    );
    assert!(matches!(
        bridge.ingest_function_response(&reply("e:confirm#1", json!(true)), "e:confirm#1"),
        Err(IngestError::AlreadyAnswered { .. })
    ));
    let action = json!({"version": "v1.0", "action": {"name": "go", "surfaceId": "other", "sourceComponentId": "b", "timestamp": "t", "context": {}}});
    assert!(matches!(
        bridge.ingest_action(action.to_string().as_bytes()),
        Err(IngestError::WrongSurface { .. })
    ));
}

#[test]
fn strict_parsing_names_the_field() {
    let parse = |v: Value| RendererMessage::parse(v.to_string().as_bytes()).unwrap_err();
    assert_eq!(
        parse(json!({"version": "v0.9", "action": {}})),
        WireError::WrongVersion {
            found: "\"v0.9\"".into()
        }
    );
    assert_eq!(
        parse(
            json!({"version": "v1.0", "rendererFunctionResponse": {"functionCallId": "c", "value": 1, "extra": 2}})
        ),
        WireError::UnknownField {
            at: "/rendererFunctionResponse/extra".into()
        }
    );
    assert_eq!(
        parse(
            json!({"version": "v1.0", "action": {"name": "a", "surfaceId": "s", "timestamp": "t", "context": {}}})
        ),
        WireError::MissingField {
            at: "/action/sourceComponentId".into()
        }
    );
    assert_eq!(
        parse(
            json!({"version": "v1.0", "callAgentFunction": {"surfaceId": "s", "functionCallId": 3, "callFunction": {"@call": "f"}}})
        ),
        WireError::WrongType {
            at: "/callAgentFunction/functionCallId".into(),
            expected: "a string",
            found: "a number"
        }
    );
    assert!(matches!(
        parse(json!({"version": "v1.0"})),
        WireError::NoMessage { .. }
    ));
    assert!(matches!(
        parse(
            json!({"version": "v1.0", "error": {"code": "X", "message": "m", "surfaceId": "s", "functionCallId": "c"}})
        ),
        WireError::InvalidValue { .. }
    ));
    let deep = "[".repeat(10_000) + &"]".repeat(10_000);
    assert!(matches!(
        RendererMessage::parse(deep.as_bytes()),
        Err(WireError::Json { .. })
    ));
    let agent = AgentMessage::parse(
        json!({"version": "v1.0", "updateDataModel": {"surfaceId": "s", "path": "/a"}})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(
        agent,
        Err(WireError::MissingField {
            at: "/updateDataModel/value".into()
        })
    );
}

pub(crate) fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        prop::sample::select(vec!["v1.0", "action", "error", "value", "@call", "x"])
            .prop_map(Value::from),
        ".{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "version",
                    "action",
                    "name",
                    "surfaceId",
                    "sourceComponentId",
                    "timestamp",
                    "context",
                    "rendererFunctionResponse",
                    "functionCallId",
                    "value",
                    "error",
                    "code",
                    "message",
                    "callAgentFunction",
                    "callFunction",
                    "@call",
                    "path",
                    "createSurface",
                    "updateDataModel",
                    "components",
                    "id",
                    "component",
                ])
                .prop_map(str::to_owned),
                inner,
                0..5,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Arbitrary bytes into every ingest function: Ok or a typed error, never a panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = RendererMessage::parse(&bytes);
        let _ = AgentMessage::parse(&bytes);
        let mut bridge = bridge();
        let _ = bridge.ingest_action(&bytes);
        let _ = bridge.ingest_function_response(&bytes, "c#1");
        let _ = hub().ingest_function_response(SURFACE, &bytes);
    }

    /// Arbitrary JSON (shaped like A2UI messages) into every ingest function: never a panic,
    /// and whatever parses serializes back to the same message.
    #[test]
    fn arbitrary_json_never_panics(value in arb_json(), wrap in any::<bool>()) {
        let value = if wrap {
            json!({"version": "v1.0", "rendererFunctionResponse": value})
        } else {
            value
        };
        let bytes = value.to_string().into_bytes();
        if let Ok(message) = RendererMessage::parse(&bytes) {
            prop_assert_eq!(RendererMessage::from_value(&message.to_value()).unwrap(), message);
        }
        if let Ok(message) = AgentMessage::parse(&bytes) {
            prop_assert_eq!(AgentMessage::from_value(&message.to_value()).unwrap(), message);
        }
        let mut bridge = bridge();
        bridge.create_surface(components(), json!({})).unwrap();
        bridge.call_function(Some(TEST_CATALOG), "getLocale", Map::new(), "c#1").unwrap();
        let _ = bridge.ingest_action(&bytes);
        let _ = bridge.ingest_function_response(&bytes, "c#1");
        let _ = hub().ingest_function_response(SURFACE, &bytes);
    }

    /// Every message random op batches produce validates against the schemas.
    #[test]
    fn messages_from_random_ops_validate(batches in prop::collection::vec(prop::collection::vec(op_strategy(), 1..4), 1..12)) {
        let mut bridge = bridge();
        check(&bridge.create_surface(components(), json!({"a": {}})).unwrap());
        for batch in batches {
            let ops: Vec<SurfaceOp> = batch.iter().filter_map(|v| SurfaceOp::from_value(v).ok()).collect();
            let before = bridge.model().clone();
            match bridge.apply_ops(&ops) {
                Ok(messages) => messages.iter().for_each(check),
                Err(_) => prop_assert_eq!(bridge.model(), &before),
            }
        }
    }
}

fn op_strategy() -> impl Strategy<Value = Value> {
    let path = prop::collection::vec(prop::sample::select(vec!["a", "b", "0", "card"]), 1..3)
        .prop_map(|k| k.join("."));
    let value = prop_oneof![
        any::<i32>().prop_map(Value::from),
        "[a-z]{0,4}".prop_map(Value::from),
        Just(json!({})),
        Just(json!([])),
    ];
    prop_oneof![
        (path.clone(), value.clone())
            .prop_map(|(p, v)| json!({"op": "set", "path": p, "value": v})),
        (path.clone(), value).prop_map(|(p, v)| json!({"op": "append", "path": p, "value": v})),
        path.clone()
            .prop_map(|p| json!({"op": "remove", "path": p})),
        path.prop_map(|p| json!({"op": "increment", "path": p, "by": 1})),
    ]
}

#[test]
fn message_bytes_follow_what_was_touched_not_the_size_of_the_model() {
    let mut rows = Map::new();
    for i in 0..10_000 {
        rows.insert(
            format!("r{i}"),
            json!({"qty": i, "name": format!("row {i}"), "note": "x".repeat(70)}),
        );
    }
    let model = json!({"rows": Value::Object(rows)});
    assert!(model.to_string().len() > 900_000, "about 1 MB");
    let mut bridge = A2UISurfaceBridge::new("big", catalogs(), DataClassification::default());
    bridge.create_surface(components(), model).unwrap();
    let messages = bridge
        .apply_ops(&ops(json!([
            {"op": "set", "path": "rows.r5000.name", "value": "renamed"},
            {"op": "increment", "path": "rows.r7.qty", "by": 1},
            {"op": "append", "path": "log", "value": "x"}
        ])))
        .unwrap();
    let bytes: usize = messages.iter().map(|m| m.to_json().len()).sum();
    assert_eq!(messages.len(), 3);
    assert!(bytes < 300, "{bytes} bytes for three small changes");
}
