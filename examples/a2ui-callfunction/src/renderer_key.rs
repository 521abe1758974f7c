//! The server's key for renderer credentials, kept in a file beside the store so that the
//! links it handed out stay good across a restart (the story's crash included).
//!
//! The file holds one line of random text (64 hex digits, 256 bits), written once with
//! owner-only permissions (0600) and never rewritten; a new key (delete the file) revokes every
//! link handed out before.

use std::path::Path;

use anyhow::{Context, Result};
use loom_plugin_a2ui::CredentialKey;

/// The key in `path`, made there first if the file is missing.
pub fn load_or_create(path: &Path) -> Result<CredentialKey> {
    let secret =
        crate::secret_file::load_or_create(path, "the renderer key", CredentialKey::MIN_BYTES)?;
    CredentialKey::new(secret.as_bytes()).context("the renderer key")
}
