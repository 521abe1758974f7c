//! A model-based test of the runtime: random sequences of start (again, or with another
//! input), step outcomes (failure, doubt), resume, resolve, cancel, panics, crashes (a new
//! runtime on the same store, then `recover`) and the clock moving past gates' deadlines
//! against a small reference model. After every
//! transition, for every execution, the live state (`wait`, and the state of a flow parked in
//! memory), the fold of the log and the model agree, and the log replays deterministically.

use std::collections::BTreeMap;

use loom_kernel::Verdict;
use loom_kernel::*;
use loom_kernel::{EventStoreExt, ExecutionStatus, MemoryStore, Payload};
use proptest::prelude::*;
use proptest::test_runner::Config;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::support;
use crate::support::id;

/// What an execution's flow meets: its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Plan {
    /// The idempotent first step fails (the flow then fails).
    fail_first: bool,
    /// The non-idempotent second step's first attempt ends in doubt.
    doubt_second: bool,
    /// The flow panics after its gate.
    panic_at_end: bool,
}

/// How long the gate waits for its resume.
const GATE_TIMEOUT_MS: u64 = 60_000;

/// reserve (idempotent) -> charge (not idempotent) -> gate with a deadline -> end.
async fn order(ctx: FlowCtx, plan: Plan) -> Result<u64, FlowError> {
    ctx.execute("reserve", &plan).await?;
    ctx.execute("charge", &plan).await?;
    ctx.suspend_with_timeout(
        "Go",
        "go",
        std::time::Duration::from_millis(GATE_TIMEOUT_MS),
    )
    .await?;
    if plan.panic_at_end {
        panic!("the flow panics after its gate");
    }
    Ok(1)
}

