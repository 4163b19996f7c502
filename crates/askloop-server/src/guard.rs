//! Which requests the server takes at all, before any token is looked at
//! or anything is read: the host a request names, the site it comes from,
//! and the type of its body.
//!
//! A browser sends requests wherever a page tells it to, and a token-less
//! server on loopback cannot tell a person's tab from a page of another
//! site by its address. Three rules close that door:
//!
//! - **Host.** A page on `attacker.example` whose name is then pointed at
//!   127.0.0.1 (DNS rebinding) becomes same-origin with the server and can
//!   read every run. Its requests still name `attacker.example` in `Host`,
//!   so a server that checks hosts takes only loopback names (`localhost`,
//!   `*.localhost`), IP addresses (a browser that reaches the server by
//!   address is on the server's own origin), the host of the configured
//!   public URL, and the hosts the operator lists. The check is on for a
//!   server without tokens, and for any server whose operator lists hosts;
//!   a server with tokens needs no list, since a page cannot send them.
//! - **Site.** A page of another site can make a browser POST to any
//!   address (a form, `fetch` with `mode: "no-cors"`) even if it cannot
//!   read the answer: enough to cancel a run. A request that changes
//!   anything (every method but GET, HEAD and OPTIONS) is refused when the
//!   browser says it comes from elsewhere: `Sec-Fetch-Site` other than
//!   `same-origin` or `none`, or an `Origin` that is not the server's own
//!   nor one allowed by CORS. A request with neither header (curl, a
//!   program) is not a browser's cross-site request and goes on.
//! - **Body type.** Such a request with a body must send it as JSON
//!   (`application/json` or `application/*+json`). HTML forms can only
//!   send other types, so even a browser too old to send `Origin` cannot
//!   submit one to the API. The one exception is Slack's interactions
//!   route, which Slack posts form-encoded: it takes only requests signed
//!   with the Slack app's secret in a header no form can set.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{CONTENT_TYPE, HOST, ORIGIN};
use axum::http::{HeaderMap, Method, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// The header a browser names the relation of the requesting page to the
/// server in (`same-origin`, `same-site`, `cross-site`, `none`).
const SEC_FETCH_SITE: &str = "sec-fetch-site";

/// The rules of one server (see the module's docs).
#[derive(Debug, Clone, Default)]
pub(crate) struct Guard {
    /// The host names accepted besides loopback names and IP addresses,
    /// lowercase, without port; `None`: any host.
    hosts: Option<Vec<String>>,
    /// Origins whose pages may call the server (CORS); `any_origin`: all.
    origins: Vec<String>,
    any_origin: bool,
}

impl Guard {
    /// The rules for a server: hosts are checked when `check_hosts`, and
    /// then `hosts` are accepted besides the loopback names and addresses;
    /// pages of `cors_origins` (`*`: any) may change things.
    pub(crate) fn new(check_hosts: bool, hosts: &[String], cors_origins: &[String]) -> Guard {
        Guard {
            hosts: check_hosts.then(|| hosts.iter().map(|h| h.to_ascii_lowercase()).collect()),
            origins: cors_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_owned())
                .collect(),
            any_origin: cors_origins.iter().any(|o| o == "*"),
        }
    }

    /// `Ok` when the request may go on; else why not.
    pub(crate) fn check(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
        let host = request_host(uri, headers);
        if let Some(allowed) = &self.hosts {
            let name = host.as_deref().map(host_name);
            if !name.is_some_and(|name| is_local(name) || allowed.iter().any(|a| a == name)) {
                return Err(ApiError::HostNotAllowed {
                    host: askloop::quoted_excerpt(&host.unwrap_or_default()),
                });
            }
        }
        if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return Ok(());
        }
        self.check_site(host.as_deref(), headers)?;
        if uri.path() == crate::slack::INTERACTIONS_PATH {
            return Ok(());
        }
        check_body_type(headers)
    }

    /// Refuses a browser's request from a page of another origin, unless
    /// CORS allows that origin. As Go's `CrossOriginProtection` decides:
    /// a browser's `Sec-Fetch-Site` (which no page can set) is believed
    /// when sent; older browsers send only `Origin`, compared with `Host`.
    fn check_site(&self, host: Option<&str>, headers: &HeaderMap) -> Result<(), ApiError> {
        let origin = headers
            .get(ORIGIN)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        if let Some(origin) = &origin
            && (self.any_origin || self.origins.iter().any(|o| o == origin.trim_end_matches('/')))
        {
            return Ok(());
        }
        let site = headers
            .get(SEC_FETCH_SITE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).to_ascii_lowercase());
        let same = match (&site, &origin) {
            (Some(site), _) => site == "same-origin" || site == "none",
            (None, Some(origin)) => same_origin(origin, host),
            (None, None) => true,
        };
        if same {
            return Ok(());
        }
        Err(ApiError::CrossSite {
            from: origin.map_or_else(
                || format!("a {} page", askloop::quoted_excerpt(&site.unwrap_or_default())),
                |origin| askloop::quoted_excerpt(&origin),
            ),
        })
    }
}

