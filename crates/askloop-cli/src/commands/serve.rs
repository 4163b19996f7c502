//! `askloop serve`: the HTTP API for the agents of a configuration file (or
//! the default agent), on the store given by `--db`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use askloop::{Agent, RunStore};
#[cfg(unix)]
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::oneshot;

use askloop_config::{ApprovalNames, ObserveModel, ServerConfig};
use askloop_server::links::AnswerLinks;
use askloop_server::{Metrics, Server, ServerOptions, Webhooks};

use super::{Context, announce};
use crate::cli::{ModelArgs, ServeArgs};
use crate::exit::{CliError, Done};
use crate::setup;

pub async fn serve(ctx: &Context, args: ServeArgs) -> Result<Done, CliError> {
    let addr: SocketAddr = args.addr.parse().map_err(|err| {
        CliError::usage(format!(
            "--addr {}: {err}; give HOST:PORT, e.g. 127.0.0.1:4111",
            args.addr
        ))
    })?;
    let threads = args.request_threads();
    // The agents are built on the store as the metrics observe it, so that
    // their runs and resolutions are counted for `GET /metrics`.
    let metrics = Metrics::new();
    let Configured { config, agents, store } =
        configured_agents(ctx, &args.model, |store| metrics.observe_store(store), &|model| {
            metrics.observe_model(model)
        })
        .await?;
    let token = std::env::var("ASKLOOP_API_TOKEN").ok().filter(|t| !t.is_empty());
    let protected = token.is_some() || !config.tokens.is_empty();
    let options = ServerOptions::default()
        .token(token)
        .tokens(config.tokens.clone())
        .author_header(config.author_header.clone())
        .allow_unauthenticated(args.allow_unauthenticated)
        .cors_origins(args.cors_origin)
        .allowed_hosts(config.allowed_hosts.iter().cloned().chain(args.allow_host).collect())
        .public_url(config.public_url.clone())
        .body_limit(args.max_body_bytes)
        .event_streams_per_caller(args.max_event_streams)
        .shutdown_grace(args.shutdown_grace)
        .recover_every(args.recover_every)
        .header_read_timeout(args.header_timeout)
        .body_read_timeout(args.body_timeout)
        .metrics_every(args.metrics_every)
        .mcp_sessions(config.mcp_sessions);
    let ids: Vec<String> = agents.iter().map(|a| a.id().to_owned()).collect();
    let webhooks = Webhooks::new(config.webhooks.clone(), config.public_url.clone());
    let mut server = Server::new(agents, store)
        .map_err(|err| CliError::usage(err.to_string()))?
        .options(options)
        .metrics(metrics)
        .webhooks(webhooks);
    match AnswerLinks::configured(config.links.as_ref(), config.public_url.as_deref()) {
        Ok(Some(links)) => server = server.links(links),
        Ok(None) => {}
        Err(off) => errln!("askloop: warning: {off}"),
    }
    if let Some(email) = &config.email {
        server = server
            .email(email.clone())
            .map_err(|err| CliError::usage(format!("{}: email: {err}", config_name(&config))))?;
    }
    if let Some(slack) = &config.slack {
        server = server
            .slack(slack.clone())
            .map_err(|err| CliError::usage(format!("{}: slack: {err}", config_name(&config))))?;
    }
    let server = config.agents.iter().fold(server, |server, agent| {
        server.allow_overrides(agent.id.clone(), agent.request_overrides.iter().copied())
    });
    // Refused before listening; what is only unwise is warned of when
    // serving starts.
    server
        .check_exposure(addr)
        .map_err(|err| CliError::usage(err.to_string()))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| CliError::failure(format!("cannot listen on {addr}: {err}")))?;
    let bound = listener
        .local_addr()
        .map_err(|err| CliError::failure(err.to_string()))?;
    if !protected {
        errln!(
            "askloop: no ASKLOOP_API_TOKEN set: the API needs no token{}",
            if bound.ip().is_loopback() {
                ", so it listens on loopback only (anyone on this machine can answer runs)"
            } else {
                " and listens beyond loopback (--allow-unauthenticated)"
            }
        );
    }
    errln!(
        "askloop: {threads} thread{} handle{} requests (--threads)",
        if threads == 1 { "" } else { "s" },
        if threads == 1 { "s" } else { "" }
    );
    if let (Some(_), Some(url)) = (&config.links, &config.public_url) {
        errln!("askloop: answer links are on: {url}/links/...");
    }
    let source = config
        .path
        .as_ref()
        .map_or_else(|| "the default agent".to_owned(), |p| p.display().to_string());
    errln!(
        "askloop: serving {} ({}) from {source} on http://{bound}/api",
        if ids.len() == 1 {
            "1 agent".to_owned()
        } else {
            format!("{} agents", ids.len())
        },
        ids.join(", ")
    );
    if !config.webhooks.is_empty() {
        errln!(
            "askloop: sending notifications to {} webhook{}",
            config.webhooks.len(),
            if config.webhooks.len() == 1 { "" } else { "s" }
        );
    }
    if let Some(email) = &config.email {
        let people = email.recipients.len();
        errln!(
            "askloop: mailing questions through {}:{} to {people} recipient{}",
            email.host,
            email.port,
            if people == 1 { "" } else { "s" }
        );
    }
    if let Some(slack) = &config.slack {
        let channels = slack.recipients.len();
        errln!(
            "askloop: posting questions to {channels} Slack channel{}; interactions at {}",
            if channels == 1 { "" } else { "s" },
            askloop_server::slack::INTERACTIONS_PATH
        );
    }
    let (shutdown, stop) = shutdown_signals();
    server
        .serve_with_stop(listener, shutdown, stop)
        .await
        .map_err(|err| CliError::failure(err.to_string()))?;
    errln!("askloop: stopped");
    Ok(Done::Ok)
}

