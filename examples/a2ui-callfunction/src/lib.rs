//! The `a2ui-callfunction` example: a `checkout` flow driving an A2UI v1.0 surface over a real
//! WebSocket, with both function-call grains of ADR 0070 and a real crash that leaves a step in
//! doubt for an operator's verdict.
//!
//! # What it owns
//! - The application ([`app`]): the catalogs, the surface's components, the masked paths, the
//!   `checkout` flow and the composition of a runtime on the embedded store.
//! - A concrete [`Transport`](loom_plugin_a2ui::Transport) over WebSocket sessions
//!   ([`transport`]) and the server that carries the A2UI wire ([`server`]), with the
//!   console's admin API and the A2UI playground (`playground.rs`, SSE down and POST up; the
//!   page in `web/` draws with the official web renderer `@a2ui/lit` on A2UI v0.9, bundled in
//!   `web/lit/`, or its own small renderer of the default catalog on v1.0) on its loopback
//!   listener.
//! - A headless renderer that answers functions and clicks Approve ([`client`]), the operator's
//!   commands ([`operator`]), and the story that runs them all as processes ([`story`]), each
//!   telling what it does in notes ([`narrate`]).
//! - The choice of store ([`store`]): the embedded store file, or PostgreSQL when `--store` is
//!   a `postgres://` URL.
//!
//! # What it must not depend on
//! It is an application: it builds on the Loom crates and nothing builds on it. It never
//! reaches below the plugin's and the kernel's public APIs.
#![warn(missing_docs, unreachable_pub)]

pub mod app;
pub mod client;
pub mod narrate;
pub mod operator;
pub mod origin;
mod playground;
pub mod renderer_key;
mod secret_file;
pub mod server;
mod signals;
pub mod store;
pub mod story;
pub mod transport;
