//! Who is resuming (LD-019): a resume and an inbound message carry the caller the
//! application identified to the resume authenticator (K12.2), which may await its decision;
//! a refusal, a panic or a decision that never comes records nothing; a message cannot claim
//! its own caller; an inbound handler can start an execution, under the same decision and with
//! `Runtime::start`'s semantics for a second start.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use loom_kernel::*;
use loom_kernel::{EventStoreExt, ExecutionStatus, MemoryStore, Payload};
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot};

use crate::support::{event_names, id};

async fn approve(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let answer = ctx.suspend("Approval", "order-1").await?;
    Ok(answer.to_value())
}

async fn greet(_ctx: FlowCtx, name: String) -> Result<String, FlowError> {
    Ok(format!("hello, {name}"))
}

/// Lets only `alice` resume; no start.
struct OnlyAlice;

impl ResumeAuthenticator for OnlyAlice {
    fn authorize(&self, request: &ResumeRequest<'_>) -> Result<(), String> {
        match request.caller.subject() {
            Some("alice") => Ok(()),
            _ => Err(format!(
                "{} may not resume {}",
                request.caller, request.event_type
            )),
        }
    }
}

/// Who the authenticator asks about, and where the answer goes.
type Asked = (String, oneshot::Sender<Result<(), String>>);

/// Asks a policy (the test) for every decision and waits for its answer.
#[derive(Clone, Default)]
struct AskPolicy {
    asked: Arc<Mutex<Vec<Asked>>>,
    notify: Arc<Notify>,
}

impl AsyncResumeAuthenticator for AskPolicy {
    fn authorize<'a>(&'a self, request: ResumeRequest<'a>) -> Authorization<'a> {
        let (answer, decided) = oneshot::channel();
        let who = request.caller.to_string();
        self.asked.lock().unwrap().push((who, answer));
        self.notify.notify_one();
        Box::pin(async move { decided.await.unwrap_or_else(|_| Err("no answer".into())) })
    }
}

impl AskPolicy {
    /// Waits until the authenticator asks, and returns who it asks about and the answer slot.
    async fn next(&self) -> Asked {
        loop {
            if let Some(asked) = self.asked.lock().unwrap().pop() {
                return asked;
            }
            self.notify.notified().await;
        }
    }
}

/// Lets starters start and operators resume, deciding after a yield (an async decision).
struct Roles;

impl AsyncResumeAuthenticator for Roles {
    fn authorize<'a>(&'a self, request: ResumeRequest<'a>) -> Authorization<'a> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            match request.caller.attribute("role") {
                Some("operator") => Ok(()),
                _ => Err(format!("{} is not an operator", request.caller)),
            }
        })
    }

    fn authorize_start<'a>(&'a self, request: StartRequest<'a>) -> Authorization<'a> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            match request.caller.attribute("role") {
                Some("starter") if request.flow == "greet" => Ok(()),
                _ => Err(format!("{} may not start {}", request.caller, request.flow)),
            }
        })
    }
}

/// Panics while it decides, or while making its decision, as the subject says.
struct Panicking;

impl AsyncResumeAuthenticator for Panicking {
    fn authorize<'a>(&'a self, request: ResumeRequest<'a>) -> Authorization<'a> {
        if request.caller.subject() == Some("early") {
            panic!("panicked before deciding");
        }
        Box::pin(async move {
            tokio::task::yield_now().await;
            panic!("panicked while deciding")
        })
    }
}

/// `{"resume": key, "claims": subject}` resumes the approval, with the caller's subject in the
/// payload; `{"start": id, "name": ..}` starts `greet`.
struct Messages;

impl InboundHandler for Messages {
    fn handle(&self, message: &Value) -> Result<Inbound, String> {
        self.handle_from(&Caller::anonymous(), message)
    }

