//! What identifies a replicated pair's servers, and its text form: enough for another process
//! to find them again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::USER;
use super::programs::{alive, tail};

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
    pub(super) fn postmaster(&self) -> Option<u32> {
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
    pub(super) fn shared_memory_id(&self) -> Option<String> {
        let pid_file = std::fs::read_to_string(self.data().join("postmaster.pid")).ok()?;
        let line = pid_file.lines().nth(6)?;
        let id = line.split_whitespace().nth(1)?;
        id.parse::<u64>().ok().map(|_| id.to_owned())
    }

    pub(super) fn url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/postgres", self.port)
    }
}

/// How long each part of [`Pair::failover`](super::Pair::failover) took.
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
    /// The server that is the primary, or was until
    /// [`Pair::kill_primary`](super::Pair::kill_primary).
    pub primary: Node,
    /// Whether the primary was killed (and the standby not promoted yet).
    pub primary_killed: bool,
    pub standby: Option<Node>,
    /// Killed primaries' folders, removed when a standby is rebuilt.
    pub retired: Vec<Node>,
    /// The number the next server's folder takes (`node-<n>`), so that no folder is reused.
    pub next_node: u32,
}

/// The name of the file [`Pair::save`](super::Pair::save) writes in its folder.
pub const STATE_FILE: &str = "state";
/// The file [`Pair::save`](super::Pair::save) writes the pair's multi-host URL to.
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
