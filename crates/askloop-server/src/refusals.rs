//! hyper's own answers to requests it cannot read, given the server's JSON
//! error body.
//!
//! hyper answers some requests itself, before any route runs: a request
//! line or a header that is not HTTP, two different Content-Lengths or a
//! negative one, a target that is not UTF-8 (400), a target over 65,534
//! bytes (414), headers over the limit (431). Its answer has an empty body,
//! and hyper 1.x has no hook to give it one. [`JsonRefusals`] wraps each
//! connection's socket and recognises such an answer as hyper writes it: a
//! head alone, with one of those statuses, `content-length: 0` and no
//! `content-type`. No route answers so (every error of the routes is an
//! [`ApiError`] with a JSON body), so the head is hyper's; it is replaced by
//! the [`ApiError`] for it, whose message says what was wrong, read from the
//! start of the request that the wrapper kept (`diagnosis.rs`). hyper then
//! closes the connection, as it would have.

mod diagnosis;

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::ApiError;

/// The most headers a request may have (hyper's default); more: 431.
pub(crate) const MAX_HEADERS: usize = 100;

/// The most bytes a request's line and headers may take; more: 431. Far
/// above any request a browser or client library sends, and above the
/// longest target hyper reads (65,534 bytes), so a long target gets its own
/// 414.
pub(crate) const MAX_HEAD_BYTES: usize = 128 * 1024;

/// The longest request target hyper reads (its own fixed limit,
/// `u16::MAX - 1`); a longer one is answered 414.
const MAX_TARGET_BYTES: usize = 65_534;

/// How much of a request's start is kept to say what is wrong with it:
/// enough for the request line and headers of any ordinary request.
const HEAD_KEPT: usize = 8 * 1024;

/// A connection's socket, as hyper sees it: everything passes through,
/// except hyper's own empty answer to a request it could not read, which is
/// written as the JSON error instead.
#[derive(Debug)]
pub(crate) struct JsonRefusals<S> {
    socket: S,
    /// The start of the request being read, until its head is whole (at
    /// most [`HEAD_KEPT`] bytes).
    head: Vec<u8>,
    head_whole: bool,
    /// The JSON refusal written in place of hyper's, and how much of it has
    /// gone out.
    refusal: Option<(Vec<u8>, usize)>,
}

impl<S> JsonRefusals<S> {
    pub(crate) fn new(socket: S) -> Self {
        JsonRefusals {
            socket,
            head: Vec::new(),
            head_whole: false,
            refusal: None,
        }
    }

    /// Keeps what was just read, while the request's head is not whole.
    fn keep(&mut self, read: &[u8]) {
        if self.head_whole || self.head.len() >= HEAD_KEPT {
            return;
        }
        let scan_from = self.head.len().saturating_sub(3);
        let room = HEAD_KEPT - self.head.len();
        self.head.extend_from_slice(&read[..read.len().min(room)]);
        self.head_whole = self.head[scan_from..].windows(4).any(|w| w == b"\r\n\r\n");
    }

    /// A response is being written: what is read next starts a new request.
    fn expect_new_request(&mut self) {
        self.head.clear();
        self.head_whole = false;
    }

    /// Takes `written` as hyper's refusal when it is one, and prepares the
    /// JSON refusal in its place.
    fn intercept(&mut self, written: &[u8]) -> bool {
        match json_refusal(written, &self.head) {
            Some(refusal) => {
                self.refusal = Some((refusal, 0));
                true
            }
            None => false,
        }
    }
}

impl<S: AsyncWrite + Unpin> JsonRefusals<S> {
    /// Writes out the JSON refusal, if there is one.
    fn poll_refusal(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some((bytes, sent)) = &mut self.refusal else {
            return Poll::Ready(Ok(()));
        };
        while *sent < bytes.len() {
            let n = ready!(Pin::new(&mut self.socket).poll_write(cx, &bytes[*sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *sent += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonRefusals<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.socket).poll_read(cx, buf))?;
        this.keep(&buf.filled()[before..]);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonRefusals<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.refusal.is_none() && !this.intercept(buf) {
            this.expect_new_request();
            return Pin::new(&mut this.socket).poll_write(cx, buf);
        }
        // hyper's refusal (and anything after it: nothing, hyper closes)
        // stands for the JSON one.
        ready!(this.poll_refusal(cx))?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let first = bufs.iter().find(|buf| !buf.is_empty()).map_or(&[][..], |buf| &buf[..]);
        if this.refusal.is_none() && !this.intercept(first) {
            this.expect_new_request();
            return Pin::new(&mut this.socket).poll_write_vectored(cx, bufs);
        }
        ready!(this.poll_refusal(cx))?;
        Poll::Ready(Ok(bufs.iter().map(|buf| buf.len()).sum()))
    }

    fn is_write_vectored(&self) -> bool {
        self.socket.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_refusal(cx))?;
        Pin::new(&mut this.socket).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_refusal(cx))?;
        Pin::new(&mut this.socket).poll_shutdown(cx)
    }
}

