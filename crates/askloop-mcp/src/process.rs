//! The programs of stdio MCP servers, and how they end.
//!
//! Each is started in a process group of its own (its pid is the group's
//! id), so that what it starts in turn (`npx` starts `node`) ends with it,
//! and a signal askloop sends reaches only processes askloop started. A
//! keeper task holds each one from its start and reaps it when it ends:
//!
//! - When its session is dropped (the call it served failed, was given up,
//!   or its run was cancelled), its standard input closes and it has
//!   [`McpServerSpec::stop_grace`](crate::McpServerSpec) to end on its own,
//!   as the MCP specification's stdio shutdown asks; then its group gets
//!   SIGTERM, and after the same grace again SIGKILL.
//! - At shutdown ([`stop_servers`]), every server still running gets
//!   SIGTERM at once and SIGKILL after its grace; nothing new is started.
//!   So no MCP server outlives `askloop serve`, `askloop mcp` or a command
//!   that used one, short of the process being killed itself (SIGKILL
//!   leaves no time to stop anything).
//! - Whatever the server left running in its group when it ended gets
//!   SIGKILL.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Duration;

use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The running servers of this process, by pid, and whether it is stopping.
static RUNNING: LazyLock<Mutex<Running>> = LazyLock::new(Mutex::default);

#[derive(Default)]
struct Running {
    keepers: HashMap<u32, Keeper>,
    stopping: bool,
}

/// What [`stop_servers`] needs of a server's keeper.
struct Keeper {
    terminate: CancellationToken,
    done: JoinHandle<()>,
}

fn running() -> std::sync::MutexGuard<'static, Running> {
    // Each change is one insert or remove: a panic cannot leave it half done.
    RUNNING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A started server's pipes, and the handle that stops it when dropped.
pub(crate) struct Started {
    pub process: ServerProcess,
    pub stdin: ChildStdin,
    pub stdout: ChildStdout,
}

/// A running server program. Dropping it starts its end: it has its grace
/// to end on its own (its input closes with its session), then SIGTERM,
/// then SIGKILL.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    closed: CancellationToken,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.closed.cancel();
    }
}

/// Starts `command` in a process group of its own, with piped standard
/// input and output; `server`: its name, for logs.
pub(crate) fn start(mut command: Command, server: &str, grace: Duration) -> std::io::Result<Started> {
    command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(false);
    #[cfg(unix)]
    command.process_group(0);
    let mut running = running();
    if running.stopping {
        return Err(std::io::Error::other(
            "askloop is stopping: no MCP server is started now",
        ));
    }
    let mut child = command.spawn()?;
    let (Some(stdin), Some(stdout), Some(pid)) = (child.stdin.take(), child.stdout.take(), child.id()) else {
        let _ = child.start_kill();
        return Err(std::io::Error::other("the server's pipes could not be opened"));
    };
    let closed = CancellationToken::new();
    let terminate = CancellationToken::new();
    let done = tokio::spawn(keep(
        child,
        pid,
        server.to_owned(),
        grace,
        closed.clone(),
        terminate.clone(),
    ));
    running.keepers.insert(pid, Keeper { terminate, done });
    Ok(Started {
        process: ServerProcess { closed },
        stdin,
        stdout,
    })
}

/// Holds a server until it has ended and is reaped (see the module's rules).
async fn keep(
    mut child: Child,
    pid: u32,
    server: String,
    grace: Duration,
    closed: CancellationToken,
    terminate: CancellationToken,
) {
    let ended = tokio::select! {
        _ = child.wait() => true,
        () = closed.cancelled() => false,
        () = terminate.cancelled() => false,
    };
    if !ended {
        let on_its_own = !terminate.is_cancelled() && ends_within(&mut child, grace, Some(&terminate)).await;
        if !on_its_own {
            tracing::info!(server = %server, pid, "the MCP server did not end when its input closed: SIGTERM");
            signal_group(&mut child, pid, Stop::Terminate);
            if !ends_within(&mut child, grace, None).await {
                tracing::warn!(server = %server, pid, "the MCP server did not end on SIGTERM: SIGKILL");
                signal_group(&mut child, pid, Stop::Kill);
                let _ = child.wait().await;
            }
        }
    }
    // What it started in its group and left behind.
    signal_group(&mut child, pid, Stop::Kill);
    running().keepers.remove(&pid);
}

/// Whether `child` ends within `grace` (sooner, if `cut_short` is
/// cancelled: then it has not).
async fn ends_within(child: &mut Child, grace: Duration, cut_short: Option<&CancellationToken>) -> bool {
    let cut_short = async {
        match cut_short {
            Some(token) => token.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        exited = tokio::time::timeout(grace, child.wait()) => exited.is_ok(),
        () = cut_short => false,
    }
}

enum Stop {
    Terminate,
    Kill,
}

/// Sends the signal to the process group `child` leads (pid `pid`), which
/// askloop made when it started it.
#[cfg(unix)]
fn signal_group(_child: &mut Child, pid: u32, stop: Stop) {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    let Ok(group) = i32::try_from(pid) else {
        return;
    };
    let signal = match stop {
        Stop::Terminate => Signal::SIGTERM,
        Stop::Kill => Signal::SIGKILL,
    };
    // ESRCH: the group has ended already.
    let _ = killpg(Pid::from_raw(group), signal);
}

/// Without process groups, the server itself.
#[cfg(not(unix))]
fn signal_group(child: &mut Child, _pid: u32, _stop: Stop) {
    let _ = child.start_kill();
}

/// Stops every stdio MCP server this process started and still runs:
/// SIGTERM to each one's process group at once, SIGKILL after its grace;
/// returns once all have ended. No server is started after it is called.
/// `askloop` calls it before it exits; a program that gives agents MCP
/// servers' tools ([`crate::mcp_tools`]) should call it before it ends.
pub async fn stop_servers() {
    let keepers: Vec<Keeper> = {
        let mut running = running();
        running.stopping = true;
        running.keepers.drain().map(|(_, keeper)| keeper).collect()
    };
    for keeper in &keepers {
        keeper.terminate.cancel();
    }
    for keeper in keepers {
        let _ = keeper.done.await;
    }
}
