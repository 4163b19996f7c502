//! Asking the person: proper prompts on a terminal (a line editor, arrow
//! keys, checkboxes), and plain numbered choices read line by line when stdin
//! is not a terminal, so scripts and tests can drive them.
//!
//! A question, its labels and descriptions and what an approval would do
//! are a model's or a tool's words: both prompters show each of them
//! through [`escape::one_line`] (the interactive prompts draw on the
//! terminal themselves, past `out.rs`), and a choice is read back by its
//! position, never by the text shown.

use std::io::{BufRead, IsTerminal};

use askloop::{Question, SelectionMode};
use inquire::error::InquireError;
use serde_json::Value;

use crate::escape;
use crate::exit::CliError;

/// What the person did at a prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// An answer, shaped as the question needs (string or list).
    Answer(Value),
    /// Esc, Ctrl-C or end of input: leave the question open.
    Left,
}

/// What the person said about a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approval {
    /// Run it.
    Yes,
    /// Do not.
    No,
    /// Run it, and later calls of the same tool in this chat without asking.
    Always,
}

/// Asks questions.
pub trait Prompter {
    /// Asks one `ask_user` question.
    fn ask(&mut self, question: &Question) -> Result<Reply, CliError>;
    /// Asks whether a tool call may run; `what` says what it would do
    /// (`tools::describe_call`); `may_stick`: the run is on a thread, so
    /// the person may also let the tool run without asking in it from now
    /// on. `None` when the person left.
    fn approve(&mut self, what: &str, may_stick: bool) -> Result<Option<Approval>, CliError>;
    /// Reads a line of chat input. `None` when the person left.
    fn message(&mut self, prompt: &str) -> Result<Option<String>, CliError>;
}

/// The prompter that fits stdin: interactive on a terminal, line by line
/// otherwise.
pub fn for_stdin() -> Box<dyn Prompter> {
    if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
        Box::new(TerminalPrompter)
    } else {
        Box::new(LinePrompter::new(std::io::stdin().lock()))
    }
}

/// Interactive prompts (inquire).
#[derive(Debug)]
pub struct TerminalPrompter;

fn left_or_error<T>(result: Result<T, InquireError>) -> Result<Option<T>, CliError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(InquireError::OperationCanceled | InquireError::OperationInterrupted) => Ok(None),
        Err(err) => Err(CliError::failure(format!("cannot prompt on this terminal: {err}"))),
    }
}

impl Prompter for TerminalPrompter {
    fn ask(&mut self, question: &Question) -> Result<Reply, CliError> {
        let labels = question.labels();
        let text = escape::one_line(&question.text);
        let displayed: Vec<String> = question
            .options
            .iter()
            .map(|o| {
                let label = escape::one_line(&o.label);
                match &o.description {
                    Some(d) => format!("{label} - {}", escape::one_line(d)),
                    None => label.into_owned(),
                }
            })
            .collect();
        let label_at = |i: usize| labels.get(i).cloned().map(Value::String);
        let reply = match question.mode {
            None => left_or_error(
                inquire::Text::new(&text)
                    .with_validator(inquire::required!("an answer is needed (Esc to answer later)"))
                    .prompt(),
            )?
            .map(Value::String),
            Some(SelectionMode::SingleSelect) => left_or_error(inquire::Select::new(&text, displayed).raw_prompt())?
                .and_then(|shown| label_at(shown.index)),
            Some(SelectionMode::MultiSelect) => left_or_error(
                inquire::MultiSelect::new(&text, displayed)
                    .with_help_message("space to tick, enter to confirm, Esc to answer later")
                    .with_validator(|picked: &[inquire::list_option::ListOption<&String>]| {
                        Ok(if picked.is_empty() {
                            inquire::validator::Validation::Invalid("pick at least one".into())
                        } else {
                            inquire::validator::Validation::Valid
                        })
                    })
                    .raw_prompt(),
            )?
            .map(|shown| Value::Array(shown.iter().filter_map(|s| label_at(s.index)).collect())),
        };
        Ok(reply.map_or(Reply::Left, Reply::Answer))
    }

    fn approve(&mut self, what: &str, may_stick: bool) -> Result<Option<Approval>, CliError> {
        let what = escape::one_line(what);
        if !may_stick {
            let approved = left_or_error(
                inquire::Confirm::new(&format!("Allow {what}?"))
                    .with_default(false)
                    .prompt(),
            )?;
            return Ok(approved.map(|yes| if yes { Approval::Yes } else { Approval::No }));
        }
        const CHOICES: [&str; 3] = ["No", "Yes, this once", "Yes, and always in this chat"];
        let picked = left_or_error(inquire::Select::new(&format!("Allow {what}?"), CHOICES.to_vec()).prompt())?;
        Ok(picked.map(|picked| match picked {
            "Yes, this once" => Approval::Yes,
            "Yes, and always in this chat" => Approval::Always,
            _ => Approval::No,
        }))
    }

