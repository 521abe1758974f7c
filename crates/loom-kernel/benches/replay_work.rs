//! The work of a replay, counted rather than timed: records the replay bench's execution
//! (10,000 sequential steps on the disk store), then replays its log from memory as many times
//! as the first argument says. Run it under `valgrind --tool=callgrind` with 0 and with N: the
//! difference of the two instruction counts is N replays, the 0 run is starting a runtime and
//! 10,000 live steps. Counts move little between runs, so two builds compare where wall-clock
//! figures on a shared machine cannot. The same difference under `valgrind --tool=dhat` counts
//! the allocations of a replay. With `memory` among the arguments the steps run on the memory
//! store instead, which leaves the kernel's own work without the disk store's.
//!
//! Each phase prints the minor page faults the process took during it.
//!
//! `cargo bench -p loom-kernel --bench replay_work --no-run`, then
//! `valgrind --tool=callgrind target/release/deps/replay_work-<hash> 3` (and `0`).

mod support;

const STEPS: u64 = 10_000;

/// The process's minor page faults so far (field 10 of /proc/self/stat).
fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // The command name may hold spaces: count the fields after its parenthesis.
            let rest = stat.rsplit_once(')')?.1;
            rest.split_whitespace().nth(7)?.parse().ok()
        })
        .unwrap_or(0)
}

fn replay<S: loom_kernel::EventStore + 'static>(
    loom: &loom_kernel::Runtime<S>,
    log: &[loom_kernel::EventEnvelope],
    replays: usize,
) {
    let faults = minor_faults();
    for _ in 0..replays {
        loom.replay_log(log.to_vec()).expect("deterministic");
    }
    println!(
        "loom replay_work replays={replays} minor_faults={}",
        minor_faults() - faults
    );
}

fn main() {
    // `cargo bench` passes `--bench`; only a number is a count of replays.
    let replays: usize = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(0);
    let on_memory = std::env::args().any(|arg| arg == "memory");
    let runtime = support::tokio_runtime();
    let dir = support::scratch_dir();
    let faults = minor_faults();
    let live = |store: &str| {
        println!(
            "loom replay_work steps={STEPS} store={store} minor_faults={}",
            minor_faults() - faults
        )
    };
    if on_memory {
        let (loom, _, log) = support::run_steps(&runtime, loom_kernel::MemoryStore::new(), STEPS);
        live("memory");
        replay(&loom, &log, replays);
    } else {
        let (loom, _, log) = support::recorded_steps(&runtime, dir.path(), STEPS);
        live("disk");
        replay(&loom, &log, replays);
    }
}
