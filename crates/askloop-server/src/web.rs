//! The web page: Chat, Inbox and Run view, served from the binary.
//!
//! The files under `web/` are plain HTML, CSS and ES modules, built into
//! the binary at compile time (`include_bytes!`): nothing to build, nothing
//! fetched from elsewhere. The page's own paths (`/`, `/inbox`,
//! `/runs/{runId}`, `/threads/{threadId}`) all serve `index.html`, which
//! routes client-side, so a run's or a conversation's link can be pasted
//! anywhere. (`/chat` is the page too; `/chat/...` is left to the AI SDK's
//! chat route.) The files need no token (they hold
//! no data); the page asks for the token and sends it on every `/api` call.
//!
//! Every file is sent with a strict Content-Security-Policy (only this
//! origin's scripts, styles and connections; no inline code), `nosniff`,
//! and `Cache-Control: no-cache` with an `ETag` of its content: a browser
//! revalidates each time (a 304 costs a few bytes) and never runs a stale
//! script after an upgrade.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::error::ApiError;

/// A file of the page.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
    etag: &'static str,
}

/// FNV-1a, at compile time: a fingerprint of a file for its `ETag`.
const fn fingerprint(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
}

/// The fingerprint as a quoted ETag, at compile time.
const fn etag(hash: u64) -> [u8; 18] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [b'"'; 18];
    let mut i = 0;
    while i < 16 {
        out[1 + i] = HEX[((hash >> (60 - 4 * i)) & 0xf) as usize];
        i += 1;
    }
    out
}

macro_rules! asset {
    ($name:literal, $type:expr) => {{
        const BODY: &[u8] = include_bytes!(concat!("../web/", $name));
        const TAG: [u8; 18] = etag(fingerprint(BODY));
        Asset {
            name: $name,
            content_type: $type,
            body: BODY,
            etag: match std::str::from_utf8(&TAG) {
                Ok(tag) => tag,
                Err(_) => "\"0\"",
            },
        }
    }};
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the page.
static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("link.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("questions.js", JS),
    asset!("forms.js", JS),
    asset!("elicitation.js", JS),
    asset!("chat.js", JS),
    asset!("inbox.js", JS),
    asset!("run.js", JS),
    asset!("threads.js", JS),
    asset!("transcript.js", JS),
    asset!("turns.js", JS),
    asset!("link.js", JS),
    asset!("grants.js", JS),
];

/// Only this origin's files and API; no inline code, no frames.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The page's routes, to merge into the server's router.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(page))
        .route("/chat", get(page))
        .route("/inbox", get(page))
        .route("/runs/{run_id}", get(page))
        .route("/threads/{thread_id}", get(page))
        .route(
            "/favicon.svg",
            get(|headers: HeaderMap| async move { file("favicon.svg", &headers) }),
        )
        .route("/assets/{name}", get(asset))
}

async fn page(headers: HeaderMap) -> Response {
    file("index.html", &headers)
}

async fn asset(Path(name): Path<String>, headers: HeaderMap) -> Response {
    if name.ends_with(".html") {
        return file_missing(&name);
    }
    file(&name, &headers)
}

pub(crate) fn file(name: &str, request: &HeaderMap) -> Response {
    let Some(asset) = ASSETS.iter().find(|a| a.name == name) else {
        return file_missing(name);
    };
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|t| t.trim() == asset.etag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (StatusCode::OK, asset.body).into_response()
    };
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::ETAG, HeaderValue::from_static(asset.etag));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

fn file_missing(name: &str) -> Response {
    ApiError::UnknownRoute {
        method: "GET".to_owned(),
        path: format!("/assets/{name}"),
    }
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_has_its_own_etag() {
        let mut tags: Vec<&str> = ASSETS.iter().map(|a| a.etag).collect();
        tags.sort_unstable();
        tags.dedup();
        assert_eq!(tags.len(), ASSETS.len());
        assert!(ASSETS.iter().all(|a| a.etag.len() == 18 && a.etag.starts_with('"')));
    }
}
