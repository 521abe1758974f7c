//! Who is resuming (LD-019): the caller's identity, carried by a resume or an inbound message
//! to the resume authenticator (K12.2), which may decide asynchronously.
//!
//! The application establishes the identity (a verified token, a session, an operator's
//! login) and hands it to [`Runtime::resume_as`] or [`Runtime::inbound_as`]; the kernel never
//! reads one from a message, so a message cannot claim to come from someone else. The
//! authenticator sees the caller with the request and may refuse; nothing is recorded then. The
//! caller is not recorded in the log (`EVENT_SCHEMA` 1 has no field for it): an authenticator
//! that keeps an audit trail writes it itself.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;

use crate::id::{ExecutionId, hides_text, is_nfc};
use crate::payload::Payload;
use crate::runtime::contain::{contain, contain_future};
#[cfg(doc)]
use crate::{Runtime, RuntimeBuilder, StartOptions};

/// Decides who may resume which gate (K12.2). Consulted before anything is recorded.
///
/// # As a seam
/// - **Replay:** never called on replay: a recorded resume was authorized when it arrived.
/// - **Task:** the caller's task (`resume`, `resume_as`, `inbound`), before any lock is taken
///   or anything is recorded.
/// - **Panic:** contained: the request is refused with the panic's message as the reason.
/// - **Other processes:** it sees only the request; the caller is never recorded.
pub trait ResumeAuthenticator: Send + Sync + 'static {
    /// `Err(reason)` refuses the resume.
    fn authorize(&self, request: &ResumeRequest<'_>) -> Result<(), String>;

    /// Whether an inbound message may start this execution ([`Inbound::Start`](crate::Inbound::Start)); `Err(reason)`
    /// refuses. Refuses by default, so that an authenticator written for resumes does not let
    /// unknown callers start executions. (For a decision that must wait, implement
    /// [`AsyncResumeAuthenticator`] instead.)
    fn authorize_start(&self, request: &StartRequest<'_>) -> Result<(), String> {
        let _ = request;
        Err(NO_STARTS.to_owned())
    }
}

/// A resume as the authenticator sees it.
#[derive(Debug, Clone, Copy)]
pub struct ResumeRequest<'a> {
    /// Who asks ([`Caller::anonymous`] for [`Runtime::resume`]).
    pub caller: &'a Caller,
    /// The execution to resume.
    pub execution: &'a ExecutionId,
    /// The resume's event type.
    pub event_type: &'a str,
    /// The resume's correlation key.
    pub correlation_key: &'a str,
    /// What the resume carries.
    pub payload: &'a Payload,
}

/// The longest subject, attribute key or attribute value a [`Caller`] accepts, in bytes.
pub const MAX_CALLER_TEXT: usize = 256;
/// The most attributes a [`Caller`] carries.
pub const MAX_CALLER_ATTRIBUTES: usize = 32;

/// Who asks: a subject (a user, a service, a session), or nobody in particular
/// ([`Caller::anonymous`]), with optional attributes (roles, a tenant, how the subject was
/// authenticated). Established by the application, never read from a message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Caller {
    subject: Option<String>,
    attributes: BTreeMap<String, String>,
}

/// Why a [`Caller`] could not be built: a subject or attribute that could not be shown safely.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallerError {
    /// The subject or an attribute key is empty.
    #[error("a caller's subject or attribute key may not be empty")]
    Empty,
    /// A text is longer than [`MAX_CALLER_TEXT`] bytes.
    #[error("a caller's subject or attribute is longer than {MAX_CALLER_TEXT} bytes")]
    TooLong,
    /// A text holds a control character (a line break could forge a log line), a format
    /// character (a bidirectional override such as U+202E shows one text as another) or a line
    /// or paragraph separator (U+2028, U+2029).
    #[error(
        "a caller's subject or attribute holds a control or format character, or a line or paragraph separator"
    )]
    ControlCharacter,
    /// A text is not in Unicode Normalization Form C: two spellings of one name would be two
    /// callers to an authenticator comparing bytes.
    #[error("a caller's subject or attribute is not in Unicode Normalization Form C")]
    NotNormalized,
    /// More than [`MAX_CALLER_ATTRIBUTES`] attributes.
    #[error("a caller carries at most {MAX_CALLER_ATTRIBUTES} attributes")]
    TooManyAttributes,
}

fn check_text(text: &str, may_be_empty: bool) -> Result<(), CallerError> {
    if text.is_empty() && !may_be_empty {
        return Err(CallerError::Empty);
    }
    if text.len() > MAX_CALLER_TEXT {
        return Err(CallerError::TooLong);
    }
    if text.chars().any(hides_text) {
        return Err(CallerError::ControlCharacter);
    }
    if !is_nfc(text) {
        return Err(CallerError::NotNormalized);
    }
    Ok(())
}

