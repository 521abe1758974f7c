//! A replay-check for your own flows: the whole binary (docs/REPLAY-CHECK.md). Run it as
//! `cargo run -p loom-replay-check --example own_flows -- --store <your store>`; in your crate,
//! `my_flows()` is the `FlowSet` your application registers.

use loom_kernel::{FlowCtx, FlowError, FlowSet, flow_fn};

async fn greet(ctx: FlowCtx, name: String) -> Result<String, FlowError> {
    let n: u64 = ctx.decide("variant", || 1)?;
    Ok(format!("hello {name} #{n}"))
}

/// The flows your application registers with `Runtime::builder(store).flows(&my_flows())`.
fn my_flows() -> FlowSet {
    FlowSet::new().with(flow_fn("greet", 1, greet))
}

fn main() -> std::process::ExitCode {
    loom_replay_check::main(my_flows(), std::env::args_os())
}
