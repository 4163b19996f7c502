//! Who is calling: the API tokens every `/api` route and `/mcp` need when
//! the server has some, the agents each may act for, and the author a
//! resolution is recorded with.
//!
//! - A request must carry `Authorization: Bearer <secret>` of one of the
//!   server's tokens (none configured: no token needed; the scheme's case
//!   does not matter, as RFC 9110 says). The SHA-256 digest of what was
//!   sent is compared with every token's, each in constant time: the time
//!   taken says nothing about which token matched, how much of one, or how
//!   long the secrets are.
//! - A secret must not start or end with white space (a header's value is
//!   read without it, so such a token could never match), and must be at
//!   least [`MIN_SECRET_CHARS`] characters on a server reachable beyond
//!   loopback ([`check_secrets`]).
//! - A token limited to some agents (`agents = [...]` in `askloop.toml`) may
//!   only see and act on those agents and their runs; anything else is a
//!   403 naming the token and the agent, decided before anything is read or
//!   written for the request.
//! - A named token (`[[tokens]]`), or a person the author header names, is
//!   walled to resources: it may use only their threads, and see and act
//!   only on the runs that belong to them, on their threads or started by
//!   them on no thread ([`Caller::may_see`]); another resource's run, and a
//!   run of no resource, answers as an unknown one.
//! - Behind a proxy (`author_header` configured), every request must name
//!   its person in that header, and the person is who the request acts as:
//!   its author and its only resource. A request whose header is missing,
//!   sent more than once, empty, or not a name ([`person_named`](crate::person::person_named)) is a 401
//!   naming the header, never run as the token, unless the token is marked
//!   to act without a person ([`ApiToken::acts_without_person`]) and the
//!   header is absent altogether. A name is UTF-8, sent as is or
//!   percent-encoded (`Jos%C3%A9`, as some proxies send anything beyond
//!   ASCII; a `%` that starts no `%XX` is refused, so a literal `%` is sent
//!   as `%25`), and must be a valid resource id once decoded and trimmed
//!   (1 to 256 bytes, no control character). The proxy in front must set
//!   the header on every request and strip it from what clients send, or
//!   anyone could write any name.
//! - Without a proxy, the author is the token's name; the interface is the
//!   page when it says so (`X-Askloop-Interface: page`), else HTTP.

use std::fmt;
use std::sync::Arc;

use askloop::{Author, Interface, RunRecord};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::AppState;
use crate::error::ApiError;
use crate::person::{PersonProblem, person_named};

/// The name recorded for the token given as `ASKLOOP_API_TOKEN`
/// ([`crate::ServerOptions::token`]).
pub const DEFAULT_TOKEN_NAME: &str = "api-token";

/// The fewest characters a secret may have on a server that listens
/// beyond loopback; on loopback, a shorter one is only warned about.
pub const MIN_SECRET_CHARS: usize = 16;

/// The header the web page sends with its requests, so that what a person
/// did on the page is recorded as done through the page.
pub(crate) const INTERFACE_HEADER: &str = "x-askloop-interface";

/// One API token: the name recorded as the author of what is done with it,
/// its secret, and the agents it may act for.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken {
    name: String,
    secret: String,
    digest: [u8; 32],
    agents: Option<Vec<String>>,
    resources: Option<Vec<String>>,
    without_person: bool,
}

impl ApiToken {
    /// A token named `name` (recorded as the author of what is done with
    /// it) whose requests carry `Authorization: Bearer <secret>`; it may act
    /// for every agent until [`ApiToken::only_agents`] limits it.
    pub fn new(name: impl Into<String>, secret: impl Into<String>) -> Self {
        let secret = secret.into();
        ApiToken {
            name: name.into(),
            digest: digest(&secret),
            secret,
            agents: None,
            resources: None,
            without_person: false,
        }
    }

    /// Lets the token act as itself when a request names no person on a
    /// server behind a proxy (`author_header`): for a program that calls
    /// the server directly rather than through the proxy (`without_person =
    /// true` in `askloop.toml`). A request that sends the header must still
    /// name a person in it.
    pub fn acts_without_person(mut self) -> Self {
        self.without_person = true;
        self
    }

