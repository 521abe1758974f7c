//! `loom --store FILE`: every command against a real disk store that no process holds, and the
//! refusal, with a pointer to `--admin`, when one does.

use crate::support::*;
use loom_kernel::{DiskStore, EventStoreExt, ExecutionStatus};

#[tokio::test]
async fn executions_are_listed_by_status_and_flow() {
    let seeded = Seeded::new().await;

    let all = seeded.loom(&["executions"]);
    assert_eq!(code(&all), 0, "{}", stderr(&all));
    let text = stdout(&all);
    assert!(
        text.contains("order-1") && text.contains("hello-1"),
        "{text}"
    );
    assert!(
        text.contains("in-doubt") && text.contains("completed"),
        "{text}"
    );

    let listed = json_out(&seeded.loom(&["--json", "executions", "--status", "in-doubt"]));
    let ids: Vec<&str> = listed["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|view| view["id"].as_str().unwrap())
        .collect();
    // Newest first: order-2 started after order-1.
    assert_eq!(ids, ["order-2", "order-1"]);
    assert_eq!(listed["executions"][0]["flow"], "order");
    assert_eq!(listed["executions"][0]["status"], "in-doubt");
    assert_eq!(listed["total"], 2);

    let hello = json_out(&seeded.loom(&["--json", "executions", "--flow", "hello"]));
    assert_eq!(hello["executions"].as_array().unwrap().len(), 1);
    assert_eq!(hello["executions"][0]["id"], "hello-1");

    let bad = seeded.loom(&["executions", "--status", "stuck"]);
    assert_eq!(code(&bad), 2);
    assert!(
        stderr(&bad).contains("use one of running"),
        "{}",
        stderr(&bad)
    );
}

#[tokio::test]
async fn show_prints_the_folded_state_then_the_log_with_classified_fields_masked() {
    let seeded = Seeded::new().await;
    let mask = seeded.dir.path().join("classified.txt");
    std::fs::write(&mask, "# K10-R6\ncard.number\n").unwrap();
    let mask = mask.to_str().unwrap();

    let shown = seeded.loom(&["--mask-file", mask, "show", "order-1", "--full"]);
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    let text = stdout(&shown);
    assert!(text.contains("status        in-doubt"), "{text}");
    assert!(text.contains("charge#1"), "{text}");
    assert!(text.contains("loom resolve order-1 'charge#1'"), "{text}");
    assert!(
        text.contains("EXECUTION_STARTED") && text.contains("EFFECT_INDOUBT"),
        "{text}"
    );
    assert!(text.find("steps").unwrap() < text.find("EXECUTION_STARTED").unwrap());
    assert!(!text.contains(CARD), "the card number leaked: {text}");
    assert!(text.contains("\"number\":\"***\""), "{text}");
    assert!(
        text.contains("Ada"),
        "unclassified fields stay visible: {text}"
    );

    let shown = json_out(&seeded.loom(&["--mask", "card.number", "--json", "show", "order-1"]));
    assert_eq!(shown["execution"]["status"], "in-doubt");
    assert_eq!(shown["state"]["stepsInDoubt"][0], "charge#1");
    let step = &shown["state"]["steps"][0];
    assert_eq!(step["status"], "in-doubt");
    assert!(step["startedAtMs"].is_u64(), "{step}");
    assert!(step["endedAtMs"].is_null(), "{step}");
    assert_eq!(shown["events"][0]["type"], "EXECUTION_STARTED");
    assert_eq!(
        shown["events"][0]["event"]["input"]["card"]["number"],
        "***"
    );
    assert!(!shown.to_string().contains(CARD));

    let unknown = seeded.loom(&["show", "nope"]);
    assert_eq!(code(&unknown), 3);
    assert!(stderr(&unknown).contains("execution nope does not exist"));
}

#[tokio::test]
async fn a_classification_beside_the_store_file_masks_without_being_asked() {
    let seeded = Seeded::new().await;
    let store = seeded.store();
    let bare = seeded.loom(&["--json", "show", "order-1"]);
    assert!(
        stdout(&bare).contains(CARD),
        "without a classification the payload is shown as stored"
    );
    std::fs::write(format!("{store}.masks"), "# K10-R6\ncard.number\n").unwrap();
    let shown = seeded.loom(&["show", "order-1", "--full"]);
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    assert!(!stdout(&shown).contains(CARD), "{}", stdout(&shown));
    assert!(stdout(&shown).contains("\"number\":\"***\""));
}

#[tokio::test]
async fn a_reader_that_goes_away_ends_the_output_quietly() {
    let seeded = Seeded::new().await;
    // `loom show ... | head -0`: the reading end is closed before anything is written.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_loom"))
        .args(["--store", seeded.store(), "show", "order-1", "--full"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(output.status.success(), "{:?} {stderr}", output.status);
}

#[tokio::test]
async fn in_doubt_lists_each_step_with_its_idempotency_key_and_its_wait() {
    let seeded = Seeded::new().await;

    let listed = seeded.loom(&["in-doubt"]);
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    let text = stdout(&listed);
    assert!(
        text.contains("order-1:charge#1") && text.contains("order-2:charge#1"),
        "{text}"
    );
    assert!(text.contains("test.no_answer"), "{text}");
    assert!(text.contains("loom resolve <execution> <step>"), "{text}");

    let listed = json_out(&seeded.loom(&["--json", "in-doubt"]));
    let first = &listed[0];
    assert_eq!(first["execution"], "order-1");
    assert_eq!(first["stepId"], "charge#1");
    assert_eq!(first["effect"], "charge");
    assert_eq!(first["attempt"], 1);
    assert_eq!(first["idempotencyKey"], "order-1:charge#1");
    assert!(first["inDoubtSinceMs"].is_u64());
    assert!(first["waitingMs"].is_u64());
}

#[tokio::test]
async fn a_verdict_given_offline_is_recorded_once_and_the_runtime_drives_on_from_it() {
    let seeded = Seeded::new().await;

    let given = seeded.loom(&[
        "resolve",
        "order-1",
        "charge#1",
        "--completed",
        r#"{"charged": 42}"#,
        "--operator",
        "ada",
    ]);
    assert_eq!(code(&given), 0, "{}", stderr(&given));
    assert!(
        stdout(&given).contains("Runtime::recover"),
        "{}",
        stdout(&given)
    );

    let again = seeded.loom(&["resolve", "order-1", "charge#1", "--completed", "1"]);
    assert_eq!(code(&again), 1);
    assert!(
        stderr(&again).contains("is not in doubt (completed at seq"),
        "{}",
        stderr(&again)
    );

    let retry = seeded.loom(&["resolve", "order-2", "charge#1", "--retry"]);
    assert_eq!(code(&retry), 1);
    assert!(stderr(&retry).contains("--admin"), "{}", stderr(&retry));

    let failed = seeded.loom(&["resolve", "order-2", "charge#1", "--failed", "refunded"]);
    assert_eq!(code(&failed), 0, "{}", stderr(&failed));

    let malformed = seeded.loom(&["resolve", "order-1", "charge#1", "--completed", "{"]);
    assert_eq!(code(&malformed), 2);
    let no_verdict = seeded.loom(&["resolve", "order-1", "charge#1"]);
    assert_eq!(code(&no_verdict), 2);

    // The verdict is in the log as the kernel writes it, and the runtime takes it from there.
    let runtime = compose(DiskStore::open(&seeded.path).unwrap());
    let log = runtime.store().read_all(&id("order-1")).await.unwrap();
    let resolved = serde_json::to_value(&log.last().unwrap().event).unwrap();
    assert_eq!(resolved["type"], "EFFECT_RESOLVED");
    assert_eq!(resolved["verdict"]["kind"], "completed");
    assert_eq!(resolved["operator"], "ada");
    runtime.recover().await.unwrap();
    assert_eq!(
        runtime.wait(&id("order-1")).await.unwrap().status(),
        ExecutionStatus::Suspended
    );
    assert_eq!(
        runtime.wait(&id("order-2")).await.unwrap().status(),
        ExecutionStatus::Failed
    );
    drop(runtime);

    // Now the gate: a resume offline, and the runtime completes the flow with its payload.
    let wrong = seeded.loom(&["resume", "order-1", "approval", "other", "true"]);
    assert_eq!(code(&wrong), 1);
    assert!(
        stderr(&wrong).contains("pending: (approval, key 'order-1')"),
        "{}",
        stderr(&wrong)
    );
    let resumed = seeded.loom(&[
        "resume",
        "order-1",
        "approval",
        "order-1",
        r#"{"by":"ada"}"#,
    ]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    let runtime = compose(DiskStore::open(&seeded.path).unwrap());
    runtime.recover().await.unwrap();
    let state = runtime.wait(&id("order-1")).await.unwrap();
    assert_eq!(state.status(), ExecutionStatus::Completed);
    let log = runtime.store().read_all(&id("order-1")).await.unwrap();
    let output = serde_json::to_value(&log.last().unwrap().event).unwrap();
    assert_eq!(output["output"]["charged"]["charged"], 42);
    assert_eq!(output["output"]["approval"]["by"], "ada");
}

#[tokio::test]
async fn cancel_offline_ends_an_execution_once() {
    let seeded = Seeded::new().await;

    let cancelled = seeded.loom(&["cancel", "order-2", "--reason", "duplicate order"]);
    assert_eq!(code(&cancelled), 0, "{}", stderr(&cancelled));
    let again = seeded.loom(&["cancel", "order-2"]);
    assert_eq!(code(&again), 1);
    assert!(
        stderr(&again).contains("already ended (cancelled)"),
        "{}",
        stderr(&again)
    );
    let unknown = seeded.loom(&["cancel", "nope"]);
    assert_eq!(code(&unknown), 3);
    let listed = json_out(&seeded.loom(&["--json", "executions", "--status", "cancelled"]));
    assert_eq!(listed["executions"][0]["id"], "order-2");
}

#[tokio::test]
async fn executions_page_newest_first_and_the_summary_says_what_is_left() {
    let seeded = Seeded::new().await;
    let all = json_out(&seeded.loom(&["--json", "executions"]));
    let newest_first: Vec<String> = all["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|view| view["id"].as_str().unwrap().to_owned())
        .collect();
    let total = newest_first.len();
    assert!(total >= 3, "{all}");
    assert_eq!(all["total"], total);
    assert_eq!(all["nextBefore"], serde_json::Value::Null);

    // Page by one through the cursor the summary line names: every execution once, in order.
    let mut paged = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let mut args = vec!["executions", "--limit", "1"];
        if let Some(cursor) = &before {
            args.extend(["--before", cursor.as_str()]);
        }
        let page = seeded.loom(&args);
        assert_eq!(code(&page), 0, "{}", stderr(&page));
        let text = stdout(&page);
        assert!(
            text.contains(&format!("1 shown of {total} (newest first)")),
            "{text}"
        );
        paged.push(newest_first[paged.len()].clone());
        assert!(text.contains(&paged[paged.len() - 1]), "{text}");
        let left = total - paged.len();
        match text.split_once("more: --before ") {
            Some((count, cursor)) => {
                // How many are left is known on the first page (the total less the page).
                if paged.len() == 1 {
                    assert!(count.ends_with(&format!("{left} ")), "{text}");
                }
                assert!(left > 0, "{text}");
                before = Some(cursor.trim().to_owned());
            }
            None => {
                assert_eq!(left, 0, "{text}");
                break;
            }
        }
    }
    assert_eq!(paged, newest_first);

    let zero = seeded.loom(&["executions", "--limit", "0"]);
    assert_eq!(code(&zero), 2);
    assert!(
        stderr(&zero).contains("limit 0 is out of range"),
        "{}",
        stderr(&zero)
    );
    let nowhere = seeded.loom(&["executions", "--before", "no-such-execution"]);
    assert_eq!(code(&nowhere), 2);
    assert!(
        stderr(&nowhere).contains("no execution no-such-execution"),
        "{}",
        stderr(&nowhere)
    );
}

#[tokio::test]
async fn tail_prints_the_log_and_stops_at_its_end() {
    let seeded = Seeded::new().await;

    // An ended execution: follows to its end and stops by itself.
    let ended = seeded.loom(&["tail", "hello-1"]);
    assert_eq!(code(&ended), 0, "{}", stderr(&ended));
    assert!(
        stdout(&ended).contains("EXECUTION_COMPLETED"),
        "{}",
        stdout(&ended)
    );

    let lines = seeded.loom(&["--json", "tail", "order-1", "--no-follow", "--from", "1"]);
    assert_eq!(code(&lines), 0, "{}", stderr(&lines));
    let seqs: Vec<u64> = stdout(&lines)
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs.first(), Some(&1));
    assert!(seqs.windows(2).all(|pair| pair[1] == pair[0] + 1));

    let unknown = seeded.loom(&["tail", "nope"]);
    assert_eq!(code(&unknown), 3);
}

#[tokio::test]
async fn export_log_writes_one_json_lines_file_per_execution() {
    let seeded = Seeded::new().await;
    let out = seeded.dir.path().join("logs");

    let exported = seeded.loom(&["export-log", "--out", out.to_str().unwrap()]);
    assert_eq!(code(&exported), 0, "{}", stderr(&exported));
    assert!(
        stdout(&exported).contains("wrote 3 executions"),
        "{}",
        stdout(&exported)
    );
    let log = loom_replay_check::read_log(&out.join("order-1.jsonl")).unwrap();
    let runtime = compose(DiskStore::open(&seeded.path).unwrap());
    assert_eq!(log, runtime.store().read_all(&id("order-1")).await.unwrap());
}

#[tokio::test]
async fn export_log_writes_every_valid_id_and_one_failure_stops_no_other_export() {
    let seeded = Seeded::new().await;
    // Ids of about 250 bytes, one of them longer still once its `/` are escaped.
    let long = format!("{}-a", "x".repeat(248));
    let slashed = format!("{}-b", "a/".repeat(124));
    {
        let runtime = compose(DiskStore::open(&seeded.path).unwrap());
        start_hello(&runtime, &long).await;
        start_hello(&runtime, &slashed).await;
    }
    let out = seeded.dir.path().join("logs");
    let out_arg = out.to_str().unwrap();

    let exported = seeded.loom(&["export-log", "--out", out_arg]);
    assert_eq!(code(&exported), 0, "{}", stderr(&exported));
    for name in [&long, &slashed] {
        let path = loom_replay_check::path_for(&out, &id(name));
        let log = loom_replay_check::read_log(&path).unwrap();
        assert_eq!(log[0].execution_id.as_str(), name);
    }

    // An id that names no execution, between two that do: both are written, the command fails.
    let again = seeded.dir.path().join("again");
    let again_arg = again.to_str().unwrap();
    let partial = seeded.loom(&[
        "export-log",
        "--out",
        again_arg,
        "--execution",
        &long,
        "--execution",
        "no-such-execution",
        "--execution",
        "order-1",
    ]);
    assert_ne!(code(&partial), 0);
    assert!(
        stderr(&partial).contains("no-such-execution"),
        "{}",
        stderr(&partial)
    );
    assert!(loom_replay_check::path_for(&again, &id(&long)).exists());
    assert!(again.join("order-1.jsonl").exists());
}

#[tokio::test]
async fn a_step_left_in_doubt_by_a_cancel_is_listed_and_resolve_names_it() {
    let seeded = Seeded::new().await;
    let cancelled = seeded.loom(&["cancel", "order-1"]);
    assert_eq!(code(&cancelled), 0, "{}", stderr(&cancelled));

    let listed = json_out(&seeded.loom(&["--json", "in-doubt"]));
    let order_1 = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|step| step["execution"] == "order-1")
        .unwrap_or_else(|| panic!("order-1 is not listed: {listed}"));
    assert_eq!(order_1["cancelled"], true);
    let text = stdout(&seeded.loom(&["in-doubt"]));
    assert!(text.contains("order-1 (cancelled)"), "{text}");

    let refused = seeded.loom(&["resolve", "order-1", "charge#1", "--completed", "1"]);
    assert_ne!(code(&refused), 0);
    assert!(
        stderr(&refused).contains("was in doubt when the execution was cancelled"),
        "{}",
        stderr(&refused)
    );
}

#[tokio::test]
async fn a_store_held_by_another_process_is_refused_with_a_pointer_to_the_admin_api() {
    let seeded = Seeded::new().await;
    let store = seeded.store();
    let held = DiskStore::open(&seeded.path).unwrap();

    for args in [
        vec!["--store", store, "executions"],
        vec![
            "--store",
            store,
            "resolve",
            "order-1",
            "charge#1",
            "--completed",
            "1",
        ],
    ] {
        let refused = loom(&args);
        assert_eq!(code(&refused), 4, "{args:?}");
        let message = stderr(&refused);
        assert!(message.contains("held by another process"), "{message}");
        assert!(
            message.contains("--admin http://127.0.0.1:PORT --token TOKEN"),
            "{message}"
        );
    }
    drop(held);

    let missing = loom(&[
        "--store",
        seeded.dir.path().join("none.redb").to_str().unwrap(),
        "executions",
    ]);
    assert_eq!(code(&missing), 4);
    assert!(
        stderr(&missing).contains("does not exist"),
        "{}",
        stderr(&missing)
    );
    let no_token = loom(&["--admin", "http://127.0.0.1:9", "executions"]);
    assert_eq!(code(&no_token), 2, "a missing token is a usage error");
    assert!(
        stderr(&no_token).contains("give --token"),
        "{}",
        stderr(&no_token)
    );
    let nowhere = loom(&["executions"]);
    assert_eq!(code(&nowhere), 2);
    assert!(
        stderr(&nowhere).contains("--store FILE"),
        "{}",
        stderr(&nowhere)
    );
}

#[test]
fn help_lists_every_command_and_the_exit_codes() {
    let help = loom(&["--help"]);
    assert_eq!(code(&help), 0);
    let text = stdout(&help);
    for command in [
        "executions",
        "show",
        "tail",
        "in-doubt",
        "resolve",
        "resume",
        "cancel",
        "export-log",
    ] {
        assert!(text.contains(command), "{command} is missing: {text}");
    }
    assert!(text.contains("Exit codes:"), "{text}");
    for command in ["resolve", "resume", "tail"] {
        let help = loom(&[command, "--help"]);
        assert_eq!(code(&help), 0, "{command}");
    }
    assert_eq!(code(&loom(&["no-such-command"])), 2);
}

#[tokio::test]
async fn a_checkout_of_the_quickstart_is_found_and_approved_from_the_cli_alone() {
    use loom_kernel::Runtime;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loom.redb");
    let runtime = quickstart::compose(Runtime::builder(DiskStore::open(&path).unwrap()))
        .build()
        .unwrap();
    let checkout = id("checkout-1");
    let order = quickstart::Order {
        sku: "A1".into(),
        qty: 1,
    };
    runtime
        .start("checkout", &order, quickstart::start_options(&checkout))
        .await
        .unwrap();
    assert_eq!(
        runtime.wait(&checkout).await.unwrap().status(),
        ExecutionStatus::Suspended
    );
    drop(runtime);
    let store = path.to_str().unwrap();

    let stuck = json_out(&loom(&[
        "--store",
        store,
        "--json",
        "executions",
        "--status",
        "suspended",
    ]));
    assert_eq!(stuck["executions"][0]["id"], "checkout-1");
    let shown = loom(&["--store", store, "show", "checkout-1"]);
    let text = stdout(&shown);
    let key = quickstart::approval_key(&checkout);
    let hint = format!(
        "loom resume checkout-1 {} {key} <json>",
        quickstart::APPROVAL_EVENT
    );
    assert!(text.contains(&hint), "{text}");
    let resumed = loom(&[
        "--store",
        store,
        "resume",
        "checkout-1",
        quickstart::APPROVAL_EVENT,
        &key,
        r#"{"action": "approve", "by": "ops"}"#,
    ]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));

    let runtime = quickstart::compose(Runtime::builder(DiskStore::open(&path).unwrap()))
        .build()
        .unwrap();
    runtime.recover().await.unwrap();
    assert_eq!(
        runtime.wait_ended(&checkout).await.unwrap().status(),
        ExecutionStatus::Completed
    );

    drop(runtime);

    // A failed execution: `show` says how it failed first, with the code.
    let failed_path = dir.path().join("failed.redb");
    {
        let store = DiskStore::open(&failed_path).unwrap();
        let started = loom_kernel::Event::ExecutionStarted(loom_kernel::ExecutionStarted {
            flow: "checkout".into(),
            flow_version: 1,
            input: loom_kernel::Payload::from_value(&serde_json::json!({"sku": "A1"})),
            capabilities: Default::default(),
            budget: None,
        });
        let failed = loom_kernel::Event::ExecutionFailed(loom_kernel::ExecutionFailed {
            error: loom_kernel::ErrorInfo::new("shop.out_of_stock", "A1 is out of stock"),
        });
        loom_kernel::EventStore::append(&store, &id("checkout-9"), 0, &[started, failed])
            .await
            .unwrap();
    }
    let failed_store = failed_path.to_str().unwrap();
    let shown = stdout(&loom(&["--store", failed_store, "show", "checkout-9"]));
    let failure = shown.lines().nth(3).unwrap_or_default();
    assert_eq!(
        failure, "failure       shop.out_of_stock: A1 is out of stock",
        "{shown}"
    );
    let json = json_out(&loom(&[
        "--store",
        failed_store,
        "--json",
        "show",
        "checkout-9",
    ]));
    assert_eq!(json["outcome"]["failure"]["code"], "shop.out_of_stock");
    assert_eq!(json["outcome"]["input"]["sku"], "A1");

    // Parent and child name each other.
    let parent = stdout(&loom(&["--store", store, "show", "checkout-1"]));
    assert!(
        parent.contains("child         checkout-1/notify#1  (ended)"),
        "{parent}"
    );
    let child = stdout(&loom(&["--store", store, "show", "checkout-1/notify#1"]));
    assert!(child.contains("parent        checkout-1"), "{child}");
}

/// An offline resume of one gate of a `first_of` closes the others in the same append, as a
/// live resume does (the group is recorded when it opens), and the flow takes the same branch
/// when its process next runs (issue 41, item 2). Gates the flow joined, with no group recorded,
/// are refused as before: the log cannot say whether one resume closes the others.
#[tokio::test]
async fn an_offline_resume_of_a_first_of_gate_closes_the_others_and_joined_gates_are_refused() {
    use loom_kernel::{FlowCtx, FlowError, Runtime, StartOptions, flow_fn};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loom.redb");
    let runtime = |path: &std::path::Path| {
        Runtime::builder(DiskStore::open(path).unwrap())
            .flow(flow_fn(
                "either",
                1,
                |ctx: FlowCtx, _: serde_json::Value| async move {
                    let first = ctx.first_of(&[("Yes", "k"), ("No", "k")], None).await?;
                    Ok::<_, FlowError>(serde_json::json!(format!("{first:?}")))
                },
            ))
            .flow(flow_fn(
                "joined",
                1,
                |ctx: FlowCtx, _: serde_json::Value| async move {
                    let (yes, no) = futures::join!(ctx.suspend("Yes", "k"), ctx.suspend("No", "k"));
                    Ok::<_, FlowError>(serde_json::json!([yes?.to_value(), no?.to_value()]))
                },
            ))
            .build()
            .unwrap()
    };
    {
        let runtime = runtime(&path);
        for (flow, name) in [("either", "e-1"), ("joined", "j-1")] {
            runtime
                .start(flow, &serde_json::json!(null), StartOptions::new(id(name)))
                .await
                .unwrap();
            let state = runtime.wait(&id(name)).await.unwrap();
            assert_eq!(state.status(), ExecutionStatus::Suspended);
        }
    }
    let store = path.to_str().unwrap();
    let resumed = loom(&["--store", store, "resume", "e-1", "Yes", "k", "true"]);
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
    let before = DiskStore::open(&path)
        .unwrap()
        .read_all(&id("j-1"))
        .await
        .unwrap();
    let refused = loom(&["--store", store, "resume", "j-1", "Yes", "k", "true"]);
    assert_ne!(code(&refused), 0);
    assert!(
        stderr(&refused).contains("opened together with 'No#1'"),
        "{}",
        stderr(&refused)
    );
    let runtime = runtime(&path);
    assert_eq!(
        runtime.store().read_all(&id("j-1")).await.unwrap(),
        before,
        "nothing recorded"
    );
    let log = runtime.store().read_all(&id("e-1")).await.unwrap();
    let resumes: Vec<(String, serde_json::Value)> = log
        .iter()
        .filter_map(|envelope| match &envelope.event {
            loom_kernel::Event::ExecutionResumed(r) => {
                Some((r.gate_id.clone(), r.payload.to_value()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        resumes,
        [
            ("Yes#1".to_owned(), serde_json::json!(true)),
            (
                "No#1".to_owned(),
                serde_json::json!({"loom.closed": {"by": "Yes#1"}})
            )
        ]
    );
    runtime.recover().await.unwrap();
    let ended = runtime.wait(&id("e-1")).await.unwrap();
    assert_eq!(ended.status(), ExecutionStatus::Completed);
    let output = ended.output().map(loom_kernel::Payload::to_value).unwrap();
    assert!(output.as_str().unwrap().contains("index: 0"), "{output}");
}

/// An offline resume of a gate whose deadline has passed is refused and records nothing: the
/// runtime records the time-out when it next runs, as a live resume after the deadline is
/// refused as timed out (issue 41, hole 7). Before its deadline, the same resume is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_resume_after_the_gate_s_deadline_is_refused_and_records_nothing() {
    use loom_kernel::{EventStoreExt, ExecutionStatus, FlowCtx, FlowError, Runtime, StartOptions};
    async fn timed(ctx: FlowCtx, deadline_ms: u64) -> Result<String, FlowError> {
        let outcome = ctx.suspend_until("Approval", "a-1", deadline_ms).await?;
        Ok(format!("{outcome:?}"))
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loom.redb");
    let now = loom_console::now_ms().unwrap();
    let soon = now + 1_500;
    {
        let runtime = Runtime::builder(DiskStore::open(&path).unwrap())
            .flow(loom_kernel::flow_fn("timed", 1, timed))
            .build()
            .unwrap();
        for (name, deadline) in [("soon", soon), ("later", now + 86_400_000)] {
            let e = runtime
                .start("timed", &deadline, StartOptions::new(id(name)))
                .await
                .unwrap();
            assert_eq!(
                runtime.wait(&e).await.unwrap().status(),
                ExecutionStatus::Suspended
            );
        }
        runtime.shutdown().await;
    }
    let wait = soon.saturating_sub(loom_console::now_ms().unwrap()) + 100;
    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
    let store = path.to_str().unwrap();
    let refused = loom_async(&[
        "--store", store, "resume", "soon", "Approval", "a-1", "\"yes\"",
    ])
    .await;
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("timed out"),
        "{}",
        stderr(&refused)
    );
    let accepted = loom_async(&[
        "--store", store, "resume", "later", "Approval", "a-1", "\"yes\"",
    ])
    .await;
    assert_eq!(code(&accepted), 0, "{}", stderr(&accepted));
    let opened = DiskStore::open_read_only(&path, Default::default()).unwrap();
    let soon_log = opened.read_all(&id("soon")).await.unwrap();
    assert!(
        !soon_log
            .iter()
            .any(|envelope| matches!(envelope.event, loom_kernel::Event::ExecutionResumed(_))),
        "nothing recorded for the gate that timed out"
    );
}
