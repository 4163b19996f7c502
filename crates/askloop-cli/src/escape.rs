//! Text from a model, a tool or an answer shown on a terminal: control
//! characters are printed as escapes (`\e[2J`, `\a`, `\r`, `\x01`), so what
//! a run holds can never clear the screen, retitle the window, ring the bell
//! or overwrite a line of `askloop runs`. `--json` output is left exact
//! (JSON escapes them itself).

use std::borrow::Cow;

/// `text` for one line: every control character escaped, newlines too.
pub fn one_line(text: &str) -> Cow<'_, str> {
    escaped(text, false)
}

/// `text` that may span lines: newlines and tabs kept, every other control
/// character escaped.
pub fn lines(text: &str) -> Cow<'_, str> {
    escaped(text, true)
}

fn escaped(text: &str, keep_lines: bool) -> Cow<'_, str> {
    let needs = |c: char| is_control(c) && !(keep_lines && matches!(c, '\n' | '\t'));
    if !text.chars().any(needs) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !needs(c) {
            out.push(c);
            continue;
        }
        match c {
            '\u{1b}' => out.push_str(r"\e"),
            '\u{7}' => out.push_str(r"\a"),
            '\r' => out.push_str(r"\r"),
            '\n' => out.push_str(r"\n"),
            '\t' => out.push_str(r"\t"),
            '\u{8}' => out.push_str(r"\b"),
            c if u32::from(c) < 0x100 => out.push_str(&format!(r"\x{:02x}", u32::from(c))),
            c => out.push_str(&format!(r"\u{{{:04x}}}", u32::from(c))),
        }
    }
    Cow::Owned(out)
}

/// C0 and C1 controls, DEL, and the bidirectional overrides that make a
/// line read differently from what it holds.
fn is_control(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_sequences_are_shown_as_escapes() {
        assert_eq!(one_line("a\u{1b}[2Jb\u{7}c\rd\ne"), r"a\e[2Jb\ac\rd\ne");
        assert_eq!(one_line("\u{1}\u{7f}\u{9b}x\u{202e}"), r"\x01\x7f\x9bx\u{202e}");
        assert_eq!(lines("one\n\ttwo\r\n"), "one\n\ttwo\\r\n");
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        assert!(matches!(one_line("café ✓ plain"), Cow::Borrowed("café ✓ plain")));
    }
}