    fn handle_from(&self, caller: &Caller, message: &Value) -> Result<Inbound, String> {
        if let Some(start) = message.get("start").and_then(Value::as_str) {
            let execution = loom_kernel::ExecutionId::new(start).map_err(|e| e.to_string())?;
            return Ok(Inbound::Start {
                flow: "greet".into(),
                input: Payload::from(message["name"].clone()),
                options: StartOptions::new(execution),
            });
        }
        let key = message["resume"].as_str().ok_or("no key")?;
        Ok(Inbound::Resume {
            execution: id("order-1"),
            event_type: "Approval".into(),
            correlation_key: key.into(),
            payload: Payload::from(json!({"by": caller.subject()})),
        })
    }
}

struct Handlers;

impl Plugin for Handlers {
    fn name(&self) -> &str {
        "messages"
    }
    fn kernel_abi(&self) -> AbiRange {
        AbiRange::caret(1, 1)
    }
    fn contribute(&self, contributions: &mut Contributions) {
        contributions.inbound("messages", Arc::new(Messages));
    }
}

fn builder() -> RuntimeBuilder<MemoryStore> {
    Runtime::builder(MemoryStore::new())
        .flow(flow_fn("approve", 1, approve))
        .flow(flow_fn("greet", 1, greet))
        .plugin(&Handlers)
}

async fn parked(loom: &Runtime<MemoryStore>) -> loom_kernel::ExecutionId {
    let e = id("order-1");
    loom.start("approve", &json!(null), StartOptions::new(e.clone()))
        .await
        .unwrap();
    assert_eq!(
        loom.wait(&e).await.unwrap().status(),
        ExecutionStatus::Suspended
    );
    e
}

fn caller(subject: &str) -> Caller {
    Caller::new(subject).unwrap()
}

/// `who` answers the approval `e` waits on with `answer`.
async fn approve_as(
    loom: &Runtime<MemoryStore>,
    who: &Caller,
    e: &ExecutionId,
    answer: &str,
) -> Result<(), ResumeError> {
    loom.resume_as(who, e, "Approval", "order-1", json!(answer).into())
        .await
}

/// [`approve_as`] on a task of its own.
fn approve_on_a_task(
    loom: &Runtime<MemoryStore>,
    who: Caller,
    e: &ExecutionId,
    answer: &'static str,
) -> tokio::task::JoinHandle<Result<(), ResumeError>> {
    let (loom, e) = (loom.clone(), e.clone());
    tokio::spawn(async move { approve_as(&loom, &who, &e, answer).await })
}

/// A runtime whose authenticator asks the test (the policy returned) for every decision, and
/// an execution parked at its approval.
async fn asking() -> (AskPolicy, Runtime<MemoryStore>, ExecutionId) {
    let policy = AskPolicy::default();
    let loom = builder()
        .async_resume_authenticator(policy.clone())
        .build()
        .unwrap();
    let e = parked(&loom).await;
    (policy, loom, e)
}

/// The reason the authenticator gave for refusing; panics unless it refused.
fn refusal_reason(outcome: Result<(), ResumeError>) -> String {
    match outcome {
        Err(ResumeError::Unauthorized { reason, .. }) => reason,
        other => panic!("{other:?}"),
    }
}

/// What `who` sending `message` to the `messages` handler is refused with; panics if accepted.
async fn inbound_refused(
    loom: &Runtime<MemoryStore>,
    who: &Caller,
    message: Value,
) -> InboundError {
    match loom.inbound_as(who, "messages", &message).await {
        Err(error) => error,
        Ok(action) => panic!("accepted: {action:?}"),
    }
}

#[tokio::test]
async fn a_refused_caller_records_nothing_and_the_allowed_one_resumes() {
    let loom = builder().resume_authenticator(OnlyAlice).build().unwrap();
    let e = parked(&loom).await;
    let before = event_names(loom.store(), &e).await;
    for refused in [
        approve_as(&loom, &caller("bob"), &e, "yes").await,
        loom.resume(&e, "Approval", "order-1", json!("yes").into())
            .await,
    ] {
        let reason = refusal_reason(refused);
        assert!(reason.contains("may not resume Approval"), "{reason}");
    }
    assert_eq!(event_names(loom.store(), &e).await, before);
    approve_as(&loom, &caller("alice"), &e, "yes")
        .await
        .unwrap();
    assert_eq!(
        loom.wait(&e).await.unwrap().status(),
        ExecutionStatus::Completed
    );
}

