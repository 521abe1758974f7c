//! A model-based test of the write side ([`Machine`]), driven directly: no runtime, no tokio,
//! no store. Random sequences of what a driver feeds it (commands the flow issued, replies,
//! appends taken, made durable or failed, the flow's end, a cancel) run against a small
//! reference model of what the machine promises (LD-003, K9, LD-015):
//! - appends are taken one at a time, at the durable head, and carry the events in the order
//!   they were issued; a quick step's outcome replaces its unsent `STEP_STARTED` in place;
//! - an effect starts at once only if it is idempotent and the execution's start is durable
//!   (or its id claimed by the store);
//!   otherwise, and a child always, only once every event issued before it is durable; after
//!   the end nothing held starts;
//! - a reply is answered `Ok` only once the events issued before it are durable, and every
//!   reply is answered exactly once (handed back when an append fails);
//! - after the end nothing more is recorded but what the end queued.
//!
//! The sequences come from a seeded generator, so a failure names the seed that reproduces
//! it. `LOOM_MACHINE_MODEL_SEQUENCES` sets how many run (100,000 by default).

use std::collections::{BTreeMap, BTreeSet};

use super::{Held, Machine, terminal};
use crate::event::{Event, ExecutionStarted, ExecutionSuspended};
use crate::payload::Payload;

/// An effect's dispatch as the write side sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Dispatch {
    step: String,
    durable_before: bool,
}

impl Held for Dispatch {
    fn step_id(&self) -> &str {
        &self.step
    }
    fn durable_before(&self) -> bool {
        self.durable_before
    }
}

type Reply = u32;
type Child = u32;
type Subject = Machine<Reply, Dispatch, Child>;

/// An event reduced to what the model checks.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Start,
    Started(String),
    Completed(String),
    Gate(u32),
    Doubt(String),
    End,
}

fn entry(event: &Event) -> Entry {
    match event {
        Event::ExecutionStarted(_) => Entry::Start,
        Event::StepStarted(e) => Entry::Started(e.step_id.clone()),
        Event::StepCompleted(e) => Entry::Completed(e.step_id.clone()),
        Event::ExecutionSuspended(e) => Entry::Gate(e.gate_id.parse().expect("a numbered gate")),
        Event::EffectInDoubt(e) => Entry::Doubt(e.step_id.clone()),
        Event::ExecutionCompleted(_) | Event::ExecutionCancelled(_) => Entry::End,
        other => panic!("the model issues no {}", other.type_name()),
    }
}

fn start_event() -> Event {
    Event::ExecutionStarted(ExecutionStarted {
        flow: "f".into(),
        flow_version: 1,
        input: Payload::null(),
        capabilities: Default::default(),
        budget: None,
    })
}

fn gate_event(n: u32) -> Event {
    Event::ExecutionSuspended(ExecutionSuspended {
        gate_id: n.to_string(),
        event_type: "T".into(),
        correlation_key: "k".into(),
    })
}

/// SplitMix64: a generator of our own, so that a seed reproduces a sequence on any platform.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// What the machine promises, kept the plain way.
#[derive(Default)]
struct Model {
    /// The durable log.
    log: Vec<Entry>,
    /// Issued, not yet taken by an append.
    queued: Vec<Entry>,
    /// Taken by the append in flight.
    in_flight: Option<Vec<Entry>>,
    /// Effects not started yet, with the log length they wait for.
    held: BTreeMap<String, u64>,
    /// Children not started yet, with the log length they wait for.
    held_children: BTreeMap<Child, u64>,
    /// Replies not answered yet, with the log length they wait for.
    owed: BTreeMap<Reply, u64>,
    /// Steps whose effect was handed out and has not finished: whether each is idempotent.
    running: BTreeMap<String, bool>,
    /// Effects handed out, children started, replies answered: each at most once.
    started_effects: BTreeSet<String>,
    started_children: BTreeSet<Child>,
    answered: BTreeSet<Reply>,
    ended: bool,
    /// The store claimed the new execution's id before its first append.
    claimed: bool,
    /// An append failed: the driver stops.
    stopped: bool,
    next_step: u32,
    next_gate: u32,
    next_reply: Reply,
    next_child: Child,
}