    /// Whether it may act without a person behind a proxy.
    pub fn may_act_without_person(&self) -> bool {
        self.without_person
    }

    /// Walls the token's threads: it may use only the threads of these
    /// resources (its own name and the ones it lists, as `[[tokens]]` in
    /// `askloop.toml` make it). A token without them (`ASKLOOP_API_TOKEN`)
    /// may name any resource: a resource is then a label, not a wall.
    pub fn only_resources(mut self, resources: Vec<String>) -> Self {
        self.resources = Some(resources);
        self
    }

    /// The resources whose threads it may use (`None`: any).
    pub fn resources(&self) -> Option<&[String]> {
        self.resources.as_deref()
    }

    /// Limits the token to these agents: it may see and act on them and
    /// their runs only.
    pub fn only_agents(mut self, agents: Vec<String>) -> Self {
        self.agents = Some(agents);
        self
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The agents it may act for (`None`: every agent).
    pub fn agents(&self) -> Option<&[String]> {
        self.agents.as_deref()
    }

    pub(crate) fn secret(&self) -> &str {
        &self.secret
    }
}

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiToken")
            .field("name", &self.name)
            .field("secret", &"<set>")
            .field("agents", &self.agents)
            .field("resources", &self.resources)
            .field("without_person", &self.without_person)
            .finish()
    }
}

/// The server's tokens and author header, as every request is checked
/// against them.
#[derive(Debug, Default)]
pub(crate) struct Access {
    pub(crate) tokens: Vec<ApiToken>,
    pub(crate) author_header: Option<HeaderName>,
}

/// Who made a request: the token (if the server has tokens), the agents it
/// may act for, and who to record as the author.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    token: Option<String>,
    agents: Option<Arc<[String]>>,
    /// The resources whose threads the caller may use (`None`: any).
    resources: Option<Arc<[String]>>,
    author: Author,
}

impl Caller {
    /// Anyone, on a server without tokens (through the HTTP API).
    fn anyone() -> Self {
        Caller {
            token: None,
            agents: None,
            resources: None,
            author: Author::via(Interface::Http),
        }
    }

    /// Whether the caller may see and act on `agent_id` and its runs.
    pub(crate) fn may_act_for(&self, agent_id: &str) -> bool {
        self.agents
            .as_ref()
            .is_none_or(|agents| agents.iter().any(|a| a == agent_id))
    }

    /// `Ok` when the caller may act for `agent_id`, else the 403.
    pub(crate) fn check(&self, agent_id: &str) -> Result<(), ApiError> {
        if self.may_act_for(agent_id) {
            return Ok(());
        }
        Err(ApiError::Forbidden {
            token: self.token.clone().unwrap_or_default(),
            agent_id: agent_id.to_owned(),
            allowed: self.agents.as_deref().map(<[String]>::to_vec).unwrap_or_default(),
        })
    }

