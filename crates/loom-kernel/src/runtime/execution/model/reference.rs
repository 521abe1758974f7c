//! The reference model: a sequential flow's log, answers and effects, input by input.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{CHILD, Entry, Op, VerdictKind, effect_name};
use crate::fold::ExecutionStatus;

/// Where the model's flow stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Wait {
    /// The flow goes on to command `pc` when next polled.
    Flow(usize),
    /// Awaiting step `id` (command `pc`).
    Step {
        pc: usize,
        id: String,
        idempotent: bool,
        /// Its effect may start (once, per attempt).
        runs: bool,
        /// Recorded in doubt: waits for a verdict.
        doubt: bool,
        /// Its outcome or verdict is recorded: the flow goes on when next polled.
        done: bool,
        /// Its `STEP_STARTED` was found without an outcome after a crash (non-idempotent):
        /// the replay records it in doubt.
        found_started: bool,
    },
    /// Awaiting gate `id` (command `pc`); a child's gate has no key (`CHILD`).
    Gate {
        pc: usize,
        id: String,
        key: u8,
        timed: bool,
        done: bool,
    },
    Ended,
}

/// What a caller must be answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Expect {
    /// `Ok` once the model's log is durable up to this many entries.
    Ok(usize),
    NoPendingGate,
    TimedOut,
    NotInDoubt,
    InDoubtWhenEnded,
    CancelEnded,
}

pub(super) struct Model {
    pub(super) script: Arc<[Op]>,
    pub(super) log: Vec<Entry>,
    pub(super) durable: usize,
    pub(super) wait: Wait,
    pub(super) counters: BTreeMap<&'static str, u32>,
    /// Keys whose gate the deadline closed.
    pub(super) timed_out: BTreeSet<u8>,
    /// The child gate still open when a cancel ended the execution: its child is cancelled.
    pub(super) orphan: Option<String>,
}

impl Model {
    pub(super) fn new(script: Arc<[Op]>) -> Self {
        Self {
            script,
            log: vec![Entry::Start],
            durable: 0,
            wait: Wait::Flow(0),
            counters: BTreeMap::new(),
            timed_out: BTreeSet::new(),
            orphan: None,
        }
    }

    pub(super) fn next_id(&mut self, name: &'static str) -> String {
        let n = self.counters.entry(name).or_insert(0);
        *n += 1;
        format!("{name}#{n}")
    }

    /// The model after a crash: its durable log, read against the script as a replay does.
    pub(super) fn recovered(&self) -> Self {
        let mut model = Model {
            script: Arc::clone(&self.script),
            log: self.log[..self.durable].to_vec(),
            durable: self.durable,
            wait: Wait::Flow(0),
            counters: BTreeMap::new(),
            timed_out: BTreeSet::new(),
            orphan: None,
        };
        let mut at = 1; // after EXECUTION_STARTED
        let entries = model.log.clone();
        let ends = |e: &Entry| matches!(e, Entry::Cancelled | Entry::Ended);
        if entries.is_empty() {
            return model;
        }
        if entries.iter().any(ends) {
            model.wait = Wait::Ended;
            return model;
        }
        let mut pc = 0;
        while pc < model.script.len() {
            match model.script[pc] {
                Op::Step { idempotent } => {
                    let id = model.next_id(effect_name(idempotent));
                    let mine: Vec<&Entry> = entries[at..]
                        .iter()
                        .take_while(|e| entry_step(e) == Some(id.as_str()))
                        .collect();
                    if mine.is_empty() && idempotent {
                        // Issued again on replay, run again (its key is the same).
                        model.counters.entry("idem").and_modify(|n| *n -= 1);
                        model.wait = Wait::Flow(pc);
                        return model;
                    }
                    if mine.is_empty() {
                        model.counters.entry("once").and_modify(|n| *n -= 1);
                        model.wait = Wait::Flow(pc);
                        return model;
                    }
                    at += mine.len();
                    let mut doubt = false;
                    let mut done = false;
                    let mut started = false;
                    for e in &mine {
                        match e {
                            Entry::Started(_) => {
                                started = true;
                                done = false;
                            }
                            Entry::Completed(_) | Entry::Failed(_) => done = true,
                            Entry::Doubt(_) => doubt = true,
                            Entry::Resolved(_, VerdictKind::Retry) => {
                                doubt = false;
                                started = idempotent;
                            }
                            Entry::Resolved(..) => {
                                doubt = false;
                                done = true;
                            }
                            _ => unreachable!(),
                        }
                    }
                    if done {
                        pc += 1;
                        continue;
                    }
                    model.wait = Wait::Step {
                        pc,
                        id,
                        idempotent,
                        runs: !doubt && (idempotent || !started),
                        doubt,
                        done: false,
                        found_started: !doubt && !idempotent && started,
                    };
                    return model;
                }
                op @ (Op::Gate { .. } | Op::Child) => {
                    let (key, timed, name) = match op {
                        Op::Gate { key, timed } => (key, timed, "T"),
                        _ => (CHILD, false, "child:kid"),
                    };
                    let id = model.next_id(name);
                    if timed && entries.get(at) == Some(&Entry::Deadline(id.clone())) {
                        at += 1;
                    }
                    if entries.get(at) == Some(&Entry::ChildSpec(id.clone())) {
                        at += 1;
                    }
                    match entries.get(at) {
                        None => {
                            model.counters.entry(name).and_modify(|n| *n -= 1);
                            model.wait = Wait::Flow(pc);
                            return model;
                        }
                        Some(Entry::Suspended(g)) if *g == id => at += 1,
                        Some(other) => panic!("the log has {other:?} where gate {id} opens"),
                    }
                    match entries.get(at) {
                        Some(Entry::Resumed(g, timed_out)) if *g == id => {
                            if *timed_out {
                                model.timed_out.insert(key);
                            }
                            at += 1;
                            pc += 1;
                        }
                        None => {
                            model.wait = Wait::Gate {
                                pc,
                                id,
                                key,
                                timed,
                                done: false,
                            };
                            return model;
                        }
                        Some(other) => panic!("the log has {other:?} where gate {id} waits"),
                    }
                }
            }
        }
        model.wait = Wait::Flow(pc);
        model
    }