impl Model {
    fn head(&self) -> u64 {
        self.log.len() as u64
    }

    /// The log length at which everything issued so far is durable.
    fn issued_len(&self) -> u64 {
        self.head() + self.in_flight.as_ref().map_or(0, Vec::len) as u64 + self.queued.len() as u64
    }

    fn enqueue(&mut self, entry: Entry) {
        if let Entry::Completed(step) = &entry {
            let unsent = self
                .queued
                .iter()
                .position(|queued| *queued == Entry::Started(step.clone()));
            if let Some(at) = unsent {
                self.queued[at] = entry;
                return;
            }
        }
        self.queued.push(entry);
    }
}

/// The test's view of one run: the machine and the model side by side.
struct Run {
    subject: Subject,
    model: Model,
    draw: Draw,
    trace: Vec<String>,
}

impl Run {
    fn new(seed: u64) -> Self {
        let mut model = Model::default();
        let mut draw = Draw(seed);
        let subject = if draw.chance(50) {
            // A new execution: its start and the `start` reply wait for the first append;
            // when the store claimed its id, no other start can take it, so its idempotent
            // effects need not wait for the start to be durable.
            model.queued.push(Entry::Start);
            model.owed.insert(0, 1);
            model.next_reply = 1;
            model.claimed = draw.chance(50);
            Subject::new_execution(start_event(), 0, model.claimed)
        } else {
            // A driver that took over a log whose start is durable.
            model.log.push(Entry::Start);
            Subject::new(1)
        };
        Self {
            subject,
            model,
            draw,
            trace: Vec::new(),
        }
    }

    fn fail(&self, seed: u64, what: &str) -> ! {
        panic!(
            "seed {seed}: {what}\nafter: {}\nlog: {:?}\nqueued: {:?}",
            self.trace.join(", "),
            self.model.log,
            self.model.queued
        )
    }

    fn check(&self, seed: u64, ok: bool, what: &str) {
        if !ok {
            self.fail(seed, what);
        }
    }

    /// One transition, drawn among those a driver can make now.
    fn transition(&mut self, seed: u64) {
        let choice = self.draw.below(100);
        match choice {
            0..=24 if !self.model.ended => self.issue_step(seed),
            25..=39 if !self.model.ended => self.finish_step(seed),
            40..=44 if !self.model.ended => self.issue_gate(seed),
            45..=54 => self.reply(seed),
            55..=69 => self.take_append(seed),
            70..=89 => self.durable(seed),
            90..=91 => self.append_fails(seed),
            92..=94 if !self.model.ended => self.flow_returns(seed),
            95..=96 if !self.model.ended => self.cancel(seed),
            _ => self.settled_replies(seed),
        }
        self.invariants(seed);
    }

