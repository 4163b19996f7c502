//! `askloop mcp`: the agents of a configuration file (or the default agent)
//! as MCP tools on stdin/stdout, on the store given by `--db`. Stdout
//! belongs to the protocol; everything askloop says goes to stderr.
//!
//! A thread a client names (the tools' `thread` argument) is of one
//! resource, chosen at start: `--resource`, else `ASKLOOP_RESOURCE`, else the
//! login name, else [`askloop_mcp::DEFAULT_RESOURCE`]. Whoever can start
//! the process is that resource; there is no caller to wall off.

use askloop_mcp::{AgentTools, WaitingLinks};

use super::Context;
use super::serve::{Configured, configured_agents};
use crate::cli::McpArgs;
use crate::exit::{CliError, Done};

pub async fn mcp(ctx: &Context, args: McpArgs) -> Result<Done, CliError> {
    if let Some(url) = &args.page_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(CliError::usage(format!(
            "--page-url {url}: give the http:// or https:// base URL of an askloop serve, e.g. http://127.0.0.1:4111"
        )));
    }
    let resource = resource(args.resource)?;
    // The store stays open for as long as the agents serve.
    let Configured {
        agents, store: _store, ..
    } = configured_agents(ctx, &args.model, |store| store, &|model| model).await?;
    let names: Vec<String> = agents.iter().map(|a| askloop_mcp::ask_tool_name(a.id())).collect();
    errln!(
        "askloop: serving {} as MCP tools on stdio (protocol {}); threads are of resource {resource:?}",
        names.join(", "),
        askloop_mcp::PROTOCOL_VERSION
    );
    let tools = AgentTools::new(agents, WaitingLinks { page: args.page_url }).resource(resource);
    askloop_mcp::serve_stdio(tools)
        .await
        .map_err(|err| CliError::failure(format!("the MCP session on stdio ended with an error: {err}")))?;
    Ok(Done::Ok)
}

/// The resource of the threads clients name: `--resource`, else
/// `ASKLOOP_RESOURCE`, else the login name (as the CLI names its author),
/// else the MCP default. A given one that breaks the rule for ids is a
/// usage error, said at start rather than at every call.
fn resource(flag: Option<String>) -> Result<String, CliError> {
    let (resource, from) = match flag {
        Some(resource) => (resource, "--resource"),
        None => match std::env::var("ASKLOOP_RESOURCE") {
            Ok(resource) if !resource.is_empty() => (resource, "ASKLOOP_RESOURCE"),
            _ => {
                let login = std::env::var("USER")
                    .or_else(|_| std::env::var("USERNAME"))
                    .ok()
                    .map(|user| user.trim().to_owned())
                    .filter(|user| !user.is_empty() && askloop::IdKind::Resource.check(user).is_ok());
                return Ok(login.unwrap_or_else(|| askloop_mcp::DEFAULT_RESOURCE.to_owned()));
            }
        },
    };
    askloop::IdKind::Resource
        .check(&resource)
        .map_err(|err| CliError::usage(format!("{from}: {err}")))?;
    Ok(resource)
}
