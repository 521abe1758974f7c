//! The world's inputs the harness feeds: appends written, lost or failed, effects answered,
//! resumes, verdicts, deadlines, children's ends, cancels, crashes; and the drive to the end.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::reference::Outcome;
use super::*;

impl Harness {
    fn complete_append(&mut self) {
        let Some(events) = self.appending.take() else {
            return;
        };
        self.make_durable(events);
        self.run_appended = true;
        let head = self.log.len() as u64;
        self.step(Input::Appended(head));
    }

    fn make_durable(&mut self, events: Vec<Event>) {
        let entries: Vec<Entry> = events.iter().filter_map(entry).collect();
        let from = self.model.durable;
        let expected = self.model.log.get(from..from + entries.len());
        if expected != Some(entries.as_slice()) {
            self.fail(&format!(
                "the append holds {entries:?}, the model's log has {:?} next",
                &self.model.log[from.min(self.model.log.len())..]
            ));
        }
        self.model.durable += entries.len();
        self.log.extend(events);
    }

    fn fail_append(&mut self) {
        if self.appending.take().is_none() {
            return;
        }
        self.over = Some("append failed");
        self.step(Input::AppendFailed(AppendError::Closed));
    }

    fn effect_done(&mut self, rng: &mut Rng) {
        if self.running.is_empty() {
            return;
        }
        let (step, _) = self
            .running
            .remove(rng.below(self.running.len() as u64) as usize);
        let idempotent = step.starts_with("idem");
        let outcome = match rng.below(if idempotent { 2 } else { 3 }) {
            0 => Outcome::Completed,
            1 => Outcome::Failed,
            _ => Outcome::InDoubt,
        };
        self.answer_effect(step, outcome);
    }

    /// The effect of `step` comes back with `outcome`.
    fn answer_effect(&mut self, step: String, outcome: Outcome) {
        if let Err(wrong) = self.model.effect_done(&step, outcome) {
            self.fail(&wrong);
        }
        let error = || ErrorInfo::new("model.error", "as the harness chose");
        let outcome = match outcome {
            Outcome::Completed => EffectOutcome::ok(Payload::null()),
            Outcome::Failed => EffectOutcome::failed(error()),
            Outcome::InDoubt => EffectOutcome::in_doubt(error()),
        };
        self.step(Input::EffectDone(crate::hash::IdKey::new(&step), outcome));
    }

    fn resume(&mut self, rng: &mut Rng) {
        self.send_resume(rng.below(2) as u8);
    }

    fn send_resume(&mut self, key: u8) {
        let (reply, rx) = oneshot::channel();
        let expect = self.model.resume(key);
        self.waiting.push(Waiting::Resume(rx, expect));
        self.step(Input::Message(DriverMsg::Resume(ResumeMsg {
            event_type: EVENT_TYPE.into(),
            correlation_key: key.to_string(),
            payload: Payload::null(),
            gate_id: None,
            reply,
        })));
    }

    fn verdict(&mut self, rng: &mut Rng) {
        let step = match &self.model.wait {
            Wait::Step { id, .. } if rng.chance(80) => id.clone(),
            _ => "once#9".to_owned(),
        };
        let kind = match rng.below(3) {
            0 => VerdictKind::Retry,
            1 => VerdictKind::Completed,
            _ => VerdictKind::Failed,
        };
        self.send_verdict(step, kind);
    }

    fn send_verdict(&mut self, step: String, kind: VerdictKind) {
        let verdict = match kind {
            VerdictKind::Retry => Verdict::Retry,
            VerdictKind::Completed => Verdict::Completed {
                output: Payload::null(),
            },
            VerdictKind::Failed => Verdict::Failed {
                error: ErrorInfo::new("model.verdict", "failed by the operator"),
            },
        };
        let (reply, rx) = oneshot::channel();
        let expect = self.model.verdict(&step, kind);
        self.waiting.push(Waiting::Resolve(rx, expect));
        self.step(Input::Message(DriverMsg::Resolve(ResolveMsg {
            step_id: step,
            verdict,
            operator: None,
            reply,
        })));
    }

    fn child_ended(&mut self, rng: &mut Rng) {
        if let Some(gate) = pick(rng, self.children.keys()) {
            self.send_child_end(gate);
        }
    }

    fn send_child_end(&mut self, gate: String) {
        let Some(child) = self.children.get(&gate).cloned() else {
            self.fail("a child gate waits for a child never started");
        };
        self.model.child_ended(&gate);
        self.step(Input::Message(DriverMsg::ChildEnded {
            child,
            payload: Payload::null(),
        }));
    }

    fn cancel(&mut self) {
        let dispatched: BTreeSet<String> = self.running.iter().map(|(s, _)| s.clone()).collect();
        let (reply, rx) = oneshot::channel();
        let expect = self.model.cancel(&dispatched);
        self.waiting.push(Waiting::Cancel(rx, expect));
        self.step(Input::Message(DriverMsg::Cancel {
            reason: None,
            reply,
        }));
    }

