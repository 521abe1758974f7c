//! The server's key for renderer credentials, kept in a file beside the store so that the
//! links it handed out stay good across a restart (the story's crash included).
//!
//! The file holds one line of random text (64 hex digits, 256 bits), written once with
//! owner-only permissions (0600) and never rewritten; a new key (delete the file) revokes every
//! link handed out before.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::{Context, Result, bail};
use loom_plugin_a2ui::CredentialKey;

/// Writes a new key to `path` whole or not at all: to a file beside it first, then linked
/// in place, which fails if another process made one meanwhile (that one is kept). A crash
/// leaves no empty key behind.
fn create(path: &Path) -> Result<()> {
    // Unique to this attempt: two servers in one process (or two processes) never share it.
    static ATTEMPTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let attempt = ATTEMPTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let staged = std::path::PathBuf::from(format!(
        "{}.new-{}-{attempt}",
        path.display(),
        std::process::id()
    ));
    let secret = loom_console::random_token().context("making a renderer key")?;
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&staged)
        .and_then(|mut file| {
            writeln!(file, "{secret}")?;
            file.sync_all()
        });
    let linked = written.and_then(|()| std::fs::hard_link(&staged, path));
    let _ = std::fs::remove_file(&staged);
    match linked {
        Ok(()) => {
            tracing::info!(path = %path.display(), "made a renderer key");
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(error).with_context(|| format!("creating {}", path.display())),
    }
}

/// The key in `path`, made there first if the file is missing.
pub fn load_or_create(path: &Path) -> Result<CredentialKey> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if !path.exists() {
        create(path)?;
    }
    let metadata =
        std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if metadata.permissions().mode() & 0o077 != 0 {
        tracing::warn!(
            path = %path.display(),
            "the renderer key is readable by others than its owner: chmod 600 it"
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the renderer key {}", path.display()))?;
    let secret = text.trim();
    if secret.len() < CredentialKey::MIN_BYTES {
        bail!(
            "the renderer key {} holds {} bytes, fewer than {}: delete it to make a new one (links handed out before stop working)",
            path.display(),
            secret.len(),
            CredentialKey::MIN_BYTES
        );
    }
    CredentialKey::new(secret.as_bytes()).context("the renderer key")
}
