//! Asking the person: proper prompts on a terminal (a line editor, arrow
//! keys, checkboxes), and plain numbered choices read line by line when stdin
//! is not a terminal, so scripts and tests can drive them.

use std::io::{BufRead, IsTerminal, Write};

use askloop::{Question, SelectionMode};
use inquire::error::InquireError;
use serde_json::Value;

use crate::exit::CliError;

/// What the person did at a prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// An answer, shaped as the question needs (string or list).
    Answer(Value),
    /// Esc, Ctrl-C or end of input: leave the question open.
    Left,
}

/// Asks questions.
pub trait Prompter {
    /// Asks one `ask_user` question.
    fn ask(&mut self, question: &Question) -> Result<Reply, CliError>;
    /// Asks whether a tool may run. `None` when the person left.
    fn approve(&mut self, tool: &str, args: &Value) -> Result<Option<bool>, CliError>;
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
        let displayed: Vec<String> = question
            .options
            .iter()
            .map(|o| match &o.description {
                Some(d) => format!("{} - {d}", o.label),
                None => o.label.clone(),
            })
            .collect();
        let index_of = |shown: &str| displayed.iter().position(|d| d == shown);
        let reply = match question.mode {
            None => left_or_error(
                inquire::Text::new(&question.text)
                    .with_validator(inquire::required!("an answer is needed (Esc to answer later)"))
                    .prompt(),
            )?
            .map(Value::String),
            Some(SelectionMode::SingleSelect) => {
                left_or_error(inquire::Select::new(&question.text, displayed.clone()).prompt())?
                    .and_then(|shown| index_of(&shown))
                    .map(|i| Value::String(labels[i].clone()))
            }
            Some(SelectionMode::MultiSelect) => left_or_error(
                inquire::MultiSelect::new(&question.text, displayed.clone())
                    .with_help_message("space to tick, enter to confirm, Esc to answer later")
                    .with_validator(|picked: &[inquire::list_option::ListOption<&String>]| {
                        Ok(if picked.is_empty() {
                            inquire::validator::Validation::Invalid("pick at least one".into())
                        } else {
                            inquire::validator::Validation::Valid
                        })
                    })
                    .prompt(),
            )?
            .map(|shown| {
                Value::Array(
                    shown
                        .iter()
                        .filter_map(|s| index_of(s))
                        .map(|i| Value::String(labels[i].clone()))
                        .collect(),
                )
            }),
        };
        Ok(reply.map_or(Reply::Left, Reply::Answer))
    }

    fn approve(&mut self, tool: &str, args: &Value) -> Result<Option<bool>, CliError> {
        left_or_error(
            inquire::Confirm::new(&format!("Allow {tool} to run with {args}?"))
                .with_default(false)
                .prompt(),
        )
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

fn say(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{text}");
    let _ = err.flush();
}

/// Reads a choice: a number from the list or a label, case-insensitively.
fn pick(entry: &str, labels: &[String]) -> Option<String> {
    let entry = entry.trim();
    if let Ok(n) = entry.parse::<usize>() {
        return n.checked_sub(1).and_then(|i| labels.get(i)).cloned();
    }
    labels.iter().find(|l| l.eq_ignore_ascii_case(entry)).cloned()
}

impl<R: BufRead> Prompter for LinePrompter<R> {
    fn ask(&mut self, question: &Question) -> Result<Reply, CliError> {
        let labels = question.labels();
        say(&format!("? {}\n", question.text));
        for (i, option) in question.options.iter().enumerate() {
            match &option.description {
                Some(d) => say(&format!("  {}) {} - {d}\n", i + 1, option.label)),
                None => say(&format!("  {}) {}\n", i + 1, option.label)),
            }
        }
        loop {
            let hint = match question.mode {
                None => "Your answer: ",
                Some(SelectionMode::SingleSelect) => "Pick one (number or label): ",
                Some(SelectionMode::MultiSelect) => "Pick one or more, separated by commas (numbers or labels): ",
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
                    Some(label) => return Ok(Reply::Answer(Value::String(label))),
                    None => say(&format!("Not an option: type 1-{} or a label.\n", labels.len())),
                },
                Some(SelectionMode::MultiSelect) => {
                    let mut picked: Vec<String> = Vec::new();
                    let mut bad = None;
                    for entry in line.split(',').filter(|e| !e.trim().is_empty()) {
                        match pick(entry, &labels) {
                            Some(label) if !picked.contains(&label) => picked.push(label),
                            Some(_) => {}
                            None => bad = Some(entry.trim().to_owned()),
                        }
                    }
                    match (bad, picked.is_empty()) {
                        (Some(entry), _) => say(&format!("Not an option: {entry}\n")),
                        (None, true) => say("Pick at least one.\n"),
                        (None, false) => {
                            return Ok(Reply::Answer(Value::Array(
                                picked.into_iter().map(Value::String).collect(),
                            )));
                        }
                    }
                }
            }
        }
    }

    fn approve(&mut self, tool: &str, args: &Value) -> Result<Option<bool>, CliError> {
        loop {
            say(&format!("Allow {tool} to run with {args}? [y/n]: "));
            let Some(line) = self.read_line()? else { return Ok(None) };
            match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => return Ok(Some(true)),
                "n" | "no" => return Ok(Some(false)),
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

    #[test]
    fn end_of_input_leaves_the_question_open() {
        assert_eq!(ask("", json!({"question": "Name?"})), Reply::Left);
    }
}
