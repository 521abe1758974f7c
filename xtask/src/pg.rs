//! `cargo xtask pg-up` / `pg-down`: a throwaway PostgreSQL cluster for the tests.
//!
//! `pg-up` initialises a cluster in a fresh temporary folder (as the `postgres` user when run
//! as root: `initdb` refuses root), starts it on a free port of 127.0.0.1 with its socket in
//! that folder, and writes its URL to `target/loom-pg/url`, where the PostgreSQL store's tests
//! look (`LOOM_TEST_POSTGRES_URL` overrides it). `pg-down` stops it and removes the folder.
//!
//! `pg-up --replica` starts a replicated pair instead (a primary and a streaming standby, on two
//! ports that stay the pair's across failovers), keeps what identifies it in
//! `target/loom-pg/replica/` and writes its multi-host URL to `target/loom-pg/replica/url`;
//! `pg-failover` kills that pair's primary as a dead machine would, promotes the standby and
//! rebuilds a standby; `pg-down` stops the pair too.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Where the running cluster's URL and data folder are written.
fn state_dir(root: &Path) -> PathBuf {
    root.join("target/loom-pg")
}

/// The shared helpers, also compiled into the PostgreSQL store's tests, which start replicated
/// pairs of their own.
#[path = "../../crates/loom-store-postgres/tests/support/cluster/mod.rs"]
mod cluster;

use cluster::{Pair, pg_command};

