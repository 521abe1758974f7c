//! The work of a replay, counted rather than timed: records the replay bench's execution
//! (10,000 sequential steps on the disk store), then replays its log from memory as many times
//! as the first argument says. Run it under `valgrind --tool=callgrind` with 0 and with N: the
//! difference of the two instruction counts is N replays, the 0 run is starting a runtime and
//! 10,000 live steps. Counts move little between runs, so two builds compare where wall-clock
//! figures on a shared machine cannot.
//!
//! `cargo bench -p loom-kernel --bench replay_work --no-run`, then
//! `valgrind --tool=callgrind target/release/deps/replay_work-<hash> 3` (and `0`).

mod support;

const STEPS: u64 = 10_000;

fn main() {
    // `cargo bench` passes `--bench`; only a number is a count of replays.
    let replays: usize = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(0);
    let runtime = support::tokio_runtime();
    let dir = support::scratch_dir();
    let (loom, _, log) = support::recorded_steps(&runtime, dir.path(), STEPS);
    for _ in 0..replays {
        loom.replay_log(log.clone()).expect("deterministic");
    }
    println!("loom replay_work steps={STEPS} replays={replays}");
}
