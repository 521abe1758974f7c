//! The example on PostgreSQL (`--store postgres://...`): the story as real processes (crash,
//! recovery parking the step in doubt, the verdict, completion, replay-check), and the
//! operator's commands on the database. Skipped loudly without a server (`cargo xtask pg-up`);
//! a failure with `LOOM_REQUIRE_POSTGRES=1` (as in CI).

use std::process::Command;

use a2ui_callfunction::app::CARD_NUMBER;
use a2ui_callfunction::client::read_ledger;
use a2ui_callfunction::operator::Target;
use a2ui_callfunction::story::EXECUTION;
use loom_kernel::{EventStoreExt, ExecutionId, ExecutionStatus};
use loom_store_postgres::{PostgresStore, PostgresStoreConfig};
use loom_store_postgres::{fresh_schema, server_url};

use crate::support::{checkout_in_doubt, in_own_runtime, operator_completes_the_step, run_example};

async fn store(url: &str, schema: &str) -> PostgresStore {
    PostgresStore::connect(PostgresStoreConfig::new(url).schema(schema))
        .await
        .unwrap()
}

#[test]
fn the_story_runs_on_postgresql_crash_in_doubt_verdict_and_all() {
    let Some(url) = server_url("a2ui-callfunction story on PostgreSQL") else {
        return;
    };
    let schema = fresh_schema("a2ui_story");
    let dir = tempfile::tempdir().unwrap();
    let story = dir.path().join("story");
    let (stdout, _) = run_example([
        "--dir",
        story.to_str().unwrap(),
        "--store",
        &url,
        "--schema",
        &schema,
    ]);
    for told in [
        "runs on PostgreSQL",
        "SIGABRT",
        "EFFECT_INDOUBT",
        "EFFECT_RESOLVED",
        "deterministic",
        "The story is complete",
    ] {
        assert!(stdout.contains(told), "the story tells `{told}`:\n{stdout}");
    }
    assert!(
        !stdout.contains(CARD_NUMBER),
        "the card in clear:\n{stdout}"
    );
    let orders = read_ledger(&dir.path().join("story/orders.jsonl")).unwrap();
    assert_eq!(orders.len(), 1, "submitOrder ran once: {orders:?}");
    in_own_runtime(async {
        let store = store(&url, &schema).await;
        let state = store
            .fold(&ExecutionId::new(EXECUTION).unwrap())
            .await
            .unwrap();
        assert_eq!(state.status(), ExecutionStatus::Completed);
    });
    // The operator's listing reads the database (no file, no server needed).
    let listed = Command::new(env!("CARGO_BIN_EXE_a2ui-callfunction"))
        .args(["indoubt", "list", "--store", &url, "--schema", &schema])
        .output()
        .unwrap();
    assert!(listed.status.success(), "{listed:?}");
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("no step is in doubt"),
        "{listed:?}"
    );
}

#[test]
fn on_postgresql_the_operator_lists_the_step_and_a_verdict_finishes_the_flow() {
    let Some(url) = server_url("a2ui-callfunction operator on PostgreSQL") else {
        return;
    };
    let schema = fresh_schema("a2ui_operator");
    let e = ExecutionId::new("offline").unwrap();
    in_own_runtime(async { checkout_in_doubt(store(&url, &schema).await, &e).await });
    let target = Target::Postgres {
        url: url.clone(),
        schema: schema.clone(),
    };
    operator_completes_the_step(&target, "offline");
    in_own_runtime(async {
        let store = store(&url, &schema).await;
        assert_eq!(
            store.fold(&e).await.unwrap().status(),
            ExecutionStatus::Completed
        );
        assert!(
            loom_effect_runtime::steps_in_doubt(&store)
                .await
                .unwrap()
                .is_empty()
        );
    });
}