#[tokio::test]
async fn an_async_authenticator_awaits_its_decision_and_nothing_is_recorded_meanwhile() {
    let (policy, loom, e) = asking().await;
    let before = event_names(loom.store(), &e).await;

    let carol = caller("carol").with_attribute("tenant", "acme").unwrap();
    let resuming = approve_on_a_task(&loom, carol, &e, "yes");
    let (who, answer) = policy.next().await;
    assert_eq!(who, "carol");
    // The decision is pending: nothing is recorded yet.
    assert_eq!(event_names(loom.store(), &e).await, before);
    assert!(!resuming.is_finished());
    answer.send(Err("carol is on leave".into())).unwrap();
    assert_eq!(refusal_reason(resuming.await.unwrap()), "carol is on leave");
    assert_eq!(event_names(loom.store(), &e).await, before);

    // Asked again, allowed this time.
    let resuming = approve_on_a_task(&loom, caller("dave"), &e, "ok");
    let (who, answer) = policy.next().await;
    assert_eq!(who, "dave");
    answer.send(Ok(())).unwrap();
    resuming.await.unwrap().unwrap();
    let done = loom.wait(&e).await.unwrap();
    assert_eq!(done.output().unwrap().to_value(), json!("ok"));
}

#[tokio::test]
async fn a_decision_that_never_comes_is_bounded_by_the_caller_and_records_nothing() {
    let (_policy, loom, e) = asking().await;
    let before = event_names(loom.store(), &e).await;
    let bounded = tokio::time::timeout(
        Duration::from_millis(20),
        approve_as(&loom, &caller("erin"), &e, "yes"),
    )
    .await;
    assert!(bounded.is_err(), "the authenticator never answers");
    assert_eq!(event_names(loom.store(), &e).await, before);
    assert_eq!(loom.state(&e).await.unwrap().pending_gates().len(), 1);
}

#[tokio::test]
async fn a_panicking_authenticator_refuses_whether_it_panics_making_or_awaiting_its_decision() {
    let loom = builder()
        .async_resume_authenticator(Panicking)
        .build()
        .unwrap();
    let e = parked(&loom).await;
    let before = event_names(loom.store(), &e).await;
    for (subject, words) in [
        ("early", "panicked before deciding"),
        ("late", "panicked while deciding"),
    ] {
        let reason = refusal_reason(approve_as(&loom, &caller(subject), &e, "yes").await);
        assert!(
            reason.contains("the resume authenticator panicked"),
            "{reason}"
        );
        assert!(reason.contains(words), "{reason}");
    }
    assert_eq!(event_names(loom.store(), &e).await, before);
    // The runtime is unharmed: without the authenticator's say the gate is still pending.
    assert_eq!(loom.state(&e).await.unwrap().pending_gates().len(), 1);
}

#[tokio::test]
async fn a_message_cannot_claim_its_caller_the_application_says_who_sent_it() {
    let loom = builder().resume_authenticator(OnlyAlice).build().unwrap();
    let e = parked(&loom).await;
    let before = event_names(loom.store(), &e).await;
    // The message claims to be alice; the transport identified mallory.
    let message = json!({"resume": "order-1", "claims": "alice"});
    let forged = inbound_refused(&loom, &caller("mallory"), message).await;
    assert!(
        matches!(
            forged,
            InboundError::Resume(ResumeError::Unauthorized { .. })
        ),
        "{forged:?}"
    );
    assert_eq!(event_names(loom.store(), &e).await, before);
    loom.inbound_as(&caller("alice"), "messages", &json!({"resume": "order-1"}))
        .await
        .unwrap();
    let done = loom.wait(&e).await.unwrap();
    assert_eq!(done.output().unwrap().to_value(), json!({"by": "alice"}));
}