    fn message(&mut self, prompt: &str) -> Result<Option<String>, CliError> {
        left_or_error(inquire::Text::new(prompt).prompt())
    }
}

/// Numbered choices read line by line (from stdin, or any reader in tests).
/// Prompts go to stderr so stdout stays the run's output.
#[derive(Debug)]
pub struct LinePrompter<R> {
    input: R,
    /// Typed lines are not echoed when input is piped: end the prompt's line.
    echo_newline: bool,
}

impl<R: BufRead> LinePrompter<R> {
    pub fn new(input: R) -> Self {
        LinePrompter {
            input,
            echo_newline: !std::io::stdin().is_terminal(),
        }
    }

    fn read_line(&mut self) -> Result<Option<String>, CliError> {
        let mut line = String::new();
        match self.input.read_line(&mut line) {
            Ok(0) => Ok(None),
            Ok(_) => {
                if self.echo_newline {
                    say("\n");
                }
                Ok(Some(line.trim_end_matches(['\n', '\r']).to_owned()))
            }
            Err(err) => Err(CliError::failure(format!("cannot read stdin: {err}"))),
        }
    }
}

/// Writes a prompt to stderr, through `out.rs` like all the command prints.
fn say(text: &str) {
    err!("{text}");
}

/// Why what was typed picks no option.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NoPick {
    /// The entry is no label and no number of one.
    #[error("Not an option: {0}")]
    NotAnOption(String),
    /// The entry matches several labels that differ only in case.
    #[error("{entry} matches {count} options that differ only in case: type one exactly, or its number")]
    Ambiguous { entry: String, count: usize },
    /// A multi-select line named nothing.
    #[error("Pick at least one.")]
    Nothing,
}

/// Reads a choice. A label typed exactly wins (options may themselves be
/// numbers: with "3", "2", "1", typing 1 means "1"); then a position in the
/// list; then a label typed in another case, when only one label matches
/// that way ("ci" with both "CI" and "ci" offered is "ci", exactly).
fn pick(entry: &str, labels: &[String]) -> Result<String, NoPick> {
    let entry = entry.trim();
    if let Some(label) = labels.iter().find(|l| l.as_str() == entry) {
        return Ok(label.clone());
    }
    if let Some(label) = entry
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| labels.get(i))
    {
        return Ok(label.clone());
    }
    let folded = entry.to_lowercase();
    let alike: Vec<&String> = labels.iter().filter(|l| l.to_lowercase() == folded).collect();
    match alike.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(NoPick::NotAnOption(escape::one_line(entry).into_owned())),
        several => Err(NoPick::Ambiguous {
            entry: escape::one_line(entry).into_owned(),
            count: several.len(),
        }),
    }
}

/// Splits a multi-select line into entries: separated by commas, an entry
/// in double quotes may hold commas (`"Paris, France", 2`), and `""` inside
/// quotes is one quote.
fn entries(line: &str) -> Vec<String> {
    let mut entries = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                current.push('"');
            }
            '"' if quoted => quoted = false,
            '"' if current.trim().is_empty() => {
                current.clear();
                quoted = true;
            }
            ',' if !quoted => entries.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    entries.push(current);
    entries.into_iter().filter(|e| !e.trim().is_empty()).collect()
}

/// The labels a multi-select line picks: the whole line when it is exactly
/// one label (commas and all), else each entry.
fn pick_several(line: &str, labels: &[String]) -> Result<Vec<String>, NoPick> {
    if let Some(label) = labels.iter().find(|l| l.as_str() == line.trim()) {
        return Ok(vec![label.clone()]);
    }
    let mut picked: Vec<String> = Vec::new();
    for entry in entries(line) {
        let label = pick(&entry, labels)?;
        if !picked.contains(&label) {
            picked.push(label);
        }
    }
    if picked.is_empty() {
        return Err(NoPick::Nothing);
    }
    Ok(picked)
}

impl<R: BufRead> Prompter for LinePrompter<R> {
    fn ask(&mut self, question: &Question) -> Result<Reply, CliError> {
        let labels = question.labels();
        say(&format!("? {}\n", escape::one_line(&question.text)));
        for (i, option) in question.options.iter().enumerate() {
            let label = escape::one_line(&option.label);
            match &option.description {
                Some(d) => say(&format!("  {}) {label} - {}\n", i + 1, escape::one_line(d))),
                None => say(&format!("  {}) {label}\n", i + 1)),
            }
        }
        loop {
            let hint = match question.mode {
                None => "Your answer: ",
                Some(SelectionMode::SingleSelect) => "Pick one (number or label): ",
                Some(SelectionMode::MultiSelect) => {
                    "Pick one or more, separated by commas (numbers or labels; a label with a comma in double quotes): "
                }
            };
            say(hint);
            let Some(line) = self.read_line()? else {
                say("\n");
                return Ok(Reply::Left);
            };
            match question.mode {
                None if line.trim().is_empty() => say("An answer is needed.\n"),
                None => return Ok(Reply::Answer(Value::String(line))),
                Some(SelectionMode::SingleSelect) => match pick(&line, &labels) {
                    Ok(label) => return Ok(Reply::Answer(Value::String(label))),
                    Err(why) => say(&format!("{why}; type 1-{} or a label.\n", labels.len())),
                },
                Some(SelectionMode::MultiSelect) => match pick_several(&line, &labels) {
                    Ok(picked) => {
                        return Ok(Reply::Answer(Value::Array(
                            picked.into_iter().map(Value::String).collect(),
                        )));
                    }
                    Err(why) => say(&format!("{why}\n")),
                },
            }
        }
    }