/// Applies the server's [`Guard`] to every request.
pub(crate) async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    match guard.check(request.method(), request.uri(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(err) => err.into_response(),
    }
}

/// The `host[:port]` the request names: its `Host` header, else the
/// authority of its target (`GET http://host/ HTTP/1.1`).
fn request_host(uri: &Uri, headers: &HeaderMap) -> Option<String> {
    headers
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| uri.authority().map(|a| a.as_str().to_owned()))
}

/// The host of `host[:port]`, without the port (an IPv6 address keeps its
/// brackets).
fn host_name(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.find(']').map_or(authority, |end| &authority[..=end]);
    }
    authority.rsplit_once(':').map_or(authority, |(host, _)| host)
}

/// Whether `name` can only be this machine or is an address: names under
/// `localhost` resolve to loopback in every browser (RFC 6761), and an IP
/// address cannot be rebound to another one.
fn is_local(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<IpAddr>().is_ok()
        || name
            .strip_prefix('[')
            .and_then(|n| n.strip_suffix(']'))
            .is_some_and(|n| n.parse::<IpAddr>().is_ok())
}

/// Whether `origin` (`scheme://host[:port]`) is the server's own origin as
/// the request names it in `Host`. The scheme is not compared: behind a
/// proxy that ends TLS, the page is `https://` and the server hears plain
/// HTTP; the port is, with the scheme's default filled in.
fn same_origin(origin: &str, host: Option<&str>) -> bool {
    let Some(host) = host else { return false };
    let Ok(origin) = origin.parse::<Uri>() else {
        return false;
    };
    let (Some(scheme), Some(authority)) = (origin.scheme_str(), origin.authority()) else {
        return false;
    };
    let default_port = if scheme.eq_ignore_ascii_case("https") { 443 } else { 80 };
    let origin_port = authority.port_u16().unwrap_or(default_port);
    let (host_only, host_port) = match host.parse::<axum::http::uri::Authority>() {
        Ok(a) => (a.host().to_owned(), a.port_u16()),
        Err(_) => return false,
    };
    authority.host().eq_ignore_ascii_case(&host_only) && host_port.unwrap_or(default_port) == origin_port
}

/// Refuses a body that is not JSON: a `Content-Type` other than
/// `application/json` or `application/*+json`. A request with no
/// `Content-Type` goes on (a bodiless POST from curl; a body without a
/// type is refused by the route that reads it).
fn check_body_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(CONTENT_TYPE) else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    let essence = text.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    let json = essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|subtype| subtype.ends_with("+json"));
    if json {
        return Ok(());
    }
    Err(ApiError::UnsupportedMediaType {
        content_type: askloop::quoted_excerpt(&text),
    })
}

