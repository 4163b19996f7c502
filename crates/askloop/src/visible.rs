//! Text a person decides on, shown as it is. What an approver reads must be
//! what runs, but a model's, a tool's or a client's text can hold
//! characters that change how it reads while staying unseen: a right-to-left
//! override makes `docs/report_\u{202e}hs.gpj` read `docs/report_jpg.sh`,
//! isolates and zero-width characters hide where one word ends, tag
//! characters carry a whole hidden sentence, control characters show as
//! nothing. Every surface that shows such text (the page, the answer link,
//! Slack, email, the terminal) marks each of them visibly, as its code point
//! (`<U+202E>`), by this one rule:
//!
//! - marked: control characters (but tab, line feed and carriage return,
//!   which every surface lays out), the bidirectional embeddings, overrides,
//!   isolates and marks, and Unicode's default-ignorable code points (zero
//!   widths, joiners, soft hyphen, word joiner and invisible operators,
//!   fillers, variation selectors, tags), the line and paragraph separators
//!   and the interlinear annotation characters;
//! - except a joiner or variation selector doing its visible job: a zero-width
//!   joiner or non-joiner between two visible non-ASCII characters (an emoji
//!   sequence, Persian or Indic writing), and one variation selector right
//!   after a visible non-ASCII character (`⚠️`) or in a keycap (`1️⃣`).
//!   A second selector in a row, or one after ASCII, is marked: hidden data
//!   is carried exactly that way.
//!
//! [`pieces`] splits text into what shows as it is and what is marked; each
//! surface draws a marked character its own way ([`marker`] in plain text).
//! The page's `dom.js` states the same rule for the browser, and a browser
//! test holds the two to the same answers.

use std::borrow::Cow;

/// Whether `c` is one of the characters this rule marks, before the
/// exceptions for joiners and selectors doing their job ([`pieces`] applies
/// those). A surface that cannot mark (a JSON encoder) escapes these.
pub fn is_invisible(c: char) -> bool {
    if c.is_control() {
        return !matches!(c, '\t' | '\n' | '\r');
    }
    matches!(
        u32::from(c),
        0x00AD            // soft hyphen
        | 0x034F          // combining grapheme joiner
        | 0x061C          // Arabic letter mark
        | 0x115F..=0x1160 // Hangul fillers
        | 0x17B4..=0x17B5 // Khmer inherent vowels
        | 0x180B..=0x180F // Mongolian variation selectors, vowel separator
        | 0x200B..=0x200F // zero widths, joiners, left-to-right and right-to-left marks
        | 0x2028..=0x2029 // line and paragraph separators
        | 0x202A..=0x202E // bidirectional embeddings and overrides
        | 0x2060..=0x206F // word joiner, invisible operators, isolates, deprecated format characters
        | 0x3164          // Hangul filler
        | 0xFE00..=0xFE0F // variation selectors
        | 0xFEFF          // zero-width no-break space (byte order mark)
        | 0xFFA0          // halfwidth Hangul filler
        | 0xFFF0..=0xFFFB // unassigned specials, interlinear annotation
        | 0x1BCA0..=0x1BCA3 // shorthand format controls
        | 0x1D173..=0x1D17A // musical symbol format characters
        | 0xE0000..=0xE0FFF // tags, variation selectors supplement
    )
}

/// `U+202E`: how a marked character is named.
pub fn code_point(c: char) -> String {
    format!("U+{:04X}", u32::from(c))
}

/// `<U+202E>`: a marked character in plain text.
pub fn marker(c: char) -> String {
    format!("<{}>", code_point(c))
}

/// A piece of text as a surface shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Shown as it is.
    Shown(&'a str),
    /// Marked: shown as its code point, never as itself.
    Marked(char),
}

/// `text` in the pieces a surface shows: runs of text shown as they are,
/// and each character the rule marks.
///
/// ```
/// use askloop::visible::{Piece, pieces};
/// let shown: Vec<Piece> = pieces("a\u{202e}b").collect();
/// assert_eq!(shown, [Piece::Shown("a"), Piece::Marked('\u{202e}'), Piece::Shown("b")]);
/// ```
pub fn pieces(text: &str) -> Pieces<'_> {
    Pieces {
        text,
        at: 0,
        before: None,
    }
}

