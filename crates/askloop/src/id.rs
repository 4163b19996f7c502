//! The rule for ids a client chooses (a run's id, a thread's): one rule,
//! checked where an id enters askloop, so every store, URL and log line
//! carries every accepted id the same way.
//!
//! An id is 1 to [`MAX_ID_BYTES`] bytes of UTF-8, with no control character
//! (Unicode `Cc`: NUL, DEL, line breaks, ...), no white space at either
//! end, and is not `.` or `..`. Anything else is allowed: spaces inside,
//! `/`, `?`, `#`, non-ASCII text. URLs carry an id percent-encoded as one
//! path segment ([`url_path_segment`]).
//!
//! Why these limits: PostgreSQL refuses NUL in text, and an index key or a
//! `NOTIFY` payload holding the id has a size limit of a few kilobytes;
//! white space at an end is lost by copying and trimming; a browser
//! resolves the path segments `.` and `..` away, so such a run could never
//! be opened on the page. 256 bytes holds any UUID, slug or composite key
//! (`tenant-7:ticket-1234:attempt-2`) with room to spare.

use std::fmt::{self, Write};

/// The most bytes (UTF-8) an id a client chooses may have.
pub const MAX_ID_BYTES: usize = 256;

/// How much of a refused id an error message shows, in characters: enough
/// to recognise it, never the whole of a huge one.
const SHOWN_CHARS: usize = 40;

/// Which kind of id a client chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdKind {
    /// A run's id (`runId`).
    Run,
    /// A thread's id (`threadId`).
    Thread,
    /// A resource's id (`resourceId`): whom a thread belongs to.
    Resource,
}

impl IdKind {
    /// Checks `id` against the rule: 1 to [`MAX_ID_BYTES`] bytes of UTF-8, no
    /// control character, no white space at either end, not `.` or `..`.
    ///
    /// ```
    /// use askloop::{IdKind, IdProblem};
    /// assert!(IdKind::Run.check("deploy 2026/12 #4").is_ok());
    /// let err = IdKind::Run.check("..").unwrap_err();
    /// assert_eq!(err.problem, IdProblem::DotSegment);
    /// assert!(err.to_string().starts_with("run id \"..\" is refused"));
    /// ```
    pub fn check(self, id: &str) -> Result<(), InvalidId> {
        match problem(id) {
            None => Ok(()),
            Some(problem) => Err(InvalidId {
                kind: self,
                problem,
                shown: quoted_excerpt(id),
            }),
        }
    }

    /// The name of the kind in messages: `run id`.
    pub fn as_str(self) -> &'static str {
        match self {
            IdKind::Run => "run id",
            IdKind::Thread => "thread id",
            IdKind::Resource => "resource id",
        }
    }
}

impl fmt::Display for IdKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is wrong with a refused id.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdProblem {
    /// It is empty.
    Empty,
    /// It is longer than [`MAX_ID_BYTES`].
    TooLong {
        /// Its length in bytes.
        bytes: usize,
    },
    /// It holds a control character.
    ControlCharacter {
        /// The first one.
        character: char,
        /// Its byte offset.
        at: usize,
    },
    /// It starts or ends with white space.
    SurroundingWhiteSpace,
    /// It is `.` or `..`.
    DotSegment,
}

impl fmt::Display for IdProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdProblem::Empty => f.write_str("it is empty"),
            IdProblem::TooLong { bytes } => write!(f, "it is {bytes} bytes long"),
            IdProblem::ControlCharacter { character, at } => write!(
                f,
                "it holds the control character U+{:04X} at byte {at}",
                u32::from(*character)
            ),
            IdProblem::SurroundingWhiteSpace => f.write_str("it starts or ends with white space"),
            IdProblem::DotSegment => f.write_str("`.` and `..` cannot be opened as a URL path segment"),
        }
    }
}

/// An id a client chose that the rule refuses: which kind of id, what was
/// wrong, and (in the message) what is accepted. The message shows at most
/// the first 40 characters of the id, escaped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{kind} {shown} is refused: {problem}; a {kind} is 1 to {MAX_ID_BYTES} bytes of UTF-8 with no control \
     characters and no white space at either end, and is not `.` or `..`"
)]
pub struct InvalidId {
    /// Which kind of id.
    pub kind: IdKind,
    /// What was wrong.
    pub problem: IdProblem,
    /// The start of the id, quoted and escaped.
    shown: String,
}

fn problem(id: &str) -> Option<IdProblem> {
    if id.is_empty() {
        return Some(IdProblem::Empty);
    }
    if id.len() > MAX_ID_BYTES {
        return Some(IdProblem::TooLong { bytes: id.len() });
    }
    if let Some((at, character)) = id.char_indices().find(|(_, c)| c.is_control()) {
        return Some(IdProblem::ControlCharacter { character, at });
    }
    if id.starts_with(char::is_whitespace) || id.ends_with(char::is_whitespace) {
        return Some(IdProblem::SurroundingWhiteSpace);
    }
    if id == "." || id == ".." {
        return Some(IdProblem::DotSegment);
    }
    None
}