/// Whether `text` is a host name (letters, digits, `-` and `.`) or an IP
/// address, as an operator may list it.
pub fn is_host_name(text: &str) -> bool {
    let name_like = !text.is_empty()
        && text.len() <= 253
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    name_like || is_local(text)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_static(v));
        }
        map
    }

    fn code(result: Result<(), ApiError>) -> &'static str {
        match result {
            Ok(()) => "ok",
            Err(err) => err.status_and_code().1,
        }
    }

    const POST: Method = Method::POST;

    fn uri() -> Uri {
        Uri::from_static("/api/runs/r/cancel")
    }

    #[test]
    fn a_checking_server_takes_loopback_names_addresses_and_listed_hosts_only() {
        let guard = Guard::new(true, &["Askloop.Example.com".into()], &[]);
        for host in [
            "127.0.0.1:4111",
            "localhost:4111",
            "LOCALHOST",
            "app.localhost:4111",
            "[::1]:4111",
            "10.1.2.3",
            "askloop.example.com",
            "askloop.example.com:443",
        ] {
            let map = headers(&[("host", host)]);
            assert_eq!(code(guard.check(&Method::GET, &uri(), &map)), "ok", "{host}");
        }
        for host in [
            "attacker.example:4111",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "example.com",
        ] {
            let map = headers(&[("host", host)]);
            assert_eq!(
                code(guard.check(&Method::GET, &uri(), &map)),
                "host_not_allowed",
                "{host}"
            );
        }
        assert_eq!(
            code(guard.check(&Method::GET, &uri(), &HeaderMap::new())),
            "host_not_allowed",
            "a request naming no host"
        );
    }

    #[test]
    fn a_server_that_does_not_check_hosts_takes_any() {
        let guard = Guard::new(false, &[], &[]);
        let map = headers(&[("host", "attacker.example")]);
        assert_eq!(code(guard.check(&Method::GET, &uri(), &map)), "ok");
    }

    #[test]
    fn a_change_from_another_site_is_refused_and_one_from_the_server_s_own_page_or_a_program_is_not() {
        let guard = Guard::new(true, &[], &[]);
        let cases = [
            (vec![("host", "127.0.0.1:4111")], "ok"),
            (
                vec![
                    ("host", "127.0.0.1:4111"),
                    ("origin", "http://127.0.0.1:4111"),
                    ("sec-fetch-site", "same-origin"),
                ],
                "ok",
            ),
            (
                vec![("host", "localhost:4111"), ("origin", "http://localhost:4111")],
                "ok",
            ),
            (
                vec![("host", "127.0.0.1:4111"), ("origin", "http://evil.example")],
                "cross_site",
            ),
            (
                vec![("host", "127.0.0.1:4111"), ("sec-fetch-site", "cross-site")],
                "cross_site",
            ),
            // Another port of the same host is the same site, not the same origin.
            (
                vec![
                    ("host", "127.0.0.1:4111"),
                    ("origin", "http://127.0.0.1:3000"),
                    ("sec-fetch-site", "same-site"),
                ],
                "cross_site",
            ),
            (
                vec![("host", "127.0.0.1:4111"), ("origin", "http://127.0.0.1:3000")],
                "cross_site",
            ),
            (vec![("host", "127.0.0.1:4111"), ("origin", "null")], "cross_site"),
        ];
        for (pairs, expected) in cases {
            let map = headers(&pairs);
            assert_eq!(code(guard.check(&POST, &uri(), &map)), expected, "{pairs:?}");
            // Reads are never refused for their site.
            assert_eq!(code(guard.check(&Method::GET, &uri(), &map)), "ok", "{pairs:?}");
        }
    }

    #[test]
    fn an_origin_allowed_by_cors_may_change_things() {
        let guard = Guard::new(false, &[], &["https://app.example.com/".into()]);
        let map = headers(&[
            ("host", "api.example.com"),
            ("origin", "https://app.example.com"),
            ("sec-fetch-site", "cross-site"),
        ]);
        assert_eq!(code(guard.check(&POST, &uri(), &map)), "ok");
        let other = headers(&[("host", "api.example.com"), ("origin", "https://other.example.com")]);
        assert_eq!(code(guard.check(&POST, &uri(), &other)), "cross_site");
        let any = Guard::new(false, &[], &["*".into()]);
        assert_eq!(code(any.check(&POST, &uri(), &other)), "ok");
    }

    #[test]
    fn behind_a_proxy_the_page_s_own_requests_are_its_own() {
        let guard = Guard::new(false, &[], &[]);
        // A proxy that ends TLS and forwards the public Host.
        for host in ["askloop.example.com", "askloop.example.com:443"] {
            let map = headers(&[("host", host), ("origin", "https://askloop.example.com")]);
            assert_eq!(code(guard.check(&POST, &uri(), &map)), "ok", "{host}");
        }
        // A proxy that rewrites Host: the browser's word that the page is
        // the server's own is believed.
        let rewritten = headers(&[
            ("host", "127.0.0.1:4111"),
            ("origin", "https://askloop.example.com"),
            ("sec-fetch-site", "same-origin"),
        ]);
        assert_eq!(code(guard.check(&POST, &uri(), &rewritten)), "ok");
        let elsewhere = headers(&[
            ("host", "askloop.example.com"),
            ("origin", "https://askloop.example.com:8443"),
        ]);
        assert_eq!(code(guard.check(&POST, &uri(), &elsewhere)), "cross_site");
    }

    #[test]
    fn a_change_whose_body_is_not_json_is_refused_naming_its_type() {
        let guard = Guard::new(true, &[], &[]);
        for (content_type, expected) in [
            ("application/json", "ok"),
            ("application/json; charset=utf-8", "ok"),
            ("Application/JSON", "ok"),
            ("application/merge-patch+json", "ok"),
            ("text/plain", "unsupported_media_type"),
            ("application/x-www-form-urlencoded", "unsupported_media_type"),
            ("multipart/form-data; boundary=x", "unsupported_media_type"),
            ("text/json", "unsupported_media_type"),
        ] {
            let map = headers(&[("host", "127.0.0.1:4111"), ("content-type", content_type)]);
            assert_eq!(code(guard.check(&POST, &uri(), &map)), expected, "{content_type}");
        }
    }
}
