//! Writing for people and scripts without ever panicking.
//!
//! `print!` and `eprint!` panic when the write fails, as it does when the
//! reader of a pipe has gone (`askloop runs | head -1`). Like every Unix
//! tool, askloop then simply stops being heard: these macros write and
//! ignore a failed write. (The crate denies `print!`-style macros so that no
//! other path to a panic comes back.) Each call writes with one lock, so a
//! line is never interleaved with another thread's.
//!
//! They are also where the command's output meets the terminal: whatever
//! they print passes through [`escape::lines`], so no control character
//! from a run (a model's text, a tool name, a run id in an error message)
//! reaches it raw, whichever code path formatted it. `--json` lines are
//! made with [`escape::json`], which leaves nothing for this to change.

use std::fmt;
use std::io::Write;

use crate::escape;

/// Writes to stdout; a closed or failing stdout is ignored.
pub fn stdout(text: fmt::Arguments<'_>) {
    write(&mut std::io::stdout().lock(), text);
}

/// Writes to stderr; a closed or failing stderr is ignored.
pub fn stderr(text: fmt::Arguments<'_>) {
    write(&mut std::io::stderr().lock(), text);
}

/// Prints `value` on stdout as one line of JSON, inert on a terminal
/// ([`escape::json`]).
pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> Result<(), serde_json::Error> {
    let line = escape::json(value)?;
    stdout(format_args!("{line}\n"));
    Ok(())
}

fn write(to: &mut impl Write, text: fmt::Arguments<'_>) {
    let text = match text.as_str() {
        Some(fixed) => std::borrow::Cow::Borrowed(fixed),
        None => std::borrow::Cow::Owned(text.to_string()),
    };
    let _ = to.write_all(escape::lines(&text).as_bytes()).and_then(|()| to.flush());
}

/// `print!` that never panics.
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::stdout(format_args!($($arg)*)) };
}

/// `println!` that never panics.
macro_rules! outln {
    () => { $crate::out::stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::out::stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprint!` that never panics.
macro_rules! err {
    ($($arg:tt)*) => { $crate::out::stderr(format_args!($($arg)*)) };
}

/// `eprintln!` that never panics.
macro_rules! errln {
    () => { $crate::out::stderr(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::out::stderr(format_args!("{}\n", format_args!($($arg)*))) };
}
