//! `docs/GATES.md` (gate requests and caller identity), compiled: each of its code blocks runs
//! as a doctest of this crate, so the guide cannot drift from the API.

#[cfg(doctest)]
#[doc = include_str!("../../../docs/GATES.md")]
pub struct GatesGuide;
