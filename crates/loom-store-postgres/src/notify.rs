//! Waking readers when a log grows, in this process or in any other.
//!
//! Every group commit sends `pg_notify(channel, "head:id\n...")` inside its transaction, so the
//! notification is delivered if and only if the events committed. Each store keeps one
//! connection that `LISTEN`s on its schema's channel while somebody in this process waits
//! (`wait_for`, `wait_for_feed`), and publishes what it hears to [`HeadWatch`]; local commits
//! publish directly as well. A store nobody waits on is not woken by every commit of every
//! worker: its connection `UNLISTEN`s once no waiter has been left for [`IDLE_UNLISTEN`].
//! Whenever `LISTEN` takes effect (first, again after an idle spell, after a reconnect), every
//! waiter re-reads its head: whatever committed before it was not heard, and is read instead.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use loom_kernel::ExecutionId;
use tokio::sync::watch;
use tokio_postgres::AsyncMessage;

/// Longest notification payload sent (PostgreSQL refuses more than 8000 bytes).
pub(crate) const MAX_PAYLOAD: usize = 7900;

/// How long the listener stays `LISTEN`ing after the last waiter left.
pub(crate) const IDLE_UNLISTEN: Duration = Duration::from_secs(2);

/// One watch channel per execution somebody waits on, and one that ticks on every reconnect
/// of the listener and on every commit (for followers of the whole store).
#[derive(Debug)]
pub(crate) struct HeadWatch {
    senders: Mutex<HashMap<ExecutionId, watch::Sender<u64>>>,
    /// Bumped when notifications may have been lost: every waiter re-reads.
    resync: watch::Sender<u64>,
    /// Bumped on every commit anywhere (a catch-up follower's wake-up).
    any: watch::Sender<u64>,
    /// How many waiters there are now: the listener listens while there is one.
    waiters: watch::Sender<usize>,
}

impl Default for HeadWatch {
    fn default() -> Self {
        Self {
            senders: Mutex::default(),
            resync: watch::channel(0).0,
            any: watch::channel(0).0,
            waiters: watch::channel(0).0,
        }
    }
}

/// One waiter, for as long as it lives: the listener listens meanwhile.
pub(crate) struct Waiting<'a>(&'a HeadWatch);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiters.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl HeadWatch {
    fn senders(&self) -> std::sync::MutexGuard<'_, HashMap<ExecutionId, watch::Sender<u64>>> {
        self.senders.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver that sees every head published for `execution` after this call.
    pub(crate) fn subscribe(&self, execution: &ExecutionId) -> watch::Receiver<u64> {
        self.senders()
            .entry(execution.clone())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Counts a waiter until the guard is dropped. Take it before subscribing and reading:
    /// if the listener was not listening, it starts and then resyncs, so the waiter reads
    /// again after `LISTEN` took effect.
    pub(crate) fn waiting(&self) -> Waiting<'_> {
        self.waiters.send_modify(|n| *n += 1);
        Waiting(self)
    }

    /// A receiver that changes when notifications may have been lost.
    pub(crate) fn resyncs(&self) -> watch::Receiver<u64> {
        self.resync.subscribe()
    }

    /// A receiver that changes on every commit seen (and whenever notifications may have
    /// been lost).
    pub(crate) fn commits(&self) -> watch::Receiver<u64> {
        self.any.subscribe()
    }

    /// Publishes a new head; forgets channels nobody listens to any more.
    pub(crate) fn publish(&self, execution: &ExecutionId, head: u64) {
        self.any.send_modify(|n| *n += 1);
        let mut senders = self.senders();
        if let Some(sender) = senders.get(execution) {
            if sender.receiver_count() == 0 {
                senders.remove(execution);
            } else {
                sender.send_modify(|current| *current = (*current).max(head));
            }
        }
    }

    /// Publishes the heads of one notification payload.
    pub(crate) fn publish_payload(&self, payload: &str) {
        for line in payload.lines() {
            let Some((head, id)) = line.split_once(':') else {
                continue;
            };
            if let (Ok(head), Ok(id)) = (head.parse(), ExecutionId::from_stored(id)) {
                self.publish(&id, head);
            }
        }
        self.any.send_modify(|n| *n += 1);
    }

    /// Tells every waiter to read its head again.
    pub(crate) fn resync(&self) {
        self.resync.send_modify(|n| *n += 1);
        self.any.send_modify(|n| *n += 1);
    }
}

/// The payloads announcing `heads`, each under [`MAX_PAYLOAD`] bytes.
pub(crate) fn payloads<'a>(heads: impl IntoIterator<Item = (&'a ExecutionId, u64)>) -> Vec<String> {
    let mut payloads = Vec::new();
    let mut current = String::new();
    for (id, head) in heads {
        let line = format!("{head}:{id}\n");
        if current.len() + line.len() > MAX_PAYLOAD {
            payloads.push(std::mem::take(&mut current));
        }
        current.push_str(&line);
    }
    if !current.is_empty() {
        payloads.push(current);
    }
    payloads
}

