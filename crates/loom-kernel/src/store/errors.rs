//! Why a store call failed: what every store answers instead of a result, the backend's
//! own error kept as the source.

use std::sync::Arc;

use crate::envelope::DecodeError;
use crate::fold::{FoldError, Violation};
use crate::id::ExecutionId;
#[cfg(doc)]
use crate::store::EventStore;

/// Why an append did not happen. Nothing of the batch is stored when this is returned, except
/// for [`AppendError::Storage`] after the commit started, where the store could not tell (the
/// caller learns the truth by reading the head).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    #[error(
        "append conflict on execution {execution}: expected next seq {expected_seq}, but the log is at {actual_seq}"
    )]
    /// Another writer appended first: the log is not at `expected_seq`.
    Conflict {
        /// The execution concerned.
        execution: ExecutionId,
        /// The seq the caller expected to write next.
        expected_seq: u64,
        /// The seq the log is actually at.
        actual_seq: u64,
    },
    /// The batch is empty.
    #[error("append to execution {execution} with no events")]
    EmptyBatch {
        /// The execution concerned.
        execution: ExecutionId,
    },
    /// An event of the batch holds a payload nested deeper than
    /// [`crate::payload::MAX_DEPTH`], which no reader could parse back; nothing is stored.
    #[error(
        "append to execution {execution} refused: the event at seq {seq} holds a payload nested deeper than {} levels",
        crate::payload::MAX_DEPTH
    )]
    PayloadTooDeep {
        /// The execution concerned.
        execution: ExecutionId,
        /// The seq of the event concerned.
        seq: u64,
    },
    /// The batch would make the log invalid (see the `store` module's contract); nothing of it
    /// is stored. `seq` is where the offending event would have gone.
    #[error(
        "append to execution {execution} refused: the event at seq {seq} would make the log invalid: {violation}"
    )]
    Invalid {
        /// The execution concerned.
        execution: ExecutionId,
        /// The seq of the event concerned.
        seq: u64,
        /// The invariant the event would break.
        #[source]
        violation: Box<Violation>,
    },
    /// The storage failed; nothing of the batch is stored.
    #[error("storage failed appending to execution {execution}: {source}")]
    Storage {
        /// The execution concerned.
        execution: ExecutionId,
        /// What the storage reported.
        #[source]
        source: StorageError,
    },
    /// The store is closed.
    #[error("the store is closed")]
    Closed,
}

/// What a storage backend reported (redb, PostgreSQL, the file system), kept as the
/// `source()` of [`AppendError::Storage`], [`ReadError::Storage`] and
/// [`RetentionError::Storage`] rather than flattened to words. Its `Display` is the backend's
/// message; [`StorageError::get_ref`] gives the backend's error itself, to downcast. Cheap to
/// clone: one failed group commit answers every append in it with the same error.
#[derive(Clone)]
pub struct StorageError(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl StorageError {
    /// The backend's error, kept whole.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }

    /// A failure no backend error describes (a task that stopped, a panic in the storage
    /// code), in words.
    pub fn msg(detail: impl Into<String>) -> Self {
        Self(Arc::new(Message(detail.into())))
    }

    /// The backend's error (for a [`StorageError::msg`], a private type holding the words).
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl std::fmt::Debug for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&*self.0, f)
    }
}

impl std::error::Error for StorageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// The words of a [`StorageError::msg`].
#[derive(Debug)]
struct Message(String);

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Message {}

/// Why a read did not return the log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// A stored event does not decode.
    #[error("event {seq} of execution {execution} cannot be decoded: {source}")]
    Decode {
        /// The execution concerned.
        execution: ExecutionId,
        /// The seq of the event concerned.
        seq: u64,
        /// The underlying error.
        #[source]
        source: DecodeError,
    },
    /// The storage failed.
    #[error("storage failed reading: {source}")]
    Storage {
        /// What the storage reported.
        #[source]
        source: StorageError,
    },
    /// The store is closed.
    #[error("the store is closed")]
    Closed,
    /// The store does not implement this operation (a trait method with no default body
    /// that a store left out).
    #[error("this store does not support {operation}")]
    Unsupported {
        /// The operation asked for.
        operation: &'static str,
    },
}

impl ReadError {
    /// A storage failure: what the backend reported, kept as the source.
    pub fn storage(err: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Storage {
            source: StorageError::new(err),
        }
    }
}

/// Why [`EventStore::delete_ended`] deleted nothing. A failed call deletes nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RetentionError {
    /// The storage failed.
    #[error("storage failed deleting ended executions: {source}")]
    Storage {
        /// What the storage reported.
        #[source]
        source: StorageError,
    },
    /// The store is closed.
    #[error("the store is closed")]
    Closed,
    /// The store cannot delete executions.
    #[error("this store does not support deleting executions")]
    Unsupported,
}

/// Why a stored execution could not be folded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FoldStoredError {
    /// The log could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The log does not fold.
    #[error(transparent)]
    Fold(#[from] FoldError),
}
