//! Property tests of the fold laws and of seq gaplessness.

use loom_kernel::conformance::{id, started};
use loom_kernel::*;
use loom_kernel::{
    AppendError, DiskStore, ErrorInfo, Event, EventEnvelope, EventStore, EventStoreExt,
    ExecutionId, ExecutionState, MemoryStore,
};
use proptest::prelude::*;
use serde_json::Value;

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e300f64..1e300).prop_map(Value::from),
        "[a-z~/.\"\\\\é]{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z.]{0,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Events over a small alphabet of step and gate ids, so logs both satisfy and break the
/// invariants often.
fn event() -> impl Strategy<Value = Event> {
    let step = prop::sample::select(vec!["a#1", "a#2", "b#1"]).prop_map(String::from);
    let gate = prop::sample::select(vec!["g#1", "g#2"]).prop_map(String::from);
    let effect = prop::sample::select(vec!["e", "f"]).prop_map(String::from);
    prop_oneof![
        2 => (step.clone(), effect.clone(), 1u32..3, 0u64..3).prop_map(|(step_id, effect, attempt, max_cost)| {
            Event::StepStarted(StepStarted { step_id, effect, input_digest: "d".into(), attempt, max_cost })
        }),
        3 => (step.clone(), effect.clone(), json_value(), 0u64..5).prop_map(
            |(step_id, effect, output, cost)| Event::StepCompleted(StepCompleted {
                step_id, effect, input_digest: "d".into(), output: output.into(), cost,
            })
        ),
        1 => (step.clone(), effect.clone()).prop_map(|(step_id, effect)| {
            Event::StepFailed(StepFailed {
                step_id, effect, input_digest: "d".into(),
                error: ErrorInfo::new("x", "failed"), cost: 1,
            })
        }),
        1 => (step.clone(), effect, any::<bool>()).prop_map(|(step_id, effect, timed_out)| {
            let reason = timed_out.then(|| ErrorInfo::new("loom.timeout", "attempt 1 timed out"));
            Event::EffectInDoubt(EffectInDoubt { step_id, effect, attempt: 1, reason })
        }),
        1 => (step.clone(), json_value(), 0..3u8).prop_map(|(step_id, output, kind)| {
            let verdict = match kind {
                0 => Verdict::Retry,
                1 => Verdict::Completed { output: output.into() },
                _ => Verdict::Failed { error: ErrorInfo::new("op", "operator said no") },
            };
            Event::EffectResolved(EffectResolved { step_id, verdict, operator: None })
        }),
        2 => (step, json_value()).prop_map(|(step_id, value)| {
            Event::DecisionRecorded(DecisionRecorded { step_id, kind: "random".into(), value: value.into() })
        }),
        2 => gate.clone().prop_map(|gate_id| Event::ExecutionSuspended(ExecutionSuspended {
            correlation_key: gate_id.clone(), gate_id, event_type: "T".into(),
        })),
        2 => (gate, json_value()).prop_map(|(gate_id, payload)| {
            Event::ExecutionResumed(ExecutionResumed {
                correlation_key: gate_id.clone(), gate_id, event_type: "T".into(), payload: payload.into(),
            })
        }),
        2 => prop::collection::vec(json_value(), 0..3).prop_map(|ops| {
            Event::SurfacePatch(SurfacePatch { step_id: "s".into(), surface_id: "main".into(), ops: Value::Array(ops).into() })
        }),
        1 => json_value().prop_map(|output| Event::ExecutionCompleted(ExecutionCompleted { output: output.into() })),
    ]
}