    fn approve(&mut self, what: &str, may_stick: bool) -> Result<Option<Approval>, CliError> {
        let choices = if may_stick { "y/n/a" } else { "y/n" };
        let what = escape::one_line(what);
        loop {
            say(&format!("Allow {what}? [{choices}]: "));
            let Some(line) = self.read_line()? else { return Ok(None) };
            match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => return Ok(Some(Approval::Yes)),
                "n" | "no" => return Ok(Some(Approval::No)),
                "a" | "always" if may_stick => return Ok(Some(Approval::Always)),
                _ if may_stick => say("Type y, n, or a to allow it without asking in this chat from now on.\n"),
                _ => say("Type y or n.\n"),
            }
        }
    }

    fn message(&mut self, prompt: &str) -> Result<Option<String>, CliError> {
        say(&format!("{prompt} "));
        self.read_line()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn question(payload: Value) -> Question {
        Question::from_payload(&payload).unwrap()
    }

    fn ask(input: &str, payload: Value) -> Reply {
        LinePrompter::new(input.as_bytes()).ask(&question(payload)).unwrap()
    }

    #[test]
    fn line_prompt_reads_numbers_or_labels_and_reasks_on_bad_input() {
        let single = json!({"question": "Env?", "options": [{"label": "staging"}, {"label": "production"}]});
        assert_eq!(ask("2\n", single.clone()), Reply::Answer(json!("production")));
        assert_eq!(ask("9\nStaging\n", single.clone()), Reply::Answer(json!("staging")));
        let multi = json!({"question": "X?", "options": [{"label": "a"}, {"label": "b"}, {"label": "c"}], "selectionMode": "multi_select"});
        assert_eq!(ask("\n3, a\n", multi.clone()), Reply::Answer(json!(["c", "a"])));
        assert_eq!(ask("a, zz\nb\n", multi), Reply::Answer(json!(["b"])));
        assert_eq!(
            ask("\n  \nhello\n", json!({"question": "Name?"})),
            Reply::Answer(json!("hello"))
        );
    }

    fn options(labels: &[&str], mode: &str) -> Value {
        let options: Vec<Value> = labels.iter().map(|l| json!({ "label": l })).collect();
        json!({"question": "Which?", "options": options, "selectionMode": mode})
    }

    #[test]
    fn a_label_typed_exactly_wins_over_a_position() {
        let countdown = options(&["3", "2", "1"], "single_select");
        assert_eq!(ask("1\n", countdown.clone()), Reply::Answer(json!("1")));
        assert_eq!(ask("3\n", countdown), Reply::Answer(json!("3")));
        let multi = options(&["3", "2", "1"], "multi_select");
        assert_eq!(ask("1, 2\n", multi), Reply::Answer(json!(["1", "2"])));
    }

    #[test]
    fn case_picks_a_label_only_when_it_is_the_only_one_alike() {
        let both = options(&["CI", "ci", "Docs"], "single_select");
        assert_eq!(ask("ci\n", both.clone()), Reply::Answer(json!("ci")));
        assert_eq!(ask("CI\n", both.clone()), Reply::Answer(json!("CI")));
        assert_eq!(ask("docs\n", both.clone()), Reply::Answer(json!("Docs")));
        // "Ci" is as near to one as to the other: asked again.
        assert_eq!(ask("Ci\n2\n", both), Reply::Answer(json!("ci")));
    }

    #[test]
    fn labels_with_commas_can_be_picked_in_a_multi_select() {
        let cities = options(&["Paris, France", "Paris, Texas", "Rome"], "multi_select");
        assert_eq!(
            ask("\"Paris, Texas\", rome\n", cities.clone()),
            Reply::Answer(json!(["Paris, Texas", "Rome"]))
        );
        assert_eq!(
            ask("Paris, France\n", cities.clone()),
            Reply::Answer(json!(["Paris, France"]))
        );
        assert_eq!(ask("1,3\n", cities), Reply::Answer(json!(["Paris, France", "Rome"])));
        let quote = options(&["say \"hi\", twice", "b"], "multi_select");
        assert_eq!(
            ask("\"say \"\"hi\"\", twice\", b\n", quote),
            Reply::Answer(json!(["say \"hi\", twice", "b"]))
        );
    }

    #[test]
    fn end_of_input_leaves_the_question_open() {
        assert_eq!(ask("", json!({"question": "Name?"})), Reply::Left);
    }
}