/// The JSON response to write instead of `written`, when `written` is
/// hyper's refusal of the request whose start is `head`.
fn json_refusal(written: &[u8], head: &[u8]) -> Option<Vec<u8>> {
    let (status, date) = hypers_refusal(written)?;
    let error = match status {
        StatusCode::BAD_REQUEST => ApiError::MalformedRequest(diagnosis::what_is_wrong(head)),
        StatusCode::URI_TOO_LONG => ApiError::UriTooLong {
            max_bytes: MAX_TARGET_BYTES,
        },
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => ApiError::HeadersTooLarge {
            max_headers: MAX_HEADERS,
            max_bytes: MAX_HEAD_BYTES,
        },
        _ => return None,
    };
    let (status, code) = error.status_and_code();
    tracing::debug!(%code, error = %error, "request refused before any route");
    let body = error.json();
    let mut response = format!(
        "HTTP/1.1 {} {}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or_default(),
        body.len()
    );
    if let Some(date) = date {
        response.push_str(date);
        response.push_str("\r\n");
    }
    response.push_str("\r\n");
    let mut response = response.into_bytes();
    response.extend_from_slice(&body);
    Some(response)
}

/// The status of `written` and its `date` line, when `written` is a head
/// alone with one of the statuses hyper refuses with, and no body
/// (`content-length: 0`, no `content-type`): hyper's refusal.
fn hypers_refusal(written: &[u8]) -> Option<(StatusCode, Option<&str>)> {
    // Most writes are a response's head or body: out at the first byte.
    if !written.starts_with(b"HTTP/1.1 4") {
        return None;
    }
    let head = std::str::from_utf8(written.strip_suffix(b"\r\n\r\n")?).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.strip_prefix("HTTP/1.1 ")?.get(..3)?;
    if !matches!(status, "400" | "414" | "431") {
        return None;
    }
    let status = StatusCode::from_bytes(status.as_bytes()).ok()?;
    let headers: Vec<&str> = lines.collect();
    let bodiless = headers.contains(&"content-length: 0") && !headers.iter().any(|h| h.starts_with("content-type:"));
    let date = headers.iter().copied().find(|h| h.starts_with("date: "));
    bodiless.then_some((status, date))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYPERS_400: &[u8] =
        b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: Fri, 04 Dec 2026 07:53:03 GMT\r\n\r\n";

    #[test]
    fn hypers_bodiless_400_becomes_the_json_error_keeping_its_date() {
        let response = json_refusal(HYPERS_400, b"hello there\r\n\r\n").unwrap();
        let response = String::from_utf8(response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
        assert!(head.contains("\r\ndate: Fri, 04 Dec 2026 07:53:03 GMT"), "{head}");
        assert!(head.contains(&format!("\r\ncontent-length: {}", body.len())), "{head}");
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"]["code"], "malformed_request");
    }

    #[test]
    fn a_response_with_a_body_or_another_status_passes_through() {
        let json_400 = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n";
        assert!(json_refusal(json_400, b"").is_none());
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        assert!(json_refusal(ok, b"").is_none());
        let head_and_body = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n\r\n{}";
        assert!(json_refusal(head_and_body, b"").is_none());
        assert!(json_refusal(b"0\r\n\r\n", b"").is_none());
    }

    #[test]
    fn only_the_start_of_a_request_is_kept_until_its_head_is_whole() {
        let mut socket = JsonRefusals::new(());
        socket.keep(b"GET / HTTP/1.1\r\nHost: x\r");
        socket.keep(b"\n\r\n{\"body\": 1}");
        assert!(socket.head_whole);
        socket.keep(b"more body");
        assert!(socket.head.ends_with(b"{\"body\": 1}"));
        socket.expect_new_request();
        socket.keep(&vec![b'a'; 2 * HEAD_KEPT]);
        assert_eq!(socket.head.len(), HEAD_KEPT);
    }
}