fn runtime(store: MemoryStore, clock: ManualClock) -> Runtime<MemoryStore> {
    Runtime::builder(store)
        .clock(clock)
        .flow(flow_fn("order", 1, order))
        .effect(
            "reserve",
            FnEffect::new(true, |call: EffectCall| {
                let plan: Plan = call.input.decode().expect("plan");
                std::future::ready(if plan.fail_first {
                    EffectOutcome::failed(loom_kernel::ErrorInfo::new("stock.none", "none left"))
                } else {
                    EffectOutcome::ok(json!("reserved").into())
                })
            }),
        )
        .effect(
            "charge",
            FnEffect::new(false, |call: EffectCall| {
                let plan: Plan = call.input.decode().expect("plan");
                std::future::ready(if plan.doubt_second && call.attempt == 1 {
                    EffectOutcome::in_doubt(loom_kernel::ErrorInfo::new("bank.timeout", "?"))
                } else {
                    EffectOutcome::ok(json!("charged").into()).with_cost(1)
                })
            }),
        )
        .build()
        .unwrap()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Suspended,
    InDoubt,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    fn of(status: ExecutionStatus) -> Option<Self> {
        Some(match status {
            ExecutionStatus::Suspended => Status::Suspended,
            ExecutionStatus::InDoubt => Status::InDoubt,
            ExecutionStatus::Completed => Status::Completed,
            ExecutionStatus::Failed => Status::Failed,
            ExecutionStatus::Cancelled => Status::Cancelled,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pick {
    Completed,
    Failed,
    Retry,
}

#[derive(Debug, Clone)]
enum Transition {
    Start {
        execution: u8,
        plan: Plan,
    },
    Resume {
        execution: u8,
    },
    Resolve {
        execution: u8,
        verdict: Pick,
    },
    Cancel {
        execution: u8,
    },
    Crash,
    /// The clock moves on by this many ms: gates whose deadline it reaches time out.
    Tick {
        by: u64,
    },
}

#[derive(Debug, Clone, Default)]
struct Model {
    executions: BTreeMap<u8, (Plan, Status)>,
    /// Whether the last transition should have been accepted (a start of an existing
    /// execution with its own plan is accepted and changes nothing).
    accepted: bool,
    /// The executions the last transition may have changed (all of them after a crash).
    touched: Vec<u8>,
    /// The clock, in ms from the start.
    now: u64,
    /// The deadline of each execution's pending gate.
    deadlines: BTreeMap<u8, u64>,
}

/// Where a flow stands once it has gone as far as it can after its charge step.
fn after_charge() -> Status {
    Status::Suspended
}

impl ReferenceStateMachine for Model {
    type State = Model;
    type Transition = Transition;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::default()).boxed()
    }

    fn transitions(_: &Model) -> BoxedStrategy<Transition> {
        let execution = 0u8..3;
        let plan = (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(f, d, p)| Plan {
            fail_first: f,
            doubt_second: d,
            panic_at_end: p,
        });
        let verdict = prop_oneof![Just(Pick::Completed), Just(Pick::Failed), Just(Pick::Retry)];
        prop_oneof![
            3 => (execution.clone(), plan).prop_map(|(execution, plan)| Transition::Start { execution, plan }),
            2 => execution.clone().prop_map(|execution| Transition::Resume { execution }),
            2 => (execution.clone(), verdict).prop_map(|(execution, verdict)| Transition::Resolve { execution, verdict }),
            1 => execution.prop_map(|execution| Transition::Cancel { execution }),
            1 => Just(Transition::Crash),
            1 => prop_oneof![Just(GATE_TIMEOUT_MS / 2), Just(GATE_TIMEOUT_MS)].prop_map(|by| Transition::Tick { by }),
        ]
        .boxed()
    }

    fn apply(mut state: Model, transition: &Transition) -> Model {
        state.touched = match transition {
            Transition::Start { execution, .. }
            | Transition::Resume { execution }
            | Transition::Resolve { execution, .. }
            | Transition::Cancel { execution } => vec![*execution],
            Transition::Crash | Transition::Tick { .. } => {
                state.executions.keys().copied().collect()
            }
        };
        let status = |state: &Model, execution: &u8| state.executions.get(execution).map(|e| e.1);
        state.accepted = match transition {
            Transition::Start { execution, plan } => match state.executions.get(execution) {
                Some((recorded, _)) => recorded == plan,
                None => {
                    let status = if plan.fail_first {
                        Status::Failed
                    } else if plan.doubt_second {
                        Status::InDoubt
                    } else {
                        after_charge()
                    };
                    state.executions.insert(*execution, (*plan, status));
                    true
                }
            },
            Transition::Resume { execution } => match state.executions.get_mut(execution) {
                Some((plan, status)) if *status == Status::Suspended => {
                    *status = if plan.panic_at_end {
                        Status::Failed
                    } else {
                        Status::Completed
                    };
                    true
                }
                _ => false,
            },
            Transition::Resolve { execution, verdict } => {
                match state.executions.get_mut(execution) {
                    Some((_, status)) if *status == Status::InDoubt => {
                        *status = match verdict {
                            Pick::Completed | Pick::Retry => after_charge(),
                            Pick::Failed => Status::Failed,
                        };
                        true
                    }
                    _ => false,
                }
            }
            Transition::Cancel { execution } => match status(&state, execution) {
                Some(Status::Suspended | Status::InDoubt) => {
                    state.executions.get_mut(execution).expect("listed").1 = Status::Cancelled;
                    true
                }
                _ => false,
            },
            Transition::Crash => true,
            Transition::Tick { by } => {
                state.now += by;
                let now = state.now;
                for (execution, (plan, status)) in state.executions.iter_mut() {
                    let due = state.deadlines.get(execution).is_some_and(|at| *at <= now);
                    if *status == Status::Suspended && due {
                        *status = if plan.panic_at_end {
                            Status::Failed
                        } else {
                            Status::Completed
                        };
                    }
                }
                true
            }
        };
        // A gate opened by this transition waits until now + the timeout.
        for execution in state.touched.clone() {
            match state.executions.get(&execution) {
                Some((_, Status::Suspended)) => {
                    let at = state.now + GATE_TIMEOUT_MS;
                    state.deadlines.entry(execution).or_insert(at);
                }
                _ => {
                    state.deadlines.remove(&execution);
                }
            }
        }
        state
    }
}

struct Live {
    tokio: &'static tokio::runtime::Runtime,
    store: MemoryStore,
    clock: ManualClock,
    runtime: Runtime<MemoryStore>,
}

struct RuntimeUnderTest;

impl StateMachineTest for RuntimeUnderTest {
    type SystemUnderTest = Live;
    type Reference = Model;

    fn init_test(_: &Model) -> Live {
        // One for all cases (each case has its own store and runtime); no I/O or timer
        // driver: nothing here sleeps.
        static TOKIO: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
        let tokio = TOKIO.get_or_init(|| {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
        });
        let store = MemoryStore::new();
        let clock = ManualClock::new(0);
        let runtime = tokio.block_on(async { runtime(store.clone(), clock.clone()) });
        Live {
            tokio,
            store,
            clock,
            runtime,
        }
    }

    fn apply(mut live: Live, model: &Model, transition: Transition) -> Live {
        let name = |execution: u8| id(&format!("e{execution}"));
        let rt = live.runtime.clone();
        let accepted = live.tokio.block_on(async {
            match transition {
                Transition::Start { execution, plan } => {
                    let options =
                        support::options(&format!("e{execution}"), &["reserve", "charge"]);
                    rt.start("order", &plan, options).await.is_ok()
                }
                Transition::Resume { execution } => rt
                    .resume(&name(execution), "Go", "go", Payload::null())
                    .await
                    .is_ok(),
                Transition::Resolve { execution, verdict } => {
                    let verdict = match verdict {
                        Pick::Completed => Verdict::Completed {
                            output: json!("settled").into(),
                        },
                        Pick::Failed => Verdict::Failed {
                            error: loom_kernel::ErrorInfo::new("ops.no", "not charged"),
                        },
                        Pick::Retry => Verdict::Retry,
                    };
                    rt.resolve(&name(execution), "charge#1", verdict, None)
                        .await
                        .is_ok()
                }
                Transition::Cancel { execution } => rt.cancel(&name(execution), None).await.is_ok(),
                Transition::Crash => true,
                Transition::Tick { by } => {
                    live.clock.advance(std::time::Duration::from_millis(by));
                    // The timer task and the drivers it wakes run on this thread: let them
                    // record every timeout now due before the states are compared.
                    for _ in 0..10_000 {
                        let mut settled = true;
                        for (execution, (_, status)) in &model.executions {
                            let folded = live.store.fold(&name(*execution)).await.unwrap();
                            settled &= Status::of(folded.status()) == Some(*status);
                        }
                        if settled {
                            break;
                        }
                        tokio::task::yield_now().await;
                    }
                    true
                }
            }
        });
        assert_eq!(accepted, model.accepted, "accepted");
        if matches!(transition, Transition::Crash) {
            let store = live.store.clone();
            let clock = live.clock.clone();
            live.runtime = live.tokio.block_on(async {
                let rt = runtime(store, clock);
                rt.recover().await.unwrap();
                rt
            });
        }
        live
    }

    fn check_invariants(live: &Live, model: &Model) {
        live.tokio.block_on(async {
            // An execution the transition did not touch was checked when it last changed.
            let touched = model
                .touched
                .iter()
                .filter_map(|execution| Some((execution, &model.executions.get(execution)?.1)));
            for (execution, expected) in touched {
                let e = id(&format!("e{execution}"));
                let settled = live.runtime.wait(&e).await.unwrap();
                let folded = live.store.fold(&e).await.unwrap();
                assert_eq!(settled, folded, "live state and fold of e{execution}");
                // A flow parked in memory carries the live state its next driver goes on from.
                if let Some(parked) = live.runtime.parked_state(&e) {
                    assert_eq!(parked, folded, "parked state and fold of e{execution}");
                }
                assert_eq!(
                    Status::of(folded.status()),
                    Some(*expected),
                    "e{execution}: {:?}",
                    folded.status()
                );
                let log = live.store.read_all(&e).await.unwrap();
                live.runtime
                    .replay_folded_log(log, folded)
                    .unwrap_or_else(|error| panic!("e{execution} replays: {error}"));
            }
        });
    }
}

/// Sequences run: 2,000 in an ordinary run (about 6 s of CPU in a debug build); `cargo xtask
/// test --long` and CI run 10,000 (`LOOM_STATE_MACHINE_CASES` sets any number).
fn cases() -> u32 {
    std::env::var("LOOM_STATE_MACHINE_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(2_000)
}

prop_state_machine! {
    #![proptest_config(Config {
        cases: cases(),
        failure_persistence: None,
        .. Config::default()
    })]
    #[test]
    fn the_runtime_agrees_with_its_model(sequential 1..16 => RuntimeUnderTest);
}
