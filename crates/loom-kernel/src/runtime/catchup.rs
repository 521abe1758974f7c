//! Catch-up for projections: readers fed from the store's feed, from a position they keep.
//!
//! A [`Projection`](crate::runtime::Projection) sees the events the drivers of *this* process
//! append, as they become durable: after a crash it never sees the events that were durable
//! but not yet shown to it, and it never sees those of other processes on the same store. A
//! [`FeedProjection`] is fed from the store's feed instead (positions in commit order,
//! [`EventStore::read_feed`]): it says where to start ([`FeedProjection::start_position`]),
//! is given every durable event from there once, in commit order (so each execution's events
//! in seq order), catches up with what it missed, and then follows live appends, whichever
//! process made them. A projection that stores `position + 1` with the state it derived from
//! an event, atomically, sees every durable event exactly once across restarts.
//!
//! [`Runtime::follow_feed`] runs one on the runtime's tasks (a shutdown stops it);
//! [`catch_up`] reads what the feed holds now into one, for a reader without a runtime.
//! See `docs/CATCH-UP.md`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tracing::Instrument;

use crate::runtime::Runtime;
use crate::runtime::contain::contain;
use crate::store::{EventStore, FeedEvent, ReadError, STREAM_PAGE};

/// A reader of the whole store, fed from its feed: every durable event once, in commit
/// order, from a position the reader keeps itself.
pub trait FeedProjection: Send + Sync + 'static {
    /// Where to start: the feed position after the last event this projection has kept
    /// (`0`: from the beginning). Asked once, when it starts being fed.
    fn start_position(&self) -> u64;

    /// Handles one durable event. Called in position order, once per event of a run; the
    /// next start begins at [`FeedProjection::start_position`]. Called on the feeding task:
    /// keep it quick. A panic stops the feeding (the events from there on are left for the
    /// next start): a projection never silently misses an event.
    fn apply(&self, event: &FeedEvent);
}

/// Why a feed projection stopped being fed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FollowError {
    /// The projection panicked on the event at `position`; it was fed nothing after it.
    #[error("the feed projection panicked on the event at position {position}: {detail}")]
    Panicked {
        /// The position of the event it panicked on.
        position: u64,
        /// What the panic said.
        detail: String,
    },
    /// The runtime was shut down.
    #[error("the runtime is shut down; the projection is fed no more")]
    ShutDown,
}

/// Where a followed projection is, as its feeding task reports it.
#[derive(Debug, Clone, Default)]
struct Progress {
    /// The next position it reads from.
    next: u64,
    /// Reads of the feed begun so far.
    reads: u64,
    /// The last read (by its number in `reads`) that found nothing new: everything durable
    /// before that read began has been applied.
    caught_up: u64,
    /// Set once the feeding has stopped.
    stopped: Option<FollowError>,
}

/// A projection the runtime feeds ([`Runtime::follow_feed`]).
#[derive(Debug, Clone)]
pub struct FeedFollower {
    progress: watch::Receiver<Progress>,
    /// Makes the feeding task read again, even if it waits for the feed.
    poke: Arc<Notify>,
}

impl FeedFollower {
    /// The next position the projection is fed from: every event before it has been applied.
    pub fn position(&self) -> u64 {
        self.progress.borrow().next
    }

    /// Waits until the projection has been given every event that was durable when this was
    /// called (through any process on the store): after a restart, the moment it has caught
    /// up. Fails if the feeding stopped first.
    pub async fn caught_up(&self) -> Result<u64, FollowError> {
        let mut progress = self.progress.clone();
        let asked_at = progress.borrow_and_update().reads;
        // A read that begins after this call sees every append that returned before it.
        self.poke.notify_one();
        let reached = progress
            .wait_for(|p| p.stopped.is_some() || p.caught_up > asked_at)
            .await
            .map(|p| (p.stopped.clone(), p.next));
        match reached {
            Ok((None, next)) => Ok(next),
            Ok((Some(error), _)) => Err(error),
            Err(_) => Err(self.stopped().unwrap_or(FollowError::ShutDown)),
        }
    }

    /// Why the feeding stopped, once it has.
    pub fn stopped(&self) -> Option<FollowError> {
        self.progress.borrow().stopped.clone()
    }
}

/// Reads everything the feed holds from `projection`'s start position into it, and returns
/// the position after the last event applied (where a later call goes on). For readers
/// without a runtime; a runtime's reader uses [`Runtime::follow_feed`].
pub async fn catch_up<S: EventStore>(
    store: &S,
    projection: &dyn FeedProjection,
) -> Result<u64, CatchUpError> {
    let mut next = start_position(projection)?;
    loop {
        let page = store.read_feed(next, STREAM_PAGE).await?;
        if page.is_empty() {
            return Ok(next);
        }
        for event in &page {
            next = apply(projection, event).map_err(CatchUpError::Follow)?;
        }
    }
}

/// Why [`catch_up`] stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatchUpError {
    /// The feed could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The projection panicked.
    #[error(transparent)]
    Follow(FollowError),
}

