//! Per-execution renderer credentials: a server mints one for exactly one (execution, surface)
//! and an expiry when it hands out a renderer link, and the edge lets its holder open sessions
//! on that binding and no other, until it expires.
//!
//! A credential is `v1.<execution>.<surface>.<expiry>.<tag>`: the execution and the surface
//! in hex, the expiry in Unix seconds, and an HMAC-SHA256 over what precedes the tag with the
//! server's [`CredentialKey`]. Nothing is stored: whoever holds the key can check it, a
//! restarted server too when its key is kept. It is a bearer credential: whoever holds the
//! link holds the binding, so links travel over channels the renderer's user trusts.

use std::time::{SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use futures::future::BoxFuture;
use hmac::{Hmac, KeyInit, Mac};
use loom_kernel::{Caller, ExecutionId};
use sha2::Sha256;
use thiserror::Error;

use crate::edge::auth::{Binding, Connection, Grant, SessionAuthenticator};

/// The connection credential holding a renderer credential (`?credential=` on the example's
/// links), read by [`SignedCredentials`].
pub const CREDENTIAL: &str = "credential";

const VERSION: &str = "v1";

/// A credential that does not open a session.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CredentialError {
    /// A key shorter than [`CredentialKey::MIN_BYTES`].
    #[error("a credential key needs at least {min} bytes, not {bytes}")]
    KeyTooShort {
        /// The key's length.
        bytes: usize,
        /// The least accepted.
        min: usize,
    },
    /// The connection carries no credential.
    #[error("no renderer credential")]
    Missing,
    /// Not a credential of this format.
    #[error("the renderer credential is malformed: {0}")]
    Malformed(&'static str),
    /// Its tag does not match: altered, or minted with another key.
    #[error("the renderer credential was not issued by this server (or was altered)")]
    Tampered,
    /// Past its expiry.
    #[error("the renderer credential expired at {expired_at} (Unix seconds)")]
    Expired {
        /// When it expired.
        expired_at: u64,
    },
}

/// The server's secret for renderer credentials. Keep it across restarts (a file with
/// owner-only permissions, a secret store) so that links handed out stay good; a new key
/// revokes every credential minted with the old one.
#[derive(Clone)]
pub struct CredentialKey {
    mac: Hmac<Sha256>,
}

impl std::fmt::Debug for CredentialKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A secret stays out of logs.
        f.write_str("CredentialKey(..)")
    }
}

impl CredentialKey {
    /// The shortest key accepted, in bytes.
    pub const MIN_BYTES: usize = 32;

    /// A key from `secret` (at least [`CredentialKey::MIN_BYTES`] random bytes).
    pub fn new(secret: &[u8]) -> Result<Self, CredentialError> {
        if secret.len() < Self::MIN_BYTES {
            return Err(CredentialError::KeyTooShort {
                bytes: secret.len(),
                min: Self::MIN_BYTES,
            });
        }
        let mac =
            Hmac::<Sha256>::new_from_slice(secret).map_err(|_| CredentialError::KeyTooShort {
                bytes: secret.len(),
                min: Self::MIN_BYTES,
            })?;
        Ok(Self { mac })
    }

    /// A credential for `binding` that expires at `expires_at` (Unix seconds).
    pub fn mint(&self, binding: &Binding, expires_at: u64) -> String {
        let signed = format!(
            "{VERSION}.{}.{}.{expires_at}",
            hex(binding.execution.as_str().as_bytes()),
            hex(binding.surface_id.as_bytes())
        );
        let tag = hex(&self.tag(&signed));
        format!("{signed}.{tag}")
    }

    /// The binding `credential` grants at `now` (Unix seconds), or why it grants none.
    pub fn verify(&self, credential: &str, now: u64) -> Result<Binding, CredentialError> {
        let (signed, tag) = credential
            .rsplit_once('.')
            .ok_or(CredentialError::Malformed("no tag"))?;
        let tag = unhex(tag).ok_or(CredentialError::Malformed("the tag is not hex"))?;
        let mut mac = self.mac.clone();
        mac.update(signed.as_bytes());
        // Constant time: a forger learns nothing from how long a refusal takes.
        mac.verify_slice(&tag)
            .map_err(|_| CredentialError::Tampered)?;
        let mut parts = signed.split('.');
        let (Some(version), Some(execution), Some(surface), Some(expiry), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(CredentialError::Malformed("not five parts"));
        };
        if version != VERSION {
            return Err(CredentialError::Malformed("an unknown version"));
        }
        let text = |part: &str| unhex(part).and_then(|bytes| String::from_utf8(bytes).ok());
        let execution = text(execution)
            .and_then(|id| ExecutionId::new(id).ok())
            .ok_or(CredentialError::Malformed("not an execution id"))?;
        let surface = text(surface).ok_or(CredentialError::Malformed("not a surface id"))?;
        let expired_at: u64 = expiry
            .parse()
            .map_err(|_| CredentialError::Malformed("the expiry is not a number"))?;
        if now >= expired_at {
            return Err(CredentialError::Expired { expired_at });
        }
        Ok(Binding::new(execution, surface))
    }