    fn deadline(&mut self, rng: &mut Rng) {
        let Some((gate_id, deadline_ms)) = pick(rng, self.armed.iter()) else {
            return;
        };
        self.model.deadline(&gate_id);
        self.step(Input::Message(DriverMsg::Deadline {
            gate_id,
            deadline_ms,
        }));
    }

    /// The process dies: the append in flight may or may not have reached the disk; the next
    /// run replays the durable log.
    fn crash(&mut self, rng: &mut Rng) {
        if let Some(events) = self.appending.take()
            && rng.chance(50)
        {
            self.make_durable(events);
        }
        self.exec = None;
        self.flow = None;
        self.running.clear();
        self.armed.clear();
        self.waiting.clear();
        self.model = self.model.recovered();
        self.restart();
    }

    /// A new run from the durable log, replaying (as `recover` or a message does).
    fn restart(&mut self) {
        if self.log.is_empty() {
            // Its start never reached the disk: the execution does not exist.
            self.over = Some("unknown");
            return;
        }
        let fold = match self.durable_fold() {
            Ok(fold) => fold,
            Err(error) => self.fail(&format!("the durable log does not fold: {error}")),
        };
        if fold.status().is_terminal() {
            self.over = Some("ended");
            return;
        }
        let history = History::from_events(
            self.log
                .iter()
                .cloned()
                .enumerate()
                .map(|(s, e)| (s as u64, e)),
        );
        let ctx = self.flow_ctx(history, fold);
        self.first_run = false;
        self.run_appended = false;
        self.exec = Some(Execution::existing(ctx.clone(), self.leases));
        self.flow = Some(flow(ctx.clone(), Arc::clone(&self.script)));
        self.ctx = Some(ctx);
        self.over = None;
        self.turn();
    }

    /// The fold of the durable log.
    fn durable_fold(&self) -> Result<ExecutionState, crate::fold::FoldError> {
        let envelopes: Vec<EventEnvelope> = self
            .log
            .iter()
            .enumerate()
            .map(|(seq, e)| EventEnvelope::new(self.id.clone(), seq as u64, e.clone()))
            .collect();
        ExecutionState::fold(&envelopes)
    }

    /// A parked flow kept in memory is taken up by a new run (no replay).
    fn take_up_kept(&mut self) {
        let ctx = self.ctx.clone().expect("a flow");
        self.first_run = false;
        self.run_appended = false;
        self.exec = Some(Execution::existing(ctx, self.leases));
        self.over = None;
    }

    /// One input the sequence picks.
    pub(super) fn act(&mut self, rng: &mut Rng) {
        match self.over {
            Some("released") | Some("ended") | Some("unknown") => return,
            Some("append failed") => return self.crash(rng),
            Some("parked") => {
                if rng.chance(50) {
                    return self.crash(rng);
                }
                self.take_up_kept();
            }
            _ => {}
        }
        match rng.below(21) {
            0..=5 => self.complete_append(),
            6..=9 => self.effect_done(rng),
            10..=12 => self.resume(rng),
            13..=14 => self.verdict(rng),
            15 => self.deadline(rng),
            16 => self.child_ended(rng),
            17 => self.cancel(),
            18 | 19 => self.crash(rng),
            _ => self.fail_append(),
        }
    }

    /// Drives the execution to its end: appends written, effects completed, gates resumed,
    /// doubts resolved.
    pub(super) fn finish(&mut self, rng: &mut Rng) {
        for _ in 0..200 {
            match self.over {
                Some("released") | Some("ended") => break,
                Some("unknown") => return,
                Some("append failed") => {
                    self.crash(rng);
                    continue;
                }
                Some("parked") => self.take_up_kept(),
                _ => {}
            }
            if self.appending.is_some() {
                self.complete_append();
            } else if !self.running.is_empty() {
                let (step, _) = self.running.remove(0);
                self.answer_effect(step, Outcome::Completed);
            } else {
                match self.model.wait.clone() {
                    Wait::Gate { id, key: CHILD, .. } => self.send_child_end(id),
                    Wait::Gate { key, .. } => self.send_resume(key),
                    Wait::Step {
                        id, doubt: true, ..
                    } => self.send_verdict(id, VerdictKind::Completed),
                    _ => self.fail("the execution is stuck: nothing in flight, nothing awaited"),
                }
            }
        }
        if !matches!(self.over, Some("released") | Some("ended")) {
            self.fail("the execution did not end");
        }
        if self.model.durable != self.model.log.len() {
            self.fail("the model's log is not all durable at the end");
        }
        let fold = match self.durable_fold() {
            Ok(fold) => fold,
            Err(error) => self.fail(&format!("the durable log does not fold: {error}")),
        };
        if fold.status() != self.model.status() {
            self.fail(&format!(
                "the log folds to {:?}, the model says {:?}",
                fold.status(),
                self.model.status()
            ));
        }
    }
}

/// One of `items`, picked by `rng` (`None` if there is none).
fn pick<'a, T: Clone + 'a>(
    rng: &mut Rng,
    items: impl ExactSizeIterator<Item = &'a T>,
) -> Option<T> {
    let len = items.len() as u64;
    if len == 0 {
        return None;
    }
    let mut items = items;
    items.nth(rng.below(len) as usize).cloned()
}