/// Text a client sent, for an error message: quoted and escaped
/// (`"a\0b"`), and cut after 40 characters (`"aaaa…"`), so a message never
/// carries a huge input back.
///
/// ```
/// assert_eq!(askloop::quoted_excerpt("a\0b"), r#""a\0b""#);
/// assert_eq!(askloop::quoted_excerpt(&"x".repeat(5000)), format!("\"{}…\"", "x".repeat(40)));
/// ```
pub fn quoted_excerpt(text: &str) -> String {
    match text.char_indices().nth(SHOWN_CHARS) {
        None => format!("{text:?}"),
        Some((cut, _)) => {
            let quoted = format!("{:?}", &text[..cut]);
            format!("{}…\"", &quoted[..quoted.len() - 1])
        }
    }
}

/// `id` percent-encoded as one URL path segment: every byte but ASCII
/// letters, digits and `-._~` is written `%XX`, so `/`, `?`, `#`, spaces
/// and non-ASCII text stay inside the segment.
///
/// ```
/// assert_eq!(askloop::url_path_segment("a b/c?d#e<x>"), "a%20b%2Fc%3Fd%23e%3Cx%3E");
/// ```
pub fn url_path_segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// Where a run is shown on askloop's web page served at `page` (a base URL
/// such as `https://askloop.example.com`): `<page>/runs/<run id>`, the id
/// encoded as one path segment. Webhook notifications and MCP results that
/// send a person to answer link here.
///
/// ```
/// assert_eq!(
///     askloop::run_page_url("http://127.0.0.1:4111/", "a b/c"),
///     "http://127.0.0.1:4111/runs/a%20b%2Fc"
/// );
/// ```
pub fn run_page_url(page: &str, run_id: &str) -> String {
    format!("{}/runs/{}", page.trim_end_matches('/'), url_path_segment(run_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_any_text_within_the_rule_are_accepted() {
        for id in [
            "a",
            "019abc-uuid",
            "deploy 2026/12 #4?x",
            "運行-1",
            "a b/c?d#e<x>",
            "...",
            ".a",
            &"x".repeat(MAX_ID_BYTES),
        ] {
            assert_eq!(IdKind::Run.check(id), Ok(()), "{id:?}");
        }
    }

    #[test]
    fn each_broken_clause_is_named() {
        let cases = [
            ("", IdProblem::Empty),
            (&*"x".repeat(MAX_ID_BYTES + 1), IdProblem::TooLong { bytes: 257 }),
            ("a\0b", IdProblem::ControlCharacter { character: '\0', at: 1 }),
            (
                "ab\u{7f}",
                IdProblem::ControlCharacter {
                    character: '\u{7f}',
                    at: 2,
                },
            ),
            ("a\nb", IdProblem::ControlCharacter { character: '\n', at: 1 }),
            (" a", IdProblem::SurroundingWhiteSpace),
            ("a\u{3000}", IdProblem::SurroundingWhiteSpace),
            ("   ", IdProblem::SurroundingWhiteSpace),
            (".", IdProblem::DotSegment),
            ("..", IdProblem::DotSegment),
        ];
        for (id, problem) in cases {
            let err = IdKind::Thread.check(id).unwrap_err();
            assert_eq!((err.kind, &err.problem), (IdKind::Thread, &problem), "{id:?}");
        }
    }

    #[test]
    fn the_message_names_the_kind_the_problem_and_the_rule_and_shows_only_the_start_of_the_id() {
        let err = IdKind::Run.check(&"é".repeat(50_000)).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("run id \"{}…\" is refused", "é".repeat(40))),
            "{err}"
        );
        assert!(err.contains("it is 100000 bytes long"), "{err}");
        assert!(
            err.contains("1 to 256 bytes of UTF-8 with no control characters"),
            "{err}"
        );
        assert!(err.len() < 400, "{err}");

        let err = IdKind::Run.check("a\0b").unwrap_err().to_string();
        assert!(
            err.starts_with(r#"run id "a\0b" is refused: it holds the control character U+0000 at byte 1"#),
            "{err}"
        );
    }

    #[test]
    fn a_path_segment_keeps_unreserved_characters_and_encodes_every_other_byte() {
        assert_eq!(url_path_segment("Run-1._~"), "Run-1._~");
        assert_eq!(url_path_segment("é %"), "%C3%A9%20%25");
        assert_eq!(run_page_url("https://x.example", "a/b"), "https://x.example/runs/a%2Fb");
    }
}
