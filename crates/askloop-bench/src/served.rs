//! A real `askloop serve` process for the `http` modes, and what the kernel
//! says it costs: CPU time (the process's CPU clock) and memory (`/proc/PID/status`).
//!
//! The server serves one agent, `deployment-assistant`, with the benchmark scenario's
//! instructions and `ask_user`, on the bench's store (SQLite with
//! `synchronous = FULL` unless `--db` says otherwise), its model the
//! OpenAI-compatible server at the bench's base URL, as a user would set it
//! up with `askloop.toml` and `OPENAI_BASE_URL`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use askloop_testkit::workload;
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::cli::Target;
use crate::environment::{AGENT_ID, Environment};

/// How long the server may take to print the address it listens on.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `askloop serve`, killed when dropped.
#[derive(Debug)]
pub struct Served {
    /// The API's base URL, `http://127.0.0.1:PORT/api`.
    pub api: String,
    /// Which server listens: `askloop`, or `mastra` (`bench/mastra/serve`).
    pub implementation: &'static str,
    pid: u32,
    child: Child,
    _config_dir: TempDir,
}

impl Served {
    /// Starts `askloop serve` on a free loopback port and waits until it
    /// says where it listens.
    pub async fn start(target: &Target, environment: &Environment) -> anyhow::Result<Served> {
        let bin = server_bin(target)?;
        let config_dir = tempfile::Builder::new()
            .prefix("askloop-bench-serve-")
            .tempdir()
            .context("cannot create a folder for the server's askloop.toml")?;
        let config = config_dir.path().join("askloop.toml");
        std::fs::write(&config, agent_config()).with_context(|| format!("cannot write {}", config.display()))?;
        let mut child = Command::new(&bin)
            .arg("--db")
            .arg(&environment.db)
            .args(["serve", "--addr", "127.0.0.1:0", "--model"])
            .arg(format!("openai/{}", target.model))
            .arg("--config")
            .arg(&config)
            .env("OPENAI_API_KEY", &target.api_key)
            .env("OPENAI_BASE_URL", &environment.base_url)
            .env_remove("ASKLOOP_API_TOKEN")
            .env_remove("ASKLOOP_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let pid = child.id().ok_or_else(|| anyhow!("the server exited at once"))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| anyhow!("no pipe from the server's stderr"))?;
        let mut lines = BufReader::new(stderr).lines();
        let mut said = Vec::new();
        let api = tokio::time::timeout(START_TIMEOUT, async {
            while let Some(line) = lines.next_line().await? {
                if let Some(api) = listening_at(&line) {
                    return Ok(Some(api));
                }
                said.push(line);
            }
            Ok::<_, std::io::Error>(None)
        })
        .await;
        let (implementation, api) = match api {
            Ok(Ok(Some(api))) => api,
            Ok(Ok(None)) => bail!("{} serve stopped before listening: {}", bin.display(), said.join(" | ")),
            Ok(Err(err)) => bail!("cannot read the server's stderr: {err}"),
            Err(_) => bail!(
                "{} serve did not listen within {START_TIMEOUT:?}: {}",
                bin.display(),
                said.join(" | ")
            ),
        };
        // Keep reading stderr, so a chatty server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Served {
            api,
            implementation,
            pid,
            child,
            _config_dir: config_dir,
        })
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// User plus system CPU time the server has used so far, to the
    /// nanosecond: the kernel's CPU clock of the whole process
    /// (`clock_getcpuclockid`), which counts every thread, those that have
    /// exited too. `/proc/PID/stat` counts in clock ticks (10 ms here), too
    /// coarse for a few round trips of 1-2 ms each: a short run could read 0.
    pub fn cpu_time(&self) -> anyhow::Result<Duration> {
        process_cpu_time(self.pid)
    }

    /// The server's memory now (`VmRSS`) and at its peak (`VmHWM`), in MB.
    pub fn memory_mb(&self) -> anyhow::Result<Memory> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .with_context(|| format!("cannot read /proc/{}/status", self.pid))?;
        let mb = |key: &str| {
            status_kib(&status, key)
                .map(|kib| crate::measure::round3(kib as f64 * 1024.0 / 1e6))
                .ok_or_else(|| anyhow!("no {key} in /proc/{}/status", self.pid))
        };
        Ok(Memory {
            rss: mb("VmRSS:")?,
            peak: mb("VmHWM:")?,
        })
    }

    /// Stops the server, reporting if it had died on its own.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("the server exited during the benchmark ({status})");
        }
        self.child.kill().await.context("cannot stop the server")
    }
}

/// A process's memory, in MB.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    /// Resident now.
    pub rss: f64,
    /// The most it has been resident.
    pub peak: f64,
}

