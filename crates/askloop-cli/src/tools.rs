//! Tools of the default agent besides `ask_user`.
//!
//! `write_file` lets the agent write a file in the current directory, and
//! every call waits for the person's approval (`askloop approve` /
//! `askloop decline`, or a yes/no prompt in `chat`). It lives in
//! `askloop-server`, whose configured agents use it too.

use askloop::FunctionTool;

/// `write_file`: writes a file under the current directory, after approval.
pub fn write_file() -> FunctionTool {
    askloop_server::tools::write_file(".")
}