    /// The name of the caller's token (`None` on a server without tokens).
    pub(crate) fn token_name(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The agents the caller is limited to (`None`: every agent).
    pub(crate) fn agents(&self) -> Option<&[String]> {
        self.agents.as_deref()
    }

    /// The resources whose threads the caller may use (`None`: any, on a
    /// server without named tokens or an author header).
    pub(crate) fn resources(&self) -> Option<&[String]> {
        self.resources.as_deref()
    }

    /// Whether the caller may use threads of `resource_id`.
    fn may_use(&self, resource_id: &str) -> bool {
        self.resources()
            .is_none_or(|allowed| allowed.iter().any(|r| r == resource_id))
    }

    /// Whether the caller may see and act on `run`: a run of an agent it may
    /// act for that, for a caller walled to resources, belongs to one of
    /// them ([`RunRecord::resource`]: on one of their threads, or started
    /// by one of them on no thread). A run of no resource (started by a
    /// caller walled to none, or stored before runs kept their resource) is
    /// seen only by callers walled to none. Every route that reads or
    /// changes a run by its id, and every listing of runs, goes by this one
    /// rule; a run it refuses is answered exactly as one that does not
    /// exist, so what a token learns does not depend on runs walled off
    /// from it.
    pub(crate) fn may_see(&self, run: &RunRecord) -> bool {
        self.may_act_for(&run.agent_id)
            && self
                .resources()
                .is_none_or(|allowed| run.resource().is_some_and(|r| allowed.iter().any(|a| a == r)))
    }

    /// The resource a run this caller starts belongs to: the first it is
    /// walled to (the person a proxy named, or a named token's own name);
    /// `None` for a caller walled to none.
    pub(crate) fn own_resource(&self) -> Option<&str> {
        self.resources().and_then(<[String]>::first).map(String::as_str)
    }

    /// Whether the caller may see every run: it is limited to no agents and
    /// walled to no resource.
    pub(crate) fn sees_every_run(&self) -> bool {
        self.agents.is_none() && self.resources.is_none()
    }

    /// `Ok` when the caller may use threads of `resource_id`, else the 403,
    /// decided before anything is read.
    pub(crate) fn check_resource(&self, resource_id: &str) -> Result<(), ApiError> {
        match self.resources() {
            Some(allowed) if !self.may_use(resource_id) => Err(ApiError::ForeignResource {
                caller: self
                    .author
                    .by
                    .clone()
                    .or_else(|| self.token.clone())
                    .unwrap_or_default(),
                resource_id: resource_id.to_owned(),
                allowed: allowed.to_vec(),
            }),
            _ => Ok(()),
        }
    }

    /// The resource a listing of `what` (e.g. "threads") is limited to:
    /// the one named (`?resourceId=`), if the caller may use it; the
    /// caller's own when it is walled to one and names none; `None` (all)
    /// for a caller walled to none. A caller walled to several must name one.
    pub(crate) fn listing_resource(&self, named: Option<&str>, what: &str) -> Result<Option<String>, ApiError> {
        match (named, self.resources()) {
            (Some(resource), _) => {
                self.check_resource(resource)?;
                Ok(Some(resource.to_owned()))
            }
            (None, Some([only])) => Ok(Some(only.clone())),
            (None, Some(_)) => Err(ApiError::BadRequest(format!(
                "name the resource whose {what} to list with ?resourceId="
            ))),
            (None, None) => Ok(None),
        }
    }

    /// Who to record as the author of what this request resolves.
    pub(crate) fn author(&self) -> Author {
        self.author.clone()
    }

    /// What the MCP endpoint needs to know of the caller.
    fn for_mcp(&self) -> askloop_mcp::Caller {
        askloop_mcp::Caller {
            token: self.token.clone(),
            by: self.author.by.clone(),
            agents: self.agents.as_deref().map(<[String]>::to_vec),
            resources: self.resources.as_deref().map(<[String]>::to_vec),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    /// The caller the middleware found; a route outside it is called by
    /// anyone.
    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        Ok(parts.extensions.get::<Caller>().cloned().unwrap_or_else(Caller::anyone))
    }
}

impl Access {
    /// The caller of a request with these headers, or the 401 when the
    /// server has tokens and none of them was sent, or when it is behind a
    /// proxy and the request names no person it can act as.
    fn identify(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        let via = match headers.get(INTERFACE_HEADER).and_then(|v| v.to_str().ok()) {
            Some("page") => Interface::Page,
            _ => Interface::Http,
        };
        let token = if self.tokens.is_empty() {
            None
        } else {
            let given = headers
                .get(AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(bearer)
                .ok_or(ApiError::Unauthorized)?;
            Some(self.matching(given).ok_or(ApiError::Unauthorized)?)
        };
        let agents = token.and_then(|t| t.agents.as_deref()).map(Arc::from);
        let name = token.map(|t| t.name.clone());
        let Some(header) = &self.author_header else {
            return Ok(Caller {
                agents,
                resources: token.and_then(|t| t.resources.as_deref()).map(Arc::from),
                author: Author::maybe_named(via, name.clone()),
                token: name,
            });
        };
        match person_named(headers, header) {
            // Behind the author header, the person it names is the only
            // resource: a thread is that person's conversation.
            Ok(person) => Ok(Caller {
                agents,
                resources: Some(Arc::from(vec![person.clone()])),
                author: Author::named(via, person),
                token: name,
            }),
            Err(PersonProblem::Missing) if token.is_some_and(|t| t.without_person) => Ok(Caller {
                agents,
                resources: token.and_then(|t| t.resources.as_deref()).map(Arc::from),
                author: Author::maybe_named(via, name.clone()),
                token: name,
            }),
            Err(problem) => Err(ApiError::NoPerson {
                header: header.as_str().to_owned(),
                problem,
            }),
        }
    }

    /// The token whose secret is `given`. Digests of one length are
    /// compared, every one, in constant time each, whichever matches.
    fn matching(&self, given: &str) -> Option<&ApiToken> {
        let given = digest(given);
        let mut found = None;
        for token in &self.tokens {
            if bool::from(given.ct_eq(&token.digest)) {
                found = found.or(Some(token));
            }
        }
        found
    }
}

/// The credentials of an `Authorization: Bearer <credentials>` value; the
/// scheme in any case, the credentials without surrounding white space.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, credentials) = value.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| credentials.trim())
}

fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// A secret that cannot work, or is too short for where the server listens.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The secret starts or ends with white space.
    #[error(
        "the secret of the API token {} starts or ends with white space, so no request could ever match it; remove the white space",
        described(name)
    )]
    WhiteSpace {
        /// The token's name.
        name: String,
    },
    /// The secret is too short for a server reachable beyond loopback.
    #[error(
        "the secret of the API token {} has {chars} characters; a server listening beyond loopback needs at least {MIN_SECRET_CHARS} (e.g. openssl rand -hex 32)",
        described(name)
    )]
    TooShort {
        /// The token's name.
        name: String,
        /// Its length, in characters.
        chars: usize,
    },
}