/// The folder of PostgreSQL's server programs (`initdb`, `pg_ctl`).
fn bin_dir() -> Result<PathBuf> {
    cluster::bin_dir().map_err(anyhow::Error::msg)
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

/// Whether PostgreSQL's server programs are installed here.
pub fn installed() -> bool {
    cluster::installed()
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
    let data = cluster::temp_dir("loom-pg").map_err(anyhow::Error::msg)?;
    let data_str = data
        .to_str()
        .context("temporary folder path is not UTF-8")?;
    cluster::give_to_postgres(&data).map_err(anyhow::Error::msg)?;
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
    let port = cluster::free_port().map_err(anyhow::Error::msg)?;
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

/// Where `pg-up --replica` keeps its pair's state and URL, apart from the single cluster's, which
/// the tests use.
fn replica_dir(root: &Path) -> PathBuf {
    state_dir(root).join("replica")
}

/// The pair an earlier `pg-up --replica` saved, if any.
fn saved_pair(root: &Path) -> Result<Option<Pair>> {
    let dir = replica_dir(root);
    if !dir.join(cluster::STATE_FILE).exists() {
        return Ok(None);
    }
    Pair::load(&dir).map(Some).map_err(anyhow::Error::msg)
}

/// Starts a replicated pair (synchronous unless `synchronous` is false) unless one from an
/// earlier `pg-up --replica` still runs, and prints its URL.
pub fn replica_up(root: &Path, synchronous: bool) -> Result<()> {
    let kind = |synchronous| {
        if synchronous {
            "synchronous"
        } else {
            "asynchronous"
        }
    };
    if let Some(pair) = saved_pair(root)? {
        if pair.is_running() {
            let running = pair.synchronous();
            let url = pair.url();
            pair.detach();
            if running != synchronous {
                bail!(
                    "the replicated pair already up ({url}) is {}, not {} as asked: stop it \
                     first with `cargo xtask pg-down`",
                    kind(running),
                    kind(synchronous)
                );
            }
            eprintln!("PostgreSQL replicated pair already up: {url}");
            println!("{url}");
            return Ok(());
        }
        eprintln!("removing what is left of a replicated pair that no longer runs");
        drop(pair);
        remove_replica_state(root)?;
    }
    let pair = Pair::start(synchronous).map_err(anyhow::Error::msg)?;
    pair.save(&replica_dir(root)).map_err(anyhow::Error::msg)?;
    let url = pair.url();
    eprintln!(
        "PostgreSQL replicated pair up ({}): primary on port {}, standby on port {}: {url}",
        kind(synchronous),
        pair.primary_port(),
        pair.standby_port().unwrap_or_default(),
    );
    println!("{url}");
    pair.detach();
    Ok(())
}

/// Kills the saved pair's primary, promotes its standby and rebuilds a standby on the dead
/// primary's port; prints how long each part took.
pub fn replica_failover(root: &Path) -> Result<()> {
    let Some(mut pair) = saved_pair(root)? else {
        bail!(
            "there is no replicated pair to fail over: start one with `cargo xtask pg-up \
             --replica`"
        );
    };
    let old = pair.primary_port();
    let outcome = pair.failover();
    // Saved whatever happened, so that a failover that stopped halfway still leaves `pg-down`
    // what it needs to stop the pair.
    let saved = pair.save(&replica_dir(root));
    let new = pair.primary_port();
    pair.detach();
    let times = outcome
        .map_err(anyhow::Error::msg)
        .context("the failover stopped halfway (`cargo xtask pg-down` stops the pair)")?;
    saved.map_err(anyhow::Error::msg)?;
    eprintln!(
        "failover: primary on port {old} killed in {}, standby on port {new} promoted in {}, \
         new standby on port {old} streaming in {} (total {})",
        millis(times.kill),
        millis(times.promote),
        millis(times.rebuild),
        millis(times.total())
    );
    println!("{}", failover_line(&times));
    Ok(())
}

/// The failover's times as one machine-readable line.
fn failover_line(times: &cluster::FailoverTimes) -> String {
    let ms = |duration: std::time::Duration| duration.as_millis();
    format!(
        "failover kill_ms={} promote_ms={} rebuild_ms={} total_ms={}",
        ms(times.kill),
        ms(times.promote),
        ms(times.rebuild),
        ms(times.total())
    )
}

fn millis(duration: std::time::Duration) -> String {
    format!("{:.0} ms", duration.as_secs_f64() * 1000.0)
}

/// Stops the pair `pg-up --replica` started, if any, and removes its folders.
pub fn replica_down(root: &Path) -> Result<()> {
    let Some(mut pair) = saved_pair(root)? else {
        return Ok(());
    };
    pair.stop();
    remove_replica_state(root)?;
    eprintln!("PostgreSQL replicated pair down");
    Ok(())
}

fn remove_replica_state(root: &Path) -> Result<()> {
    let dir = replica_dir(root);
    std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::cluster::{FailoverTimes, Node, PairState};

    fn state(standby: bool) -> PairState {
        let base = PathBuf::from("/tmp/loom-pg-pair-1-2-0");
        PairState {
            synchronous: true,
            ports: [40001, 40002],
            primary: Node {
                port: 40002,
                dir: base.join("node-2"),
            },
            primary_killed: false,
            standby: standby.then(|| Node {
                port: 40001,
                dir: base.join("node-3"),
            }),
            retired: vec![Node {
                port: 40001,
                dir: base.join("node-0"),
            }],
            next_node: 4,
            base,
        }
    }

    #[test]
    fn with_no_pair_a_failover_is_refused_and_a_stop_does_nothing() {
        let root = tempfile::tempdir().unwrap();
        let refused = super::replica_failover(root.path())
            .unwrap_err()
            .to_string();
        assert!(refused.contains("no replicated pair"), "{refused}");
        super::replica_down(root.path()).unwrap();
        super::replica_down(root.path()).unwrap();
    }

    #[test]
    fn a_saved_pair_reads_back_the_same() {
        for standby in [true, false] {
            let state = state(standby);
            let text = state.to_text();
            assert_eq!(PairState::from_text(&text).unwrap(), state, "{text}");
        }
    }

    #[test]
    fn a_damaged_state_is_refused_with_the_line_or_key_at_fault() {
        let text = state(true).to_text();
        let error = PairState::from_text(&format!("{text}ports 1\n")).unwrap_err();
        assert!(error.contains("Line 9"), "{error}");
        assert!(error.contains("ports 1"), "{error}");
        let without_base: String = text
            .lines()
            .filter(|line| !line.starts_with("base "))
            .map(|line| format!("{line}\n"))
            .collect();
        let error = PairState::from_text(&without_base).unwrap_err();
        assert!(error.contains("`base`"), "{error}");
    }

    #[test]
    fn the_url_names_both_ports_in_a_fixed_order_whichever_is_primary() {
        let mut state = state(true);
        let url = "postgres://loom@127.0.0.1:40001,127.0.0.1:40002/postgres?\
                   target_session_attrs=read-write";
        assert_eq!(state.url(), url);
        std::mem::swap(&mut state.primary, state.standby.as_mut().unwrap());
        assert_eq!(state.url(), url);
    }

    #[test]
    fn free_ports_are_distinct() {
        let [a, b, c] = super::cluster::free_ports::<3>().unwrap();
        assert!(a != b && b != c && a != c, "{a} {b} {c}");
    }

    #[test]
    fn the_failover_line_is_in_milliseconds() {
        let times = FailoverTimes {
            kill: Duration::from_millis(12),
            promote: Duration::from_millis(340),
            rebuild: Duration::from_millis(1500),
        };
        assert_eq!(
            super::failover_line(&times),
            "failover kill_ms=12 promote_ms=340 rebuild_ms=1500 total_ms=1852"
        );
    }
}