/// `text` with every character the rule marks written as its [`marker`]
/// (`docs/report_<U+202E>hs.gpj`); borrowed when nothing is marked.
pub fn marked(text: &str) -> Cow<'_, str> {
    let mut pieces = pieces(text);
    match pieces.next() {
        None => Cow::Borrowed(text),
        Some(Piece::Shown(all)) if all.len() == text.len() => Cow::Borrowed(text),
        Some(first) => {
            let mut out = String::with_capacity(text.len() + 8);
            for piece in std::iter::once(first).chain(pieces) {
                match piece {
                    Piece::Shown(shown) => out.push_str(shown),
                    Piece::Marked(c) => out.push_str(&marker(c)),
                }
            }
            Cow::Owned(out)
        }
    }
}

/// The iterator of [`pieces`].
#[derive(Debug, Clone)]
pub struct Pieces<'a> {
    text: &'a str,
    at: usize,
    /// The character before `at`, and whether it was marked.
    before: Option<(char, bool)>,
}

impl<'a> Iterator for Pieces<'a> {
    type Item = Piece<'a>;

    fn next(&mut self) -> Option<Piece<'a>> {
        let rest = &self.text[self.at..];
        let mut chars = rest.char_indices().peekable();
        let mut before = self.before;
        while let Some((i, c)) = chars.next() {
            let after = chars.peek().map(|&(_, next)| next);
            let marks = is_invisible(c) && !does_its_job(before, c, after);
            if marks {
                if i > 0 {
                    // The shown run up to here first; this character next time.
                    self.at += i;
                    self.before = before;
                    return Some(Piece::Shown(&rest[..i]));
                }
                self.at += c.len_utf8();
                self.before = Some((c, true));
                return Some(Piece::Marked(c));
            }
            before = Some((c, false));
        }
        if rest.is_empty() {
            return None;
        }
        self.at = self.text.len();
        self.before = before;
        Some(Piece::Shown(rest))
    }
}

/// A character that shows as itself: not ASCII, not white space, and not
/// one this rule marks.
fn visible_non_ascii(c: char) -> bool {
    !c.is_ascii() && !c.is_whitespace() && !is_invisible(c)
}

fn is_variation_selector(c: char) -> bool {
    matches!(u32::from(c), 0xFE00..=0xFE0F | 0xE0100..=0xE01EF)
}