/// The `askloop` binary: `--server-bin`, else the one built next to this
/// program (`cargo build --release -p askloop-cli` puts them side by side).
fn server_bin(target: &Target) -> anyhow::Result<PathBuf> {
    let bin = match &target.server_bin {
        Some(bin) => bin.clone(),
        None => std::env::current_exe()
            .context("cannot find this program's path")?
            .with_file_name(format!("askloop{}", std::env::consts::EXE_SUFFIX)),
    };
    if !bin.is_file() {
        bail!(
            "no askloop binary at {}: build it with `cargo build --release -p askloop-cli`, or pass --server-bin PATH",
            bin.display()
        );
    }
    Ok(bin)
}

/// The server's configuration: the bench's agent, its model the default
/// (`--model`).
fn agent_config() -> String {
    let instructions = serde_json::Value::from(workload::DEPLOY_SYSTEM);
    format!("[agents.{AGENT_ID}]\ninstructions = {instructions}\ntools = [\"ask_user\"]\n")
}

/// Which server listens, and the API's URL, from the line it prints when it
/// listens: `askloop: serving 1 agent (...) from ... on http://127.0.0.1:PORT/api`
/// (or Mastra's server of `bench/mastra`: `mastra: serving ...`).
fn listening_at(line: &str) -> Option<(&'static str, String)> {
    let implementation = ["askloop", "mastra"]
        .into_iter()
        .find(|name| line.starts_with(&format!("{name}: serving")))?;
    let url = line.rsplit(" on ").next()?.trim();
    (url.starts_with("http://") && url.ends_with("/api")).then(|| (implementation, url.to_owned()))
}

/// The CPU time process `pid` has used, all its threads, to the nanosecond.
fn process_cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let id = nix::unistd::Pid::from_raw(i32::try_from(pid).with_context(|| format!("process id {pid} out of range"))?);
    let clock =
        nix::time::clock_getcpuclockid(id).with_context(|| format!("cannot find the CPU clock of process {pid}"))?;
    let spent =
        nix::time::clock_gettime(clock).with_context(|| format!("cannot read the CPU clock of process {pid}"))?;
    Ok(Duration::from(spent))
}

/// A `Key:   123 kB` line of `/proc/PID/status`, in KiB.
fn status_kib(status: &str, key: &str) -> Option<u64> {
    let value = status.lines().find_map(|line| line.strip_prefix(key))?;
    value.trim().strip_suffix("kB")?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_cpu_clock_counts_less_than_a_tick_of_work() {
        let pid = std::process::id();
        let before = process_cpu_time(pid).unwrap();
        // Spin until getrusage says this process used 3 ms more CPU, well
        // under the 10 ms clock tick /proc/PID/stat counts in; counted in
        // CPU, not wall time, so a busy machine that preempts the thread
        // cannot shorten the work.
        let rusage_before = crate::measure::cpu_time();
        let bound = std::time::Instant::now() + Duration::from_secs(10);
        let mut x = 0u64;
        while crate::measure::cpu_time().saturating_sub(rusage_before) < Duration::from_millis(3)
            && std::time::Instant::now() < bound
        {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let spent = process_cpu_time(pid).unwrap().saturating_sub(before);
        assert!(spent >= Duration::from_millis(3), "{spent:?}");
        assert!(process_cpu_time(u32::MAX).is_err());
    }

    #[test]
    fn the_listening_line_gives_the_api_url() {
        assert_eq!(
            listening_at(
                "askloop: serving 1 agent (deployment-assistant) from /tmp/x/askloop.toml on http://127.0.0.1:40123/api"
            ),
            Some(("askloop", "http://127.0.0.1:40123/api".to_owned()))
        );
        assert_eq!(
            listening_at("mastra: serving 1 agent (deployment-assistant) on http://127.0.0.1:40124/api"),
            Some(("mastra", "http://127.0.0.1:40124/api".to_owned()))
        );
        assert_eq!(
            listening_at("askloop: no ASKLOOP_API_TOKEN set: the API needs no token"),
            None
        );
    }

    #[test]
    fn the_agent_config_is_valid_toml_with_the_bench_agent() {
        let config = agent_config();
        assert!(config.starts_with("[agents.deployment-assistant]\n"), "{config}");
        assert!(config.contains(&format!("instructions = \"{}\"", workload::DEPLOY_SYSTEM)));
    }

    #[test]
    fn status_lines_are_read_in_kib() {
        let status = "VmHWM:\t   17408 kB\nVmRSS:\t   17000 kB\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(17000));
        assert_eq!(status_kib(status, "VmHWM:"), Some(17408));
        assert_eq!(status_kib(status, "VmSwap:"), None);
    }
}