fn start_position(projection: &dyn FeedProjection) -> Result<u64, CatchUpError> {
    contain(|| projection.start_position()).map_err(|detail| {
        CatchUpError::Follow(FollowError::Panicked {
            position: 0,
            detail: format!("in start_position: {detail}"),
        })
    })
}

/// Applies one event; the position after it, or the projection's panic.
fn apply(projection: &dyn FeedProjection, event: &FeedEvent) -> Result<u64, FollowError> {
    contain(|| projection.apply(event)).map_err(|detail| {
        tracing::error!(
            position = event.position,
            "a feed projection panicked; it is fed no more"
        );
        FollowError::Panicked {
            position: event.position,
            detail,
        }
    })?;
    Ok(event.position + 1)
}

/// Resolves once the runtime stops (or is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopping| *stopping).await;
}

/// How long the feeding task waits before it reads again after a read failed.
const RETRY_AFTER: Duration = Duration::from_millis(200);

impl<S: EventStore> Runtime<S> {
    /// Feeds `projection` every durable event of the store from its
    /// [`FeedProjection::start_position`] on: first what it missed (after a crash, or written
    /// by other processes), then live appends of any process, each once, in commit order. It
    /// runs on the runtime's tasks until [`Runtime::shutdown`]; a read error is retried from
    /// the position after the last event applied, a panic of the projection stops it.
    ///
    /// ```
    /// use std::sync::Mutex;
    /// use loom_kernel::MemoryStore;
    /// use loom_kernel::{FeedProjection, Runtime};
    /// use loom_kernel::FeedEvent;
    ///
    /// #[derive(Default)]
    /// struct Count(Mutex<(u64, usize)>); // (next position, events seen)
    ///
    /// impl FeedProjection for Count {
    ///     fn start_position(&self) -> u64 {
    ///         self.0.lock().unwrap().0
    ///     }
    ///     fn apply(&self, event: &FeedEvent) {
    ///         let mut count = self.0.lock().unwrap();
    ///         *count = (event.position + 1, count.1 + 1);
    ///     }
    /// }
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let loom = Runtime::builder(MemoryStore::new()).build()?;
    /// let follower = loom.follow_feed(Count::default());
    /// follower.caught_up().await?;
    /// loom.shutdown().await;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn follow_feed(&self, projection: impl FeedProjection) -> FeedFollower {
        let projection: Arc<dyn FeedProjection> = Arc::new(projection);
        let (report, progress) = watch::channel(Progress::default());
        let poke = Arc::new(Notify::new());
        if self.inner.stopping() {
            report.send_modify(|p| p.stopped = Some(FollowError::ShutDown));
            return FeedFollower { progress, poke };
        }
        let poked = Arc::clone(&poke);
        // The task holds the store and the stop signal, not the runtime: once the last clone
        // of the runtime is dropped, the signal closes and the task ends, releasing the store.
        let store = Arc::clone(&self.inner.store);
        let mut stop = self.inner.stop.subscribe();
        let task = async move {
            // A read is never cut short (a store may be reading on a thread of its own, which
            // would hold the store past the shutdown); the stop signal is checked between reads
            // and interrupts only waits.
            let fed = async {
                let mut next = match start_position(&*projection) {
                    Ok(next) => next,
                    Err(CatchUpError::Follow(error)) => return error,
                    Err(CatchUpError::Read(_)) => 0,
                };
                report.send_modify(|p| p.next = next);
                loop {
                    if *stop.borrow_and_update() {
                        return FollowError::ShutDown;
                    }
                    let mut read = 0;
                    report.send_modify(|p| {
                        p.reads += 1;
                        read = p.reads;
                    });
                    let page = match store.read_feed(next, STREAM_PAGE).await {
                        Ok(page) => page,
                        Err(error) => {
                            tracing::warn!(%error, next, "cannot read the feed; reading again soon");
                            tokio::select! {
                                () = tokio::time::sleep(RETRY_AFTER) => {}
                                () = stopped(&mut stop) => return FollowError::ShutDown,
                            }
                            continue;
                        }
                    };
                    if page.is_empty() {
                        report.send_modify(|p| p.caught_up = read);
                        tokio::select! {
                            waited = store.wait_for_feed(next) => if let Err(error) = waited {
                                tracing::warn!(%error, next, "cannot wait for the feed; reading again soon");
                                tokio::time::sleep(RETRY_AFTER).await;
                            },
                            () = poked.notified() => {}
                            () = stopped(&mut stop) => return FollowError::ShutDown,
                        }
                        continue;
                    }
                    for event in &page {
                        match apply(&*projection, event) {
                            Ok(after) => next = after,
                            Err(error) => return error,
                        }
                    }
                    report.send_modify(|p| p.next = next);
                }
            };
            let stopped = fed.await;
            report.send_modify(|p| p.stopped = Some(stopped));
        };
        self.inner
            .spawn(task.instrument(tracing::info_span!(parent: None, "feed_projection")));
        FeedFollower { progress, poke }
    }
}
