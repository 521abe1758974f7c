//! [`EventStore::query_executions`] and [`EventStore::count_by_status`] against the reference,
//! [`ExecutionQuery::select`] over every log folded: a model-based check, with executions
//! started, moved between statuses, ended and deleted between the pages a reader fetches.

use super::{
    StoreHarness, completed, id, in_doubt, resolved, resumed, started, step_started, suspended,
};
use crate::event::{ErrorInfo, Event, ExecutionCancelled, ExecutionFailed, Verdict};
use crate::id::ExecutionId;
use crate::store::{
    EventStore, ExecutionCursor, ExecutionQuery, ListedExecution, StatusCounts,
    every_listed_execution,
};

/// A small deterministic generator (xorshift), so that a failure names its seed.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, sides: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % sides.max(1)
    }

    fn chance(&mut self, in_ten: u64) -> bool {
        self.roll(10) < in_ten
    }
}

const FLOWS: [&str; 3] = ["checkout", "refund", "notify"];

/// Where the model's executions stand: the next events each may take.
struct Model {
    live: Vec<(ExecutionId, u64, Stage)>,
    next_id: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Running,
    Suspended,
    InDoubt,
    Ended,
}

fn failed() -> Event {
    Event::ExecutionFailed(ExecutionFailed {
        error: ErrorInfo::new("flow.error", "failed"),
    })
}

fn cancelled() -> Event {
    Event::ExecutionCancelled(ExecutionCancelled { reason: None })
}

impl Model {
    /// Starts one execution: a top-level one or a child of one already started.
    async fn start<S: EventStore>(&mut self, store: &S, dice: &mut Dice) {
        self.next_id += 1;
        let name = match self.live.len() {
            0 => format!("run-{:03}", self.next_id),
            n if dice.chance(3) => {
                let parent = &self.live[dice.roll(n as u64) as usize].0;
                format!("{parent}/child#{}", self.next_id)
            }
            _ => format!("run-{:03}", self.next_id),
        };
        let execution = id(&name);
        let flow = FLOWS[dice.roll(FLOWS.len() as u64) as usize];
        store
            .append(&execution, 0, &[started(flow)])
            .await
            .expect("start");
        self.live.push((execution, 1, Stage::Running));
    }

    /// Moves one execution a step on, as a flow would.
    async fn step<S: EventStore>(&mut self, store: &S, dice: &mut Dice) {
        if self.live.is_empty() {
            return;
        }
        let at = dice.roll(self.live.len() as u64) as usize;
        let (execution, head, stage) = self.live[at].clone();
        let (events, next): (Vec<Event>, Stage) = match stage {
            Stage::Running => match dice.roll(5) {
                0 => (vec![suspended("g")], Stage::Suspended),
                1 => (vec![step_started("s"), in_doubt("s")], Stage::InDoubt),
                2 => (vec![completed()], Stage::Ended),
                3 => (vec![failed()], Stage::Ended),
                _ => (vec![cancelled()], Stage::Ended),
            },
            Stage::Suspended => match dice.roll(2) {
                0 => (vec![resumed("g")], Stage::Running),
                _ => (vec![cancelled()], Stage::Ended),
            },
            Stage::InDoubt => (
                vec![
                    resolved(
                        "s",
                        Verdict::Failed {
                            error: ErrorInfo::new("effect.failed", "failed"),
                        },
                    ),
                    failed(),
                ],
                Stage::Ended,
            ),
            Stage::Ended => return,
        };
        let head = store
            .append(&execution, head, &events)
            .await
            .expect("append");
        self.live[at] = (execution, head, next);
    }
}

/// A query built from what the store holds: each filter either absent or taken from a row,
/// so that it selects something.
fn some_query(rows: &[ListedExecution], dice: &mut Dice) -> ExecutionQuery {
    let pick = |dice: &mut Dice| -> Option<&ListedExecution> {
        (!rows.is_empty()).then(|| &rows[dice.roll(rows.len() as u64) as usize])
    };
    let mut query = ExecutionQuery {
        limit: 1 + dice.roll(7) as usize,
        ..ExecutionQuery::default()
    };
    if dice.chance(5) {
        query.status = pick(dice).map(|row| row.status);
    }
    if dice.chance(3) {
        query.flow = Some(FLOWS[dice.roll(FLOWS.len() as u64) as usize].to_owned());
    }
    if dice.chance(3) {
        query.id_prefix = pick(dice).map(|row| format!("{}/", row.id));
    }
    if dice.chance(3) {
        query.started_from_ms = pick(dice).and_then(|row| row.started_at_ms);
    }
    if dice.chance(2) {
        query.started_before_ms = pick(dice).and_then(|row| row.started_at_ms.map(|at| at + 1));
    }
    if dice.chance(2) {
        query.ended_from_ms = pick(dice).and_then(|row| row.ended_at_ms);
    }
    if dice.chance(1) {
        query.limit = 0;
    }
    query
}

