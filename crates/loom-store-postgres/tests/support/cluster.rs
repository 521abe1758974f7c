//! Throwaway PostgreSQL servers on 127.0.0.1: the programs that make them, and a replicated
//! pair (a primary and a streaming standby) that can lose its primary like a dead machine does.
//!
//! Standard library only, since it is compiled twice: into the store's tests (`support::cluster`)
//! and into xtask, whose `pg-up` cluster uses the same helpers
//! (`#[path = "../../crates/loom-store-postgres/tests/support/cluster.rs"]`). Errors are
//! sentences naming the command that failed, with its stderr or the server's log tail, because
//! a test that cannot set up its servers has nothing else to show.
//!
//! Each server of a pair lives in a folder of its own under the pair's temporary folder: its
//! data directory `data/`, its log `pg.log` and its Unix socket. The log and the socket stay
//! outside `data/` because `pg_basebackup` copies every file of the data directory: a standby
//! would start with its primary's log and socket lock file.
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long any wait of this module lasts before it fails: far above what a healthy server
/// needs (a second or two), short enough that a broken one fails the test rather than hangs it.
const WAIT: Duration = Duration::from_secs(60);

/// The role every server is made with (`initdb -U`): superuser, replication allowed.
pub const USER: &str = "loom";

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
fn shown(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `command` to its end and returns its stdout; if it cannot start or fails, a sentence
/// naming it with its stderr.
fn run(command: &mut Command) -> Result<String, String> {
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
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Whether 127.0.0.1:`port` refuses connections: nothing listens there.
fn refuses(port: u16) -> bool {
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
fn alive(pid: u32) -> bool {
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
fn signal_tree(postmaster: u32, name: &str) -> Vec<u32> {
    signal("STOP", &[postmaster]);
    let mut pids = descendants(postmaster);
    pids.push(postmaster);
    signal(name, &pids);
    pids
}

/// One server of a pair: its port and its folder (`data/`, `pg.log`, the socket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub port: u16,
    pub dir: PathBuf,
}

impl Node {
    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn log(&self) -> PathBuf {
        self.dir.join("pg.log")
    }

    /// The last lines of the server's log, for error messages.
    pub fn log_tail(&self) -> String {
        match std::fs::read_to_string(self.log()) {
            Ok(text) => format!(
                "the end of its log ({}):\n{}",
                self.log().display(),
                tail(&text, 25)
            ),
            Err(error) => format!("its log {} cannot be read: {error}", self.log().display()),
        }
    }

    /// The postmaster's pid, the first line of `postmaster.pid`, if that process runs and is
    /// this server's: a server that died leaves the file behind, and its pid may have been
    /// given to another process since, which must get no signal.
    fn postmaster(&self) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(self.data().join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()?;
        let command_line = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let data = self.data();
        let ours = command_line
            .split(|&byte| byte == 0)
            .any(|arg| Path::new(&*String::from_utf8_lossy(arg)) == data);
        (ours && alive(pid)).then_some(pid)
    }

    /// The id of the System V shared memory segment the postmaster made (the second number of
    /// `postmaster.pid`'s seventh line): a killed server leaves it behind, a stopped one does
    /// not.
    fn shared_memory_id(&self) -> Option<String> {
        let pid_file = std::fs::read_to_string(self.data().join("postmaster.pid")).ok()?;
        let line = pid_file.lines().nth(6)?;
        let id = line.split_whitespace().nth(1)?;
        id.parse::<u64>().ok().map(|_| id.to_owned())
    }

    fn url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/postgres", self.port)
    }
}

/// How long each part of [`Pair::failover`] took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailoverTimes {
    /// Until every process of the primary was dead and its port refused connections.
    pub kill: Duration,
    /// Until the standby accepted writes.
    pub promote: Duration,
    /// Until a new standby streamed from the new primary (synchronously, for a synchronous
    /// pair): the pair is whole again.
    pub rebuild: Duration,
}

impl FailoverTimes {
    pub fn total(&self) -> Duration {
        self.kill + self.promote + self.rebuild
    }
}

/// What identifies a pair's servers: enough to find them again from another process
/// (`cargo xtask pg-failover` after `pg-up --replica`), written as a few `key value` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairState {
    /// Whether a commit waits for the standby (`synchronous_standby_names = '*'`).
    pub synchronous: bool,
    /// The pair's two ports, for its whole life: a rebuilt standby takes the port of the
    /// primary it replaces, so that [`PairState::url`] names both servers after any failover.
    pub ports: [u16; 2],
    /// The pair's temporary folder, which holds every server's folder.
    pub base: PathBuf,
    /// The server that is the primary, or was until [`Pair::kill_primary`].
    pub primary: Node,
    /// Whether the primary was killed (and the standby not promoted yet).
    pub primary_killed: bool,
    pub standby: Option<Node>,
    /// Killed primaries' folders, removed when a standby is rebuilt.
    pub retired: Vec<Node>,
    /// The number the next server's folder takes (`node-<n>`), so that no folder is reused.
    pub next_node: u32,
}

