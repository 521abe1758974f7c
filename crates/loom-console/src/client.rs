//! A client of the admin API: a small HTTP/1.1 client for JSON over loopback (one connection
//! per request, `Connection: close`), enough for `loom --admin`.

use std::time::Duration;

use loom_kernel::Verdict;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{ConsoleError, ErrorKind};
use crate::query::{ExecutionList, ListFilter};
use crate::view::{EventsPage, ExportPage, InDoubtView, ShowView, status_name};

/// The most an answer may weigh.
const MAX_RESPONSE: usize = 256 << 20;

/// How long a request may take, beyond what it asks to wait for.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the admin API is and the token it wants.
#[derive(Clone)]
pub struct AdminClient {
    host: String,
    port: u16,
    /// The path the API is mounted under, without a trailing `/` (usually empty).
    base: String,
    token: String,
    url: String,
}

impl std::fmt::Debug for AdminClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminClient")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl AdminClient {
    /// A client of the admin API at `url` (`http://127.0.0.1:PORT`, optionally with the path
    /// the server mounted it under).
    pub fn new(url: &str, token: &str) -> Result<Self, ConsoleError> {
        let bad = |why: &str| {
            ConsoleError::bad_request(format!(
                "bad admin URL '{url}': {why} (expected http://127.0.0.1:PORT)"
            ))
        };
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| bad("only http:// on loopback is supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(slash) => rest.split_at(slash),
            None => (rest, ""),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || host.starts_with('[') => {
                (host, port.parse::<u16>().map_err(|_| bad("bad port"))?)
            }
            _ => (authority, 80),
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        // A usage error (exit 2), not a refusal: nothing was sent.
        if token.is_empty() {
            return Err(ConsoleError::bad_request(
                "no admin token: give --token or set LOOM_ADMIN_TOKEN (`serve` keeps it in the file <store>.admin-token)",
            ));
        }
        Ok(Self {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
            base: path.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            url: url.to_owned(),
        })
    }

    /// Executions matching `filter`.
    pub async fn executions(&self, filter: &ListFilter) -> Result<ExecutionList, ConsoleError> {
        let mut query = Vec::new();
        if let Some(status) = filter.status {
            query.push(format!("status={}", encode(status_name(status))));
        }
        if let Some(flow) = &filter.flow {
            query.push(format!("flow={}", encode(flow)));
        }
        if let Some(limit) = filter.limit {
            query.push(format!("limit={limit}"));
        }
        if let Some(before) = &filter.before {
            query.push(format!("before={}", encode(before)));
        }
        if filter.without_counts {
            query.push("counts=false".to_owned());
        }
        for (name, text) in [("idPrefix", &filter.id_prefix), ("parent", &filter.parent)] {
            if let Some(text) = text {
                query.push(format!("{name}={}", encode(text)));
            }
        }
        for (name, ms) in [
            ("startedFromMs", filter.started_from_ms),
            ("startedBeforeMs", filter.started_before_ms),
            ("endedFromMs", filter.ended_from_ms),
            ("endedBeforeMs", filter.ended_before_ms),
        ] {
            if let Some(ms) = ms {
                query.push(format!("{name}={ms}"));
            }
        }
        let path = match query.is_empty() {
            true => "/admin/v1/executions".to_owned(),
            false => format!("/admin/v1/executions?{}", query.join("&")),
        };
        self.get(&path, Duration::ZERO).await
    }

    /// How many executions each status holds (`GET /admin/v1/counts`).
    pub async fn counts(&self) -> Result<crate::query::CountsView, ConsoleError> {
        self.get("/admin/v1/counts", Duration::ZERO).await
    }

    /// A page of whole logs, unmasked (the server must allow it: `AdminConfig::log_export`):
    /// `execution`'s alone, or up to `limit` in id order after `after`.
    pub async fn export_page(
        &self,
        execution: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<ExportPage, ConsoleError> {
        let path = match (execution, after) {
            (Some(id), _) => format!("/admin/v1/export?execution={}", encode(id)),
            (None, Some(after)) => {
                format!("/admin/v1/export?after={}&limit={limit}", encode(after))
            }
            (None, None) => format!("/admin/v1/export?limit={limit}"),
        };
        self.get(&path, Duration::ZERO).await
    }

    /// One execution in full.
    pub async fn show(&self, id: &str) -> Result<ShowView, ConsoleError> {
        self.get(
            &format!("/admin/v1/executions/{}", encode(id)),
            Duration::ZERO,
        )
        .await
    }

    /// Events of `id` from `from` on, waiting up to `wait` for some to arrive.
    pub async fn events(
        &self,
        id: &str,
        from: u64,
        wait: Duration,
    ) -> Result<EventsPage, ConsoleError> {
        let path = format!(
            "/admin/v1/executions/{}/events?from={from}&waitMs={}",
            encode(id),
            wait.as_millis()
        );
        self.get(&path, wait).await
    }

    /// Every step in doubt.
    pub async fn in_doubt(&self) -> Result<Vec<InDoubtView>, ConsoleError> {
        self.get("/admin/v1/in-doubt", Duration::ZERO).await
    }

    /// An operator's verdict on a step in doubt.
    pub async fn resolve(
        &self,
        id: &str,
        step_id: &str,
        verdict: &Verdict,
        operator: Option<&str>,
    ) -> Result<(), ConsoleError> {
        let body = json!({"stepId": step_id, "verdict": verdict, "operator": operator});
        self.post(
            &format!("/admin/v1/executions/{}/resolve", encode(id)),
            &body,
        )
        .await
    }

    /// Resumes a pending gate.
    pub async fn resume(
        &self,
        id: &str,
        event_type: &str,
        correlation_key: &str,
        payload: &Value,
    ) -> Result<(), ConsoleError> {
        self.resume_by(id, event_type, correlation_key, payload, None)
            .await
    }

    /// [`AdminClient::resume`] naming the operator, whom the server's resume authenticator
    /// sees as the caller's `operator` attribute (LD-019).
    pub async fn resume_by(
        &self,
        id: &str,
        event_type: &str,
        correlation_key: &str,
        payload: &Value,
        operator: Option<&str>,
    ) -> Result<(), ConsoleError> {
        let mut body =
            json!({"eventType": event_type, "correlationKey": correlation_key, "payload": payload});
        if let Some(operator) = operator {
            body["operator"] = json!(operator);
        }
        self.post(
            &format!("/admin/v1/executions/{}/resume", encode(id)),
            &body,
        )
        .await
    }

    /// Cancels an execution.
    pub async fn cancel(&self, id: &str, reason: Option<&str>) -> Result<(), ConsoleError> {
        let body = json!({ "reason": reason });
        self.post(
            &format!("/admin/v1/executions/{}/cancel", encode(id)),
            &body,
        )
        .await
    }

    /// The flows the server's runtime runs, with the input schema each declares.
    pub async fn flows(&self) -> Result<Vec<crate::FlowView>, ConsoleError> {
        self.get("/admin/v1/flows", Duration::ZERO).await
    }

    /// Starts `flow` (its newest version) with `input` as execution `id` (made up by the
    /// server when `None`); the input is checked against the flow's input schema first.
    pub async fn start(
        &self,
        flow: &str,
        input: &Value,
        id: Option<&str>,
    ) -> Result<crate::Started, ConsoleError> {
        let mut body = json!({"flow": flow, "input": input});
        if let Some(id) = id {
            body["id"] = json!(id);
        }
        self.post_for("/admin/v1/executions", &body).await
    }

    /// Cancels (or, on a dry run, counts) the executions a filter matches.
    pub async fn cancel_many(
        &self,
        request: &crate::CancelManyRequest,
    ) -> Result<crate::CancelManyAnswer, ConsoleError> {
        let body = serde_json::to_value(request).map_err(|error| {
            ConsoleError::internal(format!("cannot encode the request: {error}"))
        })?;
        self.post_for("/admin/v1/cancel-many", &body).await
    }

    /// One bounded batch of a purge: deletes up to `limit` executions that ended before
    /// `ended_before_ms` and returns their ids.
    pub async fn delete_ended(
        &self,
        ended_before_ms: u64,
        limit: usize,
    ) -> Result<Vec<String>, ConsoleError> {
        let body = json!({"endedBeforeMs": ended_before_ms, "limit": limit});
        let answer: Value = self.post_for("/admin/v1/retention/delete", &body).await?;
        Ok(ids_in(&answer, "deleted"))
    }

    /// What a purge would delete, deleting nothing.
    pub async fn would_delete_ended(
        &self,
        ended_before_ms: u64,
    ) -> Result<Vec<String>, ConsoleError> {
        let body = json!({"endedBeforeMs": ended_before_ms});
        let answer: Value = self.post_for("/admin/v1/retention/preview", &body).await?;
        Ok(ids_in(&answer, "executions"))
    }

    async fn post_for<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
    ) -> Result<T, ConsoleError> {
        let body = serde_json::to_vec(body).map_err(|error| {
            ConsoleError::internal(format!("cannot encode the request: {error}"))
        })?;
        let answer = self
            .request("POST", path, Some(body), Duration::ZERO)
            .await?;
        serde_json::from_slice(&answer).map_err(|error| {
            ConsoleError::internal(format!(
                "the admin API at {} answered something this client cannot read ({error}): is it the same version?",
                self.url
            ))
        })
    }

    async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        wait: Duration,
    ) -> Result<T, ConsoleError> {
        let body = self.request("GET", path, None, wait).await?;
        serde_json::from_slice(&body).map_err(|error| {
            ConsoleError::internal(format!(
                "the admin API at {} answered something this client cannot read ({error}): is it the same version?",
                self.url
            ))
        })
    }

    async fn post(&self, path: &str, body: &Value) -> Result<(), ConsoleError> {
        let body = serde_json::to_vec(body).map_err(|error| {
            ConsoleError::internal(format!("cannot encode the request: {error}"))
        })?;
        self.request("POST", path, Some(body), Duration::ZERO)
            .await
            .map(drop)
    }

    /// Sends one request and returns the body of a 2xx answer; any other answer is an error
    /// carrying the server's message.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        wait: Duration,
    ) -> Result<Vec<u8>, ConsoleError> {
        let exchange = self.exchange(method, path, body);
        let (status, body) = tokio::time::timeout(REQUEST_TIMEOUT + wait, exchange)
            .await
            .map_err(|_| {
                ConsoleError::unavailable(format!(
                    "the admin API at {} did not answer in time",
                    self.url
                ))
            })??;
        if (200..300).contains(&status) {
            return Ok(body);
        }
        let error = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|value| {
                serde_json::from_value::<ConsoleError>(value.get("error")?.clone()).ok()
            });
        Err(error.unwrap_or_else(|| {
            ConsoleError::new(
                ErrorKind::from_http_status(status),
                format!(
                    "the admin API at {} answered HTTP {status}: {}",
                    self.url,
                    String::from_utf8_lossy(&body).trim()
                ),
            )
        }))
    }

    async fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(u16, Vec<u8>), ConsoleError> {
        let unreachable = |error: std::io::Error| {
            ConsoleError::unavailable(format!(
                "cannot reach the admin API at {} ({error}): is the server that runs the flows up, and is this its admin address?",
                self.url
            ))
        };
        let mut stream = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(unreachable)?;
        let body = body.unwrap_or_default();
        let mut request = format!(
            "{method} {}{path} HTTP/1.1\r\nHost: {}:{}\r\nAuthorization: Bearer {}\r\nAccept: application/json\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.base,
            self.host,
            self.port,
            self.token,
            body.len()
        );
        if !body.is_empty() {
            request.push_str("Content-Type: application/json\r\n");
        }
        request.push_str("\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(unreachable)?;
        stream.write_all(&body).await.map_err(unreachable)?;
        let mut answer = Vec::new();
        (&mut stream)
            .take(MAX_RESPONSE as u64 + 1)
            .read_to_end(&mut answer)
            .await
            .map_err(unreachable)?;
        if answer.len() > MAX_RESPONSE {
            return Err(ConsoleError::internal(
                "the admin API's answer is too large",
            ));
        }
        parse_response(&answer).ok_or_else(|| {
            ConsoleError::internal(format!(
                "the admin API at {} answered something that is not HTTP/1.1",
                self.url
            ))
        })
    }
}

