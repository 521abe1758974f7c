//! The browser's `Origin` against an allow-list, before any handler runs: a page on another
//! site may not drive this server through its visitor's browser (a WebSocket or a form POST
//! is not held back by the same-origin policy; `Origin` is how a server tells).
//!
//! Every request that carries `Origin` must name an allowed one, or it is refused with 403
//! before anything is read or recorded. Browsers send `Origin` on every WebSocket upgrade and
//! every POST; a request without it is not a browser's cross-site request (a program, `curl`,
//! a same-origin `GET`) and passes to its handler, which still asks for its credential.
//! Allowed by default: the server's own origin (`http://<listen address>`, and `localhost`
//! for a loopback listener); more with `--allow-origin`.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The origins a browser page may call this server from.
#[derive(Debug, Clone)]
pub struct AllowedOrigins(Arc<BTreeSet<String>>);

impl AllowedOrigins {
    /// The server's own origin at `addr` and `extra` (each `scheme://host[:port]`).
    pub fn new(addr: SocketAddr, extra: &[String]) -> Self {
        let mut allowed: BTreeSet<String> = extra.iter().map(|o| normalized(o)).collect();
        allowed.insert(format!("http://{addr}"));
        if addr.ip().is_loopback() {
            allowed.insert(format!("http://localhost:{}", addr.port()));
        }
        Self(Arc::new(allowed))
    }

    /// Whether a request with this `Origin` value may go on.
    pub fn allows(&self, origin: &str) -> bool {
        self.0.contains(&normalized(origin))
    }

    /// The allowed origins, for the log.
    pub fn listed(&self) -> Vec<String> {
        self.0.iter().cloned().collect()
    }
}

/// Scheme and host are case-insensitive; a trailing slash is no part of an origin.
fn normalized(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
}

/// The middleware: 403 for a request whose `Origin` is not allowed (`null` included: a
/// sandboxed frame or a local file).
pub async fn check(
    State(allowed): State<AllowedOrigins>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("(not text)");
        if !allowed.allows(origin) {
            tracing::warn!(origin, path = %request.uri().path(), "refused a request from another origin");
            return (
                StatusCode::FORBIDDEN,
                format!("requests from origin {origin} are not allowed here (see --allow-origin)"),
            )
                .into_response();
        }
    }
    next.run(request).await
}
