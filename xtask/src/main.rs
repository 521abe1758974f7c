//! Developer commands: `cargo xtask <command>` (the alias is in `.cargo/config.toml`).
//!
//! Each command runs cargo from the workspace root with inherited stdio, printing the command
//! first, and fails with the first failing command's exit status.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

mod pg;
mod test_run;

#[derive(Debug, Parser)]
#[command(about = "Loom's developer commands.")]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Runs every test of the workspace (the test command): builds the test binaries once,
    /// then runs them and the doc tests several at a time, each one's output printed whole as
    /// it ends, and a summary of the times, the counts and any test that could not run.
    Test {
        /// What CI runs: the PostgreSQL kill tests' full rounds (30 kills and 5 pauses each,
        /// about two minutes, instead of 6 and 1) and the costliest property tests' full cases
        /// (the runtime's model 10,000 instead of 2,000, the surface's 4,000 instead of 1,000).
        #[arg(long)]
        long: bool,
        /// How many test binaries run at once (default: one more than the cores).
        #[arg(long)]
        jobs: Option<usize>,
        /// Given to every test binary: a name filter, `--nocapture`, `--test-threads=1`...
        #[arg(last = true)]
        test_args: Vec<OsString>,
    },
    /// Runs what CI runs: rustfmt check, clippy with warnings denied, then the tests (with the
    /// kill tests' long rounds).
    Ci,
    /// Live durable steps on the embedded store: one machine-readable line per workload
    /// (`loom seq steps_per_s=...`), for side-by-side runs with other engines.
    Bench,
    /// Runs every benchmark: kernel, replay-check, effects (takes minutes; see
    /// docs/PERFORMANCE.md).
    BenchKernel,
    /// Sustained load on the embedded store and on PostgreSQL: calibrates each store's maximum
    /// rate of executions, then holds an open loop at fractions of it and prints latency
    /// percentiles, RSS and the store's size per interval, and a verdict per run (`cargo bench
    /// -p loom-store-postgres --bench soak -- <args>`; options in that bench's doc comment,
    /// e.g. `--minutes 1 --interval-secs 15 --store disk --shape 1 --loads 0.8`). The default
    /// takes 2 stores x 2 shapes x 3 loads x 10 minutes, plus calibration: over two hours.
    /// PostgreSQL is the server `pg-up` started, skipped without one.
    Soak {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Checks the A2UI plugin against the reference renderer: creates a Python venv
    /// (target/interop-venv), installs a2ui-core 0.4.0 from PyPI, and drives its
    /// MessageProcessor (STRICT) with message streams the plugin produced from real flows; then
    /// runs the a2ui-callfunction story with the reference renderer as a second client.
    Interop,
    /// Checks that recorded executions of the example's flows replay deterministically
    /// (`cargo xtask replay-check --help` for its options; `--postgres <URL> [--schema NAME]`
    /// reads a PostgreSQL store).
    ReplayCheck {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Starts a throwaway PostgreSQL cluster on a free port of 127.0.0.1 and writes its URL to
    /// target/loom-pg/url, where the PostgreSQL store's tests find it.
    PgUp {
        /// A replicated pair instead: a primary and a streaming standby on two free ports, its
        /// multi-host URL (`target_session_attrs=read-write`, valid across `pg-failover`)
        /// printed and written to target/loom-pg/replica/url. Synchronous unless `--async`.
        #[arg(long)]
        replica: bool,
        /// With `--replica`: a commit does not wait for the standby.
        #[arg(long = "async", requires = "replica")]
        asynchronous: bool,
    },
    /// Fails over the pair `pg-up --replica` started: kills its primary and every process of
    /// it at once, promotes the standby, rebuilds a standby on the dead primary's port, and
    /// prints how long each part took.
    PgFailover,
    /// Stops the cluster `pg-up` started, and the pair `pg-up --replica` started, and removes
    /// their data.
    PgDown,
    /// Checks the dependency graph against deny.toml: `cargo deny check bans licenses sources`
    /// (duplicate versions, licenses, sources). Installs cargo-deny 0.20 with `cargo install
    /// cargo-deny --locked` first if it is missing (2 to 3 minutes, once).
    Deny,
    /// Builds the playground's bundle of the official web renderer `@a2ui/lit` from
    /// examples/a2ui-callfunction/web/lit/package-lock.json (`npm ci`, then esbuild, in
    /// target/web-bundle) and writes it beside the lock file; with `--check`, fails unless the
    /// committed bundle is byte for byte that build. Needs Node.js and npm.
    WebBundle {
        /// Compares instead of writing.
        #[arg(long)]
        check: bool,
    },
    /// Writes recorded executions as JSON Lines files (`cargo xtask export-log --help`).
    ExportLog {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

fn main() -> std::process::ExitCode {
    // Logs of the library crates (a store that cannot be read, a skipped execution) on stderr;
    // RUST_LOG chooses how much (warnings and errors by default).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        // Colour codes only for a terminal: redirected to a file, they are noise.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    match xtask() {
        Ok(code) => code,
        Err(error) => {
            // One sentence with its causes, not Rust's debug form.
            eprintln!("xtask: {}", loom_replay_check::error_sentence(&*error));
            std::process::ExitCode::FAILURE
        }
    }
}

fn xtask() -> Result<std::process::ExitCode> {
    // replay-check and export-log have their own command lines (they are also a library
    // users run against their own flows); everything after the command name is theirs.
    let mut args = std::env::args_os();
    let program = args.next().unwrap_or_default();
    match args.next().as_deref().and_then(|command| command.to_str()) {
        Some("replay-check") => {
            let flows = quickstart::flows();
            let args: Vec<OsString> = args.collect();
            if let Some(postgres) = PostgresSource::take(&args) {
                let rest = std::iter::once(OsString::from("cargo xtask replay-check"))
                    .chain(postgres.rest.iter().cloned());
                let label = format!("PostgreSQL schema {}", postgres.schema);
                let config = loom_store_postgres::PostgresStoreConfig::new(&postgres.url)
                    .schema(&postgres.schema)
                    .check_only();
                let code = loom_replay_check::check_store_command(&flows, rest, &label, || async {
                    loom_store_postgres::PostgresStore::connect(config)
                        .await
                        .map_err(Into::into)
                });
                return Ok(std::process::ExitCode::from(code));
            }
            let rest = std::iter::once(OsString::from("cargo xtask replay-check")).chain(args);
            return Ok(loom_replay_check::main(flows, rest));
        }
        Some("export-log") => {
            let rest = std::iter::once(OsString::from("cargo xtask export-log")).chain(args);
            return Ok(loom_replay_check::export_main(rest));
        }
        _ => {}
    }
    let _ = program;
    let cli = Cli::parse();
    let root = workspace_root()?;
    run(cli.command, &root).map(|()| std::process::ExitCode::SUCCESS)
}

fn run(task: Task, root: &Path) -> Result<()> {
    let root = root.to_path_buf();
    match task {
        // Handled before parsing; listed for --help.
        Task::ReplayCheck { .. } | Task::ExportLog { .. } => Ok(()),
        Task::Test {
            long,
            jobs,
            test_args,
        } => test(
            &root,
            test_run::TestOptions {
                long,
                jobs,
                test_args,
                env: Vec::new(),
            },
        ),
        Task::PgUp {
            replica: false,
            asynchronous: _,
        } => pg::up(&root),
        Task::PgUp {
            replica: true,
            asynchronous,
        } => pg::replica_up(&root, !asynchronous),
        Task::PgFailover => pg::replica_failover(&root),
        Task::PgDown => {
            pg::replica_down(&root)?;
            pg::down(&root)
        }
        Task::Interop => interop(&root),
        Task::Deny => deny(&root),
        Task::WebBundle { check } => web_bundle(&root, check),
        Task::Ci => {
            cargo(&root, &["fmt", "--all", "--", "--check"])?;
            cargo(
                &root,
                &[
                    "clippy",
                    "--workspace",
                    "--all-targets",
                    "--",
                    "-D",
                    "warnings",
                ],
            )?;
            test(
                &root,
                test_run::TestOptions {
                    long: true,
                    ..test_run::TestOptions::default()
                },
            )
        }
        Task::Bench => bench(&root, "loom-kernel", &["live"], &[]),
        Task::Soak { args } => soak(&root, &args),
        Task::BenchKernel => {
            bench(
                &root,
                "loom-kernel",
                &["live", "append_latency", "fold_memory"],
                &[],
            )?;
            bench(&root, "loom-replay-check", &["check_store"], &[])?;
            bench(
                &root,
                "loom-effect-runtime",
                &["durable_steps", "step_overhead"],
                &[],
            )?;
            bench(
                &root,
                "loom-kernel",
                &["fold", "append", "replay"],
                &["--warm-up-time", "1", "--measurement-time", "5"],
            )
        }
    }
}

/// `cargo bench -p <package> --bench <name>...`, with `criterion` options after `--`.
fn bench(root: &Path, package: &str, benches: &[&str], criterion: &[&str]) -> Result<()> {
    let mut args = vec!["bench", "-p", package];
    for name in benches {
        args.extend(["--bench", name]);
    }
    if !criterion.is_empty() {
        args.push("--");
        args.extend(criterion);
    }
    cargo(root, &args)
}

/// `cargo bench -p loom-store-postgres --bench soak -- <args>`.
fn soak(root: &Path, args: &[OsString]) -> Result<()> {
    let args = args
        .iter()
        .map(|arg| {
            arg.to_str()
                .context("the soak bench's arguments must be UTF-8")
        })
        .collect::<Result<Vec<_>>>()?;
    let mut command = vec![
        "bench",
        "-p",
        "loom-store-postgres",
        "--bench",
        "soak",
        "--",
    ];
    command.extend(args);
    cargo(root, &command)
}

/// `cargo deny check bans licenses sources`, installing cargo-deny first if it is missing.
/// Advisories are left out: their database is fetched from the network at each run.
fn deny(root: &Path) -> Result<()> {
    let installed = Command::new(cargo_program())
        .args(["deny", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !installed {
        eprintln!("xtask: cargo-deny is not installed; installing it (once, takes minutes)");
        cargo(
            root,
            &["install", "cargo-deny", "--locked", "--version", "^0.20"],
        )?;
    }
    cargo(root, &["deny", "check", "bans", "licenses", "sources"])
}

/// Where the playground's web renderer is declared, locked and bundled.
const WEB_LIT: &str = "examples/a2ui-callfunction/web/lit";
/// The bundle the example's server embeds.
const WEB_LIT_BUNDLE: &str = "a2ui-lit.bundle.js";

fn web_bundle(root: &Path, check: bool) -> Result<()> {
    let source = root.join(WEB_LIT);
    let build = root.join("target/web-bundle");
    // A fresh copy of the three inputs: what the lock file pins, nothing a developer's
    // node_modules holds.
    if build.exists() {
        std::fs::remove_dir_all(&build).with_context(|| format!("emptying {}", build.display()))?;
    }
    std::fs::create_dir_all(&build)?;
    for name in ["package.json", "package-lock.json", "entry.js"] {
        std::fs::copy(source.join(name), build.join(name))
            .with_context(|| format!("copying {WEB_LIT}/{name}"))?;
    }
    // No install scripts: esbuild's binary comes as an optional dependency, pinned by the lock.
    run_program(
        &build,
        "npm",
        &["ci", "--ignore-scripts", "--no-audit", "--no-fund"],
    )?;
    run_program(&build, "npm", &["run", "--silent", "build"])?;
    let built = std::fs::read(build.join(WEB_LIT_BUNDLE))?;
    let committed_path = source.join(WEB_LIT_BUNDLE);
    if !check {
        std::fs::write(&committed_path, &built)?;
        eprintln!("wrote {WEB_LIT}/{WEB_LIT_BUNDLE} ({} bytes)", built.len());
        return Ok(());
    }
    let committed = std::fs::read(&committed_path)
        .with_context(|| format!("reading {}", committed_path.display()))?;
    anyhow::ensure!(
        committed == built,
        "{WEB_LIT}/{WEB_LIT_BUNDLE} ({} bytes) is not what its lock file builds ({} bytes, in target/web-bundle): run `cargo xtask web-bundle` and commit the result",
        committed.len(),
        built.len()
    );
    eprintln!(
        "{WEB_LIT}/{WEB_LIT_BUNDLE} is the build of its lock file ({} bytes)",
        built.len()
    );
    Ok(())
}

/// The reference renderer's package, pinned: the wire is A2UI v1.0 as this version accepts it.
const A2UI_CORE: &str = "a2ui-core==0.4.0";
/// The WebSocket client the reference renderer uses to join the a2ui-callfunction example.
const WEBSOCKETS: &str = "websockets==17.4";

fn interop(root: &Path) -> Result<()> {
    let venv = root.join("target/interop-venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        run_program(root, "python3", &["-m", "venv", &venv.to_string_lossy()])?;
    }
    run_program(
        root,
        &python.to_string_lossy(),
        &[
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            A2UI_CORE,
            WEBSOCKETS,
        ],
    )?;
    let python = python.to_string_lossy();
    cargo_run(
        root,
        &["-p", "loom-plugin-a2ui", "--example", "interop"],
        &[
            &python,
            "crates/loom-plugin-a2ui/interop/renderer.py",
            "target/interop",
        ],
    )?;
    // The example's whole story with the reference renderer as a second client over the same
    // WebSocket: it must accept every message, and its final data model must equal Loom's
    // masked fold.
    cargo_run(
        root,
        &["-p", "a2ui-callfunction"],
        &[
            "--dir",
            "target/interop/a2ui-callfunction",
            "--wire-log",
            "target/interop/a2ui-callfunction/wire.jsonl",
            "--reference-renderer",
            &python,
            "examples/a2ui-callfunction/interop/renderer_client.py",
        ],
    )
}

/// `cargo run --quiet <target> -- <args>`.
fn cargo_run(root: &Path, target: &[&str], args: &[&str]) -> Result<()> {
    let mut all = vec!["run", "--quiet"];
    all.extend(target);
    all.push("--");
    all.extend(args);
    cargo(root, &all)
}

fn run_program(root: &Path, program: &str, args: &[&str]) -> Result<()> {
    eprintln!("$ {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .current_dir(root)
        .status()
        .with_context(|| format!("cannot run {program}"))?;
    anyhow::ensure!(status.success(), "{program} failed with {status}");
    Ok(())
}

/// The test command: every test of the workspace, the PostgreSQL and browser tests included
/// whenever this machine can run them. The PostgreSQL tests use the server that
/// `LOOM_TEST_POSTGRES_URL` names or `cargo xtask pg-up` started; with neither, a throwaway
/// cluster is started for the run and stopped after it, when PostgreSQL's server programs are
/// installed. The test binaries run several at a time (`test_run`). A test that cannot run
/// writes a line to a file this command names (`LOOM_SKIPPED_TESTS_FILE`), and the run ends
/// with a summary of them, since a passing test's stderr is hidden; under `CI` a skipped test
/// fails the run. The reference renderer's checks run as `cargo xtask interop`.
fn test(root: &Path, mut options: test_run::TestOptions) -> Result<()> {
    let skipped_file = root.join("target/xtask-test-skipped");
    std::fs::create_dir_all(root.join("target"))?;
    match std::fs::remove_file(&skipped_file) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            return Err(error).with_context(|| format!("removing {}", skipped_file.display()));
        }
        _ => {}
    }
    options.env.push((
        loom_store_postgres::SKIPPED_TESTS_VAR.into(),
        skipped_file.clone().into(),
    ));
    // The server starts, and the metrics parser installs, while the tests build; the first
    // test waits for both.
    let mut postgres = Some(std::thread::spawn({
        let root = root.to_path_buf();
        move || postgres_for_tests(&root)
    }));
    let mut metrics_parser = Some(std::thread::spawn({
        let root = root.to_path_buf();
        move || metrics_parser_for_tests(&root)
    }));
    let mut started_postgres = false;
    let mut wait_for_postgres = || {
        if let Some(starting) = postgres.take() {
            started_postgres = starting.join().unwrap_or(false);
        }
        if let Some(installing) = metrics_parser.take() {
            let _ = installing.join();
        }
    };
    let outcome = test_run::run_all(root, &options, &mut wait_for_postgres);
    wait_for_postgres();
    if started_postgres && let Err(error) = pg::down(root) {
        eprintln!("xtask: stopping the PostgreSQL cluster started for the tests: {error:#}");
    }
    match outcome? {
        test_run::Outcome::Passed => {}
        test_run::Outcome::Failed => std::process::exit(101),
        test_run::Outcome::BuildFailed(code) => std::process::exit(code),
    }
    let skipped = SkippedTests::read(&skipped_file)?;
    if skipped.is_empty() {
        if started_postgres {
            eprintln!("xtask: every test ran (PostgreSQL on a cluster started for this run)");
        } else {
            eprintln!("xtask: every test ran");
        }
        return Ok(());
    }
    eprintln!("\nxtask: {}", skipped.summary());
    if std::env::var_os("CI").is_some_and(|value| !value.is_empty()) {
        anyhow::bail!("tests did not run under CI; install what they need");
    }
    Ok(())
}

/// Makes sure the PostgreSQL tests have a server; returns whether one was started for this run
/// (to be stopped after it). Without a server and without PostgreSQL's programs it starts
/// nothing: the tests then skip, and the run's summary says so.
fn postgres_for_tests(root: &Path) -> bool {
    let configured =
        std::env::var(loom_store_postgres::URL_VAR).is_ok_and(|url| !url.trim().is_empty());
    if configured || pg::running(root).is_some() {
        return false;
    }
    if !pg::installed() {
        return false;
    }
    eprintln!("xtask: no PostgreSQL server configured; starting one for this run");
    match pg::up(root) {
        Ok(()) => true,
        Err(error) => {
            eprintln!("xtask: could not start PostgreSQL for the tests: {error:#}");
            false
        }
    }
}

/// The Python client of Prometheus whose parser reads the admin API's metrics back
/// (`loom-console`'s `tests/support/prometheus.rs`), pinned.
const PROMETHEUS_CLIENT: &str = "prometheus-client==0.26.0";

/// Makes sure `target/metrics-venv` holds [`PROMETHEUS_CLIENT`] (a venv, then pip from PyPI,
/// as `interop` makes its own). Offline or without Python it says why and installs nothing:
/// the test that needs it then skips, and the run's summary says so.
fn metrics_parser_for_tests(root: &Path) {
    let venv = root.join("target/metrics-venv");
    let python = venv.join("bin/python");
    let installed = |python: &Path| {
        Command::new(python)
            .args(["-c", "import prometheus_client.parser"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    if installed(&python) {
        return;
    }
    let made = Command::new("python3")
        .args(["-m", "venv", &venv.to_string_lossy()])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    let pip = made
        && Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                PROMETHEUS_CLIENT,
            ])
            .status()
            .is_ok_and(|status| status.success());
    if !pip || !installed(&python) {
        eprintln!(
            "xtask: could not install {PROMETHEUS_CLIENT} in {} (python3 with venv and pip, and PyPI, are needed); the metrics parser test will skip",
            venv.display()
        );
    }
}

/// The tests that did not run, from the lines they wrote (`<what it lacked>\t<test>`).
#[derive(Debug, Default)]
struct SkippedTests {
    postgresql: std::collections::BTreeSet<String>,
    chromium: std::collections::BTreeSet<String>,
    prometheus: std::collections::BTreeSet<String>,
    other: std::collections::BTreeSet<String>,
}

impl SkippedTests {
    fn read(path: &Path) -> Result<Self> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(error) => {
                return Err(error).with_context(|| format!("reading {}", path.display()));
            }
        };
        let mut skipped = Self::default();
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            let (lacking, test) = line.split_once('\t').unwrap_or(("", line));
            let set = match lacking {
                "postgresql" => &mut skipped.postgresql,
                "chromium" => &mut skipped.chromium,
                "prometheus_client" => &mut skipped.prometheus,
                _ => &mut skipped.other,
            };
            set.insert(test.to_owned());
        }
        Ok(skipped)
    }

    fn is_empty(&self) -> bool {
        self.postgresql.is_empty()
            && self.chromium.is_empty()
            && self.prometheus.is_empty()
            && self.other.is_empty()
    }

    /// One paragraph: how many did not run, and what to install or set.
    fn summary(&self) -> String {
        let count =
            |n: usize, what: &str| format!("{n} {what} test{}", if n == 1 { "" } else { "s" });
        let mut parts = Vec::new();
        let mut fixes = Vec::new();
        if !self.postgresql.is_empty() {
            parts.push(count(self.postgresql.len(), "PostgreSQL"));
            fixes.push(format!(
                "install PostgreSQL's server (`apt-get install postgresql`: this command then \
                 starts a throwaway cluster itself) or set {} to a server's URL",
                loom_store_postgres::URL_VAR
            ));
        }
        if !self.chromium.is_empty() {
            parts.push(count(self.chromium.len(), "browser"));
            fixes.push("install Chromium (`apt-get install chromium`)".to_owned());
        }
        if !self.prometheus.is_empty() {
            parts.push(count(self.prometheus.len(), "metrics parser"));
            fixes.push(format!(
                "let this command install {PROMETHEUS_CLIENT} in target/metrics-venv (python3 with venv and pip, and PyPI reachable)"
            ));
        }
        if !self.other.is_empty() {
            parts.push(count(self.other.len(), "other"));
        }
        let mut names: Vec<&str> = self
            .postgresql
            .iter()
            .chain(&self.chromium)
            .chain(&self.prometheus)
            .chain(&self.other)
            .map(String::as_str)
            .collect();
        let more = names.len().saturating_sub(5);
        names.truncate(5);
        let mut text = format!(
            "{} did not run: {}.\n  not run: {}",
            parts.join(" and "),
            fixes.join("; "),
            names.join(", ")
        );
        if more > 0 {
            text.push_str(&format!(" and {more} more"));
        }
        text
    }
}

/// `--postgres <URL>` (and `--schema <NAME>`, default `loom`) taken out of replay-check's
/// arguments: the check then reads that PostgreSQL store instead of a file.
struct PostgresSource {
    url: String,
    schema: String,
    rest: Vec<OsString>,
}

impl PostgresSource {
    fn take(args: &[OsString]) -> Option<Self> {
        let mut url = None;
        let mut schema = "loom".to_owned();
        let mut rest = Vec::new();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            match arg.to_str() {
                Some("--postgres") => url = args.next().map(|v| v.to_string_lossy().into_owned()),
                Some("--schema") => {
                    if let Some(value) = args.next() {
                        schema = value.to_string_lossy().into_owned();
                    }
                }
                _ => rest.push(arg.clone()),
            }
        }
        Some(Self {
            url: url?,
            schema,
            rest,
        })
    }
}

