//! The write side's appends: one in flight at a time, the replies that wait for it, and what
//! its durability releases (LD-003).

use super::{Batch, Durable, Held, Machine, Ready};

impl<R, D: Held, C> Machine<R, D, C> {
    /// A reply to send once everything queued so far is durable.
    pub(crate) fn reply_when_durable(&mut self, reply: R) {
        self.queued_replies.push(reply);
    }

    /// The next append, if none is in flight and something is queued. The replies queued so
    /// far wait for it.
    pub(crate) fn take_append(&mut self) -> Option<Batch> {
        if self.in_flight.is_some() || self.queued.is_empty() {
            return None;
        }
        let events = std::mem::take(&mut self.queued);
        self.started_at.clear();
        let replies = std::mem::take(&mut self.queued_replies);
        self.in_flight = Some((replies, events.len() as u64));
        Some(Batch {
            expected: self.durable_head,
            events,
        })
    }

    /// The append in flight is durable; the log's head is now `head`.
    pub(crate) fn appended(&mut self, head: u64) -> Durable<R, D, C> {
        let replies = self.in_flight.take().map(|(r, _)| r).unwrap_or_default();
        self.durable_head = head;
        self.hold_until_appended = false;
        let (ready, waiting): (Vec<_>, Vec<_>) =
            self.held.drain(..).partition(|(at, _)| *at <= head);
        self.held = waiting;
        let run = ready.into_iter().map(|(_, d)| d).collect();
        let (ready, waiting): (Vec<_>, Vec<_>) = self
            .held_children
            .drain(..)
            .partition(|(at, _)| *at <= head);
        self.held_children = waiting;
        let children = ready.into_iter().map(|(_, c)| c).collect();
        Durable {
            replies,
            ready: Ready { run, children },
        }
    }

    /// The append in flight failed, or the driver stops: every reply it still holds, those
    /// of the append in flight first. Nothing it queued will be written by this driver.
    pub(crate) fn take_all_replies(&mut self) -> Vec<R> {
        let mut replies = self.in_flight.take().map(|(r, _)| r).unwrap_or_default();
        replies.append(&mut self.queued_replies);
        replies
    }

    /// The replies queued while nothing waits to be written: their events (if any) are
    /// durable. Empty unless [`Machine::settled`].
    pub(crate) fn take_settled_replies(&mut self) -> Vec<R> {
        if self.settled() {
            std::mem::take(&mut self.queued_replies)
        } else {
            Vec::new()
        }
    }

    /// The replies queued for the next append (a shutdown refuses them; the append in flight
    /// keeps its own).
    pub(crate) fn take_queued_replies(&mut self) -> Vec<R> {
        std::mem::take(&mut self.queued_replies)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;

    #[test]
    fn a_reply_waits_for_the_events_queued_before_it() {
        let mut m = M::new(1);
        m.reply_when_durable("early");
        assert_eq!(
            m.take_settled_replies(),
            vec!["early"],
            "nothing to wait for"
        );
        m.issued(vec![started("a")], vec![], vec![]);
        m.reply_when_durable("resume");
        assert!(m.take_settled_replies().is_empty());
        m.take_append().unwrap();
        m.reply_when_durable("late");
        let durable = m.appended(2);
        assert_eq!(durable.replies, vec!["resume"]);
        assert_eq!(m.take_settled_replies(), vec!["late"]);
    }

    #[test]
    fn a_failed_append_hands_back_every_reply() {
        let mut m = M::new(1);
        m.issued(vec![started("a")], vec![], vec![]);
        m.reply_when_durable("first");
        m.take_append().unwrap();
        m.reply_when_durable("second");
        assert_eq!(m.take_all_replies(), vec!["first", "second"]);
        assert!(m.idle());
    }
}
