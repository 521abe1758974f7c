//! The guides under `docs/` whose examples use only this crate, compiled as doctests so they
//! stay true.

/// `docs/CATCH-UP.md`: projections fed from the store's feed.
#[doc = include_str!("../../../docs/CATCH-UP.md")]
pub struct CatchUpGuide;

/// `docs/RESUME.md`: parked flows kept in memory.
#[doc = include_str!("../../../docs/RESUME.md")]
pub struct ResumeGuide;

/// `docs/RECOVERY.md`: recovery, shutdown and retention.
#[doc = include_str!("../../../docs/RECOVERY.md")]
pub struct RecoveryGuide;
