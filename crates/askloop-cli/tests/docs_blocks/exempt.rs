//! The list of blocks the harness does not run (`docs/exempt.toml`), each
//! with the reason, and its match against the blocks of the docs.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::markdown::Block;

/// Where the list is, from the workspace root.
pub const PATH: &str = "docs/exempt.toml";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct List {
    #[serde(default)]
    exempt: Vec<Exemption>,
}

/// One entry: a block of `file` whose first line starts with `block` (and,
/// where two blocks of the file start alike, that sits under the heading
/// `under`), not run because of `reason`; or, with `line`, only the lines
/// of that block that start with `line` (the block's other commands run).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exemption {
    pub file: String,
    pub block: String,
    #[serde(default)]
    pub under: Option<String>,
    #[serde(default)]
    pub line: Option<String>,
    pub reason: String,
}

/// What the list exempts, by the index of the block.
#[derive(Debug, Default)]
pub struct Exempt {
    /// Whole blocks, with the reason.
    pub blocks: BTreeMap<usize, String>,
    /// The starts of lines not run, in blocks that otherwise run.
    pub lines: BTreeMap<usize, Vec<String>>,
}

/// Whether `line` of a block is one `starts` exempts.
pub fn is_exempt_line(line: &str, starts: &[String]) -> bool {
    starts.iter().any(|start| line.trim_start().starts_with(start.as_str()))
}

impl Exemption {
    fn covers(&self, block: &Block) -> bool {
        block.file == self.file
            && block.first_line().starts_with(self.block.trim())
            && self.under.as_ref().is_none_or(|under| &block.heading == under)
    }

    fn named(&self) -> String {
        let block = match &self.under {
            Some(under) => format!("{} block {:?} under {under:?}", self.file, self.block),
            None => format!("{} block {:?}", self.file, self.block),
        };
        match &self.line {
            Some(line) => format!("{block} (its lines starting {line:?})"),
            None => block,
        }
    }
}

/// The entries of the list's text.
pub fn parse(text: &str) -> Result<Vec<Exemption>, String> {
    let list: List = toml::from_str(text).map_err(|err| format!("{PATH} is not a list of exemptions: {err}"))?;
    Ok(list.exempt)
}

/// Which of `blocks` each entry of `list` exempts, by the block's index,
/// with its reason; and what is wrong with the list: an entry without a
/// reason, one that names no block (the block changed or went), one that
/// names several, or two that name one block.
pub fn match_blocks(list: &[Exemption], blocks: &[Block]) -> (Exempt, Vec<String>) {
    let mut exempt = Exempt::default();
    let mut problems = Vec::new();
    for entry in list {
        if entry.reason.trim().is_empty() {
            problems.push(format!(
                "{PATH}: the entry for the {} gives no reason; say why the block cannot run in a test",
                entry.named()
            ));
        }
        let covered: Vec<usize> = (0..blocks.len())
            .filter(|&i| blocks[i].language.is_checked() && entry.covers(&blocks[i]))
            .collect();
        match covered.as_slice() {
            [] => problems.push(format!(
                "{PATH}: the entry for the {} names no shell or script block of that file (it changed, moved \
                 under another heading, or went): correct its `block` (the start of the block's first line) and \
                 `under`, or remove the entry",
                entry.named()
            )),
            [one] => match &entry.line {
                Some(line)
                    if !blocks[*one]
                        .text
                        .lines()
                        .any(|l| is_exempt_line(l, std::slice::from_ref(line))) =>
                {
                    problems.push(format!(
                        "{PATH}: the entry for the {} names no line of {}: correct its `line` (the start of \
                         the line) or remove the entry",
                        entry.named(),
                        blocks[*one]
                    ));
                }
                Some(line) => exempt.lines.entry(*one).or_default().push(line.clone()),
                None => {
                    if exempt.blocks.insert(*one, entry.reason.clone()).is_some() {
                        problems.push(format!("{PATH}: {} is named by two entries; keep one", blocks[*one]));
                    }
                }
            },
            several => {
                let lines: Vec<String> = several.iter().map(|&i| blocks[i].to_string()).collect();
                problems.push(format!(
                    "{PATH}: the entry for the {} names {} blocks ({}); give more of the first line in `block`, or \
                     the heading the block sits under in `under`",
                    entry.named(),
                    several.len(),
                    lines.join(", ")
                ));
            }
        }
    }
    (exempt, problems)
}

#[cfg(test)]
mod tests {
    use super::super::markdown::blocks;
    use super::*;

    const DOC: &str =
        "## One\n\n```sh\ncargo build\n```\n\n## Two\n\n```sh\ncargo build\n```\n\n```sh\naskloop runs\n```\n";

    fn entry(block: &str, under: Option<&str>) -> Exemption {
        Exemption {
            file: "a.md".into(),
            block: block.into(),
            under: under.map(str::to_owned),
            line: None,
            reason: "builds".into(),
        }
    }

    #[test]
    fn an_entry_names_a_block_by_its_first_line_and_heading() {
        let found = blocks("a.md", DOC);
        let (exempt, problems) = match_blocks(&[entry("cargo build", Some("Two"))], &found);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(exempt.blocks.keys().copied().collect::<Vec<_>>(), [1]);
    }

    #[test]
    fn an_entry_that_names_two_blocks_or_none_is_a_problem_naming_what_to_change() {
        let found = blocks("a.md", DOC);
        let (_, problems) = match_blocks(&[entry("cargo build", None), entry("askloop chat", None)], &found);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("names 2 blocks (a.md:3"), "{}", problems[0]);
        assert!(problems[0].contains("`under`"), "{}", problems[0]);
        assert!(
            problems[1].contains("names no shell or script block"),
            "{}",
            problems[1]
        );
    }

    #[test]
    fn an_entry_with_a_line_exempts_only_the_lines_that_start_so() {
        let found = blocks("a.md", DOC);
        let mut line = entry("askloop runs", None);
        line.line = Some("askloop".into());
        let (exempt, problems) = match_blocks(&[line.clone()], &found);
        assert!(problems.is_empty() && exempt.blocks.is_empty(), "{problems:?}");
        assert_eq!(exempt.lines[&2], ["askloop"]);
        line.line = Some("cargo".into());
        let (_, problems) = match_blocks(&[line], &found);
        assert!(problems[0].contains("names no line of a.md:13"), "{problems:?}");
    }

    #[test]
    fn an_entry_without_a_reason_is_a_problem() {
        let found = blocks("a.md", DOC);
        let mut silent = entry("askloop runs", None);
        silent.reason = " ".into();
        let (_, problems) = match_blocks(&[silent], &found);
        assert!(problems[0].contains("gives no reason"), "{problems:?}");
    }
}