/// The name of the file [`Pair::save`] writes in its folder.
pub const STATE_FILE: &str = "state";
/// The file [`Pair::save`] writes the pair's multi-host URL to.
pub const URL_FILE: &str = "url";

impl PairState {
    /// Both servers, the primary found by the client: `target_session_attrs=read-write` makes
    /// it skip the standby (and a dead server), whichever of the two ports the primary is on.
    pub fn url(&self) -> String {
        let [first, second] = self.ports;
        format!(
            "postgres://{USER}@127.0.0.1:{first},127.0.0.1:{second}/postgres?\
             target_session_attrs=read-write"
        )
    }

    pub fn to_text(&self) -> String {
        let node = |node: &Node| format!("{} {}", node.port, node.dir.display());
        let mut text = format!(
            "synchronous {}\nports {} {}\nbase {}\nnext_node {}\nprimary {}\nprimary_killed {}\n",
            self.synchronous,
            self.ports[0],
            self.ports[1],
            self.base.display(),
            self.next_node,
            node(&self.primary),
            self.primary_killed,
        );
        if let Some(standby) = &self.standby {
            text.push_str(&format!("standby {}\n", node(standby)));
        }
        for retired in &self.retired {
            text.push_str(&format!("retired {}\n", node(retired)));
        }
        text
    }

    pub fn from_text(text: &str) -> Result<PairState, String> {
        fn node(value: &str) -> Option<Node> {
            let (port, dir) = value.split_once(' ')?;
            Some(Node {
                port: port.parse().ok()?,
                dir: PathBuf::from(dir),
            })
        }
        fn flag(value: &str) -> Option<bool> {
            value.parse().ok()
        }
        let (mut synchronous, mut ports, mut base, mut next_node) = (None, None, None, None);
        let (mut primary, mut primary_killed, mut standby, mut retired) =
            (None, None, None, Vec::new());
        for (number, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let (key, value) = line.split_once(' ').unwrap_or((line, ""));
            let parsed = match key {
                "synchronous" => flag(value).map(|v| synchronous = Some(v)),
                "ports" => value.split_once(' ').and_then(|(a, b)| {
                    ports = Some([a.parse().ok()?, b.parse().ok()?]);
                    Some(())
                }),
                "base" => {
                    base = Some(PathBuf::from(value));
                    Some(())
                }
                "next_node" => value.parse().ok().map(|v| next_node = Some(v)),
                "primary" => node(value).map(|v| primary = Some(v)),
                "primary_killed" => flag(value).map(|v| primary_killed = Some(v)),
                "standby" => node(value).map(|v| standby = Some(v)),
                "retired" => node(value).map(|v| retired.push(v)),
                _ => None,
            };
            if parsed.is_none() {
                return Err(format!(
                    "Line {} of a replicated pair's state is not understood: {line:?}.",
                    number + 1
                ));
            }
        }
        let missing = |what: &str| format!("A replicated pair's state has no `{what}` line.");
        Ok(PairState {
            synchronous: synchronous.ok_or_else(|| missing("synchronous"))?,
            ports: ports.ok_or_else(|| missing("ports"))?,
            base: base.ok_or_else(|| missing("base"))?,
            primary: primary.ok_or_else(|| missing("primary"))?,
            primary_killed: primary_killed.ok_or_else(|| missing("primary_killed"))?,
            standby,
            retired,
            next_node: next_node.ok_or_else(|| missing("next_node"))?,
        })
    }
}

