//! Secrets the server keeps in files beside its store (the renderer key, the admin token), so
//! that what it handed out stays good across a restart: links, open console tabs, scripts.
//!
//! A file holds one line of random text (64 hex digits, 256 bits), written once with
//! owner-only permissions (0600) and never rewritten; deleting it makes a new secret at the
//! next start and revokes what was handed out before.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::{Context, Result, bail};

/// Writes a new secret to `path` whole or not at all: to a file beside it first, then linked
/// in place, which fails if another process made one meanwhile (that one is kept). A crash
/// leaves no empty secret behind.
fn create(path: &Path, what: &str) -> Result<()> {
    // Unique to this attempt: two servers in one process (or two processes) never share it.
    static ATTEMPTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let attempt = ATTEMPTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let staged = std::path::PathBuf::from(format!(
        "{}.new-{}-{attempt}",
        path.display(),
        std::process::id()
    ));
    let secret = loom_console::random_token().with_context(|| format!("making {what}"))?;
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
            tracing::info!(path = %path.display(), "made {what}");
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(error).with_context(|| format!("creating {}", path.display())),
    }
}

/// The secret in `path` (`what` names it in messages), made there first if the file is
/// missing; one of fewer than `min_len` bytes is refused with what to do.
pub(crate) fn load_or_create(path: &Path, what: &str, min_len: usize) -> Result<String> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if !path.exists() {
        create(path, what)?;
    }
    let metadata =
        std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if metadata.permissions().mode() & 0o077 != 0 {
        tracing::warn!(
            path = %path.display(),
            "{what} is readable by others than its owner: chmod 600 it"
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading {what} {}", path.display()))?;
    let secret = text.trim();
    if secret.len() < min_len {
        bail!(
            "{what} {} holds {} bytes, fewer than {min_len}: delete it to make a new one (what was handed out before stops working)",
            path.display(),
            secret.len(),
        );
    }
    Ok(secret.to_owned())
}
