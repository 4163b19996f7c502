//! Keeping the cause of an error, and writing a whole chain of causes in a
//! log line.
//!
//! askloop's errors say what failed in words a person can act on; the error
//! that caused it (an I/O error, a TLS failure, a broken pipe to an MCP
//! server) is kept as its [`std::error::Error::source`], so that a log shows
//! the whole chain with [`ErrorChain`] while messages and wire shapes stay
//! as they are.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// The error that caused another, kept for its source chain. Cheap to
/// clone (errors that carry one stay `Clone`); two causes are equal when
/// they read the same.
#[derive(Clone)]
pub struct Cause(Arc<dyn Error + Send + Sync + 'static>);

impl Cause {
    /// Keeps `err` as a cause.
    pub fn new(err: impl Error + Send + Sync + 'static) -> Self {
        Cause(Arc::new(err))
    }

    /// The error kept.
    pub fn get(&self) -> &(dyn Error + Send + Sync + 'static) {
        self.0.as_ref()
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Error for Cause {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for Cause {}

/// An error with every cause behind it, for logs: `outer: cause: its
/// cause`. A cause whose text the error before it already quotes is not
/// written twice.
///
/// ```
/// use askloop::ErrorChain;
/// let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset");
/// let err = askloop::model::ModelError::Transport {
///     provider: "openai".into(),
///     message: "the stream broke off".into(),
///     source: Some(askloop::Cause::new(io)),
/// };
/// assert_eq!(
///     ErrorChain(&err).to_string(),
///     "the connection to openai failed: the stream broke off: connection reset"
/// );
/// ```
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut written = self.0.to_string();
        f.write_str(&written)?;
        let mut next = self.0.source();
        while let Some(cause) = next {
            let text = cause.to_string();
            if !text.is_empty() && !written.contains(&text) {
                write!(f, ": {text}")?;
                written = text;
            }
            next = cause.source();
        }
        Ok(())
    }
}

impl fmt::Debug for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Layer {
        text: &'static str,
        #[source]
        source: Option<Cause>,
    }

    #[test]
    fn a_chain_is_written_outer_first_and_a_cause_already_quoted_is_not_written_twice() {
        let io = std::io::Error::other("disk full");
        let inner = Layer {
            text: "cannot write the run: disk full",
            source: Some(Cause::new(io)),
        };
        let outer = Layer {
            text: "the answer was not stored",
            source: Some(Cause::new(inner)),
        };
        assert_eq!(
            ErrorChain(&outer).to_string(),
            "the answer was not stored: cannot write the run: disk full"
        );
    }

    #[test]
    fn a_cause_keeps_the_source_of_the_error_it_holds() {
        let inner = Layer {
            text: "handshake failed",
            source: Some(Cause::new(std::io::Error::other("connection refused"))),
        };
        let cause = Cause::new(inner);
        let io = cause.source().expect("the held error's source");
        assert_eq!(io.to_string(), "connection refused");
        assert_eq!(cause.clone(), cause, "a clone reads the same");
    }
}
