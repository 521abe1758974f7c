//! What one inbound frame and one session may cost: bytes, nesting, rate. Checked before a
//! frame is parsed, so that a hostile renderer pays for its own bytes and nothing more.

use std::time::Duration;

use thiserror::Error;
use tokio::time::Instant;

/// The bounds a [`RendererEdge`](crate::RendererEdge) applies to every session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest inbound frame, in bytes (default 1 MiB); larger closes with 1009.
    pub max_frame_bytes: usize,
    /// The deepest JSON nesting of an inbound message (default 32); deeper is refused.
    pub max_depth: usize,
    /// Inbound messages a session may send per second, sustained (default 20).
    pub messages_per_second: u32,
    /// Inbound messages a session may send at once above the sustained rate (default 40);
    /// a session past it closes with 1008.
    pub burst: u32,
    /// How long a grain-B call whose session closed before its reply waits for another
    /// session of the same execution and surface, which it is sent to again with the same
    /// call id (default 10 s); past it, or when zero, the call is lost and its step in doubt.
    pub resend_grace: Duration,
    /// The largest function reply or action, in bytes as sent (default 64 KiB); a function
    /// may declare a tighter bound ([`FunctionDef::max_reply_bytes`](crate::FunctionDef::max_reply_bytes)).
    /// Larger is refused before anything is recorded; the session stays open.
    pub max_reply_bytes: usize,
    /// Sessions open at once on the edge (default 4,096); past it a session is refused with
    /// 1013 (try again later).
    pub max_sessions: usize,
    /// Sessions open at once for one caller, as the authenticator names it (default 64).
    pub max_sessions_per_caller: usize,
    /// Sessions open at once from one peer address ([`Connection::peer`](crate::Connection::peer),
    /// default 256).
    pub max_sessions_per_peer: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_frame_bytes: 1024 * 1024,
            max_depth: 32,
            messages_per_second: 20,
            burst: 40,
            resend_grace: Duration::from_secs(10),
            max_reply_bytes: 64 * 1024,
            max_sessions: 4096,
            max_sessions_per_caller: 64,
            max_sessions_per_peer: 256,
        }
    }
}

/// WebSocket close codes (RFC 6455 §7.4.1) for what ends a session.
pub mod close_codes {
    /// A message broke a policy: rate, authentication, binding at open.
    pub const POLICY: u16 = 1008;
    /// A frame too large to take.
    pub const TOO_BIG: u16 = 1009;
    /// A text frame that is not UTF-8.
    pub const INVALID_PAYLOAD: u16 = 1007;
    /// A binary frame: A2UI messages are JSON text.
    pub const UNSUPPORTED_DATA: u16 = 1003;
    /// Too many sessions open: the server refuses this one for now.
    pub const TRY_AGAIN_LATER: u16 = 1013;
}

/// A frame refused before it is parsed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FrameError {
    /// Larger than [`Limits::max_frame_bytes`].
    #[error("a frame of {bytes} bytes is larger than the limit of {limit}")]
    TooLarge {
        /// The frame's size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// Not UTF-8 (A2UI messages are JSON text).
    #[error("the frame is not UTF-8 text")]
    NotUtf8,
    /// Nested deeper than [`Limits::max_depth`].
    #[error("the message nests deeper than {limit} levels")]
    TooDeep {
        /// The limit.
        limit: usize,
    },
    /// The session sent more than its rate allows.
    #[error("more than {per_second} messages per second (burst {burst})")]
    RateExceeded {
        /// The sustained rate.
        per_second: u32,
        /// The burst.
        burst: u32,
    },
}

impl FrameError {
    /// The close code the session ends with, or `None` when the frame is only refused.
    pub fn close_code(&self) -> Option<u16> {
        match self {
            Self::TooLarge { .. } => Some(close_codes::TOO_BIG),
            Self::NotUtf8 => Some(close_codes::INVALID_PAYLOAD),
            Self::RateExceeded { .. } => Some(close_codes::POLICY),
            Self::TooDeep { .. } => None,
        }
    }
}