    fn issue_step(&mut self, seed: u64) {
        let step = format!("s{}", self.model.next_step);
        self.model.next_step += 1;
        let durable_before = self.draw.chance(40);
        let with_child = self.draw.chance(15);
        self.trace.push(format!(
            "issue {step} (durable before: {durable_before}, child: {with_child})"
        ));
        let mut events = vec![crate::runtime::machine::fixtures::started(&step)];
        let with_gate = with_child || self.draw.chance(20);
        let gate = self.model.next_gate;
        if with_gate {
            self.model.next_gate += 1;
            events.push(gate_event(gate));
        }
        let child = self.model.next_child;
        let children = if with_child {
            self.model.next_child += 1;
            vec![child]
        } else {
            Vec::new()
        };
        let head_before = self.model.head();
        self.model.enqueue(Entry::Started(step.clone()));
        if with_gate {
            self.model.enqueue(Entry::Gate(gate));
        }
        let wait_for = self.model.issued_len();
        let dispatch = Dispatch {
            step: step.clone(),
            durable_before,
        };
        let ready = self.subject.issued(events, vec![dispatch], children);
        let runs_now = !durable_before && (head_before > 0 || self.model.claimed);
        if runs_now {
            self.model.running.insert(step.clone(), true);
        } else {
            self.model.held.insert(step.clone(), wait_for);
        }
        if with_child {
            if wait_for <= self.model.head() {
                self.model.started_children.insert(child);
            } else {
                self.model.held_children.insert(child, wait_for);
            }
        }
        let run: Vec<&str> = ready.run.iter().map(|d| d.step.as_str()).collect();
        let expected: Vec<&str> = if runs_now { vec![&step] } else { vec![] };
        self.check(
            seed,
            run == expected,
            "an issued effect runs at once iff idempotent after a durable start",
        );
        let expected_children = if with_child && wait_for <= self.model.head() {
            vec![child]
        } else {
            vec![]
        };
        self.check(
            seed,
            ready.children == expected_children,
            "a child starts only once its events are durable",
        );
        if runs_now {
            let first = self.model.started_effects.insert(step);
            self.check(seed, first, "an effect started twice");
        }
    }

    fn finish_step(&mut self, seed: u64) {
        let running: Vec<String> = self.model.running.keys().cloned().collect();
        if running.is_empty() {
            return;
        }
        let step = running[self.draw.below(running.len() as u64) as usize].clone();
        self.model.running.remove(&step);
        self.trace.push(format!("finish {step}"));
        self.model.enqueue(Entry::Completed(step.clone()));
        let ready = self.subject.issued(
            vec![crate::runtime::machine::fixtures::completed(&step)],
            vec![],
            vec![],
        );
        self.check(
            seed,
            ready.run.is_empty() && ready.children.is_empty(),
            "an outcome starts nothing",
        );
    }

    fn issue_gate(&mut self, seed: u64) {
        let gate = self.model.next_gate;
        self.model.next_gate += 1;
        self.trace.push(format!("gate {gate}"));
        self.model.enqueue(Entry::Gate(gate));
        let ready = self.subject.issued(vec![gate_event(gate)], vec![], vec![]);
        self.check(
            seed,
            ready.run.is_empty() && ready.children.is_empty(),
            "a gate starts nothing",
        );
    }

    fn reply(&mut self, _seed: u64) {
        let reply = self.model.next_reply;
        self.model.next_reply += 1;
        self.trace.push(format!("reply {reply}"));
        let wait_for = self.model.issued_len();
        self.model.owed.insert(reply, wait_for);
        self.subject.reply_when_durable(reply);
    }

    fn take_append(&mut self, seed: u64) {
        let batch = self.subject.take_append();
        self.trace
            .push(format!("take append ({})", batch.is_some()));
        let due = self.model.in_flight.is_none() && !self.model.queued.is_empty();
        match batch {
            None => self.check(seed, !due, "an append was due and none was taken"),
            Some(batch) => {
                self.check(
                    seed,
                    due,
                    "an append was taken while one was in flight or nothing was queued",
                );
                self.check(
                    seed,
                    batch.expected == self.model.head(),
                    "an append not at the durable head",
                );
                let entries: Vec<Entry> = batch.events.iter().map(entry).collect();
                self.check(
                    seed,
                    entries == self.model.queued,
                    "an append's events differ from those issued",
                );
                self.model.in_flight = Some(std::mem::take(&mut self.model.queued));
            }
        }
    }

