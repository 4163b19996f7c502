//! Writing for people and scripts without ever panicking.
//!
//! `print!` and `eprint!` panic when the write fails, as it does when the
//! reader of a pipe has gone (`askloop runs | head -1`). Like every Unix
//! tool, askloop then simply stops being heard: these macros write and
//! ignore a failed write. (The crate denies `print!`-style macros so that no
//! other path to a panic comes back.) Each call writes with one lock, so a
//! line is never interleaved with another thread's.

use std::fmt;
use std::io::Write;

/// Writes to stdout; a closed or failing stdout is ignored.
pub fn stdout(text: fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(text).and_then(|()| out.flush());
}

/// Writes to stderr; a closed or failing stderr is ignored.
pub fn stderr(text: fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(text).and_then(|()| err.flush());
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
