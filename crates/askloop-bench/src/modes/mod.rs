//! The benchmark modes, each producing one JSON line.

mod compare;
mod concurrent;
mod http;
mod inbox;
mod long;
mod restart;
mod roundtrip;
mod scale;
mod thread;
mod waiting;

use askloop_testkit::workload::Pieces;
use serde::Serialize;

pub use compare::compare;
pub use concurrent::concurrent;
pub use http::{http, http_concurrent};
pub use inbox::inbox;
pub use long::long;
pub use restart::{restart, restart_resume, restart_suspend};
pub use roundtrip::roundtrip;
pub use scale::scale;
pub use thread::{thread, thread_answer, thread_start};
pub use waiting::waiting;

/// Every report names the implementation, so lines from several frameworks
/// can be compared.
pub const IMPL: &str = "askloop";

/// What a mode measured: its JSON line, and the runs that went wrong.
#[derive(Debug)]
pub struct Report {
    /// The one JSON line.
    pub line: String,
    /// One line per run that did not end correctly (the first few).
    pub failures: Vec<String>,
    /// How many runs went wrong in all.
    pub failed: usize,
}

impl Report {
    /// A report of `figures`, with the failures of its runs.
    pub fn new(figures: &impl Serialize, failures: Failures) -> anyhow::Result<Report> {
        Ok(Report {
            line: serde_json::to_string(figures)?,
            failures: failures.first,
            failed: failures.count,
        })
    }

    /// The line with `"pieces":"TEXT,ARGUMENTS"` added when the fake model
    /// streamed in other pieces than the default's (20 text deltas, 4
    /// argument fragments), so a line says which workload it measured.
    pub fn noting_pieces(mut self, pieces: Pieces) -> Report {
        if pieces == Pieces::TOKENS {
            return self;
        }
        if let Ok(mut fields) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&self.line) {
            fields.insert("pieces".to_owned(), pieces.to_string().into());
            if let Ok(line) = serde_json::to_string(&fields) {
                self.line = line;
            }
        }
        self
    }
}

/// Runs that went wrong: counted, the first few kept to show.
#[derive(Debug, Default)]
pub struct Failures {
    first: Vec<String>,
    count: usize,
}

impl Failures {
    const KEPT: usize = 3;

    /// Records a failure.
    pub fn push(&mut self, failure: impl std::fmt::Display) {
        self.count += 1;
        if self.first.len() < Self::KEPT {
            self.first.push(one_line(&format!("{failure:#}")));
        }
    }
}

/// An error on one line, whatever its sources printed.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