/// A reader pages newest first, 7 at a time, while another task keeps starting executions:
/// no execution is listed twice, the pages keep the order, and every execution there before
/// the first page is listed (new ones sort above the cursor and push nothing down).
async fn paging_while_executions_start<S: EventStore + Clone>(store: S) {
    let before: Vec<ExecutionId> = (0..60).map(|n| id(&format!("old-{n:03}"))).collect();
    for execution in &before {
        store
            .append(execution, 0, &[started("checkout")])
            .await
            .expect("start");
    }
    let starter = {
        let store = store.clone();
        tokio::spawn(async move {
            for n in 0..200 {
                store
                    .append(&id(&format!("new-{n:03}")), 0, &[started("refund")])
                    .await
                    .expect("start");
                tokio::task::yield_now().await;
            }
        })
    };
    let mut query = ExecutionQuery {
        limit: 7,
        ..ExecutionQuery::default()
    };
    let mut seen: Vec<ExecutionCursor> = Vec::new();
    loop {
        let page = store.query_executions(&query).await.expect("query");
        seen.extend(page.executions.iter().map(ListedExecution::cursor));
        match page.next {
            Some(next) => query.before = Some(next),
            None => break,
        }
    }
    starter.await.expect("the starter");
    let mut sorted = seen.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    sorted.dedup();
    assert_eq!(
        sorted, seen,
        "pages in order, none twice, while starts commit"
    );
    for execution in &before {
        assert!(
            seen.iter().any(|cursor| &cursor.id == execution),
            "{execution} was there before paging began and was not listed"
        );
    }
}

/// For several seeds: executions started and moved on at random; then readers page through
/// random queries while executions keep starting, moving and ending between their pages.
/// Each page equals the reference's page for the same query and cursor over the logs as they
/// are; a listing read with nothing changing meanwhile holds every match once, in order; the
/// counts equal the reference's; the same after the store is reopened. And a reader pages
/// while another task starts executions (`paging_while_executions_start`).
pub async fn queries_agree_with_the_reference<H: StoreHarness>(harness: &mut H) {
    paging_while_executions_start(harness.fresh()).await;
    for seed in [0x9e37_79b9_7f4a_7c15_u64, 0x2545_f491_4f6c_dd1d, 7] {
        let mut dice = Dice(seed);
        let mut store = harness.fresh();
        let mut model = Model {
            live: Vec::new(),
            next_id: 0,
        };
        for round in 0..40 {
            if round % 10 == 9 {
                // Start times a millisecond apart as well as equal ones.
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
            model.start(&store, &mut dice).await;
            if dice.chance(6) {
                model.step(&store, &mut dice).await;
            }
        }
        for reader in 0..12 {
            if reader == 6 {
                store = harness.reopen(store);
            }
            let reference = every_listed_execution(&store).await.expect("reference");
            assert_eq!(
                store.count_by_status().await.expect("counts"),
                StatusCounts::of(&reference),
                "seed {seed:#x}: counts"
            );
            let mut query = some_query(&reference, &mut dice);
            let whole = ExecutionQuery {
                limit: usize::MAX,
                before: None,
                ..query.clone()
            }
            .select(reference.clone());
            let changing = reader % 2 == 1;
            let mut seen: Vec<ExecutionCursor> = Vec::new();
            for _page in 0..200 {
                let expected = query.select(every_listed_execution(&store).await.expect("ref"));
                let page = store.query_executions(&query).await.expect("query");
                assert_eq!(page, expected, "seed {seed:#x}, reader {reader}: {query:?}");
                seen.extend(page.executions.iter().map(ListedExecution::cursor));
                let Some(next) = page.next else { break };
                query.before = Some(next);
                if changing {
                    model.start(&store, &mut dice).await;
                    model.step(&store, &mut dice).await;
                    if dice.chance(2) {
                        let far = crate::store::wall_clock_ms().unwrap_or(0) + 1;
                        match store.delete_ended(far, 1).await {
                            Ok(_) | Err(crate::store::RetentionError::Unsupported) => {}
                            Err(error) => panic!("delete_ended: {error}"),
                        }
                    }
                }
            }
            let mut sorted = seen.clone();
            sorted.sort_by(|a, b| b.cmp(a));
            sorted.dedup();
            assert_eq!(sorted, seen, "seed {seed:#x}: pages in order, none twice");
            if !changing {
                let whole: Vec<ExecutionCursor> = whole
                    .executions
                    .iter()
                    .map(ListedExecution::cursor)
                    .collect();
                assert_eq!(seen, whole, "seed {seed:#x}: every match once");
            }
        }
    }
}
