//! Throwaway PostgreSQL servers on 127.0.0.1: the programs that make them, and a replicated
//! pair (a primary and a streaming standby) that can lose its primary like a dead machine does.
//!
//! Standard library only, since it is compiled twice: into the store's tests (`support::cluster`)
//! and into xtask, whose `pg-up` cluster uses the same helpers
//! (`#[path = "../../crates/loom-store-postgres/tests/support/cluster/mod.rs"]`). Errors are
//! sentences naming the command that failed, with its stderr or the server's log tail, because
//! a test that cannot set up its servers has nothing else to show.
//!
//! Each server of a pair lives in a folder of its own under the pair's temporary folder: its
//! data directory `data/`, its log `pg.log` and its Unix socket. The log and the socket stay
//! outside `data/` because `pg_basebackup` copies every file of the data directory: a standby
//! would start with its primary's log and socket lock file.
#![allow(dead_code)]

mod programs;
mod state;

// Each of the two crates that compile this module uses some of these and not the others, as
// with `dead_code` above.
#[allow(unused_imports)]
pub use programs::{
    bin_dir, free_port, free_ports, give_to_postgres, installed, is_root, pg_command, temp_dir,
};
#[allow(unused_imports)]
pub use state::{FailoverTimes, Node, PairState, STATE_FILE, URL_FILE};

use programs::{alive, append, refuses, run, signal_tree};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long any wait of this module lasts before it fails: far above what a healthy server
/// needs (a second or two), short enough that a broken one fails the test rather than hangs it.
const WAIT: Duration = Duration::from_secs(60);

/// The role every server is made with (`initdb -U`): superuser, replication allowed.
pub const USER: &str = "loom";

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
