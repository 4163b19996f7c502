//! The fenced code blocks of a Markdown file, with where each sits (its line
//! and the heading above it) and the settings written just before it in
//! `<!-- docs-test: ... -->` comments.

use std::fmt;

/// What a block is written in, as far as the harness is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// `sh`, `bash`, `shell`, `console`: run under bash.
    Shell,
    /// `js`, `javascript`, `ts`, `typescript`: run under Node.
    Script,
    /// `tsx`, `jsx`: a React component, rendered in chromium.
    Component,
    /// `rust`: not checked yet (see the harness's doc comment).
    Rust,
    /// Anything else (`toml`, `json`, `text`, none): not run.
    Other,
}

impl Language {
    fn of(info: &str) -> Language {
        // `rust,ignore`, `ts title="x"`: the first word, up to a comma.
        let word = info.split([',', ' ']).next().unwrap_or_default();
        match word {
            "sh" | "bash" | "shell" | "console" => Language::Shell,
            "js" | "javascript" | "mjs" | "ts" | "typescript" => Language::Script,
            "tsx" | "jsx" => Language::Component,
            "rust" => Language::Rust,
            _ => Language::Other,
        }
    }

    /// Whether the harness must run the block or find it exempt.
    pub fn is_checked(self) -> bool {
        matches!(self, Language::Shell | Language::Script | Language::Component)
    }
}

/// One fenced code block.
#[derive(Debug, Clone)]
pub struct Block {
    /// The file, relative to the workspace (`docs/server.md`).
    pub file: String,
    /// The line of its opening fence, from 1.
    pub line: usize,
    /// The fence's info string as written (`sh`, `rust,ignore`).
    pub info: String,
    pub language: Language,
    /// The text between the fences, the fence's indentation removed.
    pub text: String,
    /// The heading the block sits under (`## Quick start` gives
    /// `Quick start`); empty before the first heading.
    pub heading: String,
    /// The settings of the `<!-- docs-test: ... -->` comments just above
    /// it, each as written (`exit 3`).
    pub settings: Vec<String>,
}

impl Block {
    /// Its first line that is not blank, trimmed: how the exemption list
    /// names it.
    pub fn first_line(&self) -> &str {
        self.text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or_default()
    }
}

impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{} (```{} block", self.file, self.line, self.info)?;
        if !self.heading.is_empty() {
            write!(f, " under \"{}\"", self.heading)?;
        }
        write!(f, ")")
    }
}

/// A fence that opens a block: its indentation, its marker and its info
/// string.
fn opening_fence(line: &str) -> Option<(usize, &str, &str)> {
    let rest = line.trim_start_matches(' ');
    let indent = line.len() - rest.len();
    let marker_char = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let marker_len = rest.chars().take_while(|c| *c == marker_char).count();
    if marker_len < 3 {
        return None;
    }
    let (marker, info) = rest.split_at(marker_len);
    Some((indent, marker, info.trim()))
}

/// The settings of a `<!-- docs-test: a; b -->` line, if it is one.
fn settings_comment(line: &str) -> Option<Vec<String>> {
    let inner = line.trim().strip_prefix("<!--")?.strip_suffix("-->")?.trim();
    let settings = inner.strip_prefix("docs-test:")?;
    Some(
        settings
            .split(';')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect(),
    )
}

/// Every fenced block of `text`, the Markdown file `file`.
pub fn blocks(file: &str, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut heading = String::new();
    let mut settings: Vec<String> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some((indent, marker, info)) = opening_fence(line) {
            let mut body = Vec::new();
            let mut end = i + 1;
            while end < lines.len() {
                let closing = lines[end].trim();
                if closing.starts_with(marker) && closing.trim_start_matches(&marker[..1]).is_empty() {
                    break;
                }
                let content = lines[end];
                let strip = content.len() - content.trim_start_matches(' ').len();
                body.push(&content[strip.min(indent)..]);
                end += 1;
            }
            blocks.push(Block {
                file: file.to_owned(),
                line: i + 1,
                info: info.to_owned(),
                language: Language::of(info),
                text: body.iter().map(|l| format!("{l}\n")).collect(),
                heading: heading.clone(),
                settings: std::mem::take(&mut settings),
            });
            i = end + 1;
            continue;
        }
        if let Some(found) = settings_comment(line) {
            settings.extend(found);
        } else if let Some(title) = line.strip_prefix('#') {
            heading = title.trim_start_matches('#').trim().to_owned();
            settings.clear();
        } else if !line.trim().is_empty() {
            // Settings belong to the block right below them.
            settings.clear();
        }
        i += 1;
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_found_with_their_line_heading_settings_and_indentation_removed() {
        let text = "# Title\n\n## Quick start\n\nSome text.\n\n<!-- docs-test: exit 3; http 409 -->\n```sh\n\
                    askloop run x\n```\n\n- a list item:\n\n  ```ts\n  const a = 1;\n    nested();\n  ```\n\
                    \n```\nplain\n```\n";
        let found = blocks("README.md", text);
        assert_eq!(found.len(), 3);
        assert_eq!(found[0].line, 8);
        assert_eq!(found[0].language, Language::Shell);
        assert_eq!(found[0].heading, "Quick start");
        assert_eq!(found[0].settings, ["exit 3", "http 409"]);
        assert_eq!(found[0].text, "askloop run x\n");
        assert_eq!(found[1].language, Language::Script);
        assert_eq!(found[1].text, "const a = 1;\n  nested();\n");
        assert!(found[1].settings.is_empty());
        assert_eq!(found[2].language, Language::Other);
    }

    #[test]
    fn a_settings_comment_belongs_only_to_the_block_right_below_it() {
        let text = "<!-- docs-test: exit 3 -->\nText between.\n```sh\ntrue\n```\n";
        assert!(blocks("a.md", text)[0].settings.is_empty());
    }

    #[test]
    fn languages_are_read_from_the_first_word_of_the_info_string() {
        assert_eq!(Language::of("rust,ignore"), Language::Rust);
        assert_eq!(Language::of("console"), Language::Shell);
        assert_eq!(Language::of("tsx"), Language::Component);
        assert_eq!(Language::of("toml"), Language::Other);
        assert_eq!(Language::of(""), Language::Other);
    }
}
