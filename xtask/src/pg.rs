//! `cargo xtask pg-up` / `pg-down`: a throwaway PostgreSQL cluster for the tests.
//!
//! `pg-up` initialises a cluster in a fresh temporary folder (as the `postgres` user when run
//! as root: `initdb` refuses root), starts it on a free port of 127.0.0.1 with its socket in
//! that folder, and writes its URL to `target/loom-pg/url`, where the PostgreSQL store's tests
//! look (`LOOM_TEST_POSTGRES_URL` overrides it). `pg-down` stops it and removes the folder.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Where the running cluster's URL and data folder are written.
fn state_dir(root: &Path) -> PathBuf {
    root.join("target/loom-pg")
}

/// The folder of PostgreSQL's server programs (`initdb`, `pg_ctl`).
fn bin_dir() -> Result<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    let output = Command::new("pg_config").arg("--bindir").output();
    match output {
        Ok(output) if output.status.success() => Ok(PathBuf::from(
            String::from_utf8_lossy(&output.stdout).trim(),
        )),
        _ => bail!(
            "PostgreSQL's server programs were not found: install them (`apt-get install -y \
             postgresql`)"
        ),
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// A PostgreSQL program's command, as the `postgres` user when we are root (`initdb` and
/// `pg_ctl` refuse root).
fn pg_command(program: &Path) -> Command {
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// Runs a PostgreSQL program, as the `postgres` user when we are root.
fn run_pg(program: &Path, args: &[&str]) -> Result<()> {
    let mut command = pg_command(program);
    command.args(args);
    eprintln!("$ {} {}", program.display(), args.join(" "));
    let status = command
        .status()
        .with_context(|| format!("running {}", program.display()))?;
    if !status.success() {
        bail!("{} failed: {status}", program.display());
    }
    Ok(())
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Whether PostgreSQL's server programs are installed here.
pub fn installed() -> bool {
    bin_dir().is_ok()
}

/// The URL of the cluster an earlier `pg-up` started, if it still runs.
pub fn running(root: &Path) -> Option<String> {
    let state = state_dir(root);
    let url = std::fs::read_to_string(state.join("url")).ok()?;
    let data = std::fs::read_to_string(state.join("datadir")).ok()?;
    let bin = bin_dir().ok()?;
    if !Path::new(data.trim()).exists() {
        return None;
    }
    let up = pg_command(&bin.join("pg_ctl"))
        .args(["-D", data.trim(), "status"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    up.then(|| url.trim().to_owned())
}

/// Starts a throwaway cluster unless one from an earlier `pg-up` still runs.
pub fn up(root: &Path) -> Result<()> {
    let state = state_dir(root);
    let bin = bin_dir()?;
    if let Some(url) = running(root) {
        eprintln!("PostgreSQL already up: {url}");
        return Ok(());
    }
    std::fs::create_dir_all(&state)?;
    let data = tempfile_dir()?;
    let data_str = data
        .to_str()
        .context("temporary folder path is not UTF-8")?;
    if is_root() {
        let status = Command::new("chown")
            .args(["postgres:postgres", data_str])
            .status()?;
        if !status.success() {
            bail!("cannot give {data_str} to the postgres user");
        }
    }
    run_pg(
        &bin.join("initdb"),
        &[
            "-D",
            data_str,
            "-U",
            "loom",
            "--auth=trust",
            "--no-instructions",
            "-E",
            "UTF8",
        ],
    )?;
    let port = free_port()?;
    let options = format!(
        "-p {port} -k {data_str} -c listen_addresses=127.0.0.1 -c max_connections=400 \
         -c shared_buffers=128MB"
    );
    let log = data.join("pg.log");
    run_pg(
        &bin.join("pg_ctl"),
        &[
            "-D",
            data_str,
            "-o",
            &options,
            "-l",
            log.to_str().context("log path is not UTF-8")?,
            "-w",
            "start",
        ],
    )?;
    let url = format!("postgres://loom@127.0.0.1:{port}/postgres");
    std::fs::write(state.join("datadir"), data_str)?;
    std::fs::write(state.join("url"), &url)?;
    eprintln!("PostgreSQL up: {url}");
    println!("{url}");
    Ok(())
}

/// Stops the cluster `pg-up` started and removes its folder.
pub fn down(root: &Path) -> Result<()> {
    let state = state_dir(root);
    let Ok(data) = std::fs::read_to_string(state.join("datadir")) else {
        eprintln!("no PostgreSQL cluster from pg-up to stop");
        return Ok(());
    };
    let data = data.trim();
    if Path::new(data).exists() {
        let bin = bin_dir()?;
        if let Err(err) = run_pg(
            &bin.join("pg_ctl"),
            &["-D", data, "-m", "fast", "-w", "stop"],
        ) {
            eprintln!(
                "stopping PostgreSQL: {}",
                loom_replay_check::error_sentence(&*err)
            );
        }
        std::fs::remove_dir_all(data).with_context(|| format!("removing {data}"))?;
    }
    let _ = std::fs::remove_file(state.join("url"));
    let _ = std::fs::remove_file(state.join("datadir"));
    eprintln!("PostgreSQL down");
    Ok(())
}

/// A new empty folder under the system's temporary folder.
fn tempfile_dir() -> Result<PathBuf> {
    let base = std::env::temp_dir();
    for attempt in 0..100u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!("loom-pg-{}-{nanos}-{attempt}", std::process::id()));
        if std::fs::create_dir(&dir).is_ok() {
            return Ok(dir);
        }
    }
    bail!("cannot create a temporary folder in {}", base.display())
}