    fn durable(&mut self, seed: u64) {
        let Some(batch) = self.model.in_flight.take() else {
            return;
        };
        self.model.log.extend(batch);
        let head = self.model.head();
        self.trace.push(format!("durable to {head}"));
        let durable = self.subject.appended(head);
        let expected_run: BTreeSet<String> = self
            .model
            .held
            .iter()
            .filter(|(_, at)| **at <= head)
            .map(|(step, _)| step.clone())
            .collect();
        let run: BTreeSet<String> = durable.ready.run.iter().map(|d| d.step.clone()).collect();
        self.check(
            seed,
            run.len() == durable.ready.run.len(),
            "an effect handed out twice in one append",
        );
        self.check(
            seed,
            run == expected_run,
            "the effects released differ from those whose events are durable",
        );
        for step in &run {
            self.model.held.remove(step);
            let first = self.model.started_effects.insert(step.clone());
            self.check(seed, first, "an effect started twice");
            let idempotent = durable
                .ready
                .run
                .iter()
                .any(|d| d.step == *step && !d.durable_before);
            self.model.running.insert(step.clone(), idempotent);
        }
        let expected_children: BTreeSet<Child> = self
            .model
            .held_children
            .iter()
            .filter(|(_, at)| **at <= head)
            .map(|(child, _)| *child)
            .collect();
        let children: BTreeSet<Child> = durable.ready.children.iter().copied().collect();
        self.check(
            seed,
            children == expected_children,
            "the children released differ from those whose events are durable",
        );
        for child in children {
            self.model.held_children.remove(&child);
            let first = self.model.started_children.insert(child);
            self.check(seed, first, "a child started twice");
        }
        for reply in durable.replies {
            self.answer(seed, reply);
        }
    }

    fn answer(&mut self, seed: u64, reply: Reply) {
        let Some(at) = self.model.owed.remove(&reply) else {
            self.fail(
                seed,
                &format!("reply {reply} answered twice or never asked"),
            );
        };
        self.check(
            seed,
            at <= self.model.head(),
            "a reply answered before its events were durable",
        );
        self.model.answered.insert(reply);
    }

    fn append_fails(&mut self, seed: u64) {
        if self.model.in_flight.is_none() {
            return;
        }
        self.trace.push("append fails".into());
        let handed_back: BTreeSet<Reply> = self.subject.take_all_replies().into_iter().collect();
        // Every reply not answered yet comes back (those of settled events were answered by
        // `take_settled_replies` or are still owed only if not yet asked for).
        let owed: BTreeSet<Reply> = self.model.owed.keys().copied().collect();
        let owed_unsettled: BTreeSet<Reply> = self
            .model
            .owed
            .iter()
            .filter(|(_, at)| **at > self.model.head())
            .map(|(reply, _)| *reply)
            .collect();
        self.check(
            seed,
            handed_back.is_subset(&owed),
            "a reply handed back that was answered or never asked",
        );
        self.check(
            seed,
            owed_unsettled.is_subset(&handed_back),
            "a reply waiting for the failed append was kept",
        );
        self.check(
            seed,
            self.subject.idle(),
            "an append still in flight after its failure",
        );
        self.model.stopped = true;
    }

    fn flow_returns(&mut self, seed: u64) {
        self.trace.push("flow returns".into());
        let queued = self
            .subject
            .ended_with(Vec::new(), terminal(Ok(Payload::null())));
        self.check(
            seed,
            queued,
            "the end of a running execution was not queued",
        );
        self.model.enqueue(Entry::End);
        self.end();
    }

    fn cancel(&mut self, seed: u64) {
        // The driver records in doubt every non-idempotent step whose effect was handed out
        // and has not finished.
        let cut_off: Vec<String> = self
            .model
            .running
            .iter()
            .filter(|(_, idempotent)| !**idempotent)
            .map(|(step, _)| step.clone())
            .collect();
        self.trace.push(format!("cancel (in doubt: {cut_off:?})"));
        for step in &cut_off {
            self.check(
                seed,
                self.subject.dispatched(step),
                "a running effect is still held",
            );
        }
        let doubts = cut_off
            .iter()
            .map(|step| crate::runtime::machine::fixtures::in_doubt(step, "e"))
            .collect();
        for step in &cut_off {
            self.model.enqueue(Entry::Doubt(step.clone()));
        }
        self.model.enqueue(Entry::End);
        let reply = self.model.next_reply;
        self.model.next_reply += 1;
        let wait_for = self.model.issued_len();
        self.model.owed.insert(reply, wait_for);
        self.subject.cancelled(
            doubts,
            crate::runtime::machine::fixtures::cancelled(),
            reply,
        );
        self.end();
    }