/// A session refused because a limit on open sessions is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TooMany {
    /// [`Limits::max_sessions`].
    #[error("the server has {limit} renderer sessions open, its limit")]
    Total {
        /// The limit.
        limit: usize,
    },
    /// [`Limits::max_sessions_per_caller`].
    #[error("this caller has {limit} renderer sessions open, its limit")]
    Caller {
        /// The limit.
        limit: usize,
    },
    /// [`Limits::max_sessions_per_peer`].
    #[error("this address has {limit} renderer sessions open, its limit")]
    Peer {
        /// The limit.
        limit: usize,
    },
}

impl TooMany {
    /// The close code: 1013, try again later.
    pub fn close_code(self) -> u16 {
        close_codes::TRY_AGAIN_LATER
    }
}

/// Checks a frame's size, encoding and nesting, without parsing it.
pub fn check_frame(bytes: &[u8], limits: &Limits) -> Result<(), FrameError> {
    if bytes.len() > limits.max_frame_bytes {
        return Err(FrameError::TooLarge {
            bytes: bytes.len(),
            limit: limits.max_frame_bytes,
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|_| FrameError::NotUtf8)?;
    if nesting_depth(text) > limits.max_depth {
        return Err(FrameError::TooDeep {
            limit: limits.max_depth,
        });
    }
    Ok(())
}

/// The deepest nesting of arrays and objects in `text`, brackets inside strings not counted.
/// Malformed JSON gets a number too; the parser refuses it after.
fn nesting_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for byte in text.bytes() {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// A token bucket per session: `burst` messages at once, refilled at `messages_per_second`.
/// It reads the monotonic clock to pace a socket; nothing it decides is recorded.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    tokens: f64,
    per_second: u32,
    burst: u32,
    last: Instant,
}

impl RateLimiter {
    pub(crate) fn new(limits: &Limits) -> Self {
        Self {
            tokens: f64::from(limits.burst.max(1)),
            per_second: limits.messages_per_second,
            burst: limits.burst.max(1),
            last: Instant::now(),
        }
    }

    /// Takes one message's token, or refuses.
    pub(crate) fn take(&mut self) -> Result<(), FrameError> {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.last);
        self.last = now;
        self.tokens = (self.tokens + refill(elapsed, self.per_second)).min(f64::from(self.burst));
        if self.tokens < 1.0 {
            return Err(FrameError::RateExceeded {
                per_second: self.per_second,
                burst: self.burst,
            });
        }
        self.tokens -= 1.0;
        Ok(())
    }
}

fn refill(elapsed: Duration, per_second: u32) -> f64 {
    elapsed.as_secs_f64() * f64::from(per_second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brackets_in_strings_do_not_count_as_nesting() {
        assert_eq!(nesting_depth(r#"{"a": "[[[[{{{{\"]]"}"#), 1);
        assert_eq!(nesting_depth(r#"[[[1]], {"b": [2]}]"#), 3);
    }

    #[test]
    fn each_limit_is_refused_with_its_close_code() {
        let limits = Limits {
            max_frame_bytes: 16,
            max_depth: 2,
            ..Limits::default()
        };
        let big = check_frame(&[b' '; 17], &limits).unwrap_err();
        assert_eq!(big.close_code(), Some(1009));
        let invalid = check_frame(&[b'"', 0xff, b'"'], &limits).unwrap_err();
        assert_eq!(invalid, FrameError::NotUtf8);
        assert_eq!(invalid.close_code(), Some(1007));
        assert_eq!(
            check_frame(b"[[[1]]]", &limits),
            Err(FrameError::TooDeep { limit: 2 })
        );
        assert_eq!(check_frame(b"[[1]]", &limits), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_past_its_burst_is_refused_until_tokens_come_back() {
        let limits = Limits {
            messages_per_second: 1,
            burst: 2,
            ..Limits::default()
        };
        let mut rate = RateLimiter::new(&limits);
        assert!(rate.take().is_ok());
        assert!(rate.take().is_ok());
        assert_eq!(rate.take().unwrap_err().close_code(), Some(1008));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(rate.take().is_ok());
    }
}
