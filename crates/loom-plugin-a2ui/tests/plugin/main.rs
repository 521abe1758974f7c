//! The A2UI plugin's tests, one test binary: the wire format against the A2UI schemas, the feed,
//! gates (grain A) and effects (grain B).

#[path = "../support/mod.rs"]
mod support;

mod edge;
mod edge_bounds;
mod effect;
mod feed;
mod gates;
mod protocol;
mod v0_9;
mod wire;