/// The status and the body of an HTTP/1.1 answer read to its end.
fn parse_response(answer: &[u8]) -> Option<(u16, Vec<u8>)> {
    let split = answer.windows(4).position(|window| window == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&answer[..split]).ok()?;
    let body = &answer[split + 4..];
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let mut chunked = false;
    let mut length = None;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        } else if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<usize>().ok();
        }
    }
    if chunked {
        return Some((status, dechunk(body)?));
    }
    let body = match length {
        Some(length) => body.get(..length)?,
        None => body,
    };
    Some((status, body.to_vec()))
}

fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|window| window == b"\r\n")?;
        let size_text = std::str::from_utf8(&body[..line_end]).ok()?;
        let size_text = size_text.split(';').next()?.trim();
        let size = usize::from_str_radix(size_text, 16).ok()?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(body.get(..size)?);
        body = body.get(size + 2..)?;
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub(crate) fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The strings of the array `key` of an answer.
fn ids_in(answer: &Value, key: &str) -> Vec<String> {
    answer
        .get(key)
        .and_then(Value::as_array)
        .map(|ids| {
            ids.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_parsed_plain_and_chunked() {
        let plain = b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(parse_response(plain), Some((404, b"{}".to_vec())));
        let chunked =
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked), Some((200, b"abcde".to_vec())));
        assert_eq!(parse_response(b"garbage"), None);
    }

    #[test]
    fn urls_are_read_with_their_mount_path() {
        let client = AdminClient::new("http://127.0.0.1:8080/ops/", "t").unwrap();
        assert_eq!((client.host.as_str(), client.port), ("127.0.0.1", 8080));
        assert_eq!(client.base, "/ops");
        assert!(AdminClient::new("https://127.0.0.1:1", "t").is_err());
        assert!(AdminClient::new("http://127.0.0.1:x", "t").is_err());
        // No token is a usage error: nothing was sent to be refused.
        assert_eq!(
            AdminClient::new("http://127.0.0.1:1", "").unwrap_err().kind,
            ErrorKind::BadRequest
        );
    }

    #[test]
    fn ids_are_percent_encoded() {
        assert_eq!(encode("order 1/#?"), "order%201%2F%23%3F");
    }
}