/// The agents of the configuration file (`--config`, else `askloop.toml` if
/// it exists, else the default agent), with their MCP servers' tools, on the
/// store of `--db`; announces the model when an agent uses the default one,
/// and checks the names of `require_approval` against the tools the MCP
/// servers list. `askloop serve` and `askloop mcp` start the same way;
/// `observe` wraps the store before the agents are built on it.
pub(super) async fn configured_agents(
    ctx: &Context,
    model: &ModelArgs,
    observe: impl FnOnce(Arc<dyn RunStore>) -> Arc<dyn RunStore>,
    observe_model: &ObserveModel<'_>,
) -> Result<Configured, CliError> {
    let config = load_config(ctx)?;
    let store = observe(setup::open_store(ctx.db.as_deref(), askloop_store::Access::Create).await?);
    let agents = build_agents(config.clone(), model, &store, Starting::Server, observe_model).await?;
    Ok(Configured { config, agents, store })
}

/// The agent `agent_id` of the configuration file, rebuilt on `store` to go
/// on with a run that `askloop serve` or `askloop mcp` started: the same
/// tools, instructions and limits as there. Only that agent's MCP servers
/// are started, for their tools; the names of `require_approval` are not
/// checked again.
pub(super) async fn configured_agent(
    ctx: &Context,
    agent_id: &str,
    model: &ModelArgs,
    store: &Arc<dyn RunStore>,
) -> Result<Agent, CliError> {
    let mut config = load_config(ctx)?;
    let source = config
        .path
        .as_ref()
        .map_or_else(|| "the default configuration".to_owned(), |p| p.display().to_string());
    config.agents.retain(|agent| agent.id == agent_id);
    if config.agents.is_empty() {
        return Err(CliError::usage(format!(
            "the run belongs to agent `{agent_id}`, which {source} does not define; give --config the file that `askloop serve` or `askloop mcp` started it with, or resume it from the program that started it"
        )));
    }
    let mut agents = build_agents(config, model, store, Starting::Continuation, &|model| model).await?;
    Ok(agents.remove(0))
}

/// The configuration file of `--config` (else `./askloop.toml` if it
/// exists, else the default agent), checked.
pub(super) fn load_config(ctx: &Context) -> Result<ServerConfig, CliError> {
    let config = ServerConfig::find(ctx.config.as_deref()).map_err(|err| CliError::usage(err.to_string()))?;
    for warning in &config.warnings {
        errln!("askloop: warning: {warning}");
    }
    Ok(config)
}

/// What the agents are built for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Starting {
    /// `askloop serve` or `askloop mcp`: the default model is announced and
    /// the approval names are checked.
    Server,
    /// A command that goes on with one run.
    Continuation,
}

