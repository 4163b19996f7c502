//! Where a benchmark runs: the model server (external, or the testkit's fake
//! one started in this process) and the store (given, or a fresh SQLite file
//! in a temporary directory), and the benchmark scenario's agent (`docs/benchmarks.md`) built on them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use askloop::{Agent, AskUser};
use askloop_providers::{OpenAiConfig, OpenAiModel};
use askloop_testkit::FakeServer;
use askloop_testkit::workload::{self, Pieces};
use tempfile::TempDir;

use crate::cli::Target;
use crate::resume_clock::{ResumeClock, Timed, TimedModel};

/// The agent's id.
pub const AGENT_ID: &str = "deployment-assistant";

/// Which scripted conversation the in-process fake server plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// One question, then `Deploying to <answer>.`
    Deploy,
    /// T questions in a row, then the closing text.
    Long(usize),
}

/// The model server and the store of one benchmark.
#[derive(Debug)]
pub struct Environment {
    /// The OpenAI-compatible base URL, up to and including `/v1`.
    pub base_url: String,
    /// The store location, as `askloop_store::open` takes it.
    pub db: String,
    /// The SQLite file, when the store is one (for its size).
    pub db_file: Option<PathBuf>,
    target: Target,
    // Dropped last: the server and the temporary directory outlive the agent.
    server: Option<InProcessServer>,
    _dir: Option<TempDir>,
}

impl Environment {
    /// Starts what the target leaves out and checks the server answers.
    pub async fn prepare(target: &Target, workload: Workload) -> anyhow::Result<Environment> {
        let (base_url, server) = match &target.base_url {
            Some(url) => {
                check_reachable(url).await?;
                (url.clone(), None)
            }
            None => {
                let server = InProcessServer::start(workload, target.pieces)?;
                (server.base_url.clone(), Some(server))
            }
        };
        let (db, dir) = match &target.db {
            Some(db) => (db.clone(), None),
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("askloop-bench-")
                    .tempdir()
                    .context("cannot create a temporary directory for the SQLite store")?;
                let path = dir.path().join("runs.db");
                let db = path
                    .to_str()
                    .ok_or_else(|| anyhow!("the temporary directory's path is not UTF-8"))?
                    .to_owned();
                (db, Some(dir))
            }
        };
        Ok(Environment {
            db_file: sqlite_file(&db),
            base_url,
            db,
            target: target.clone(),
            server,
            _dir: dir,
        })
    }

    /// The CPU time the in-process fake model has used so far (its own
    /// thread's CPU clock); `None` when the model is an outside server, whose
    /// cost is not this process's.
    pub async fn model_cpu_time(&self) -> Option<Duration> {
        match &self.server {
            Some(server) => server.cpu_time().await,
            None => None,
        }
    }

    /// The benchmark's agent: the benchmark scenario's instructions, `ask_user`, the store,
    /// and an OpenAI-compatible model at the base URL.
    pub async fn agent(&self) -> anyhow::Result<Agent> {
        self.timed_agent(None).await
    }

    /// [`Environment::agent`], its store and model timed by `clock` when given.
    pub async fn timed_agent(&self, clock: Option<Arc<ResumeClock>>) -> anyhow::Result<Agent> {
        let mut store = askloop_store::open(&self.db)
            .await
            .with_context(|| format!("cannot open the store at {}", self.db))?;
        if let Some(clock) = &clock {
            let timed = Timed {
                clock: Arc::clone(clock),
            };
            store = Arc::new(askloop::store::Layered::new(store, timed));
        }
        let config = OpenAiConfig::new(&self.target.model, &self.base_url)
            .api_key(&self.target.api_key)
            .provider("openai-compatible");
        let name = format!("openai-compatible/{}@{}", self.target.model, self.base_url);
        let mut model: Arc<dyn askloop::Model> =
            Arc::new(OpenAiModel::new(name, config).context("cannot build the model client")?);
        if let Some(clock) = clock {
            model = Arc::new(TimedModel { inner: model, clock });
        }
        let agent = Agent::builder(AGENT_ID)
            .instructions(workload::DEPLOY_SYSTEM)
            .model(model)
            .tool(AskUser::new())
            .store(store)
            .build()?;
        Ok(agent)
    }

    /// The bytes the SQLite store holds on disk (the file and its WAL);
    /// `None` for PostgreSQL.
    pub fn db_bytes(&self) -> Option<u64> {
        let file = self.db_file.as_ref()?;
        let size = |path: &PathBuf| std::fs::metadata(path).map_or(0, |m| m.len());
        let mut wal = file.clone().into_os_string();
        wal.push("-wal");
        Some(size(file) + size(&PathBuf::from(wal)))
    }
}

