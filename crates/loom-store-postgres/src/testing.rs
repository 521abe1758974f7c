//! Test support: where the test server is, and a fresh schema per test.
//!
//! Tests find the server in `LOOM_TEST_POSTGRES_URL`, or else in the file `cargo xtask pg-up`
//! writes (`target/loom-pg/url` at the workspace root). With neither, [`server_url`] says so
//! loudly on stderr and returns `None`: the test then passes without checking anything. CI
//! always starts a server.

use std::path::PathBuf;

use crate::{ConnectError, PostgresStore, PostgresStoreConfig};

/// The environment variable naming the test server.
pub const URL_VAR: &str = "LOOM_TEST_POSTGRES_URL";

/// Set (as CI does) to make a missing server a failure instead of a skip.
pub const REQUIRE_VAR: &str = "LOOM_REQUIRE_POSTGRES";

/// The file `cargo xtask pg-up` writes the server's URL to.
pub fn url_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/loom-pg/url")
}

/// The test server's URL, or `None` after a loud notice that `test` is skipped (a panic
/// instead when [`REQUIRE_VAR`] is set).
pub fn server_url(test: &str) -> Option<String> {
    if let Ok(url) = std::env::var(URL_VAR)
        && !url.trim().is_empty()
    {
        return Some(url.trim().to_owned());
    }
    if let Ok(url) = std::fs::read_to_string(url_file())
        && !url.trim().is_empty()
    {
        return Some(url.trim().to_owned());
    }
    if std::env::var_os(REQUIRE_VAR).is_some() {
        panic!("{test}: {REQUIRE_VAR} is set but no PostgreSQL server is configured ({URL_VAR})");
    }
    #[allow(clippy::print_stderr)]
    {
        eprintln!(
            "\n*** SKIPPED {test}: no PostgreSQL server configured.\n*** Run `cargo xtask pg-up` \
             (or set {URL_VAR}) to run the PostgreSQL store's tests.\n"
        );
    }
    record_skipped_test("postgresql", test);
    None
}

/// The environment variable naming the file where a skipped test writes one line
/// (`<what it lacked>\t<test>`): `cargo xtask test` sets it and sums the lines up at the end,
/// since cargo hides the stderr of a test that passes.
pub const SKIPPED_TESTS_VAR: &str = "LOOM_SKIPPED_TESTS_FILE";

/// Appends `test`'s line (`<lacking>\t<test>`) to the file [`SKIPPED_TESTS_VAR`] names, if any,
/// for any test that skips for want of something on the machine (`"chromium"`, ...). Best
/// effort: a test that cannot write its line still says on stderr that it was skipped.
pub fn record_skipped_test(lacking: &str, test: &str) {
    use std::io::Write;
    let Some(path) = std::env::var_os(SKIPPED_TESTS_VAR) else {
        return;
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path);
    if let Ok(mut file) = file {
        // One write per line: appends of a few bytes from parallel tests do not interleave.
        let _ = file.write_all(format!("{lacking}\t{test}\n").as_bytes());
    }
}

/// A schema name no other test uses: `prefix` and a random suffix.
pub fn fresh_schema(prefix: &str) -> String {
    let prefix: String = prefix
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(24)
        .collect();
    format!(
        "t_{prefix}_{:012x}",
        crate::config::random_u64() & 0xffff_ffff_ffff
    )
}

/// A store on a fresh schema of the server at `url`.
pub async fn fresh_store(url: &str, prefix: &str) -> Result<PostgresStore, ConnectError> {
    PostgresStore::connect(PostgresStoreConfig::new(url).schema(fresh_schema(prefix))).await
}

/// A plain client of the server at `url`, its connection driven on the caller's runtime: for a
/// test that reads or locks rows beside the store. Panics if the server does not answer.
pub async fn raw_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test server");
    tokio::spawn(connection);
    client
}

/// Runs `statements` on the server at `url` with `schema` first on the search path: a test
/// that rolls a schema back to what an older build left. Panics if they fail.
pub async fn run_in_schema(url: &str, schema: &str, statements: &str) {
    raw_client(url)
        .await
        .batch_execute(&format!("SET search_path TO \"{schema}\"; {statements}"))
        .await
        .expect("the statements run");
}

/// Drops `schema` and everything in it, if the server at `url` answers (a bench's scratch
/// schema: a failure leaves it, and says nothing).
pub async fn drop_schema(url: &str, schema: &str) {
    let Ok((client, connection)) = tokio_postgres::connect(url, tokio_postgres::NoTls).await else {
        return;
    };
    tokio::spawn(connection);
    let _ = client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await;
}