/// Builds the agents of `config` with their MCP servers' tools (an MCP
/// server that cannot be reached is a warning, and for `serve` and `mcp`
/// it is tried again in the background); those that use the default model
/// get the one of `--model` / `--script` / the environment.
async fn build_agents(
    config: ServerConfig,
    model: &ModelArgs,
    store: &Arc<dyn RunStore>,
    starting: Starting,
    observe_model: &ObserveModel<'_>,
) -> Result<Vec<Agent>, CliError> {
    let choice = setup::choose_model(model)?;
    let uses_default = config
        .agents
        .iter()
        .any(|a| a.model == askloop_config::ModelSource::Default);
    let names = match starting {
        Starting::Server => ApprovalNames::Check,
        Starting::Continuation => ApprovalNames::Trust,
    };
    let built = config
        .build_agents_observed(
            store,
            &|| setup::make_model(&choice, false).map_err(Into::into),
            names,
            observe_model,
        )
        .await
        .map_err(|err| CliError::usage(err.to_string()))?;
    for warning in &built.warnings {
        errln!("askloop: warning: {warning}");
    }
    if uses_default && starting == Starting::Server {
        announce(&choice);
    }
    // A server that could not be reached is tried again in the background
    // for as long as the agents serve; a command that only goes on with one
    // run goes on without it.
    if starting == Starting::Server {
        for late in built.late {
            tokio::spawn(async move {
                for line in late.connect().await {
                    errln!("askloop: {line}");
                }
            });
        }
    }
    Ok(built.agents)
}

/// What [`configured_agents`] started from and built.
pub(super) struct Configured {
    /// The configuration read (its `path` says where from).
    pub(super) config: ServerConfig,
    pub(super) agents: Vec<Agent>,
    pub(super) store: Arc<dyn RunStore>,
}

/// Two futures: the first completes on the first SIGTERM or SIGINT
/// (Ctrl-C), which begins a graceful shutdown; the second on the next one,
/// which stops at once.
fn shutdown_signals() -> (impl Future<Output = ()>, impl Future<Output = ()>) {
    let mut signals = Signals::new();
    let (first_tx, first) = oneshot::channel();
    let (second_tx, second) = oneshot::channel();
    tokio::spawn(async move {
        signals.next().await;
        errln!("askloop: shutting down; open streams may finish (SIGTERM or Ctrl-C again stops now)");
        let _ = first_tx.send(());
        signals.next().await;
        errln!("askloop: stopping now; runs cut off stay at their last stored step");
        let _ = second_tx.send(());
    });
    (received(first), received(second))
}

/// Completes when `signal` is sent; never if its sender is gone.
async fn received(signal: oneshot::Receiver<()>) {
    if signal.await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// SIGTERM and SIGINT (Ctrl-C), listened for from start-up on, so none is
/// missed between two waits.
#[cfg(unix)]
struct Signals {
    terminate: Option<Signal>,
    interrupt: Option<Signal>,
}

#[cfg(unix)]
impl Signals {
    fn new() -> Signals {
        let listen = |kind: SignalKind, name: &str| {
            signal(kind)
                .map_err(|err| tracing::warn!(error = %err, "cannot listen for {name}"))
                .ok()
        };
        Signals {
            terminate: listen(SignalKind::terminate(), "SIGTERM"),
            interrupt: listen(SignalKind::interrupt(), "Ctrl-C"),
        }
    }

    /// Waits for the next SIGTERM or SIGINT.
    async fn next(&mut self) {
        tokio::select! {
            () = next_of(&mut self.terminate) => {}
            () = next_of(&mut self.interrupt) => {}
        }
    }
}

/// The next delivery of `signal`; never, for a signal not listened for.
#[cfg(unix)]
async fn next_of(signal: &mut Option<Signal>) {
    let delivered = match signal {
        Some(signal) => signal.recv().await.is_some(),
        None => false,
    };
    if !delivered {
        std::future::pending::<()>().await;
    }
}

/// Ctrl-C, where there is no SIGTERM.
#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn new() -> Signals {
        Signals
    }

    /// Waits for the next Ctrl-C.
    async fn next(&mut self) {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %err, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    }
}

/// The configuration file's name, for messages.
fn config_name(config: &ServerConfig) -> String {
    config
        .path
        .as_ref()
        .map_or_else(|| "(built-in configuration)".to_owned(), |p| p.display().to_string())
}
