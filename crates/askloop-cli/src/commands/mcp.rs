//! `askloop mcp`: the agents of a configuration file (or the default agent)
//! as MCP tools on stdin/stdout, on the store given by `--db`. Stdout
//! belongs to the protocol; everything askloop says goes to stderr.

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
    // The store stays open for as long as the agents serve.
    let Configured {
        agents, store: _store, ..
    } = configured_agents(ctx, &args.model).await?;
    let names: Vec<String> = agents.iter().map(|a| askloop_mcp::ask_tool_name(a.id())).collect();
    errln!(
        "askloop: serving {} as MCP tools on stdio (protocol {})",
        names.join(", "),
        askloop_mcp::PROTOCOL_VERSION
    );
    let tools = AgentTools::new(agents, WaitingLinks { page: args.page_url });
    askloop_mcp::serve_stdio(tools)
        .await
        .map_err(|err| CliError::failure(format!("the MCP session on stdio ended with an error: {err}")))?;
    Ok(Done::Ok)
}