#[tokio::test]
async fn an_inbound_message_starts_an_execution_once_and_a_second_start_behaves_as_start() {
    let loom = builder().async_resume_authenticator(Roles).build().unwrap();
    let starter = caller("svc").with_attribute("role", "starter").unwrap();
    let message = json!({"start": "greet-ada", "name": "ada"});
    let action = loom
        .inbound_as(&starter, "messages", &message)
        .await
        .unwrap();
    assert!(matches!(action, Inbound::Start { ref flow, .. } if flow == "greet"));
    let e = id("greet-ada");
    let done = loom.wait(&e).await.unwrap();
    assert_eq!(done.output().unwrap().to_value(), json!("hello, ada"));

    // The same start again: accepted, nothing runs twice.
    loom.inbound_as(&starter, "messages", &message)
        .await
        .unwrap();
    let started = event_names(loom.store(), &e).await;
    assert_eq!(started, ["EXECUTION_STARTED", "EXECUTION_COMPLETED"]);
    // Another input for the same id: refused as `start` refuses it.
    let conflict = inbound_refused(
        &loom,
        &starter,
        json!({"start": "greet-ada", "name": "bob"}),
    )
    .await;
    assert!(
        matches!(conflict, InboundError::Start(StartError::Conflict { .. })),
        "{conflict:?}"
    );
    assert_eq!(event_names(loom.store(), &e).await, started);
}

