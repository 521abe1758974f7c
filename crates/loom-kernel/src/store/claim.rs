//! New execution ids claimed in a store's memory before their first commit
//! ([`EventStore::claim_new`](super::EventStore::claim_new)).
//!
//! A new execution must run nothing if its id turns out to be taken. Without a claim the
//! runtime learns that only from its first commit, so every effect waits for it. A store that
//! one process writes (the embedded store's file lock, a memory store's process) can answer at
//! once, from memory: it hands the id to one caller ([`NewClaim`]) and, while the claim lives,
//! accepts the first append of that id from the claimant only. Another writer's first append
//! waits until the claimant's has committed (it then conflicts) or the claim is dropped.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::id::ExecutionId;

/// A new execution's id, held for its first append by the caller that claimed it
/// ([`EventStore::claim_new`](super::EventStore::claim_new)). Append its first events with
/// [`EventStore::append_claimed`](super::EventStore::append_claimed); dropping it gives the
/// id back.
pub struct NewClaim {
    execution: ExecutionId,
    token: u64,
    release: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl NewClaim {
    /// A claim of `execution` under `token`; `release` runs once, when it is dropped. For
    /// stores that claim ids.
    pub fn new(
        execution: ExecutionId,
        token: u64,
        release: impl FnOnce() + Send + Sync + 'static,
    ) -> Self {
        Self {
            execution,
            token,
            release: Some(Box::new(release)),
        }
    }

    /// The execution claimed.
    pub fn execution(&self) -> &ExecutionId {
        &self.execution
    }

    /// The store's token for this claim.
    pub fn token(&self) -> u64 {
        self.token
    }
}

impl std::fmt::Debug for NewClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewClaim")
            .field("execution", &self.execution)
            .field("token", &self.token)
            .finish()
    }
}

impl Drop for NewClaim {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

/// Whose first append of an id may go ahead, as [`ClaimTable::admit`] decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstAppend {
    /// Nobody else holds the id: go ahead (the id is now held by this append until
    /// [`ClaimTable::settle`]).
    Go,
    /// Another caller holds the id: wait until it is given back.
    Wait,
}

/// The ids claimed in one store, with the token of each claim. The token 0 marks an id held by
/// an unclaimed first append while its commit runs (so that no claim is granted meanwhile).
#[derive(Debug, Default)]
pub(crate) struct ClaimTable {
    held: Mutex<HashMap<ExecutionId, u64>>,
    next_token: AtomicU64,
}

const HELD_BY_APPEND: u64 = 0;

impl ClaimTable {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<ExecutionId, u64>> {
        // The map is consistent at every step: a panic cannot leave it half-changed.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds `execution` for a new claim and returns its token, or `None` when it is held.
    /// The caller then checks that the log is empty, and gives the id back if it is not.
    pub(crate) fn try_claim(&self, execution: &ExecutionId) -> Option<u64> {
        let mut held = self.held();
        if held.contains_key(execution) {
            return None;
        }
        let token = self.next_token.fetch_add(1, Ordering::Relaxed) + 1;
        held.insert(execution.clone(), token);
        Some(token)
    }

    /// Whether a first append of `execution` under `claim` (`None`: unclaimed) may go ahead
    /// now. One that may holds the id until [`ClaimTable::settle`], even if its claim is
    /// dropped meanwhile.
    pub(crate) fn admit(&self, execution: &ExecutionId, claim: Option<u64>) -> FirstAppend {
        let mut held = self.held();
        match held.get(execution) {
            None => {
                held.insert(execution.clone(), HELD_BY_APPEND);
                FirstAppend::Go
            }
            Some(token) if Some(*token) == claim => {
                // From now on the append holds the id, whatever becomes of the claim.
                held.insert(execution.clone(), HELD_BY_APPEND);
                FirstAppend::Go
            }
            Some(_) => FirstAppend::Wait,
        }
    }

    /// The first append of `execution`, admitted, is over (committed or failed): the id is
    /// free again (a committed log now fences every other first append by its head).
    pub(crate) fn settle(&self, execution: &ExecutionId) {
        self.held().remove(execution);
    }

    /// Gives back the claim `token` of `execution`, if it still holds it; true if it did.
    pub(crate) fn release(&self, execution: &ExecutionId, token: u64) -> bool {
        let mut held = self.held();
        if held.get(execution) == Some(&token) {
            held.remove(execution);
            true
        } else {
            false
        }
    }
}
