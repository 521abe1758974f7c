//! The runtime's waiting tests: gates, gate requests, durable timers, child
//! executions, callers' identity, executions parked in memory, and the SIGKILL tests of timers,
//! gate requests and families.

mod caller_identity;
mod children;
mod gate_requests;
mod gate_requests_crash;
// The file of this theme that bears its name, as before the themes were one binary.
#[allow(clippy::module_inception)]
mod gates;
mod parked_in_memory;
mod payload_schemas;
mod sigkill_family;
mod timers;
mod timers_crash;