/// A token's name as messages give it: the default token's says where its
/// secret came from.
fn described(name: &str) -> String {
    if name == DEFAULT_TOKEN_NAME {
        format!("{name} (ASKLOOP_API_TOKEN)")
    } else {
        name.to_owned()
    }
}

/// Checks every secret: one with white space at either end is an error;
/// one shorter than [`MIN_SECRET_CHARS`] is an error when `beyond_loopback`,
/// else returned as a warning.
pub(crate) fn check_secrets(tokens: &[ApiToken], beyond_loopback: bool) -> Result<Vec<TokenError>, TokenError> {
    let mut warnings = Vec::new();
    for token in tokens {
        if token.secret.trim() != token.secret {
            return Err(TokenError::WhiteSpace {
                name: token.name.clone(),
            });
        }
        let chars = token.secret.chars().count();
        if chars < MIN_SECRET_CHARS {
            let short = TokenError::TooShort {
                name: token.name.clone(),
                chars,
            };
            if beyond_loopback {
                return Err(short);
            }
            warnings.push(short);
        }
    }
    Ok(warnings)
}

/// Identifies the caller of every request it guards (the token it sent,
/// the author to record) and hands it on to the handlers; a request without
/// a known token, when the server has tokens, is a 401.
pub(crate) async fn require_token(State(state): State<Arc<AppState>>, mut request: Request, next: Next) -> Response {
    match state.access.identify(request.headers()) {
        Ok(caller) => {
            request.extensions_mut().insert(caller.for_mcp());
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(err) => err.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn access() -> Access {
        Access {
            tokens: vec![
                ApiToken::new("alice", "secret-a"),
                ApiToken::new("bot", "secret-b").only_agents(vec!["support".into()]),
            ],
            author_header: None,
        }
    }

    /// The same tokens behind a proxy that names people in
    /// `X-Forwarded-User`.
    fn proxied() -> Access {
        Access {
            author_header: Some(HeaderName::from_static("x-forwarded-user")),
            ..access()
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn each_token_is_known_by_its_name_and_a_wrong_or_missing_one_is_refused() {
        let access = access();
        let alice = access
            .identify(&headers(&[("authorization", "Bearer secret-a")]))
            .unwrap();
        assert_eq!(alice.author(), Author::named(Interface::Http, "alice"));
        assert!(alice.may_act_for("anything"));
        let bot = access
            .identify(&headers(&[("authorization", "Bearer secret-b")]))
            .unwrap();
        assert_eq!(bot.author(), Author::named(Interface::Http, "bot"));
        assert!(bot.may_act_for("support") && !bot.may_act_for("deployer"));
        for wrong in [
            headers(&[]),
            headers(&[("authorization", "Bearer secret-")]),
            headers(&[("authorization", "Bearer secret-aa")]),
            headers(&[("authorization", "secret-a")]),
            headers(&[("authorization", "Basic secret-a")]),
            headers(&[("authorization", "Bearersecret-a")]),
        ] {
            assert!(matches!(access.identify(&wrong), Err(ApiError::Unauthorized)));
        }
    }

    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        let access = access();
        for value in [
            "bearer secret-a",
            "BEARER secret-a",
            "Bearer  secret-a ",
            " bEaReR secret-a",
        ] {
            let mut map = HeaderMap::new();
            map.insert("authorization", HeaderValue::from_str(value).unwrap());
            let caller = access.identify(&map).unwrap_or_else(|_| panic!("{value:?}"));
            assert_eq!(caller.author(), Author::named(Interface::Http, "alice"), "{value:?}");
        }
    }

    #[test]
    fn a_secret_with_white_space_at_an_end_is_refused_and_a_short_one_is_refused_beyond_loopback_only() {
        for secret in [" 0123456789abcdef", "0123456789abcdef\n", "\t0123456789abcdef"] {
            let token = ApiToken::new("ops", secret);
            let err = check_secrets(&[token], false).unwrap_err();
            assert!(
                matches!(err, TokenError::WhiteSpace { ref name } if name == "ops"),
                "{secret:?}"
            );
            assert!(err.to_string().contains("white space"));
        }
        let short = vec![ApiToken::new("ci", "x"), ApiToken::new("ok", "0123456789abcdef")];
        let err = check_secrets(&short, true).unwrap_err();
        assert!(
            matches!(err, TokenError::TooShort { ref name, chars: 1 } if name == "ci"),
            "{err}"
        );
        assert!(err.to_string().contains("at least 16"), "{err}");
        let warnings = check_secrets(&short, false).unwrap();
        assert_eq!(warnings.len(), 1);
        assert!(check_secrets(&short[1..], true).unwrap().is_empty());
    }

    #[test]
    fn the_proxy_header_names_the_author_over_the_token_and_the_page_header_the_interface() {
        let access = proxied();
        let caller = access
            .identify(&headers(&[
                ("authorization", "Bearer secret-b"),
                ("x-forwarded-user", "carol"),
                ("x-askloop-interface", "page"),
            ]))
            .unwrap();
        assert_eq!(caller.author(), Author::named(Interface::Page, "carol"));
        assert!(!caller.may_act_for("deployer"), "the rights stay the token's");
    }

    /// A request whose author header carries exactly `value` (raw bytes).
    fn named(token: &str, value: &[u8]) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(
            "authorization",
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        );
        map.insert("x-forwarded-user", HeaderValue::from_bytes(value).unwrap());
        map
    }

    #[test]
    fn a_name_beyond_ascii_is_read_as_utf8_or_percent_encoded_and_walls_the_caller_to_that_person() {
        let access = proxied();
        for (sent, person) in [
            ("José".as_bytes(), "José"),
            ("Jos%C3%A9".as_bytes(), "José"),
            ("jos%c3%a9".as_bytes(), "josé"),
            ("🦀 ferris".as_bytes(), "🦀 ferris"),
            ("%F0%9F%A6%80%20ferris".as_bytes(), "🦀 ferris"),
            ("Doe, John".as_bytes(), "Doe, John"),
            ("100%25 sure".as_bytes(), "100% sure"),
            ("  carol  ".as_bytes(), "carol"),
        ] {
            let caller = access.identify(&named("secret-a", sent)).unwrap();
            assert_eq!(caller.author(), Author::named(Interface::Http, person), "{sent:?}");
            assert_eq!(caller.resources(), Some(&[person.to_owned()][..]), "{sent:?}");
        }
    }

    #[test]
    fn a_request_behind_the_proxy_without_a_readable_name_is_refused_never_run_as_the_token() {
        let access = proxied();
        let refused = |headers: &HeaderMap| match access.identify(headers) {
            Err(ApiError::NoPerson { header, problem }) => {
                assert_eq!(header, "x-forwarded-user");
                problem
            }
            other => panic!("expected no_person, got {other:?}"),
        };
        assert_eq!(
            refused(&headers(&[("authorization", "Bearer secret-a")])),
            PersonProblem::Missing
        );
        for empty in [&b""[..], b"   ", b"%20"] {
            assert_eq!(refused(&named("secret-a", empty)), PersonProblem::Empty, "{empty:?}");
        }
        for garbled in [&b"Jos\xe9"[..], b"Jos\xc3", b"50%", b"%zz", b"a%C3", b"%FF%FE"] {
            assert_eq!(
                refused(&named("secret-a", garbled)),
                PersonProblem::NotUtf8,
                "{garbled:?}"
            );
        }
        assert!(matches!(
            refused(&named("secret-a", b"a%0Ab")),
            PersonProblem::Invalid(askloop::IdProblem::ControlCharacter { .. })
        ));
        let mut twice = named("secret-a", b"alice");
        twice.append("x-forwarded-user", HeaderValue::from_static("mallory"));
        assert_eq!(refused(&twice), PersonProblem::Repeated(2));
        let err = access
            .identify(&headers(&[("authorization", "Bearer secret-a")]))
            .unwrap_err();
        assert_eq!(
            err.status_and_code(),
            (axum::http::StatusCode::UNAUTHORIZED, "no_person")
        );
        let message = err.to_string();
        assert!(
            message.contains("x-forwarded-user") && message.contains("without_person"),
            "{message}"
        );
    }

    #[test]
    fn a_token_marked_to_act_without_a_person_acts_as_itself_only_when_no_name_is_sent() {
        let access = Access {
            tokens: vec![
                ApiToken::new("ci", "secret-c")
                    .only_resources(vec!["ci".into()])
                    .acts_without_person(),
            ],
            author_header: Some(HeaderName::from_static("x-forwarded-user")),
        };
        let alone = access
            .identify(&headers(&[("authorization", "Bearer secret-c")]))
            .unwrap();
        assert_eq!(alone.author(), Author::named(Interface::Http, "ci"));
        assert_eq!(alone.resources(), Some(&["ci".to_owned()][..]));
        let carol = access.identify(&named("secret-c", b"carol")).unwrap();
        assert_eq!(carol.author(), Author::named(Interface::Http, "carol"));
        assert!(matches!(
            access.identify(&named("secret-c", b" ")),
            Err(ApiError::NoPerson {
                problem: PersonProblem::Empty,
                ..
            })
        ));
    }

    #[test]
    fn the_author_header_is_ignored_unless_configured() {
        let access = Access::default();
        let caller = access.identify(&headers(&[("x-forwarded-user", "mallory")])).unwrap();
        assert_eq!(caller.author(), Author::via(Interface::Http));
    }

    #[test]
    fn a_limited_token_is_refused_naming_the_token_and_the_agent() {
        let access = access();
        let bot = access
            .identify(&headers(&[("authorization", "Bearer secret-b")]))
            .unwrap();
        let err = bot.check("deployer").unwrap_err();
        assert_eq!(err.status_and_code().1, "forbidden");
        let message = err.to_string();
        assert!(
            message.contains("bot") && message.contains("deployer") && message.contains("support"),
            "{message}"
        );
    }
}
