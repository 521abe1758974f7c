//! Commands that record a value: a decision read from the world once (ADR 0016: `now`,
//! `random`, `uuid`, `decide`), a surface patch, and the `loom.patch` marker of
//! `ctx.patched` (LD-017). Served from the history while it lasts,
//! else recorded live.

use serde::de::DeserializeOwned;

use super::state::FlowState;
use super::vocabulary::{StepError, StepName};
use crate::classify::DataClassification;
use crate::event::*;
use crate::payload::Payload;
use crate::runtime::history::{Attempted, Recorded};
use crate::runtime::markers::PATCH_KIND;

/// Where a decision stands once its id is taken ([`FlowState::begin_decision`]).
#[derive(Debug)]
pub(crate) enum DecisionStart {
    /// Replayed: the value the log holds.
    Recorded(Payload, String),
    /// Live: the caller makes the value with the flow's state unlocked, then records it
    /// ([`FlowState::record_decision`]); until then, no other command may be issued.
    Live(String),
}

impl FlowState {
    /// The decision `kind#n`, begun: the recorded value on replay, else the step id to record
    /// the value under once the flow's code has made it. The value is made outside the
    /// state's lock (flow code never runs under it), and a command issued from inside it is
    /// refused (`StepError::InsideDecision`): replay serves the decision without making it,
    /// so whatever it issued would be missing there.
    pub(crate) fn begin_decision(
        &mut self,
        kind: &str,
        classification: &DataClassification,
    ) -> Result<DecisionStart, StepError> {
        let step_id = self.step_id(StepName::Counted(kind.to_owned()))?;
        let attempted = Attempted::Decision {
            step_id: &step_id,
            kind,
        };
        if self.replay(attempted, classification) {
            let index = self.cursor - 1;
            if let Some((_, Recorded::Decision { value, .. })) = self.history.commands.get(index) {
                return Ok(DecisionStart::Recorded(value.clone(), step_id));
            }
        }
        if self.divergence.is_some() {
            return Err(StepError::Diverged);
        }
        self.note_live(&attempted);
        self.deciding = Some(step_id.clone());
        Ok(DecisionStart::Live(step_id))
    }

    /// Records the value of the live decision `step_id` (or, with `None`, gives it up: its
    /// value could not be made or encoded, and nothing is recorded).
    pub(crate) fn record_decision(&mut self, step_id: String, kind: &str, value: Option<Payload>) {
        self.deciding = None;
        match value {
            Some(value) => self.issue(Event::DecisionRecorded(DecisionRecorded {
                step_id,
                kind: kind.to_owned(),
                value,
            })),
            // Given up (its `make` panicked, or its value did not encode): its counted id goes
            // back, so the next decision of this kind takes it, as it does on replay, where the
            // given-up one is not in the log (issue 41, hole 3: the next one was recorded as
            // `kind#2` and replay after a restart diverged). Nothing is counted while deciding,
            // so the counter's last id is this one.
            None => {
                if let Some(count) = self.counters.get_mut(kind)
                    && step_id == format!("{kind}#{count}")
                {
                    *count -= 1;
                    if *count == 0 {
                        self.counters.remove(kind);
                    }
                }
            }
        }
    }

    /// The decision `kind#n` in one go, with `make` run under the caller's borrow (tests).
    #[cfg(test)]
    pub(crate) fn decide<T: serde::Serialize + DeserializeOwned>(
        &mut self,
        kind: &str,
        make: impl FnOnce() -> T,
        classification: &DataClassification,
    ) -> Result<T, StepError> {
        match self.begin_decision(kind, classification)? {
            DecisionStart::Recorded(value, step_id) => decode_decision(&value, step_id),
            DecisionStart::Live(step_id) => {
                let value = make();
                let payload =
                    Payload::encode(&value).map_err(|err| StepError::Encode(err.to_string()));
                self.record_decision(step_id, kind, payload.as_ref().ok().cloned());
                payload.map(|_| value)
            }
        }
    }

    /// A `SURFACE_PATCH` on `surface_id` as `surface:<surface_id>#n`; `ops` is opaque.
    pub(crate) fn patch(
        &mut self,
        surface_id: &str,
        ops: Payload,
        classification: &DataClassification,
    ) -> Result<(), StepError> {
        let step_id = self.step_id(StepName::Counted(format!("surface:{surface_id}")))?;
        let attempted = Attempted::Patch {
            step_id: &step_id,
            surface_id,
            ops: &ops,
        };
        if self.replay(attempted, classification) {
            return Ok(());
        }
        if self.divergence.is_some() {
            return Err(StepError::Diverged);
        }
        self.note_live(&attempted);
        self.issue(Event::SurfacePatch(SurfacePatch {
            step_id,
            surface_id: surface_id.to_owned(),
            ops,
        }));
        Ok(())
    }

