//! The person a proxy in front names in a header (`author_header`): read
//! from the request, or why it cannot be. Who may then do what is
//! `auth.rs`'s to decide; how a refusal reads is `error.rs`'s.

use axum::http::{HeaderMap, HeaderName};

/// Why a request behind a proxy names no person it can act as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PersonProblem {
    /// The header is not in the request.
    #[error("the request has no such header")]
    Missing,
    /// The header came more than once: a proxy that adds its own without
    /// removing the client's.
    #[error("the header came {0} times; the proxy must send exactly one (and drop the client's)")]
    Repeated(usize),
    /// It holds nothing but white space.
    #[error("the header is empty")]
    Empty,
    /// A `%` that starts no `%XX`, or bytes that are not UTF-8 (as sent, or
    /// once percent-decoded).
    #[error(
        "the header is not UTF-8 text (as sent, or percent-encoded: a `%` must start `%XX`, a literal `%` is `%25`)"
    )]
    NotUtf8,
    /// The name is not a valid resource id.
    #[error("{0}")]
    Invalid(askloop::IdProblem),
}

/// The person a proxy names in `header` (see the module's rules): the
/// value as UTF-8, percent-decoded when it holds a `%`, trimmed, and a
/// valid resource id.
pub(crate) fn person_named(headers: &HeaderMap, header: &HeaderName) -> Result<String, PersonProblem> {
    let mut values = headers.get_all(header).iter();
    let value = values.next().ok_or(PersonProblem::Missing)?;
    let repeated = values.count();
    if repeated > 0 {
        return Err(PersonProblem::Repeated(repeated + 1));
    }
    let bytes = value.as_bytes();
    let decoded = if bytes.contains(&b'%') {
        if !well_percent_encoded(bytes) {
            return Err(PersonProblem::NotUtf8);
        }
        percent_encoding::percent_decode(bytes)
            .decode_utf8()
            .map_err(|_| PersonProblem::NotUtf8)?
            .into_owned()
    } else {
        std::str::from_utf8(bytes)
            .map_err(|_| PersonProblem::NotUtf8)?
            .to_owned()
    };
    let name = decoded.trim();
    if name.is_empty() {
        return Err(PersonProblem::Empty);
    }
    askloop::IdKind::Resource
        .check(name)
        .map_err(|err| PersonProblem::Invalid(err.problem))?;
    Ok(name.to_owned())
}

/// Whether every `%` in `bytes` starts a `%XX` of two hex digits.
fn well_percent_encoded(bytes: &[u8]) -> bool {
    bytes.iter().enumerate().all(|(i, &b)| {
        b != b'%'
            || bytes
                .get(i + 1..i + 3)
                .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    })
}
