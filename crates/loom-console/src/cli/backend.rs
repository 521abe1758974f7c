//! Where a command reads and writes: a store file, PostgreSQL, or the admin API of the process
//! that runs the flows; how each is opened, and the classification payloads are masked with.

use std::path::{Path, PathBuf};

use loom_console::{AdminClient, ConsoleError};
use loom_kernel::{DataClassification, DiskStore, DiskStoreConfig, OpenError};
use loom_store_postgres::{PostgresStoreConfig, ShardedStore};

use super::args::Cli;

/// Where the console reads and writes.
pub(crate) enum Backend {
    /// An embedded store file, opened per command.
    File(StoreFile),
    /// A PostgreSQL store (reads).
    // One database is a shard map of one.
    Postgres(ShardedStore),
    /// The admin API of the process that runs the flows.
    Admin(AdminClient),
}

pub(crate) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

pub(crate) async fn backend(cli: &Cli) -> Result<Backend, ConsoleError> {
    if cli.store.is_some() && cli.admin.is_some() {
        return Err(ConsoleError::bad_request(
            "give --store or --admin, not both",
        ));
    }
    let admin = match &cli.store {
        Some(_) => None,
        None => cli.admin.clone().or_else(|| env("LOOM_ADMIN_URL")),
    };
    if let Some(url) = admin {
        let token = cli
            .token
            .clone()
            .or_else(|| env("LOOM_ADMIN_TOKEN"))
            .unwrap_or_default();
        return Ok(Backend::Admin(AdminClient::new(&url, &token)?));
    }
    let Some(store) = cli.store.clone().or_else(|| env("LOOM_STORE")) else {
        return Err(ConsoleError::bad_request(
            "no store given: use --store FILE (when no process holds the file), or --admin http://127.0.0.1:PORT --token TOKEN (the admin API of the process that runs the flows)",
        ));
    };
    if store.starts_with("postgres://") || store.starts_with("postgresql://") {
        // A comma may also separate the hosts of one replicated database.
        let shards = loom_store_postgres::shard_urls(&store)
            .into_iter()
            .map(|url| {
                PostgresStoreConfig::new(url)
                    .schema(&cli.schema)
                    .check_only()
            })
            .collect();
        let connected = ShardedStore::connect(shards).await.map_err(|error| {
            ConsoleError::unavailable(format!(
                "cannot open the PostgreSQL store: {error} (the schema is chosen with --schema, default loom)"
            ))
        })?;
        return Ok(Backend::Postgres(connected));
    }
    Ok(Backend::File(StoreFile {
        path: PathBuf::from(store),
        accept_cut_journal: cli.accept_cut_journal,
    }))
}

/// A store file and how to open it.
#[derive(Debug)]
pub(crate) struct StoreFile {
    pub(crate) path: PathBuf,
    pub(crate) accept_cut_journal: bool,
}

pub(crate) fn held_elsewhere(path: &Path) -> ConsoleError {
    ConsoleError::unavailable(format!(
        "store file {} is held by another process (the server that runs the flows, most likely), so it cannot be opened here: go through that server's admin API instead: loom --admin http://127.0.0.1:PORT --token TOKEN ... (or set LOOM_ADMIN_URL and LOOM_ADMIN_TOKEN)",
        path.display()
    ))
}

/// Opens the store file: read-only unless `write`.
pub(crate) fn open_file(file: &StoreFile, write: bool) -> Result<DiskStore, ConsoleError> {
    let path = file.path.as_path();
    // The default open: in proportion to the journal, not to the file (LD-039). The store's own
    // checks refuse a damaged value where a command reads it; `loom store check` reads every
    // page and row when asked.
    let config = DiskStoreConfig {
        cache_size_bytes: 16 << 20,
        // One command, then the file is closed: no scrub.
        scrub_after_open: false,
        accept_cut_journal: file.accept_cut_journal,
        ..DiskStoreConfig::default()
    };
    let opened = match write {
        true => DiskStore::open_existing(path, config),
        false => DiskStore::open_read_only(path, config),
    };
    opened.map_err(|error| match error {
        OpenError::AlreadyOpen { .. } => held_elsewhere(path),
        OpenError::Missing { .. } => ConsoleError::unavailable(format!(
            "store file {} does not exist: check the path given to --store",
            path.display()
        )),
        other => ConsoleError::unavailable(other.to_string()),
    })
}

pub(crate) fn classification(cli: &Cli) -> Result<DataClassification, ConsoleError> {
    let mut paths = cli.masks.clone();
    // A store file may carry its classification beside it (`<file>.masks`, written by the
    // process that runs the flows), so that reading the file directly masks what that process
    // masks without the operator having to know the paths.
    let beside_store = cli
        .store
        .clone()
        .or_else(|| env("LOOM_STORE"))
        .filter(|store| !store.starts_with("postgres://") && !store.starts_with("postgresql://"))
        .map(|store| PathBuf::from(format!("{store}.masks")))
        .filter(|file| file.is_file());
    let file = cli
        .mask_file
        .clone()
        .or_else(|| env("LOOM_MASK_FILE").map(PathBuf::from))
        .or(beside_store);
    if let Some(file) = file {
        let text = std::fs::read_to_string(&file).map_err(|error| {
            ConsoleError::bad_request(format!(
                "cannot read the mask file {}: {error}",
                file.display()
            ))
        })?;
        paths.extend(loom_kernel::kit::mask_file_paths(&text).map(str::to_owned));
    }
    DataClassification::mask_paths(paths)
        .map_err(|error| ConsoleError::bad_request(error.to_string()))
}

/// Gives back the lease a write on PostgreSQL took, so that any worker's `recover()` drives
/// the execution at once; a lease left behind would only run out later.
pub(crate) async fn give_back(store: &ShardedStore) {
    if let Err(error) = store.release_leases().await {
        tracing::warn!(%error, "the lease taken for this write runs out by itself");
    }
}

/// The admin API's client, for a command that only the process with the flows can carry out.
pub(crate) fn admin_only<'a>(
    backend: &'a Backend,
    what: &str,
) -> Result<&'a AdminClient, ConsoleError> {
    match backend {
        Backend::Admin(client) => Ok(client),
        _ => Err(ConsoleError::refused(format!(
            "only the process that runs the flows can {what}: go through its admin API (loom --admin http://127.0.0.1:PORT --token TOKEN ...)"
        ))),
    }
}
