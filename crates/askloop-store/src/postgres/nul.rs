//! Text PostgreSQL cannot hold, stored losslessly.
//!
//! `jsonb` refuses the NUL character (`\u0000` in JSON text: "unsupported
//! Unicode escape sequence") and `text` refuses a NUL byte, yet an answer, a
//! tool result or a payload may contain one. Every JSON column and the
//! `error` column are therefore written with NUL spelled `U+10FFFF 0`, and
//! `U+10FFFF` itself doubled; reading undoes both. U+10FFFF is a Unicode
//! noncharacter, so text without it or NUL (nearly all) is stored exactly as
//! given, and the columns stay `jsonb`.

use std::borrow::Cow;

/// The escape character: the last Unicode code point, a noncharacter.
const ESCAPE: char = '\u{10FFFF}';

/// JSON text (as serde_json writes it: NUL only as `\u0000`) made storable.
pub(crate) fn encode_json(json: &str) -> Cow<'_, str> {
    if !json.contains("\\u0000") && !json.contains(ESCAPE) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    let mut chars = json.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                // An escape pair: `\\` must not be mistaken for the start
                // of `\u0000`.
                let rest = chars.as_str();
                if let Some(after) = rest.strip_prefix("u0000") {
                    out.push(ESCAPE);
                    out.push('0');
                    chars = after.chars();
                } else {
                    out.push('\\');
                    if let Some(next) = chars.next() {
                        out.push(next);
                    }
                }
            }
            ESCAPE => {
                out.push(ESCAPE);
                out.push(ESCAPE);
            }
            other => out.push(other),
        }
    }
    Cow::Owned(out)
}

/// Stored JSON text back as it was written.
pub(crate) fn decode_json(stored: String) -> String {
    unescape(stored, "\\u0000")
}

/// Plain text (a run's error) made storable.
pub(crate) fn encode_text(text: &str) -> Cow<'_, str> {
    if !text.contains(['\0', ESCAPE]) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\0' => {
                out.push(ESCAPE);
                out.push('0');
            }
            ESCAPE => {
                out.push(ESCAPE);
                out.push(ESCAPE);
            }
            other => out.push(other),
        }
    }
    Cow::Owned(out)
}

/// Stored plain text back as it was written.
pub(crate) fn decode_text(stored: String) -> String {
    unescape(stored, "\0")
}

/// Replaces `ESCAPE 0` with `nul` and `ESCAPE ESCAPE` with `ESCAPE`. A lone
/// escape character (never written by askloop) is kept as it is.
fn unescape(stored: String, nul: &str) -> String {
    if !stored.contains(ESCAPE) {
        return stored;
    }
    let mut out = String::with_capacity(stored.len());
    let mut chars = stored.chars().peekable();
    while let Some(c) = chars.next() {
        if c != ESCAPE {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('0') => {
                chars.next();
                out.push_str(nul);
            }
            Some(&ESCAPE) => {
                chars.next();
                out.push(ESCAPE);
            }
            _ => out.push(ESCAPE),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round-trips `value`; returns what would be stored.
    fn json_round_trip(value: &serde_json::Value) -> String {
        let text = serde_json::to_string(value).unwrap();
        let stored = encode_json(&text).into_owned();
        // What jsonb would give back: the same text (it normalises spacing
        // only); parse it as askloop does.
        let back: serde_json::Value = serde_json::from_str(&decode_json(stored.clone())).unwrap();
        assert_eq!(&back, value);
        stored
    }

    #[test]
    fn json_with_nul_and_the_escape_character_round_trips() {
        let stored =
            json_round_trip(&serde_json::json!({"a\u{0}b": ["x\u{0}", "\u{10FFFF}0", "\u{10FFFF}\u{0}\u{10FFFF}"]}));
        assert!(!stored.contains("\\u0000"), "{stored}");
        // A backslash before `u0000` that is itself escaped is text, not NUL.
        json_round_trip(&serde_json::json!(["\\u0000", "\\\u{0}", "\\\\u0000\u{0}"]));
    }

    #[test]
    fn text_without_nul_or_the_escape_character_is_stored_unchanged() {
        let json = r#"{"question":"Which city?","n":1}"#;
        assert!(matches!(encode_json(json), Cow::Borrowed(_)));
        assert!(matches!(encode_text("rate limited"), Cow::Borrowed(_)));
        assert_eq!(decode_json(json.to_owned()), json);
    }

    #[test]
    fn plain_text_with_nul_round_trips_and_holds_no_nul() {
        for text in ["a\0b", "\0", "\u{10FFFF}", "\u{10FFFF}0\0\u{10FFFF}\u{10FFFF}"] {
            let stored = encode_text(text).into_owned();
            assert!(!stored.contains('\0'));
            assert_eq!(decode_text(stored), text);
        }
    }
}
