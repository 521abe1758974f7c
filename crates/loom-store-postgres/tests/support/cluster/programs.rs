//! PostgreSQL's programs and what running them needs: finding them, running them as the
//! `postgres` user when we are root, free ports, temporary folders, and the processes of a
//! server (`/proc`, signals).

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const NOT_INSTALLED: &str = "PostgreSQL's server programs were not found in \
    /usr/lib/postgresql/*/bin nor by `pg_config --bindir`: install them (`apt-get install -y \
    postgresql`).";

/// The folder of PostgreSQL's server programs (`initdb`, `pg_ctl`, `pg_basebackup`, `psql`):
/// the newest `/usr/lib/postgresql/<version>/bin` (Debian's layout, where they are not on the
/// PATH), else what `pg_config --bindir` says.
pub fn bin_dir() -> Result<PathBuf, String> {
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
    match Command::new("pg_config").arg("--bindir").output() {
        Ok(output) if output.status.success() => Ok(PathBuf::from(
            String::from_utf8_lossy(&output.stdout).trim(),
        )),
        _ => Err(NOT_INSTALLED.to_owned()),
    }
}

/// Whether PostgreSQL's server programs are installed here.
pub fn installed() -> bool {
    bin_dir().is_ok()
}

/// Whether this process runs as root, whom `initdb` and `pg_ctl` refuse.
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata("/proc/self") {
        Ok(metadata) => metadata.uid() == 0,
        Err(_) => Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0"),
    }
}

/// A PostgreSQL program's command, as the `postgres` user when we are root (`initdb` and
/// `pg_ctl` refuse root).
pub fn pg_command(program: &Path) -> Command {
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// A port of 127.0.0.1 nothing listens on now.
pub fn free_port() -> Result<u16, String> {
    Ok(free_ports::<1>()?[0])
}

/// `N` distinct ports of 127.0.0.1 nothing listens on now: all bound at once, so that the
/// system cannot hand out the same one twice.
pub fn free_ports<const N: usize>() -> Result<[u16; N], String> {
    let mut listeners = Vec::with_capacity(N);
    let mut ports = [0; N];
    for port in &mut ports {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|error| format!("Could not find a free port on 127.0.0.1: {error}."))?;
        *port = listener
            .local_addr()
            .map_err(|error| format!("Could not read a bound port's address: {error}."))?
            .port();
        listeners.push(listener);
    }
    Ok(ports)
}

/// A new empty folder `<prefix>-<pid>-<nanos>-<attempt>` under the system's temporary folder.
pub fn temp_dir(prefix: &str) -> Result<PathBuf, String> {
    let base = std::env::temp_dir();
    let mut last_error = None;
    for attempt in 0..100u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!("{prefix}-{}-{nanos}-{attempt}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(error) => last_error = Some(error),
        }
    }
    Err(format!(
        "Could not create a temporary folder in {}: {}.",
        base.display(),
        last_error.map_or_else(String::new, |error| error.to_string())
    ))
}

/// Gives `path` to the `postgres` user when we are root, since the server programs run as that
/// user and must write there.
pub fn give_to_postgres(path: &Path) -> Result<(), String> {
    if !is_root() {
        return Ok(());
    }
    let mut chown = Command::new("chown");
    chown.arg("postgres:postgres").arg(path);
    run(&mut chown).map(drop)
}

/// The command line as a person would type it, for error messages.
pub(super) fn shown(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `command` to its end and returns its stdout; if it cannot start or fails, a sentence
/// naming it with its stderr.
pub(super) fn run(command: &mut Command) -> Result<String, String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("Could not run `{}`: {error}.", shown(command)))?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let mut stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    if stderr.is_empty() {
        stderr = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    }
    Err(format!(
        "`{}` failed ({}){}",
        shown(command),
        output.status,
        if stderr.is_empty() {
            ".".to_owned()
        } else {
            format!(": {}", tail(&stderr, 20))
        }
    ))
}

/// The last `lines` lines of `text`.
pub(super) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Whether 127.0.0.1:`port` refuses connections: nothing listens there.
pub(super) fn refuses(port: u16) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    matches!(
        TcpStream::connect_timeout(&address, Duration::from_millis(500)),
        Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

/// Each live process's parent, from `/proc/<pid>/stat`.
fn parents() -> Vec<(u32, u32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // The command name, in parentheses, may itself hold spaces and parentheses: the
            // fields that follow start after its last `)`: state, then the parent's pid.
            let after = &stat[stat.rfind(')')? + 1..];
            let ppid = after.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect()
}

/// Every descendant of `pid` (children, their children...).
fn descendants(pid: u32) -> Vec<u32> {
    let parents = parents();
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for &(child, ppid) in &parents {
            if ppid == parent && !found.contains(&child) {
                found.push(child);
                frontier.push(child);
            }
        }
    }
    found
}

/// Whether `pid` is a process that still runs (a zombie, dead but not yet reaped by its
/// parent, does not).
pub(super) fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|end| stat[end + 1..].split_whitespace().next());
    !matches!(state, Some("Z" | "X"))
}

/// Sends `signal` (`KILL`, `STOP`, `CONT`) to `pids` with one `kill`. A process that has just
/// ended makes `kill` fail: the caller checks what it needs afterwards, so that is not an error.
fn signal(signal: &str, pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .args(pids.iter().map(u32::to_string))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Sends `signal` to a postmaster and every process below it. The postmaster is stopped
/// first, so that it forks no new child while the others are listed and signalled.
pub(super) fn signal_tree(postmaster: u32, name: &str) -> Vec<u32> {
    signal("STOP", &[postmaster]);
    let mut pids = descendants(postmaster);
    pids.push(postmaster);
    signal(name, &pids);
    pids
}

/// Appends `text` to the file at `path`, which keeps its owner (the server's user).
pub(super) fn append(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|error| format!("Could not append to {}: {error}.", path.display()))
}
