//! `askloop mcp`: the agents of a configuration file (or the default agent)
//! as MCP tools on stdin/stdout, on the store given by `--db`. Stdout
//! belongs to the protocol; everything askloop says goes to stderr.

use askloop_mcp::{AgentTools, WaitingLinks};
use askloop_server::ServerConfig;

use super::serve::config_path;
use super::{Context, announce};
use crate::cli::McpArgs;
use crate::exit::{CliError, Done};
use crate::setup;

pub async fn mcp(ctx: &Context, args: McpArgs) -> Result<Done, CliError> {
    if let Some(url) = &args.page_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(CliError::usage(format!(
            "--page-url {url}: give the http:// or https:// base URL of an askloop serve, e.g. http://127.0.0.1:4111"
        )));
    }
    let config = match config_path(args.config.as_deref()) {
        Some(path) => ServerConfig::load(&path).map_err(|err| CliError::usage(err.to_string()))?,
        None => ServerConfig::default_agent(),
    };
    let choice = setup::choose_model(&args.model)?;
    let store = setup::open_store(ctx.db.as_deref(), askloop_store::Access::Create).await?;
    let uses_default = config
        .agents
        .iter()
        .any(|a| a.model == askloop_server::ModelSource::Default);
    let agents = config
        .build_agents_with_mcp(&store, &|| {
            setup::make_model(&choice, false).map_err(|err| err.to_string())
        })
        .await
        .map_err(|err| CliError::usage(err.to_string()))?;
    if uses_default {
        announce(&choice);
    }
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
