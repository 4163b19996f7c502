//! Text from outside the process (a model's, a tool's, an MCP server's, an
//! answer's, a stored run's) as a terminal shows it. A terminal acts on
//! what it is sent: OSC 52 writes the clipboard, OSC 8 makes a link, OSC 0
//! retitles the window, CSI sequences move the cursor or clear the screen,
//! a status query (DSR) makes the terminal type its reply as if the person
//! had, C1 controls (U+009B is CSI in one character) and DCS do the same in
//! fewer bytes, CR, BS and BEL overwrite a line or ring. And bidirectional
//! and invisible characters make a line read otherwise than it holds.
//!
//! So this is the one escaping of every command's output:
//!
//! - control characters are printed as escapes (`\e[2J`, `\a`, `\r`,
//!   `\x9b`), so nothing a run holds ever reaches the terminal as a control;
//! - bidirectional controls and invisible characters are marked as their
//!   code points (`<U+202E>`), by the rule every surface that shows a
//!   decision shares ([`askloop::visible`]);
//! - `--json` lines escape both as JSON `\u` escapes ([`json`]), so the
//!   value read back is exact.
//!
//! `out!`, `outln!`, `err!` and `errln!` (`out.rs`) pass all they print
//! through [`lines`]; the prompts pass what they show through [`one_line`]
//! (`prompt.rs`); [`one_line`] also keeps a field on its line in a table or
//! a hint.

use std::borrow::Cow;

use askloop::visible::{self, Piece};
use serde::Serialize;

/// `text` for one line: every control character escaped, newlines too.
pub fn one_line(text: &str) -> Cow<'_, str> {
    escaped(text, false)
}

/// `text` that may span lines: newlines and tabs kept, every other control
/// character escaped.
pub fn lines(text: &str) -> Cow<'_, str> {
    escaped(text, true)
}

/// Whether a terminal must not be sent `c` as it is.
fn needs_escape(c: char, keep_lines: bool) -> bool {
    (c.is_control() && !(keep_lines && matches!(c, '\n' | '\t'))) || visible::is_invisible(c)
}

fn escaped(text: &str, keep_lines: bool) -> Cow<'_, str> {
    if !text.chars().any(|c| needs_escape(c, keep_lines)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for piece in visible::pieces(text) {
        match piece {
            Piece::Shown(shown) => {
                for c in shown.chars() {
                    if c.is_control() && !(keep_lines && matches!(c, '\n' | '\t')) {
                        push_control(&mut out, c);
                    } else {
                        out.push(c);
                    }
                }
            }
            Piece::Marked(c) if c.is_control() => push_control(&mut out, c),
            Piece::Marked(c) => out.push_str(&visible::marker(c)),
        }
    }
    // An emoji's joiner or selector alone leaves the text as it was.
    if out == text {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(out)
    }
}

/// A control character as its escape: `\e`, `\a`, `\r`, `\n`, `\t`, `\b`,
/// else `\x..`.
fn push_control(out: &mut String, c: char) {
    match c {
        '\u{1b}' => out.push_str(r"\e"),
        '\u{7}' => out.push_str(r"\a"),
        '\r' => out.push_str(r"\r"),
        '\n' => out.push_str(r"\n"),
        '\t' => out.push_str(r"\t"),
        '\u{8}' => out.push_str(r"\b"),
        c => out.push_str(&format!(r"\x{:02x}", u32::from(c))),
    }
}

/// `value` as one line of JSON that a terminal can be sent: the JSON
/// encoder escapes C0 controls itself; DEL, C1 controls and every
/// character [`askloop::visible`] marks are escaped as `\uXXXX` too (UTF-16
/// pairs above U+FFFF). Read back, the value is exact.
pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<String, serde_json::Error> {
    Ok(inert_json(serde_json::to_string(value)?))
}

/// `value` as indented JSON, escaped as [`json`]: what a person edits
/// (`askloop approve --edit`) shows each hidden character as its escape.
pub fn json_pretty<T: Serialize + ?Sized>(value: &T) -> Result<String, serde_json::Error> {
    Ok(inert_json(serde_json::to_string_pretty(value)?))
}

