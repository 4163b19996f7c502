//! What is wrong with a request hyper refused with 400, read from its first
//! bytes. hyper does not say (its error is only logged, and only after the
//! refusal is written), so this follows the same rules it applies: the
//! request line, each header line, then Content-Length and
//! Transfer-Encoding. A fault not found here (or past the bytes kept) is
//! described by what the server accepts.

/// What is wrong with the request whose first bytes are `kept`.
pub(super) fn what_is_wrong(kept: &[u8]) -> String {
    find_fault(kept).unwrap_or_else(|| {
        "the request is not HTTP/1.1 that this server can read: it takes a request line \
         `METHOD /path HTTP/1.1`, then header lines `Name: value`, each ending in CRLF, then an \
         empty line"
            .to_owned()
    })
}

fn find_fault(kept: &[u8]) -> Option<String> {
    let (head, whole) = match kept.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(end) => (&kept[..end], true),
        None => (kept, false),
    };
    let mut lines: Vec<&[u8]> = head
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .collect();
    if !whole {
        // The last line may be cut short.
        lines.pop();
    }
    // Empty lines before a request are allowed.
    let mut lines = lines.into_iter().skip_while(|line| line.is_empty());
    let http_10 = match request_line(lines.next()?) {
        Ok(http_10) => http_10,
        Err(HeadFault(fault)) => return Some(fault),
    };
    let mut length: Option<u64> = None;
    let mut encoding: Option<&[u8]> = None;
    for line in lines {
        let (name, value) = match header(line) {
            Ok(header) => header,
            Err(HeadFault(fault)) => return Some(fault),
        };
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            if http_10 {
                return Some("Transfer-Encoding is not allowed in an HTTP/1.0 request; give Content-Length".into());
            }
            encoding = Some(value);
        } else if name.eq_ignore_ascii_case(b"content-length") && encoding.is_none() {
            let Some(n) = whole_number(value) else {
                return Some(format!(
                    "Content-Length {} is not a whole number of bytes",
                    quoted(value)
                ));
            };
            match length {
                Some(first) if first != n => {
                    return Some(format!(
                        "Content-Length is given twice, as {first} and {n}; give it once"
                    ));
                }
                _ => length = Some(n),
            }
        }
    }
    let last_coding = encoding.map(|value| value.rsplit(|&b| b == b',').next().unwrap_or_default().trim_ascii());
    match last_coding {
        Some(coding) if !coding.eq_ignore_ascii_case(b"chunked") => Some(format!(
            "Transfer-Encoding {} does not end with chunked, so the body has no known end; send it chunked, or with Content-Length",
            quoted(encoding.unwrap_or_default())
        )),
        _ => None,
    }
}

/// What is wrong with a line of the request's head, in words for the
/// client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
struct HeadFault(String);

/// Checks the request line; whether it is HTTP/1.0.
fn request_line(line: &[u8]) -> Result<bool, HeadFault> {
    let parts: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    let [method, target, version] = parts[..] else {
        return Err(HeadFault(not_a_request_line(line)));
    };
    if method.is_empty() || !method.iter().copied().all(is_token) {
        return Err(HeadFault(not_a_request_line(line)));
    }
    if version != b"HTTP/1.1" && version != b"HTTP/1.0" {
        return Err(HeadFault(format!(
            "the request line {} asks for the version {}; this server speaks HTTP/1.1 (and HTTP/1.0)",
            quoted(line),
            quoted(version)
        )));
    }
    target_fault(target).map_or(Ok(version == b"HTTP/1.0"), |fault| Err(HeadFault(fault)))
}

fn not_a_request_line(line: &[u8]) -> String {
    format!("the request line {} is not `METHOD /path HTTP/1.1`", quoted(line))
}

/// What is wrong with the request target, if anything.
fn target_fault(target: &[u8]) -> Option<String> {
    if std::str::from_utf8(target).is_err() {
        Some(format!(
            "the request target {} has bytes that are not UTF-8; percent-encode them (e.g. %FF)",
            quoted(target)
        ))
    } else if target.iter().any(u8::is_ascii_control) {
        Some(format!(
            "the request target {} has control characters; percent-encode them (e.g. %00)",
            quoted(target)
        ))
    } else if axum::http::Uri::try_from(target).is_err() {
        Some(format!(
            "the request target {} is not a path (with an optional ?query)",
            quoted(target)
        ))
    } else {
        None
    }
}

/// A header line's name and value (trimmed).
fn header(line: &[u8]) -> Result<(&[u8], &[u8]), HeadFault> {
    let not_a_header = || HeadFault(format!("the header line {} is not `Name: value`", quoted(line)));
    let colon = line.iter().position(|&b| b == b':').ok_or_else(not_a_header)?;
    let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
    if name.is_empty() || !name.iter().copied().all(is_token) {
        return Err(not_a_header());
    }
    if value.iter().any(|&b| b.is_ascii_control() && b != b'\t') {
        return Err(HeadFault(format!(
            "the header {} has control characters in its value",
            String::from_utf8_lossy(name)
        )));
    }
    Ok((name, value))
}

/// Digits only, as hyper reads Content-Length.
fn whole_number(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// A character of an HTTP token (a method, a header name).
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `bytes` quoted for a message, bytes outside printable ASCII escaped
/// (`\xff`), cut after 60 bytes.
fn quoted(bytes: &[u8]) -> String {
    const SHOWN: usize = 60;
    let shown = bytes[..bytes.len().min(SHOWN)].escape_ascii();
    let cut = if bytes.len() > SHOWN { "…" } else { "" };
    format!("\"{shown}\"{cut}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(head: &str) -> String {
        what_is_wrong(head.as_bytes())
    }

    #[test]
    fn each_fault_is_named() {
        let cases = [
            ("GET /\r\n\r\n", "is not `METHOD /path HTTP/1.1`"),
            ("G(T / HTTP/1.1\r\n\r\n", "is not `METHOD /path HTTP/1.1`"),
            ("GET / HTTP/2.0\r\n\r\n", "asks for the version \"HTTP/2.0\""),
            (
                "GET /a\u{1}b HTTP/1.1\r\n\r\n",
                "the request target \"/a\\x01b\" has control characters",
            ),
            (
                "GET / HTTP/1.1\r\n folded\r\n\r\n",
                "the header line \" folded\" is not `Name: value`",
            ),
            (
                "GET / HTTP/1.1\r\nX-A: a\u{1}\r\n\r\n",
                "the header X-A has control characters",
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n",
                "Content-Length \"1e3\" is not",
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 6\r\n\r\n",
                "as 5 and 6",
            ),
            (
                "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
                "not allowed in an HTTP/1.0",
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
                "does not end with chunked",
            ),
        ];
        for (head, expected) in cases {
            let fault = fault(head);
            assert!(fault.contains(expected), "{head:?}: {fault}");
        }
    }

    #[test]
    fn what_hyper_accepts_is_not_blamed() {
        let generic = fault("");
        for head in [
            "GET /runs?x=1 HTTP/1.1\r\nHost: x\r\n\r\n",
            // The same length twice, and a length after chunked, are accepted.
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: x\r\n\r\n",
            // The last line of a head that was cut short is not judged.
            "GET / HTTP/1.1\r\nHost: x\r\nX-Cut-Sh",
        ] {
            assert_eq!(fault(head), generic, "{head:?}");
        }
    }

    #[test]
    fn a_long_line_is_quoted_cut_short() {
        let line = "x".repeat(500);
        let fault = fault(&format!("{line}\r\n\r\n"));
        assert!(fault.contains(&format!("\"{}\"…", "x".repeat(60))), "{fault}");
    }
}