impl Caller {
    /// Nobody in particular: what [`Runtime::resume`] and [`Runtime::inbound`] pass.
    pub fn anonymous() -> Self {
        Self::default()
    }

    /// The caller `subject` (not empty, at most [`MAX_CALLER_TEXT`] bytes, no control or
    /// format character nor line or paragraph separator, in Unicode Normalization Form C).
    pub fn new(subject: impl Into<String>) -> Result<Self, CallerError> {
        let subject = subject.into();
        check_text(&subject, false)?;
        Ok(Self {
            subject: Some(subject),
            attributes: BTreeMap::new(),
        })
    }

    /// This caller with the attribute `key` set to `value` (the same limits as the subject;
    /// the value may be empty).
    pub fn with_attribute(
        mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<Self, CallerError> {
        let (key, value) = (key.into(), value.into());
        check_text(&key, false)?;
        check_text(&value, true)?;
        if !self.attributes.contains_key(&key) && self.attributes.len() >= MAX_CALLER_ATTRIBUTES {
            return Err(CallerError::TooManyAttributes);
        }
        self.attributes.insert(key, value);
        Ok(self)
    }

    /// The subject; `None` for the anonymous caller.
    pub fn subject(&self) -> Option<&str> {
        self.subject.as_deref()
    }

    /// Whether this is the anonymous caller.
    pub fn is_anonymous(&self) -> bool {
        self.subject.is_none()
    }

    /// The attribute `key`, if set.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    /// Every attribute, in key order.
    pub fn attributes(&self) -> &BTreeMap<String, String> {
        &self.attributes
    }
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.subject {
            Some(subject) => f.write_str(subject),
            None => f.write_str("an anonymous caller"),
        }
    }
}

/// A start asked by an inbound message, as the authenticator sees it.
#[derive(Debug, Clone, Copy)]
pub struct StartRequest<'a> {
    /// Who asks.
    pub caller: &'a Caller,
    /// The execution to start.
    pub execution: &'a ExecutionId,
    /// The flow to start.
    pub flow: &'a str,
    /// Its input.
    pub input: &'a Payload,
}

/// What an [`AsyncResumeAuthenticator`] answers: `Err(reason)` refuses.
pub type Authorization<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

/// The resume authenticator (K12.2) when its decision needs to wait (a token introspection, a
/// policy service, a database). A panic while it decides refuses the request, with the panic's
/// message as the reason; bounding how long it may take is the caller's business (wrap the
/// resume in a timeout): while it waits, nothing is recorded and no lock is held.
///
/// # As a seam
/// Never called on replay; awaited on the caller's task; a panic (making or awaiting the
/// decision) refuses; it sees only the request, and the caller is never recorded.
pub trait AsyncResumeAuthenticator: Send + Sync + 'static {
    /// Decides whether `request.caller` may resume this gate.
    fn authorize<'a>(&'a self, request: ResumeRequest<'a>) -> Authorization<'a>;

    /// Decides whether `request.caller` may start this execution from an inbound message
    /// ([`Inbound::Start`](crate::Inbound::Start)). Refuses by default, so that an authenticator written for resumes
    /// does not let unknown callers start executions.
    fn authorize_start<'a>(&'a self, request: StartRequest<'a>) -> Authorization<'a> {
        let _ = request;
        Box::pin(std::future::ready(Err(NO_STARTS.to_owned())))
    }
}

/// The reason the default [`AsyncResumeAuthenticator::authorize_start`] gives.
pub(crate) const NO_STARTS: &str =
    "this runtime's authenticator does not authorize starts from inbound messages";

/// A synchronous [`ResumeAuthenticator`] seen as an asynchronous one.
pub(crate) struct Blocking<A>(pub(crate) A);

impl<A: ResumeAuthenticator> AsyncResumeAuthenticator for Blocking<A> {
    fn authorize<'a>(&'a self, request: ResumeRequest<'a>) -> Authorization<'a> {
        let decision = self.0.authorize(&request);
        Box::pin(std::future::ready(decision))
    }

    fn authorize_start<'a>(&'a self, request: StartRequest<'a>) -> Authorization<'a> {
        let decision = self.0.authorize_start(&request);
        Box::pin(std::future::ready(decision))
    }
}

/// Runs an authenticator's decision with its panics, while it is made or awaited, contained.
pub(crate) async fn decide<'a>(
    what: &str,
    make: impl FnOnce() -> Authorization<'a>,
) -> Result<(), String> {
    let decision = contain(make)
        .map_err(|panic| format!("the resume authenticator panicked deciding a {what}: {panic}"))?;
    contain_future(decision).await.unwrap_or_else(|panic| {
        Err(format!(
            "the resume authenticator panicked deciding a {what}: {panic}"
        ))
    })
}