fn inert_json(text: String) -> String {
    // The encoder escapes line breaks and tabs inside strings: those left
    // are the layout's.
    if !text.chars().any(|c| needs_escape(c, true)) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        // Outside its strings, JSON is printable ASCII and its layout's
        // white space: each such character is inside a string, where a
        // `\u` escape means it.
        if needs_escape(c, true) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!(r"\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn terminal_sequences_are_shown_as_escapes() {
        assert_eq!(one_line("a\u{1b}[2Jb\u{7}c\rd\ne"), r"a\e[2Jb\ac\rd\ne");
        assert_eq!(one_line("\u{1}\u{7f}\u{9b}x\u{8}"), r"\x01\x7f\x9bx\b");
        assert_eq!(lines("one\n\ttwo\r\n"), "one\n\ttwo\\r\n");
    }

    /// Each kind of sequence a hostile text can send a terminal.
    const HOSTILE: [(&str, &str); 14] = [
        ("\u{1b}]52;c;cm0gLXJmIH4=\u{7}", r"\e]52;c;cm0gLXJmIH4=\a"),
        (
            "\u{1b}]8;;https://evil.example\u{1b}\\here\u{1b}]8;;\u{1b}\\",
            r"\e]8;;https://evil.example\e\here\e]8;;\e\",
        ),
        ("\u{1b}]0;owned\u{7}", r"\e]0;owned\a"),
        ("\u{1b}[10;10H\u{1b}[2J\u{1b}[1A", r"\e[10;10H\e[2J\e[1A"),
        ("\u{1b}[6n\u{1b}[5n", r"\e[6n\e[5n"),
        ("\u{9b}2J\u{9d}0;t\u{9c}", r"\x9b2J\x9d0;t\x9c"),
        ("\u{1b}P+q544e\u{1b}\\\u{90}q\u{9c}", r"\eP+q544e\e\\x90q\x9c"),
        ("ok\rno\u{8}\u{7}", r"ok\rno\b\a"),
        ("report_\u{202e}hs.gpj", "report_<U+202E>hs.gpj"),
        ("\u{202a}\u{202b}\u{202c}\u{202d}", "<U+202A><U+202B><U+202C><U+202D>"),
        ("\u{2066}x\u{2067}\u{2068}\u{2069}", "<U+2066>x<U+2067><U+2068><U+2069>"),
        ("a\u{200b}b\u{200c}c\u{200d}d", "a<U+200B>b<U+200C>c<U+200D>d"),
        ("\u{feff}\u{2060}\u{ad}", "<U+FEFF><U+2060><U+00AD>"),
        ("\u{e0049}\u{e0067}", "<U+E0049><U+E0067>"),
    ];

    #[test]
    fn every_kind_of_hostile_sequence_is_printed_inert() {
        for (raw, shown) in HOSTILE {
            assert_eq!(one_line(raw), shown, "{raw:?}");
            assert_eq!(lines(raw), shown, "{raw:?}");
        }
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        assert!(matches!(one_line("café ✓ plain"), Cow::Borrowed("café ✓ plain")));
        assert!(matches!(lines("⚠\u{fe0f} two\nlines"), Cow::Borrowed(_)));
    }

    #[test]
    fn json_escapes_c1_and_bidi_and_reads_back_exact() {
        let value = serde_json::json!({"path": "report_\u{202e}hs.gpj", "csi": "\u{9b}2J\u{7f}", "tag": "\u{e0041}", "esc": "\u{1b}["});
        let line = json(&value).unwrap();
        assert!(line.contains(r"report_\u202ehs.gpj"), "{line}");
        assert!(line.contains(r"\u009b2J\u007f"), "{line}");
        assert!(line.contains(r"\udb40\udc41"), "{line}");
        assert!(line.contains(r"\u001b["), "{line}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&line).unwrap(), value);
        let pretty = json_pretty(&value).unwrap();
        assert!(pretty.contains("\n  \"path\": \"report_\\u202ehs.gpj\""), "{pretty}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&pretty).unwrap(), value);
    }

    /// Any text, dense in controls and marked characters.
    fn hostile_text() -> impl Strategy<Value = String> {
        let near = prop::sample::select(vec![
            'a',
            ' ',
            '\\',
            '\n',
            '\r',
            '\t',
            '\u{0}',
            '\u{7}',
            '\u{8}',
            '\u{1b}',
            '[',
            ']',
            ';',
            '\u{7f}',
            '\u{90}',
            '\u{9b}',
            '\u{9c}',
            '\u{9d}',
            'é',
            '😀',
            '\u{200b}',
            '\u{200d}',
            '\u{202e}',
            '\u{2066}',
            '\u{fe0f}',
            '\u{e0041}',
        ]);
        prop_oneof![
            prop::collection::vec(near, 0..32).prop_map(|chars| chars.into_iter().collect()),
            any::<String>(),
        ]
    }

    proptest! {
        /// What is printed holds no control character but the newlines and
        /// tabs kept, no bidi control, and escaping it again changes
        /// nothing (so the output layer escaping what a command already
        /// escaped is harmless).
        #[test]
        fn escaped_text_sends_a_terminal_no_control_and_escaping_again_changes_nothing(text in hostile_text()) {
            for keep_lines in [false, true] {
                let once = escaped(&text, keep_lines).into_owned();
                for c in once.chars() {
                    let joins = matches!(c, '\u{200c}' | '\u{200d}' | '\u{fe00}'..='\u{fe0f}' | '\u{e0100}'..='\u{e01ef}');
                    prop_assert!(!needs_escape(c, keep_lines) || joins, "{:?} in {:?}", c, once);
                    let reorders = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}');
                    prop_assert!(!reorders, "{:?} in {:?}", c, once);
                    prop_assert!(!c.is_control() || (keep_lines && matches!(c, '\n' | '\t')), "{:?} in {:?}", c, once);
                }
                prop_assert_eq!(escaped(&once, keep_lines), once.as_str());
                let shown = lines(&once).into_owned();
                prop_assert_eq!(lines(&shown), shown.as_str());
            }
        }

        /// A `--json` line holds no raw control or marked character and
        /// reads back as the value it was made of.
        #[test]
        fn a_json_line_is_inert_and_exact(text in hostile_text()) {
            let value = serde_json::json!({"text": text});
            let line = json(&value).unwrap();
            prop_assert!(!line.chars().any(|c| needs_escape(c, false)), "{:?}", line);
            prop_assert_eq!(lines(&line), line.as_str());
            prop_assert_eq!(serde_json::from_str::<serde_json::Value>(&line).unwrap(), value);
        }
    }
}
