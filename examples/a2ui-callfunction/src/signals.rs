//! The signals that stop a server kept up (`serve`, `server` without `--exit-when-done`).

/// SIGINT (Ctrl-C) and SIGTERM: how an operator or a service manager stops a server that
/// serves until stopped. Installed at the server's start; `None` where a handler could not be
/// installed (the default action, the process ending, stays).
pub(crate) struct StopSignals(Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>);

impl StopSignals {
    pub(crate) fn install() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        Self(
            signal(SignalKind::interrupt())
                .and_then(|interrupt| Ok((interrupt, signal(SignalKind::terminate())?)))
                .ok(),
        )
    }

    /// The next one received, named for the server's last words.
    pub(crate) async fn recv(&mut self) -> &'static str {
        let Some((interrupt, terminate)) = self.0.as_mut() else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
        }
    }
}