/// The SQLite file a location names, as `askloop_store::open` reads it.
pub(crate) fn sqlite_file(location: &str) -> Option<PathBuf> {
    if location.starts_with("postgres://") || location.starts_with("postgresql://") {
        return None;
    }
    let path = location
        .strip_prefix("sqlite://")
        .or_else(|| location.strip_prefix("sqlite:"))
        .unwrap_or(location);
    Some(PathBuf::from(path.split('?').next().unwrap_or(path)))
}

/// Fails fast, with the address, when nothing listens at the base URL
/// (instead of the provider's retries with backoff on every run).
async fn check_reachable(base_url: &str) -> anyhow::Result<()> {
    let (https, rest) = match base_url.strip_prefix("https://") {
        Some(rest) => (true, rest),
        None => (false, base_url.strip_prefix("http://").unwrap_or(base_url)),
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let has_port = match authority.rfind(']') {
        Some(end) => authority[end..].contains(':'),
        None => authority.contains(':'),
    };
    let address = if has_port {
        authority.to_owned()
    } else {
        format!("{authority}:{}", if https { 443 } else { 80 })
    };
    match tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(&address)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => bail!("cannot reach --base-url {base_url} ({address}): {err}"),
        Err(_) => bail!("cannot reach --base-url {base_url} ({address}): no answer within 5 s"),
    }
}

/// The testkit's fake OpenAI-compatible server on a thread and a
/// single-threaded runtime of its own, as the `askloop-fake-openai` program
/// runs it, so it does not compete with the agent for the bench's workers.
#[derive(Debug)]
struct InProcessServer {
    base_url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    cpu: tokio::sync::mpsc::UnboundedSender<tokio::sync::oneshot::Sender<Option<Duration>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl InProcessServer {
    fn start(workload: Workload, pieces: Pieces) -> anyhow::Result<InProcessServer> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<String>>();
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (cpu_tx, mut cpu_rx) =
            tokio::sync::mpsc::unbounded_channel::<tokio::sync::oneshot::Sender<Option<Duration>>>();
        let thread = std::thread::Builder::new()
            .name("fake-openai".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(err) => {
                        let _ = ready_tx.send(Err(anyhow::Error::new(err).context("cannot start its runtime")));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let builder = FakeServer::builder().record_requests(false);
                    let builder = match workload {
                        Workload::Deploy => builder.responder(workload::deploy_responder_in(pieces)),
                        Workload::Long(t) => builder.responder(workload::long_responder_in(t, pieces)),
                    };
                    match builder.start().await {
                        Ok(server) => {
                            let _ = ready_tx.send(Ok(server.openai_base_url()));
                            // The server's every task runs on this thread: its CPU
                            // clock is what the model costs, read here when asked.
                            loop {
                                tokio::select! {
                                    _ = &mut stop_rx => break,
                                    Some(reply) = cpu_rx.recv() => {
                                        let spent = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID);
                                        let _ = reply.send(spent.ok().map(Duration::from));
                                    }
                                }
                            }
                            drop(server);
                        }
                        Err(err) => {
                            let _ = ready_tx.send(Err(anyhow::Error::new(err).context("cannot listen")));
                        }
                    }
                });
            })
            .context("cannot start the fake server's thread")?;
        let base_url = ready_rx
            .recv()
            .map_err(|_| anyhow!("the fake server's thread stopped before it was ready"))?
            .map_err(|err| anyhow!("the in-process fake server {err:#}"))?;
        Ok(InProcessServer {
            base_url,
            stop: Some(stop_tx),
            cpu: cpu_tx,
            thread: Some(thread),
        })
    }

    /// The CPU time the server's thread has used so far.
    async fn cpu_time(&self) -> Option<Duration> {
        let (reply, spent) = tokio::sync::oneshot::channel();
        self.cpu.send(reply).ok()?;
        spent.await.ok().flatten()
    }
}

impl Drop for InProcessServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_locations_name_their_file_and_postgres_none() {
        assert_eq!(sqlite_file("/tmp/a.db"), Some(PathBuf::from("/tmp/a.db")));
        assert_eq!(sqlite_file("sqlite:///tmp/a.db"), Some(PathBuf::from("/tmp/a.db")));
        assert_eq!(sqlite_file("sqlite:a.db?mode=rwc"), Some(PathBuf::from("a.db")));
        assert_eq!(sqlite_file("postgres://u@h/db"), None);
    }

    #[tokio::test]
    async fn an_unreachable_base_url_is_a_clear_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let err = check_reachable(&format!("http://127.0.0.1:{port}/v1"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains(&format!("127.0.0.1:{port}")), "{err}");
    }
}