fn log() -> impl Strategy<Value = Vec<EventEnvelope>> {
    prop::collection::vec(event(), 0..40).prop_map(|events| {
        let id = ExecutionId::new("prop").unwrap();
        let mut log =
            loom_kernel::conformance::log_of(&id, std::iter::once(started("f")).chain(events));
        // Some metadata too, which must survive every round-trip.
        for envelope in &mut log {
            envelope.recorded_at_ms = Some(envelope.seq * 7);
        }
        log
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Folding a prefix and then the rest equals folding the whole, refusals included.
    #[test]
    fn prefix_then_rest_equals_whole(log in log(), split in any::<prop::sample::Index>()) {
        let split = split.index(log.len() + 1);
        let whole = ExecutionState::fold(&log);
        let in_two = ExecutionState::fold(&log[..split])
            .and_then(|mut state| state.apply_all(&log[split..]).map(|()| state));
        prop_assert_eq!(whole, in_two);
    }

    /// Folding is deterministic and unchanged by a JSON round-trip of every event.
    #[test]
    fn json_round_trip_keeps_the_fold(log in log()) {
        let decoded: Vec<EventEnvelope> = log
            .iter()
            .map(|envelope| EventEnvelope::from_json(&envelope.to_json()).unwrap())
            .collect();
        prop_assert_eq!(&decoded, &log);
        prop_assert_eq!(ExecutionState::fold(&decoded), ExecutionState::fold(&log));
        prop_assert_eq!(ExecutionState::fold(&log), ExecutionState::fold(&log));
    }
}

/// One attempted append: a batch size and how far off the right expected seq it is.
fn appends() -> impl Strategy<Value = Vec<(usize, i8)>> {
    prop::collection::vec(
        (1usize..5, prop_oneof![4 => Just(0i8), 1 => -2i8..3]),
        1..25,
    )
}

async fn check_gapless<S: EventStore>(store: &S, attempts: &[(usize, i8)]) {
    let e = id("gapless");
    let mut head = store.append(&e, 0, &[started("f")]).await.expect("start");
    for (n, (size, offset)) in attempts.iter().enumerate() {
        let expected = head.saturating_add_signed(i64::from(*offset));
        let batch: Vec<_> = (0..*size)
            .map(|i| loom_kernel::conformance::tagged((n * 10 + i).into()))
            .collect();
        match store.append(&e, expected, &batch).await {
            Ok(new_head) => {
                assert_eq!(expected, head);
                head = new_head;
                assert_eq!(head, expected + *size as u64);
            }
            Err(AppendError::Conflict { actual_seq, .. }) => {
                assert_ne!(expected, head);
                assert_eq!(actual_seq, head);
            }
            Err(other) => panic!("{other}"),
        }
        assert_eq!(store.head(&e).await.unwrap(), head);
    }
    let log = store.read_all(&e).await.unwrap();
    assert_eq!(log.len() as u64, head);
    assert!(log.iter().enumerate().all(|(i, x)| x.seq == i as u64));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Arbitrary appends, right and wrong, keep every log gapless in both stores.
    #[test]
    fn arbitrary_appends_keep_seq_gapless(attempts in appends()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            check_gapless(&MemoryStore::new(), &attempts).await;
            let dir = tempfile::tempdir().unwrap();
            check_gapless(&DiskStore::open(dir.path().join("s.redb")).unwrap(), &attempts).await;
        });
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every event survives the store's binary record form and the JSON form earlier builds
    /// wrote, with its schema and metadata.
    #[test]
    fn records_round_trip_in_both_forms(log in log()) {
        use loom_kernel::kit::{decode_record, encode_json_record, encode_record};
        for envelope in &log {
            for bytes in [
                encode_record(&envelope.event, envelope.recorded_at_ms),
                encode_json_record(&envelope.event, envelope.recorded_at_ms),
            ] {
                let decoded = decode_record(&envelope.execution_id, envelope.seq, &bytes).unwrap();
                prop_assert_eq!(&decoded, envelope);
            }
        }
    }

    /// Damaged binary records are errors, never panics: every truncation, and arbitrary bytes
    /// after the record marker.
    #[test]
    fn damaged_records_are_errors(log in log(), noise in prop::collection::vec(any::<u8>(), 0..64)) {
        use loom_kernel::kit::{decode_record, encode_record};
        let id = ExecutionId::new("prop").unwrap();
        let bytes = encode_record(&log[log.len() - 1].event, Some(1));
        for cut in 0..bytes.len() {
            prop_assert!(decode_record(&id, 0, &bytes[..cut]).is_err());
        }
        let mut garbage = vec![0xB1];
        garbage.extend(noise);
        let _ = decode_record(&id, 0, &garbage);
    }
}