/// A primary and a standby streaming from it, on two ports of 127.0.0.1 that stay the pair's
/// for its whole life. Dropping it stops both servers and removes their folders, unless it was
/// [`detach`](Pair::detach)ed.
#[derive(Debug)]
pub struct Pair {
    bin: PathBuf,
    state: PairState,
    /// Whether dropping leaves the servers running (a pair another command will load).
    keep: bool,
    stopped: bool,
}

impl Pair {
    /// Initialises a primary in a fresh temporary folder, makes a standby of it with
    /// `pg_basebackup`, and returns once the standby streams (and is the synchronous standby,
    /// when `synchronous`).
    pub fn start(synchronous: bool) -> Result<Pair, String> {
        let bin = bin_dir()?;
        let base = temp_dir("loom-pg-pair")?;
        if let Err(error) = give_to_postgres(&base) {
            let _ = std::fs::remove_dir_all(&base);
            return Err(error);
        }
        let ports = match free_ports::<2>() {
            Ok(ports) => ports,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&base);
                return Err(error);
            }
        };
        // From here on, a failure drops the pair, which stops what started and removes `base`.
        let mut pair = Pair {
            bin,
            state: PairState {
                synchronous,
                ports,
                primary: Node {
                    port: ports[0],
                    dir: base.join("node-0"),
                },
                base,
                primary_killed: false,
                standby: None,
                retired: Vec::new(),
                next_node: 1,
            },
            keep: false,
            stopped: false,
        };
        pair.init_primary()?;
        let primary = pair.state.primary.clone();
        pair.start_node(&primary)?;
        pair.add_standby(ports[1])?;
        Ok(pair)
    }

    /// The pair whose state [`save`](Pair::save) wrote in `state_dir`. Dropping it stops the
    /// servers, as for a pair this process started, unless it is detached again.
    pub fn load(state_dir: &Path) -> Result<Pair, String> {
        let path = state_dir.join(STATE_FILE);
        let text = std::fs::read_to_string(&path).map_err(|error| {
            format!(
                "Could not read the replicated pair's state {}: {error}.",
                path.display()
            )
        })?;
        let state = PairState::from_text(&text)
            .map_err(|error| format!("{} is damaged: {error}", path.display()))?;
        Ok(Pair {
            bin: bin_dir()?,
            state,
            keep: false,
            stopped: false,
        })
    }

    /// Writes the pair's state ([`STATE_FILE`]) and URL ([`URL_FILE`]) in `state_dir`, for
    /// [`load`](Pair::load).
    pub fn save(&self, state_dir: &Path) -> Result<(), String> {
        std::fs::create_dir_all(state_dir)
            .map_err(|error| format!("Could not create {}: {error}.", state_dir.display()))?;
        for (name, text) in [
            (STATE_FILE, self.state.to_text()),
            (URL_FILE, format!("{}\n", self.url())),
        ] {
            let path = state_dir.join(name);
            std::fs::write(&path, text)
                .map_err(|error| format!("Could not write {}: {error}.", path.display()))?;
        }
        Ok(())
    }

    /// Lets the servers outlive this value, for a later [`load`](Pair::load).
    pub fn detach(mut self) {
        self.keep = true;
    }

    pub fn state(&self) -> &PairState {
        &self.state
    }

    pub fn synchronous(&self) -> bool {
        self.state.synchronous
    }

    /// See [`PairState::url`]: valid for the pair's whole life, across failovers.
    pub fn url(&self) -> String {
        self.state.url()
    }

    /// The primary alone (or the killed primary, until [`promote`](Pair::promote)).
    pub fn primary_url(&self) -> String {
        self.state.primary.url()
    }

    pub fn primary_port(&self) -> u16 {
        self.state.primary.port
    }

    /// The standby alone, if there is one (none between a promotion and the rebuild).
    pub fn standby_url(&self) -> Option<String> {
        self.state.standby.as_ref().map(Node::url)
    }

    pub fn standby_port(&self) -> Option<u16> {
        self.state.standby.as_ref().map(|node| node.port)
    }

    /// The server's log, to show when a test fails.
    pub fn primary_log(&self) -> PathBuf {
        self.state.primary.log()
    }

    pub fn standby_log(&self) -> Option<PathBuf> {
        self.state.standby.as_ref().map(Node::log)
    }

    /// Whether the primary runs (it was neither killed nor stopped, and answers).
    pub fn is_running(&self) -> bool {
        !self.state.primary_killed
            && pg_command(&self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(self.state.primary.data())
                .arg("status")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success())
    }

    /// Runs `psql -Atc <sql>` on the server at `port` and returns its output, trimmed.
    pub fn psql(&self, port: u16, sql: &str) -> Result<String, String> {
        let mut psql = Command::new(self.bin.join("psql"));
        psql.args(["-X", "-h", "127.0.0.1", "-p", &port.to_string(), "-U", USER])
            .args(["-d", "postgres", "-v", "ON_ERROR_STOP=1", "-Atc", sql])
            .env("PGCONNECT_TIMEOUT", "5");
        run(&mut psql).map(|out| out.trim().to_owned())
    }

    /// SIGKILLs the primary's postmaster and every process below it at once, then waits until
    /// they are gone and its port refuses connections. A machine that dies takes all of its
    /// backends with it; a postmaster killed alone leaves them serving their connections for a
    /// while.
    pub fn kill_primary(&mut self) -> Result<(), String> {
        if self.state.primary_killed {
            return Ok(());
        }
        let primary = self.state.primary.clone();
        let Some(postmaster) = primary.postmaster() else {
            return Err(format!(
                "The primary on port {} cannot be killed: the postmaster.pid of {} names no \
                 running server of that folder.",
                primary.port,
                primary.data().display()
            ));
        };
        let shared_memory = primary.shared_memory_id();
        let pids = signal_tree(postmaster, "KILL");
        self.state.primary_killed = true;
        let deadline = Instant::now() + WAIT;
        while pids.iter().any(|&pid| alive(pid)) || !refuses(primary.port) {
            if Instant::now() > deadline {
                let left: Vec<String> = pids
                    .iter()
                    .filter(|&&pid| alive(pid))
                    .map(u32::to_string)
                    .collect();
                return Err(format!(
                    "The primary on port {} was sent SIGKILL but after {} s {}.",
                    primary.port,
                    WAIT.as_secs(),
                    if left.is_empty() {
                        "its port still accepts connections".to_owned()
                    } else {
                        format!("processes {} still run", left.join(", "))
                    }
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // Nothing of the server detaches its System V segment any more: remove it, or every
        // killed primary would leave one behind.
        if let Some(id) = shared_memory {
            let _ = Command::new("ipcrm")
                .args(["-m", &id])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        Ok(())
    }

    /// Promotes the standby (`pg_ctl promote`) and waits until it accepts writes: it becomes
    /// the primary, with no standby until [`rebuild_standby`](Pair::rebuild_standby). Refused
    /// while the primary runs, since two primaries would both take writes.
    pub fn promote(&mut self) -> Result<(), String> {
        if !self.state.primary_killed {
            return Err(format!(
                "The standby cannot be promoted while the primary on port {} runs: kill it \
                 first (two primaries would both take writes).",
                self.state.primary.port
            ));
        }
        let Some(standby) = self.state.standby.clone() else {
            return Err("There is no standby to promote.".to_owned());
        };
        let mut pg_ctl = self.pg_ctl();
        pg_ctl.arg("-D").arg(standby.data()).args([
            "-w",
            "-t",
            &WAIT.as_secs().to_string(),
            "promote",
        ]);
        run(&mut pg_ctl).map_err(|error| {
            format!(
                "Promoting the standby on port {} failed: {error}\nIts server's {}",
                standby.port,
                standby.log_tail()
            )
        })?;
        self.wait_for(&standby, "to accept writes after its promotion", || {
            let in_recovery = self.psql(standby.port, "SELECT pg_is_in_recovery()")?;
            Ok((
                in_recovery == "f",
                format!("pg_is_in_recovery() = {in_recovery}"),
            ))
        })?;
        let old = std::mem::replace(&mut self.state.primary, standby);
        self.state.retired.push(old);
        self.state.standby = None;
        self.state.primary_killed = false;
        Ok(())
    }

    /// Removes the killed primary's folder and makes a new standby of the primary, on the port
    /// the killed primary had, so that the pair's URL names it; returns once it streams (and is
    /// the synchronous standby, for a synchronous pair).
    pub fn rebuild_standby(&mut self) -> Result<(), String> {
        if self.state.primary_killed {
            return Err(format!(
                "No standby can be rebuilt while the primary on port {} is dead: promote the \
                 standby first.",
                self.state.primary.port
            ));
        }
        if let Some(standby) = &self.state.standby {
            return Err(format!(
                "The pair already has a standby, on port {}.",
                standby.port
            ));
        }
        for retired in std::mem::take(&mut self.state.retired) {
            if let Err(error) = std::fs::remove_dir_all(&retired.dir)
                && error.kind() != std::io::ErrorKind::NotFound
            {
                let path = retired.dir.display().to_string();
                self.state.retired.push(retired);
                return Err(format!(
                    "Could not remove the killed primary's folder {path}: {error}."
                ));
            }
        }
        let [first, second] = self.state.ports;
        let port = if self.state.primary.port == first {
            second
        } else {
            first
        };
        self.add_standby(port)
    }

    /// Kills the primary, promotes the standby, and rebuilds a standby: what a dead machine
    /// and its replacement look like to the clients of [`url`](Pair::url).
    pub fn failover(&mut self) -> Result<FailoverTimes, String> {
        // Checked before the kill: without a standby, the kill would leave no server at all.
        if self.state.standby.is_none() {
            return Err(format!(
                "The pair cannot fail over: it has no standby to promote (its primary is on port \
                 {}; rebuild_standby makes one).",
                self.state.primary.port
            ));
        }
        let started = Instant::now();
        self.kill_primary()?;
        let kill = started.elapsed();
        let started = Instant::now();
        self.promote()?;
        let promote = started.elapsed();
        let started = Instant::now();
        self.rebuild_standby()?;
        Ok(FailoverTimes {
            kill,
            promote,
            rebuild: started.elapsed(),
        })
    }

    /// Freezes the standby (SIGSTOP to its postmaster and every process below it): it neither
    /// receives nor confirms WAL, so that a synchronous commit waits.
    pub fn pause_standby(&self) -> Result<(), String> {
        let standby = self.standby_running("paused")?;
        signal_tree(standby, "STOP");
        Ok(())
    }

    /// Lets a [`paused`](Pair::pause_standby) standby run again.
    pub fn resume_standby(&self) -> Result<(), String> {
        let standby = self.standby_running("resumed")?;
        signal_tree(standby, "CONT");
        Ok(())
    }

    /// Stops both servers at once (`pg_ctl -m immediate`, then SIGKILL for anything left) and
    /// removes the pair's folder. Errors are ignored: this runs when a test is over or failed.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let mut running = self.state.standby.iter().collect::<Vec<_>>();
        // A killed primary's postmaster.pid names a process that is gone, whose pid another
        // process may have taken since: it gets no signal.
        if !self.state.primary_killed {
            running.push(&self.state.primary);
        }
        for node in running {
            let Some(postmaster) = node.postmaster() else {
                continue;
            };
            // A paused server cannot stop; an immediate stop needs every process to run.
            signal_tree(postmaster, "CONT");
            let mut pg_ctl = self.pg_ctl();
            pg_ctl
                .arg("-D")
                .arg(node.data())
                .args(["-m", "immediate", "-w", "-t", "30", "stop"]);
            if run(&mut pg_ctl).is_err() && alive(postmaster) {
                signal_tree(postmaster, "KILL");
            }
        }
        let _ = std::fs::remove_dir_all(&self.state.base);
    }

    /// `pg_ctl`, run from the pair's folder: the `postgres` user may not be allowed into the
    /// caller's working directory, which `pg_ctl` reads.
    fn pg_ctl(&self) -> Command {
        self.program("pg_ctl")
    }

    fn program(&self, name: &str) -> Command {
        let mut command = pg_command(&self.bin.join(name));
        command.current_dir(&self.state.base);
        command
    }

    /// The standby's postmaster pid, or why there is none.
    fn standby_running(&self, what: &str) -> Result<u32, String> {
        let Some(standby) = &self.state.standby else {
            return Err(format!("The standby cannot be {what}: the pair has none."));
        };
        standby.postmaster().ok_or_else(|| {
            format!(
                "The standby on port {} cannot be {what}: the postmaster.pid of {} names no \
                 running server of that folder.",
                standby.port,
                standby.data().display()
            )
        })
    }

    /// A new server folder, owned by the user the servers run as.
    fn new_node(&mut self, port: u16) -> Result<Node, String> {
        let dir = self
            .state
            .base
            .join(format!("node-{}", self.state.next_node));
        self.state.next_node += 1;
        std::fs::create_dir(&dir)
            .map_err(|error| format!("Could not create {}: {error}.", dir.display()))?;
        give_to_postgres(&dir)?;
        Ok(Node { port, dir })
    }

    /// `initdb` of the primary, with what replication needs in its configuration; the standbys
    /// get the same configuration from `pg_basebackup`.
    fn init_primary(&mut self) -> Result<(), String> {
        let dir = self.state.primary.dir.clone();
        std::fs::create_dir(&dir)
            .map_err(|error| format!("Could not create {}: {error}.", dir.display()))?;
        give_to_postgres(&dir)?;
        let data = self.state.primary.data();
        let mut initdb = self.program("initdb");
        initdb.arg("-D").arg(&data).args([
            "-U",
            USER,
            "--auth=trust",
            "--no-instructions",
            "-E",
            "UTF8",
            // A killed process loses nothing the system has been given: the sync at the end
            // of initdb only slows every test down.
            "--no-sync",
        ]);
        run(&mut initdb).map_err(|error| {
            format!("Initialising the primary's data directory failed: {error}")
        })?;
        // Every server of the pair has both synchronous settings, so that whichever is the
        // primary after a failover waits for its standby as the first one did.
        let synchronous_standby_names = if self.state.synchronous { "*" } else { "" };
        let settings = format!(
            "\n# A replicated pair of Loom's tests.\n\
             wal_level = replica\n\
             max_wal_senders = 10\n\
             max_replication_slots = 10\n\
             hot_standby = on\n\
             max_connections = 200\n\
             # Small: the tests run beside other servers and builds.\n\
             shared_buffers = 64MB\n\
             fsync = on\n\
             synchronous_commit = on\n\
             synchronous_standby_names = '{synchronous_standby_names}'\n"
        );
        append(&data.join("postgresql.conf"), &settings)?;
        // `initdb --auth=trust` allows replication from 127.0.0.1 already (PostgreSQL 10 and
        // later); older or edited templates may not.
        let hba_path = data.join("pg_hba.conf");
        let hba = std::fs::read_to_string(&hba_path)
            .map_err(|error| format!("Could not read {}: {error}.", hba_path.display()))?;
        let allows_replication = hba.lines().any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            matches!(
                fields.as_slice(),
                [
                    "host",
                    "replication",
                    "all" | USER,
                    "127.0.0.1/32",
                    "trust",
                    ..
                ]
            )
        });
        if !allows_replication {
            append(
                &hba_path,
                &format!("host replication {USER} 127.0.0.1/32 trust\n"),
            )?;
        }
        Ok(())
    }

    /// Starts `node`'s server on its port, its socket in its folder, its log in `pg.log`.
    fn start_node(&self, node: &Node) -> Result<(), String> {
        // `cluster_name` shows in `ps` which server of the pair a process belongs to.
        let options = format!(
            "-p {port} -k {dir} -c listen_addresses=127.0.0.1 -c cluster_name=loom_{port}",
            port = node.port,
            dir = node.dir.display()
        );
        let mut pg_ctl = self.pg_ctl();
        pg_ctl
            .arg("-D")
            .arg(node.data())
            .arg("-l")
            .arg(node.log())
            .args(["-o", &options])
            .args(["-w", "-t", &WAIT.as_secs().to_string(), "start"]);
        run(&mut pg_ctl).map(drop).map_err(|error| {
            format!(
                "Starting the server on port {} failed: {error}\nIts {}",
                node.port,
                node.log_tail()
            )
        })
    }

    /// Makes a standby of the primary on `port` with `pg_basebackup`, starts it, and waits
    /// until it streams.
    fn add_standby(&mut self, port: u16) -> Result<(), String> {
        let primary = self.state.primary.clone();
        let node = self.new_node(port)?;
        // The application name is what pg_stat_replication shows for this standby; the slot
        // keeps the WAL it has not received yet, however long it is paused.
        let application_name = format!("loom_{port}");
        let slot = format!("loom_standby_{port}");
        self.psql(
            primary.port,
            &format!(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
                 WHERE slot_name = '{slot}'"
            ),
        )
        .map_err(|error| {
            format!("Dropping a former standby's replication slot on the primary failed: {error}")
        })?;
        let mut basebackup = self.program("pg_basebackup");
        basebackup
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                USER,
            ])
            .args(["-d", &format!("application_name={application_name}")])
            .arg("-D")
            .arg(node.data())
            // -R: standby.signal and primary_conninfo (with the application name above);
            // a fast checkpoint, or the copy would wait for a spread one (minutes).
            .args(["-R", "-X", "stream", "-c", "fast", "-C", "-S", &slot]);
        if let Err(error) = run(&mut basebackup) {
            // Its folder goes with the next rebuild's, or with the pair.
            self.state.retired.push(node);
            return Err(format!(
                "Copying the primary on port {} into a new standby failed: {error}\nThe \
                 primary's {}",
                primary.port,
                primary.log_tail()
            ));
        }
        // Recorded before it starts, so that a start that fails halfway is still stopped.
        self.state.standby = Some(node.clone());
        self.start_node(&node)?;
        self.wait_streaming(&primary, &node, &application_name)
    }

    /// Until the primary's `pg_stat_replication` shows `standby` streaming, and as the
    /// synchronous standby for a synchronous pair.
    fn wait_streaming(
        &self,
        primary: &Node,
        standby: &Node,
        application_name: &str,
    ) -> Result<(), String> {
        let wanted = if self.state.synchronous {
            "streaming sync"
        } else {
            "streaming async"
        };
        self.wait_for(standby, "to stream from the primary", || {
            let seen = self.psql(
                primary.port,
                &format!(
                    "SELECT state || ' ' || sync_state FROM pg_stat_replication \
                     WHERE application_name = '{application_name}'"
                ),
            )?;
            Ok((
                seen == wanted,
                format!(
                    "pg_stat_replication on port {} shows {seen:?}, not {wanted:?}",
                    primary.port
                ),
            ))
        })
    }

    /// Polls `ready` (whether it is, and what was seen) until it is, for at most [`WAIT`];
    /// a query that fails is retried, as a server that is starting refuses some.
    fn wait_for(
        &self,
        node: &Node,
        what: &str,
        mut ready: impl FnMut() -> Result<(bool, String), String>,
    ) -> Result<(), String> {
        let deadline = Instant::now() + WAIT;
        loop {
            let seen = match ready() {
                Ok((true, _)) => return Ok(()),
                Ok((false, seen)) => seen,
                Err(error) => error,
            };
            if Instant::now() > deadline {
                return Err(format!(
                    "The server on port {} was waited for {} s {what}, in vain (last seen: \
                     {seen}).\nIts {}",
                    node.port,
                    WAIT.as_secs(),
                    node.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        if !self.keep {
            self.stop();
        }
    }
}

/// Appends `text` to the file at `path`, which keeps its owner (the server's user).
fn append(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|error| format!("Could not append to {}: {error}.", path.display()))
}
