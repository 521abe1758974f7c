//! Leases, for stores shared by several workers: this worker's hold on an execution, and a
//! lease as an operator looks at it.

#[cfg(doc)]
use crate::store::EventStore;

/// This worker's hold on an execution, as [`EventStore::hold_lease`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseHold {
    /// The store has no leases: one process writes to it at a time (the embedded store's file
    /// lock, a memory store's process), so that process holds every execution.
    Exclusive,
    /// This worker holds the execution's lease under this fencing token. The token grows each
    /// time the execution changes hands, so a receiver that remembers the highest token it saw
    /// for an execution can refuse work sent under a lower one (a worker that was paused past
    /// its lease).
    Held {
        /// The fencing token.
        token: u64,
    },
    /// This worker does not hold the lease and could not take it: another worker holds it, or
    /// the log moved past the head the caller saw. Whatever the caller was about to start is
    /// left to the lease's holder.
    NotHeld,
}

impl LeaseHold {
    /// Whether the caller may go ahead (`Exclusive` or `Held`).
    pub fn is_held(self) -> bool {
        !matches!(self, Self::NotHeld)
    }

    /// The fencing token, for a store with leases.
    pub fn token(self) -> Option<u64> {
        match self {
            Self::Held { token } => Some(token),
            Self::Exclusive | Self::NotHeld => None,
        }
    }
}

/// An execution's lease as a store with leases records it ([`EventStore::lease_info`]): who
/// holds it or held it last, under which fencing token, and whether it is live now (by the
/// store's clock). What an operator looks at before a `retry` verdict: a worker whose lease is
/// still live may still be sending (`docs/EFFECTS.md`, "Paused workers").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseInfo {
    /// The worker that holds the lease, or held it last (it gave the lease back when the
    /// execution parked, or the lease ran out).
    pub holder: String,
    /// The fencing token of that holder's lease.
    pub token: u64,
    /// Whether the holder's lease is live now.
    pub live: bool,
    /// While live, how long until it runs out unless renewed, in milliseconds.
    pub expires_in_ms: Option<u64>,
}