    /// The flow is polled: it goes on until it awaits something.
    pub(super) fn poll(&mut self) {
        loop {
            match &mut self.wait {
                Wait::Ended => return,
                Wait::Flow(pc) => {
                    let pc = *pc;
                    if pc == self.script.len() {
                        self.log.push(Entry::Ended);
                        self.wait = Wait::Ended;
                        return;
                    }
                    match self.script[pc] {
                        Op::Step { idempotent } => {
                            let id = self.next_id(effect_name(idempotent));
                            if !idempotent {
                                self.log.push(Entry::Started(id.clone()));
                            }
                            self.wait = Wait::Step {
                                pc,
                                id,
                                idempotent,
                                runs: true,
                                doubt: false,
                                done: false,
                                found_started: false,
                            };
                        }
                        Op::Child => {
                            let id = self.next_id("child:kid");
                            self.log.push(Entry::ChildSpec(id.clone()));
                            self.log.push(Entry::Suspended(id.clone()));
                            self.wait = Wait::Gate {
                                pc,
                                id,
                                key: CHILD,
                                timed: false,
                                done: false,
                            };
                        }
                        Op::Gate { key, timed } => {
                            let id = self.next_id("T");
                            if timed {
                                self.log.push(Entry::Deadline(id.clone()));
                            }
                            self.log.push(Entry::Suspended(id.clone()));
                            self.wait = Wait::Gate {
                                pc,
                                id,
                                key,
                                timed,
                                done: false,
                            };
                        }
                    }
                    return;
                }
                Wait::Step { pc, done: true, .. } | Wait::Gate { pc, done: true, .. } => {
                    self.wait = Wait::Flow(*pc + 1)
                }
                Wait::Step {
                    id,
                    found_started: found @ true,
                    doubt,
                    runs,
                    ..
                } => {
                    // K9: started before the crash, with no outcome: in doubt, not run again.
                    *found = false;
                    *doubt = true;
                    *runs = false;
                    let id = id.clone();
                    self.log.push(Entry::Doubt(id));
                    return;
                }
                Wait::Step { .. } | Wait::Gate { .. } => return,
            }
        }
    }

    pub(super) fn ended(&self) -> bool {
        matches!(self.wait, Wait::Ended)
    }

    /// The step's effect came back.
    pub(super) fn effect_done(&mut self, step: &str, outcome: Outcome) -> Result<(), String> {
        let Wait::Step {
            id,
            runs,
            doubt,
            done,
            ..
        } = &mut self.wait
        else {
            return Err(format!(
                "an outcome for {step} while the flow awaits no step"
            ));
        };
        if id != step || *runs || *done || *doubt {
            return Err(format!(
                "an outcome for {step} while the model's flow is at {:?}",
                self.wait
            ));
        }
        let id = id.clone();
        match outcome {
            Outcome::Completed => {
                *done = true;
                self.log.push(Entry::Completed(id));
            }
            Outcome::Failed => {
                *done = true;
                self.log.push(Entry::Failed(id));
            }
            Outcome::InDoubt => {
                *doubt = true;
                self.log.push(Entry::Doubt(id));
            }
        }
        Ok(())
    }