/// Listens on `channel` until `watch` is dropped, reconnecting when the connection drops.
pub(crate) async fn listen(
    config: tokio_postgres::Config,
    channel: String,
    watch: std::sync::Weak<HeadWatch>,
    ready: tokio::sync::oneshot::Sender<Result<(), String>>,
) {
    let mut ready = Some(ready);
    let mut backoff = Duration::from_millis(50);
    let mut lost = false;
    loop {
        if watch.strong_count() == 0 {
            return;
        }
        match listen_once(&config, &channel, &watch, &mut ready, &mut lost).await {
            Ok(()) => return,
            Err(detail) => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(Err(detail));
                    return;
                }
                if !lost {
                    // A connection that was up for a while starts over with a short wait.
                    backoff = Duration::from_millis(50);
                }
                lost = true;
                tracing::warn!(%detail, "notification listener lost its connection; reconnecting");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// One connection's life: `Ok` when the store is gone, `Err` when the connection failed.
async fn listen_once(
    config: &tokio_postgres::Config,
    channel: &str,
    watch: &std::sync::Weak<HeadWatch>,
    ready: &mut Option<tokio::sync::oneshot::Sender<Result<(), String>>>,
    lost: &mut bool,
) -> Result<(), String> {
    let (client, mut connection) = config
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|e| crate::cause::describe(&e))?;
    if std::mem::take(lost) {
        tracing::info!("notification listener reconnected; waiters read again what they missed");
    }
    let (sender, mut messages) = tokio::sync::mpsc::unbounded_channel();
    let pump = tokio::spawn(async move {
        let mut stream = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = stream.next().await {
            match message {
                Ok(message) => {
                    if sender.send(Ok(message)).is_err() {
                        return;
                    }
                }
                Err(err) => {
                    let _ = sender.send(Err(crate::cause::describe(&err)));
                    return;
                }
            }
        }
        let _ = sender.send(Err("connection closed".into()));
    });
    let quoted = crate::schema::quote_ident(channel);
    let mut waiters = match watch.upgrade() {
        Some(watch) => watch.waiters.subscribe(),
        None => return Ok(()),
    };
    let result = async {
        if let Some(ready) = ready.take() {
            let _ = ready.send(Ok(()));
        }
        let mut listening = false;
        let mut idle_since: Option<tokio::time::Instant> = None;
        loop {
            let wanted = *waiters.borrow_and_update() > 0;
            if wanted {
                idle_since = None;
                if !listening {
                    client
                        .batch_execute(&format!("LISTEN {quoted}"))
                        .await
                        .map_err(|e| crate::cause::describe(&e))?;
                    listening = true;
                    // Anything committed before LISTEN took effect was not heard: waiters
                    // re-read.
                    match watch.upgrade() {
                        Some(watch) => watch.resync(),
                        None => return Ok(()),
                    }
                }
            } else if listening {
                let since = *idle_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= IDLE_UNLISTEN {
                    client
                        .batch_execute(&format!("UNLISTEN {quoted}"))
                        .await
                        .map_err(|e| crate::cause::describe(&e))?;
                    listening = false;
                    idle_since = None;
                }
            }
            let message = tokio::select! {
                message = messages.recv() => message,
                changed = waiters.changed() => {
                    if changed.is_err() { return Ok(()); }
                    continue;
                }
                // Wake now and then to notice that the store is gone, or that nobody waits.
                () = tokio::time::sleep(Duration::from_millis(500)) => {
                    if watch.strong_count() == 0 { return Ok(()); }
                    continue;
                }
            };
            let Some(watch) = watch.upgrade() else {
                return Ok(());
            };
            match message {
                Some(Ok(AsyncMessage::Notification(notification))) => {
                    watch.publish_payload(notification.payload());
                }
                Some(Ok(_)) => {}
                Some(Err(detail)) => return Err(detail),
                None => return Err("connection closed".into()),
            }
        }
    }
    .await;
    pump.abort();
    drop(client);
    result
}

/// The channel a schema's commits are announced on.
pub(crate) fn channel_of(schema: &str) -> String {
    // PostgreSQL truncates identifiers to 63 bytes in LISTEN and refuses longer names in
    // pg_notify: cut once here, on a character boundary, so both use the same name.
    let mut channel = format!("loom.{schema}");
    let mut end = channel.len().min(63);
    while !channel.is_char_boundary(end) {
        end -= 1;
    }
    channel.truncate(end);
    channel
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(count: usize, len: usize) -> Vec<ExecutionId> {
        (0..count)
            .map(|n| ExecutionId::new(format!("{n:03}-{}", "x".repeat(len))).unwrap())
            .collect()
    }

    #[test]
    fn a_commit_announces_its_heads_in_one_notification_until_one_is_full() {
        // A batch of a hundred appends: one notification, not one per append.
        let small = ids(100, 8);
        let one = payloads(small.iter().map(|id| (id, 7)));
        assert_eq!(one.len(), 1, "{one:?}");
        assert_eq!(one[0].lines().count(), 100);

        // Long ids fill notifications: each stays under the limit, as few as fit, and every
        // head is announced once, in order, in the form the listener reads.
        let long = ids(100, 200);
        let line = format!("3:{}\n", long[0]).len();
        let many = payloads(long.iter().map(|id| (id, 3)));
        assert_eq!(many.len(), 100_usize.div_ceil(MAX_PAYLOAD / line));
        assert!(many.iter().all(|payload| payload.len() <= MAX_PAYLOAD));
        let announced: Vec<String> = many
            .iter()
            .flat_map(|payload| payload.lines().map(str::to_owned))
            .collect();
        let expected: Vec<String> = long.iter().map(|id| format!("3:{id}")).collect();
        assert_eq!(announced, expected);

        // Nothing appended, nothing announced.
        assert!(payloads(std::iter::empty()).is_empty());
    }
}
