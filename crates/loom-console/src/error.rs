//! The one error type of the console: what failed, said so that an operator knows what to do,
//! and a kind that decides the HTTP status of the admin API and the exit code of `loom`.

use serde::{Deserialize, Serialize};

use crate::expected::{ExpectedPayload, FieldViolation};

/// What kind of failure a [`ConsoleError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request itself is wrong (malformed JSON, an invalid id, an unknown status name).
    BadRequest,
    /// The execution does not exist.
    NotFound,
    /// The execution's state does not allow it (the step is not in doubt, no gate waits for
    /// that key, the execution has ended); nothing was recorded.
    Refused,
    /// The admin API refused the token, or none was given.
    Unauthorized,
    /// The store or the admin API cannot be reached or opened (held by another process,
    /// missing, a connection refused).
    Unavailable,
    /// Anything else: a store error, a driver that failed.
    Internal,
}

impl ErrorKind {
    /// The HTTP status the admin API answers with.
    pub fn http_status(self) -> u16 {
        match self {
            Self::BadRequest => 400,
            Self::Unauthorized => 401,
            Self::NotFound => 404,
            Self::Refused => 409,
            Self::Unavailable => 503,
            Self::Internal => 500,
        }
    }

    /// The kind an HTTP status stands for, for a client reading an answer without a body.
    pub fn from_http_status(status: u16) -> Self {
        match status {
            400 | 422 => Self::BadRequest,
            401 | 403 => Self::Unauthorized,
            404 => Self::NotFound,
            409 => Self::Refused,
            502..=504 => Self::Unavailable,
            _ => Self::Internal,
        }
    }

    /// The exit code of `loom` for this kind (see `docs/CONSOLE.md`).
    pub fn exit_code(self) -> u8 {
        match self {
            Self::Refused => 1,
            Self::BadRequest => 2,
            Self::NotFound => 3,
            Self::Unavailable | Self::Internal => 4,
            Self::Unauthorized => 5,
        }
    }
}

/// A console operation that did not happen, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("{message}")]
pub struct ConsoleError {
    /// What kind of failure (and so which exit code or HTTP status).
    pub kind: ErrorKind,
    /// What failed and what to do about it, for a person.
    pub message: String,
    /// For a resume payload that does not fit its gate (LD-031): what the gate expects, for a
    /// client to show (the web console's form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Boxed: the error travels in every `Result` of the console, and most carry none.
    pub expected: Option<Box<ExpectedPayload>>,
    /// For a payload or input that does not fit its schema: each field that is wrong, what is
    /// wrong with it and what fits there in words (the web console shows these, not the
    /// schema).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<FieldViolation>,
}

impl ConsoleError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            expected: None,
            violations: Vec::new(),
        }
    }

    /// This error with the fields that do not fit their schema attached.
    pub fn with_violations(mut self, violations: Vec<FieldViolation>) -> Self {
        self.violations = violations;
        self
    }

    /// This error with what the gate expects attached.
    pub fn with_expected(mut self, expected: ExpectedPayload) -> Self {
        self.expected = Some(Box::new(expected));
        self
    }

    /// The request is malformed ([`ErrorKind::BadRequest`]).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadRequest, message)
    }

    /// What was asked for does not exist ([`ErrorKind::NotFound`]).
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// The runtime or the fold refused the operation ([`ErrorKind::Refused`]).
    pub fn refused(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Refused, message)
    }

    /// The store or the admin API cannot be reached ([`ErrorKind::Unavailable`]).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }

    /// A failure of the console itself ([`ErrorKind::Internal`]).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// An execution that does not exist.
    pub fn unknown_execution(execution: &str) -> Self {
        Self::not_found(format!(
            "execution {execution} does not exist (list the executions with `loom executions`)"
        ))
    }
}

impl From<loom_kernel::ReadError> for ConsoleError {
    fn from(error: loom_kernel::ReadError) -> Self {
        Self::internal(format!("cannot read the store: {error}"))
    }
}

impl From<loom_kernel::FoldStoredError> for ConsoleError {
    fn from(error: loom_kernel::FoldStoredError) -> Self {
        Self::internal(format!("cannot read or fold the execution: {error}"))
    }
}

impl From<loom_kernel::InvalidExecutionId> for ConsoleError {
    fn from(error: loom_kernel::InvalidExecutionId) -> Self {
        Self::bad_request(error.to_string())
    }
}