#[tokio::test]
async fn an_inbound_start_refused_by_the_authenticator_records_nothing() {
    // An authenticator that decides resumes only refuses starts by default.
    let loom = builder().resume_authenticator(OnlyAlice).build().unwrap();
    let refused =
        inbound_refused(&loom, &caller("alice"), json!({"start": "g1", "name": "x"})).await;
    assert!(
        matches!(
            refused,
            InboundError::Start(StartError::Unauthorized { .. })
        ),
        "{refused:?}"
    );
    assert!(loom.store().read_all(&id("g1")).await.unwrap().is_empty());

    let loom = builder().async_resume_authenticator(Roles).build().unwrap();
    let nobody = loom
        .inbound("no-such-handler", &json!({"start": "g2", "name": "x"}))
        .await;
    assert!(matches!(nobody, Err(InboundError::UnknownHandler(_))));
    for who in [
        Caller::anonymous(),
        caller("svc").with_attribute("role", "reader").unwrap(),
    ] {
        match inbound_refused(&loom, &who, json!({"start": "g2", "name": "x"})).await {
            InboundError::Start(StartError::Unauthorized { reason, .. }) => {
                assert!(reason.contains("may not start greet"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(loom.store().read_all(&id("g2")).await.unwrap().is_empty());

    // With no authenticator, an inbound start is the application's own call.
    let open = builder().build().unwrap();
    open.inbound("messages", &json!({"start": "g3", "name": "y"}))
        .await
        .unwrap();
    assert_eq!(
        open.wait(&id("g3"))
            .await
            .unwrap()
            .output()
            .unwrap()
            .to_value(),
        json!("hello, y")
    );
}

#[test]
fn a_caller_that_could_forge_a_log_line_is_refused_when_built() {
    assert_eq!(Caller::new(""), Err(CallerError::Empty));
    assert_eq!(
        Caller::new("eve\nadmin"),
        Err(CallerError::ControlCharacter)
    );
    assert_eq!(Caller::new("x".repeat(300)), Err(CallerError::TooLong));
    assert_eq!(caller("a").with_attribute("", "v"), Err(CallerError::Empty));
    let mut many = caller("a");
    for n in 0..MAX_CALLER_ATTRIBUTES {
        many = many.with_attribute(format!("k{n}"), "v").unwrap();
    }
    assert_eq!(
        many.with_attribute("one-more", "v"),
        Err(CallerError::TooManyAttributes)
    );
    let anonymous = Caller::anonymous();
    assert!(anonymous.is_anonymous());
    assert_eq!(anonymous.subject(), None);
    let alice = caller("alice").with_attribute("role", "operator").unwrap();
    assert_eq!(alice.to_string(), "alice");
    assert_eq!(alice.attribute("role"), Some("operator"));
}

#[tokio::test]
async fn ids_and_callers_refuse_text_that_shows_as_other_text_and_unnormalized_spellings() {
    for hidden in [
        '\u{202E}', '\u{2028}', '\u{2029}', '\u{200B}', '\u{2066}', '\u{FEFF}',
    ] {
        let text = format!("order{hidden}42");
        assert!(
            matches!(
                ExecutionId::new(&text),
                Err(InvalidExecutionId::ForbiddenChar { found, .. }) if found == hidden
            ),
            "{hidden:?}"
        );
        assert_eq!(Caller::new(&text), Err(CallerError::ControlCharacter));
        assert_eq!(
            caller("a").with_attribute("role", &text),
            Err(CallerError::ControlCharacter)
        );
    }
    // `é` as `e` and a combining accent: canonically equal to the NFC spelling, refused.
    let decomposed = "cafe\u{301}";
    assert!(matches!(
        ExecutionId::new(decomposed),
        Err(InvalidExecutionId::NotNormalized { .. })
    ));
    assert_eq!(Caller::new(decomposed), Err(CallerError::NotNormalized));
    assert_eq!(ExecutionId::new("caf\u{e9}").unwrap().as_str(), "café");
    assert!(Caller::new("zoë").is_ok());

    // What a store recorded under the earlier rules still reads back.
    let store = MemoryStore::new();
    let old = ExecutionId::from_stored("order\u{202E}42").unwrap();
    store
        .append(&old, 0, &[loom_kernel::conformance::started("greet")])
        .await
        .unwrap();
    let log = store.read_all(&old).await.unwrap();
    assert_eq!(log[0].execution_id, old);
    let envelope = EventEnvelope::from_json(&log[0].to_json()).unwrap();
    assert_eq!(envelope.execution_id, old);
}

/// Two approvals of one key, one after the other.
async fn approve_twice(ctx: FlowCtx, _: Value) -> Result<Value, FlowError> {
    let first = ctx.suspend("Approval", "order-1").await?;
    let second = ctx.suspend("Approval", "order-1").await?;
    Ok(json!([first.to_value(), second.to_value()]))
}

#[tokio::test]
async fn an_approval_given_for_one_gate_never_lands_on_the_next_gate_of_its_key() {
    let policy = AskPolicy::default();
    let loom = Runtime::builder(MemoryStore::new())
        .flow(flow_fn("twice", 1, approve_twice))
        .async_resume_authenticator(policy.clone())
        .build()
        .unwrap();
    let e = id("twice-1");
    loom.start("twice", &json!(null), StartOptions::new(e.clone()))
        .await
        .unwrap();
    loom.wait(&e).await.unwrap();

    // A slow approval, asked while the first gate waits.
    let slow = approve_on_a_task(&loom, caller("slow"), &e, "late");
    let (who, slow_answer) = policy.next().await;
    assert_eq!(who, "slow");
    // Meanwhile a quick one answers the first gate; the flow opens the second.
    let quick = approve_on_a_task(&loom, caller("quick"), &e, "first");
    let (who, quick_answer) = policy.next().await;
    assert_eq!(who, "quick");
    quick_answer.send(Ok(())).unwrap();
    quick.await.unwrap().unwrap();
    let parked = loom.wait(&e).await.unwrap();
    assert_eq!(parked.status(), ExecutionStatus::Suspended);
    let before = event_names(loom.store(), &e).await;

    slow_answer.send(Ok(())).unwrap();
    let late = slow.await.unwrap();
    assert!(
        matches!(late, Err(ResumeError::NoPendingGate { .. })),
        "{late:?}"
    );
    assert_eq!(
        event_names(loom.store(), &e).await,
        before,
        "nothing recorded"
    );
    assert_eq!(loom.state(&e).await.unwrap().pending_gates().len(), 1);
}