/// The workspace root: the parent of this crate's directory.
fn workspace_root() -> Result<PathBuf> {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .with_context(|| format!("{} has no parent directory", manifest_dir.display()))
}

/// Runs `cargo <args>` in `root`; if it fails, exits with its exit code.
fn cargo(root: &Path, args: &[&str]) -> Result<()> {
    let status = cargo_command(root, args)
        .status()
        .context("running cargo")?;
    if !status.success() {
        // Exit with cargo's own code, so that a caller (CI) sees the same failure.
        eprintln!("xtask: `cargo {}` failed: {status}", args.join(" "));
        std::process::exit(status.code().unwrap_or(1));
    }
    Ok(())
}

/// The cargo of this run: cargo sets CARGO to its own path for the programs it runs, so nested
/// commands use the same toolchain.
fn cargo_program() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"))
}

/// `cargo <args>` in `root`, printed first, with the toolchain and colour choice of this run.
fn cargo_command(root: &Path, args: &[&str]) -> Command {
    eprintln!("$ cargo {}", args.join(" "));
    let mut command = Command::new(cargo_program());
    command.args(args).current_dir(root);
    // Decide colour once, from the terminal we were started on, so that every nested cargo and
    // test binary agrees (colour in a terminal, none in CI logs); the caller's choice wins.
    if std::env::var_os("CARGO_TERM_COLOR").is_none() {
        let color = if std::io::stderr().is_terminal() {
            "always"
        } else {
            "never"
        };
        command.env("CARGO_TERM_COLOR", color);
    }
    command
}

#[cfg(test)]
mod tests {
    use super::SkippedTests;

    #[test]
    fn skipped_tests_are_counted_by_what_they_lacked_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("skipped");
        std::fs::write(
            &path,
            "postgresql\ta\npostgresql\tb\nchromium\tc\npostgresql\ta\n\n",
        )
        .unwrap();
        let skipped = SkippedTests::read(&path).unwrap();
        let summary = skipped.summary();
        assert!(
            summary.starts_with("2 PostgreSQL tests and 1 browser test did not run"),
            "{summary}"
        );
        assert!(summary.contains("apt-get install chromium"), "{summary}");
        assert!(summary.contains("not run: a, b, c"), "{summary}");
    }

    #[test]
    fn a_line_without_its_reason_is_counted_not_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("skipped");
        std::fs::write(&path, "some_test\n").unwrap();
        let skipped = SkippedTests::read(&path).unwrap();
        assert!(!skipped.is_empty());
        assert!(
            skipped.summary().starts_with("1 other test did not run"),
            "{}",
            skipped.summary()
        );
    }

    #[test]
    fn no_file_means_nothing_was_skipped() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            SkippedTests::read(&dir.path().join("none"))
                .unwrap()
                .is_empty()
        );
    }
}