    fn end(&mut self) {
        self.model.ended = true;
        // Nothing held starts after the end; what runs is dropped by the driver.
        self.model.held.clear();
        self.model.held_children.clear();
        self.model.running.clear();
    }

    fn settled_replies(&mut self, seed: u64) {
        self.trace.push("settled replies".into());
        for reply in self.subject.take_settled_replies() {
            self.answer(seed, reply);
        }
    }

    fn invariants(&self, seed: u64) {
        if self.model.stopped {
            return;
        }
        let m = &self.model;
        let in_flight = m.in_flight.as_ref().map_or(0, Vec::len) as u64;
        self.check(
            seed,
            self.subject.durable_head() == m.head(),
            "durable head",
        );
        self.check(
            seed,
            self.subject.unsent() == m.head() + in_flight,
            "unsent",
        );
        self.check(seed, self.subject.idle() == m.in_flight.is_none(), "idle");
        self.check(
            seed,
            self.subject.settled() == (m.in_flight.is_none() && m.queued.is_empty()),
            "settled",
        );
        self.check(seed, self.subject.ended() == m.ended, "ended");
        for step in m.held.keys() {
            self.check(
                seed,
                !self.subject.dispatched(step),
                "a held effect counts as handed out",
            );
        }
        for step in m.running.keys() {
            self.check(
                seed,
                self.subject.dispatched(step),
                "a running effect counts as held",
            );
        }
    }

    /// Lets every append through and asks for what is settled: then every reply is answered,
    /// every effect and child not dropped by the end has started, and the log is well formed.
    fn drain(&mut self, seed: u64) {
        if self.model.stopped {
            return;
        }
        self.trace.push("drain".into());
        for _ in 0..4 {
            self.take_append(seed);
            self.durable(seed);
        }
        self.settled_replies(seed);
        self.check(seed, self.subject.settled(), "not settled after draining");
        self.check(seed, self.model.owed.is_empty(), "a reply never answered");
        self.check(seed, self.model.held.is_empty(), "an effect never started");
        self.check(
            seed,
            self.model.held_children.is_empty(),
            "a child never started",
        );
        let mut seen_outcome = BTreeSet::new();
        let mut seen_start = BTreeSet::new();
        for (at, entry) in self.model.log.iter().enumerate() {
            match entry {
                Entry::Start => self.check(seed, at == 0, "a start not first"),
                Entry::Started(step) => self.check(
                    seed,
                    seen_start.insert(step.clone()),
                    "a step started twice",
                ),
                Entry::Completed(step) => self.check(
                    seed,
                    seen_outcome.insert(step.clone()),
                    "a step with two outcomes",
                ),
                Entry::End => self.check(
                    seed,
                    at + 1 == self.model.log.len(),
                    "an event after the end",
                ),
                Entry::Gate(_) | Entry::Doubt(_) => {}
            }
        }
        let ends = self.model.log.iter().filter(|e| **e == Entry::End).count();
        self.check(seed, ends <= 1, "two ends");
    }
}

fn sequences() -> u64 {
    std::env::var("LOOM_MACHINE_MODEL_SEQUENCES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000)
}

#[test]
fn the_write_side_keeps_its_promises_over_random_sequences() {
    for seed in 0..sequences() {
        let mut run = Run::new(seed);
        let length = 5 + run.draw.below(40);
        for _ in 0..length {
            if run.model.stopped {
                break;
            }
            run.transition(seed);
        }
        run.drain(seed);
    }
}