/// A joiner between two visible characters of a sequence, or one variation
/// selector on the character it varies: the reader sees what it does.
fn does_its_job(before: Option<(char, bool)>, c: char, after: Option<char>) -> bool {
    let Some((before, before_marked)) = before else {
        return false;
    };
    if before_marked {
        return false;
    }
    match c {
        '\u{200c}' | '\u{200d}' => {
            let joins_from = visible_non_ascii(before) || is_variation_selector(before);
            joins_from && after.is_some_and(visible_non_ascii)
        }
        c if is_variation_selector(c) => {
            visible_non_ascii(before) || (matches!(before, '0'..='9' | '#' | '*') && after == Some('\u{20e3}'))
        }
        _ => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_bidi_override_in_a_path_is_marked_where_it_stands() {
        assert_eq!(marked("docs/report_\u{202e}hs.gpj"), "docs/report_<U+202E>hs.gpj");
        assert_eq!(
            marked("\u{2066}rm -rf /\u{2069}\u{200b}x\u{feff}"),
            "<U+2066>rm -rf /<U+2069><U+200B>x<U+FEFF>"
        );
        assert_eq!(marked("a\u{1b}[2J\u{9b}b\u{0}"), "a<U+001B>[2J<U+009B>b<U+0000>");
        assert_eq!(
            marked("soft\u{ad}hyphen \u{e0041}\u{e0042}"),
            "soft<U+00AD>hyphen <U+E0041><U+E0042>"
        );
    }

    #[test]
    fn plain_text_and_line_breaks_are_borrowed_as_they_are() {
        for text in ["", "café ✓ plain", "line one\r\n\tline two", "עברית and العربية"] {
            assert!(matches!(marked(text), Cow::Borrowed(t) if t == text), "{text:?}");
        }
    }

    #[test]
    fn joiners_and_selectors_doing_their_job_in_emoji_and_scripts_are_left_alone() {
        for text in [
            "⚠\u{fe0f} careful",
            "👩\u{200d}💻 developer",
            "🏳\u{fe0f}\u{200d}🌈",
            "1\u{fe0f}\u{20e3} first",
            "می\u{200c}خواهم",
            "क्\u{200d}ष",
            "葛\u{e0100}城",
        ] {
            assert_eq!(marked(text), text, "{text:?}");
        }
    }

    #[test]
    fn joiners_and_selectors_anywhere_else_are_marked() {
        // On ASCII, at either end, doubled: the ways hidden data is carried.
        assert_eq!(marked("pass\u{200d}word"), "pass<U+200D>word");
        assert_eq!(marked("a\u{fe0f}"), "a<U+FE0F>");
        assert_eq!(marked("\u{200d}👩"), "<U+200D>👩");
        assert_eq!(marked("👩\u{200d}"), "👩<U+200D>");
        assert_eq!(marked("😀\u{fe0f}\u{fe0f}"), "😀\u{fe0f}<U+FE0F>");
        assert_eq!(marked("😀\u{e0101}\u{e0102}\u{e0103}"), "😀\u{e0101}<U+E0102><U+E0103>");
        assert_eq!(marked("é\u{200b}é"), "é<U+200B>é", "a zero-width space joins nothing");
    }

    /// Text dense in what the rule decides on: letters of several
    /// scripts, emoji, joiners, selectors, keycaps, bidi and control
    /// characters; and any text at all.
    fn tricky() -> impl Strategy<Value = String> {
        let near = prop::sample::select(vec![
            'a',
            '1',
            '#',
            ' ',
            '\n',
            '\r',
            '\t',
            '\u{1b}',
            '\u{7}',
            '\u{9b}',
            '\u{7f}',
            'é',
            'ب',
            'क',
            '\u{94d}',
            '😀',
            '👩',
            '⚠',
            '\u{200b}',
            '\u{200c}',
            '\u{200d}',
            '\u{200e}',
            '\u{202e}',
            '\u{2066}',
            '\u{2069}',
            '\u{fe0f}',
            '\u{fe0e}',
            '\u{e0100}',
            '\u{e0041}',
            '\u{20e3}',
            '\u{feff}',
            '\u{ad}',
            '\u{3164}',
            '\u{2028}',
        ]);
        prop_oneof![
            prop::collection::vec(near, 0..24).prop_map(|chars| chars.into_iter().collect()),
            any::<String>(),
        ]
    }

    proptest! {
        #[test]
        fn pieces_put_back_together_are_the_text(text in tricky()) {
            let mut joined = String::new();
            for piece in pieces(&text) {
                match piece {
                    Piece::Shown(shown) => {
                        prop_assert!(!shown.is_empty());
                        joined.push_str(shown);
                    }
                    Piece::Marked(c) => {
                        prop_assert!(is_invisible(c));
                        joined.push(c);
                    }
                }
            }
            prop_assert_eq!(joined, text);
        }

        #[test]
        fn marked_text_holds_no_bidi_control_and_marking_again_changes_nothing(text in tricky()) {
            let once = marked(&text).into_owned();
            let reorders = |c: char| matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}');
            let controls = |c: char| c.is_control() && !matches!(c, '\t' | '\n' | '\r');
            prop_assert!(!once.chars().any(reorders), "{:?}", once);
            prop_assert!(!once.chars().any(controls), "{:?}", once);
            prop_assert_eq!(marked(&once), once.as_str());
        }
    }
}