    pub(super) fn resume(&mut self, key: u8) -> Expect {
        if let Wait::Gate {
            id,
            key: k,
            done: done @ false,
            ..
        } = &mut self.wait
            && *k == key
            && key != CHILD
        {
            *done = true;
            let id = id.clone();
            self.log.push(Entry::Resumed(id, false));
            return Expect::Ok(self.log.len());
        }
        if self.timed_out.contains(&key) {
            Expect::TimedOut
        } else {
            Expect::NoPendingGate
        }
    }

    pub(super) fn deadline(&mut self, gate: &str) {
        if let Wait::Gate {
            id,
            key,
            timed: true,
            done: done @ false,
            ..
        } = &mut self.wait
            && id == gate
        {
            *done = true;
            let id = id.clone();
            self.timed_out.insert(*key);
            self.log.push(Entry::Resumed(id, true));
        }
    }

    /// The child of gate `gate` ended.
    pub(super) fn child_ended(&mut self, gate: &str) {
        if let Wait::Gate {
            id,
            key: CHILD,
            done: done @ false,
            ..
        } = &mut self.wait
            && id == gate
        {
            *done = true;
            let id = id.clone();
            self.log.push(Entry::Resumed(id, false));
        }
    }

    pub(super) fn verdict(&mut self, step: &str, kind: VerdictKind) -> Expect {
        let in_doubt_at_end = self.in_doubt_at_end(step);
        match &mut self.wait {
            Wait::Step {
                id,
                idempotent,
                runs,
                doubt: doubt @ true,
                done,
                ..
            } if id == step => {
                *doubt = false;
                let id = id.clone();
                self.log.push(Entry::Resolved(id.clone(), kind));
                match kind {
                    VerdictKind::Retry => {
                        *runs = true;
                        if !*idempotent {
                            self.log.push(Entry::Started(id));
                        }
                    }
                    _ => *done = true,
                }
                Expect::Ok(self.log.len())
            }
            Wait::Ended if in_doubt_at_end => Expect::InDoubtWhenEnded,
            _ => Expect::NotInDoubt,
        }
    }

    /// Whether `step` was left in doubt when the execution ended.
    pub(super) fn in_doubt_at_end(&self, step: &str) -> bool {
        let mut doubt = false;
        for e in &self.log {
            match e {
                Entry::Doubt(s) if s == step => doubt = true,
                Entry::Resolved(s, _) if s == step => doubt = false,
                _ => {}
            }
        }
        doubt
    }

    /// A cancel: a non-idempotent step whose effect the driver holds is recorded in doubt.
    pub(super) fn cancel(&mut self, dispatched: &BTreeSet<String>) -> Expect {
        if self.ended() {
            return Expect::CancelEnded;
        }
        if let Wait::Step {
            id,
            idempotent: false,
            doubt: false,
            done: false,
            ..
        } = &self.wait
            && dispatched.contains(id)
        {
            self.log.push(Entry::Doubt(id.clone()));
        }
        if let Wait::Gate {
            id,
            key: CHILD,
            done: false,
            ..
        } = &self.wait
        {
            self.orphan = Some(id.clone());
        }
        self.log.push(Entry::Cancelled);
        self.wait = Wait::Ended;
        Expect::Ok(self.log.len())
    }

    pub(super) fn status(&self) -> ExecutionStatus {
        match self.log.last() {
            Some(Entry::Cancelled) => ExecutionStatus::Cancelled,
            Some(Entry::Ended) => ExecutionStatus::Completed,
            _ => match &self.wait {
                Wait::Step { doubt: true, .. } => ExecutionStatus::InDoubt,
                Wait::Gate { done: false, .. } => ExecutionStatus::Suspended,
                _ => ExecutionStatus::Running,
            },
        }
    }
}

pub(super) fn entry_step(e: &Entry) -> Option<&str> {
    match e {
        Entry::Started(s)
        | Entry::Completed(s)
        | Entry::Failed(s)
        | Entry::Doubt(s)
        | Entry::Resolved(s, _) => Some(s),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Outcome {
    Completed,
    Failed,
    InDoubt,
}