    /// `ctx.patched(change_id)` (LD-017): `true` live (recorded) or where the log has the
    /// marker, `false` where the log goes on (or ended) without it; one answer per run.
    pub(crate) fn patched(&mut self, change_id: &str) -> Result<bool, StepError> {
        self.refuse_inside_decision()?;
        // Answering `true` unrecorded would leave a log that took the new branch without the
        // marker a later `patched` needs to take it again on replay.
        if self.deprecated_patches.contains(change_id) {
            return Err(StepError::DeprecatedPatch(change_id.to_owned()));
        }
        if let Some(answer) = self.patches.get(change_id) {
            return Ok(*answer);
        }
        if self.divergence.is_some() {
            return Err(StepError::Diverged);
        }
        let step_id = format!("patch:{change_id}");
        let answer = match self.history.commands.get(self.cursor) {
            Some((
                _,
                Recorded::Decision {
                    step_id: s, kind, ..
                },
            )) if kind == PATCH_KIND && *s == step_id => {
                self.cursor += 1;
                true
            }
            // Recorded history goes on here without the marker: the old code ran.
            Some(_) => false,
            // Past the last command of an execution that ended: the old code ended it.
            None if self.recorded_end => false,
            None => {
                let attempted = Attempted::Decision {
                    step_id: &step_id,
                    kind: PATCH_KIND,
                };
                self.note_live(&attempted);
                self.issue(Event::DecisionRecorded(DecisionRecorded {
                    step_id,
                    kind: PATCH_KIND.to_owned(),
                    value: Payload::from_value(&serde_json::json!({})),
                }));
                true
            }
        };
        self.patches.insert(change_id.to_owned(), answer);
        Ok(answer)
    }

    /// `ctx.deprecate_patch(change_id)`: a recorded marker here is consumed; nothing is
    /// recorded live.
    pub(crate) fn deprecate_patch(&mut self, change_id: &str) -> Result<(), StepError> {
        self.refuse_inside_decision()?;
        if self.patches.contains_key(change_id) {
            return Ok(());
        }
        if self.divergence.is_some() {
            return Err(StepError::Diverged);
        }
        let step_id = format!("patch:{change_id}");
        if let Some((
            _,
            Recorded::Decision {
                step_id: s, kind, ..
            },
        )) = self.history.commands.get(self.cursor)
            && kind == PATCH_KIND
            && *s == step_id
        {
            self.cursor += 1;
        }
        self.patches.insert(change_id.to_owned(), true);
        self.deprecated_patches.insert(change_id.to_owned());
        Ok(())
    }
}

/// A recorded decision's value as the type the flow asks for.
pub(crate) fn decode_decision<T: DeserializeOwned>(
    value: &Payload,
    step_id: String,
) -> Result<T, StepError> {
    value.decode().map_err(|err| StepError::Decode {
        step_id,
        detail: crate::payload::Payload::describe_decode_error(&err),
    })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::runtime::history::History;

    #[test]
    fn a_decision_is_made_once_live_and_served_from_the_log_on_replay() {
        let none = DataClassification::default();
        let mut s = flow_state();
        assert_eq!(s.decide("now", || 5u64, &none), Ok(5));
        let log: Vec<_> = std::mem::take(&mut s.out)
            .into_iter()
            .map(|e| (1, e))
            .collect();
        let mut s = flow_state_with(History::from_events(log));
        let never = || -> u64 { unreachable!("made again on replay") };
        assert_eq!(s.decide("now", never, &none), Ok(5));
        assert!(s.out.is_empty());
    }

    #[test]
    fn a_replayed_patch_with_other_ops_diverges() {
        let none = DataClassification::default();
        let mut s = flow_state();
        let ops = Payload::from_value(&serde_json::json!([1]));
        assert_eq!(s.patch("main", ops, &none), Ok(()));
        let log: Vec<_> = std::mem::take(&mut s.out)
            .into_iter()
            .map(|e| (1, e))
            .collect();
        let mut s = flow_state_with(History::from_events(log));
        let other = Payload::from_value(&serde_json::json!([2]));
        assert_eq!(s.patch("main", other, &none), Err(StepError::Diverged));
        assert_eq!(s.divergence().map(|d| d.seq), Some(1));
    }
}