    fn tag(&self, signed: &str) -> Vec<u8> {
        let mut mac = self.mac.clone();
        mac.update(signed.as_bytes());
        mac.finalize().into_bytes().to_vec()
    }
}

/// A [`SessionAuthenticator`] for holders of credentials minted with one key: the
/// connection's [`CREDENTIAL`] grants its binding only, to a caller named after it
/// (`renderer:<execution>/<surface>`, so that [`Limits::max_sessions_per_caller`](crate::Limits::max_sessions_per_caller)
/// counts per credential's binding).
#[derive(Debug, Clone)]
pub struct SignedCredentials {
    key: CredentialKey,
}

impl SignedCredentials {
    /// Checks credentials minted with `key`.
    pub fn new(key: CredentialKey) -> Self {
        Self { key }
    }

    /// The key.
    pub fn key(&self) -> &CredentialKey {
        &self.key
    }

    /// The grant for `connection` at `now` (Unix seconds).
    pub fn grant_at(&self, connection: &Connection, now: u64) -> Result<Grant, CredentialError> {
        let credential = connection
            .credentials
            .get(CREDENTIAL)
            .ok_or(CredentialError::Missing)?;
        let binding = self.key.verify(credential, now)?;
        let caller = Caller::new(format!(
            "renderer:{}/{}",
            binding.execution, binding.surface_id
        ))
        .and_then(|caller| caller.with_attribute("via", "a2ui"))
        .map_err(|_| CredentialError::Malformed("not a caller name"))?;
        Ok(Grant {
            caller,
            bindings: vec![binding],
        })
    }
}

/// Now, in Unix seconds (the wall clock: a credential's expiry is a date).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

impl SessionAuthenticator for SignedCredentials {
    fn authenticate<'a>(
        &'a self,
        connection: &'a Connection,
    ) -> BoxFuture<'a, Result<Grant, String>> {
        let grant = self
            .grant_at(connection, unix_now())
            .map_err(|error| error.to_string());
        async move { grant }.boxed()
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |byte: u8| match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        _ => None,
    };
    text.as_bytes()
        .chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> CredentialKey {
        CredentialKey::new(&[byte; 32]).unwrap()
    }

    fn binding(execution: &str) -> Binding {
        Binding::new(ExecutionId::new(execution).unwrap(), "checkout")
    }

    #[test]
    fn a_credential_grants_its_binding_until_it_expires() {
        let credential = key(1).mint(&binding("checkout-1"), 1_000);
        assert_eq!(key(1).verify(&credential, 999), Ok(binding("checkout-1")));
        assert_eq!(
            key(1).verify(&credential, 1_000),
            Err(CredentialError::Expired { expired_at: 1_000 })
        );
    }

    #[test]
    fn an_altered_or_foreign_credential_is_refused() {
        let credential = key(1).mint(&binding("checkout-1"), 1_000);
        assert_eq!(
            key(2).verify(&credential, 0),
            Err(CredentialError::Tampered)
        );
        // Another execution, a later expiry, a flipped tag digit: the tag no longer matches.
        let other = credential.replacen(&hex(b"checkout-1"), &hex(b"checkout-2"), 1);
        let later = credential.replacen(".1000.", ".9999.", 1);
        let mut flipped = credential.clone();
        let last = flipped.pop().unwrap();
        flipped.push(if last == '0' { '1' } else { '0' });
        for forged in [other, later, flipped] {
            assert_eq!(key(1).verify(&forged, 0), Err(CredentialError::Tampered));
        }
        for junk in ["", ".", "v1", "v1.zz", "not-a-credential"] {
            assert!(
                matches!(
                    key(1).verify(junk, 0),
                    Err(CredentialError::Malformed(_) | CredentialError::Tampered)
                ),
                "{junk:?}"
            );
        }
    }

    #[test]
    fn a_short_key_is_refused() {
        assert_eq!(
            CredentialKey::new(&[0; 16]).unwrap_err(),
            CredentialError::KeyTooShort { bytes: 16, min: 32 }
        );
    }

    #[test]
    fn hex_round_trips() {
        for bytes in [&b""[..], b"a", b"\x00\xff\x10", "é/ü".as_bytes()] {
            assert_eq!(unhex(&hex(bytes)).as_deref(), Some(bytes));
        }
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("AB"), None);
    }
}
