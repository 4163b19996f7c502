//! Driving the `askloop` binary at a real pseudo-terminal (rexpect).
#![allow(clippy::unwrap_used)]

use rexpect::process::WaitStatus;
use rexpect::session::PtySession;

use super::Env;

/// The down-arrow key.
pub const DOWN: &str = "\x1b[B";
/// The escape key.
pub const ESC: &str = "\x1b";

/// Types keys the way a person does: after the prompt has settled (a
/// prompt switches the terminal to raw mode while it draws itself).
pub fn press(p: &mut PtySession, keys: &str) {
    std::thread::sleep(std::time::Duration::from_millis(400));
    p.send(keys).unwrap();
    p.flush().unwrap();
}

/// The binary with `args` in `env`, at a terminal of 20 s patience.
pub fn spawn(env: &Env, args: &[&str]) -> PtySession {
    let mut cmd = env.cmd();
    cmd.args(args).env("TERM", "xterm-256color");
    rexpect::session::spawn_command(cmd, Some(20_000)).unwrap()
}

/// How the process ended.
pub fn exit_code(session: &mut PtySession) -> i32 {
    match session.process().wait().unwrap() {
        WaitStatus::Exited(_, code) => code,
        other => panic!("unexpected end {other:?}"),
    }
}
